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
def _load(r, user_ptr, user_idx, f_active, f_rate, f_seen, cand):
    """Total rate on resource ``r``, with candidate rates for the flows being re-solved."""
    total = 0.0
    for k in range(user_ptr[r], user_ptr[r + 1]):
        u = user_idx[k]
        if f_active[u]:
            total += cand[u] if f_seen[u] else f_rate[u]
    return total


@njit(cache=True)
def _bottlenecked(c, rate, path_of, res_ptr, res_idx, caps, user_ptr, user_idx, f_active,
                  f_rate, f_seen, cand):
    """Whether flow ``c`` at ``rate`` has a bottleneck: a resource on its path that is saturated
    and carries no faster flow (the max-min fairness condition, to 1e-9 relative)."""
    pid = path_of[c]
    for k in range(res_ptr[pid], res_ptr[pid + 1]):
        r = res_idx[k]
        if _load(r, user_ptr, user_idx, f_active, f_rate, f_seen, cand) < caps[r] * (1 - 1e-9):
            continue
        fastest = True
        for j in range(user_ptr[r], user_ptr[r + 1]):
            u = user_idx[j]
            if f_active[u] and (cand[u] if f_seen[u] else f_rate[u]) > rate * (1 + 1e-9):
                fastest = False
                break
        if fastest:
            return True
    return False


