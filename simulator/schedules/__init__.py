"""Collective algorithms as pure schedules, and the registry that names them.

Every algorithm is a function ``(collective, ranks, size_bytes, **options) -> Schedule`` listed
in :data:`ALGORITHMS` with the collectives it implements. :func:`make_schedule` is the one entry
point: it resolves the name, checks the combination, builds, and applies slicing. The registry
itself is :mod:`~simulator.schedules.registry`, below every builder.
"""

from __future__ import annotations

from .base import COLLECTIVES, Schedule, ScheduleBuilder, split_bytes
from .collnet import collnet
from .direct import direct
from .double_tree import double_binary_tree
from .halving_doubling import halving_doubling
from .hierarchical import hierarchical
from .nvls_tree import nvls_tree
from .ps import ps
from .registry import ALGORITHMS, Algorithm, get_algorithm, make_schedule, register
from .ring import ring
from .transform import slice_schedule
from .tree import binomial_tree, tree

register("ring", ring, ("allreduce", "reduce_scatter", "allgather", "broadcast", "reduce"),
         "ring reduce-scatter + all-gather: bandwidth-optimal, 2(p-1) latency steps; "
         "broadcast/reduce as a chain pipeline (use slices)")
register("tree", tree, ("allreduce", "reduce", "broadcast"),
         "NCCL binary tree: reduce up, broadcast down, ceil(lg p) high; option segments pipelines")
register("binomial_tree", binomial_tree, ("allreduce", "reduce", "broadcast"),
         "MPICH binomial reduce + broadcast, whole message: 2 ceil(lg p) (alpha + n beta)")
register("double_binary_tree", double_binary_tree, ("allreduce",),
         "NCCL double binary tree: half the data on each of two complementary trees, "
         "pipelined in segments")
register("two_tree", double_binary_tree, ("allreduce",), "alias of double_binary_tree")
register("halving_doubling", halving_doubling, ("allreduce", "reduce_scatter", "allgather"),
         "Rabenseifner recursive halving + doubling: 2 lg p steps, bandwidth-optimal; "
         "fold/unfold for non-powers of two")
register("direct", direct, ("allreduce", "reduce_scatter", "allgather", "alltoall"),
         "pairwise: every rank sends each peer its block at once; 2 steps")
register("hierarchical", hierarchical, ("allreduce",),
         "2D: intra-node reduce-scatter, inter-node all-reduce per block, intra-node all-gather")
register("collnet", collnet, ("allreduce",),
         "in-network (SHARP) all-reduce, NCCL CollNet Direct: intra-machine reduce-scatter, "
         "the fabric switch sums every block, intra-machine all-gather")
register("nvls_tree", nvls_tree, ("allreduce",),
         "NVLink SHARP: each machine's NVSwitch sums and multicasts, machines join over their "
         "NICs (NCCL NVLS/NVLSTree; Hopper and later)")
register("ps", ps, ("allreduce",),
         "parameter server: push shards to servers, pull aggregates (dedicated or colocated)")


__all__ = ["ALGORITHMS", "Algorithm", "COLLECTIVES", "Schedule", "ScheduleBuilder",
           "get_algorithm", "make_schedule", "register", "slice_schedule", "split_bytes"]
