"""Fast path: the event engine's answer without simulating events, where it provably applies.

The event engine (:mod:`.runner` on :mod:`.network`) handles every schedule, but pays Python
work per transfer and per event: a ring all-reduce over ``p`` ranks is ``2p(p-1)`` transfers,
a billion at 16,384 ranks. Most collectives run with ``--slices 1`` are *step-synchronous*, and
for those the event run has a structure that can be computed directly, with arrays (DESIGN.md
section 5). This module does that, and checks, on the computed times themselves, every
condition under which the shortcut equals the event run. When a check fails it says which
(:class:`NotApplicable`, or ``FastResult.applicable = False``) and the caller uses the engine.

Step-synchronous analysis (:func:`fast_time`, any schedule)
-----------------------------------------------------------
The schedule's ``step`` labels are used as layers, after checking that they are layers: every
data-flow dependency, FIFO predecessor and barrier of a step-``k`` transfer lies in an earlier
step. Steps are then processed in order with the engine's own recurrence:

* start = max(completion of its data-flow predecessors, opening of its barrier epoch,
  drain of the previous transfer on its FIFO connection);
* drain = start + time to push its bytes at the max-min fair rates of the flows it runs with;
* delivery = drain + path latency; completion = delivery + reduction on the receiver's FIFO
  compute queue (``reduce_bytes_per_s``).

The max-min rates of a step come from a *wave*: the step's flows, solved together by
progressive filling, then re-solved at each departure (flows that finish early speed up the
rest, exactly as the engine's re-solves do). Flows alone on all their resources skip the solve
(their rate is their path's smallest capacity), and identical flows (same path, same bytes) are
aggregated into one weighted flow, a resource shared by ``w`` of them giving each ``1/w`` of
what it has left. The wave is exact when the flows the engine would see together are exactly
the ones solved together. That holds when

1. the flows of one step that share a resource start at the same instant (else the step is
   split into groups by start time, each its own wave), and
2. on every resource, the busy intervals ``[start, drain)`` of different waves never overlap
   (checked per resource, in the order the steps are processed; an earlier-step wave that uses a
   resource *after* a later-step one counts as an overlap too, which is conservative).

Under (1) and (2) the connected component of any active flow in the event run contains only
flows of its own wave, and max-min rates depend on nothing outside a component, so every rate,
drain, delivery and completion agrees with the engine. Reductions queue FIFO per device in
delivery order (a later step's reduction reaching a device before an earlier step's is
refused). Deliveries to one device that tie (within 1e-9 relative) may be served in either
order, so the last completion of the group is order-free but not who finishes first: a transfer
waiting for the whole group is exact, and one waiting for part of it is accepted only when its
start is the same with the earliest completion the tied transfers could have (its other
predecessors decide). Data-flow dependencies that cross a ``sync`` barrier are implied by the
barrier and are dropped (dependencies are derived per barrier epoch), which keeps a
bulk-synchronous parameter server at ``O(N)`` dependencies instead of ``O(N^2)``.

Aligned steps (:func:`aligned_time`, tried first, no dependency graph)
---------------------------------------------------------------------
When the steps run in lockstep the dependency graph is not needed at all. If the list is sorted
by step, no two transfers of a step touch the same (rank, chunk) with a write or share a FIFO
connection (so every dependency points to an earlier step), and every transfer of a step either
reads a chunk written in the previous step, which ended at one instant ``T`` on every rank, or
starts behind a barrier, then every transfer of the step starts at ``T``, and the collective is
the sum of one wave per step. Chunk *intervals* are compared, not chunks, which keeps
halving-doubling at 16,384 ranks (transfers of up to 8,192 chunks) at the cost of its 458,752
transfers, where the chunk-level dependency graph would need half a billion accesses.

What passes: ring, halving-doubling, binomial tree, NCCL tree (whole message), direct, parameter
server phases, on uncontended topologies (star, non-blocking fat tree, an NVSwitch machine) and
on contended ones whenever the waves stay apart. What fails (checked, not assumed): pipelined
schedules (``slices > 1``, segmented trees and the double binary tree), whose FIFO slices of
successive steps share links at the same time, and contended cases where a fast flow's
successor starts while a slow flow of the previous step still holds a link.

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

import dataclasses
import math
from dataclasses import dataclass

import networkx as nx
import numpy as np

from ..errors import TopologyError
from .common import FastResult, NotApplicable, _Paths, _reduce_totals
from ..schedules.base import Schedule, split_bytes
from ..schedules.deps import dependencies, epochs

#: Start times within this relative distance count as the same instant.
_SAME = 1e-12
#: Deliveries to one device within this relative distance count as a tie (order ambiguous).
_TIE = 1e-9
#: Relative tolerance under which a flow counts as drained (the engine's ``_EPS``).
_EPS = 1e-12


def _ragged_arange(counts: np.ndarray) -> np.ndarray:
    total = int(counts.sum())
    starts = np.repeat(np.cumsum(counts) - counts, counts)
    return np.arange(total, dtype=np.int64) - starts


def _segment_max(values: np.ndarray, ptr: np.ndarray, empty: float = 0.0) -> np.ndarray:
    """Max of ``values[ptr[i]:ptr[i+1]]`` per segment (``empty`` for empty segments)."""
    counts = np.diff(ptr)
    out = np.full(len(counts), empty)
    nonempty = counts > 0
    if values.size:
        out[nonempty] = np.maximum.reduceat(values, ptr[:-1][nonempty])
    return out


def _gather_csr(ptr: np.ndarray, idx: np.ndarray, rows: np.ndarray):
    """Rows ``rows`` of a CSR matrix, as a new CSR ``(ptr, idx)``."""
    counts = ptr[rows + 1] - ptr[rows]
    new_ptr = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(counts, out=new_ptr[1:])
    flat = np.repeat(ptr[rows], counts) + _ragged_arange(counts)
    return new_ptr, idx[flat]


# -- max-min fair rates --------------------------------------------------------------------------
def max_min_weighted(inc_flow: np.ndarray, inc_res: np.ndarray, weight: np.ndarray,
                     capacity: np.ndarray, flows: int) -> np.ndarray:
    """Max-min fair rate of each (weighted) flow, by vectorised progressive filling.

    ``inc_flow[k]`` crosses resource ``inc_res[k]`` (ids ``0 .. len(capacity)-1``); flow ``f``
    stands for ``weight[f]`` identical flows, so it counts ``weight[f]`` times on each of its
    resources and the rate returned is that of each of them. With unit weights this is the
    algorithm of :func:`~simulator.engine.network.max_min_rates_vector`: each round freezes,
    at the smallest fair share, every flow crossing a resource that offers it.
    """
    n_res = len(capacity)
    w_inc = weight[inc_flow].astype(np.float64)
    left = capacity.astype(np.float64).copy()
    count = np.bincount(inc_res, weights=w_inc, minlength=n_res)
    rates = np.zeros(flows)
    frozen = np.zeros(flows, dtype=bool)
    active = np.ones(len(inc_res), dtype=bool)
    while True:
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.where(count > 0, np.maximum(left, 0.0) / count, np.inf)
        level = share.min()
        if not np.isfinite(level):
            break
        tight = share <= level * (1 + 1e-12)
        hit = active & tight[inc_res]
        newly = np.zeros(flows, dtype=bool)
        newly[inc_flow[hit]] = True
        newly &= ~frozen
        rates[newly] = level
        frozen |= newly
        if frozen.all():
            break
        leaving = active & newly[inc_flow]
        used = np.bincount(inc_res[leaving], weights=w_inc[leaving], minlength=n_res)
        left -= used * level
        count -= used
        active &= ~leaving
    return rates


def _wave(nbytes: np.ndarray, ptr: np.ndarray, res: np.ndarray, path_id: np.ndarray,
          capacity: np.ndarray, t0: float) -> tuple[np.ndarray, int]:
    """Drain time (after their common start) of flows that start together and run alone.

    ``ptr``/``res``: CSR of each flow's global resource ids; ``path_id`` identifies identical
    paths (for aggregation). Progressive: solve, advance to the next departure, re-solve.
    Returns the elapsed drain time of each flow and the number of solves.
    """
    n = len(nbytes)
    lengths = np.diff(ptr)
    inc_flow = np.repeat(np.arange(n), lengths)
    res_u, inc_loc = np.unique(res, return_inverse=True)
    cnt = np.bincount(inc_loc, minlength=len(res_u))
    cap_inc = capacity[res]
    alone = np.bincount(inc_flow[cnt[inc_loc] > 1], minlength=n) == 0
    elapsed = np.empty(n)
    if alone.any():
        # a flow alone on its resources gets its smallest capacity for the whole wave
        min_cap = np.minimum.reduceat(cap_inc, ptr[:-1])
        elapsed[alone] = nbytes[alone] / min_cap[alone]
    rest = np.flatnonzero(~alone)
    if not len(rest):
        return elapsed, 0
    # aggregate identical flows (same path, same bytes) into weighted representatives
    order = rest[np.lexsort((nbytes[rest], path_id[rest]))]
    new = np.ones(len(order), dtype=bool)
    new[1:] = (path_id[order[1:]] != path_id[order[:-1]]) | (nbytes[order[1:]]
                                                               != nbytes[order[:-1]])
    group = np.cumsum(new) - 1
    reps = order[new]
    weight = np.bincount(group).astype(np.float64)
    g_ptr, g_res = _gather_csr(ptr, inc_loc, reps)
    g = len(reps)
    g_flow = np.repeat(np.arange(g), np.diff(g_ptr))
    caps_loc = capacity[res_u]
    remaining = nbytes[reps].astype(np.float64)
    done = np.empty(g)
    live = np.ones(g, dtype=bool)
    tau, solves = 0.0, 0
    while live.any():
        ids = np.flatnonzero(live)
        keep = live[g_flow]
        remap = np.full(g, -1, dtype=np.int64)
        remap[ids] = np.arange(len(ids))
        rates = max_min_weighted(remap[g_flow[keep]], g_res[keep], weight[ids], caps_loc,
                                 len(ids))
        solves += 1
        dt = remaining[ids] / rates
        t_next = tau + dt.min()
        limit = t_next + _EPS * max(1.0, abs(t0 + t_next))
        finishing = tau + dt <= limit
        remaining[ids] -= rates * (t_next - tau)
        done[ids[finishing]] = t_next
        live[ids[finishing]] = False
        tau = t_next
    elapsed[order] = done[group]
    return elapsed, solves


# -- step-synchronous analysis -------------------------------------------------------------------
def _epoch_dependencies(schedule: Schedule, epoch: np.ndarray):
    """Data-flow dependencies inside each barrier epoch (CSR); cross-epoch ones are implied by
    the barrier. Dependencies derive from accesses to the same (rank, chunk), so those between
    two transfers of one epoch are the same whether derived from the whole list or the epoch's
    rows alone (the rows of an epoch are contiguous)."""
    n = len(schedule)
    if int(epoch[-1]) == 0:
        return dependencies(schedule)
    bounds = np.searchsorted(epoch, np.arange(int(epoch[-1]) + 2))
    ptrs, idxs, offset = [np.zeros(1, dtype=np.int64)], [], 0
    for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        if hi == lo:
            continue
        cols = {name: getattr(schedule, name)[lo:hi]
                for name in ("src", "dst", "src_chunk", "dst_chunk", "nchunks", "reduce",
                             "step", "phase", "channel", "sync")}
        ptr, idx = dependencies(dataclasses.replace(schedule, **cols))
        ptrs.append(ptr[1:] + offset)
        idxs.append(idx + lo)
        offset += len(idx)
    indptr = np.concatenate(ptrs)
    assert len(indptr) == n + 1
    return indptr, (np.concatenate(idxs) if idxs else np.zeros(0, dtype=np.int64))


#: Chunk accesses above which the step-synchronous analysis declines (its dependency graph
#: is derived chunk by chunk, as the event engine's is).
MAX_ACCESSES = 60_000_000


def fast_time(schedule: Schedule, graph: nx.DiGraph, placement,
              reduce_compute: bool = True) -> FastResult:
    """Time of ``schedule`` alone on ``graph`` (rank ``r`` on ``placement[r]``): the
    aligned-steps analysis when the steps run in lockstep, else the step-synchronous analysis;
    ``applicable=False`` with the reasons when neither can be proved equal to the event engine
    (see the module docstring)."""
    aligned = aligned_time(schedule, graph, placement, reduce_compute)
    if aligned.applicable:
        return aligned
    result = _unaligned_time(schedule, graph, placement, reduce_compute)
    if result.applicable:
        return result
    return dataclasses.replace(result, reason=f"{aligned.method}: {aligned.reason}; "
                                              f"step-synchronous: {result.reason}")


def _unaligned_time(schedule: Schedule, graph: nx.DiGraph, placement,
                    reduce_compute: bool) -> FastResult:
    """The step-synchronous analysis (what times unaligned steps without numba)."""
    accesses = 2 * int(schedule.nchunks.sum())
    if accesses > MAX_ACCESSES:
        return FastResult(math.nan, False, f"{accesses:,} chunk accesses are too many for the "
                          f"dependency graph (limit {MAX_ACCESSES:,})", "step-synchronous")
    try:
        return _step_synchronous(schedule, graph, tuple(placement), reduce_compute)
    except NotApplicable as exc:
        return FastResult(math.nan, False, str(exc), "step-synchronous")


def _step_synchronous(schedule: Schedule, graph: nx.DiGraph, placement: tuple,
                      reduce_compute: bool) -> FastResult:
    method = "step-synchronous"
    n = len(schedule)
    if len(placement) < schedule.total_ranks:
        raise TopologyError(f"schedule needs {schedule.total_ranks} ranks, "
                            f"placement has {len(placement)}")
    if n == 0:
        return FastResult(0.0, True, "", method)
    if schedule.sync[0]:
        raise NotApplicable("the first transfer is a barrier")
    step = schedule.step.astype(np.int64)
    nbytes = schedule.transfer_bytes.astype(np.int64)
    epoch = epochs(schedule)
    n_epochs = int(epoch[-1]) + 1
    indptr, indices = _epoch_dependencies(schedule, epoch)
    owner = np.repeat(np.arange(n), np.diff(indptr))
    if len(indices) and np.any(step[indices] >= step[owner]):
        raise NotApplicable("a transfer depends on a transfer of the same or a later step "
                            "(steps are not layers)")
    # FIFO connections (src, dst, channel) and each transfer's predecessor on its connection
    ranks = schedule.total_ranks
    chan = schedule.channel.astype(np.int64)
    key = (schedule.src.astype(np.int64) * ranks + schedule.dst) * (int(chan.max()) + 1) + chan
    conn_key, conn = np.unique(key, return_inverse=True)
    by_conn = np.argsort(conn, kind="stable")
    pred = np.full(n, -1, dtype=np.int64)
    same = conn[by_conn[1:]] == conn[by_conn[:-1]]
    pred[by_conn[1:][same]] = by_conn[:-1][same]
    has_pred = pred >= 0
    if np.any(step[pred[has_pred]] >= step[has_pred]):
        raise NotApplicable("two transfers of one step share a FIFO connection (pipelined "
                            "slices or segments)")
    if n_epochs > 1:
        bounds = np.searchsorted(epoch, np.arange(n_epochs + 1))
        sizes = np.diff(bounds)
        lo_step = np.full(n_epochs, np.iinfo(np.int64).max)
        hi_step = np.full(n_epochs, np.iinfo(np.int64).min)
        ne = sizes > 0
        lo_step[ne] = np.minimum.reduceat(step, bounds[:-1][ne])
        hi_step[ne] = np.maximum.reduceat(step, bounds[:-1][ne])
        if np.any(lo_step[1:][ne[1:]] <= np.maximum.accumulate(hi_step)[:-1][ne[1:]]):
            raise NotApplicable("a barrier epoch shares a step with an earlier epoch")
    # paths of the connections
    conn_src = conn_key // (int(chan.max()) + 1) // ranks
    conn_dst = conn_key // (int(chan.max()) + 1) % ranks
    pair_key = conn_src * ranks + conn_dst
    pairs, path_id = np.unique(pair_key, return_inverse=True)
    paths = _Paths(graph)
    nodes = list(placement)
    p_ptr, p_res, p_lat = paths.route([nodes[int(k) // ranks] for k in pairs],
                                      [nodes[int(k) % ranks] for k in pairs])
    capacity = paths.caps()
    # reduction work: device index of each rank, duration of each reducing transfer
    device_names = sorted(set(nodes[:ranks]))
    device_of = {d: i for i, d in enumerate(device_names)}
    rank_dev = np.array([device_of[nodes[r]] for r in range(ranks)], dtype=np.int64)
    rate = np.full(ranks, np.inf)
    if reduce_compute:
        rate = np.array([float(graph.nodes[nodes[r]].get("reduce_bytes_per_s", math.inf))
                         for r in range(ranks)])
    with np.errstate(divide="ignore", invalid="ignore"):
        dur = np.where(schedule.reduce & np.isfinite(rate[schedule.dst]),
                       nbytes / rate[schedule.dst], 0.0)
    # everything in step order ("positions")
    perm = np.argsort(step, kind="stable")
    inv = np.empty(n, dtype=np.int64)
    inv[perm] = np.arange(n)
    d_ptr, d_idx = _gather_csr(indptr, indices, perm)
    d_pos = inv[d_idx]
    q_conn = conn[perm]
    q_path = path_id[q_conn]
    q_lat = p_lat[q_path]
    q_bytes = nbytes[perm]
    q_len = np.diff(p_ptr)[q_path]
    q_net = (q_bytes > 0) & (q_len > 0)
    q_dur = dur[perm]
    q_dev = rank_dev[schedule.dst[perm]]
    q_epoch = epoch[perm]
    q_pred = np.where(pred[perm] >= 0, inv[np.maximum(pred[perm], 0)], -1)
    t_drain = np.full(n, np.nan)
    t_done = np.full(n, np.nan)
    t_early = np.full(n, np.nan)         # tied reductions: completion if served first
    tie_of = np.full(n, -1, dtype=np.int64)
    tie_size: list[int] = []
    epoch_done = np.full(n_epochs, -np.inf)
    busy_until = np.zeros(len(capacity))
    dev_free = np.zeros(len(device_names))
    dev_last = np.full(len(device_names), -np.inf)
    q_step = step[perm]
    cuts = np.flatnonzero(np.diff(q_step)) + 1
    block_lo = np.concatenate(([0], cuts))
    block_hi = np.concatenate((cuts, [n]))
    solves = 0
    for a, b in zip(block_lo.tolist(), block_hi.tolist()):
        # -- start times
        base = np.zeros(b - a)
        pr = q_pred[a:b]
        hp = pr >= 0
        if hp.any():
            base[hp] = t_drain[pr[hp]]
        if n_epochs > 1:
            opened = np.concatenate(([0.0], np.maximum.accumulate(epoch_done)))
            base = np.maximum(base, opened[q_epoch[a:b]])
        dp = d_pos[d_ptr[a]:d_ptr[b]]
        seg = d_ptr[a:b + 1] - d_ptr[a]
        values = t_done[dp]
        start = np.maximum(base, _segment_max(values, seg))
        if tie_size:
            start = _tie_checked(start, base, dp, seg, values, t_early, tie_of,
                                 np.asarray(tie_size))
        # -- drain times: waves of network flows
        drain = start.copy()
        net = np.flatnonzero(q_net[a:b])
        if len(net):
            f_ptr, f_res = _gather_csr(p_ptr, p_res, q_path[a + net])
            elapsed, k = _step_waves(start[net], q_bytes[a + net].astype(np.float64), f_ptr,
                                     f_res, q_path[a + net], capacity)
            solves += k
            drain[net] = start[net] + elapsed
            _check_overlap(busy_until, f_ptr, f_res, start[net], drain[net])
        t_drain[a:b] = drain
        delivered = drain + q_lat[a:b]
        # -- reductions on the receivers' FIFO queues
        done = delivered.copy()
        red = np.flatnonzero(q_dur[a:b] > 0)
        if len(red):
            done[red], early, ties = _reduce_queue(a + red, delivered[red], q_dur, q_dev,
                                                   dev_free, dev_last)
            for grp in ties:
                tie_of[grp] = len(tie_size)
                tie_size.append(len(grp))
            if ties:
                t_early[a + red] = early
        t_done[a:b] = done
        if n_epochs > 1:
            np.maximum.at(epoch_done, q_epoch[a:b], done)
    # bytes carried per resource (flows of zero bytes or without links carry nothing)
    conn_bytes = np.bincount(conn, weights=np.where(nbytes > 0, nbytes, 0),
                             minlength=len(conn_key))
    pair_bytes = np.bincount(path_id, weights=conn_bytes, minlength=len(pairs))
    res_bytes = np.bincount(p_res, weights=np.repeat(pair_bytes, np.diff(p_ptr)),
                            minlength=len(capacity))
    return FastResult(float(t_done.max()), True, "", method, steps=len(block_lo),
                      solves=solves, links=paths.table(res_bytes),
                      bytes_sent=float(nbytes.sum()),
                      reduce_s=_reduce_totals(nodes[:ranks], schedule.dst, dur))


def _step_waves(start, nbytes, ptr, res, path_id, capacity) -> tuple[np.ndarray, int]:
    """Elapsed drain times of one step's network flows, as one wave per group of flows that
    share resources and start together; flows sharing a resource at different starts are split
    into one wave per start time (their non-overlap is then checked like any other)."""
    inc_flow = np.repeat(np.arange(len(start)), np.diff(ptr))
    order = np.argsort(res, kind="stable")
    r_sorted = res[order]
    s_sorted = start[inc_flow[order]]
    heads = np.flatnonzero(np.concatenate(([True], r_sorted[1:] != r_sorted[:-1])))
    lo = np.minimum.reduceat(s_sorted, heads)
    hi = np.maximum.reduceat(s_sorted, heads)
    if np.all(hi - lo <= _SAME * np.abs(hi)):
        return _wave(nbytes, ptr, res, path_id, capacity, float(start.max()))
    elapsed = np.empty(len(start))
    solves = 0
    by_start = np.argsort(start, kind="stable")
    s = start[by_start]
    cut = np.flatnonzero(s[1:] - s[:-1] > _SAME * np.abs(s[1:])) + 1
    for group in np.split(by_start, cut):
        g_ptr, g_res = _gather_csr(ptr, res, group)
        e, k = _wave(nbytes[group], g_ptr, g_res, path_id[group], capacity,
                     float(start[group].max()))
        elapsed[group] = e
        solves += k
    return elapsed, solves


def _check_overlap(busy_until, ptr, res, start, drain) -> None:
    """Condition (2): on every resource, this step's waves begin after everything earlier on it
    has drained and do not overlap each other; then extend the resources' busy time."""
    inc_flow = np.repeat(np.arange(len(start)), np.diff(ptr))
    s = start[inc_flow]
    e = drain[inc_flow]
    order = np.lexsort((s, res))
    r, s, e = res[order], s[order], e[order]
    new_group = np.ones(len(r), dtype=bool)
    new_group[1:] = (r[1:] != r[:-1]) | (s[1:] - s[:-1] > _SAME * np.abs(s[1:]))
    heads = np.flatnonzero(new_group)
    g_res, g_start = r[heads], s[heads]
    g_end = np.maximum.reduceat(e, heads)
    first = np.ones(len(heads), dtype=bool)
    first[1:] = g_res[1:] != g_res[:-1]
    before = np.where(first, busy_until[g_res], np.concatenate(([0.0], g_end[:-1])))
    if np.any(g_start < before - _SAME * np.abs(g_start)):
        raise NotApplicable("flows of different steps (or start times) would share a link at "
                            "the same time: the steps overlap")
    np.maximum.at(busy_until, g_res, g_end)


