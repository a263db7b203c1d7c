"""Flow-level network with exact max-min fair bandwidth sharing.

Why flows and not a FIFO resource per link: a message crossing three links does not pay three
serialisation times, and two messages sharing a link finish together, not one after the other.
Every validated flow-level model (SimGrid's among them) shares each link's bandwidth max-min
fairly among the flows crossing it; this module does exactly that, event by event.

The model:

* A *resource* is anything with a capacity in bytes/s: a directed link, or a device that caps the
  aggregate traffic through it (a PCIe host bridge, a NIC engine, a server's memory).
* A *flow* has a fixed list of resources, a number of bytes, and a rate. It starts draining at
  once; when its last byte has left, :meth:`FlowNetwork.start`'s ``on_drained`` callback fires,
  and the caller adds the path latency for delivery (latency is paid once per message, not per
  hop).
* Rates are max-min fair (progressive filling): repeatedly find the resource whose remaining
  capacity per unfrozen flow is smallest, give that share to its flows, and freeze them.
* Only the connected component of flows and resources touched by a change is re-solved: rates
  elsewhere cannot change. All changes at one simulated instant are coalesced into one solve,
  scheduled at the same time with a priority after ordinary events. A flow that starts at the
  instant another drains on the same path (the next slice of a FIFO connection) leaves the
  multiset of active paths, hence every max-min rate, unchanged: it takes over the drained
  flow's rate and nothing is re-solved (exact; see :meth:`FlowNetwork._match`).
* Progress is lazy: a flow's remaining bytes are brought up to date only when its rate changes.
* One wake-up is pending at a time, for the earliest projected completion; it carries a
  generation number, so a wake-up made stale by a later solve does nothing (SimPy cannot cancel
  scheduled events).
* Projected completions are kept per distinct time (a heap of times, and the flows due at each):
  a collective step drains many flows at one instant, and popping them one by one off a heap of
  flows costs a logarithmic number of tuple comparisons each. A flow whose rate changes is
  entered again under its new time, with a new ``version``; entries of older versions are
  stale and skipped.

Exactness: with these rules the completion times equal the closed forms of the usual test cases
(one flow over links of different speeds, equal sharing, staggered arrivals, the parking lot,
incast) to floating-point precision; ``tests/test_engine.py`` checks them to 1e-9.
"""

from __future__ import annotations

import heapq
import itertools
import math
import operator
import time
from typing import Callable, Hashable

import numpy as np
import simpy

from .waves import max_min_weighted

#: SimPy priority of the coalesced solve: after URGENT (0) and NORMAL (1) events at the same time.
SOLVE_PRIORITY = 2
#: Relative tolerance under which a flow counts as drained at a wake-up.
_EPS = 1e-12
_BY_FID = operator.attrgetter("fid")


def is_private(key: Hashable) -> bool:
    """Whether a resource key is a flow's own rate cap (``("cap", ...)``: a resource only that
    flow or connection crosses), not a link or device: the link tables leave these out."""
    return isinstance(key, tuple) and len(key) > 0 and key[0] == "cap"


class Flow:
    """One message on the wire. Mutable state belongs to :class:`FlowNetwork`.

    ``rate`` and ``finish`` are its current rate and the projected time of its last byte while
    it drains; once it has drained (when ``on_drained`` fires), the rate it drained at and the
    time it drained. ``tag`` is the caller's: whatever identifies the
    message to its ``on_drained`` callback (the runner stores the transfer index), so that one
    callback can serve every flow.
    """

    __slots__ = ("fid", "res", "size", "remaining", "rate", "t_last", "finish", "on_drained",
                 "version", "tag", "conn")

    def __init__(self, fid, res, size, on_drained, now, tag):
        self.fid = fid
        self.res = res
        self.size = size
        self.remaining = float(size)
        self.rate = 0.0
        self.t_last = now
        self.finish = math.inf
        self.on_drained = on_drained
        self.version = 0
        self.tag = tag
        self.conn = -1      # its connection in a compiled network (compiled_network.py)


