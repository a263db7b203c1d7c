"""One way into the fast timing methods: build the schedule once, offer it to each in order.

A collective's time can come from several exact methods, each faster than the event engine
where it applies and each proven equal to it there (the equality tests of ``tests/test_fast.py``
and ``tests/test_library.py``). :data:`METHODS` lists them in the order they are tried; each is
a :class:`Method` with ``applies(call)`` (``None``, or why not) and ``run(call)`` (a
:class:`~.common.FastResult`, which may still decline with a reason):

=================  ==========================================================================
``ring``           ring shortcuts (:func:`.ring.ring_time`): the symmetric ring in closed
                   form, else the per-connection recurrence; no schedule is built
``tree-pipeline``  compiled pipelined trees (:mod:`.tree_pipeline`): tree and double binary
                   tree in segments
``aligned-steps``  the schedule's steps, when they run in lockstep (:func:`.aligned.aligned_time`)
``compiled``       the event engine's own algorithm, compiled with numba (:mod:`.compiled`)
``step-sync``      without numba: the step-synchronous analysis (:func:`.step_sync.step_sync_time`)
=================  ==========================================================================

:func:`fast_collective` returns the first result that applies, with the reasons of the methods
that declined; the caller (:func:`simulator.collective.run_collective`) falls back to the SimPy
event engine (:mod:`.runner`), the readable reference every method is tested against.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Callable

import networkx as nx

from ..errors import ResourceError, SimulationError
from ..schedules.base import FLOW_CAP_NOTES, Schedule
from ..schedules.registry import estimated_transfers
from .common import FastResult
from .aligned import aligned_time
from .ring import RING_COLLECTIVES, ring_time
from .step_sync import step_sync_time
from .tree_pipeline import TREE_ALGORITHMS

#: Schedules with more transfers than this are not built (for either engine, through here).
MAX_TRANSFERS = 40_000_000


@dataclass
class Call:
    """One collective as the methods see it; the schedule is built at most once, on demand."""

    graph: nx.DiGraph
    collective: str
    algorithm: str
    size_bytes: int
    gpus: int
    placement: list
    slices: int = 1
    reduce_compute: bool = True
    options: dict = field(default_factory=dict)
    schedule: Schedule | None = None
    given_schedule: bool = False
    declined: list = field(default_factory=list)

    def validate(self, ranks: int = 2) -> None:
        """The options checked as ``make_schedule`` checks them, on a tiny schedule."""
        from ..schedules import make_schedule

        opts = {k: v for k, v in self.options.items()
                if not (self.algorithm in TREE_ALGORITHMS and k == "root")}
        try:
            make_schedule(self.algorithm, self.collective, min(self.gpus, ranks),
                          self.size_bytes, slices=self.slices, **opts)
        except ResourceError as exc:
            raise ResourceError(f"{exc} (the options alone: checked on {min(self.gpus, ranks)} "
                                f"of the {self.gpus:,} ranks)") from None

    def built(self) -> Schedule:
        from ..schedules import make_schedule

        if self.schedule is None:
            estimate = estimated_transfers(self.algorithm, self.collective, self.gpus,
                                           self.size_bytes, self.options) * self.slices
            if estimate > MAX_TRANSFERS:
                raise SimulationError(
                    f"{self.algorithm} {self.collective} on {self.gpus} ranks has about "
                    f"{estimate:,} transfers, too many to build (limit {MAX_TRANSFERS:,}); "
                    + (f"the methods that need none declined ({self.declined[0]}); "
                       if self.declined else "")
                    + ("use fewer ranks" + (" or slices" if self.slices > 1 else "")))
            self.schedule = make_schedule(self.algorithm, self.collective, self.gpus,
                                          self.size_bytes, slices=self.slices, **self.options)
        return self.schedule


@dataclass(frozen=True)
class Method:
    """A fast timing method: when it applies, and how it times a call."""

    name: str
    applies: Callable[[Call], str | None]
    run: Callable[[Call], FastResult]


def _ring_applies(call: Call) -> str | None:
    if call.algorithm != "ring" or call.collective not in RING_COLLECTIVES:
        return "not a ring reduce-scatter, all-gather or all-reduce"
    if call.slices != 1:
        return f"pipelined (slices={call.slices})"
    if call.options.get("orders") is not None or call.options.get("barriers"):
        return "explicit orders or barriers: not the free-running ring the shortcuts time"
    return _uncapped(call)


def _ring_run(call: Call) -> FastResult:
    call.validate()
    return ring_time(call.graph, list(call.placement)[:call.gpus], call.collective,
                     call.size_bytes, channels=int(call.options.get("channels", 1)),
                     local_ranks=call.options.get("local_ranks"),
                     reduce_compute=call.reduce_compute)


def _tree_applies(call: Call) -> str | None:
    if call.algorithm not in TREE_ALGORITHMS:
        return "not a tree"
    if call.slices != 1 or call.given_schedule:
        return "pipelined slices or a given schedule"
    if call.algorithm == "tree" and int(call.options.get("segments", 1)) == 1:
        return "a whole-message tree runs in lockstep steps (aligned-steps times it)"
    return None


def _tree_run(call: Call) -> FastResult:
    from .tree_pipeline import tree_pipeline_time

    call.validate()
    return tree_pipeline_time(call.graph, call.placement, call.collective, call.algorithm,
                              call.size_bytes, call.gpus, call.options, call.reduce_compute)


def _uncapped(call: Call) -> str | None:
    """Why a step method cannot time the call: its connections carry their own rate caps
    (:data:`~simulator.schedules.base.FLOW_CAP_NOTES`), which the event engine and the
    compiled methods (tree pipeline, compiled events) model."""
    if (call.options.get("local_flow_cap_bytes_per_s") is not None
            or call.options.get("network_flow_cap") is not None
            or (call.schedule is not None
                and any(note in call.schedule.notes for note in FLOW_CAP_NOTES))):
        return ("connections with their own rate caps (local_flow_cap_bytes_per_s, "
                "network_flow_cap)")
    return None


def _single_slice(call: Call) -> str | None:
    if call.slices != 1:
        return f"pipelined (slices={call.slices}): successive steps overlap on the same links"
    return _uncapped(call)


def _aligned_run(call: Call) -> FastResult:
    return aligned_time(call.built(), call.graph, call.placement, call.reduce_compute)


def _compiled_run(call: Call) -> FastResult:
    from .compiled import compiled_time

    return compiled_time(call.built(), call.graph, call.placement, call.reduce_compute)


def _step_sync_run(call: Call) -> FastResult:
    return step_sync_time(call.built(), call.graph, tuple(call.placement),
                           call.reduce_compute)


#: The fast methods, in the order they are tried (the event engine comes after all of them).
METHODS = (
    Method("ring", _ring_applies, _ring_run),
    Method("tree-pipeline", _tree_applies, _tree_run),
    Method("aligned-steps", _single_slice, _aligned_run),
    Method("compiled", lambda call: None, _compiled_run),
    Method("step-sync", _single_slice, _step_sync_run),
)


#: The method names, which ``--engine`` also takes to force one.
METHOD_NAMES = tuple(method.name for method in METHODS)


def fast_collective(graph: nx.DiGraph, collective: str, algorithm: str, size_bytes: int,
                    gpus: int, placement, *, slices: int = 1, reduce_compute: bool = True,
                    options: dict | None = None, schedule: Schedule | None = None,
                    only: str | None = None):
    """The first of :data:`METHODS` that applies to this collective over ``gpus`` worker ranks
    placed on ``placement`` (workers, then helper ranks).

    Returns ``(FastResult, schedule)``: the result of the method that applied, or a
    not-applicable result whose reason lists why each method that ran declined; either way
    ``declined`` lists every method before it with why it did not answer (``clustersim
    collective -v`` prints it). ``schedule`` is the schedule if one was built (or given).
    ``only`` names the one method to offer the call to (one of :data:`METHOD_NAMES`).
    """
    call = Call(graph, collective, algorithm, size_bytes, gpus, list(placement), slices,
                reduce_compute, dict(options or {}), schedule, schedule is not None)
    last, passed = None, []
    for method in METHODS if only is None else [m for m in METHODS if m.name == only]:
        why = method.applies(call)
        if why is not None:
            passed.append(f"{method.name}: {why}")
            continue
        result = method.run(call)
        if result.applicable:
            return dataclasses.replace(result, declined=tuple(passed)), call.schedule
        call.declined.append(f"{result.method or method.name}: {result.reason}")
        passed.append(call.declined[-1])
        last = result
    if last is None:
        last = FastResult(math.nan, False, "no fast method applies", "none")
    return dataclasses.replace(last, reason="; ".join(call.declined or passed),
                               declined=tuple(passed)), call.schedule
