"""NCCL 1.x: the single-process collective library of 2016-2017.

TensorFlow's ``tf.contrib.nccl`` ops (``replicated`` with NCCL in tf_cnn_benchmarks) ran NCCL
1.x until TensorFlow moved to NCCL 2.3.5 (``nccl_archive`` in ``tensorflow/workspace.bzl``
pinned NCCL 1.x commits such as 03d85697, v1.3.4-1 plus 7 commits, 2017-08-04, before
f93fe9bf = v2.3.5-5, 2018-09-24). What NVIDIA/nccl v1.3.4-1 fixes, and a plan carries:

* **one ring, in device order**: ``orderRanks`` (``src/core.cu``) sorts the ranks by their
  NVML index and every rank sends to the next (``ringPos``); no topology search (NCCL 2.x finds
  NVLink rings). On a DGX-1, the order 0-1-...-7 has two hops without NVLink (3 -> 4 and
  7 -> 0), which cross PCIe through the host and QPI between its two sockets;
* **one thread block per GPU**: ``LAUNCH_KERNEL`` in ``src/common_coll.h`` launches
  ``grid(1, 1, 1)`` of 512 + 1 threads: one channel;
* **direct access or host memory**: a neighbour reachable by ``cudaDeviceCanAccessPeer`` is
  written directly, any other through a buffer in pinned host memory (``NodeRef::HOST``);
  either way the hop's bytes cross its links once, at their rates;
* **one machine** (inter-node transports came with NCCL 2.0), **no protocols** (LL and LL128
  came with NCCL 2), **no trees**.

The links run at the rates NCCL's own topology model gives them (NVLink per generation, PCIe
12 GB/s per Gen3 x16, a Broadwell QPI 6 GB/s; :func:`simulator.library.nccl.link_rate`), and
NVLink carries a hop only between ring neighbours: NCCL 1 never forwards through a third GPU.
NCCL 1's own per-step and base latencies are not published; none is charged beyond the wires'
latencies (its calls move tens to hundreds of megabytes in the runs it is used for, where they
do not count). The host's launch time is the ``nccl`` library's for the same launch mode.
"""

from __future__ import annotations

from ..errors import ConfigError
from ..topology.graph import endpoints
from .base import Plan
from .launch import LAUNCH_COSTS, parse_launch
from .machine import machine_facts
from .nccl import link_rate, store_cost_graph
from .nccl_constants import release_number

#: The collectives NCCL 1.x implements (``src/*.cu``), all on its ring.
COLLECTIVES = ("allreduce", "broadcast", "reduce", "allgather", "reducescatter")
RELEASE = "1.3"
SOURCE = ("NVIDIA/nccl v1.3.4-1: src/core.cu (orderRanks by NVML index, ring positions, "
          "cudaDeviceCanAccessPeer else NodeRef::HOST), src/common_coll.h (LAUNCH_KERNEL "
          "grid(1,1,1), 512 + 1 threads)")


def is_nccl1(version) -> bool:
    """Whether an NCCL version text names a 1.x release (``"1.3"``, ``"1.3.4"``)."""
    release = release_number(version)
    return release is not None and release[0] == 1


class Nccl1Library:
    """NCCL 1.x (see the module docstring): one ring in device order on one block."""

    name = "nccl"
    summary = "NVIDIA NCCL 1.x: one ring in device order, one block per GPU, one machine"

    def __init__(self, version=None, launch=None, costs: dict | None = None,
                 scale: dict | None = None):
        if scale:
            raise ConfigError("NCCL 1.x has no calibrated scales (calibrate fits NCCL 2)")
        self.release = RELEASE
        self.launch = launch
        self.costs = {**LAUNCH_COSTS, **(costs or {})}
        self._graphs: dict = {}

    def describe(self) -> str:
        return f"{self.summary} ({SOURCE})"

    def _why_not(self, graph, collective: str, algorithm: str, gpus: int,
                 protocol: str | None) -> str:
        if collective not in COLLECTIVES:
            return f"NCCL 1.x has no {collective} (it has {', '.join(COLLECTIVES)})"
        if algorithm not in ("auto", "ring"):
            return f"NCCL 1.x runs every collective on its one ring, not {algorithm}"
        if protocol not in (None, "", "auto", "Simple"):
            return (f"NCCL 1.x has no protocol {protocol} (LL and LL128 came with NCCL 2); "
                    f"use Simple or auto")
        if machine_facts(graph, gpus).nodes > 1:
            return "NCCL 1.x runs inside one machine (inter-node transports came with NCCL 2.0)"
        return ""

    def unavailable(self, graph, collective: str, algorithm: str, gpus: int, *,
                    protocol: str | None = None) -> str:
        """Why NCCL 1.x cannot run this call (one short reason), or ``""``."""
        return self._why_not(graph, collective, algorithm, gpus, protocol)

    def plan(self, graph, collective: str, algorithm: str, size_bytes: int, gpus: int, *,
             protocol: str | None = None, launch=None, exclude=()) -> Plan:
        """The call on NCCL 1's ring: rank order, one channel, NCCL's link rates."""
        why = self._why_not(graph, collective, algorithm, gpus, protocol)
        if why or "ring" in exclude:
            raise ConfigError(why or "NCCL 1.x has only its ring")
        facts = machine_facts(graph, gpus)
        mode = parse_launch(launch if launch is not None else (self.launch or "mpi"),
                            gpus_per_node=int(facts.ranks_per_node))
        order = endpoints(graph)[:gpus]
        return Plan(library=self.name, algorithm="ring", label="ring", protocol="Simple",
                    channels=1, graph=self._cost_graph(graph, facts, tuple(order)),
                    options={"channels": 1}, host_time_s=mode.host_time_s(self.costs),
                    fixed_time_s=mode.skew_s(self.costs), reduce_compute=False,
                    notes={"version": RELEASE, "launch": str(mode),
                           "ring": " -> ".join(order + order[:1])})

    def _cost_graph(self, graph, facts, order: tuple):
        """``graph`` at NCCL's link rates, with GPU-to-GPU links kept between ring neighbours
        only (a hop without one goes through PCIe and the host)."""
        key = (id(graph), facts, order)
        cached = self._graphs.get(key)
        if cached is not None and cached[0] is graph:
            return cached[1]
        neighbours = {frozenset((a, b)) for a, b in zip(order, order[1:] + order[:1]) if a != b}
        kinds = dict(graph.nodes(data="kind"))
        out = graph.copy()
        out.remove_edges_from([(a, b) for a, b in graph.edges
                               if kinds.get(a) == "gpu" and kinds.get(b) == "gpu"
                               and frozenset((a, b)) not in neighbours])
        for a, b, attrs in out.edges(data=True):
            attrs["bandwidth_bytes_per_s"] = link_rate(
                attrs.get("kind"), graph.edges[a, b]["bandwidth_bytes_per_s"], facts)
        return store_cost_graph(self._graphs, key, graph, out, self.name)
