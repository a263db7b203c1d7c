"""Parameter-server implementations: what a push or pull costs besides the wire.

The same parameter-server algorithm moves the same bytes whatever implements it, but not at the
same cost. What differs, and what this module holds per implementation as data:

* **transport**: kernel TCP sockets (gRPC, ZeroMQ) or RDMA verbs. It decides the framing
  efficiency of the network links the traffic crosses (:mod:`simulator.library.transport`:
  94.1 % of an Ethernet line rate for TCP, 98.0 % for RoCEv2, 99.4 % for InfiniBand).
* **host copies**: a socket send copies the payload from user to kernel memory, a receive from
  kernel to user memory (POSIX socket semantics; no zero-copy in these stacks), and a framework
  may copy once more while decoding its message. Each copy reads and writes every byte once,
  so it costs ``2 x bytes / memory bandwidth`` on the CPU of the machine doing it. Copies run
  on that CPU's queue, one after another: a server machine that receives from every worker
  copies every worker's bytes, the parameter-server hotspot in host memory.
* **where the sum happens**: on the server's own device (its ``reduce_bytes_per_s``; for a
  CPU server, the CPU preset's), as before.

Copies are charged only on transfers between machines; inside a machine a framework hands the
tensor over in memory (TensorFlow's local ``parameter_server`` runs in one process).

``ideal`` is the algorithm on bare wires (no framing, no copies): the closed forms' contract
and the behaviour of earlier releases.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import unknown_name


@dataclass(frozen=True)
class PsImpl:
    """One parameter-server implementation (see the module docstring).

    Attributes
    ----------
    transport : str or None
        ``tcp`` or ``rdma``; None: bare wires (no framing).
    send_copies, receive_copies : int
        Host memory copies of every byte sent / received between machines.
    source : str
        Where the numbers come from.
    receive_bytes_per_s : float or None
        Rate at which one receiving task's RPC runtime turns received bytes into tensors
        (parsing, framing, the copies, on its CPU), measured end to end; charged for every
        byte received between machines, instead of the ``receive_copies`` estimate (which
        it includes): a server task parses every worker's pushes one after another (the
        parameter-server hotspot: one large variable, one hot task), a worker parses its
        pull from each server on its own stream, in parallel. None: the copies alone.
    rate_source : str
        Where ``receive_bytes_per_s`` comes from.
    """

    name: str
    transport: str | None
    send_copies: int
    receive_copies: int
    source: str
    receive_bytes_per_s: float | None = None
    rate_source: str = ""

    def copy_seconds(self, graph, node: str, size_bytes: float, copies: int,
                     receive: bool = False) -> float:
        """``copies`` host copies of ``size_bytes`` on ``node``'s memory (0 without a memory
        bandwidth: a node that is not a computer); a ``receive`` with a measured
        :attr:`receive_bytes_per_s` costs ``size_bytes`` at that rate instead."""
        if size_bytes <= 0:
            return 0.0
        if receive and self.receive_bytes_per_s:
            return size_bytes / self.receive_bytes_per_s
        if copies <= 0:
            return 0.0
        bandwidth = graph.nodes[node].get("memory_bandwidth_bytes_per_s")
        return 2.0 * copies * size_bytes / bandwidth if bandwidth else 0.0


PS_IMPLS: dict[str, PsImpl] = {p.name: p for p in (
    PsImpl("ideal", None, 0, 0, "bare wires: no framing, no host copies"),
    PsImpl("tf-grpc", "tcp", 1, 2,
           "TensorFlow's gRPC runtime: tensors over 1 KB are sent zero-copy as a gRPC slice "
           "that points at the tensor (kLargeTensorBytes, tensorflow/core/distributed_runtime/"
           "rpc/grpc_tensor_coding.cc), then copied into the kernel by the socket send; the "
           "receiver's socket read copies into gRPC's buffers and TensorResponse parsing "
           "copies them into the tensor (tensor_response.cc): 1 send, 2 receive copies",
           receive_bytes_per_s=0.9e9,
           rate_source="tensorflow/tensorflow#6116 'grpc RecvTensor is slow' (yaroslavvb, "
                       "2016-12-09): a variable in one TF process updated from another over "
                       "gRPC moves 0.9 GB/s vs 20.2 GB/s in-process on a Xeon E5-2630 v3 "
                       "(loopback: the CPU-bound software path, not the wire); one task's "
                       "rate, which is why sharding over 8 ps tasks reached 2.6 GB/s"),
    PsImpl("mxnet-kvstore", "tcp", 1, 1,
           "MXNet dist_sync kvstore on ps-lite over ZeroMQ TCP: ZeroMQ sends the buffer "
           "zero-copy (zmq_msg_init_data) into the socket send's kernel copy, and receives "
           "into a message the kvstore uses in place: 1 send, 1 receive copy"),
    PsImpl("torch-gloo", None, 1, 1,
           "torch.distributed send/recv over gloo's TCP transport (clustersim measure "
           "training's parameter server): the socket send's and receive's kernel copies, "
           "tensor memory written directly (no message encoding); framing is left to the "
           "topology, whose links measure training writes at TCP payload rate"),
    PsImpl("byteps", "rdma", 0, 0,
           "BytePS servers (CPU summation) over RDMA: the NIC reads and writes registered "
           "host memory directly; the CPU only sums (Jiang et al., OSDI 2020)"),
)}


def get_ps_impl(name: str) -> PsImpl:
    """The registered implementation ``name``; unknown names list the valid ones."""
    if name not in PS_IMPLS:
        raise unknown_name("parameter-server implementation", name, PS_IMPLS)
    return PS_IMPLS[name]


def detect_ps_impl(text: str) -> PsImpl:
    """The implementation a measurement's framework text names (default ``ideal``)."""
    lowered = str(text or "").lower()
    if "byteps" in lowered:
        return PS_IMPLS["byteps"]
    if "mxnet" in lowered:
        return PS_IMPLS["mxnet-kvstore"]
    if "tensorflow" in lowered or "tf_cnn" in lowered or "grpc" in lowered:
        return PS_IMPLS["tf-grpc"]
    if "torch" in lowered:
        return PS_IMPLS["torch-gloo"]
    return PS_IMPLS["ideal"]


def wire_graph(graph, impl: PsImpl):
    """``graph`` with its network links at the payload rate of ``impl``'s transport (the
    graph itself for bare wires)."""
    from ..library.transport import NETWORK_LINK_KINDS, framing

    if impl.transport is None:
        return graph
    costed = graph.copy()
    for u, v, attrs in costed.edges(data=True):
        if attrs.get("kind") in NETWORK_LINK_KINDS:
            attrs["bandwidth_bytes_per_s"] = (attrs["bandwidth_bytes_per_s"]
                                              * framing(attrs["kind"], impl.transport).efficiency)
    return costed