class FlowNetwork:
    """Max-min fair flows over capacitated resources, driven by a SimPy environment.

    Parameters
    ----------
    env : simpy.Environment
    record_rates : bool
        Keep, per resource, the piecewise-constant aggregate rate over time (for utilisation
        plots). Costs memory proportional to the number of rate changes.
    """

    def __init__(self, env: simpy.Environment, record_rates: bool = False):
        self.env = env
        self.keys: list[Hashable] = []
        self.index: dict[Hashable, int] = {}
        self.capacity: list[float] = []
        self.flows_on: list[set] = []
        self.bytes_carried: list[float] = []
        self.busy_time: list[float] = []
        self.busy_since: list[float] = []
        self.rate_log: list[list[tuple[float, float]]] | None = [] if record_rates else None
        self._dirty: set[int] = set()
        self._cap_array = np.zeros(0)      # capacities as an array, for the vectorised solver
        # changes since the last solve: flows started, and flows drained
        self._arrived: list[Flow] = []
        self._departed: list[Flow] = []
        self._solve_pending = False
        # projected completions: a heap of distinct times, and per time the entries
        # (fid, version, flow) due then, in the order they were entered
        self._times: list[float] = []
        self._due: dict[float, list[tuple[int, int, Flow]]] = {}
        self._wake_generation = 0
        self._wake_time = math.inf
        self._fids = itertools.count()
        self.active = 0
        self.solves = 0
        self.deadline: float | None = None   # wall-clock limit (time.monotonic), see runner

    # -- resources ----------------------------------------------------------------------------
    def resource(self, key: Hashable, capacity_bytes_per_s: float) -> int:
        """Register (or look up) a resource and return its index."""
        idx = self.index.get(key)
        if idx is None:
            if not capacity_bytes_per_s > 0:
                raise ValueError(f"resource {key!r} needs a positive capacity")
            idx = len(self.keys)
            self.index[key] = idx
            self.keys.append(key)
            self.capacity.append(float(capacity_bytes_per_s))
            self.flows_on.append(set())
            self.bytes_carried.append(0.0)
            self.busy_time.append(0.0)
            self.busy_since.append(math.nan)
            if self.rate_log is not None:
                self.rate_log.append([])
        return idx

    # -- flows --------------------------------------------------------------------------------
    def start(self, resources: tuple[int, ...], size_bytes: float,
              on_drained: Callable[[Flow], None], tag=None) -> Flow:
        """Start a flow of ``size_bytes`` over ``resources``; ``on_drained(flow)`` fires when its
        last byte has left (``flow.tag`` is ``tag``, ``flow.finish`` the time it drained). A
        flow with no bytes or no resources drains immediately."""
        now = self.env.now
        res = resources if type(resources) is tuple else tuple(resources)
        flow = Flow(next(self._fids), res, size_bytes, on_drained, now, tag)
        if size_bytes <= 0 or not res:
            flow.remaining = 0.0
            flow.finish = now
            ev = self.env.timeout(0)
            ev.callbacks.append(lambda _e, f=flow: f.on_drained(f))
            return flow
        self.active += 1
        flows_on, busy_since = self.flows_on, self.busy_since
        for r in res:
            on = flows_on[r]
            if not on:
                busy_since[r] = now
            on.add(flow)
        self._arrive(flow)
        if not self._solve_pending:
            self._request_solve()
        return flow

    def _arrive(self, flow: Flow) -> None:
        """A flow joins the changes the next solve takes in."""
        self._arrived.append(flow)

    def _request_solve(self) -> None:
        if not self._solve_pending:
            self._solve_pending = True
            ev = simpy.Event(self.env)
            ev._ok = True
            ev._value = None
            ev.callbacks.append(self._solve)
            self.env.schedule(ev, priority=SOLVE_PRIORITY)

    def _match(self) -> None:
        """Give a flow that started at this instant the rate of a flow that drained at it on
        the same path, and mark every other change dirty.

        Max-min rates depend only on the capacities and the multiset of active paths. Where
        started and drained flows pair up path for path (the next slice of a FIFO connection
        replacing the one that just drained), that multiset is unchanged, so is every rate, and
        no solve is needed: an exact shortcut, not an approximation. Unpaired arrivals and
        departures dirty their resources, whose components are re-solved as usual (paired
        flows inside them included)."""
        now = self.env.now
        flows_on, capacity, log = self.flows_on, self.capacity, self.rate_log
        # rates of the flows drained at this instant, by path (only if some flow arrived)
        departed: dict[tuple, list[float]] = {}
        if self._arrived:
            for f in self._departed:
                rates = departed.get(f.res)
                if rates is None:
                    departed[f.res] = [f.rate]
                else:
                    rates.append(f.rate)
        inf = math.inf
        rated = []
        for f in self._arrived:
            if f.remaining <= 0.0:      # aborted before it was ever solved
                continue
            rates = departed.get(f.res) if departed else None
            if rates:
                rate = rates.pop()
            else:
                # a flow alone on all its resources is a component of its own: its rate is
                # its slowest resource's capacity, whatever else changes at this instant
                rate = inf
                for r in f.res:
                    if len(flows_on[r]) != 1:
                        rate = 0.0
                        break
                    cap = capacity[r]
                    rate = cap if cap < rate else rate  # noqa: FURB136 (hot loop, no call)
                if rate == 0.0:
                    self._dirty.update(f.res)
                    continue
                if log is not None:
                    for r in f.res:
                        if not log[r] or log[r][-1][1] != rate:
                            log[r].append((now, rate))
            # (f.t_last is already now: it started at this instant)
            f.rate = rate
            f.finish = now + f.remaining / rate
            rated.append(f)
        self._enter(rated)
        # Unpaired departures: their resources' other flows may speed up. A resource left
        # without flows reaches none of them, so it is dirtied only to log its rate (now 0).
        dirty = self._dirty
        unpaired = ([res for res, rates in departed.items() if rates] if departed
                    else [f.res for f in self._departed])
        for res in unpaired:
            for r in res:
                if flows_on[r] or log is not None:
                    dirty.add(r)
        self._arrived.clear()
        self._departed.clear()

    def _component(self) -> tuple[list[int], list[Flow]]:
        """Resources and flows connected to the dirty resources."""
        flows_on = self.flows_on
        seen_r = set(self._dirty)
        stack = list(seen_r)
        flows: dict[int, Flow] = {}
        add_r, push = seen_r.add, stack.append
        while stack:
            for f in flows_on[stack.pop()]:
                if f.fid not in flows:
                    flows[f.fid] = f
                    for r2 in f.res:
                        if r2 not in seen_r:
                            add_r(r2)
                            push(r2)
        self._dirty.clear()
        # Sorted so that floating-point results never depend on set iteration order.
        return sorted(seen_r), [flows[k] for k in sorted(flows)]

    def _solve(self, _event=None) -> None:
        """Re-solve max-min fair rates on the dirty component, then re-arm the wake-up."""
        now = self._begin_solve()
        self._match()
        resources, flows = self._component()
        if flows:
            flows_on, capacity = self.flows_on, self.capacity
            rates = [0.0] * len(flows)
            shared = []      # positions of flows that share a resource with another flow
            for k, f in enumerate(flows):
                if f.rate > 0.0:
                    f.remaining -= f.rate * (now - f.t_last)
                    if f.remaining < 0.0:
                        f.remaining = 0.0
                f.t_last = now
                # alone on its resources: its own component, limited by its slowest one
                rate = math.inf
                for r in f.res:
                    if len(flows_on[r]) != 1:
                        rate = 0.0
                        break
                    cap = capacity[r]
                    rate = cap if cap < rate else rate  # noqa: FURB136 (hot loop, no call)
                if rate == 0.0:
                    shared.append(k)
                else:
                    rates[k] = rate
            if shared:
                paths = [flows[k].res for k in shared]
                if len(shared) > VECTOR_THRESHOLD:
                    if len(self._cap_array) != len(capacity):
                        self._cap_array = np.asarray(capacity, dtype=np.float64)
                    solved = max_min_rates_vector(paths, self._cap_array)
                else:
                    solved = max_min_rates(paths, {r: capacity[r] for res in paths for r in res})
                for k, rate in zip(shared, solved):
                    rates[k] = rate
            changed = []
            for f, rate in zip(flows, rates):
                if rate != f.rate or f.finish == math.inf:
                    f.rate = rate
                    f.finish = now + f.remaining / rate
                    changed.append(f)
            self._enter(changed)
        if self.rate_log is not None:
            for r in resources:
                # summed in flow order: a set's order varies from run to run
                total = sum(f.rate for f in sorted(self.flows_on[r], key=_BY_FID))
                log = self.rate_log[r]
                if not log or log[-1][1] != total:
                    log.append((now, total))
        self._arm()

    def _begin_solve(self) -> float:
        """Count a solve, check the wall-clock budget; returns the current time."""
        self._solve_pending = False
        now = self.env.now
        self.solves += 1
        if self.deadline is not None and self.solves % 64 == 0 and time.monotonic() > self.deadline:
            from ..errors import SimulationError

            raise SimulationError(f"wall-clock budget exceeded at simulated t={now:.9g} s with "
                                  f"{self.active} flows in flight; raise --time-budget or "
                                  f"simulate fewer ranks, sizes or slices")
        return now

    def _enter(self, flows: list[Flow]) -> None:
        """Enter the projected completions (``finish``) of ``flows``, whose rates were just
        set, under a new version each: their earlier entries become stale."""
        due, times = self._due, self._times
        for f in flows:
            version = f.version = f.version + 1
            t = f.finish
            entries = due.get(t)
            if entries is None:
                due[t] = [(f.fid, version, f)]
                heapq.heappush(times, t)
            else:
                entries.append((f.fid, version, f))

    def _arm(self) -> None:
        times, due = self._times, self._due
        while times:
            entries = due[times[0]]
            for k, (_fid, version, f) in enumerate(entries):
                if version == f.version:
                    del entries[:k]      # drop the stale entries in front
                    break
            else:
                del due[heapq.heappop(times)]
                continue
            break
        if not times:
            self._wake_time = math.inf
            return
        t = times[0]
        if t == self._wake_time:
            return  # a valid wake-up for exactly this time is already pending
        self._wake_generation += 1
        self._wake_time = t
        gen = self._wake_generation
        ev = self.env.timeout(max(0.0, t - self.env.now))
        ev.callbacks.append(lambda _e: self._wake(gen))

    def _wake(self, generation: int) -> None:
        if generation != self._wake_generation:
            return
        now = self.env.now
        done = self._take_due(now)
        flows_on, carried = self.flows_on, self.bytes_carried
        busy_time, busy_since = self.busy_time, self.busy_since
        self.active -= len(done)
        for f in done:
            f.remaining = 0.0       # (f.rate stays the rate it drained at, for _match)
            f.finish = now
            size = f.size
            for r in f.res:
                on = flows_on[r]
                on.discard(f)
                carried[r] += size
                if not on:
                    busy_time[r] += now - busy_since[r]
        if done or self._changed():
            self._request_solve()
        else:
            self._arm()
        for f in done:
            f.on_drained(f)

    def _take_due(self, now: float) -> list[Flow]:
        """Take the flows that drain by ``now`` (within ``_EPS``) out of the completion queue,
        in (finish, fid) order; they become the instant's departures."""
        self._wake_time = math.inf
        limit = now + _EPS * max(1.0, abs(now))
        times, due = self._times, self._due
        done: list[Flow] = []
        # the flows due by ``limit``, in (finish, fid) order, their entries' versions current
        while times and times[0] <= limit:
            entries = due.pop(heapq.heappop(times))
            if len(entries) > 1:
                entries.sort()       # by (fid, version): entered over several solves
            for _fid, version, f in entries:
                if version == f.version:
                    f.version += 1
                    done.append(f)
        self._departed += done
        return done

    def _changed(self) -> bool:
        """Whether changes other than drained flows wait for a solve (an aborted flow)."""
        return bool(self._dirty)

    def abort(self, flow: Flow) -> None:
        """Remove ``flow`` without completing it (a failed device or link): its bytes never
        arrive and its ``on_drained`` never fires; the others are re-solved."""
        if flow.remaining <= 0 or flow not in self.flows_on[flow.res[0]]:
            return
        now = self.env.now
        flow.version += 1          # its pending completion entry becomes stale
        sent = 0.0
        if flow.rate > 0:
            sent = flow.size - max(0.0, flow.remaining - flow.rate * (now - flow.t_last))
        self._dirty.update(flow.res)
        self._leave(flow, sent, now)

    def _leave(self, flow: Flow, sent_bytes: float, now: float) -> None:
        """An aborted flow leaves its resources, having carried ``sent_bytes`` over each."""
        self.active -= 1
        for r in flow.res:
            on = self.flows_on[r]
            on.discard(flow)
            self.bytes_carried[r] += sent_bytes
            if not on:
                self.busy_time[r] += now - self.busy_since[r]
        flow.remaining = 0.0
        self._request_solve()

    def flows_through(self, resources) -> list[Flow]:
        """Active flows using any of ``resources`` (sorted by id, for determinism)."""
        found = {}
        for r in resources:
            for f in self.flows_on[r]:
                found[f.fid] = f
        return [found[k] for k in sorted(found)]

    # -- records ------------------------------------------------------------------------------
    def link_table(self) -> list[tuple[Hashable, float, float, float]]:
        """``(key, capacity_bytes_per_s, bytes_carried, busy_time_s)`` for every link and device
        (not the flows' own caps: :func:`is_private`)."""
        return [(k, self.capacity[i], self.bytes_carried[i], self.busy_time[i])
                for i, k in enumerate(self.keys) if not is_private(k)]


