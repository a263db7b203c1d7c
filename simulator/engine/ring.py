"""The ring shortcuts: a ring collective timed from its connections, never its schedule.

Symmetric ring (:func:`ring_time`, without building the schedule)
-----------------------------------------------------------------
A ring step uses the same ``p·C`` connections every step (``C`` channels). When every chunk has
the same size (``size`` divisible by ``C·p``; else the ring recurrence below), a step is one
wave of ``p·C`` identical-size flows; if after that wave every rank completes at the same
instant ``T`` (a symmetric topology: star, NVSwitch; checked), then every transfer of the next
step starts at ``T``: each depends on the chunk its sender received in the previous step, and on
nothing later. By induction all steps are that same wave, and the ring takes
``(p-1)·T_reduce_scatter + (p-1)·T_all_gather``. One wave solve replaces ``2p(p-1)`` transfers;
with the star's hub routing (below) a 16,384-rank ring takes milliseconds.
``tests/test_fast.py`` checks it against the event engine and the step-synchronous analysis.

Ring recurrence (:func:`ring_time`, when ranks complete a step at different instants)
-------------------------------------------------------------------------------------
On a cluster of NVSwitch machines with one NIC each, a ring's intra-machine hops are fast and
its inter-machine hops slow, so ranks finish a step at different instants and the symmetric ring
declines; it also declines when chunks differ in size (``size`` not a multiple of ``C·p``, as
with training's gradient buckets). The ring is still simple: its ``p·C`` FIFO connections are
the same every step, and the transfer of step ``k`` on connection ``i`` (rank ``s`` to its
successor, channel ``c``) waits for exactly two things, as the schedule's data-flow
dependencies say (:mod:`simulator.schedules.deps`): the drain of step ``k-1`` on connection
``i`` (FIFO), and the completion of the step-``k-1`` transfer into ``s`` on channel ``c``, which
delivered (and reduced) the chunk ``s`` now forwards. The all-gather's overwrite of chunk ``x``
at rank ``s`` also waits for the reduce-scatter's reduction into and read of ``x`` at ``s``, but
both lie on ``x``'s own chain of completions (reduce-scatter hops up to ``x``'s owner, then
all-gather hops), which the overwrite already waits for through its sender: start >= the
predecessor's completion >= its start, whatever the chunk sizes, so they never bind. Hence, per
connection,

* start = max(drain of its previous transfer, completion of the previous step into the sender);
* drain = start + bytes / rate; delivery = drain + latency;
* completion = delivery, or in reduce-scatter steps max(delivery, the receiver's compute queue
  free) + bytes / ``reduce_bytes_per_s`` (FIFO, one reduction per device and step, checked;
  deliveries into one device come in step order, so the queue frees at the connection's last
  reduction). A 0-byte chunk (``size < C·p``) is not queued, as in the engine: it completes on
  delivery and leaves the queue as it was.

``bytes`` is the chunk the connection carries in that step: channel ``c`` carries part ``c`` of
``split_bytes(size, C)``, cut by ``split_bytes`` into ``p`` chunks, and position ``j`` of its
order sends chunk ``(j-k-1) mod p`` in reduce-scatter step ``k`` and ``(j-k) mod p`` in
all-gather step ``k`` (:mod:`simulator.schedules.ring`): each step's bytes are a rotation of the
channel's chunk sizes, read as a window of those sizes written twice (no ``p x 2(p-1)`` table).

This is the engine's own recurrence, exact when each flow's rate does not depend on which other
flows are active. Checked sufficient condition: every flow has an *exclusive* resource (crossed
by no other ring connection), ``u_f`` is the smallest capacity among them, and every shared
resource has capacity ``>= sum(u_f)`` over the flows crossing it. Then, whatever subset is
active (0-byte transfers are never active), each flow is bottlenecked on its own resource and no
shared one saturates, so its max-min rate is ``u_f``. Channels that follow the same rank order
and carry the same bytes run in lockstep and count as one flow of weight ``w`` (each gets
``1/w`` of its bundle's exclusive bottleneck); same order with other bytes stay separate flows,
which share every resource (declined). The ``2(p-1)`` steps are evaluated on ``O(p·C)`` arrays,
never the schedule: about 0.1 s at 1,024 ranks and 1-2 s at 16,384 (plus routing), where the
schedule-based analyses need seconds per bucket at 1,024 and decline beyond 40 M transfers. It
declines (and the schedule-based analyses are tried) when a connection has no exclusive resource
or a shared one would saturate (e.g. several channels over one NIC or NVSwitch port, a capped
host bridge), or when a device reduces several chunks per step.

Routing: on a *hub* topology (every placed node has exactly one out-link and one in-link, both
to the same transit node, as on ``star``), the path ``s -> hub -> d`` is the only shortest path,
so it is built directly; elsewhere the :class:`~simulator.topology.routing.Router` is used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import networkx as nx
import numpy as np

from ..schedules.base import split_bytes
from .common import FastResult, NotApplicable, _Paths, _reduce_totals
from .waves import SAME, gather_csr, max_min_wave


# -- symmetric ring and ring recurrence ----------------------------------------------------------
RING_COLLECTIVES = ("allreduce", "reduce_scatter", "allgather")


class _Asymmetric(NotApplicable):
    """Ranks complete a ring step at different instants: the symmetric ring does not apply (the
    ring recurrence may)."""


@dataclass
class _RingPlan:
    """The ``p·C`` connections of a ring (``slices=1``), routed; never the schedule.

    Connection ``c·p + j`` is channel ``c``'s hop from position ``j`` of its order to position
    ``j+1``; it carries one chunk of channel ``c`` per step, every step. Channel ``c`` carries
    ``parts[c]`` bytes (``split_bytes(size, C)``) cut into ``p`` chunks by ``split_bytes``:
    chunk ``x`` is ``parts[c] // p`` bytes, plus one for ``x < parts[c] % p``. Position ``j``
    sends chunk ``(j-k-1) mod p`` at reduce-scatter step ``k`` and ``(j-k) mod p`` at all-gather
    step ``k`` (:mod:`simulator.schedules.ring`).
    """

    p: int
    parts: np.ndarray         # bytes of every channel
    orders: list              # one rank order per channel
    src: np.ndarray           # sending rank of every connection
    dst: np.ndarray           # receiving rank of every connection
    nodes: list               # placement
    paths: _Paths
    ptr: np.ndarray           # CSR of each connection's resource ids
    res: np.ndarray
    latency_s: np.ndarray
    capacity: np.ndarray
    rs_steps: int             # reduce-scatter steps (reducing), then all-gather steps
    ag_steps: int
    reduce_rate: np.ndarray   # reduction bytes/s of each connection's receiver (inf: free)

    @property
    def steps(self) -> int:
        return self.rs_steps + self.ag_steps

    @property
    def chunk_bytes(self) -> int | None:
        """The size of every chunk when all are equal, else None."""
        chunk = int(self.parts[0]) // self.p
        return chunk if np.all(self.parts == chunk * self.p) else None

    def check_one_reduction_per_device(self) -> None:
        """NotApplicable when a device reduces several chunks per step (several channels into
        one rank, or ranks sharing a device): the order its FIFO compute queue serves them in
        decides when each completes, which neither ring shortcut models."""
        reducing = np.isfinite(self.reduce_rate) & (np.repeat(self.parts, self.p) > 0)
        if not self.rs_steps or not reducing.any():
            return
        device_of = {d: i for i, d in enumerate(sorted(set(self.nodes)))}
        receiver = np.array([device_of[self.nodes[d]] for d in self.dst[reducing].tolist()])
        if np.any(np.bincount(receiver) > 1):
            raise NotApplicable("a device reduces several chunks per step (channels, or ranks "
                                "sharing it): the order its compute queue serves them in "
                                "decides when they complete")

    def chunk_sizes(self, channels) -> np.ndarray:
        """Chunk sizes of ``channels`` (rows), as ``split_bytes`` cuts each channel's part."""
        parts = self.parts[np.asarray(channels)]
        return (parts[:, None] // self.p
                + (np.arange(self.p)[None, :] < (parts % self.p)[:, None])).astype(np.int64)

    def result(self, time_s: float, method: str, solves: int) -> FastResult:
        """The FastResult of this ring taking ``time_s``, with its link and compute totals.

        Position ``j`` sends every chunk of its channel but ``j`` in the reduce-scatter and
        every chunk but ``j+1`` in the all-gather."""
        sizes = self.chunk_sizes(range(len(self.orders))).astype(np.float64)
        part = self.parts.astype(np.float64)[:, None]
        rs_bytes = (part - sizes).ravel() if self.rs_steps else np.zeros(len(self.src))
        conn_bytes = rs_bytes.copy()
        if self.ag_steps:
            conn_bytes += (part - np.roll(sizes, -1, axis=1)).ravel()
        res_bytes = np.bincount(self.res, weights=np.repeat(conn_bytes, np.diff(self.ptr)),
                                minlength=len(self.capacity))
        return FastResult(float(time_s), True, "", method, steps=self.steps, solves=solves,
                          links=self.paths.table(res_bytes),
                          bytes_sent=float(conn_bytes.sum()),
                          reduce_s=_reduce_totals(self.nodes, self.dst,
                                                  rs_bytes / self.reduce_rate))


