"""Compiled twin of the event engine's flow network (numba), shared by the compiled kernels.

Read :mod:`.runner` and :mod:`.network` first: the functions here are the compiled twins of
``FlowNetwork.start``, ``_match``, ``_component``, ``_solve``, ``_arm`` and ``_wake`` and of the
runner's delivery batching, with the same event order. They are driven by two main loops that
differ only in how they know a transfer is ready and what a completion releases:
:mod:`._tree_kernel` (tree pipelines, readiness from counters, no transfer list) and
:mod:`._schedule_kernel` (any schedule, readiness from its dependency graph).

Flows are indexed by FIFO connection: a connection has at most one flow on the wire.

State is passed as tuples of arrays so that both main loops share these functions:

* ``net``: ``(path_of, res_ptr, res_idx, caps, user_ptr, user_idx, latency)``: the path of
  every connection (CSR of resource ids per path), capacities, the static users of every
  resource (connections whose path crosses it, CSR) and path latencies;
* ``fl``: per-flow arrays (:func:`flow_state`); ``rs``: per-resource arrays
  (:func:`resource_state`); ``inst``: what happened at the current instant (departures per path,
  arrivals, dirty resources) and scratch space (:func:`instant_state`);
* ``ic``/``fc``: integer and float scalars in one array each (indices ``_N_*`` and ``_T_*``).

Reference counting: numba increments and decrements (atomically) the reference count of every
array a function receives, tuple members included, on every call that it does not inline. The
per-transfer helpers receive tuples of ~40 arrays, so those counts were a third of the run time.
Helpers that allocate nothing are therefore compiled without numba's runtime
(``@njit(_nrt=False)``: no counts; such a function cannot create arrays, lists or tuples of
arrays to return), and the work that allocates (event pushes, growing the delivery queue) is
done by the callers, once per round rather than once per transfer.

Event heap entries are ``(time, eid, member, kind, code)``: ``eid`` is the creation counter that
orders SimPy's events of one instant; ``member`` orders the transfers of one delivery batch (the
engine delivers a batch in one callback, in drain order); ``code`` names the transfer. Flows
are kept in a queue ordered by (finish, flow id) (:func:`flow_heap`: buckets of one finish
time).
"""

from __future__ import annotations

import heapq

import numpy as np
from numba import njit, types
from numba.typed import Dict

WAKE, DELIVER, COMPUTE, ZERO, BATCH = 0, 1, 2, 3, 4
_EPS = 1e-12   # the engine's drain tolerance (network._EPS)
BATCH_ENTRY = types.UniTuple(types.int64, 2)   # delivery batch: (event id, members so far)

# integer scalars (``ic``)
_N_DEP, _N_ARRIVED, _N_DIRTY, _EID, _WAKE_GEN, _NEXT_FID, _SOLVES, _ONE_LATENCY, \
    _LOCAL_LIMIT, _Q_HEAD, _Q_TAIL, _B_HEAD, _B_TAIL = range(13)
# float scalars (``fc``)
_T_WAKE, _T_BATCH = 0, 1


@njit(cache=True)
def static_users(path_of, res_ptr, res_idx, n_res):
    """CSR ``(user_ptr, user_idx)`` of the connections whose path crosses each resource."""
    n_conn = path_of.shape[0]
    user_cnt = np.zeros(n_res + 1, dtype=np.int64)
    for c in range(n_conn):
        pid = path_of[c]
        for k in range(res_ptr[pid], res_ptr[pid + 1]):
            user_cnt[res_idx[k] + 1] += 1
    user_ptr = np.cumsum(user_cnt)
    user_idx = np.zeros(user_ptr[n_res], dtype=np.int64)
    fill = user_ptr[:-1].copy()
    for c in range(n_conn):
        pid = path_of[c]
        for k in range(res_ptr[pid], res_ptr[pid + 1]):
            r = res_idx[k]
            user_idx[fill[r]] = c
            fill[r] += 1
    return user_ptr, user_idx


@njit(cache=True)
def flow_state(n_conn):
    """``(active, rate, remaining, tlast, finish, version, fid, size, seen, fail, shared,
    bneck, new_rate)`` per connection's flow (``bneck``: a bottleneck resource of each active
    flow, kept valid by every solve; ``version`` is not kept up to date: nothing reads it)."""
    return (np.zeros(n_conn, dtype=np.bool_), np.zeros(n_conn), np.zeros(n_conn),
            np.zeros(n_conn), np.full(n_conn, np.inf), np.zeros(n_conn, dtype=np.int64),
            np.zeros(n_conn, dtype=np.int64), np.zeros(n_conn),
            np.zeros(n_conn, dtype=np.bool_), np.zeros(n_conn, dtype=np.bool_),
            np.zeros(n_conn, dtype=np.bool_), np.zeros(n_conn, dtype=np.int64),
            np.zeros(n_conn))


@njit(cache=True)
def resource_state(n_res):
    """``(n_on, carried, seen, dirty, open, load, top, left, cnt, fkey, fpos, fheap)`` per
    resource (the last three: :func:`fill`'s indexed heap, ``fpos`` -1 outside it)."""
    return (np.zeros(n_res, dtype=np.int64), np.zeros(n_res), np.zeros(n_res, dtype=np.bool_),
            np.zeros(n_res, dtype=np.bool_), np.zeros(n_res, dtype=np.bool_), np.zeros(n_res),
            np.zeros(n_res), np.zeros(n_res), np.zeros(n_res, dtype=np.int64), np.zeros(n_res),
            np.full(n_res, -1, dtype=np.int64), np.zeros(n_res, dtype=np.int64))


@njit(cache=True)
def instant_state(n_conn, n_res, n_paths):
    """``(dep_count, dep_rate, dep_bneck, dep_touched, dep_list, arrived, dirty, done, comp_res,
    comp_flows, work)``: departures per path at this instant (count, rate and
    bottleneck: flows on one path share a rate), the lists of the instant and scratch space,
    each preallocated to its bound."""
    return (np.zeros(n_paths, dtype=np.int64), np.zeros(n_paths),
            np.zeros(n_paths, dtype=np.int64), np.zeros(n_paths, dtype=np.bool_),
            np.empty(n_paths, dtype=np.int64), np.empty(n_conn, dtype=np.int64),
            np.empty(n_res, dtype=np.int64), np.empty(n_conn, dtype=np.int64),
            np.empty(n_res, dtype=np.int64), np.empty(n_conn, dtype=np.int64),
            np.empty((4, max(n_conn, n_res)), dtype=np.int64))