def max_min_rates(flow_resources: list[tuple[int, ...]], capacity: dict[int, float]) -> list[float]:
    """Max-min fair rates by progressive filling.

    Parameters
    ----------
    flow_resources : list of tuples of resource ids, one per flow
    capacity : resource id -> capacity (bytes/s); must cover every resource used

    Returns
    -------
    list of float, the rate of each flow. Every flow is limited by at least one saturated
    resource on which no other flow gets more (the max-min fairness condition).
    """
    n = len(flow_resources)
    if n == 1:
        return [min(capacity[r] for r in flow_resources[0])]
    left = dict(capacity)
    users: dict[int, list[int]] = {r: [] for r in capacity}
    for i, res in enumerate(flow_resources):
        for r in res:
            users[r].append(i)
    count = {r: len(u) for r, u in users.items() if u}
    rates = [0.0] * n
    frozen = [False] * n
    # Resources ordered by their current fair share; shares only grow as flows freeze elsewhere,
    # so a heap with lazy re-insertion finds the bottleneck each round.
    heap = [(left[r] / c, r) for r, c in count.items()]
    heapq.heapify(heap)
    remaining = n
    while remaining and heap:
        share, r = heapq.heappop(heap)
        c = count.get(r, 0)
        if c == 0:
            continue
        current = left[r] / c
        if current != share:
            heapq.heappush(heap, (current, r))
            continue
        for i in users[r]:
            if frozen[i]:
                continue
            frozen[i] = True
            rates[i] = share
            remaining -= 1
            for r2 in flow_resources[i]:
                left[r2] -= share
                count[r2] -= 1
                if r2 != r and count[r2] > 0:
                    heapq.heappush(heap, (max(left[r2], 0.0) / count[r2], r2))
        count[r] = 0
    return rates


