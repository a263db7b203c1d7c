"""Run schedules on a topology: the bridge between pure schedules and the flow network.

A :class:`Engine` owns one SimPy environment, one :class:`~.network.FlowNetwork` built from a
topology graph, and one FIFO compute queue per device. :meth:`Engine.launch` starts a schedule
whose ranks are placed on topology nodes; several schedules (and compute work) may run at once
and then share links, which is how contention between jobs or overlapping buckets arises.

How a schedule executes (callbacks only, no SimPy process per flow):

1. A transfer is *ready* when its data-flow predecessors are complete and its epoch is open.
2. Transfers with the same ``(src, dst, channel)`` form a FIFO connection; only its head may be
   on the wire, and the next one starts when the head has drained (its last byte left).
3. A drained transfer is *delivered* after the path latency (paid once, not per hop).
4. A delivered reducing transfer then queues its summation on the receiving device (FIFO, at the
   device's ``reduce_bytes_per_s``); it is *complete* when that is done. Copies complete on
   delivery.
5. Completing a transfer releases its dependents. When none are left the schedule is done.

If the event queue runs dry while transfers remain, the run stops with a
:class:`~simulator.errors.SimulationError` naming the stuck ranks and chunks, instead of hanging.

Costs: deliveries due at the same instant share one SimPy event (a ring step drains ``p``
transfers at once), and what a launch derives from the schedule alone (dependencies,
connections) is computed once per schedule object, however often it is launched. For
step-synchronous collectives :mod:`.fast` gives the same times without events.
"""

from __future__ import annotations

import contextlib
import contextvars
import gc
import itertools
import math
import time
from collections import deque
from dataclasses import dataclass, field

import networkx as nx
import numpy as np
import simpy

from ..errors import SimulationError, TopologyError
from ..schedules.base import Schedule
from ..schedules.deps import dependencies, epochs
from ..topology.routing import Router
from .network import FlowNetwork


@dataclass
class ScheduleRun:
    """The state and the per-transfer timestamps of one launched schedule."""

    schedule: Schedule
    placement: tuple[str, ...]
    label: str
    start_s: float
    t_start: np.ndarray        # transfer went on the wire
    t_drained: np.ndarray      # last byte left the sender
    t_delivered: np.ndarray    # arrived (drained + path latency)
    t_done: np.ndarray         # complete (after reduction compute)
    path_of: list              # per connection index: Path
    conn_of: np.ndarray        # connection index of each transfer
    done_event: simpy.Event
    end_s: float = math.nan
    remaining: int = 0
    extra: dict = field(default_factory=dict)

    @property
    def time_s(self) -> float:
        return self.end_s - self.start_s


_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("deadline",
                                                                      default=None)


@contextlib.contextmanager
def wall_budget(seconds: float | None):
    """Every engine created inside stops with a SimulationError once ``seconds`` of wall time
    have passed (``clustersim --time-budget``); None means no limit."""
    token = _DEADLINE.set(None if seconds is None else time.monotonic() + seconds)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


