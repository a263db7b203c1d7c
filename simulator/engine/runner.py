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
from dataclasses import dataclass, field

import networkx as nx
import numpy as np
import simpy

from ..errors import SimulationError, TopologyError
from ..guard import check_event_run
from ..schedules.base import Schedule, connection_caps
from ..schedules.deps import dependencies, epochs, packed_sort
from ..topology.routing import Router
from .common import check_placement, drop_stale_kernel_caches, numba_available
from .network import FlowNetwork


@dataclass
class ScheduleRun:
    """The state and the per-transfer timestamps of one launched schedule.

    The timestamps ``t_start`` (went on the wire), ``t_drained`` (last byte left the sender),
    ``t_delivered`` (arrived: drained + path latency) and ``t_done`` (complete, after reduction
    compute) are numpy arrays, NaN where a transfer has not got that far. While the run is in
    progress the engine writes them into Python lists (four writes per transfer, each several
    times cheaper than a numpy scalar write); reading one then returns a snapshot, and when the
    run ends they become arrays for good.
    """

    schedule: Schedule
    placement: tuple[str, ...]
    label: str
    start_s: float
    path_of: list              # per connection index: Path
    conn_of: np.ndarray        # connection index of each transfer
    done_event: simpy.Event
    end_s: float = math.nan
    remaining: int = 0
    extra: dict = field(default_factory=dict)
    #: [t_start, t_drained, t_delivered, t_done]: lists while in progress, then arrays
    stamps: list = field(default_factory=list, repr=False)

    @property
    def time_s(self) -> float:
        return self.end_s - self.start_s

    @property
    def t_start(self) -> np.ndarray:
        return self._stamp(0)

    @property
    def t_drained(self) -> np.ndarray:
        return self._stamp(1)

    @property
    def t_delivered(self) -> np.ndarray:
        return self._stamp(2)

    @property
    def t_done(self) -> np.ndarray:
        return self._stamp(3)

    def _stamp(self, k: int) -> np.ndarray:
        values = self.stamps[k]
        if isinstance(values, np.ndarray):
            return values
        return np.fromiter(values, dtype=np.float64, count=len(values))

    def _end(self, now: float) -> None:
        """The last transfer completed at ``now``: freeze the timestamps, signal ``done_event``."""
        self.end_s = now
        self.stamps = [np.fromiter(values, dtype=np.float64, count=len(values))
                       for values in self.stamps]
        self.done_event.succeed(self)


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


#: The flow networks an :class:`Engine` can run on.
NETWORKS = ("python", "compiled")


