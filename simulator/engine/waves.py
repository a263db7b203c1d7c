"""Max-min fair waves: the array arithmetic the exact step-level methods share.

A *wave* is a set of flows that start at one instant and run with nobody else: solved together
by progressive filling (:func:`max_min_weighted`, the event engine's max-min algorithm on arrays,
with weighted flows), then re-solved at each departure, exactly as the engine re-solves when a
flow drains (:func:`max_min_wave`). Flows alone on all their resources skip the solve; identical
flows (same path, same bytes) are aggregated into one weighted flow. The ring shortcuts
(:mod:`.ring`), aligned steps (:mod:`.aligned`) and the step-synchronous analysis
(:mod:`.step_sync`) are each a recurrence over such waves, checked to be the event engine's;
the event engine's own large solves (:func:`.network.max_min_rates_vector`) use the same solver.
"""

from __future__ import annotations

import numpy as np

#: Start times within this relative distance count as the same instant.
SAME = 1e-12
#: Deliveries to one device within this relative distance count as a tie (order ambiguous).
TIE = 1e-9
#: Relative tolerance under which a flow counts as drained (network.py's ``_EPS``).
EPS = 1e-12


def ragged_arange(counts: np.ndarray) -> np.ndarray:
    total = int(counts.sum())
    starts = np.repeat(np.cumsum(counts) - counts, counts)
    return np.arange(total, dtype=np.int64) - starts


def segment_max(values: np.ndarray, ptr: np.ndarray, empty: float = 0.0) -> np.ndarray:
    """Max of ``values[ptr[i]:ptr[i+1]]`` per segment (``empty`` for empty segments)."""
    counts = np.diff(ptr)
    out = np.full(len(counts), empty)
    nonempty = counts > 0
    if values.size:
        out[nonempty] = np.maximum.reduceat(values, ptr[:-1][nonempty])
    return out


def gather_csr(ptr: np.ndarray, idx: np.ndarray, rows: np.ndarray):
    """Rows ``rows`` of a CSR matrix, as a new CSR ``(ptr, idx)``."""
    counts = ptr[rows + 1] - ptr[rows]
    new_ptr = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(counts, out=new_ptr[1:])
    flat = np.repeat(ptr[rows], counts) + ragged_arange(counts)
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


def max_min_wave(nbytes: np.ndarray, ptr: np.ndarray, res: np.ndarray, path_id: np.ndarray,
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
    g_ptr, g_res = gather_csr(ptr, inc_loc, reps)
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
        limit = t_next + EPS * max(1.0, abs(t0 + t_next))
        finishing = tau + dt <= limit
        remaining[ids] -= rates * (t_next - tau)
        done[ids[finishing]] = t_next
        live[ids[finishing]] = False
        tau = t_next
    elapsed[order] = done[group]
    return elapsed, solves
