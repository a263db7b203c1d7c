"""The numba kernel of :mod:`.tree_pipeline`: the event engine's algorithm on tree state.

Read :mod:`.runner` and :mod:`.network` first: every function here is the compiled twin of one
there (``try_start``, ``drained``, ``delivered``, ``complete``; ``FlowNetwork.start``,
``_match``, ``_component``, ``_solve``, ``_arm``, ``_wake``), with the same event order.
Flows are indexed by FIFO connection (a connection has at most one flow on the wire), transfers
by ``(connection, segment)``.

Event heap entries are ``(time, eid, member, kind, code)``: ``eid`` is the creation counter that
orders SimPy's events of one instant; ``member`` orders the transfers of one delivery batch (the
engine delivers a batch in one callback, in drain order); ``code = connection * segments +
segment``.
"""

from __future__ import annotations

import heapq

import numpy as np
from numba import njit, types
from numba.typed import Dict, List

_WAKE, _DELIVER, _COMPUTE, _ZERO = 0, 1, 2, 3
_EPS = 1e-12   # the engine's drain tolerance (network._EPS)
_BATCH = types.UniTuple(types.int64, 2)   # delivery batch: (event id, members so far)


@njit(cache=True)
def _ready(c, s, conn_tree, conn_child, conn_kind, parent, roots, child_ptr, child_idx,
           up_conn, down_conn, done_cnt, has_up):
    """Whether segment ``s`` of connection ``c`` has all its data-flow predecessors done."""
    t = conn_tree[c]
    r = conn_child[c]
    if conn_kind[c] == 0:                      # up: r -> parent, after r's children's s
        for k in range(child_ptr[t, r], child_ptr[t, r + 1]):
            if done_cnt[up_conn[t, child_idx[t, k]]] <= s:
                return False
        return True
    par = parent[t, r]                         # down: parent -> r
    if par == roots[t]:
        if has_up:
            for k in range(child_ptr[t, par], child_ptr[t, par + 1]):
                if done_cnt[up_conn[t, child_idx[t, k]]] <= s:
                    return False
        return True
    return done_cnt[down_conn[t, par]] > s


@njit(cache=True)
def _arm(flows, f_version, events, now, eid, wake_gen, wake_time):
    """FlowNetwork._arm: one pending wake-up, for the earliest valid completion. Returns the
    updated ``(eid, wake_gen, wake_time)``."""
    while len(flows) > 0 and flows[0][2] != f_version[flows[0][3]]:
        heapq.heappop(flows)
    if len(flows) == 0:
        return eid, wake_gen, np.inf
    t = flows[0][0]
    if t == wake_time:
        return eid, wake_gen, wake_time
    eid += 1
    heapq.heappush(events, (now + max(0.0, t - now), eid, np.int64(0), np.int64(_WAKE),
                            wake_gen + 1))
    return eid, wake_gen + 1, t


@njit(cache=True)
def _deliver(events, batches, now, lat, eid, code):
    """runner.drained's delivery: one path latency later, in the batch of its instant (one
    SimPy event per delivery instant, members in drain order); at once without latency.
    Returns the updated event counter."""
    if lat <= 0:
        heapq.heappush(events, (now, np.int64(-1), np.int64(0), np.int64(_DELIVER), code))
        return eid
    t = now + lat
    if t in batches:
        b_eid, n_mem = batches[t]
        batches[t] = (b_eid, n_mem + 1)
    else:
        eid += 1
        b_eid, n_mem = eid, np.int64(0)
        batches[t] = (b_eid, np.int64(1))
    heapq.heappush(events, (t, b_eid, n_mem, np.int64(_DELIVER), code))
    return eid


@njit(cache=True)
def _tally(r, user_ptr, user_idx, f_active, f_rate, f_seen, cand, r_load, r_top):
    """Load and fastest rate of resource ``r`` into ``r_load[r]`` and ``r_top[r]``, with the
    candidate rates ``cand`` for the flows being re-solved (marked in ``f_seen``)."""
    total = 0.0
    top = 0.0
    for k in range(user_ptr[r], user_ptr[r + 1]):
        u = user_idx[k]
        if f_active[u]:
            rate = cand[u] if f_seen[u] else f_rate[u]
            total += rate
            if rate > top:
                top = rate
    r_load[r] = total
    r_top[r] = top


