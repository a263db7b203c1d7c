"""The numba kernel of :mod:`.compiled`: the event engine's algorithm on any schedule.

Read :mod:`.runner` first: this main loop is the compiled twin of its ``try_start``,
``drained``, ``delivered`` and ``complete`` (dependency counts, barrier epochs, FIFO
connections), driving the flow network of :mod:`._flow_kernel` with the same event order.
Transfers are the schedule's rows; event codes are transfer indices.
"""

from __future__ import annotations

import heapq

import numpy as np
from numba import njit

from ._flow_kernel import (BATCH, DELIVER, WAKE, ZERO, _SOLVES, _WAKE_GEN, close_batch,
                           delivering, flow_state, instant_state, open_batch, push_zero,
                           queue_reduce, released, resource_state, scalars, solve, start_flow,
                           static_users, wake_up)


@njit(cache=True, _nrt=False)
def _try_starts(pending, n_pending, now, busy, head, conn_ptr, members, on_wire, waiting, epoch,
                open_epoch, nbytes, net, fl, rs, inst, ic, zero):
    """runner.try_start for the connections on the worklist, in order. Returns whether a flow
    started (a solve is due) and how many transfers drain at once (no bytes: their indices are
    in ``zero``, for the caller's ZERO events)."""
    started = False
    n_zero = 0
    for k in range(n_pending):
        c = pending[k]
        if busy[c] or head[c] == conn_ptr[c + 1]:
            continue
        i = members[head[c]]
        if waiting[i] > 0 or epoch[i] > open_epoch:
            continue
        head[c] += 1
        busy[c] = True
        on_wire[c] = i
        if start_flow(c, nbytes[i], now, net, fl, rs, inst, ic):
            started = True
        else:
            zero[n_zero] = i
            n_zero += 1
    return started, n_zero


@njit(cache=True, _nrt=False)
def _complete(i, now, t_done, pending, n_pending, waiting, dep_ptr, dep_owner, conn_of, epoch,
              epoch_left, open_epoch, n_conn):
    """runner.complete of transfer ``i`` at ``now``: its dependents' connections join the
    worklist, and every connection when its epoch was the last open one to finish. Returns the
    worklist length and the open epoch."""
    t_done[i] = now
    for k in range(dep_ptr[i], dep_ptr[i + 1]):
        j = dep_owner[k]
        waiting[j] -= 1
        if waiting[j] == 0:
            pending[n_pending] = conn_of[j]
            n_pending += 1
    e = epoch[i]
    epoch_left[e] -= 1
    if e == open_epoch:
        advanced = False
        while open_epoch < epoch_left.shape[0] - 1 and epoch_left[open_epoch] == 0:
            open_epoch += 1
            advanced = True
        if advanced:
            for c in range(n_conn):
                pending[n_pending] = c
                n_pending += 1
    return n_pending, open_epoch


