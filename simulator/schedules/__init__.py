"""Collective algorithms as pure schedules, and the registry that names them.

Every algorithm is a function ``(collective, ranks, size_bytes, **options) -> Schedule`` listed
in :data:`ALGORITHMS` with the collectives it implements. :func:`make_schedule` is the one entry
point: it resolves the name, checks the combination, builds, and applies slicing.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Callable

from ..errors import ConfigError, ScheduleError, unknown_name
from .base import COLLECTIVES, Schedule, ScheduleBuilder, split_bytes
from .collnet import collnet
from .direct import direct
from .double_tree import double_binary_tree
from .halving_doubling import halving_doubling
from .hierarchical import hierarchical
from .nvls_tree import nvls_tree
from .ps import ps
from .ring import ring
from .transform import slice_schedule
from .tree import binomial_tree, tree


@dataclass(frozen=True)
class Algorithm:
    """A registered algorithm: its builder, the collectives it implements, one line about it."""

    name: str
    build: Callable[..., Schedule]
    collectives: tuple[str, ...]
    summary: str

    def options(self) -> list[str]:
        """Keyword options the builder accepts beyond (collective, ranks, size_bytes)."""
        params = list(inspect.signature(self.build).parameters)
        return params[3:]


ALGORITHMS: dict[str, Algorithm] = {}


def register(name: str, build, collectives, summary: str) -> None:
    ALGORITHMS[name] = Algorithm(name, build, tuple(collectives), summary)


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


def get_algorithm(name: str) -> Algorithm:
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise unknown_name("algorithm", name, ALGORITHMS) from None


def make_schedule(algorithm: str, collective: str, ranks: int, size_bytes: int, *,
                  slices: int = 1, **options) -> Schedule:
    """Build the schedule of ``algorithm`` for ``collective`` over ``ranks`` ranks.

    ``slices`` pipelines every transfer into that many FIFO slices (1 = step-synchronous).
    Options the algorithm does not accept are rejected, naming the accepted ones.
    """
    if collective not in COLLECTIVES:
        raise unknown_name("collective", collective, COLLECTIVES)
    algo = get_algorithm(algorithm)
    if collective not in algo.collectives:
        supporting = sorted(a.name for a in ALGORITHMS.values() if collective in a.collectives)
        raise ScheduleError(f"algorithm {algorithm!r} does not implement {collective}; "
                            f"it implements {', '.join(algo.collectives)}; algorithms for "
                            f"{collective}: {', '.join(supporting)}")
    if ranks < 1:
        raise ConfigError(f"need at least 1 rank, got {ranks}")
    if slices < 1:
        raise ConfigError(f"slices must be >= 1, got {slices}")
    unknown = set(options) - set(algo.options())
    if unknown:
        raise ConfigError(f"algorithm {algorithm!r} does not take option(s) "
                          f"{', '.join(sorted(unknown))}; it accepts: "
                          f"{', '.join(algo.options()) or 'none'}")
    schedule = algo.build(collective, ranks, int(size_bytes), **options)
    return slice_schedule(schedule, slices)


__all__ = ["ALGORITHMS", "Algorithm", "COLLECTIVES", "Schedule", "ScheduleBuilder",
           "get_algorithm", "make_schedule", "register", "slice_schedule", "split_bytes"]
