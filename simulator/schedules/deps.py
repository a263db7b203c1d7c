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
    into *groups* (segments) opened by overwrites; then a read depends on the earlier writes of
    its group, a reduction on the earlier reads of its group and the overwrite that opened it,
    and an overwrite on everything in the previous group of its key.
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
    key, idx, is_write = _sorted_accesses(read_key, write_key, tid)
    del read_key, write_key, tid, offs
    # transfer ids and positions in 32 bits where they fit: half the memory to touch
    index_t = np.int32 if 2 * len(key) < 2 ** 31 else np.int64
    idx = idx.astype(index_t)
    kind = np.zeros(len(key), dtype=np.int8)          # 0 read, 1 reduce, 2 overwrite
    kind[is_write] = np.where(schedule.reduce[idx[is_write]], 1, 2)
    is_copy = kind == 2
    new_key = np.empty(len(key), dtype=bool)
    new_key[0] = True
    np.not_equal(key[1:], key[:-1], out=new_key[1:])
    # a group starts at each key's first access and at each overwrite
    group_new = new_key | is_copy
    del key
    group = np.cumsum(group_new, dtype=index_t)
    group -= 1
    g_start = np.flatnonzero(group_new)
    pairs_dep, pairs_on = [], []

    def before(mask_of_targets, mask_of_sources):
        """Pairs (target access, earlier source access of the same group)."""
        cum = np.cumsum(mask_of_sources, dtype=index_t)   # sources up to and including p
        cum -= mask_of_sources                            # ... strictly before p
        targets = np.flatnonzero(mask_of_targets)
        first = cum[g_start[group[targets]]]              # sources before the target's group
        counts = cum[targets] - first
        # the sources of a group, in order: src_pos[first + k]
        src_pos = np.flatnonzero(mask_of_sources)
        pairs_dep.append(np.repeat(idx[targets], counts))
        pairs_on.append(idx[src_pos[np.repeat(first, counts) + _ragged_arange(counts)]])

    before(~is_write, is_write)                    # read after write (same group)
    before(kind == 1, ~is_write)                   # reduce after read (same group)
    opener = is_copy[g_start]                      # reduce after the overwrite that opened it
    reduce_pos = np.flatnonzero(kind == 1)
    has_opener = opener[group[reduce_pos]]
    pairs_dep.append(idx[reduce_pos[has_opener]])
    pairs_on.append(idx[g_start[group[reduce_pos[has_opener]]]])
    # overwrite after everything in the previous group of the same key
    copy_pos = np.flatnonzero(is_copy & ~new_key)
    prev_group = group[copy_pos] - 1
    g_end = np.append(g_start[1:], len(group))
    counts = g_end[prev_group] - g_start[prev_group]
    pairs_dep.append(np.repeat(idx[copy_pos], counts))
    pairs_on.append(idx[np.repeat(g_start[prev_group], counts) + _ragged_arange(counts)])
    # sorted by (dependent, predecessor) without duplicates: one sort of both packed in an int64
    bits = n.bit_length()
    code = packed_sort(np.concatenate(pairs_dep), np.concatenate(pairs_on), bits)
    if code is None:    # never for a schedule that fits in memory: 2 bits(n) <= 62
        raise ValueError(f"{n} transfers: too many to pack a dependency pair in an int64")
    pairs_dep.clear()
    pairs_on.clear()
    if len(code):
        unique = np.empty(len(code), dtype=bool)
        unique[0] = True
        np.not_equal(code[1:], code[:-1], out=unique[1:])
        code = code[unique]
    dep = code >> bits
    on = code & ((1 << bits) - 1)
    keep = dep != on
    dep, on = dep[keep], on[keep]
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(dep, minlength=n), out=indptr[1:])
    return indptr, on


def packed_sort(high: np.ndarray, low: np.ndarray, low_bits: int) -> np.ndarray | None:
    """The pairs ``(high, low)`` of non-negative integers (``low < 2**low_bits``) sorted, as
    int64 codes ``high << low_bits | low``; None where they do not fit in 62 bits.

    One plain sort of packed codes is several times faster than a lexsort or a stable argsort
    and the gathers after them (the dependency derivation sorts millions of pairs)."""
    if len(high) and int(high.max()).bit_length() + low_bits > 62:
        return None
    code = high.astype(np.int64) << low_bits
    code |= low
    code.sort()
    return code


def _sorted_accesses(read_key: np.ndarray, write_key: np.ndarray,
                     tid: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Reads (``read_key``) and writes (``write_key``) of transfers ``tid`` sorted by (key,
    transfer, read before write): ``(key, transfer, is_write)``.

    One sort of a packed int64 code where it fits (several times faster than a lexsort and the
    gathers after it), a lexsort otherwise."""
    bits = (2 * int(tid[-1]) + 1).bit_length()    # (transfer, is_write) packed as 2 t + w
    low = tid.astype(np.int64) << 1
    code = packed_sort(np.concatenate([read_key, write_key]), np.concatenate([low, low + 1]),
                       bits)
    if code is not None:
        low = code & ((1 << bits) - 1)
        return code >> bits, low >> 1, (low & 1).astype(bool)
    key = np.concatenate([read_key, write_key])
    idx = np.concatenate([tid, tid])
    is_write = np.concatenate([np.zeros(len(tid), dtype=bool), np.ones(len(tid), dtype=bool)])
    order = np.lexsort((is_write, idx, key))
    return key[order], idx[order], is_write[order]


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