@njit(cache=True)
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


@njit(cache=True)
def _fill(res, member, rate, todo, clamp, user_ptr, user_idx, path_of, res_ptr, res_idx,
          r_left, r_cnt, f_bneck):
    """Progressive filling (network.max_min_rates) of the ``member`` flows whose ``rate`` is
    still negative, on resources ``res`` holding ``r_left`` capacity for ``r_cnt`` of them: the
    resource with the smallest fair share freezes its flows at that share, repeatedly, and is
    their bottleneck (``f_bneck``). ``clamp`` reads negative leftovers as 0 (a local
    re-solve). Returns the flows left."""
    heap = [(0.0, np.int64(0))]
    heap.pop()
    for r in res:
        if r_cnt[r] > 0:
            left = max(r_left[r], 0.0) if clamp else r_left[r]
            heap.append((left / r_cnt[r], np.int64(r)))
    heapq.heapify(heap)
    while todo > 0 and len(heap) > 0:
        share, r = heapq.heappop(heap)
        cnt = r_cnt[r]
        if cnt == 0:
            continue
        current = (max(r_left[r], 0.0) if clamp else r_left[r]) / cnt
        if current != share:
            heapq.heappush(heap, (current, r))
            continue
        for k in range(user_ptr[r], user_ptr[r + 1]):
            c = user_idx[k]
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
                    heapq.heappush(heap, (max(r_left[r2], 0.0) / r_cnt[r2], np.int64(r2)))
        r_cnt[r] = 0
    return todo