def flow_network(env: simpy.Environment, kind: str, record_rates: bool) -> FlowNetwork:
    """The flow network ``kind`` (one of :data:`NETWORKS`) on ``env``."""
    if kind not in NETWORKS:
        raise ValueError(f"unknown flow network {kind!r}; valid: {', '.join(NETWORKS)}")
    if kind == "compiled" and not record_rates and numba_available():
        from .compiled_network import CompiledFlowNetwork

        drop_stale_kernel_caches()
        return CompiledFlowNetwork(env)
    return FlowNetwork(env, record_rates=record_rates)


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
    routing, routing_seed : str or None, int or None
        Override the topology's routing mode and seed (``ideal``, ``ecmp``, ``adaptive``; see
        :mod:`simulator.topology.routing`); None keeps the topology's own.
    network : str
        ``"python"`` (:class:`~.network.FlowNetwork`) or ``"compiled"``
        (:class:`~.compiled_network.CompiledFlowNetwork`: the same flows, their rates solved
        compiled, for runs whose flows form one large component, such as parameter servers;
        it keeps no rate timelines, so ``record_rates`` or a missing numba falls back to
        ``"python"``).
    """

    def __init__(self, graph: nx.DiGraph, *, reduce_compute: bool = True,
                 record_rates: bool = False, routing: str | None = None,
                 routing_seed: int | None = None, network: str = "python"):
        self.graph = graph
        self.env = simpy.Environment()
        self.network = flow_network(self.env, network, record_rates)
        self.network.deadline = _DEADLINE.get()
        self.router = Router(graph, routing=routing, seed=routing_seed)
        self.reduce_compute = reduce_compute
        self._device_free_at: dict[str, float] = {}
        self.failed: dict[str, float] = {}      # failed node -> time of failure
        self.runs: list[ScheduleRun] = []
        self.compute_log: list[tuple[str, str, float, float]] = []
        self._prep_cache: dict[int, _Prepared] = {}
        self._private = itertools.count()   # keys of the connections' own caps
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
        """Paths, resource ids and latencies of the connections, and the device and reduction
        rate (inf: free) of each connection's receiver, for one placement (cached like
        :meth:`_prepared`)."""
        key = (id(schedule), placement)
        found = self._placed_cache.get(key)
        if found is not None:
            return found
        net = self.network
        paths, conn_res = [], []
        caps = connection_caps(schedule.notes, prep.head_src, prep.head_dst)
        for c, (s, d) in enumerate(zip(prep.head_src, prep.head_dst)):
            path = self.router.path(placement[s], placement[d])
            paths.append(path)
            res = tuple(net.resource(k, self.router.capacity(k)) for k in path.resources)
            if caps[c] < math.inf:
                # the connection's own cap (schedules.base.LOCAL_FLOW_CAP_NOTE): a resource
                # only it crosses
                res += (net.resource(("cap", "connection", next(self._private)), caps[c]),)
            conn_res.append(res)
        latency = [path.latency_s for path in paths]
        receiver = [placement[d] for d in prep.head_dst]
        rank_rate = {}
        for node in receiver:
            if node not in rank_rate:
                rank_rate[node] = self.reduce_rate(node)
        reduce_rate = [rank_rate[node] for node in receiver]
        found = self._placed_cache[key] = (paths, conn_res, latency, receiver, reduce_rate)
        return found

    def _launch(self, schedule: Schedule, placement: tuple, label: str) -> ScheduleRun:
        check_placement(schedule, placement)
        n = len(schedule)
        check_event_run(n, 2 * int(schedule.nchunks.sum()))
        prep = self._prepared(schedule)
        paths, conn_res, latency, receiver, reduce_rate = self._placed(schedule, prep,
                                                                       placement)
        env, net, failed = self.env, self.network, self.failed
        start_flow = net.start

        now = env.now
        t_start, t_drained, t_delivered, t_done = stamps = [[math.nan] * n for _ in range(4)]
        run = ScheduleRun(schedule=schedule, placement=placement, label=label, start_s=now,
                          path_of=paths, conn_of=prep.conn_of,
                          done_event=simpy.Event(env), remaining=n, stamps=stamps)
        self.runs.append(run)
        # Per connection: the next transfer to start (-1: none left), and whether one is on
        # the wire; the rest of its FIFO queue is the chain prep.next_in_conn.
        next_of_conn = list(prep.first_of_conn)
        busy = [False] * len(next_of_conn)
        next_in_conn = prep.next_in_conn
        pending = list(prep.counts)
        nbytes, reduces, conn_of = prep.nbytes, prep.reduces, prep.conn_of_l
        dep_ptr, dep_owner = prep.dep_ptr, prep.dep_owner
        # epochs (barriers): transfers of epoch e start once every earlier epoch is complete
        epoch_of, epoch_left, last_epoch = prep.epoch, list(prep.epoch_left), prep.n_epochs - 1
        barriers = epoch_of is not None
        open_epoch = 0
        inf = math.inf
        arrivals: dict[float, list[int]] = {}   # delivery time -> transfers, in drain order

        def try_start(c: int, now: float) -> None:
            """Put connection ``c``'s next transfer on the wire if it is free and ready."""
            i = next_of_conn[c]
            if busy[c] or i < 0:
                return
            if pending[i] or (barriers and epoch_of[i] > open_epoch) or (
                    failed and self.blocked(paths[c])):
                return
            next_of_conn[c] = next_in_conn[i]
            busy[c] = True
            t_start[i] = now
            start_flow(conn_res[c], nbytes[i], drained, i)

        def drained(flow) -> None:
            i = flow.tag
            now = flow.finish
            t_drained[i] = now
            c = conn_of[i]
            busy[c] = False
            lat = latency[c]
            if lat > 0:
                # one SimPy event per delivery instant, not per transfer: a ring step drains
                # p transfers at once, all delivered one path latency later
                t = now + lat
                batch = arrivals.get(t)
                if batch is None:
                    arrivals[t] = [i]
                    ev = env.timeout(lat)     # fires at exactly t
                    ev.callbacks.append(lambda _e, t=t: deliver(arrivals.pop(t), t))
                else:
                    batch.append(i)
            else:
                deliver((i,), now)
            j = next_of_conn[c]
            if j >= 0 and not pending[j]:
                try_start(c, now)

        def deliver(batch, now: float, reduced: bool = False) -> None:
            """The transfers of ``batch`` arrive at ``now`` (``reduced``: their summation on
            the receiving device has just finished instead). A reducing transfer first queues
            that summation; the others are complete and release their dependents."""
            nonlocal open_epoch
            for i in batch:
                if not reduced:
                    t_delivered[i] = now
                    if reduces[i]:
                        c = conn_of[i]
                        rate = reduce_rate[c]
                        if rate != inf:
                            self.compute(receiver[c], nbytes[i] / rate, "reduce",
                                         lambda i=i: deliver((i,), env.now, True))
                            continue
                t_done[i] = now
                left = run.remaining = run.remaining - 1
                for j in dep_owner[dep_ptr[i]:dep_ptr[i + 1]]:
                    waiting = pending[j] = pending[j] - 1
                    if not waiting:
                        try_start(conn_of[j], now)
                if barriers:
                    e = epoch_of[i]
                    epoch_left[e] -= 1
                    if e == open_epoch and not epoch_left[e] and e < last_epoch:
                        while open_epoch < last_epoch and not epoch_left[open_epoch]:
                            open_epoch += 1
                        for c in range(len(busy)):
                            try_start(c, now)
                if not left:
                    run._end(now)

        if n == 0:
            run._end(now)
        else:
            for c in range(len(busy)):
                try_start(c, now)
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
    """A schedule's launch data that does not depend on placement or time (read-only).

    Per-transfer columns are tuples, which the per-transfer code indexes several times faster
    than numpy arrays, and which the garbage collector stops scanning after its first pass (a
    list of millions of ints would be re-scanned by every full collection)."""

    schedule: Schedule
    counts: tuple           # data-flow predecessors of every transfer
    dep_ptr: tuple          # dependents, CSR
    dep_owner: tuple
    epoch: tuple | None     # epoch of every transfer; None when the schedule has no barriers
    n_epochs: int
    epoch_left: list        # transfers in every epoch
    conn_of: np.ndarray     # FIFO connection of every transfer
    conn_of_l: tuple
    first_of_conn: list     # first transfer of every connection
    next_in_conn: tuple     # the transfer after each one on its connection (-1: the last)
    head_src: list          # src and dst rank of every connection
    head_dst: list
    nbytes: tuple
    reduces: tuple

    @classmethod
    def of(cls, schedule: Schedule) -> _Prepared:
        n = len(schedule)
        indptr, indices = dependencies(schedule)
        # Reverse edges: who waits for whom.
        counts = np.diff(indptr)
        order = _stable_order(indices)
        dependents_ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(indices, minlength=n), out=dependents_ptr[1:])
        owners = np.repeat(np.arange(n), counts)[order]
        epoch = epochs(schedule)
        n_epochs = int(epoch[-1]) + 1 if n else 1
        epoch_left = np.bincount(epoch, minlength=n_epochs).tolist() if n else [0]
        conn_of, heads, next_in_conn = _connection_queues(schedule)

        def column(values: np.ndarray) -> tuple:
            """The values as Python scalars; all equal (equal chunks), one shared object."""
            if len(values) and (values == values[0]).all():
                return (values[0].item(),) * len(values)
            return tuple(values.tolist())

        return cls(schedule=schedule, counts=column(counts), dep_ptr=column(dependents_ptr),
                   dep_owner=column(owners), epoch=column(epoch) if n_epochs > 1 else None,
                   n_epochs=n_epochs, epoch_left=epoch_left, conn_of=conn_of,
                   conn_of_l=column(conn_of), first_of_conn=heads.tolist(),
                   next_in_conn=column(next_in_conn), head_src=schedule.src[heads].tolist(),
                   head_dst=schedule.dst[heads].tolist(), nbytes=column(schedule.transfer_bytes),
                   reduces=column(schedule.reduce))


