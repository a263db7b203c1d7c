"""The numba kernel of :mod:`.tree_pipeline`: the event engine's algorithm on tree state.

Read :mod:`.runner` and :mod:`._flow_kernel` first: this is the compiled twin of the runner's
``try_start``, ``drained``, ``delivered`` and ``complete`` driving the flow network of
:mod:`._flow_kernel` (``FlowNetwork.start``, ``_match``, ``_solve``, ``_wake``), with the same
events in the same order and the same floating-point operations, so the results are
bit-identical. Transfers are ``(connection, segment)``: a connection is one tree edge in one
direction and carries the segments in order; readiness comes from counters of completed
segments, never from a transfer list (memory ``O(connections)``). Event codes are
``connection * segments + segment``.

Why it keeps its own copy of the flow network's code: from 16,384 ranks on, the time goes to
waiting for memory, not to arithmetic (with :mod:`._flow_kernel`'s layout the cost per
transfer grew from ~0.2 us at 1,024 ranks to ~0.7-1.0 us at 65,536 while the work per
transfer stayed the same). The algorithm is unchanged; its state is laid out for the two ways
it is read, and the bookkeeping that cost misses without being needed is gone:

* the max-min solves walk neighbourhoods (a resource's flows, their paths, the resources on
  those): what they read is in dense, narrow arrays (a byte of flags, the two rates, the path's
  resources inline as 32-bit ids), so the neighbourhood of a rank spans few cache lines
  (connections and resources are numbered rank by rank; tree neighbours are near ranks);
* a transfer touches its own connection at each event: what only that reads (bytes left,
  times, flow id, place in the completion queue, the path's departures of the instant,
  segment counters) is one 128-byte record per connection, and so is what the tree needs: a
  completion copies its connection's completed-segment count into the records of those that
  wait for it, so a start reads its own record only;
* the completion queue lists a bucket's flows in chunks, not in a linked list through the
  connections (taking a bucket read one flow's record after the other);
* two counters the shared network keeps per event are kept lazily, with the same values where
  they are read: the flows on each resource (read only by a solve: an instant's departures
  and arrivals are applied there, once per path, and a departure that an arrival on the same
  path replaces changes nothing) and the bytes each resource carried (integer sums below
  2**53, exact in any order: computed at the end from the segments);
* a local solve's region falls into pieces that no flow being re-solved joins; each is
  filled, tallied and checked on its own while its data is in the cache (the same results:
  progressive filling orders a piece's resources by (share, id) and the pieces share nothing);
  a large component solve walks its flows in memory order (its results do not depend on the
  order); fill's heap has four children per node;
* the helpers called per transfer are inlined (``inline='always'``): a call passes every
  array of its argument tuples as some 7 machine words.

:mod:`.tree_pipeline` allocates the large arrays (numpy asks for huge pages) and builds the
records; the solves' and the queue's functions follow :mod:`._flow_kernel`'s line by line,
under its names.
"""

from __future__ import annotations

import heapq

import numpy as np
from numba import njit, types
from numba.typed import Dict

from ._flow_kernel import (_B_HEAD, _B_TAIL, _EID, _EPS, _LOCAL_LIMIT, _N_ARRIVED, _N_DEP,
                           _N_DIRTY, _NEXT_FID, _ONE_LATENCY, _Q_HEAD, _Q_TAIL, _SOLVES,
                           _T_WAKE, _WAKE_GEN, BATCH, BATCH_ENTRY, DELIVER, WAKE, ZERO,
                           _heapsort_pairs, _queue_delivery, _slot, close_batch, deliver_into,
                           delivering, make_room, open_batch, push_zero, queue_reduce)

# connection record (one row per connection, read as floats ``cr``, 64-bit ``ci`` and 32-bit
# ``cj`` integers): line 1 what a drain and a start touch (the flow's timing, its place in the
# completion queue, the path's departures of the instant), line 2 the segment counters and the
# tree: the completed-segment counts of the connections it waits for (copied there by each
# completion) and those a completion of its own unblocks. Path latencies: ``lat``.
_REM, _TLAST, _FINISH, _DEP_RATE = 0, 1, 2, 3                 # floats (``cr``)
_FID = 4                                                        # 64-bit (``ci``)
_B_OF, _QSEQ, _PATH, _DEP_COUNT, _DEP_BNECK, _ARR = range(10, 16)   # 32-bit (``cj``)
_NEXT_SEG, _DONE, _ROW, _N_PRED, _N_SUCC = range(16, 21)
#: the copies of the predecessors' completed-segment counts start here (``k_max`` of them),
#: then the successors as (connection, its copy's slot) pairs (``k_max`` of them)
_PD = 21
# connection flags (``fl[0]``, one byte each)
_ACTIVE, _SEEN, _FAIL, _SHARED, _BUSY, _TOUCHED = 1, 2, 4, 8, 16, 32
# connection solve values (``fv``, floats) and path (``res``, 32-bit: resources, bottleneck,
# then the resources)
_RATE, _CAND = 0, 1
_NRES, _BNECK, _R0 = 0, 1, 2
# resource record (64 bytes): floats (``rv``) and, through a 32-bit view of the same memory,
# counters (``ri``); the resource flags are a dense byte array of their own (``rs[3]``: a
# region's flag tests then mostly hit the cache)
_CAP, _LEFT, _LOAD, _TOP = range(4)
_N_ON, _CNT = 10, 11
RES_SLOTS = 8
# resource flags
_RSEEN, _RDIRTY, _ROPEN, _RPIECE = 1, 2, 4, 8
# completion-queue bucket record: finish time, first and last chunk, members, entries in
# the last chunk
_BT, _BHEAD, _BTAIL, _BCNT, _BFILL = range(5)
BUCKET_SLOTS = 8
# completion-queue meta: buckets in the heap, free ids, last bucket used, hash mask, free
# chunks
_M_NB, _M_NFREE, _M_LAST, _M_MASK, _M_CFREE = range(5)
#: entries per chunk of a bucket's member list
CHUNK = 8


