"""The numba kernel of :mod:`.tree_pipeline`: the event engine's algorithm on tree state.

Read :mod:`.runner` first: this main loop is the compiled twin of its ``try_start``,
``drained``, ``delivered`` and ``complete``, driving the flow network of :mod:`._flow_kernel`
with the same event order. Transfers are ``(connection, segment)``: a connection is one tree
edge in one direction and carries the segments in order; readiness comes from counters of
completed segments, never from a transfer list (memory ``O(connections)``). Event codes are
``connection * segments + segment``.
"""

from __future__ import annotations

import heapq

import numpy as np
from numba import njit

from ._flow_kernel import (_B_HEAD, _B_TAIL, _EID, _ONE_LATENCY, _Q_HEAD, _Q_TAIL, _T_WAKE,
                           BATCH, DELIVER, WAKE, ZERO, _SOLVES, _WAKE_GEN, _queue_delivery,
                           arm_due, close_batch, deliver_into, delivering, drain_flows,
                           flow_state, instant_state, make_room, open_batch, push_zero,
                           queue_reduce, released, resource_state, scalars, solve_rates,
                           start_flow, static_users)


@njit(cache=True, _nrt=False)
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


@njit(cache=True, _nrt=False)
def _try_starts(pending, n_pending, now, busy, next_seg, on_wire, seg_bytes, done_cnt, tree,
                net, fl, rs, inst, ic, zero):
    """runner.try_start for the connections on the worklist, in order (the engine calls it
    inline; nothing between the calls depends on their order except flow ids, which follow
    this order too). Returns whether a flow started (a solve is due) and how many transfers
    drain at once (no bytes: their codes are in ``zero``, for the caller's ZERO events)."""
    conn_tree, conn_child, conn_kind, parent, roots, child_ptr, child_idx, up_conn, \
        down_conn, has_up = tree
    n_seg = seg_bytes.shape[1]
    started = False
    n_zero = 0
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
        on_wire[c] = c * n_seg + s
        if start_flow(c, seg_bytes[conn_tree[c], s], now, net, fl, rs, inst, ic):
            started = True
        else:
            zero[n_zero] = c * n_seg + s
            n_zero += 1
    return started, n_zero


@njit(cache=True, _nrt=False)
def _complete(c, pending, n_pending, done_cnt, tree):
    """runner.complete of connection ``c``'s oldest segment in flight: the connections whose
    next segment may now be ready join the worklist. Returns the worklist length."""
    conn_tree, conn_child, conn_kind, parent, roots, child_ptr, child_idx, up_conn, \
        down_conn, _has_up = tree
    done_cnt[c] += 1
    t_c = conn_tree[c]
    r = conn_child[c]
    if conn_kind[c] == 0:
        par = parent[t_c, r]
        if par != roots[t_c]:
            pending[n_pending] = up_conn[t_c, par]
            return n_pending + 1
        r = par                 # the root's down connections wait for its children's up
    for k in range(child_ptr[t_c, r], child_ptr[t_c, r + 1]):
        d = down_conn[t_c, child_idx[t_c, k]]
        if d >= 0:
            pending[n_pending] = d
            n_pending += 1
    return n_pending


@njit(cache=True, _nrt=False)
def _reduction(code, seg_bytes, tree, rank_device, rank_rate):
    """The reduction runner.delivered queues for segment ``code``: ``(seconds, device)`` on
    its receiver (0 seconds: a copy, or a receiver that reduces for free)."""
    conn_tree, conn_child, conn_kind, parent = tree[0], tree[1], tree[2], tree[3]
    n_seg = seg_bytes.shape[1]
    c = code // n_seg
    if conn_kind[c] != 0:
        return 0.0, 0
    dst = parent[conn_tree[c], conn_child[c]]
    if rank_rate[dst] == np.inf:
        return 0.0, 0
    return seg_bytes[conn_tree[c], code % n_seg] / rank_rate[dst], rank_device[dst]