def _tie_checked(start, base, dp, seg, values, t_early, tie_of, tie_size) -> np.ndarray:
    """Start times when some predecessors are reductions that tied on a device queue.

    ``start`` assumes every tied reduction ends when its group ends, which is exact for a
    transfer that waits for the whole group. A transfer that waits for only part of a group
    could start earlier, depending on the order the engine serves the tie in; that is allowed
    only when its other constraints make the order irrelevant (the start is the same with the
    earliest possible completions)."""
    group = tie_of[dp]
    tied = group >= 0
    if not tied.any():
        return start
    owner = np.repeat(np.arange(len(start)), np.diff(seg))
    edge_owner, edge_group = owner[tied], group[tied]
    pair = edge_owner * (len(tie_size) + 1) + edge_group
    _u, inverse, count = np.unique(pair, return_inverse=True, return_counts=True)
    whole = count[inverse] == tie_size[edge_group]
    low = values.copy()
    low[tied] = np.where(whole, values[tied], t_early[dp[tied]])
    start_low = np.maximum(base, _segment_max(low, seg))
    if np.any(start_low < start - _SAME * np.abs(start)):
        raise NotApplicable("reductions tie on one device's queue and the order the engine "
                            "serves them in decides when a dependent transfer starts")
    return start


def _reduce_queue(pos, delivered, q_dur, q_dev, dev_free, dev_last):
    """Completion times of reducing transfers ``pos`` on their devices' FIFO compute queues.

    Returns ``(done, earliest, ties)``. Deliveries to one device that tie (within 1e-9
    relative) may be served in any order: each tied transfer gets the group's last completion
    in ``done`` (what a dependent of all of them waits for), the completion it would have if
    served first in ``earliest``, and the groups are listed in ``ties`` (see
    :func:`_step_synchronous` for how dependents are checked against them)."""
    dev = q_dev[pos]
    dur = q_dur[pos]
    if np.any(delivered <= dev_last[dev] * (1 + _TIE)):
        raise NotApplicable("a device receives a reduction of a later step before (or together "
                            "with) one of an earlier step")
    done = np.empty(len(pos))
    uniq, counts = np.unique(dev, return_counts=True)
    single = counts[np.searchsorted(uniq, dev)] == 1
    if single.any():
        d = dev[single]
        begin = np.maximum(delivered[single], dev_free[d])
        done[single] = begin + dur[single]
        dev_free[d] = done[single]
        dev_last[d] = delivered[single]
    earliest = done.copy()
    ties = []
    for u in uniq[counts > 1].tolist():
        idx = np.flatnonzero(dev == u)
        idx = idx[np.lexsort((pos[idx], delivered[idx]))]
        dl = delivered[idx]
        tie = np.concatenate(([False], dl[1:] - dl[:-1] <= _TIE * np.abs(dl[1:])))
        free = dev_free[u]
        for grp in np.split(idx, np.flatnonzero(~tie)[1:]):
            first_free = free
            for k in grp.tolist():
                free = max(delivered[k], free) + dur[k]
                done[k] = free
            if len(grp) > 1:
                earliest[grp] = np.maximum(delivered[grp], first_free) + dur[grp]
                done[grp] = free
                ties.append(pos[grp])
            else:
                earliest[grp] = done[grp]
        dev_free[u] = free
        dev_last[u] = dl[-1]
    return done, earliest, ties