@njit(cache=True)
def scalars(path_of, latency, n_conn):
    """``(ic, fc, events, flows, batches, codes, counts)`` for a new run (``codes`` and
    ``counts``: the delivery queue, see :func:`deliver`)."""
    ic = np.zeros(13, dtype=np.int64)
    fc = np.array([np.inf, -np.inf])
    # one path latency for every connection: delivery instants are then created in time
    # order, so a delivery joins the last batch or opens a new one (no lookup table needed)
    ic[_ONE_LATENCY] = 1
    for c in range(n_conn):
        if latency[path_of[c]] != latency[path_of[0]]:
            ic[_ONE_LATENCY] = 0
    ic[_LOCAL_LIMIT] = max(64, n_conn // 8)
    events = [(0.0, np.int64(0), np.int64(0), np.int64(0), np.int64(0))]
    events.pop()
    flows = flow_heap(n_conn)
    batches = Dict.empty(key_type=types.float64, value_type=BATCH_ENTRY)
    return (ic, fc, events, flows, batches, np.empty(1024, dtype=np.int64),
            np.empty(256, dtype=np.int64))


@njit(cache=True, _nrt=False)
def take_users(r, user_ptr, user_idx, path_of, res_ptr, res_idx, f_active, f_seen, r_seen,
               flows_out, n_flows, res_out, n_res):
    """Append the active flows on resource ``r`` not taken yet to ``flows_out`` (marking them in
    ``f_seen``) and the resources of their paths not seen yet to ``res_out`` (``r_seen``).
    Returns the new lengths of both."""
    for k in range(user_ptr[r], user_ptr[r + 1]):
        c = user_idx[k]
        if c < 0:
            break       # the end of a dynamic network's list
        if f_active[c] and not f_seen[c]:
            f_seen[c] = True
            flows_out[n_flows] = c
            n_flows += 1
            pid = path_of[c]
            for j in range(res_ptr[pid], res_ptr[pid + 1]):
                r2 = res_idx[j]
                if not r_seen[r2]:
                    r_seen[r2] = True
                    res_out[n_res] = r2
                    n_res += 1
    return n_flows, n_res


@njit(cache=True, _nrt=False)
def _tally(r, user_ptr, user_idx, f_active, f_rate, f_seen, cand, r_load, r_top):
    """Load and fastest rate of resource ``r`` into ``r_load[r]`` and ``r_top[r]``, with the
    candidate rates ``cand`` for the flows being re-solved (marked in ``f_seen``)."""
    total = 0.0
    top = 0.0
    for k in range(user_ptr[r], user_ptr[r + 1]):
        u = user_idx[k]
        if u < 0:
            break       # the end of a dynamic network's list
        if f_active[u]:
            rate = cand[u] if f_seen[u] else f_rate[u]
            total += rate
            if rate > top:
                top = rate
    r_load[r] = total
    r_top[r] = top


@njit(cache=True, _nrt=False)
def _bottleneck(c, rate, path_of, res_ptr, res_idx, caps, user_ptr, user_idx, f_active,
                f_rate, f_seen, cand, r_seen, r_load, r_top):
    """A bottleneck of flow ``c`` at ``rate``: a resource on its path that is saturated and
    carries no faster flow (the max-min fairness condition, to 1e-9 relative); -1 if none.
    The loads of the region's resources (``r_seen``) are already tallied; the others are
    tallied here."""
    pid = path_of[c]
    for k in range(res_ptr[pid], res_ptr[pid + 1]):
        r = res_idx[k]
        if not r_seen[r]:
            _tally(r, user_ptr, user_idx, f_active, f_rate, f_seen, cand, r_load, r_top)
        if r_load[r] >= caps[r] * (1 - 1e-9) and r_top[r] <= rate * (1 + 1e-9):
            return r
    return -1


@njit(cache=True, _nrt=False)
def _before(a, b, key):
    """Heap order of entries ``a`` and ``b``: the smaller key first, then the smaller id."""
    return key[a] < key[b] or (key[a] == key[b] and a < b)


@njit(cache=True, _nrt=False)
def _heap_up(k, r, key, pos, heap):
    """Sift entry ``r`` up from slot ``k`` of the indexed binary ``heap`` (``pos[r]``: its slot;
    ordered by :func:`_before` on ``key``). ``fill`` keeps its resources in one, the
    completion queue its time buckets (whose keys, their times, are distinct)."""
    while k > 0:
        up = (k - 1) >> 1
        p = heap[up]
        if not _before(r, p, key):
            break
        heap[k] = p
        pos[p] = k
        k = up
    heap[k] = r
    pos[r] = k


@njit(cache=True, _nrt=False)
def _heap_down(k, r, n, key, pos, heap):
    """Sift entry ``r`` down from slot ``k`` of the first ``n`` slots of ``heap``."""
    while True:
        child = 2 * k + 1
        if child >= n:
            break
        if child + 1 < n and _before(heap[child + 1], heap[child], key):
            child += 1
        d = heap[child]
        if not _before(d, r, key):
            break
        heap[k] = d
        pos[d] = k
        k = child
    heap[k] = r
    pos[r] = k


@njit(cache=True, _nrt=False)
def fill(res, n_res, member, rate, todo, clamp, user_ptr, user_idx, path_of, res_ptr,
         res_idx, r_left, r_cnt, f_bneck, fkey, fpos, fheap):
    """Progressive filling (network.max_min_rates) of the ``member`` flows whose ``rate`` is
    still negative, on resources ``res[:n_res]`` holding ``r_left`` capacity for ``r_cnt`` of
    them: the resource with the smallest fair share freezes its flows at that share,
    repeatedly, and is their bottleneck (``f_bneck``). ``clamp`` reads negative leftovers as 0
    (a local re-solve). Returns the flows left.

    The engine keeps a heap of ``(share, resource)`` entries, pushes one whenever a share
    changes (``max(left, 0) / cnt``) and, popping an entry that is no longer the current share,
    pushes the current one (which, never above the entry, comes out next). The resource it
    fills is therefore always the one with the smallest ``(last pushed share, resource id)``,
    filled at its current share: here one entry per resource (``fkey`` the last pushed share,
    ``fpos`` its place, -1 outside; all left at -1 on return), no stale entries, no runtime."""
    n = 0
    for i in range(n_res):
        r = res[i]
        if r_cnt[r] > 0:
            fkey[r] = (max(r_left[r], 0.0) if clamp else r_left[r]) / r_cnt[r]
            _heap_up(n, r, fkey, fpos, fheap)
            n += 1
    while todo > 0 and n > 0:
        r = fheap[0]
        fpos[r] = -1
        n -= 1
        if n > 0:
            _heap_down(0, fheap[n], n, fkey, fpos, fheap)
        cnt = r_cnt[r]
        if cnt == 0:
            continue
        share = (max(r_left[r], 0.0) if clamp else r_left[r]) / cnt
        for k in range(user_ptr[r], user_ptr[r + 1]):
            c = user_idx[k]
            if c < 0:
                break       # the end of a dynamic network's list
            if not member[c] or rate[c] >= 0.0:
                continue
            rate[c] = share
            f_bneck[c] = r
            todo -= 1
            pid = path_of[c]
            for j in range(res_ptr[pid], res_ptr[pid + 1]):
                r2 = res_idx[j]
                r_left[r2] -= share
                r_cnt[r2] -= 1
                if r2 != r and r_cnt[r2] > 0:
                    fkey[r2] = max(r_left[r2], 0.0) / r_cnt[r2]
                    k2 = fpos[r2]
                    if k2 < 0:
                        _heap_up(n, r2, fkey, fpos, fheap)
                        n += 1
                    elif k2 > 0 and _before(r2, fheap[(k2 - 1) >> 1], fkey):
                        _heap_up(k2, r2, fkey, fpos, fheap)
                    else:
                        _heap_down(k2, r2, n, fkey, fpos, fheap)
        r_cnt[r] = 0
    for i in range(n):
        fpos[fheap[i]] = -1
    return todo


@njit(cache=True, _nrt=False)
def local_solve(dirty, n_dirty, now, path_of, res_ptr, res_idx, caps, user_ptr, user_idx,
                 f_active, f_rate, f_remaining, f_tlast, f_finish, f_version, f_fid, f_seen,
                 f_fail, f_bneck, r_seen, r_open, r_left, r_cnt, r_load, r_top, cand, flows, limit,
                 work, fkey, fpos, fheap):
    """Re-solve the flows around the dirty resources, growing the region until the result is
    provably the max-min fair allocation; then apply it and return True. Return False (nothing
    changed) once the region would exceed ``limit`` flows: the caller solves the component.

    A round re-fills the region's flows (``group``: every active flow on an *opened* resource)
    on the capacity that the flows outside leave them, then checks the max-min condition on
    every flow that touches a resource of the region. Flows elsewhere kept their resources'
    loads, so they keep their bottlenecks; so does an outside flow whose recorded bottleneck
    (``f_bneck``, kept for every active flow) lies outside the region. When every checked flow
    has one, the allocation is the (unique) max-min fair one. A flow that fails opens the
    resources of its path: the next round re-solves its neighbourhood too.

    ``work`` is scratch space: rows 0-3 hold the group, the region's resources, the opened
    resources and the failing flows (each at most ``max(connections, resources)`` long).
    """
    group = work[0]
    res = work[1]
    opened = work[2]
    failing = work[3]
    n_group = 0
    n_res = 0
    n_opened = 0
    n_failing = 0
    ok = False
    # the first round opens the dirty resources; later ones the paths of the failing flows
    for i in range(n_dirty):
        r = dirty[i]
        if not r_open[r]:
            r_open[r] = True
            opened[n_opened] = r
            n_opened += 1
    first_new = 0
    while True:
        n_before = n_group
        for i in range(first_new, n_opened):
            n_group, n_res = take_users(opened[i], user_ptr, user_idx, path_of, res_ptr,
                                        res_idx, f_active, f_seen, r_seen, group, n_group, res,
                                        n_res)
        first_new = n_opened
        if n_group == n_before or n_group > limit:
            break
        # capacity the other flows leave, and progressive filling of the group on it
        for i in range(n_res):
            r = res[i]
            left = caps[r]
            cnt = 0
            for k in range(user_ptr[r], user_ptr[r + 1]):
                u = user_idx[k]
                if u < 0:
                    break       # the end of a dynamic network's list
                if f_active[u]:
                    if f_seen[u]:
                        cnt += 1
                    else:
                        left -= f_rate[u]
            r_left[r] = left
            r_cnt[r] = cnt
        for i in range(n_group):
            cand[group[i]] = -1.0
        todo = fill(res, n_res, f_seen, cand, n_group, True, user_ptr, user_idx, path_of,
                    res_ptr, res_idx, r_left, r_cnt, f_bneck, fkey, fpos, fheap)
        if todo != 0:
            break
        # the max-min condition on the group, and on the outside flows that share its
        # resources (they keep their rates: each still needs a bottleneck)
        for i in range(n_res):
            _tally(res[i], user_ptr, user_idx, f_active, f_rate, f_seen, cand, r_load, r_top)
        n_failing = 0
        for i in range(n_group):
            c = group[i]
            b = -1
            if cand[c] > 0.0:
                b = _bottleneck(c, cand[c], path_of, res_ptr, res_idx, caps, user_ptr,
                                user_idx, f_active, f_rate, f_seen, cand, r_seen, r_load, r_top)
            if b < 0:
                failing[n_failing] = c
                n_failing += 1
            else:
                f_bneck[c] = b
        for i in range(n_res):
            r = res[i]
            for k in range(user_ptr[r], user_ptr[r + 1]):
                u = user_idx[k]
                if u < 0:
                    break       # the end of a dynamic network's list
                if not f_active[u] or f_seen[u] or f_fail[u] or not r_seen[f_bneck[u]]:
                    continue   # re-solved, failed already, or its bottleneck is untouched
                b = _bottleneck(u, f_rate[u], path_of, res_ptr, res_idx, caps, user_ptr,
                                user_idx, f_active, f_rate, f_seen, cand, r_seen, r_load, r_top)
                if b < 0:
                    f_fail[u] = True
                    failing[n_failing] = u
                    n_failing += 1
                else:
                    f_bneck[u] = b
        if n_failing == 0:
            ok = True
            break
        for i in range(n_failing):
            c = failing[i]
            f_fail[c] = False
            pid = path_of[c]
            for j in range(res_ptr[pid], res_ptr[pid + 1]):
                r = res_idx[j]
                if not r_open[r]:
                    r_open[r] = True
                    opened[n_opened] = r
                    n_opened += 1
    if ok:
        # (heap entries order by finish time, then flow id: the push order does not matter)
        for i in range(n_group):
            c = group[i]
            if f_rate[c] > 0.0:
                f_remaining[c] -= f_rate[c] * (now - f_tlast[c])
                if f_remaining[c] < 0.0:
                    f_remaining[c] = 0.0
            f_tlast[c] = now
            rate = cand[c]
            if rate != f_rate[c] or f_finish[c] == np.inf:
                _set_rate(c, rate, now, f_rate, f_remaining, f_finish, f_version, f_fid, flows)
    for i in range(n_group):
        f_seen[group[i]] = False
    for i in range(n_res):
        r_seen[res[i]] = False
    for i in range(n_opened):
        r_open[opened[i]] = False
    return ok


@njit(cache=True, _nrt=False)
def arm_due(flows, now, ic, fc):
    """FlowNetwork._arm without the event push: True when a new wake-up is due, for
    ``fc[_T_WAKE]`` (its event ``(now + max(0, t - now), ic[_EID], 0, WAKE, ic[_WAKE_GEN])``
    is for the caller to push: see :func:`arm`)."""
    if flows[11][_M_NB] == 0:
        fc[_T_WAKE] = np.inf
        return False
    t = flow_heap_first(flows)
    if t == fc[_T_WAKE]:
        return False
    ic[_EID] += 1
    ic[_WAKE_GEN] += 1
    fc[_T_WAKE] = t
    return True


@njit(cache=True)
def arm(flows, f_finish, events, now, ic, fc):
    """FlowNetwork._arm: one pending wake-up, for the earliest completion."""
    if arm_due(flows, now, ic, fc):
        t = fc[_T_WAKE]
        heapq.heappush(events, (now + max(0.0, t - now), ic[_EID], np.int64(0),
                                np.int64(WAKE), ic[_WAKE_GEN]))


@njit(cache=True, _nrt=False)
def start_flow(c, size, now, net, fl, rs, inst, ic):
    """FlowNetwork.start for connection ``c``: a new flow id, and the flow joins the instant's
    arrivals (its rate comes from the coalesced solve). Returns False for a flow that drains at
    once (no bytes or no resources): the caller schedules its drain as an event."""
    path_of, res_ptr = net[0], net[1]
    res_idx = net[2]
    f_active, f_rate, f_remaining, f_tlast, f_finish = fl[0], fl[1], fl[2], fl[3], fl[4]
    f_fid, f_size = fl[6], fl[7]
    n_on = rs[0]
    arrived = inst[5]
    f_fid[c] = ic[_NEXT_FID]
    ic[_NEXT_FID] += 1
    pid = path_of[c]
    if size <= 0 or res_ptr[pid] == res_ptr[pid + 1]:
        return False
    f_active[c] = True
    f_size[c] = size
    f_remaining[c] = size
    f_rate[c] = 0.0
    f_tlast[c] = now
    f_finish[c] = np.inf
    for k in range(res_ptr[pid], res_ptr[pid + 1]):
        n_on[res_idx[k]] += 1
    arrived[ic[_N_ARRIVED]] = c
    ic[_N_ARRIVED] += 1
    return True


@njit(cache=True, _nrt=False)
def enter_flows(conns, sizes, first, n, now, net, fl, rs, inst, ic, u_len):
    """:func:`start_flow` for connections ``conns[first:n]`` with ``sizes`` bytes, in that
    order, for a network whose resources list only their *active* connections (a dynamic
    network: ``user_idx[user_ptr[r]:user_ptr[r] + u_len[r]]``, then -1, where the scans of
    a resource's users stop). Each flow joins its resources' lists first; stops before a
    flow that one of them has no room for, and returns how far it got (``n``: all)."""
    path_of, res_ptr, res_idx, user_ptr, user_idx = net[0], net[1], net[2], net[4], net[5]
    for i in range(first, n):
        c = conns[i]
        pid = path_of[c]
        for k in range(res_ptr[pid], res_ptr[pid + 1]):
            r = res_idx[k]
            if user_ptr[r] + u_len[r] >= user_ptr[r + 1]:
                return i
        for k in range(res_ptr[pid], res_ptr[pid + 1]):
            r = res_idx[k]
            user_idx[user_ptr[r] + u_len[r]] = c
            u_len[r] += 1
        start_flow(c, sizes[i], now, net, fl, rs, inst, ic)
    return n


@njit(cache=True, _nrt=False)
def leave_users(conns, n, net, u_len):
    """Connections ``conns[:n]`` (drained or aborted) leave their resources' lists of active
    connections (see :func:`enter_flows`): the last entry takes each one's place."""
    path_of, res_ptr, res_idx, user_ptr, user_idx = net[0], net[1], net[2], net[4], net[5]
    for i in range(n):
        c = conns[i]
        pid = path_of[c]
        for k in range(res_ptr[pid], res_ptr[pid + 1]):
            r = res_idx[k]
            last = user_ptr[r] + u_len[r] - 1
            j = user_ptr[r]
            while user_idx[j] != c:
                j += 1
            user_idx[j] = user_idx[last]
            user_idx[last] = -1
            u_len[r] -= 1


@njit(cache=True, _nrt=False)
def abort_flow(c, net, fl, rs, inst, ic, flows):
    """FlowNetwork.abort for connection ``c``'s flow (solved at least once): it leaves its
    resources and the completion queue, and its path is dirty for the next solve."""
    path_of, res_ptr, res_idx = net[0], net[1], net[2]
    f_active, f_remaining, f_rate = fl[0], fl[2], fl[1]
    n_on, r_dirty, dirty = rs[0], rs[3], inst[6]
    if not f_active[c]:
        return
    f_active[c] = False
    f_remaining[c] = 0.0
    f_rate[c] = 0.0
    if flows[0][c] >= 0:
        _unlink(c, flows)
    pid = path_of[c]
    for k in range(res_ptr[pid], res_ptr[pid + 1]):
        n_on[res_idx[k]] -= 1
    _mark_dirty(pid, res_ptr, res_idx, r_dirty, dirty, ic)


@njit(cache=True)
def push_zero(zero, n_zero, now, ic, events):
    """The ZERO events (drained at once: no bytes or no resources) of the transfers a try_start
    round found, in its order: event ids as if each had been pushed when it started (nothing
    else creates events during a round)."""
    for k in range(n_zero):
        ic[_EID] += 1
        heapq.heappush(events, (now, ic[_EID], np.int64(0), np.int64(ZERO), zero[k]))


@njit(cache=True, _nrt=False)
def _mark_dirty(pid, res_ptr, res_idx, r_dirty, dirty, ic):
    for k in range(res_ptr[pid], res_ptr[pid + 1]):
        r = res_idx[k]
        if not r_dirty[r]:
            r_dirty[r] = True
            dirty[ic[_N_DIRTY]] = r
            ic[_N_DIRTY] += 1


@njit(cache=True, _nrt=False)
def _bottleneck_of_some(r, user_ptr, user_idx, f_active, f_bneck):
    """Whether resource ``r`` is the recorded bottleneck of an active flow."""
    for k in range(user_ptr[r], user_ptr[r + 1]):
        u = user_idx[k]
        if u < 0:
            break       # the end of a dynamic network's list
        if f_active[u] and f_bneck[u] == r:
            return True
    return False


@njit(cache=True, _nrt=False)
def _alone_rate(c, pid, res_ptr, res_idx, caps, n_on, f_bneck):
    """The rate of a flow alone on every resource of its path (its smallest capacity, which
    is its bottleneck); 0 when it shares one."""
    rate = np.inf
    for k in range(res_ptr[pid], res_ptr[pid + 1]):
        r = res_idx[k]
        if n_on[r] != 1:
            return 0.0
        if caps[r] < rate:
            rate = caps[r]
            f_bneck[c] = r
    return rate


@njit(cache=True, _nrt=False)
def _set_rate(c, rate, now, f_rate, f_remaining, f_finish, f_version, f_fid, flows):
    f_rate[c] = rate
    f_finish[c] = now + f_remaining[c] / rate
    flow_heap_set(c, flows, f_finish, f_fid)


# -- the completion queue ---------------------------------------------------------------------
# The active flows ordered by (finish time, flow id), as the engine's heap of (finish, fid,
# version) entries hands them out. Flows of a pipelined collective finish in bulk: at 16,384
# ranks of a double binary tree ~34 flows share each finish instant (equal rates, equal
# segments), so the flows are kept in *buckets of one finish time* (a doubly linked list per
# bucket, sorted by flow id when the bucket is taken) and only the buckets are ordered, in an
# indexed binary heap ~34x smaller than one of the flows; a hash table (open addressing on the
# bits of the time, linear probing, backward-shift deletion) finds the bucket of a time. A
# new rate moves the flow between buckets in O(1); a drain takes whole buckets.
#
# ``flows = (b_of, nxt, prv, bt, bhead, btail, bcnt, bpos, bheap, bfree, table, meta, fbits,
# ibits, skey, sval)``: per flow its bucket (-1: none) and list neighbours; per bucket its time, list ends,
# size and heap place; the bucket heap, the stack of free bucket ids, the hash table of bucket
# ids (-1: empty), ``meta = [buckets in the heap, free ids, last bucket used, hash mask]`` and a
# one-float scratch with its int64 view (the bits of a time, for hashing), and scratch for
# sorting a large bucket by flow id.

_M_NB, _M_NFREE, _M_LAST, _M_MASK = 0, 1, 2, 3


@njit(cache=True)
def flow_heap(n_conn):
    """An empty completion queue for ``n_conn`` connections."""
    n = max(n_conn, 1)
    size = 16
    while size < 2 * n:
        size *= 2
    fbits = np.zeros(1)
    bfree = np.arange(n - 1, -1, -1).astype(np.int64)
    meta = np.array([0, n, -1, size - 1], dtype=np.int64)
    return (np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64),
            np.full(n, -1, dtype=np.int64), np.zeros(n), np.full(n, -1, dtype=np.int64),
            np.full(n, -1, dtype=np.int64), np.zeros(n, dtype=np.int64),
            np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64), bfree,
            np.full(size, -1, dtype=np.int64), meta, fbits, fbits.view(np.int64),
            np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64))