# -- the max-min solve (network._solve; _flow_kernel.solve_rates and local_solve) ---------------
# Per connection ``fl = (flags, fv, res)``: a byte of flags, ``fv[c] = (rate, candidate rate)``
# and ``res[c] = (resources on its path, bottleneck, the resources...)`` (32-bit); per resource
# ``rs = (rv, ri, user_ptr, flags)``: ``rv[r] = (capacity, left, load, top)``, through its
# 32-bit view ``ri[r] = (.., flows on it, count)``, the CSR of its users (``user_idx``) and
# a byte of flags.
@njit(cache=True, _nrt=False, inline='always')
def _take(r, bit, rflag, out, n):
    """Append resource ``r`` to ``out[:n]`` unless it carries flag ``bit`` (then set); returns
    the new length."""
    if not rflag[r] & bit:
        rflag[r] |= bit
        out[n] = r
        n += 1
    return n


@njit(cache=True, _nrt=False, inline='always')
def _take_path(c, bit, cres, rflag, out, n):
    """:func:`_take` for every resource on connection ``c``'s path."""
    for j in range(_R0, _R0 + cres[c, _NRES]):
        n = _take(cres[c, j], bit, rflag, out, n)
    return n


@njit(cache=True, _nrt=False, inline='always')
def _take_users(r, fl, rs, user_idx, flows_out, n_flows, res_out, n_res):
    """Append the active flows on resource ``r`` not taken yet (marking them seen) and the
    resources of their paths not seen yet. Returns the new lengths of both lists."""
    cflag, cres = fl[0], fl[2]
    ri, user_ptr, rflag = rs[1], rs[2], rs[3]
    for k in range(user_ptr[r], user_ptr[r + 1]):
        c = user_idx[k]
        f = cflag[c]
        if f & _ACTIVE and not f & _SEEN:
            cflag[c] = f | _SEEN
            flows_out[n_flows] = c
            n_flows += 1
            n_res = _take_path(c, _RSEEN, cres, rflag, res_out, n_res)
    return n_flows, n_res


@njit(cache=True, _nrt=False, inline='always')
def _tally(r, fl, rs, user_idx):
    """Load and fastest rate of resource ``r``, with the candidate rates of the flows being
    re-solved (marked seen)."""
    cflag, fv = fl[0], fl[1]
    rv, user_ptr = rs[0], rs[2]
    total = 0.0
    top = 0.0
    for k in range(user_ptr[r], user_ptr[r + 1]):
        u = user_idx[k]
        f = cflag[u]
        if f & _ACTIVE:
            x = fv[u, _CAND] if f & _SEEN else fv[u, _RATE]
            total += x
            if x > top:
                top = x
    rv[r, _LOAD] = total
    rv[r, _TOP] = top


@njit(cache=True, _nrt=False, inline='always')
def _bottleneck(c, x, fl, rs, user_idx):
    """A bottleneck of flow ``c`` at rate ``x`` (saturated, no faster flow on it, to 1e-9
    relative), or -1; resources outside the region are tallied here."""
    cres = fl[2]
    rv, ri, rflag = rs[0], rs[1], rs[3]
    for j in range(_R0, _R0 + cres[c, _NRES]):
        r = cres[c, j]
        if not rflag[r] & _RSEEN:
            _tally(r, fl, rs, user_idx)
        if rv[r, _LOAD] >= rv[r, _CAP] * (1 - 1e-9) and rv[r, _TOP] <= x * (1 + 1e-9):
            return r
    return -1


@njit(cache=True, _nrt=False)
def _less(ka, ia, kb, ib):
    """Heap order: the smaller key first, then the smaller id."""
    return ka < kb or (ka == kb and ia < ib)


#: fan-outs of the two indexed heaps: the completion queue's buckets (binary) and fill's
#: resources (four children per node: their keys share a cache line, and the depth halves; the
#: component solves fill 100,000 resources and more)
QUEUE_FAN = 2
D = 4


@njit(cache=True, _nrt=False)
def _sift_up(k, key, r, hkey, hid, pos, fan):
    """Sift entry ``(key, r)`` up from slot ``k`` of an indexed ``fan``-ary heap with inline
    keys (``pos[r]``: its slot)."""
    while k > 0:
        up = (k - 1) // fan
        if not _less(key, r, hkey[up], hid[up]):
            break
        hkey[k] = hkey[up]
        hid[k] = hid[up]
        pos[hid[k]] = k
        k = up
    hkey[k] = key
    hid[k] = r
    pos[r] = k


@njit(cache=True, _nrt=False)
def _sift_down(k, key, r, n, hkey, hid, pos, fan):
    """Sift ``(key, r)`` down from slot ``k`` of the first ``n`` slots of a ``fan``-ary heap."""
    while True:
        first = fan * k + 1
        if first >= n:
            break
        best = first
        best_key = hkey[first]
        best_id = hid[first]
        for ch in range(first + 1, min(first + fan, n)):
            if _less(hkey[ch], hid[ch], best_key, best_id):
                best = ch
                best_key = hkey[ch]
                best_id = hid[ch]
        if not _less(best_key, best_id, key, r):
            break
        hkey[k] = best_key
        hid[k] = best_id
        pos[best_id] = k
        k = best
    hkey[k] = key
    hid[k] = r
    pos[r] = k


