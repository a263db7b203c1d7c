"""Dependencies of a schedule, derived from data flow.

The list order of a schedule is its meaning (see :mod:`simulator.schedules.base`). A concurrent
run computes the same thing if every transfer waits for the earlier transfers it conflicts with
on the same (rank, chunk):

* read after write: sending a chunk waits for every earlier write into it since (and including)
  its last overwrite — all reductions into a chunk must land before it is forwarded;
* write after read: writing into a chunk waits for earlier reads of it since its last overwrite,
  so a send never picks up data that arrived later in the list;
* write after write: an overwrite waits for earlier writes; reductions into the same chunk
  commute with each other and only wait for the last overwrite.

Epoch barriers (``sync``) are not expanded here: the engine counts them, which keeps a barrier
over N transfers O(N) instead of O(N^2).
"""

from __future__ import annotations

import numpy as np

from .base import Schedule


def _ragged_arange(counts: np.ndarray) -> np.ndarray:
    """``concatenate([arange(c) for c in counts])`` without a Python loop."""
    total = int(counts.sum())
    starts = np.repeat(np.cumsum(counts) - counts, counts)
    return np.arange(total, dtype=np.int64) - starts


def dependencies(schedule: Schedule) -> tuple[np.ndarray, np.ndarray]:
    """Return the data-flow dependencies of every transfer as CSR arrays ``(indptr, indices)``.

    The predecessors of transfer ``i`` are ``indices[indptr[i]:indptr[i+1]]``: all ``< i``,
    sorted, without duplicates.

    Vectorised form of :func:`dependencies_reference` (the tests check they agree). Every
    transfer contributes one read access per chunk it sends and one write access per chunk it
    receives. Sorted by (rank-chunk key, transfer, read-before-write), each key's accesses split
    into *segments* opened by overwrites; then a read depends on the earlier writes of its
    segment, a reduction on the earlier reads of its segment and the overwrite that opened it,
    and an overwrite on everything in the previous segment.
    """
    n = len(schedule)
    if n == 0:
        return np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int64)
    n_chunks = len(schedule.chunk_bytes)
    m = schedule.nchunks.astype(np.int64)
    offs = _ragged_arange(m)
    tid = np.repeat(np.arange(n, dtype=np.int64), m)
    read_key = np.repeat(schedule.src * n_chunks + schedule.src_chunk, m) + offs
    write_key = np.repeat(schedule.dst * n_chunks + schedule.dst_chunk, m) + offs
    write_kind = np.where(np.repeat(schedule.reduce, m), 1, 2)       # 1 reduce, 2 overwrite
    key = np.concatenate([read_key, write_key])
    idx = np.concatenate([tid, tid])
    kind = np.concatenate([np.zeros(len(tid), dtype=np.int64), write_kind])
    order = np.lexsort((kind, idx, key))
    key, idx, kind = key[order], idx[order], kind[order]
    new_key = np.empty(len(key), dtype=bool)
    new_key[0] = True
    new_key[1:] = key[1:] != key[:-1]
    # segment number inside the key: overwrites open a new segment
    copies = np.cumsum(kind == 2)
    key_start = np.flatnonzero(new_key)
    copies_before_key = np.repeat(copies[key_start] - (kind[key_start] == 2),
                                  np.diff(np.append(key_start, len(key))))
    seg = copies - copies_before_key
    group_new = new_key.copy()
    group_new[1:] |= seg[1:] != seg[:-1]
    group = np.cumsum(group_new) - 1
    g_start = np.flatnonzero(group_new)
    pairs_dep, pairs_on = [], []

    def before(mask_of_targets, mask_of_sources):
        """Pairs (target access, earlier source access of the same group)."""
        is_src = mask_of_sources.astype(np.int64)
        src_pos = np.flatnonzero(mask_of_sources)
        # number of sources strictly before each position, within its group
        cum = np.cumsum(is_src) - is_src
        before_count = cum - cum[g_start][group]
        targets = np.flatnonzero(mask_of_targets)
        counts = before_count[targets]
        # sources of a group, listed in order: src_pos[first_src_of_group + k]
        first_src = np.searchsorted(src_pos, g_start)[group[targets]]
        pairs_dep.append(np.repeat(idx[targets], counts))
        pairs_on.append(idx[src_pos[np.repeat(first_src, counts) + _ragged_arange(counts)]])

    before(kind == 0, kind > 0)                    # read after write (same segment)
    before(kind == 1, kind == 0)                   # reduce after read (same segment)
    opener = kind[g_start] == 2                    # reduce after the overwrite that opened it
    reduce_pos = np.flatnonzero(kind == 1)
    has_opener = opener[group[reduce_pos]]
    pairs_dep.append(idx[reduce_pos[has_opener]])
    pairs_on.append(idx[g_start[group[reduce_pos[has_opener]]]])
    # overwrite after everything in the previous segment of the same key
    copy_pos = np.flatnonzero((kind == 2) & ~new_key)
    prev_group = group[copy_pos] - 1
    g_end = np.append(g_start[1:], len(key))
    counts = g_end[prev_group] - g_start[prev_group]
    pairs_dep.append(np.repeat(idx[copy_pos], counts))
    pairs_on.append(idx[np.repeat(g_start[prev_group], counts) + _ragged_arange(counts)])
    dep = np.concatenate(pairs_dep)
    on = np.concatenate(pairs_on)
    keep = dep != on
    code = np.sort(dep[keep] * n + on[keep])
    if len(code):
        code = code[np.concatenate(([True], code[1:] != code[:-1]))]
    dep, on = code // n, code % n
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(dep, minlength=n), out=indptr[1:])
    return indptr, on