@njit(cache=True, _nrt=False)
def _slot(t, fbits, ibits, mask):
    """The home slot of time ``t`` in the hash table."""
    fbits[0] = t
    x = ibits[0]
    x ^= x >> 31
    x *= -7046029254386353131          # 0x9E3779B97F4A7C15 (wraps)
    return (x >> 29) & mask


@njit(cache=True, _nrt=False)
def _bucket_free(b, flows):
    """Bucket ``b`` (empty, or emptied by the caller) leaves the hash table and the heap."""
    (_b_of, _nxt, _prv, bt, bhead, btail, bcnt, bpos, bheap, bfree, table, meta, fbits,
     ibits, _skey, _sval) = flows
    mask = meta[_M_MASK]
    i = _slot(bt[b], fbits, ibits, mask)
    while table[i] != b:
        i = (i + 1) & mask
    j = i
    while True:                        # backward-shift deletion
        j = (j + 1) & mask
        e = table[j]
        if e < 0:
            break
        k = _slot(bt[e], fbits, ibits, mask)
        if (i <= j and i < k <= j) or (i > j and (k <= j or k > i)):
            continue                   # ``e`` sits between its home and the hole: stays
        table[i] = e
        i = j
    table[i] = -1
    n = meta[_M_NB] - 1
    meta[_M_NB] = n
    k = bpos[b]
    if k < n:
        last = bheap[n]
        if k > 0 and _before(last, bheap[(k - 1) >> 1], bt):
            _heap_up(k, last, bt, bpos, bheap)
        else:
            _heap_down(k, last, n, bt, bpos, bheap)
    bhead[b] = -1
    btail[b] = -1
    bcnt[b] = 0
    bfree[meta[_M_NFREE]] = b
    meta[_M_NFREE] += 1
    if meta[_M_LAST] == b:
        meta[_M_LAST] = -1