def ring_time(graph: nx.DiGraph, placement, collective: str, size_bytes: int, *,
              channels: int = 1, local_ranks: int | None = None,
              reduce_compute: bool = True) -> FastResult:
    """Time of the ring ``collective`` (``slices=1``) without building its schedule.

    First the symmetric ring (one wave of the ``p·C`` connections, when every chunk has one
    size and every rank completes each step at the same instant); otherwise the ring
    recurrence (per-connection start/drain/completion times, step by step, any chunk sizes).
    See the module docstring for what each checks. ``method`` says which ran.
    """
    try:
        plan = _ring_plan(graph, tuple(placement), collective, int(size_bytes), int(channels),
                          local_ranks, reduce_compute)
        if isinstance(plan, FastResult):
            return plan
        return _ring(plan)
    except _Asymmetric as exc:
        try:
            return _ring_recurrence(plan)
        except NotApplicable as why:
            return FastResult(math.nan, False, f"{why} (and ring-symmetric: {exc})",
                              "ring-recurrence")
    except NotApplicable as exc:
        return FastResult(math.nan, False, str(exc), "ring-symmetric")


def _ring_plan(graph, placement, collective, size_bytes, channels, local_ranks,
               reduce_compute):
    """The routed connections of the ring (a :class:`_RingPlan`), or the FastResult of a
    one-rank ring; NotApplicable when ring neighbours share a device."""
    from ..schedules.ring import ring_order

    if collective not in RING_COLLECTIVES:
        raise NotApplicable(f"the ring shortcuts cover {', '.join(RING_COLLECTIVES)}")
    p = len(placement)
    if p == 1:
        return FastResult(0.0, True, "", "ring-symmetric")
    parts = split_bytes(size_bytes, channels)
    orders = [ring_order(p, c, local_ranks, channels) for c in range(channels)]
    src = np.concatenate(orders)
    dst = np.concatenate([np.roll(order, -1) for order in orders])
    nodes = list(placement)
    paths = _Paths(graph)
    ptr, res, lat = paths.route([nodes[s] for s in src.tolist()],
                                [nodes[d] for d in dst.tolist()])
    if np.any(np.diff(ptr) == 0):
        raise NotApplicable("two ring neighbours share a device")
    rs_steps = p - 1 if collective in ("allreduce", "reduce_scatter") else 0
    ag_steps = p - 1 if collective in ("allreduce", "allgather") else 0
    reduce_rate = np.full(len(dst), np.inf)
    if rs_steps and reduce_compute:
        rate_of = {}
        for d in set(dst.tolist()):
            rate_of[d] = float(graph.nodes[nodes[d]].get("reduce_bytes_per_s", math.inf))
        reduce_rate = np.array([rate_of[d] for d in dst.tolist()])
    return _RingPlan(p=p, parts=parts, orders=orders, src=src, dst=dst, nodes=nodes,
                     paths=paths, ptr=ptr, res=res, latency_s=lat, capacity=paths.caps(),
                     rs_steps=rs_steps, ag_steps=ag_steps, reduce_rate=reduce_rate)