@njit(cache=True)
def _local_solve(dirty, n_dirty, now, path_of, res_ptr, res_idx, caps, user_ptr, user_idx,
                 f_active, f_rate, f_remaining, f_tlast, f_finish, f_version, f_fid, f_seen,
                 f_fail, f_bneck, r_seen, r_open, r_left, r_cnt, r_load, r_top, cand, flows, limit,
                 work):
    """Re-solve the flows around the dirty resources, growing the region until the result is
    provably the max-min fair allocation; then apply it and return True. Return False (nothing
    changed) once the region would exceed ``limit`` flows: the caller solves the component.

    A round re-fills the region's flows (``group``: every active flow on an *opened* resource)
    on the capacity that the flows outside leave them, then checks the max-min condition on
    every flow that touches a resource of the region. Flows elsewhere kept their resources'
    loads, so they keep their bottlenecks; so does an outside flow whose recorded bottleneck
    (``f_bneck``, kept for every active flow) lies outside the region. When every checked flow
    has one, the allocation is the (unique) max-min fair one. A flow that fails opens the resources of its path: the
    next round re-solves its neighbourhood too.

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
            r = opened[i]
            for k in range(user_ptr[r], user_ptr[r + 1]):
                c = user_idx[k]
                if f_active[c] and not f_seen[c]:
                    f_seen[c] = True
                    group[n_group] = c
                    n_group += 1
                    pid = path_of[c]
                    for j in range(res_ptr[pid], res_ptr[pid + 1]):
                        r2 = res_idx[j]
                        if not r_seen[r2]:
                            r_seen[r2] = True
                            res[n_res] = r2
                            n_res += 1
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
                if f_active[u]:
                    if f_seen[u]:
                        cnt += 1
                    else:
                        left -= f_rate[u]
            r_left[r] = left
            r_cnt[r] = cnt
        for i in range(n_group):
            cand[group[i]] = -1.0
        todo = _fill(res[:n_res], f_seen, cand, n_group, True, user_ptr, user_idx, path_of,
                     res_ptr, res_idx, r_left, r_cnt, f_bneck)
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
                f_rate[c] = rate
                f_version[c] += 1
                f_finish[c] = now + f_remaining[c] / rate
                heapq.heappush(flows, (f_finish[c], f_fid[c], f_version[c], np.int64(c)))
    for i in range(n_group):
        f_seen[group[i]] = False
    for i in range(n_res):
        r_seen[res[i]] = False
    for i in range(n_opened):
        r_open[opened[i]] = False
    return ok


@njit(cache=True)
def simulate_tree_pipeline(conn_tree, conn_child, conn_kind, path_of, res_ptr, res_idx,
                           latency, caps, seg_bytes, parent, roots, child_ptr, child_idx,
                           up_conn, down_conn, rank_device, rank_rate, n_devices):
    """Run the tree pipeline; return ``(end_time_s, bytes_per_resource, reduce_s_per_device,
    solves)`` (``end_time_s`` is ``inf`` when transfers never complete)."""
    n_conn = conn_tree.shape[0]
    n_seg = seg_bytes.shape[1]
    n_res = caps.shape[0]
    n_paths = res_ptr.shape[0] - 1
    has_up = False
    for c in range(n_conn):
        if conn_kind[c] == 0:
            has_up = True
    inf = np.inf
    # one path latency for every connection: delivery instants are created in time order,
    # so a delivery joins the last batch or opens a new one (no lookup table needed)
    one_latency = True
    for c in range(n_conn):
        if latency[path_of[c]] != latency[path_of[0]]:
            one_latency = False

    # static users of every resource (connections whose path crosses it), CSR
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
    max_fanout = 1
    for t in range(child_ptr.shape[0]):
        for r in range(child_ptr.shape[1] - 1):
            max_fanout = max(max_fanout, child_ptr[t, r + 1] - child_ptr[t, r])

    # connection state
    busy = np.zeros(n_conn, dtype=np.bool_)
    next_seg = np.zeros(n_conn, dtype=np.int64)
    done_cnt = np.zeros(n_conn, dtype=np.int64)
    f_active = np.zeros(n_conn, dtype=np.bool_)
    f_rate = np.zeros(n_conn)
    f_remaining = np.zeros(n_conn)
    f_tlast = np.zeros(n_conn)
    f_finish = np.full(n_conn, inf)
    f_version = np.zeros(n_conn, dtype=np.int64)
    f_fid = np.zeros(n_conn, dtype=np.int64)
    f_size = np.zeros(n_conn)
    f_seg = np.zeros(n_conn, dtype=np.int64)
    f_seen = np.zeros(n_conn, dtype=np.bool_)
    f_fail = np.zeros(n_conn, dtype=np.bool_)
    f_bneck = np.zeros(n_conn, dtype=np.int64)      # a bottleneck resource of each active flow
    f_shared = np.zeros(n_conn, dtype=np.bool_)
    new_rate = np.zeros(n_conn)
    # resource state
    n_on = np.zeros(n_res, dtype=np.int64)
    carried = np.zeros(n_res)
    r_seen = np.zeros(n_res, dtype=np.bool_)
    r_dirty = np.zeros(n_res, dtype=np.bool_)
    r_open = np.zeros(n_res, dtype=np.bool_)
    r_load = np.zeros(n_res)
    r_top = np.zeros(n_res)
    r_left = np.zeros(n_res)
    r_cnt = np.zeros(n_res, dtype=np.int64)
    # departures at this instant, per path: count and rate (flows on one path share a rate)
    dep_count = np.zeros(n_paths, dtype=np.int64)
    dep_rate = np.zeros(n_paths)
    dep_bneck = np.zeros(n_paths, dtype=np.int64)
    dep_touched = np.zeros(n_paths, dtype=np.bool_)
    # work lists, preallocated (each is bounded: see where it is filled)
    dep_list = np.empty(n_paths, dtype=np.int64)      # distinct paths
    n_dep = 0
    arrived = np.empty(n_conn, dtype=np.int64)        # a connection starts one flow at a time
    n_arrived = 0
    dirty = np.empty(n_res, dtype=np.int64)           # distinct resources
    n_dirty = 0
    done = np.empty(n_conn, dtype=np.int64)           # flows drained at one wake-up
    stack = np.empty(n_res, dtype=np.int64)
    comp_res = np.empty(n_res, dtype=np.int64)
    comp_flows = np.empty(n_conn, dtype=np.int64)
    work = np.empty((4, max(n_conn, n_res)), dtype=np.int64)
    # try_start worklist: one event adds at most a connection per drained flow, or the
    # connections a completion unblocks
    pending = np.empty(n_conn + max_fanout + 2, dtype=np.int64)
    n_pending = 0
    # devices (reduction FIFO queues)
    dev_free = np.zeros(n_devices)
    dev_busy_s = np.zeros(n_devices)

    events = [(0.0, np.int64(0), np.int64(0), np.int64(0), np.int64(0))]
    events.pop()
    flows = [(0.0, np.int64(0), np.int64(0), np.int64(0))]
    flows.pop()
    batches = Dict.empty(key_type=types.float64, value_type=_BATCH)
    # the last delivery batch (used when every path has the same latency)
    last_batch_t = -inf
    last_batch_eid = np.int64(0)
    last_batch_size = np.int64(0)

    now = 0.0
    eid = np.int64(0)
    next_fid = np.int64(0)
    solves = np.int64(0)
    solve_pending = False
    wake_gen = np.int64(0)
    wake_time = inf
    left_transfers = n_conn * n_seg
    end_time = 0.0
    local_limit = max(64, n_conn // 8)

    for c in range(n_conn):
        pending[n_pending] = c
        n_pending += 1

    while True:
        # -- try_start on the worklist, in order (the engine calls it inline; nothing between
        #    the calls depends on their order except flow ids, which follow this order too)
        for i in range(n_pending):
            c = pending[i]
            if busy[c] or next_seg[c] >= n_seg:
                continue
            s = next_seg[c]
            if not _ready(c, s, conn_tree, conn_child, conn_kind, parent, roots, child_ptr,
                          child_idx, up_conn, down_conn, done_cnt, has_up):
                continue
            next_seg[c] = s + 1
            busy[c] = True
            size = seg_bytes[conn_tree[c], s]
            f_fid[c] = next_fid
            next_fid += 1
            f_seg[c] = s
            if size <= 0:
                eid += 1
                heapq.heappush(events, (now, eid, np.int64(0), np.int64(_ZERO),
                                        np.int64(c * n_seg + s)))
                continue
            f_active[c] = True
            f_size[c] = size
            f_remaining[c] = size
            f_rate[c] = 0.0
            f_tlast[c] = now
            f_finish[c] = inf
            pid = path_of[c]
            for k in range(res_ptr[pid], res_ptr[pid + 1]):
                n_on[res_idx[k]] += 1
            arrived[n_arrived] = c
            n_arrived += 1
            solve_pending = True
        n_pending = 0

        top = events[0][0] if len(events) > 0 else inf
        if solve_pending and not top <= now:
            # ---------------- FlowNetwork._solve --------------------------------------------
            solve_pending = False
            solves += 1
            # _match: take over a drained flow's rate on the same path; alone -> own rate
            for i in range(n_arrived):
                c = arrived[i]
                if not f_active[c] or f_remaining[c] <= 0.0:
                    continue
                pid = path_of[c]
                if dep_count[pid] > 0:
                    dep_count[pid] -= 1
                    rate = dep_rate[pid]
                    f_bneck[c] = dep_bneck[pid]
                else:
                    rate = inf
                    for k in range(res_ptr[pid], res_ptr[pid + 1]):
                        r = res_idx[k]
                        if n_on[r] != 1:
                            rate = 0.0
                            break
                        if caps[r] < rate:
                            rate = caps[r]
                            f_bneck[c] = r
                    if rate == 0.0:
                        for k in range(res_ptr[pid], res_ptr[pid + 1]):
                            r = res_idx[k]
                            if not r_dirty[r]:
                                r_dirty[r] = True
                                dirty[n_dirty] = r
                                n_dirty += 1
                        continue
                f_rate[c] = rate
                f_tlast[c] = now
                f_version[c] += 1
                f_finish[c] = now + f_remaining[c] / rate
                heapq.heappush(flows, (f_finish[c], f_fid[c], f_version[c], np.int64(c)))
            for i in range(n_dep):
                pid = dep_list[i]
                if dep_count[pid] > 0:
                    for k in range(res_ptr[pid], res_ptr[pid + 1]):
                        r = res_idx[k]
                        if not r_dirty[r]:
                            r_dirty[r] = True
                            dirty[n_dirty] = r
                            n_dirty += 1
                dep_count[pid] = 0
                dep_touched[pid] = False
            n_dep = 0
            n_arrived = 0
            # Local solve first: the flows around the dirty resources are re-filled on what
            # the other flows leave them; the result is accepted only if every flow around has
            # a bottleneck (a saturated resource on which no flow is faster), which makes it
            # THE max-min fair allocation (it is unique). Otherwise the component is solved.
            if n_dirty > 0 and _local_solve(
                    dirty, n_dirty, now, path_of, res_ptr, res_idx, caps, user_ptr, user_idx,
                    f_active, f_rate, f_remaining, f_tlast, f_finish, f_version, f_fid, f_seen,
                    f_fail, f_bneck, r_seen, r_open, r_left, r_cnt, r_load, r_top, new_rate, flows,
                    local_limit, work):
                for i in range(n_dirty):
                    r_dirty[dirty[i]] = False
                n_dirty = 0
            # _component: resources and active flows connected to the dirty resources
            n_comp_res = 0
            n_comp_flows = 0
            n_stack = 0
            for i in range(n_dirty):
                r = dirty[i]
                r_dirty[r] = False
                if not r_seen[r]:
                    r_seen[r] = True
                    comp_res[n_comp_res] = r
                    n_comp_res += 1
                    stack[n_stack] = r
                    n_stack += 1
            n_dirty = 0
            while n_stack > 0:
                n_stack -= 1
                r = stack[n_stack]
                for k in range(user_ptr[r], user_ptr[r + 1]):
                    c = user_idx[k]
                    if f_active[c] and not f_seen[c]:
                        f_seen[c] = True
                        comp_flows[n_comp_flows] = c
                        n_comp_flows += 1
                        pid = path_of[c]
                        for j in range(res_ptr[pid], res_ptr[pid + 1]):
                            r2 = res_idx[j]
                            if not r_seen[r2]:
                                r_seen[r2] = True
                                comp_res[n_comp_res] = r2
                                n_comp_res += 1
                                stack[n_stack] = r2
                                n_stack += 1
            if n_comp_flows > 0:
                fids = np.empty(n_comp_flows, dtype=np.int64)
                for i in range(n_comp_flows):
                    fids[i] = f_fid[comp_flows[i]]
                order = np.argsort(fids)
                n_shared = 0
                for i in order:
                    c = comp_flows[i]
                    if f_rate[c] > 0.0:
                        f_remaining[c] -= f_rate[c] * (now - f_tlast[c])
                        if f_remaining[c] < 0.0:
                            f_remaining[c] = 0.0
                    f_tlast[c] = now
                    rate = inf
                    pid = path_of[c]
                    for k in range(res_ptr[pid], res_ptr[pid + 1]):
                        r = res_idx[k]
                        if n_on[r] != 1:
                            rate = 0.0
                            break
                        if caps[r] < rate:
                            rate = caps[r]
                            f_bneck[c] = r
                    if rate == 0.0:
                        f_shared[c] = True
                        new_rate[c] = -1.0
                        n_shared += 1
                    else:
                        new_rate[c] = rate
                if n_shared > 0:
                    # progressive filling (network.max_min_rates): the resource with the
                    # smallest fair share freezes its flows at that share, repeatedly
                    for i in range(n_comp_res):
                        r = comp_res[i]
                        r_left[r] = caps[r]
                        r_cnt[r] = 0
                    for i in order:
                        c = comp_flows[i]
                        if f_shared[c]:
                            pid = path_of[c]
                            for k in range(res_ptr[pid], res_ptr[pid + 1]):
                                r_cnt[res_idx[k]] += 1
                    _fill(comp_res[:n_comp_res], f_shared, new_rate, n_shared, False, user_ptr,
                          user_idx, path_of, res_ptr, res_idx, r_left, r_cnt, f_bneck)
                for i in order:
                    c = comp_flows[i]
                    rate = new_rate[c]
                    if rate != f_rate[c] or f_finish[c] == inf:
                        f_rate[c] = rate
                        f_version[c] += 1
                        f_finish[c] = now + f_remaining[c] / rate
                        heapq.heappush(flows, (f_finish[c], f_fid[c], f_version[c],
                                               np.int64(c)))
                    f_seen[c] = False
                    f_shared[c] = False
            for i in range(n_comp_res):
                r_seen[comp_res[i]] = False
            eid, wake_gen, wake_time = _arm(flows, f_version, events, now, eid, wake_gen,
                                            wake_time)
            continue

        if len(events) == 0:
            break
        t_ev, e_ev, member, kind, code = heapq.heappop(events)
        now = t_ev
        if kind == _WAKE:
            if code != wake_gen:
                continue
            wake_time = inf
            limit = now + _EPS * max(1.0, abs(now))
            n_done = 0
            while len(flows) > 0 and (flows[0][2] != f_version[flows[0][3]]
                                      or flows[0][0] <= limit):
                _t, _fid, ver, c = heapq.heappop(flows)
                if ver == f_version[c]:
                    f_version[c] += 1
                    done[n_done] = c
                    n_done += 1
            for i in range(n_done):
                c = done[i]
                pid = path_of[c]
                if not dep_touched[pid]:
                    dep_touched[pid] = True
                    dep_list[n_dep] = pid
                    n_dep += 1
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
            if n_done > 0 or n_dirty > 0:
                solve_pending = True
            else:
                eid, wake_gen, wake_time = _arm(flows, f_version, events, now, eid, wake_gen,
                                                wake_time)
            # on_drained of each, in drain order: runner.drained, then a delivery one path
            # latency later, in the batch of its instant (one SimPy event per delivery instant,
            # members in drain order); at once without latency
            for i in range(n_done):
                c = done[i]
                busy[c] = False
                code = np.int64(c * n_seg + f_seg[c])
                lat = latency[path_of[c]]
                if lat <= 0:
                    heapq.heappush(events, (now, np.int64(-1), np.int64(0), np.int64(_DELIVER),
                                            code))
                elif one_latency:
                    t = now + lat
                    if t != last_batch_t:
                        eid += 1
                        last_batch_t, last_batch_eid, last_batch_size = t, eid, np.int64(0)
                    heapq.heappush(events, (t, last_batch_eid, last_batch_size,
                                            np.int64(_DELIVER), code))
                    last_batch_size += 1
                else:
                    eid = _deliver(events, batches, now, lat, eid, code)
                pending[n_pending] = c
                n_pending += 1
            continue

        c = code // n_seg
        s = code % n_seg
        if kind == _ZERO:
            busy[c] = False
            lat = latency[path_of[c]]
            if one_latency and lat > 0:
                t = now + lat
                if t != last_batch_t:
                    eid += 1
                    last_batch_t, last_batch_eid, last_batch_size = t, eid, np.int64(0)
                heapq.heappush(events, (t, last_batch_eid, last_batch_size,
                                        np.int64(_DELIVER), code))
                last_batch_size += 1
            else:
                eid = _deliver(events, batches, now, lat, eid, code)
            pending[n_pending] = c
            n_pending += 1
            continue
        if kind == _DELIVER:
            if member == 0 and e_ev >= 0:
                if one_latency:
                    if last_batch_t == now:
                        last_batch_t = -inf
                elif now in batches:
                    del batches[now]
            # runner.delivered: a reducing transfer queues on the receiver's device
            if conn_kind[c] == 0:
                dst = parent[conn_tree[c], conn_child[c]]
                rate = rank_rate[dst]
                if rate != inf:
                    dur = seg_bytes[conn_tree[c], s] / rate
                    if dur > 0:
                        dev = rank_device[dst]
                        start = max(now, dev_free[dev])
                        end = start + dur
                        dev_free[dev] = end
                        dev_busy_s[dev] += dur
                        eid += 1
                        heapq.heappush(events, (now + (end - now), eid, np.int64(0),
                                                np.int64(_COMPUTE), code))
                        continue
        # runner.complete (kind _DELIVER without compute, or _COMPUTE)
        done_cnt[c] += 1
        left_transfers -= 1
        if left_transfers == 0:
            end_time = now
        t_c = conn_tree[c]
        r = conn_child[c]
        if conn_kind[c] == 0:
            par = parent[t_c, r]
            if par != roots[t_c]:
                pending[n_pending] = up_conn[t_c, par]
                n_pending += 1
            else:
                for k in range(child_ptr[t_c, par], child_ptr[t_c, par + 1]):
                    d = down_conn[t_c, child_idx[t_c, k]]
                    if d >= 0:
                        pending[n_pending] = d
                        n_pending += 1
        else:
            for k in range(child_ptr[t_c, r], child_ptr[t_c, r + 1]):
                d = down_conn[t_c, child_idx[t_c, k]]
                if d >= 0:
                    pending[n_pending] = d
                    n_pending += 1

    if left_transfers > 0:
        return inf, carried, dev_busy_s, solves
    return end_time, carried, dev_busy_s, solves