#: Above this many flows a solve uses the vectorised solver.
VECTOR_THRESHOLD = 48


def max_min_rates_vector(flow_resources: list[tuple[int, ...]], capacity) -> list[float]:
    """Max-min fair rates by progressive filling, vectorised with numpy.

    ``capacity`` maps (or, as a list or array, indexes) resource id -> capacity; only the
    resources the flows use are read. Same answer as :func:`max_min_rates` (the tests compare them); each
    round freezes every
    unfrozen flow that crosses a resource whose fair share equals the current minimum. Rounds
    equal the number of distinct rate levels, usually a handful, so large components (all flows
    of a pipelined tree on one switch) cost a few array passes instead of a Python heap walk.
    """
    lengths = np.fromiter(map(len, flow_resources), dtype=np.int64, count=len(flow_resources))
    flat = np.fromiter(itertools.chain.from_iterable(flow_resources), dtype=np.int64,
                       count=int(lengths.sum()))
    used_ids, flat_res = np.unique(flat, return_inverse=True)
    flat_res = flat_res.ravel()
    if isinstance(capacity, np.ndarray):
        caps = capacity[used_ids].astype(np.float64)
    else:
        caps = np.fromiter((capacity[r] for r in used_ids.tolist()), dtype=np.float64,
                           count=len(used_ids))
    flat_flow = np.repeat(np.arange(len(flow_resources)), lengths)
    unit = np.ones(len(flow_resources))
    rates = max_min_weighted(flat_flow, flat_res, unit, caps, len(flow_resources))
    return rates.tolist()


def utilisation(bytes_carried: np.ndarray, capacity: np.ndarray, span_s: float) -> np.ndarray:
    """Average utilisation of resources over ``span_s`` seconds (bytes / (capacity * span))."""
    if span_s <= 0:
        return np.zeros_like(np.asarray(bytes_carried, dtype=float))
    return np.asarray(bytes_carried, dtype=float) / (np.asarray(capacity, dtype=float) * span_s)
