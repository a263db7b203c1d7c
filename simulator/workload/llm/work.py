"""What one rank does in one training step of a hybrid-parallel transformer, as data.

This module is the contract between the pure cost side (:mod:`.model`, :mod:`.layout`,
:mod:`.compute`, :mod:`.memory`: architecture and layout -> seconds of compute and bytes of
communication) and the step side (:mod:`.placement`, :mod:`.step`: ranks on a topology, every
group's traffic as flows on one network). Nothing here knows SimPy or a topology.

A step is, per pipeline *chunk* (a stage's contiguous layers; with interleaving, each of a stage's
``virtual_stages`` model chunks), the ordered :class:`Op` list of one micro-batch's forward and
of its backward on one rank. Every rank of a chunk runs the same ops (the ranks of one tensor-,
context- or expert-parallel group are symmetric by construction), so one :class:`ChunkWork`
serves every rank of that chunk. The step runner expands chunks x micro-batches by the pipeline
schedule, and adds what happens once per step (data-parallel gradient reduction per bucket,
ZeRO-3 parameter gathers, the optimizer).

Sizes follow nccl-tests' convention: ``size_bytes`` is the buffer size a call is made with (the
whole buffer for all-reduce; the *output* for all-gather, the *input* for reduce-scatter; the
per-rank send buffer for all-to-all; the message for send/recv).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["GROUPS", "COLLECTIVES", "Comm", "Op", "ChunkWork", "StepWork"]

#: Parallel groups a communication op runs in. ``pp`` is point-to-point between neighbouring
#: pipeline stages (``sendrecv``); the others are collectives over the group's ranks.
GROUPS = ("tp", "cp", "ep", "dp", "pp")

#: Collective kinds, named as :mod:`simulator.schedules` names them.
COLLECTIVES = ("allreduce", "reducescatter", "allgather", "alltoall", "sendrecv")


def stream_of(group: str) -> str:
    """The stream (and breakdown part) of a group kind: the hierarchical dispatchers'
    ``ep_rail`` and ``ep_node`` groups are expert parallelism's ``ep``."""
    return group.split("_")[0]


@dataclass(frozen=True)
class Comm:
    """One communication call issued by every rank of a ``group``.

    ``overlapped``: issued on a side stream; the compute stream goes on and only a later op that
    needs the result waits (``wait_for``). Not overlapped: the compute stream waits for it (a
    tensor-parallel all-reduce between two GEMMs).
    """

    group: str
    collective: str
    size_bytes: int
    overlapped: bool = False


@dataclass(frozen=True)
class Op:
    """A compute kernel (``compute_s`` > 0, ``comm`` None) or a communication call (``comm``)
    of one rank, in issue order. ``name`` is for traces and breakdowns: ``"<layer>.<what>"``,
    e.g. ``"attn.qkv"``, ``"attn.core"``, ``"mlp.fc1"``, ``"tp.allreduce"``, ``"ep.dispatch"``.
    ``kind``: the breakdown class: ``"gemm"``, ``"attention"``, ``"elementwise"``,
    ``"embedding"``, ``"loss"``, ``"recompute"``, or for communication its group."""

    name: str
    kind: str
    compute_s: float = 0.0
    comm: Comm | None = None
    flops: float = 0.0          # model FLOPs of the op on this rank (0 for communication)


@dataclass(frozen=True)
class ChunkWork:
    """One model chunk for one micro-batch on one rank.

    ``forward`` and ``backward`` are the ops in issue order (``backward`` includes the
    recomputed forward when activations are recomputed). ``activation_bytes``: what the chunk
    sends to the next stage after its forward, and receives back as gradient before its
    backward (0 on the last chunk). ``grad_bytes``: the chunk's parameter-gradient bytes on
    this rank, reduced over the data-parallel group once per step; ``param_bytes``: its
    parameter bytes on this rank (what ZeRO-3/FSDP gathers before use); ``layers``: the
    transformer layers it holds (plus embedding/head on the first/last chunk).
    """

    stage: int
    virtual: int
    layers: int
    forward: tuple[Op, ...]
    backward: tuple[Op, ...]
    activation_bytes: int
    grad_bytes: int
    param_bytes: int

    @property
    def forward_compute_s(self) -> float:
        return sum(op.compute_s for op in self.forward)

    @property
    def backward_compute_s(self) -> float:
        return sum(op.compute_s for op in self.backward)


@dataclass(frozen=True)
class StepWork:
    """Everything a step runner needs, per chunk and per step.

    ``chunks[(stage, virtual)]`` for ``stage < pp``, ``virtual < virtual_stages``.
    ``micro_batches``: per pipeline (global batch / (dp x micro batch)).
    ``optimizer_s``: the optimizer step on one rank (its shard under ZeRO >= 1).
    ``model_flops_per_step`` / ``hardware_flops_per_step``: summed over all GPUs, without /
    with recomputation (for TFLOP/s per GPU and MFU).
    ``tokens_per_step``: global batch x sequence length.
    """

    chunks: dict
    pp: int
    virtual_stages: int
    micro_batches: int
    optimizer_s: float
    model_flops_per_step: float
    hardware_flops_per_step: float
    tokens_per_step: int
    notes: tuple[str, ...] = field(default_factory=tuple)
