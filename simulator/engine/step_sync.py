"""The step-synchronous analysis: any schedule whose steps are layers, timed without events.

The event engine (:mod:`.runner` on :mod:`.network`) handles every schedule, but pays Python
work per transfer and per event. Most collectives run with ``--slices 1`` are
*step-synchronous*, and for those the event run has a structure that can be computed directly,
with arrays (DESIGN.md section 5). :func:`step_sync_time` does that, and checks, on the computed
times themselves, every condition under which the result equals the event run; when a check
fails it says which (``FastResult.applicable = False``). :func:`fast_time` tries the cheaper
aligned steps (:mod:`.aligned`) first.

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
"""

from __future__ import annotations

import dataclasses
import math

import networkx as nx
import numpy as np

from ..schedules.base import Schedule
from ..schedules.deps import dependencies, epochs
from .aligned import aligned_time
from .common import FastResult, NotApplicable, _reduce_totals, _routes, check_placement, declined_as
from .waves import SAME, TIE, gather_csr, max_min_wave, segment_max


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
    result = step_sync_time(schedule, graph, placement, reduce_compute)
    if result.applicable:
        return result
    return dataclasses.replace(result, reason=f"{aligned.method}: {aligned.reason}; "
                                              f"step-synchronous: {result.reason}")


def step_sync_time(schedule: Schedule, graph: nx.DiGraph, placement,
                    reduce_compute: bool) -> FastResult:
    """The step-synchronous analysis (what times unaligned steps without numba)."""
    accesses = 2 * int(schedule.nchunks.sum())
    if accesses > MAX_ACCESSES:
        return FastResult(math.nan, False, f"{accesses:,} chunk accesses are too many for the "
                          f"dependency graph (limit {MAX_ACCESSES:,})", "step-synchronous")
    return declined_as("step-synchronous", _step_synchronous, schedule, graph,
                       tuple(placement), reduce_compute)


def _step_synchronous(schedule: Schedule, graph: nx.DiGraph, placement: tuple,
                      reduce_compute: bool) -> FastResult:
    method = "step-synchronous"
    n = len(schedule)
    check_placement(schedule, placement)
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
    nodes = list(placement)
    paths, p_ptr, p_res, p_lat = _routes(graph, nodes[:ranks], pairs)
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
    d_ptr, d_idx = gather_csr(indptr, indices, perm)
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
        start = np.maximum(base, segment_max(values, seg))
        if tie_size:
            start = _tie_checked(start, base, dp, seg, values, t_early, tie_of,
                                 np.asarray(tie_size))
        # -- drain times: waves of network flows
        drain = start.copy()
        net = np.flatnonzero(q_net[a:b])
        if len(net):
            f_ptr, f_res = gather_csr(p_ptr, p_res, q_path[a + net])
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
    if np.all(hi - lo <= SAME * np.abs(hi)):
        return max_min_wave(nbytes, ptr, res, path_id, capacity, float(start.max()))
    elapsed = np.empty(len(start))
    solves = 0
    by_start = np.argsort(start, kind="stable")
    s = start[by_start]
    cut = np.flatnonzero(s[1:] - s[:-1] > SAME * np.abs(s[1:])) + 1
    for group in np.split(by_start, cut):
        g_ptr, g_res = gather_csr(ptr, res, group)
        e, k = max_min_wave(nbytes[group], g_ptr, g_res, path_id[group], capacity,
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
    new_group[1:] = (r[1:] != r[:-1]) | (s[1:] - s[:-1] > SAME * np.abs(s[1:]))
    heads = np.flatnonzero(new_group)
    g_res, g_start = r[heads], s[heads]
    g_end = np.maximum.reduceat(e, heads)
    first = np.ones(len(heads), dtype=bool)
    first[1:] = g_res[1:] != g_res[:-1]
    before = np.where(first, busy_until[g_res], np.concatenate(([0.0], g_end[:-1])))
    if np.any(g_start < before - SAME * np.abs(g_start)):
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
    start_low = np.maximum(base, segment_max(low, seg))
    if np.any(start_low < start - SAME * np.abs(start)):
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
    if np.any(delivered <= dev_last[dev] * (1 + TIE)):
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
        tie = np.concatenate(([False], dl[1:] - dl[:-1] <= TIE * np.abs(dl[1:])))
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
