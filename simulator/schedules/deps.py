"""Dependencies of a schedule, derived from data flow.

The list order of a schedule is its meaning (see :mod:`simulator.schedules.base`). A concurrent
run computes the same thing if every transfer waits for the earlier transfers it conflicts with
on the same (rank, chunk):

* read after write: sending a chunk waits for every earlier write into it since (and including)
  its last overwrite — all reductions into a chunk must land before it is forwarded;
* write after read: writing into a chunk waits for earlier reads of it, so a send never picks up
  data that arrived later in the list;
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

    The predecessors of transfer ``i`` are ``indices[indptr[i]:indptr[i+1]]``, all ``< i``,
    without duplicates.
    """
    n_chunks = len(schedule.chunk_bytes)
    writers: dict[int, list[int]] = {}   # (rank, chunk) -> writes since the last overwrite
    last_copy: dict[int, int] = {}      # (rank, chunk) -> last overwrite
    readers: dict[int, list[int]] = {}  # (rank, chunk) -> reads since the last overwrite
    indptr = np.zeros(len(schedule) + 1, dtype=np.int64)
    out: list[int] = []
    src, dst = schedule.src.tolist(), schedule.dst.tolist()
    sc, dc = schedule.src_chunk.tolist(), schedule.dst_chunk.tolist()
    nc, red = schedule.nchunks.tolist(), schedule.reduce.tolist()
    for i in range(len(src)):
        deps: set[int] = set()
        base_s, base_d = src[i] * n_chunks + sc[i], dst[i] * n_chunks + dc[i]
        for k in range(nc[i]):
            key = base_s + k
            w = writers.get(key)
            if w:
                deps.update(w)
            readers.setdefault(key, []).append(i)
        for k in range(nc[i]):
            key = base_d + k
            r = readers.get(key)
            if r:
                deps.update(r)
            if red[i]:
                c = last_copy.get(key)
                if c is not None:
                    deps.add(c)
                writers.setdefault(key, []).append(i)
            else:
                w = writers.get(key)
                if w:
                    deps.update(w)
                writers[key] = [i]
                last_copy[key] = i
                readers[key] = []
        deps.discard(i)
        out.extend(sorted(deps))
        indptr[i + 1] = len(out)
    return indptr, np.asarray(out, dtype=np.int64)


def epochs(schedule: Schedule) -> np.ndarray:
    """Epoch index of every transfer: a ``sync`` transfer opens a new epoch."""
    return np.cumsum(schedule.sync.astype(np.int64))