# -- aligned steps (no dependency graph) ---------------------------------------------------------
def _overlaps(a_key, a_lo, a_hi, b_key, b_lo, b_hi) -> np.ndarray:
    """For each interval ``[a_lo, a_hi)`` under key ``a_key``: does it overlap an interval of
    ``b`` under the same key? Intervals of chunk ids; keys and ids are non-negative ints."""
    if not len(b_key) or not len(a_key):
        return np.zeros(len(a_key), dtype=bool)
    span = int(max(b_hi.max(), a_hi.max())) + 1
    order = np.lexsort((b_lo, b_key))
    code = b_key[order] * span + b_lo[order]
    # running max of hi over b sorted by (key, lo), made key-local by the key offset
    best = np.maximum.accumulate(b_key[order] * span + b_hi[order])
    # b intervals of the same key starting before a_hi: positions [.., pos)
    pos = np.searchsorted(code, a_key * span + a_hi, side="left")
    found = np.zeros(len(a_key), dtype=bool)
    has = pos > 0
    top = best[pos[has] - 1] - a_key[has] * span          # max hi among them (if same key)
    found[has] = top > a_lo[has]
    return found


def aligned_time(schedule: Schedule, graph: nx.DiGraph, placement,
                 reduce_compute: bool = True) -> FastResult:
    """Time of a schedule whose steps run in lockstep, without its dependency graph.

    Applies when (checked) the list is sorted by step, no two transfers of a step conflict on a
    (rank, chunk) or share a FIFO connection (so every dependency points to an earlier step),
    and each step after the first either opens a barrier epoch or has every transfer read a
    chunk written in the previous step, which then completed at one instant on every rank.
    Then every transfer of a step starts at the instant ``T`` its previous step ended, the
    step is one wave, and the collective takes the sum of the waves. Intervals of chunks are
    compared instead of single chunks, so halving-doubling at 16,384 ranks (whose transfers
    carry up to 8,192 chunks) costs what its 458,752 transfers cost.
    """
    try:
        return _aligned(schedule, graph, tuple(placement), reduce_compute)
    except NotApplicable as exc:
        return FastResult(math.nan, False, str(exc), "aligned-steps")