@njit(cache=True)
def simulate_tree_pipeline(conn_tree, conn_child, conn_kind, path_of, res_ptr, res_idx,
                           latency, caps, seg_bytes, parent, roots, child_ptr, child_idx,
                           up_conn, down_conn, rank_device, rank_rate, n_devices,
                           start_order):
    """Run the tree pipeline; return ``(end_time_s, bytes_per_resource, reduce_s_per_device,
    solves)`` (``end_time_s`` is ``inf`` when transfers never complete). ``start_order``: the
    connections in the engine's numbering (the order of the first try_start round)."""
    n_conn = conn_tree.shape[0]
    n_seg = seg_bytes.shape[1]
    n_res = caps.shape[0]
    n_paths = res_ptr.shape[0] - 1
    has_up = False
    for c in range(n_conn):
        if conn_kind[c] == 0:
            has_up = True
    busy = np.zeros(n_conn, dtype=np.bool_)
    next_seg = np.zeros(n_conn, dtype=np.int64)
    done_cnt = np.zeros(n_conn, dtype=np.int64)
    on_wire = np.zeros(n_conn, dtype=np.int64)
    tree = (conn_tree, conn_child, conn_kind, parent, roots, child_ptr, child_idx, up_conn, down_conn,
            has_up)
    max_fanout = 1
    for t in range(child_ptr.shape[0]):
        for r in range(child_ptr.shape[1] - 1):
            max_fanout = max(max_fanout, child_ptr[t, r + 1] - child_ptr[t, r])
    user_ptr, user_idx = static_users(path_of, res_ptr, res_idx, n_res)
    net = (path_of, res_ptr, res_idx, caps, user_ptr, user_idx, latency)
    fl = flow_state(n_conn)
    rs = resource_state(n_res)
    inst = instant_state(n_conn, n_res, n_paths)
    ic, fc, events, flows, batches, codes, counts = scalars(path_of, latency, n_conn)
    dev_free = np.zeros(n_devices)
    dev_busy_s = np.zeros(n_devices)
    # try_start worklist: one event adds at most a connection per drained flow, or the
    # connections a completion unblocks
    pending = np.empty(n_conn + max_fanout + 2, dtype=np.int64)
    zero = np.empty(pending.shape[0], dtype=np.int64)   # transfers of no bytes, per round
    n_pending = n_conn
    pending[:n_conn] = start_order
    done = inst[7]
    one_latency = ic[_ONE_LATENCY] != 0
    lat0 = latency[path_of[0]] if n_conn > 0 else 0.0
    reduces = False                     # any receiver that charges reductions
    for r in range(rank_rate.shape[0]):
        if rank_rate[r] != np.inf:
            reduces = True
    now = 0.0
    solve_pending = False
    last_done = 0.0

    while True:
        started, n_zero = _try_starts(pending, n_pending, now, busy, next_seg, on_wire,
                                      seg_bytes, done_cnt, tree, net, fl, rs, inst, ic, zero)
        solve_pending |= started
        if n_zero > 0:
            push_zero(zero, n_zero, now, ic, events)
        n_pending = 0
        if solve_pending and not (len(events) > 0 and events[0][0] <= now):
            # _flow_kernel.solve, its runtime-free part called here (no reference counts)
            solve_pending = False
            solve_rates(now, net, fl, rs, inst, ic, flows)
            if arm_due(flows, now, ic, fc):
                heapq.heappush(events, (now + max(0.0, fc[_T_WAKE] - now), ic[_EID],
                                        np.int64(0), np.int64(WAKE), ic[_WAKE_GEN]))
            continue
        if len(events) == 0:
            break
        t_ev, e_ev, member, kind, code = heapq.heappop(events)
        now = t_ev
        if kind == WAKE:
            if code != ic[_WAKE_GEN]:      # stale: a later wake-up superseded it
                continue
            # _flow_kernel.wake_up inline: its helpers without the runtime, the event pushes
            # and the delivery queue's growth (rare) here
            n_done, due = drain_flows(now, net, fl, rs, inst, ic, fc, flows)
            if not due and arm_due(flows, now, ic, fc):
                heapq.heappush(events, (now + max(0.0, fc[_T_WAKE] - now), ic[_EID],
                                        np.int64(0), np.int64(WAKE), ic[_WAKE_GEN]))
            if (ic[_Q_TAIL] - ic[_Q_HEAD] + n_done > codes.shape[0]
                    or ic[_B_TAIL] - ic[_B_HEAD] + n_done > counts.shape[0]):
                codes, counts = make_room(n_done, ic, codes, counts)
            for k in range(n_done):
                c = done[k]
                busy[c] = False
                lat = lat0 if one_latency else latency[path_of[c]]
                if one_latency and lat > 0:
                    t = now + lat
                    if _queue_delivery(on_wire[c], t, ic, fc, codes, counts):
                        heapq.heappush(events, (t, ic[_EID], np.int64(0), np.int64(BATCH),
                                                ic[_B_TAIL] - 1))
                else:
                    deliver_into(on_wire[c], lat, now, events, batches, ic, fc, codes, counts)
                pending[n_pending] = c
                n_pending += 1
            solve_pending |= due
            continue
        if kind == ZERO:
            n_pending, codes, counts = released(code // n_seg, code, now, net, events, batches,
                                                ic, fc, codes, counts, busy, pending, n_pending)
            continue
        if kind == BATCH:
            # the members of one delivery instant, each delivered (and its dependents tried)
            # before the next, as the engine's one callback does
            first, n_members = open_batch(now, ic, fc, counts)
            for k in range(n_members):
                code = codes[(first + k) % codes.shape[0]]
                dur, dev = 0.0, 0
                if reduces:
                    dur, dev = _reduction(code, seg_bytes, tree, rank_device, rank_rate)
                # (runtime calls only where there is an event to push: a helper compiled with
                # numba's runtime counts references of its arguments on every call)
                if not (dur > 0 and queue_reduce(dur, dev, now, dev_free, dev_busy_s, events,
                                                 ic, code)):
                    n_pending = _complete(code // n_seg, pending, 0, done_cnt, tree)
                    last_done = now
                    started, n_zero = _try_starts(pending, n_pending, now, busy, next_seg,
                                                  on_wire, seg_bytes, done_cnt, tree, net, fl,
                                                  rs, inst, ic, zero)
                    solve_pending |= started
                    if n_zero > 0:
                        push_zero(zero, n_zero, now, ic, events)
                    n_pending = 0
            close_batch(ic, n_members)
            continue
        if kind == DELIVER:
            delivering(member, e_ev, now, batches)
            dur, dev = _reduction(code, seg_bytes, tree, rank_device, rank_rate)
            if dur > 0 and queue_reduce(dur, dev, now, dev_free, dev_busy_s, events, ic, code):
                continue
        # runner.complete (DELIVER without compute, or COMPUTE)
        n_pending = _complete(code // n_seg, pending, n_pending, done_cnt, tree)
        last_done = now

    if done_cnt.sum() < n_conn * n_seg:
        return np.inf, rs[1], dev_busy_s, ic[_SOLVES]
    return last_done, rs[1], dev_busy_s, ic[_SOLVES]