@contextlib.contextmanager
def paused_gc():
    """Pause the cyclic garbage collector: a run allocates millions of small acyclic objects,
    and generation-2 collections over them would make the engine superlinear in their count."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class Engine:
    """A simulation: topology, flow network, device compute queues and a SimPy clock.

    Parameters
    ----------
    graph : networkx.DiGraph
        A validated topology (see :mod:`simulator.topology.graph`).
    reduce_compute : bool
        Charge the receiver's summation of reducing transfers (default True). False makes
        reductions free everywhere.
    record_rates : bool
        Keep per-link rate timelines (utilisation over time).
    """

    def __init__(self, graph: nx.DiGraph, *, reduce_compute: bool = True,
                 record_rates: bool = False):
        self.graph = graph
        self.env = simpy.Environment()
        self.network = FlowNetwork(self.env, record_rates=record_rates)
        self.network.deadline = _DEADLINE.get()
        self.router = Router(graph)
        self.reduce_compute = reduce_compute
        self._device_free_at: dict[str, float] = {}
        self.failed: dict[str, float] = {}      # failed node -> time of failure
        self.runs: list[ScheduleRun] = []
        self.compute_log: list[tuple[str, str, float, float]] = []
        self._prep_cache: dict[int, _Prepared] = {}
        self._placed_cache: dict[tuple, tuple] = {}

    # -- devices ------------------------------------------------------------------------------
    def compute(self, device: str, duration_s: float, label: str, then) -> None:
        """Queue ``duration_s`` of work on ``device`` (FIFO); call ``then()`` when it is done."""
        now = self.env.now
        if duration_s <= 0:
            then()
            return
        start = max(now, self._device_free_at.get(device, 0.0))
        end = start + duration_s
        self._device_free_at[device] = end
        self.compute_log.append((device, label, start, end))
        ev = self.env.timeout(end - now)
        ev.callbacks.append(lambda _e: then())

    def fail_node(self, node: str, at_s: float) -> None:
        """Fail topology node ``node`` at ``at_s``: flows through it stop where they are, and
        no transfer whose path touches it starts afterwards. A synchronous collective that
        needs the node then stops making progress, which :meth:`run` reports."""
        if node not in self.graph:
            raise TopologyError(f"cannot fail unknown node {node!r}")

        def fail():
            self.failed[node] = self.env.now
            keys = [k for k in self.network.keys if _touches(k, node)]
            idx = [self.network.index[k] for k in keys]
            for flow in self.network.flows_through(idx):
                self.network.abort(flow)

        self.call_at(at_s, fail)

    def blocked(self, path) -> bool:
        """Whether ``path`` touches a failed node."""
        return bool(self.failed) and any(n in self.failed for n in path.nodes)

    def call_at(self, time_s: float, fn) -> None:
        """Call ``fn()`` at simulated time ``time_s`` (now, if that is in the past)."""
        ev = self.env.timeout(max(0.0, time_s - self.env.now))
        ev.callbacks.append(lambda _e: fn())

    def reduce_rate(self, device: str) -> float:
        if not self.reduce_compute:
            return math.inf
        return float(self.graph.nodes[device].get("reduce_bytes_per_s", math.inf))

    # -- schedules ----------------------------------------------------------------------------
    def launch(self, schedule: Schedule, placement, label: str = "") -> ScheduleRun:
        """Start ``schedule`` now with rank ``r`` on topology node ``placement[r]``.

        Returns the :class:`ScheduleRun`; its ``done_event`` succeeds when the schedule ends.
        """
        with paused_gc():
            return self._launch(schedule, tuple(placement), label)

    def _prepared(self, schedule: Schedule) -> _Prepared:
        """What a launch derives from the schedule alone (dependencies, connections, columns
        as lists), computed once per schedule object: training launches the same bucket and
        push/pull schedules thousands of times."""
        key = id(schedule)
        found = self._prep_cache.get(key)
        if found is not None and found.schedule is schedule:
            return found
        prep = _Prepared.of(schedule)
        self._prep_cache[key] = prep      # holds the schedule, so its id is not reused
        return prep

    def _placed(self, schedule: Schedule, prep: _Prepared, placement: tuple):
        """Paths, resource ids and latencies of the connections, and reduction rates of the
        ranks, for one placement (cached like :meth:`_prepared`)."""
        key = (id(schedule), placement)
        found = self._placed_cache.get(key)
        if found is not None:
            return found
        net = self.network
        paths, conn_res = [], []
        for s, d in zip(prep.head_src, prep.head_dst):
            path = self.router.path(placement[s], placement[d])
            paths.append(path)
            conn_res.append(tuple(net.resource(k, self.router.capacity(k))
                                  for k in path.resources))
        latency = [path.latency_s for path in paths]
        # reduction rate of every rank's device (inf: free)
        rank_rate = [self.reduce_rate(node) for node in placement[:schedule.total_ranks]]
        found = self._placed_cache[key] = (paths, conn_res, latency, rank_rate)
        return found

    def _launch(self, schedule: Schedule, placement: tuple, label: str) -> ScheduleRun:
        if len(placement) < schedule.total_ranks:
            raise TopologyError(f"schedule needs {schedule.total_ranks} ranks, "
                                f"placement has {len(placement)}")
        n = len(schedule)
        prep = self._prepared(schedule)
        n_epochs = prep.n_epochs
        epoch_left = list(prep.epoch_left)
        queues = [deque(m) for m in prep.members]
        paths, conn_res, latency, rank_rate = self._placed(schedule, prep, placement)
        conn_of = prep.conn_of

        now = self.env.now
        run = ScheduleRun(schedule=schedule, placement=placement, label=label, start_s=now,
                          t_start=np.full(n, np.nan), t_drained=np.full(n, np.nan),
                          t_delivered=np.full(n, np.nan), t_done=np.full(n, np.nan),
                          path_of=paths, conn_of=conn_of, done_event=simpy.Event(self.env),
                          remaining=n)
        self.runs.append(run)
        pending = list(prep.counts)
        busy = [False] * len(queues)
        nbytes, reduces, epoch_l = prep.nbytes, prep.reduces, prep.epoch
        dep_ptr, dep_owner = prep.dep_ptr, prep.dep_owner
        open_epoch = [0]
        env = self.env
        net = self.network
        conn_of_l, dst_l = prep.conn_of_l, prep.dst
        failed = self.failed

        def try_start(c: int) -> None:
            q = queues[c]
            if busy[c] or not q:
                return
            i = q[0]
            if pending[i] or epoch_l[i] > open_epoch[0] or (failed and self.blocked(paths[c])):
                return
            q.popleft()
            busy[c] = True
            run.t_start[i] = env.now
            net.start(conn_res[c], nbytes[i], lambda _f, i=i: drained(i))

        arrivals: dict[float, list[int]] = {}   # delivery time -> transfers, in drain order

        def drained(i: int) -> None:
            now = env.now
            run.t_drained[i] = now
            c = conn_of_l[i]
            busy[c] = False
            lat = latency[c]
            if lat > 0:
                # one SimPy event per delivery instant, not per transfer: a ring step drains
                # p transfers at once, all delivered one path latency later
                t = now + lat
                batch = arrivals.get(t)
                if batch is None:
                    arrivals[t] = [i]
                    ev = env.timeout(lat)
                    ev.callbacks.append(lambda _e, t=t: deliver_all(t))
                else:
                    batch.append(i)
            else:
                delivered(i)
            q = queues[c]
            if q and not pending[q[0]]:
                try_start(c)

        def deliver_all(t: float) -> None:
            for i in arrivals.pop(t):
                delivered(i)

        def delivered(i: int) -> None:
            run.t_delivered[i] = env.now
            if reduces[i]:
                rate = rank_rate[dst_l[i]]
                if rate != math.inf:
                    self.compute(placement[dst_l[i]], nbytes[i] / rate, "reduce",
                                 lambda i=i: complete(i))
                    return
            complete(i)

        def complete(i: int) -> None:
            now = env.now
            run.t_done[i] = now
            run.remaining -= 1
            for k in range(dep_ptr[i], dep_ptr[i + 1]):
                j = dep_owner[k]
                pending[j] -= 1
                if pending[j] == 0:
                    try_start(conn_of_l[j])
            e = epoch_l[i]
            epoch_left[e] -= 1
            if e == open_epoch[0]:
                advanced = False
                while open_epoch[0] < n_epochs - 1 and epoch_left[open_epoch[0]] == 0:
                    open_epoch[0] += 1
                    advanced = True
                if advanced:
                    for c in range(len(queues)):
                        try_start(c)
            if run.remaining == 0:
                run.end_s = now
                run.done_event.succeed(run)

        if n == 0:
            run.end_s = now
            run.done_event.succeed(run)
        else:
            for c in range(len(queues)):
                try_start(c)
        return run

    def run(self, until_event=None) -> None:
        """Advance the clock until every launched schedule is done (or ``until_event``)."""
        try:
            with paused_gc():
                self._advance(until_event)
        except RuntimeError as exc:  # simpy: "No scheduled events left but until event ..."
            if "No scheduled events left" not in str(exc):
                raise
        self._check_stuck()

    def _advance(self, until_event) -> None:
        if until_event is not None:
            self.env.run(until=until_event)
        else:
            self.env.run()

    def _check_stuck(self) -> None:
        for run in self.runs:
            if run.remaining:
                sched = run.schedule
                waiting = np.flatnonzero(np.isnan(run.t_done))
                ranks = sorted(set(sched.src[waiting].tolist()))
                chunks = sorted(set(sched.src_chunk[waiting].tolist()))
                failed = ""
                if self.failed:
                    cut = sorted({int(sched.src[i]) for i in waiting
                                  if self.blocked(run.path_of[run.conn_of[i]])})
                    failed = (f"; failed nodes {_abbrev(sorted(self.failed))} (at t="
                              f"{min(self.failed.values()):.9g} s) cut off ranks {_abbrev(cut)}")
                raise SimulationError(
                    f"{sched.algorithm} {sched.collective} made no progress at t={self.env.now:.9g} s: "
                    f"{run.remaining} of {len(sched)} transfers never completed; stuck ranks "
                    f"{_abbrev(ranks)}, chunks {_abbrev(chunks)}{failed}")


def _touches(key, node: str) -> bool:
    """Whether a network resource key (a link ``(u, v)`` or ``("node", n)``) involves ``node``."""
    return node in key


@dataclass(frozen=True)
class _Prepared:
    """A schedule's launch data that does not depend on placement or time (read-only)."""

    schedule: Schedule
    counts: list            # data-flow predecessors of every transfer
    dep_ptr: list           # dependents, CSR
    dep_owner: list
    epoch: list
    n_epochs: int
    epoch_left: list
    conn_of: np.ndarray     # FIFO connection of every transfer
    conn_of_l: list
    members: list           # transfers of every connection, in list order
    head_src: list          # src and dst rank of every connection
    head_dst: list
    nbytes: list
    reduces: list
    dst: list

    @classmethod
    def of(cls, schedule: Schedule) -> _Prepared:
        n = len(schedule)
        indptr, indices = dependencies(schedule)
        # Reverse edges: who waits for whom.
        counts = np.diff(indptr)
        order = np.argsort(indices, kind="stable")
        dependents_ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(indices, minlength=n), out=dependents_ptr[1:])
        owners = np.repeat(np.arange(n), counts)[order]
        epoch = epochs(schedule)
        n_epochs = int(epoch[-1]) + 1 if n else 1
        epoch_left = np.bincount(epoch, minlength=n_epochs).tolist() if n else [0]
        # FIFO connections (src, dst, channel), numbered in order of first use; each queue in
        # list order.
        conn_of, heads = _connections(schedule)
        by_conn = np.argsort(conn_of, kind="stable")
        bounds = np.searchsorted(conn_of[by_conn], np.arange(len(heads) + 1)).tolist()
        flat = by_conn.tolist()
        members = [flat[a:b] for a, b in itertools.pairwise(bounds)]
        return cls(schedule=schedule, counts=counts.tolist(),
                   dep_ptr=dependents_ptr.tolist(), dep_owner=owners.tolist(),
                   epoch=epoch.tolist(), n_epochs=n_epochs, epoch_left=epoch_left,
                   conn_of=conn_of, conn_of_l=conn_of.tolist(), members=members,
                   head_src=schedule.src[heads].tolist(), head_dst=schedule.dst[heads].tolist(),
                   nbytes=schedule.transfer_bytes.tolist(), reduces=schedule.reduce.tolist(),
                   dst=schedule.dst.tolist())