def _aligned(schedule, graph, placement, reduce_compute) -> FastResult:
    method = "aligned-steps"
    n = len(schedule)
    if len(placement) < schedule.total_ranks:
        raise TopologyError(f"schedule needs {schedule.total_ranks} ranks, "
                            f"placement has {len(placement)}")
    if n == 0:
        return FastResult(0.0, True, "", method)
    step = schedule.step.astype(np.int64)
    if np.any(np.diff(step) < 0):
        raise NotApplicable("transfers are not listed step by step")
    if schedule.sync[0]:
        raise NotApplicable("the first transfer is a barrier")
    heads = np.flatnonzero(np.concatenate(([True], step[1:] != step[:-1])))
    level = np.cumsum(np.concatenate(([True], step[1:] != step[:-1]))) - 1   # 0, 1, ... per step
    ranks = schedule.total_ranks
    src, dst = schedule.src.astype(np.int64), schedule.dst.astype(np.int64)
    m = schedule.nchunks.astype(np.int64)
    r_lo, w_lo = schedule.src_chunk.astype(np.int64), schedule.dst_chunk.astype(np.int64)
    r_hi, w_hi = r_lo + m, w_lo + m
    r_key, w_key = level * ranks + src, level * ranks + dst
    red = schedule.reduce.astype(bool)
    over = ~red
    # layering: within a step, no read/write or overwrite/write conflict on a (rank, chunk)
    if np.any(_overlaps(r_key, r_lo, r_hi, w_key, w_lo, w_hi)):
        raise NotApplicable("a transfer reads a chunk another transfer of its step writes")
    if np.any(_overlaps(w_key[over], w_lo[over], w_hi[over], w_key[red], w_lo[red], w_hi[red])):
        raise NotApplicable("a chunk is overwritten and reduced into in one step")
    o_key, o_lo, o_hi = w_key[over], w_lo[over], w_hi[over]
    o = np.lexsort((o_lo, o_key))
    if len(o) > 1:
        k2, lo2, hi2 = o_key[o], o_lo[o], o_hi[o]
        span = int(hi2.max()) + 1
        prev = np.maximum.accumulate(k2 * span + hi2)[:-1] - k2[1:] * span
        if np.any(prev > lo2[1:]):
            raise NotApplicable("a chunk is overwritten twice in one step")
    chan = schedule.channel.astype(np.int64)
    conn = ((src * ranks + dst) * (int(chan.max()) + 1) + chan)
    conn_step = np.unique(conn * (int(level[-1]) + 1) + level)
    if len(conn_step) != n:
        raise NotApplicable("two transfers of one step share a FIFO connection (pipelined "
                            "slices or segments)")
    # how each step is entered: through a barrier, or through data of the previous step
    epoch = epochs(schedule)
    step_epoch_lo = epoch[heads]
    step_epoch_hi = epoch[np.append(heads[1:], n) - 1]
    if np.any(step_epoch_lo != step_epoch_hi):
        raise NotApplicable("a barrier falls inside a step")
    barrier = np.concatenate(([False], step_epoch_lo[1:] > step_epoch_hi[:-1]))
    fed = _overlaps(r_key - ranks, r_lo, r_hi, w_key, w_lo, w_hi)
    need = ~barrier[level] & (level > 0)
    if np.any(need & ~fed):
        raise NotApplicable("a transfer does not depend on the step before its own")
    # paths and per-transfer constants
    pair = src * ranks + dst
    pairs, pair_of = np.unique(pair, return_inverse=True)
    paths = _Paths(graph)
    nodes = list(placement)
    p_ptr, p_res, p_lat = paths.route([nodes[int(k) // ranks] for k in pairs],
                                      [nodes[int(k) % ranks] for k in pairs])
    capacity = paths.caps()
    nbytes = schedule.transfer_bytes.astype(np.float64)
    rate = np.full(ranks, np.inf)
    if reduce_compute:
        rate = np.array([float(graph.nodes[nodes[r]].get("reduce_bytes_per_s", math.inf))
                         for r in range(ranks)])
    with np.errstate(divide="ignore", invalid="ignore"):
        dur = np.where(red & np.isfinite(rate[dst]), nbytes / rate[dst], 0.0)
    device_names = sorted(set(nodes[:ranks]))
    device_of = {d: i for i, d in enumerate(device_names)}
    rank_dev = np.array([device_of[nodes[r]] for r in range(ranks)], dtype=np.int64)
    lengths = np.diff(p_ptr)
    net = (nbytes > 0) & (lengths[pair_of] > 0)
    t, solves, aligned = 0.0, 0, True
    bounds = np.append(heads, n)
    for k, (a, b) in enumerate(zip(bounds[:-1].tolist(), bounds[1:].tolist())):
        if k and not barrier[k] and not aligned:
            raise NotApplicable("ranks finish a step at different times and the next step "
                                "has no barrier: its transfers would not start together")
        drain = np.zeros(b - a)
        f = np.flatnonzero(net[a:b])
        if len(f):
            f_ptr, f_res = _gather_csr(p_ptr, p_res, pair_of[a + f])
            elapsed, s = _wave(nbytes[a + f], f_ptr, f_res, pair_of[a + f], capacity, t)
            drain[f] = elapsed
            solves += s
        done = drain + p_lat[pair_of[a:b]]
        d = dur[a:b]
        queued = np.flatnonzero(d > 0)
        if len(queued):
            dev = rank_dev[dst[a + queued]]
            if len(np.unique(dev)) == len(dev):
                done[queued] += d[queued]
            else:   # a device's FIFO queue: its last completion does not depend on tie order
                for u in np.unique(dev).tolist():
                    idx = queued[dev == u]
                    idx = idx[np.argsort(done[idx], kind="stable")]
                    free = 0.0
                    for j in idx.tolist():
                        free = max(done[j], free) + d[j]
                        done[j] = free
        hi = float(done.max())
        aligned = hi - float(done.min()) <= _SAME * hi
        t += hi
    res_bytes = np.bincount(p_res, weights=np.repeat(
        np.bincount(pair_of, weights=np.where(net, nbytes, 0.0), minlength=len(pairs)),
        lengths), minlength=len(capacity))
    return FastResult(float(t), True, "", method, steps=len(heads), solves=solves,
                      links=paths.table(res_bytes), bytes_sent=float(nbytes.sum()),
                      reduce_s=_reduce_totals(nodes[:ranks], dst, dur))


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
        drain, solves = _wave(np.full(len(plan.src), float(chunk)), plan.ptr,
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
    if hi - float(done.min()) > _SAME * hi:
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
    r_ptr, r_res = _gather_csr(plan.ptr, plan.res, conn)
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
    over = np.flatnonzero((users > 1) & (load > capacity * (1 + _SAME)))
    if len(over):
        r = int(over[np.argmax(load[over] / capacity[over])])
        sharing = int(np.bincount(res, weights=weight[inc_flow], minlength=len(capacity))[r])
        raise NotApplicable(
            f"{sharing} ring connections share {plan.paths.keys[r]} ({capacity[r]:.6g} B/s), "
            f"which their own bottlenecks would oversubscribe ({load[r]:.6g} B/s): their "
            f"rates depend on which of them are active")
    return rate