@njit(cache=True, _nrt=False)
def _fill(res, lo, hi, member, todo, clamp, fl, rs, user_idx, heap):
    """_flow_kernel.fill: progressive filling of the flows flagged ``member`` whose candidate
    rate is still negative, on the capacity ``left`` that ``count`` of them share: the
    resource with the smallest (share, id) freezes its flows at that share, repeatedly.

    One heap entry per resource, keyed by its last share (``heap = (keys, ids, place of each
    resource)``, the place -1 outside it); the order (share, id) is total, so the resources
    come out in the same order from any heap."""
    cflag, fv, cres = fl
    rv, ri, user_ptr, rflag = rs
    hkey, hid, pos = heap
    n = 0
    for i in range(lo, hi):
        r = res[i]
        m = ri[r, _CNT]
        if m > 0:
            left = rv[r, _LEFT]
            _sift_up(n, (max(left, 0.0) if clamp else left) / m, r, hkey, hid, pos, D)
            n += 1
    while todo > 0 and n > 0:
        r = hid[0]
        pos[r] = -1
        n -= 1
        if n > 0:
            _sift_down(0, hkey[n], hid[n], n, hkey, hid, pos, D)
        m = ri[r, _CNT]
        if m == 0:
            continue
        left = rv[r, _LEFT]
        share = (max(left, 0.0) if clamp else left) / m
        for k in range(user_ptr[r], user_ptr[r + 1]):
            c = user_idx[k]
            if not cflag[c] & member or fv[c, _CAND] >= 0.0:
                continue
            fv[c, _CAND] = share
            cres[c, _BNECK] = r
            todo -= 1
            for j in range(_R0, _R0 + cres[c, _NRES]):
                r2 = cres[c, j]
                rv[r2, _LEFT] -= share
                ri[r2, _CNT] -= 1
                m2 = ri[r2, _CNT]
                if r2 != r and m2 > 0:
                    key = max(rv[r2, _LEFT], 0.0) / m2
                    k2 = pos[r2]
                    if k2 < 0:
                        _sift_up(n, key, r2, hkey, hid, pos, D)
                        n += 1
                    elif k2 > 0 and _less(key, r2, hkey[(k2 - 1) // D], hid[(k2 - 1) // D]):
                        _sift_up(k2, key, r2, hkey, hid, pos, D)
                    else:
                        _sift_down(k2, key, r2, n, hkey, hid, pos, D)
        ri[r, _CNT] = 0
    for i in range(n):
        pos[hid[i]] = -1
    return todo


@njit(cache=True, _nrt=False)
def _local_solve(dirty, n_dirty, now, fl, rs, cr, ci, cj, user_idx, bf, bi, qs, limit, work,
                 heap):
    """_flow_kernel.local_solve: re-solve the flows around the dirty resources, growing the
    region until the result is provably max-min fair (then applied: True), or give up past
    ``limit`` flows (nothing changed: False)."""
    cflag, fv, cres = fl
    rv, ri, user_ptr, rflag = rs
    group = work[0]
    res = work[1]
    opened = work[2]
    failing = work[3]
    n_group = 0
    n_res = 0
    n_opened = 0
    n_failing = 0
    ok = False
    for i in range(n_dirty):
        n_opened = _take(dirty[i], _ROPEN, rflag, opened, n_opened)
    first_new = 0
    while True:
        n_before = n_group
        for i in range(first_new, n_opened):
            n_group, n_res = _take_users(opened[i], fl, rs, user_idx, group, n_group, res,
                                         n_res)
        first_new = n_opened
        if n_group == n_before or n_group > limit:
            break
        # The region falls into pieces that no group flow joins. Piece by piece (the data of
        # one piece stays in the cache): the capacity the other flows leave each resource,
        # progressive filling of the group's flows on it (a small heap each; within a piece the
        # same order, so the same rates), the resources' loads, and the max-min condition on
        # the group's flows (each has all its resources in its piece). Then the condition on
        # the outside flows sharing the region's resources, which may span pieces. (The order
        # in which flows fail changes only the order the next round takes them in.)
        piece = work[4]
        n_piece = 0
        todo = n_group
        n_failing = 0
        for i in range(n_res):
            r = res[i]
            if rflag[r] & _RPIECE:
                continue
            rflag[r] |= _RPIECE
            first = n_piece
            piece[n_piece] = r
            n_piece += 1
            q = first
            members = 0
            while q < n_piece:
                y = piece[q]
                q += 1
                x = rv[y, _CAP]
                m = 0
                for k in range(user_ptr[y], user_ptr[y + 1]):
                    u = user_idx[k]
                    f = cflag[u]
                    if f & _ACTIVE:
                        if f & _SEEN:
                            m += 1
                            fv[u, _CAND] = -1.0
                            n_piece = _take_path(u, _RPIECE, cres, rflag, piece, n_piece)
                        else:
                            x -= fv[u, _RATE]
                rv[y, _LEFT] = x
                ri[y, _CNT] = m
                members += m
            if members > 0:
                todo = _fill(piece, first, n_piece, _SEEN, todo, True, fl, rs, user_idx, heap)
            for q in range(first, n_piece):
                _tally(piece[q], fl, rs, user_idx)
            if members > 0:
                for q in range(first, n_piece):
                    y = piece[q]
                    for k in range(user_ptr[y], user_ptr[y + 1]):
                        c = user_idx[k]
                        if not cflag[c] & _SEEN or cres[c, _R0] != y:
                            continue            # (a group flow once, at its first resource)
                        b = -1
                        if fv[c, _CAND] > 0.0:
                            b = _bottleneck(c, fv[c, _CAND], fl, rs, user_idx)
                        if b < 0:
                            failing[n_failing] = c
                            n_failing += 1
                        else:
                            cres[c, _BNECK] = b
        for i in range(n_piece):
            rflag[piece[i]] &= ~_RPIECE
        if todo != 0:
            break
        for i in range(n_res):
            r = res[i]
            for k in range(user_ptr[r], user_ptr[r + 1]):
                u = user_idx[k]
                f = cflag[u]
                if (not f & _ACTIVE or f & (_SEEN | _FAIL)
                        or not rflag[cres[u, _BNECK]] & _RSEEN):
                    continue
                b = _bottleneck(u, fv[u, _RATE], fl, rs, user_idx)
                if b < 0:
                    cflag[u] = f | _FAIL
                    failing[n_failing] = u
                    n_failing += 1
                else:
                    cres[u, _BNECK] = b
        if n_failing == 0:
            ok = True
            break
        for i in range(n_failing):
            c = failing[i]
            cflag[c] &= ~_FAIL
            n_opened = _take_path(c, _ROPEN, cres, rflag, opened, n_opened)
    if ok:
        for i in range(n_group):
            c = group[i]
            x = _advance(c, now, fv, cr)
            if fv[c, _CAND] != x or cr[c, _FINISH] == np.inf:
                _set_rate(c, fv[c, _CAND], now, fv, cr, ci, cj, bf, bi, qs)
    for i in range(n_group):
        cflag[group[i]] &= ~_SEEN
    for i in range(n_res):
        rflag[res[i]] &= ~_RSEEN
    for i in range(n_opened):
        rflag[opened[i]] &= ~_ROPEN
    return ok


@njit(cache=True, _nrt=False, inline='always')
def _alone_rate(c, fl, rs):
    """The rate of flow ``c`` alone on every resource of its path (its smallest capacity, its
    bottleneck); 0 when it shares one."""
    cres = fl[2]
    rv, ri, rflag = rs[0], rs[1], rs[3]
    x = np.inf
    for j in range(_R0, _R0 + cres[c, _NRES]):
        r = cres[c, j]
        if ri[r, _N_ON] != 1:
            return 0.0
        if rv[r, _CAP] < x:
            x = rv[r, _CAP]
            cres[c, _BNECK] = r
    return x


@njit(cache=True, _nrt=False, inline='always')
def _flows_on(c, delta, fl, rs):
    cres, ri = fl[2], rs[1]
    for j in range(_R0, _R0 + cres[c, _NRES]):
        ri[cres[c, j], _N_ON] += delta


@njit(cache=True, _nrt=False, inline='always')
def _bottleneck_of_some(r, fl, rs, user_idx):
    """Whether resource ``r`` is the recorded bottleneck of an active flow."""
    cflag, cres, user_ptr = fl[0], fl[2], rs[2]
    for k in range(user_ptr[r], user_ptr[r + 1]):
        u = user_idx[k]
        if cflag[u] & _ACTIVE and cres[u, _BNECK] == r:
            return True
    return False


@njit(cache=True, _nrt=False, inline='always')
def _mark_dirty(r, rflag, dirty, ic):
    if not rflag[r] & _RDIRTY:
        rflag[r] |= _RDIRTY
        dirty[ic[_N_DIRTY]] = r
        ic[_N_DIRTY] += 1


@njit(cache=True, _nrt=False)
def _solve_rates(now, fl, rs, cr, ci, cj, user_idx, bf, bi, qs, inst, ic, heap):
    """_flow_kernel.solve_rates: the coalesced solve of one instant, without the wake-up.

    First the flows on each resource catch up with the instant's departures and arrivals
    (per path, in one step)."""
    cflag, fv, cres = fl
    rv, ri, user_ptr, rflag = rs
    dep_list, arrived, dirty, comp_res, comp_flows, work = inst
    ic[_SOLVES] += 1
    n_arr = ic[_N_ARRIVED]
    n_dep = ic[_N_DEP]
    for i in range(n_arr):
        cj[cj[arrived[i], _PATH], _ARR] += 1
    for i in range(n_dep):
        pid = dep_list[i]
        delta = cj[pid, _ARR] - cj[pid, _DEP_COUNT]
        if delta != 0:
            _flows_on(pid, delta, fl, rs)
        cj[pid, _ARR] = 0
    for i in range(n_arr):
        pid = cj[arrived[i], _PATH]
        if cj[pid, _ARR] > 0:
            _flows_on(pid, cj[pid, _ARR], fl, rs)
            cj[pid, _ARR] = 0
    # _match: a flow that starts where one drained on the same path takes over its rate
    for i in range(n_arr):
        c = arrived[i]
        if not cflag[c] & _ACTIVE or cr[c, _REM] <= 0.0:
            continue
        pid = cj[c, _PATH]
        if cj[pid, _DEP_COUNT] > 0:
            cj[pid, _DEP_COUNT] -= 1
            x = cr[pid, _DEP_RATE]
            cres[c, _BNECK] = cj[pid, _DEP_BNECK]
        else:
            x = _alone_rate(c, fl, rs)
            if x == 0.0:
                for j in range(_R0, _R0 + cres[c, _NRES]):
                    _mark_dirty(cres[c, j], rflag, dirty, ic)
                continue
        cr[c, _TLAST] = now
        _set_rate(c, x, now, fv, cr, ci, cj, bf, bi, qs)
    # a departure nothing replaced changes rates only where a flow is bottlenecked on it
    for i in range(n_dep):
        pid = dep_list[i]
        if cj[pid, _DEP_COUNT] > 0:
            for j in range(_R0, _R0 + cres[pid, _NRES]):
                r = cres[pid, j]
                if not rflag[r] & _RDIRTY and _bottleneck_of_some(r, fl, rs, user_idx):
                    _mark_dirty(r, rflag, dirty, ic)
        cj[pid, _DEP_COUNT] = 0
        cflag[pid] &= ~_TOUCHED
    ic[_N_DEP] = 0
    ic[_N_ARRIVED] = 0
    n_dirty = ic[_N_DIRTY]
    ic[_N_DIRTY] = 0
    if n_dirty > 0 and _local_solve(dirty, n_dirty, now, fl, rs, cr, ci, cj, user_idx, bf, bi, qs,
                                    ic[_LOCAL_LIMIT], work, heap):
        for i in range(n_dirty):
            rflag[dirty[i]] &= ~_RDIRTY
        n_dirty = 0
    # the connected component of the dirty resources, solved from scratch
    n_comp_res = 0
    n_comp_flows = 0
    for i in range(n_dirty):
        r = dirty[i]
        rflag[r] &= ~_RDIRTY
        if not rflag[r] & _RSEEN:
            rflag[r] |= _RSEEN
            comp_res[n_comp_res] = r
            n_comp_res += 1
    i = 0
    while i < n_comp_res:
        n_comp_flows, n_comp_res = _take_users(comp_res[i], fl, rs, user_idx, comp_flows,
                                               n_comp_flows, comp_res, n_comp_res)
        i += 1
    # Nothing below depends on the order of the component's flows and resources (per flow,
    # per resource, and fill's order (share, id)): a large component is walked in memory
    # order, which the processor's prefetching follows, instead of the search's.
    if n_comp_flows > cflag.shape[0] // 8:
        n_comp_flows = 0
        for c in range(cflag.shape[0]):
            if cflag[c] & _SEEN:
                comp_flows[n_comp_flows] = c
                n_comp_flows += 1
        n_comp_res = 0
        for r in range(rflag.shape[0]):
            if rflag[r] & _RSEEN:
                comp_res[n_comp_res] = r
                n_comp_res += 1
    if n_comp_flows > 0:
        n_shared = 0
        for i in range(n_comp_flows):
            c = comp_flows[i]
            _advance(c, now, fv, cr)
            x = _alone_rate(c, fl, rs)
            if x == 0.0:
                cflag[c] |= _SHARED
                fv[c, _CAND] = -1.0
                n_shared += 1
            else:
                fv[c, _CAND] = x
        if n_shared > 0:
            for i in range(n_comp_res):
                r = comp_res[i]
                rv[r, _LEFT] = rv[r, _CAP]
                ri[r, _CNT] = 0
            for i in range(n_comp_flows):
                c = comp_flows[i]
                if cflag[c] & _SHARED:
                    for j in range(_R0, _R0 + cres[c, _NRES]):
                        ri[cres[c, j], _CNT] += 1
            _fill(comp_res, 0, n_comp_res, _SHARED, n_shared, False, fl, rs, user_idx, heap)
        for i in range(n_comp_flows):
            c = comp_flows[i]
            if fv[c, _CAND] != fv[c, _RATE] or cr[c, _FINISH] == np.inf:
                _set_rate(c, fv[c, _CAND], now, fv, cr, ci, cj, bf, bi, qs)
            cflag[c] &= ~(_SEEN | _SHARED)
    for i in range(n_comp_res):
        rflag[comp_res[i]] &= ~_RSEEN


@njit(cache=True, _nrt=False, inline='always')
def _advance(c, now, fv, cr):
    """Move connection ``c``'s remaining bytes on to ``now`` at its current rate; returns
    the rate."""
    x = fv[c, _RATE]
    if x > 0.0:
        cr[c, _REM] -= x * (now - cr[c, _TLAST])
        if cr[c, _REM] < 0.0:
            cr[c, _REM] = 0.0
    cr[c, _TLAST] = now
    return x


@njit(cache=True, _nrt=False, inline='always')
def _set_rate(c, x, now, fv, cr, ci, cj, bf, bi, qs):
    fv[c, _RATE] = x
    cr[c, _FINISH] = now + cr[c, _REM] / x
    _queue_set(c, cr, ci, cj, bf, bi, qs)


# -- the completion queue (_flow_kernel.flow_heap: buckets of one finish time) ------------------
# The flows ordered by (finish time, flow id), in buckets of one finish time: a hash table finds
# the bucket of a time, a heap (times inline) orders the buckets. A bucket's members are listed
# in insertion order in chunks of CHUNK entries ``(connection, insertion number)``; a flow that
# leaves a bucket (its finish time changed) leaves a stale entry there (its bucket or its
# insertion number no longer match), so that taking a bucket reads its entries in order
# instead of chasing a linked list through the connection records (one cache miss after the
# other). The members' order is the linked list's of :mod:`._flow_kernel`.
#
# ``qs = (heap times, heap buckets, heap place of each bucket, free bucket ids, hash table,
# meta, fbits, ibits, skey, sval, entry connections, entry numbers, next chunk, free chunks)``;
# a bucket's time, chunks and counts are its record in ``bf``/``bi``.
@njit(cache=True, _nrt=False, inline='always')
def _chunks_free(k, qs):
    """Chunk ``k`` and those after it go back to the pool."""
    meta, ch_next, ch_free = qs[5], qs[12], qs[13]
    while k >= 0:
        ch_free[meta[_M_CFREE]] = k
        meta[_M_CFREE] += 1
        k = ch_next[k]


@njit(cache=True, _nrt=False, inline='always')
def _bucket_free(b, bf, bi, qs):
    """Bucket ``b`` (emptied) leaves the hash table and the heap."""
    ht, hb, pos, bfree, table, meta, fbits, ibits = qs[:8]
    mask = meta[_M_MASK]
    i = _slot(bf[b, _BT], fbits, ibits, mask)
    while table[i] != b:
        i = (i + 1) & mask
    j = i
    while True:                        # backward-shift deletion
        j = (j + 1) & mask
        e = table[j]
        if e < 0:
            break
        k = _slot(bf[e, _BT], fbits, ibits, mask)
        if (i <= j and i < k <= j) or (i > j and (k <= j or k > i)):
            continue
        table[i] = e
        i = j
    table[i] = -1
    n = meta[_M_NB] - 1
    meta[_M_NB] = n
    k = pos[b]
    if k < n:
        t_last, last = ht[n], hb[n]
        up = (k - 1) // QUEUE_FAN
        if k > 0 and _less(t_last, last, ht[up], hb[up]):
            _sift_up(k, t_last, last, ht, hb, pos, QUEUE_FAN)
        else:
            _sift_down(k, t_last, last, n, ht, hb, pos, QUEUE_FAN)
    _chunks_free(bi[b, _BHEAD], qs)
    bi[b, _BHEAD] = -1
    bi[b, _BTAIL] = -1
    bi[b, _BCNT] = 0
    bfree[meta[_M_NFREE]] = b
    meta[_M_NFREE] += 1
    if meta[_M_LAST] == b:
        meta[_M_LAST] = -1


@njit(cache=True, _nrt=False, inline='always')
def _bucket_of(t, bf, bi, qs):
    """The bucket of finish time ``t``, opened if there is none."""
    ht, hb, pos, bfree, table, meta, fbits, ibits = qs[:8]
    last = meta[_M_LAST]
    if last >= 0 and bf[last, _BT] == t:
        return last
    mask = meta[_M_MASK]
    i = _slot(t, fbits, ibits, mask)
    while True:
        e = table[i]
        if e < 0:
            break
        if bf[e, _BT] == t:
            meta[_M_LAST] = e
            return e
        i = (i + 1) & mask
    meta[_M_NFREE] -= 1
    b = bfree[meta[_M_NFREE]]
    table[i] = b
    bf[b, _BT] = t
    bi[b, _BHEAD] = -1
    bi[b, _BTAIL] = -1
    bi[b, _BCNT] = 0
    bi[b, _BFILL] = CHUNK
    meta[_M_NB] += 1
    _sift_up(meta[_M_NB] - 1, t, b, ht, hb, pos, QUEUE_FAN)
    meta[_M_LAST] = b
    return b


@njit(cache=True, _nrt=False, inline='always')
def _queue_set(c, cr, ci, cj, bf, bi, qs):
    """Insert flow ``c`` into the completion queue, or move it after its finish changed."""
    t = cr[c, _FINISH]
    if t == 0.0:
        t = 0.0                        # one bucket for -0.0 and 0.0 (their bits differ)
    b = cj[c, _B_OF]
    if b >= 0:
        if bf[b, _BT] == t:
            return
        cj[c, _B_OF] = -1              # its entry there goes stale
        bi[b, _BCNT] -= 1
        if bi[b, _BCNT] == 0:
            _bucket_free(b, bf, bi, qs)
    b = _bucket_of(t, bf, bi, qs)
    q_c, q_seq, ch_next, ch_free, meta = qs[10], qs[11], qs[12], qs[13], qs[5]
    if bi[b, _BFILL] == CHUNK:
        meta[_M_CFREE] -= 1
        k = ch_free[meta[_M_CFREE]]
        ch_next[k] = -1
        if bi[b, _BTAIL] >= 0:
            ch_next[bi[b, _BTAIL]] = k
        else:
            bi[b, _BHEAD] = k
        bi[b, _BTAIL] = k
        bi[b, _BFILL] = 0
    e = bi[b, _BTAIL] * CHUNK + bi[b, _BFILL]
    seq = cj[c, _QSEQ] + 1
    cj[c, _QSEQ] = seq
    q_c[e] = c
    q_seq[e] = seq
    bi[b, _BFILL] += 1
    bi[b, _BCNT] += 1
    cj[c, _B_OF] = b


@njit(cache=True, _nrt=False)
def _queue_first(qs):
    """The earliest finish time of a queued flow (inf: none)."""
    if qs[5][_M_NB] == 0:
        return np.inf
    return qs[0][0]


@njit(cache=True, _nrt=False)
def _queue_take(ci, cj, bf, bi, qs, out, n_out):
    """Remove the flows of the earliest finish time, appending them to ``out`` in flow-id
    order. Returns the new length of ``out``."""
    skey, sval, q_c, q_seq, ch_next = qs[8], qs[9], qs[10], qs[11], qs[12]
    b = qs[1][0]
    first = n_out
    in_order = True
    last = -1
    k = bi[b, _BHEAD]
    while k >= 0:
        nk = ch_next[k]
        for e in range(k * CHUNK, k * CHUNK + (CHUNK if nk >= 0 else bi[b, _BFILL])):
            c = q_c[e]
            if cj[c, _B_OF] != b or cj[c, _QSEQ] != q_seq[e]:
                continue                   # stale: the flow left this bucket
            cj[c, _B_OF] = -1
            out[n_out] = c
            n_out += 1
            fid = ci[c, _FID]
            if fid < last:
                in_order = False
            last = fid
        k = nk
    m = n_out - first
    if not in_order:
        if m <= 32:
            for i in range(first + 1, n_out):
                c = out[i]
                fid = ci[c, _FID]
                k = i
                while k > first and ci[out[k - 1], _FID] > fid:
                    out[k] = out[k - 1]
                    k -= 1
                out[k] = c
        else:
            for i in range(m):
                c = out[first + i]
                skey[i] = ci[c, _FID]
                sval[i] = c
            _heapsort_pairs(skey, sval, m)
            for i in range(m):
                out[first + i] = sval[i]
    _bucket_free(b, bf, bi, qs)
    return n_out


@njit(cache=True, _nrt=False)
def _arm_due(qs, ic, fc):
    """_flow_kernel.arm_due: True when a new wake-up is due, for ``fc[_T_WAKE]``."""
    if qs[5][_M_NB] == 0:
        fc[_T_WAKE] = np.inf
        return False
    t = _queue_first(qs)
    if t == fc[_T_WAKE]:
        return False
    ic[_EID] += 1
    ic[_WAKE_GEN] += 1
    fc[_T_WAKE] = t
    return True


@njit(cache=True, _nrt=False)
def _drain(now, fl, cr, ci, cj, bf, bi, qs, dep_list, done, ic, fc):
    """_flow_kernel.drain_flows: the flows that drained by ``now`` (within the engine's
    tolerance) leave; returns how many (in ``done``, in drain order) and whether a solve is
    due."""
    cflag, fv, cres = fl
    fc[_T_WAKE] = np.inf
    limit = now + _EPS * max(1.0, abs(now))
    n_done = 0
    while _queue_first(qs) <= limit:
        n_done = _queue_take(ci, cj, bf, bi, qs, done, n_done)
    for i in range(n_done):
        c = done[i]
        pid = cj[c, _PATH]
        if not cflag[pid] & _TOUCHED:
            cflag[pid] |= _TOUCHED
            dep_list[ic[_N_DEP]] = pid
            ic[_N_DEP] += 1
        cj[pid, _DEP_COUNT] += 1
        cr[pid, _DEP_RATE] = fv[c, _RATE]
        cj[pid, _DEP_BNECK] = cres[c, _BNECK]
        cr[c, _REM] = 0.0
        fv[c, _RATE] = 0.0
        cflag[c] &= ~_ACTIVE
    return n_done, n_done > 0 or ic[_N_DIRTY] > 0


# -- the tree: readiness, starts and completions (runner.try_start and complete) ----------------
@njit(cache=True, _nrt=False)
def _try_starts(pending, n_pending, now, seg_bytes, fl, cr, ci, cj, arrived, ic, zero):
    """runner.try_start for the connections on the worklist, in order (flow ids follow this
    order): a connection sends its next segment once it is free and every connection it waits
    for completed that segment (their counts are copied into its record). Returns whether a
    flow started (a solve is due) and how many transfers drain at once (no bytes: codes in
    ``zero``, for the caller's ZERO events)."""
    cflag, fv, cres = fl
    n_seg = seg_bytes.shape[1]
    started = False
    n_zero = 0
    for i in range(n_pending):
        c = pending[i]
        if cflag[c] & _BUSY:
            continue
        s = cj[c, _NEXT_SEG]
        if s >= n_seg:
            continue
        ready = True
        for k in range(_PD, _PD + cj[c, _N_PRED]):
            if cj[c, k] <= s:
                ready = False
                break
        if not ready:
            continue
        cj[c, _NEXT_SEG] = s + 1
        code = c * n_seg + s
        # FlowNetwork.start: a new flow id; the flow joins the instant's arrivals
        ci[c, _FID] = ic[_NEXT_FID]
        ic[_NEXT_FID] += 1
        size = seg_bytes[cj[c, _ROW], s]
        if size <= 0 or cres[c, _NRES] == 0:
            cflag[c] |= _BUSY
            zero[n_zero] = code
            n_zero += 1
            continue
        cflag[c] |= _BUSY | _ACTIVE
        cr[c, _REM] = size
        fv[c, _RATE] = 0.0
        cr[c, _TLAST] = now
        cr[c, _FINISH] = np.inf
        arrived[ic[_N_ARRIVED]] = c
        ic[_N_ARRIVED] += 1
        started = True
    return started, n_zero


@njit(cache=True, _nrt=False)
def _complete(c, pending, n_pending, cj, k_max):
    """runner.complete of connection ``c``'s oldest segment in flight: its count goes up, into
    the records of the connections that wait for it too, and those join the worklist (their
    next segment may now be ready). Returns the worklist length."""
    done = cj[c, _DONE] + 1
    cj[c, _DONE] = done
    base = _PD + k_max
    for k in range(base, base + 2 * cj[c, _N_SUCC], 2):
        d = cj[c, k]
        cj[d, cj[c, k + 1]] = done
        pending[n_pending] = d
        n_pending += 1
    return n_pending


@njit(cache=True, _nrt=False)
def _reduction(code, n_seg, seg_bytes, cj, conn_rx, rank_device, rank_rate):
    """The reduction runner.delivered queues for segment ``code``: ``(seconds, device)`` on
    its receiver (0 seconds: a copy, or a receiver that reduces for free)."""
    c = code // n_seg
    dst = conn_rx[c]
    if dst < 0 or rank_rate[dst] == np.inf:
        return 0.0, 0
    return seg_bytes[cj[c, _ROW], code % n_seg] / rank_rate[dst], rank_device[dst]


@njit(cache=True)
def _released(c, code, now, fl, lat, cj, events, batches, ic, fc, codes, counts, pending,
              n_pending):
    """runner.drained for a transfer of no bytes: the connection is free, the transfer is
    delivered one path latency later, and ``c`` joins the worklist."""
    fl[0][c] &= ~_BUSY
    codes, counts = make_room(1, ic, codes, counts)
    deliver_into(code, lat[cj[c, _PATH]], now, events, batches, ic, fc, codes, counts)
    pending[n_pending] = c
    return n_pending + 1, codes, counts


@njit(cache=True)
def _more_chunks(qs):
    """The completion queue with twice the chunks (the new ones free)."""
    meta = qs[5]
    n = qs[12].shape[0]
    q_c = np.empty(2 * n * CHUNK, dtype=np.int32)
    q_seq = np.empty(2 * n * CHUNK, dtype=np.int32)
    ch_next = np.empty(2 * n, dtype=np.int32)
    ch_free = np.empty(2 * n, dtype=np.int32)
    q_c[:n * CHUNK] = qs[10]
    q_seq[:n * CHUNK] = qs[11]
    ch_next[:n] = qs[12]
    ch_free[:meta[_M_CFREE]] = qs[13][:meta[_M_CFREE]]
    for k in range(2 * n - 1, n - 1, -1):
        ch_free[meta[_M_CFREE]] = k
        meta[_M_CFREE] += 1
    return qs[:10] + (q_c, q_seq, ch_next, ch_free)


@njit(cache=True)
def simulate_tree_pipeline(fl, rs, cr, ci, cj, lat, k_max, user_idx, seg_bytes, conn_rx,
                           rank_device, rank_rate, n_devices, start_order, scratch):
    """Run the tree pipeline on the state built by :func:`.tree_pipeline.tree_pipeline_time`;
    return ``(end_time_s, reduce_s_per_device, solves)`` (``end_time_s`` is ``inf`` when
    transfers never complete). ``start_order``: the connections in the engine's numbering
    (the order of the first try_start round)."""
    n_conn = ci.shape[0]
    n_res = rs[0].shape[0]
    n_seg = seg_bytes.shape[1]
    bf, bi, qs, done, inst, heap, pending, zero = scratch
    cflag = fl[0]
    room = 2 * n_conn + 2      # chunks a solve may take (see :func:`.tree_pipeline._scratch`)
    dep_list, arrived = inst[0], inst[1]
    ic = np.zeros(13, dtype=np.int64)
    fc = np.array([np.inf, -np.inf])
    lat0 = lat[cj[0, _PATH]] if n_conn > 0 else 0.0
    ic[_ONE_LATENCY] = 1
    for c in range(n_conn):
        if lat[cj[c, _PATH]] != lat0:
            ic[_ONE_LATENCY] = 0
    ic[_LOCAL_LIMIT] = max(64, n_conn // 8)
    events = [(0.0, np.int64(0), np.int64(0), np.int64(0), np.int64(0))]
    events.pop()
    batches = Dict.empty(key_type=types.float64, value_type=BATCH_ENTRY)
    codes = np.empty(1024, dtype=np.int64)
    counts = np.empty(256, dtype=np.int64)
    dev_free = np.zeros(n_devices)
    dev_busy_s = np.zeros(n_devices)
    n_pending = n_conn
    pending[:n_conn] = start_order
    one_latency = ic[_ONE_LATENCY] != 0
    reduces = False                     # any receiver that charges reductions
    for r in range(rank_rate.shape[0]):
        if rank_rate[r] != np.inf:
            reduces = True
    now = 0.0
    solve_pending = False
    last_done = 0.0

    while True:
        started, n_zero = _try_starts(pending, n_pending, now, seg_bytes, fl, cr, ci, cj,
                                      arrived, ic, zero)
        solve_pending |= started
        if n_zero > 0:
            push_zero(zero, n_zero, now, ic, events)
        n_pending = 0
        if solve_pending and not (len(events) > 0 and events[0][0] <= now):
            solve_pending = False
            if qs[5][_M_CFREE] < room:      # (rare)
                qs = _more_chunks(qs)
            _solve_rates(now, fl, rs, cr, ci, cj, user_idx, bf, bi, qs, inst, ic, heap)
            if _arm_due(qs, ic, fc):
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
            n_done, due = _drain(now, fl, cr, ci, cj, bf, bi, qs, dep_list, done, ic, fc)
            if not due and _arm_due(qs, ic, fc):
                heapq.heappush(events, (now + max(0.0, fc[_T_WAKE] - now), ic[_EID],
                                        np.int64(0), np.int64(WAKE), ic[_WAKE_GEN]))
            if (ic[_Q_TAIL] - ic[_Q_HEAD] + n_done > codes.shape[0]
                    or ic[_B_TAIL] - ic[_B_HEAD] + n_done > counts.shape[0]):
                codes, counts = make_room(n_done, ic, codes, counts)
            for k in range(n_done):
                c = done[k]
                cflag[c] &= ~_BUSY
                if one_latency and lat0 > 0:
                    t = now + lat0
                    if _queue_delivery(c * n_seg + cj[c, _NEXT_SEG] - 1, t, ic, fc, codes,
                                       counts):
                        heapq.heappush(events, (t, ic[_EID], np.int64(0), np.int64(BATCH),
                                                ic[_B_TAIL] - 1))
                else:
                    deliver_into(c * n_seg + cj[c, _NEXT_SEG] - 1, lat[cj[c, _PATH]], now,
                                 events,
                                 batches, ic, fc, codes, counts)
                pending[n_pending] = c
                n_pending += 1
            solve_pending |= due
            continue
        if kind == ZERO:
            n_pending, codes, counts = _released(code // n_seg, code, now, fl, lat, cj, events,
                                                 batches, ic, fc, codes, counts, pending,
                                                 n_pending)
            continue
        if kind == BATCH:
            # the members of one delivery instant, each delivered (and its dependents tried)
            # before the next, as the engine's one callback does
            first, n_members = open_batch(now, ic, fc, counts)
            for k in range(n_members):
                code = codes[(first + k) % codes.shape[0]]
                dur, dev = 0.0, 0
                if reduces:
                    dur, dev = _reduction(code, n_seg, seg_bytes, cj, conn_rx, rank_device,
                                          rank_rate)
                if not (dur > 0 and queue_reduce(dur, dev, now, dev_free, dev_busy_s, events,
                                                 ic, code)):
                    n_pending = _complete(code // n_seg, pending, 0, cj, k_max)
                    last_done = now
                    started, n_zero = _try_starts(pending, n_pending, now, seg_bytes, fl, cr,
                                                  ci, cj, arrived, ic, zero)
                    solve_pending |= started
                    if n_zero > 0:
                        push_zero(zero, n_zero, now, ic, events)
                    n_pending = 0
            close_batch(ic, n_members)
            continue
        if kind == DELIVER:
            delivering(member, e_ev, now, batches)
            dur, dev = _reduction(code, n_seg, seg_bytes, cj, conn_rx, rank_device, rank_rate)
            if dur > 0 and queue_reduce(dur, dev, now, dev_free, dev_busy_s, events, ic, code):
                continue
        # runner.complete (DELIVER without compute, or COMPUTE)
        n_pending = _complete(code // n_seg, pending, n_pending, cj, k_max)
        last_done = now

    total = 0
    for c in range(n_conn):
        total += cj[c, _DONE]
    if total < n_conn * n_seg:
        return np.inf, dev_busy_s, ic[_SOLVES]
    return last_done, dev_busy_s, ic[_SOLVES]