def _ring(plan: _RingPlan) -> FastResult:
    """Symmetric ring: one wave of the ``p·C`` connections gives every step (module
    docstring); raises :class:`_Asymmetric` when chunks differ in size or ranks complete a
    step at different times."""
    method = "ring-symmetric"
    solves = 0
    chunk = plan.chunk_bytes
    if chunk is None:
        raise _Asymmetric(f"chunks differ in size ({int(plan.parts.sum())} bytes is not a "
                          f"multiple of {len(plan.orders)} channel(s) x {plan.p} ranks): "
                          f"ranks do not complete steps together")
    if chunk > 0:
        drain, solves = max_min_wave(np.full(len(plan.src), float(chunk)), plan.ptr,
                              plan.res, np.arange(len(plan.src)), plan.capacity, 0.0)
    else:
        drain = np.zeros(len(plan.src))
    delivered = drain + plan.latency_s
    t_rs = t_ag = 0.0
    if plan.rs_steps:
        plan.check_one_reduction_per_device()
        t_rs = _same_instant(delivered + chunk / plan.reduce_rate)
    if plan.ag_steps:
        t_ag = _same_instant(delivered)
    return plan.result(plan.rs_steps * t_rs + plan.ag_steps * t_ag, method, solves)


def _same_instant(done: np.ndarray) -> float:
    hi = float(done.max())
    if hi - float(done.min()) > SAME * hi:
        raise _Asymmetric("ranks complete a ring step at different times (asymmetric "
                          "links): later steps do not start together")
    return hi


