"""The algorithm registry: names -> schedule builders, and :func:`make_schedule`, its one entry.

The registry itself, below every builder: :mod:`simulator.schedules` fills it (one
:func:`register` per algorithm) and re-exports it, and builders composed of other registered
algorithms (:mod:`~simulator.schedules.hierarchical`) look them up here at call time.
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..errors import ConfigError, ScheduleError, unknown_name
from ..guard import check_schedule
from .base import COLLECTIVES, NETWORK_FLOW_CAP_NOTE, Schedule, network_flow_cap
from .transform import slice_schedule


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


def get_algorithm(name: str) -> Algorithm:
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise unknown_name("algorithm", name, ALGORITHMS) from None


def make_schedule(algorithm: str, collective: str, ranks: int, size_bytes: int, *,
                  slices: int = 1, **options) -> Schedule:
    """Build the schedule of ``algorithm`` for ``collective`` over ``ranks`` ranks.

    ``slices`` pipelines every transfer into that many FIFO slices (1 = step-synchronous).
    ``network_flow_cap=(cap_bytes_per_s, local_ranks)``, accepted by every algorithm, caps
    each connection between ranks of different machines (``local_ranks`` ranks a machine) at
    that rate (:data:`~.base.NETWORK_FLOW_CAP_NOTE`). Options the algorithm does not accept
    are rejected, naming the accepted ones.
    """
    options = dict(options)
    network_cap = options.pop("network_flow_cap", None)
    if network_cap is not None:
        network_flow_cap(network_cap)             # checked before the build
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
    check_schedule(algorithm, collective, ranks,
                   estimated_transfers(algorithm, collective, ranks, size_bytes, options) * slices)
    schedule = algo.build(collective, ranks, int(size_bytes), **options)
    if network_cap is not None:
        channels = len(np.unique(schedule.channel)) if len(schedule) else 1
        schedule = dataclasses.replace(schedule, notes={
            **schedule.notes, NETWORK_FLOW_CAP_NOTE: network_flow_cap(network_cap, channels)})
    if slices > 1:
        check_schedule(algorithm, collective, ranks, len(schedule) * slices)
    return slice_schedule(schedule, slices)


def estimated_transfers(algorithm: str, collective: str, p: int, size_bytes: int,
                        options: dict) -> int:
    """Transfers of the schedule ``make_schedule`` would build with one slice, for the families
    that grow fastest: ``p^2`` (ring reduce-scatter, all-gather and all-reduce; direct) and
    ``p x segments`` (the pipelined trees). 0 for the others (``O(p log p)`` at most) and for
    options the builder will refuse itself."""
    try:
        if algorithm == "ring" and collective in ("allreduce", "reduce_scatter", "allgather"):
            phases = 2 if collective == "allreduce" else 1
            return phases * p * (p - 1) * int(options.get("channels", 1))
        if algorithm == "direct":
            if collective == "alltoall":
                return p * p                       # every rank also copies its own block
            return (2 if collective == "allreduce" else 1) * p * (p - 1)
        if algorithm in ("tree", "double_binary_tree", "two_tree"):
            trees = 1 if algorithm == "tree" else 2 * int(options.get("channels", 1))
            phases = 2 if collective == "allreduce" else 1
            segments = options.get("segments")
            if segments is None:
                if algorithm == "tree":
                    segments = 1
                else:
                    from .double_tree import DEFAULT_SEGMENT_BYTES

                    part = -(-int(size_bytes) // trees)
                    step = int(options.get("segment_bytes", DEFAULT_SEGMENT_BYTES))
                    segments = max(1, -(-part // step)) if step > 0 else 0
            return phases * trees * max(p - 1, 0) * int(segments)
    except (TypeError, ValueError):
        pass
    return 0
