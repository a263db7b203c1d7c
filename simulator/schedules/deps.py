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


def dependencies(schedule: Schedule) -> tuple[np.ndarray, np.ndarray]:
    """Return the data-flow dependencies of every transfer as CSR arrays ``(indptr, indices)``.

    The predecessors of transfer ``i`` are ``indices[indptr[i]:indptr[i+1]]``: all ``< i``,
    sorted, without duplicates.
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