def _ring_recurrence(plan: _RingPlan) -> FastResult:
    """Ring recurrence: every connection's times, step by step, as the engine computes them.

    Applies (checked) when every connection's rate is fixed whatever else is active (see
    :func:`_fixed_rates`) and no device reduces more than one chunk per step. Channels with
    the same rank order and the same bytes are evaluated once (their connections run in
    lockstep). Any chunk sizes: the bytes each connection sends in a step are a rotation of its
    channel's chunk sizes. ``O(p·C)`` state, ``2(p-1)`` vectorised steps.
    """
    method = "ring-recurrence"
    p = plan.p
    # channels with the same order and bytes run in lockstep: one row each, weighted by its
    # multiplicity (same order, other bytes: separate rows, which share every resource)
    first: dict[tuple, int] = {}
    weight: list[int] = []
    rows: list[int] = []                    # the first channel of every distinct (order, bytes)
    for c, order in enumerate(plan.orders):
        key = (order.tobytes(), int(plan.parts[c]))
        if key in first:
            weight[first[key]] += 1
        else:
            first[key] = len(rows)
            rows.append(c)
            weight.append(1)
    plan.check_one_reduction_per_device()
    reducing = np.isfinite(plan.reduce_rate) & (np.repeat(plan.parts, p) > 0)
    conn = (np.asarray(rows)[:, None] * p + np.arange(p)[None, :]).ravel()
    r_ptr, r_res = gather_csr(plan.ptr, plan.res, conn)
    rate = _fixed_rates(r_ptr, r_res, np.repeat(np.asarray(weight, dtype=np.float64), p),
                        plan, conn)
    shape = (len(rows), p)
    rate = rate.reshape(shape)
    latency_s = plan.latency_s[conn].reshape(shape)
    reduce_rate = plan.reduce_rate[conn].reshape(shape)
    reduces = bool(plan.rs_steps) and bool(np.any(reducing[conn]))
    chunk = plan.chunk_bytes
    if chunk is not None:
        chunks = queue = None               # every step moves the same bytes
        xfer_s = chunk / rate
        reduce_s = chunk / reduce_rate if reduces else None
    else:
        sizes = plan.chunk_sizes(rows)
        # chunk sizes twice over: step k's bytes are a contiguous window (a view, no p x 2(p-1)
        # table)
        chunks = np.concatenate([sizes, sizes], axis=1).astype(np.float64)
        xfer_s = np.empty(shape)
        reduce_s = np.empty(shape) if reduces else None
        # 0-byte reductions are not queued: the receivers' queues then free at their last
        # reduction, not at the previous completion
        queue = np.zeros(shape) if reduces and np.any(sizes == 0) else None
    drain = np.zeros(shape)      # drain of the connection's previous transfer (FIFO)
    done = np.zeros(shape)       # completion of the connection's previous transfer
    start = np.empty(shape)
    time_s = 0.0
    if plan.rs_steps:
        _ring_steps(drain, done, start, xfer_s, latency_s, reduce_s, plan.rs_steps,
                    chunks=chunks, rate=rate, reduce_rate=reduce_rate, first_offset=-1,
                    queue=queue)
        time_s = float(done.max())
    if plan.ag_steps:
        _ring_steps(drain, done, start, xfer_s, latency_s, None, plan.ag_steps,
                    chunks=chunks, rate=rate, first_offset=0)
        time_s = max(time_s, float(done.max()))
    return plan.result(time_s, method, 0)