@njit(cache=True, _nrt=False)
def _bucket_of(t, flows):
    """The bucket of finish time ``t``, opened if there is none."""
    (_b_of, _nxt, _prv, bt, bhead, btail, bcnt, bpos, bheap, bfree, table, meta, fbits,
     ibits, _skey, _sval) = flows
    last = meta[_M_LAST]
    if last >= 0 and bt[last] == t:
        return last
    mask = meta[_M_MASK]
    i = _slot(t, fbits, ibits, mask)
    while True:
        e = table[i]
        if e < 0:
            break
        if bt[e] == t:
            meta[_M_LAST] = e
            return e
        i = (i + 1) & mask
    meta[_M_NFREE] -= 1
    b = bfree[meta[_M_NFREE]]
    table[i] = b
    bt[b] = t
    bhead[b] = -1
    btail[b] = -1
    bcnt[b] = 0
    meta[_M_NB] += 1
    _heap_up(meta[_M_NB] - 1, b, bt, bpos, bheap)
    meta[_M_LAST] = b
    return b


@njit(cache=True, _nrt=False)
def _unlink(c, flows):
    """Flow ``c`` leaves its bucket (freed when it empties)."""
    b_of, nxt, prv, bhead, btail, bcnt = (flows[0], flows[1], flows[2], flows[4], flows[5],
                                          flows[6])
    b = b_of[c]
    p = prv[c]
    x = nxt[c]
    if p >= 0:
        nxt[p] = x
    else:
        bhead[b] = x
    if x >= 0:
        prv[x] = p
    else:
        btail[b] = p
    b_of[c] = -1
    bcnt[b] -= 1
    if bcnt[b] == 0:
        _bucket_free(b, flows)