def _connections(schedule: Schedule) -> tuple[np.ndarray, np.ndarray]:
    """FIFO connection of every transfer (its ``(src, dst, channel)``, numbered in order of
    first use) and the first transfer of each connection."""
    conn_of, heads, _next = _connection_queues(schedule)
    return conn_of, heads


def _connection_queues(schedule: Schedule) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_connections`, plus each connection's FIFO queue as a chain: the transfer after
    every transfer on its connection, in list order (-1 after the last)."""
    n = len(schedule)
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0, np.int64)
    chan = schedule.channel.astype(np.int64)
    key = ((schedule.src.astype(np.int64) * schedule.total_ranks + schedule.dst)
           * (int(chan.max()) + 1) + chan)
    by_key = _stable_order(key)                     # connection by connection, in list order
    sorted_key = key[by_key]
    same = sorted_key[1:] == sorted_key[:-1]        # consecutive entries of one connection
    next_in_conn = np.full(n, -1, dtype=np.int64)
    next_in_conn[by_key[:-1][same]] = by_key[1:][same]
    first = by_key[np.flatnonzero(np.concatenate(([True], ~same)))]
    by_first = np.argsort(first, kind="stable")
    number = np.empty(len(first), dtype=np.int64)
    number[by_first] = np.arange(len(first))
    group = np.cumsum(np.concatenate(([0], ~same)))  # connection of each sorted entry, by key
    conn_of = np.empty(n, dtype=np.int64)
    conn_of[by_key] = number[group]
    return conn_of, first[by_first], next_in_conn


def _stable_order(key: np.ndarray) -> np.ndarray:
    """``np.argsort(key, kind="stable")`` of non-negative integers: where ``(key, position)``
    packs into an int64, one plain sort of the packed codes (several times faster)."""
    bits = len(key).bit_length()
    code = packed_sort(key, np.arange(len(key)), bits)
    if code is None:
        return np.argsort(key, kind="stable")
    return code & ((1 << bits) - 1)


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