def _ring_steps(drain, done, start, xfer_s, latency_s, reduce_s, steps: int, *,
                chunks=None, rate=None, reduce_rate=None, first_offset: int = 0,
                queue=None) -> None:
    """Advance ``steps`` ring steps in place. Row ``r``, column ``j``: the connection from
    position ``j`` of an order to position ``j+1``; the chunk position ``j`` forwards arrived
    over connection ``j-1`` in the previous step.

    start = max(drain of the previous transfer on the connection, completion of the previous
    step's transfer into the sender); drain = start + bytes / rate; delivery = drain + latency;
    completion = delivery, or for reductions max(delivery, the receiver's queue free) + bytes /
    reduce_rate (each receiver's queue holds only its connection's reductions, so it frees at
    the connection's last reduction; a 0-byte reduction is not queued, as in the engine:
    completion = delivery).

    ``chunks is None``: every step moves the bytes behind ``xfer_s`` and ``reduce_s`` (None: no
    reductions). Else ``chunks`` holds each row's chunk sizes twice over, position ``j`` sends
    chunk ``(j + first_offset - k) mod p`` at step ``k`` of the phase, and ``xfer_s`` and
    ``reduce_s`` (None: no reductions) are work arrays refilled every step. ``queue`` (state,
    like ``drain`` and ``done``; needed when some chunks are 0 bytes): when each receiver's
    compute queue frees; None: at the connection's previous completion.
    """
    maximum, add, divide = np.maximum, np.add, np.divide
    head_drain, tail_done, head_start = drain[:, :1], done[:, -1:], start[:, :1]
    rest_drain, prev_done, rest_start = drain[:, 1:], done[:, :-1], start[:, 1:]
    p = drain.shape[1]
    if reduce_s is None:
        queue = None
    elif queue is not None:
        blank2 = chunks == 0             # 0-byte chunks, twice over like ``chunks``
        kept2 = ~blank2
    for k in range(steps):
        maximum(rest_drain, prev_done, out=rest_start)
        maximum(head_drain, tail_done, out=head_start)
        if chunks is not None:
            o = (first_offset - k) % p
            step_bytes = chunks[:, o:o + p]
            divide(step_bytes, rate, out=xfer_s)
            if reduce_s is not None:
                divide(step_bytes, reduce_rate, out=reduce_s)
        add(start, xfer_s, out=drain)
        if reduce_s is None:
            add(drain, latency_s, out=done)
        elif queue is None:
            add(drain, latency_s, out=start)           # delivery
            maximum(start, done, out=done)             # queue free = previous completion
            add(done, reduce_s, out=done)
        else:
            add(drain, latency_s, out=start)           # delivery
            maximum(start, queue, out=done)
            add(done, reduce_s, out=done)
            np.copyto(done, start, where=blank2[:, o:o + p])   # not queued: done on delivery
            np.copyto(queue, done, where=kept2[:, o:o + p])


def _fixed_rates(ptr, res, weight, plan: _RingPlan, conn: np.ndarray) -> np.ndarray:
    """Rate of every ring flow when it provably does not depend on which others are active.

    Flow ``f`` stands for ``weight[f]`` identical connections that always run together. A
    resource crossed by one flow only is *exclusive* to it; ``u_f`` = the smallest capacity of
    its exclusive resources / ``weight[f]``. If every flow has an exclusive resource and every
    shared resource has ``capacity >= sum(weight·u)`` over the flows crossing it, then for any
    set of active flows the max-min fair rate of each is ``u_f``: its exclusive bottleneck is
    saturated by it alone, and no shared resource can saturate. Otherwise NotApplicable.
    ``conn[f]``: the connection of ``plan`` flow ``f`` stands for (for messages).
    """
    capacity = plan.capacity
    n = len(ptr) - 1
    inc_flow = np.repeat(np.arange(n), np.diff(ptr))
    users = np.bincount(res, minlength=len(capacity))
    exclusive = users[res] == 1
    rate = np.full(n, np.inf)
    np.minimum.at(rate, inc_flow[exclusive], capacity[res[exclusive]])
    rate /= weight
    lacking = np.flatnonzero(~np.isfinite(rate))
    if len(lacking):
        k = int(conn[lacking[0]])
        raise NotApplicable(
            f"ring connection {plan.src[k]}->{plan.dst[k]} (channel {k // plan.p}) shares "
            f"every resource on its path with other ring connections: its rate depends on "
            f"which of them are active")
    load = np.bincount(res, weights=(weight * rate)[inc_flow], minlength=len(capacity))
    over = np.flatnonzero((users > 1) & (load > capacity * (1 + SAME)))
    if len(over):
        r = int(over[np.argmax(load[over] / capacity[over])])
        sharing = int(np.bincount(res, weights=weight[inc_flow], minlength=len(capacity))[r])
        raise NotApplicable(
            f"{sharing} ring connections share {plan.paths.keys[r]} ({capacity[r]:.6g} B/s), "
            f"which their own bottlenecks would oversubscribe ({load[r]:.6g} B/s): their "
            f"rates depend on which of them are active")
    return rate
