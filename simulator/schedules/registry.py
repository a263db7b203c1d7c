"""The algorithm registry: names -> schedule builders, and :func:`make_schedule`, its one entry.

The registry itself, below every builder: :mod:`simulator.schedules` fills it (one
:func:`register` per algorithm) and re-exports it, and builders composed of other registered
algorithms (:mod:`~simulator.schedules.hierarchical`) look them up here at call time.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Callable

from ..errors import ConfigError, ScheduleError, unknown_name
from .base import COLLECTIVES, Schedule
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