@njit(cache=True)
def _fill(res, member, rate, todo, clamp, user_ptr, user_idx, path_of, res_ptr, res_idx,
          r_left, r_cnt):
    """Progressive filling (network.max_min_rates) of the ``member`` flows whose ``rate`` is
    still negative, on resources ``res`` holding ``r_left`` capacity for ``r_cnt`` of them: the
    resource with the smallest fair share freezes its flows at that share, repeatedly.
    ``clamp`` reads negative leftovers as 0 (a local re-solve). Returns the flows left."""
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
def _local_solve(dirty, now, path_of, res_ptr, res_idx, caps, user_ptr, user_idx, f_active,
                 f_rate, f_remaining, f_tlast, f_finish, f_version, f_fid, f_seen, r_seen,
                 r_left, r_cnt, cand, flows):
    """Re-solve only the flows on the dirty resources; True when the result is provably the
    max-min fair allocation (and applied), False to fall back to the component solve."""
    group = List.empty_list(types.int64)
    res = List.empty_list(types.int64)
    for r in dirty:
        for k in range(user_ptr[r], user_ptr[r + 1]):
            c = user_idx[k]
            if f_active[c] and not f_seen[c]:
                f_seen[c] = True
                group.append(c)
    for c in group:
        pid = path_of[c]
        for k in range(res_ptr[pid], res_ptr[pid + 1]):
            r = res_idx[k]
            if not r_seen[r]:
                r_seen[r] = True
                res.append(r)
    # capacity the other flows leave, and progressive filling of the group on it
    for r in res:
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
    for c in group:
        cand[c] = -1.0
    todo = _fill(res, f_seen, cand, len(group), True, user_ptr, user_idx, path_of, res_ptr,
                 res_idx, r_left, r_cnt)
    ok = todo == 0
    if ok:
        for c in group:
            if cand[c] <= 0.0 or not _bottlenecked(c, cand[c], path_of, res_ptr, res_idx, caps,
                                                   user_ptr, user_idx, f_active, f_rate,
                                                   f_seen, cand):
                ok = False
                break
    if ok:
        # the others keep their rates: each still needs a bottleneck
        for r in res:
            for k in range(user_ptr[r], user_ptr[r + 1]):
                u = user_idx[k]
                if f_active[u] and not f_seen[u] and not _bottlenecked(
                        u, f_rate[u], path_of, res_ptr, res_idx, caps, user_ptr, user_idx,
                        f_active, f_rate, f_seen, cand):
                    ok = False
                    break
            if not ok:
                break
    if ok:
        fids = np.empty(len(group), dtype=np.int64)
        for i in range(len(group)):
            fids[i] = f_fid[group[i]]
        for i in np.argsort(fids):
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
    for c in group:
        f_seen[c] = False
    for r in res:
        r_seen[r] = False
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
    f_shared = np.zeros(n_conn, dtype=np.bool_)
    new_rate = np.zeros(n_conn)
    # resource state
    n_on = np.zeros(n_res, dtype=np.int64)
    carried = np.zeros(n_res)
    r_seen = np.zeros(n_res, dtype=np.bool_)
    r_dirty = np.zeros(n_res, dtype=np.bool_)
    r_left = np.zeros(n_res)
    r_cnt = np.zeros(n_res, dtype=np.int64)
    # departures at this instant, per path: count and rate (flows on one path share a rate)
    dep_count = np.zeros(n_paths, dtype=np.int64)
    dep_rate = np.zeros(n_paths)
    dep_touched = np.zeros(n_paths, dtype=np.bool_)
    dep_list = List.empty_list(types.int64)
    arrived = List.empty_list(types.int64)
    dirty = List.empty_list(types.int64)
    # devices (reduction FIFO queues)
    dev_free = np.zeros(n_devices)
    dev_busy_s = np.zeros(n_devices)

    events = [(0.0, np.int64(0), np.int64(0), np.int64(0), np.int64(0))]
    events.pop()
    flows = [(0.0, np.int64(0), np.int64(0), np.int64(0))]
    flows.pop()
    batches = Dict.empty(key_type=types.float64, value_type=_BATCH)

    now = 0.0
    eid = np.int64(0)
    next_fid = np.int64(0)
    solves = np.int64(0)
    solve_pending = False
    wake_gen = np.int64(0)
    wake_time = inf
    left_transfers = n_conn * n_seg
    end_time = 0.0
    pending_starts = List.empty_list(types.int64)   # try_start worklist

    for c in range(n_conn):
        pending_starts.append(c)

    while True:
        # -- try_start on the worklist, in order (the engine calls it inline; nothing between
        #    the calls depends on their order except flow ids, which follow this order too)
        while len(pending_starts) > 0:
            c = pending_starts.pop(0)
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
            arrived.append(c)
            solve_pending = True

        top = events[0][0] if len(events) > 0 else inf
        if solve_pending and not top <= now:
            # ---------------- FlowNetwork._solve --------------------------------------------
            solve_pending = False
            solves += 1
            # _match: take over a drained flow's rate on the same path; alone -> own rate
            for c in arrived:
                if not f_active[c] or f_remaining[c] <= 0.0:
                    continue
                pid = path_of[c]
                if dep_count[pid] > 0:
                    dep_count[pid] -= 1
                    rate = dep_rate[pid]
                else:
                    rate = inf
                    for k in range(res_ptr[pid], res_ptr[pid + 1]):
                        r = res_idx[k]
                        if n_on[r] != 1:
                            rate = 0.0
                            break
                        if caps[r] < rate:
                            rate = caps[r]
                    if rate == 0.0:
                        for k in range(res_ptr[pid], res_ptr[pid + 1]):
                            r = res_idx[k]
                            if not r_dirty[r]:
                                r_dirty[r] = True
                                dirty.append(r)
                        continue
                f_rate[c] = rate
                f_tlast[c] = now
                f_version[c] += 1
                f_finish[c] = now + f_remaining[c] / rate
                heapq.heappush(flows, (f_finish[c], f_fid[c], f_version[c], np.int64(c)))
            for pid in dep_list:
                if dep_count[pid] > 0:
                    for k in range(res_ptr[pid], res_ptr[pid + 1]):
                        r = res_idx[k]
                        if not r_dirty[r]:
                            r_dirty[r] = True
                            dirty.append(r)
                dep_count[pid] = 0
                dep_touched[pid] = False
            dep_list.clear()
            arrived.clear()
            # Local solve first: the flows on the dirty resources are re-filled on what the
            # other flows leave them; the result is accepted only if every flow around has a
            # bottleneck (a saturated resource on which no flow is faster), which makes it THE
            # max-min fair allocation (it is unique). Otherwise the whole component is solved.
            if len(dirty) > 0 and _local_solve(
                    dirty, now, path_of, res_ptr, res_idx, caps, user_ptr, user_idx, f_active,
                    f_rate, f_remaining, f_tlast, f_finish, f_version, f_fid, f_seen,
                    r_seen, r_left, r_cnt, new_rate, flows):
                for r in dirty:
                    r_dirty[r] = False
                dirty.clear()
            # _component: resources and active flows connected to the dirty resources
            comp_res = List.empty_list(types.int64)
            comp_flows = List.empty_list(types.int64)
            stack = List.empty_list(types.int64)
            for r in dirty:
                r_dirty[r] = False
                if not r_seen[r]:
                    r_seen[r] = True
                    comp_res.append(r)
                    stack.append(r)
            dirty.clear()
            while len(stack) > 0:
                r = stack.pop()
                for k in range(user_ptr[r], user_ptr[r + 1]):
                    c = user_idx[k]
                    if f_active[c] and not f_seen[c]:
                        f_seen[c] = True
                        comp_flows.append(c)
                        pid = path_of[c]
                        for j in range(res_ptr[pid], res_ptr[pid + 1]):
                            r2 = res_idx[j]
                            if not r_seen[r2]:
                                r_seen[r2] = True
                                comp_res.append(r2)
                                stack.append(r2)
            if len(comp_flows) > 0:
                fids = np.empty(len(comp_flows), dtype=np.int64)
                for i in range(len(comp_flows)):
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
                    if rate == 0.0:
                        f_shared[c] = True
                        new_rate[c] = -1.0
                        n_shared += 1
                    else:
                        new_rate[c] = rate
                if n_shared > 0:
                    # progressive filling (network.max_min_rates): the resource with the
                    # smallest fair share freezes its flows at that share, repeatedly
                    for r in comp_res:
                        r_left[r] = caps[r]
                        r_cnt[r] = 0
                    for i in order:
                        c = comp_flows[i]
                        if f_shared[c]:
                            pid = path_of[c]
                            for k in range(res_ptr[pid], res_ptr[pid + 1]):
                                r_cnt[res_idx[k]] += 1
                    _fill(comp_res, f_shared, new_rate, n_shared, False, user_ptr, user_idx,
                          path_of, res_ptr, res_idx, r_left, r_cnt)
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
            for r in comp_res:
                r_seen[r] = False
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
            done = List.empty_list(types.int64)
            while len(flows) > 0 and (flows[0][2] != f_version[flows[0][3]]
                                      or flows[0][0] <= limit):
                _t, _fid, ver, c = heapq.heappop(flows)
                if ver == f_version[c]:
                    f_version[c] += 1
                    done.append(c)
            for c in done:
                pid = path_of[c]
                if not dep_touched[pid]:
                    dep_touched[pid] = True
                    dep_list.append(pid)
                dep_count[pid] += 1
                dep_rate[pid] = f_rate[c]
                f_remaining[c] = 0.0
                f_rate[c] = 0.0
                f_active[c] = False
                for k in range(res_ptr[pid], res_ptr[pid + 1]):
                    r = res_idx[k]
                    n_on[r] -= 1
                    carried[r] += f_size[c]
            if len(done) > 0 or len(dirty) > 0:
                solve_pending = True
            else:
                eid, wake_gen, wake_time = _arm(flows, f_version, events, now, eid, wake_gen,
                                                wake_time)
            # on_drained of each, in drain order: runner.drained
            for c in done:
                busy[c] = False
                eid = _deliver(events, batches, now, latency[path_of[c]], eid,
                               np.int64(c * n_seg + f_seg[c]))
                pending_starts.append(c)
            continue

        c = code // n_seg
        s = code % n_seg
        if kind == _ZERO:
            busy[c] = False
            eid = _deliver(events, batches, now, latency[path_of[c]], eid, code)
            pending_starts.append(c)
            continue
        if kind == _DELIVER:
            if member == 0 and e_ev >= 0 and now in batches:
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
                pending_starts.append(up_conn[t_c, par])
            else:
                for k in range(child_ptr[t_c, par], child_ptr[t_c, par + 1]):
                    d = down_conn[t_c, child_idx[t_c, k]]
                    if d >= 0:
                        pending_starts.append(d)
        else:
            for k in range(child_ptr[t_c, r], child_ptr[t_c, r + 1]):
                d = down_conn[t_c, child_idx[t_c, k]]
                if d >= 0:
                    pending_starts.append(d)

    if left_transfers > 0:
        return inf, carried, dev_busy_s, solves
    return end_time, carried, dev_busy_s, solves