@njit(cache=True)
def simulate_schedule(conn_ptr, members, conn_of, path_of, res_ptr, res_idx, latency, caps,
                      nbytes, reduce_s, reduce_dev, n_devices, waits, dep_ptr, dep_owner, epoch,
                      epoch_size):
    """Run one schedule alone; return ``(end_time_s, bytes_per_resource,
    reduce_s_per_device, solves, t_done)`` (``end_time_s`` is ``inf`` when transfers never
    complete; ``t_done`` is every transfer's completion time).

    ``members[conn_ptr[c]:conn_ptr[c+1]]``: the transfers of FIFO connection ``c`` in list order;
    ``waits[i]``: how many transfers ``i`` depends on; ``dep_owner[dep_ptr[i]:dep_ptr[i+1]]``:
    the transfers that depend on ``i``; ``epoch[i]``: its barrier epoch (``epoch_size`` per
    epoch); ``reduce_s[i]``: the reduction on device ``reduce_dev[i]`` after delivery (0: a
    copy, or reduction not charged).
    """
    n_conn = conn_ptr.shape[0] - 1
    n = nbytes.shape[0]
    n_res = caps.shape[0]
    n_paths = res_ptr.shape[0] - 1
    max_fanout = 1
    for i in range(n):
        max_fanout = max(max_fanout, dep_ptr[i + 1] - dep_ptr[i])
    user_ptr, user_idx = static_users(path_of, res_ptr, res_idx, n_res)
    net = (path_of, res_ptr, res_idx, caps, user_ptr, user_idx, latency)
    fl = flow_state(n_conn)
    rs = resource_state(n_res)
    inst = instant_state(n_conn, n_res, n_paths)
    ic, fc, events, flows, batches, codes, counts = scalars(path_of, latency, n_conn)
    busy = np.zeros(n_conn, dtype=np.bool_)
    head = conn_ptr[:-1].copy()            # next transfer of each connection (in members)
    on_wire = np.zeros(n_conn, dtype=np.int64)
    waiting = waits.copy()
    epoch_left = epoch_size.copy()
    open_epoch = 0
    t_done = np.full(n, np.nan)
    dev_free = np.zeros(n_devices)
    dev_busy_s = np.zeros(n_devices)
    # try_start worklist: one event adds a connection per drained flow, or the connections a
    # completion releases (its dependents', and all of them when an epoch opens)
    pending = np.empty(2 * n_conn + max_fanout + 2, dtype=np.int64)
    zero = np.empty(pending.shape[0], dtype=np.int64)   # transfers of no bytes, per round
    n_pending = n_conn
    pending[:n_conn] = np.arange(n_conn)
    now = 0.0
    solve_pending = False

    while True:
        started, n_zero = _try_starts(pending, n_pending, now, busy, head, conn_ptr, members,
                                      on_wire, waiting, epoch, open_epoch, nbytes, net, fl, rs,
                                      inst, ic, zero)
        solve_pending |= started
        push_zero(zero, n_zero, now, ic, events)
        n_pending = 0
        if solve_pending and not (len(events) > 0 and events[0][0] <= now):
            solve_pending = False
            solve(now, net, fl, rs, inst, ic, fc, flows, events)
            continue
        if len(events) == 0:
            break
        t_ev, e_ev, member, kind, code = heapq.heappop(events)
        now = t_ev
        if kind == WAKE:
            if code != ic[_WAKE_GEN]:      # stale: a later wake-up superseded it
                continue
            due, n_pending, codes, counts = wake_up(now, net, fl, rs, inst, ic, fc, flows,
                                                    events, batches, codes, counts, busy,
                                                    on_wire, pending, n_pending)
            solve_pending |= due
            continue
        if kind == ZERO:
            n_pending, codes, counts = released(conn_of[code], code, now, net, events, batches,
                                                ic, fc, codes, counts, busy, pending, n_pending)
            continue
        if kind == BATCH:
            # the members of one delivery instant, each delivered (and its dependents tried)
            # before the next, as the engine's one callback does
            first, n_members = open_batch(now, ic, fc, counts)
            for k in range(n_members):
                i = codes[(first + k) % codes.shape[0]]
                if not queue_reduce(reduce_s[i], reduce_dev[i], now, dev_free, dev_busy_s,
                                    events, ic, i):
                    n_pending, open_epoch = _complete(i, now, t_done, pending, 0, waiting,
                                                      dep_ptr, dep_owner, conn_of, epoch,
                                                      epoch_left, open_epoch, n_conn)
                    started, n_zero = _try_starts(pending, n_pending, now, busy, head,
                                                  conn_ptr, members, on_wire, waiting, epoch,
                                                  open_epoch, nbytes, net, fl, rs, inst, ic,
                                                  zero)
                    solve_pending |= started
                    push_zero(zero, n_zero, now, ic, events)
                    n_pending = 0
            close_batch(ic, n_members)
            continue
        if kind == DELIVER:
            delivering(member, e_ev, now, batches)
            if queue_reduce(reduce_s[code], reduce_dev[code], now, dev_free, dev_busy_s, events,
                            ic, code):
                continue
        # runner.complete (DELIVER without compute, or COMPUTE)
        n_pending, open_epoch = _complete(code, now, t_done, pending, n_pending, waiting,
                                          dep_ptr, dep_owner, conn_of, epoch, epoch_left,
                                          open_epoch, n_conn)

    if np.isnan(t_done).any():
        return np.inf, rs[1], dev_busy_s, ic[_SOLVES], t_done
    return t_done.max(), rs[1], dev_busy_s, ic[_SOLVES], t_done