def _connections(schedule: Schedule) -> tuple[np.ndarray, np.ndarray]:
    """FIFO connection of every transfer (its ``(src, dst, channel)``, numbered in order of
    first use) and the first transfer of each connection."""
    n = len(schedule)
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    chan = schedule.channel.astype(np.int64)
    key = ((schedule.src.astype(np.int64) * schedule.total_ranks + schedule.dst)
           * (int(chan.max()) + 1) + chan)
    _keys, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    by_first = np.argsort(first, kind="stable")
    number = np.empty(len(first), dtype=np.int64)
    number[by_first] = np.arange(len(first))
    return number[inverse.ravel()], first[by_first]


def _abbrev(values: list, limit: int = 10) -> str:
    text = ", ".join(map(str, values[:limit]))
    return f"[{text}{', ...' if len(values) > limit else ''}]"


def simulate(schedule: Schedule, graph: nx.DiGraph, placement, *, reduce_compute: bool = True,
             record_rates: bool = False) -> tuple[ScheduleRun, Engine]:
    """Run one schedule alone on ``graph`` and return its run record and the engine."""
    engine = Engine(graph, reduce_compute=reduce_compute, record_rates=record_rates)
    run = engine.launch(schedule, placement, label=schedule.algorithm)
    engine.run()
    return run, engine