@njit(cache=True, _nrt=False)
def flow_heap_set(c, flows, f_finish, f_fid):
    """Insert flow ``c``, or move it after its finish time changed."""
    b_of, nxt, prv, bt, btail, bcnt = (flows[0], flows[1], flows[2], flows[3], flows[5],
                                       flows[6])
    t = f_finish[c]
    if t == 0.0:
        t = 0.0                        # one bucket for -0.0 and 0.0 (their bits differ)
    b = b_of[c]
    if b >= 0:
        if bt[b] == t:
            return
        _unlink(c, flows)
    b = _bucket_of(t, flows)
    tail = btail[b]
    prv[c] = tail
    nxt[c] = -1
    if tail >= 0:
        nxt[tail] = c
    else:
        flows[4][b] = c
    btail[b] = c
    bcnt[b] += 1
    b_of[c] = b


@njit(cache=True, _nrt=False)
def flow_heap_first(flows):
    """The earliest finish time of a queued flow (inf: none)."""
    if flows[11][_M_NB] == 0:
        return np.inf
    return flows[3][flows[8][0]]


@njit(cache=True, _nrt=False)
def _heapsort_pairs(key, val, m):
    """Sort ``key[:m]`` ascending, ``val[:m]`` along (heapsort: no allocation)."""
    for start in range(m // 2 - 1, -1, -1):
        _sift_pairs(key, val, start, m)
    for end in range(m - 1, 0, -1):
        k = key[0]
        v = val[0]
        key[0] = key[end]
        val[0] = val[end]
        key[end] = k
        val[end] = v
        _sift_pairs(key, val, 0, end)


@njit(cache=True, _nrt=False)
def _sift_pairs(key, val, i, n):
    k = key[i]
    v = val[i]
    while True:
        child = 2 * i + 1
        if child >= n:
            break
        if child + 1 < n and key[child + 1] > key[child]:
            child += 1
        if key[child] <= k:
            break
        key[i] = key[child]
        val[i] = val[child]
        i = child
    key[i] = k
    val[i] = v


@njit(cache=True, _nrt=False)
def flow_heap_take(flows, f_fid, out, n_out):
    """Remove the flows of the earliest finish time, appending them to ``out`` in flow-id
    order (the engine's order for equal finish times). Returns the new length of ``out``.

    Lists fill mostly in id order (insertion sort, short moves), but a bucket filled by a
    component re-solve (thousands of flows at 16,384 ranks, in the solve's order) is sorted
    by a heapsort on scratch copies of the ids: insertion there cost ~45 M moves at 16,384
    ranks and grew quadratically with the rank count."""
    b_of, nxt, bhead, bheap, skey, sval = (flows[0], flows[1], flows[4], flows[8], flows[14],
                                           flows[15])
    b = bheap[0]
    first = n_out
    c = bhead[b]
    in_order = True
    last = -1
    while c >= 0:
        b_of[c] = -1
        out[n_out] = c
        n_out += 1
        fid = f_fid[c]
        if fid < last:
            in_order = False
        last = fid
        c = nxt[c]
    m = n_out - first
    if not in_order:
        if m <= 32:
            for i in range(first + 1, n_out):
                c = out[i]
                fid = f_fid[c]
                k = i
                while k > first and f_fid[out[k - 1]] > fid:
                    out[k] = out[k - 1]
                    k -= 1
                out[k] = c
        else:
            for i in range(m):
                c = out[first + i]
                skey[i] = f_fid[c]
                sval[i] = c
            _heapsort_pairs(skey, sval, m)
            for i in range(m):
                out[first + i] = sval[i]
    _bucket_free(b, flows)
    return n_out


@njit(cache=True)
def solve(now, net, fl, rs, inst, ic, fc, flows, events):
    """FlowNetwork._solve: the coalesced re-solve of one instant (:func:`solve_rates`), then
    re-arm the wake-up."""
    solve_rates(now, net, fl, rs, inst, ic, flows)
    arm(flows, fl[4], events, now, ic, fc)


@njit(cache=True, _nrt=False)
def solve_rates(now, net, fl, rs, inst, ic, flows):
    """FlowNetwork._solve without the wake-up (the caller re-arms it: :func:`arm`); without
    numba's runtime, so a call counts no references of the ~40 arrays it receives.

    _match first: a flow that starts where one drained on the same path takes over its rate
    (the multiset of active paths is unchanged), a flow alone on its resources gets its
    smallest capacity; every other change marks its resources dirty. Then a local re-solve
    around the dirty resources (:func:`local_solve`), and where it cannot prove its result, the
    connected component of the dirty resources by progressive filling."""
    path_of, res_ptr, res_idx, caps, user_ptr, user_idx = (net[0], net[1], net[2], net[3],
                                                           net[4], net[5])
    (f_active, f_rate, f_remaining, f_tlast, f_finish, f_version, f_fid, _f_size, f_seen,
     f_fail, f_shared, f_bneck, new_rate) = fl
    (n_on, _carried, r_seen, r_dirty, r_open, r_load, r_top, r_left, r_cnt, fkey, fpos,
     fheap) = rs
    (dep_count, dep_rate, dep_bneck, dep_touched, dep_list, arrived, dirty, _done, comp_res,
     comp_flows, work) = inst
    ic[_SOLVES] += 1
    for i in range(ic[_N_ARRIVED]):
        c = arrived[i]
        if not f_active[c] or f_remaining[c] <= 0.0:
            continue
        pid = path_of[c]
        if dep_count[pid] > 0:
            dep_count[pid] -= 1
            rate = dep_rate[pid]
            f_bneck[c] = dep_bneck[pid]
        else:
            rate = _alone_rate(c, pid, res_ptr, res_idx, caps, n_on, f_bneck)
            if rate == 0.0:
                _mark_dirty(pid, res_ptr, res_idx, r_dirty, dirty, ic)
                continue
        f_tlast[c] = now
        _set_rate(c, rate, now, f_rate, f_remaining, f_finish, f_version, f_fid, flows)
    # A departure that nothing replaced frees capacity on its resources; it changes no rate
    # unless some active flow there is bottlenecked on that resource (the others keep their
    # bottlenecks elsewhere, untouched), so only such resources are dirty. (A flow that
    # arrived at this instant without a rate has its whole path dirty already, above.)
    for i in range(ic[_N_DEP]):
        pid = dep_list[i]
        if dep_count[pid] > 0:
            for k in range(res_ptr[pid], res_ptr[pid + 1]):
                r = res_idx[k]
                if not r_dirty[r] and _bottleneck_of_some(r, user_ptr, user_idx, f_active,
                                                           f_bneck):
                    r_dirty[r] = True
                    dirty[ic[_N_DIRTY]] = r
                    ic[_N_DIRTY] += 1
        dep_count[pid] = 0
        dep_touched[pid] = False
    ic[_N_DEP] = 0
    ic[_N_ARRIVED] = 0
    n_dirty = ic[_N_DIRTY]
    ic[_N_DIRTY] = 0
    if n_dirty > 0 and local_solve(
            dirty, n_dirty, now, path_of, res_ptr, res_idx, caps, user_ptr, user_idx,
            f_active, f_rate, f_remaining, f_tlast, f_finish, f_version, f_fid, f_seen,
            f_fail, f_bneck, r_seen, r_open, r_left, r_cnt, r_load, r_top, new_rate, flows,
            ic[_LOCAL_LIMIT], work, fkey, fpos, fheap):
        for i in range(n_dirty):
            r_dirty[dirty[i]] = False
        n_dirty = 0
    # _component: resources and active flows connected to the dirty resources (breadth
    # first: the resources found are scanned in turn)
    n_comp_res = 0
    n_comp_flows = 0
    for i in range(n_dirty):
        r = dirty[i]
        r_dirty[r] = False
        if not r_seen[r]:
            r_seen[r] = True
            comp_res[n_comp_res] = r
            n_comp_res += 1
    i = 0
    while i < n_comp_res:
        n_comp_flows, n_comp_res = take_users(comp_res[i], user_ptr, user_idx, path_of,
                                              res_ptr, res_idx, f_active, f_seen, r_seen,
                                              comp_flows, n_comp_flows, comp_res, n_comp_res)
        i += 1
    if n_comp_flows > 0:
        n_shared = 0
        for i in range(n_comp_flows):
            c = comp_flows[i]
            if f_rate[c] > 0.0:
                f_remaining[c] -= f_rate[c] * (now - f_tlast[c])
                if f_remaining[c] < 0.0:
                    f_remaining[c] = 0.0
            f_tlast[c] = now
            rate = _alone_rate(c, path_of[c], res_ptr, res_idx, caps, n_on, f_bneck)
            if rate == 0.0:
                f_shared[c] = True
                new_rate[c] = -1.0
                n_shared += 1
            else:
                new_rate[c] = rate
        if n_shared > 0:
            # progressive filling (network.max_min_rates): the resource with the smallest
            # fair share freezes its flows at that share, repeatedly
            for i in range(n_comp_res):
                r = comp_res[i]
                r_left[r] = caps[r]
                r_cnt[r] = 0
            for i in range(n_comp_flows):
                c = comp_flows[i]
                if f_shared[c]:
                    pid = path_of[c]
                    for k in range(res_ptr[pid], res_ptr[pid + 1]):
                        r_cnt[res_idx[k]] += 1
            fill(comp_res, n_comp_res, f_shared, new_rate, n_shared, False, user_ptr,
                 user_idx, path_of, res_ptr, res_idx, r_left, r_cnt, f_bneck, fkey, fpos, fheap)
        # (heap entries order by finish time, then flow id: the push order does not matter)
        for i in range(n_comp_flows):
            c = comp_flows[i]
            rate = new_rate[c]
            if rate != f_rate[c] or f_finish[c] == np.inf:
                _set_rate(c, rate, now, f_rate, f_remaining, f_finish, f_version, f_fid, flows)
            f_seen[c] = False
            f_shared[c] = False
    for i in range(n_comp_res):
        r_seen[comp_res[i]] = False


@njit(cache=True)
def drain(now, net, fl, rs, inst, ic, fc, flows, events):
    """FlowNetwork._wake: the flows that drained by ``now`` (within the engine's tolerance)
    leave their resources. Returns how many (they are in ``inst[7]``, in drain order) and
    whether a solve is due; without one the wake-up is re-armed here."""
    n_done, due = drain_flows(now, net, fl, rs, inst, ic, fc, flows)
    if not due:
        arm(flows, fl[4], events, now, ic, fc)
    return n_done, due


@njit(cache=True, _nrt=False)
def drain_flows(now, net, fl, rs, inst, ic, fc, flows):
    """:func:`drain` without re-arming the wake-up (due, for the caller, where no solve is)."""
    path_of, res_ptr, res_idx = net[0], net[1], net[2]
    f_active, f_rate, f_remaining, f_fid, f_size, f_bneck = (fl[0], fl[1], fl[2], fl[6],
                                                              fl[7], fl[11])
    n_on, carried = rs[0], rs[1]
    dep_count, dep_rate, dep_bneck, dep_touched, dep_list, done = (inst[0], inst[1], inst[2],
                                                                   inst[3], inst[4], inst[7])
    fc[_T_WAKE] = np.inf
    limit = now + _EPS * max(1.0, abs(now))
    n_done = 0
    while flow_heap_first(flows) <= limit:
        n_done = flow_heap_take(flows, f_fid, done, n_done)
    for i in range(n_done):
        c = done[i]
        pid = path_of[c]
        if not dep_touched[pid]:
            dep_touched[pid] = True
            dep_list[ic[_N_DEP]] = pid
            ic[_N_DEP] += 1
        dep_count[pid] += 1
        dep_rate[pid] = f_rate[c]
        dep_bneck[pid] = f_bneck[c]
        f_remaining[c] = 0.0
        f_rate[c] = 0.0
        f_active[c] = False
        for k in range(res_ptr[pid], res_ptr[pid + 1]):
            r = res_idx[k]
            n_on[r] -= 1
            carried[r] += f_size[c]
    return n_done, n_done > 0 or ic[_N_DIRTY] > 0


@njit(cache=True)
def _grown(ring, head, tail, extra):
    """``ring`` (a circular buffer holding counters ``head .. tail-1`` at ``counter % size``)
    with room for ``extra`` more, doubled as often as needed, or itself while it has room."""
    size = ring.shape[0]
    if tail - head + extra <= size:
        return ring
    new_size = 2 * size
    while tail - head + extra > new_size:
        new_size *= 2
    bigger = np.empty(new_size, dtype=ring.dtype)
    for k in range(head, tail):
        bigger[k % new_size] = ring[k % size]
    return bigger


@njit(cache=True)
def deliver_into(code, lat, now, events, batches, ic, fc, codes, counts):
    """runner.drained's delivery of transfer ``code``: one path latency later, in the batch of
    its instant (one SimPy event per delivery instant, members in drain order); at once without
    latency. The delivery queue ``(codes, counts)`` must have room for one more
    (:func:`make_room`: :func:`released` makes it for one transfer, :func:`wake_up` once for
    all the flows it drains).

    Where every path has the same latency, batches open in time order and close in that order,
    so a batch is one ``BATCH`` event and its members wait in the circular queue ``codes``
    (``counts``: members per batch); :func:`open_batch` hands them out. Otherwise every member
    is its own ``DELIVER`` event ``(t, batch event id, member, ...)``, batches found by time in
    ``batches``."""
    if lat <= 0:
        heapq.heappush(events, (now, np.int64(-1), np.int64(0), np.int64(DELIVER), code))
        return
    t = now + lat
    if ic[_ONE_LATENCY]:
        if _queue_delivery(code, t, ic, fc, codes, counts):
            heapq.heappush(events, (t, ic[_EID], np.int64(0), np.int64(BATCH), ic[_B_TAIL] - 1))
        return
    if t in batches:
        b_eid, n_mem = batches[t]
        batches[t] = (b_eid, n_mem + 1)
    else:
        ic[_EID] += 1
        b_eid, n_mem = ic[_EID], np.int64(0)
        batches[t] = (b_eid, np.int64(1))
    heapq.heappush(events, (t, b_eid, n_mem, np.int64(DELIVER), code))


@njit(cache=True, _nrt=False)
def _queue_delivery(code, t, ic, fc, codes, counts):
    """The delivery queue's part of :func:`deliver_into` (one path latency, ``t`` the
    delivery instant): ``code`` joins the batch of ``t``, opened here if it is not the last one.
    Returns whether it opened one: the caller then pushes its ``BATCH`` event
    ``(t, ic[_EID], 0, BATCH, ic[_B_TAIL] - 1)`` (no other event is created in between, so the
    event id is the one the engine gives it). Without the runtime: no reference counts per call."""
    opened = False
    if t != fc[_T_BATCH]:
        ic[_EID] += 1
        fc[_T_BATCH] = t
        counts[ic[_B_TAIL] % counts.shape[0]] = 0
        ic[_B_TAIL] += 1
        opened = True
    codes[ic[_Q_TAIL] % codes.shape[0]] = code
    ic[_Q_TAIL] += 1
    counts[(ic[_B_TAIL] - 1) % counts.shape[0]] += 1
    return opened


@njit(cache=True)
def make_room(n, ic, codes, counts):
    """The delivery queue ``(codes, counts)`` with room for ``n`` more deliveries (each may
    open a batch)."""
    return (_grown(codes, ic[_Q_HEAD], ic[_Q_TAIL], n),
            _grown(counts, ic[_B_HEAD], ic[_B_TAIL], n))


@njit(cache=True, _nrt=False)
def open_batch(now, ic, fc, counts):
    """A ``BATCH`` event: close the batch of this instant and return ``(first, count)`` of its
    members (queue counters; member ``k`` is ``codes[(first + k) % codes.size]``). The caller
    delivers them in order, then calls :func:`close_batch`."""
    if fc[_T_BATCH] == now:
        fc[_T_BATCH] = -np.inf
    n = counts[ic[_B_HEAD] % counts.shape[0]]
    ic[_B_HEAD] += 1
    return ic[_Q_HEAD], n


@njit(cache=True, _nrt=False)
def close_batch(ic, n):
    ic[_Q_HEAD] += n


@njit(cache=True)
def delivering(member, e_ev, now, batches):
    """The first member of a ``DELIVER`` batch closes the batch of its instant."""
    if member == 0 and e_ev >= 0 and now in batches:
        del batches[now]


@njit(cache=True)
def queue_reduce(dur, dev, now, dev_free, dev_busy_s, events, ic, code):
    """Engine.compute: queue a reduction of ``dur`` seconds on device ``dev`` (FIFO); its
    completion is an event. False (nothing queued) when it takes no time."""
    if dur <= 0:
        return False
    start = max(now, dev_free[dev])
    end = start + dur
    dev_free[dev] = end
    dev_busy_s[dev] += dur
    ic[_EID] += 1
    heapq.heappush(events, (now + (end - now), ic[_EID], np.int64(0), np.int64(COMPUTE), code))
    return True


@njit(cache=True)
def released(c, code, now, net, events, batches, ic, fc, codes, counts, busy, pending,
             n_pending):
    """runner.drained for transfer ``code`` of connection ``c``: the connection is free, the
    transfer is delivered one path latency later, and ``c`` joins the try_start worklist.
    Returns ``(worklist length, codes, counts)`` (the delivery queue, grown when full)."""
    busy[c] = False
    codes, counts = make_room(1, ic, codes, counts)
    deliver_into(code, net[6][net[0][c]], now, events, batches, ic, fc, codes, counts)
    pending[n_pending] = c
    return n_pending + 1, codes, counts


@njit(cache=True)
def wake_up(now, net, fl, rs, inst, ic, fc, flows, events, batches, codes, counts, busy,
            on_wire, pending, n_pending):
    """A (current) wake-up: drain the flows due (:func:`drain`) and release each, in drain
    order, as :func:`released` does but with room made once for all their deliveries (growing
    returns new arrays, and numba reference-counts every array a loop reassigns; a shared
    helper called per flow measured ~4 % slower at 4,096 ranks, even inlined). Returns
    ``(solve due, worklist length, codes, counts)``."""
    n_done, due = drain(now, net, fl, rs, inst, ic, fc, flows, events)
    done = inst[7]
    path_of, latency = net[0], net[6]
    codes, counts = make_room(n_done, ic, codes, counts)
    for k in range(n_done):
        c = done[k]
        busy[c] = False
        lat = latency[path_of[c]]
        if ic[_ONE_LATENCY] and lat > 0:
            # deliver_into's common case, its per-flow part without the runtime
            t = now + lat
            if _queue_delivery(on_wire[c], t, ic, fc, codes, counts):
                heapq.heappush(events, (t, ic[_EID], np.int64(0), np.int64(BATCH),
                                        ic[_B_TAIL] - 1))
        else:
            deliver_into(on_wire[c], lat, now, events, batches, ic, fc, codes, counts)
        pending[n_pending] = c
        n_pending += 1
    return due, n_pending, codes, counts
