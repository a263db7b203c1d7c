"""Aligned steps: a schedule whose steps run in lockstep, timed as a sum of waves.

:func:`aligned_time` is tried before the step-synchronous analysis (:mod:`.step_sync`) and needs
no dependency graph. If the list is sorted
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
"""

from __future__ import annotations

import math

import networkx as nx
import numpy as np

from ..schedules.base import Schedule
from ..schedules.deps import epochs
from .common import FastResult, NotApplicable, _reduce_totals, _routes, check_placement, declined_as
from .waves import SAME, gather_csr, max_min_wave


# -- aligned steps (no dependency graph) ---------------------------------------------------------

def _sorted_unique(values: np.ndarray) -> np.ndarray:
    """``np.unique`` of a 1-D integer array by one sort (numpy 2.4's hash-based unique is several
    times slower on the millions of keys of a 1,024-rank schedule); the same sorted result."""
    ordered = np.sort(np.asarray(values).ravel())
    if len(ordered) == 0:
        return ordered
    keep = np.empty(len(ordered), dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]

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
    return declined_as("aligned-steps", _aligned, schedule, graph, tuple(placement),
                       reduce_compute)


def _aligned(schedule, graph, placement, reduce_compute) -> FastResult:
    method = "aligned-steps"
    n = len(schedule)
    check_placement(schedule, placement)
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
    conn_step = _sorted_unique(conn * (int(level[-1]) + 1) + level)
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
    nodes = list(placement)
    paths, p_ptr, p_res, p_lat = _routes(graph, nodes[:ranks], pairs)
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
            f_ptr, f_res = gather_csr(p_ptr, p_res, pair_of[a + f])
            elapsed, s = max_min_wave(nbytes[a + f], f_ptr, f_res, pair_of[a + f], capacity, t)
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
        aligned = hi - float(done.min()) <= SAME * hi
        t += hi
    res_bytes = np.bincount(p_res, weights=np.repeat(
        np.bincount(pair_of, weights=np.where(net, nbytes, 0.0), minlength=len(pairs)),
        lengths), minlength=len(capacity))
    return FastResult(float(t), True, "", method, steps=len(heads), solves=solves,
                      links=paths.table(res_bytes), bytes_sent=float(nbytes.sum()),
                      reduce_s=_reduce_totals(nodes[:ranks], dst, dur))