def dependencies_reference(schedule: Schedule) -> tuple[np.ndarray, np.ndarray]:
    """The same dependencies as :func:`dependencies`, by a direct walk over the transfers.

    Kept as the executable definition the vectorised version is tested against.
    """
    n_chunks = len(schedule.chunk_bytes)
    writers: dict[int, list[int]] = {}  # (rank, chunk) -> writes since (and incl.) last overwrite
    readers: dict[int, list[int]] = {}  # (rank, chunk) -> reads since the last overwrite
    copy_of: dict[int, int] = {}        # (rank, chunk) -> last overwrite
    n = len(schedule)
    counts = np.zeros(n, dtype=np.int64)
    out: list[int] = []
    extend = out.extend
    read_keys = (schedule.src * n_chunks + schedule.src_chunk).tolist()
    write_keys = (schedule.dst * n_chunks + schedule.dst_chunk).tolist()
    nc, red = schedule.nchunks.tolist(), schedule.reduce.tolist()
    empty: list[int] = []
    for i in range(n):
        deps: set[int] = set()
        rk, wk, m, is_reduce = read_keys[i], write_keys[i], nc[i], red[i]
        for key in range(rk, rk + m):
            deps.update(writers.get(key, empty))
            r = readers.get(key)
            if r is None:
                readers[key] = [i]
            else:
                r.append(i)
        for key in range(wk, wk + m):
            deps.update(readers.get(key, empty))
            if is_reduce:
                c = copy_of.get(key)
                if c is not None:
                    deps.add(c)
                w = writers.get(key)
                if w is None:
                    writers[key] = [i]
                else:
                    w.append(i)
            else:
                deps.update(writers.get(key, empty))
                writers[key] = [i]
                copy_of[key] = i
                readers[key] = []
        deps.discard(i)
        counts[i] = len(deps)
        if deps:
            extend(sorted(deps))
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    return indptr, np.asarray(out, dtype=np.int64)


def epochs(schedule: Schedule) -> np.ndarray:
    """Epoch index of every transfer: a ``sync`` transfer opens a new epoch."""
    return np.cumsum(schedule.sync.astype(np.int64))
