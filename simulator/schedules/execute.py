"""Execute a schedule on numbers, and check it computes its collective.

This is the proof that an algorithm is correct, independent of any timing: every rank starts
with its own random integer vector (one float64 element per byte of the message, so sums are
exact), the transfers run in list order, and the final buffers are compared with what the
collective defines. It catches the classic bugs of simulators whose collectives are state
machines: a double binary tree that forwards the whole buffer, a tree that is really a ring.
"""

from __future__ import annotations

import numpy as np

from ..errors import ScheduleError
from .base import Schedule


def initial_buffers(schedule: Schedule, rng: np.random.Generator) -> np.ndarray:
    """Random integer inputs: one row per rank; helper ranks and scratch space start at zero."""
    off = schedule.chunk_offsets
    buf = np.zeros((schedule.total_ranks, int(off[-1])), dtype=np.float64)
    msg = int(off[schedule.message_chunks])
    buf[: schedule.ranks, :msg] = rng.integers(-1000, 1000, size=(schedule.ranks, msg))
    return buf


def run(schedule: Schedule, buffers: np.ndarray) -> np.ndarray:
    """Apply every transfer in list order to a copy of ``buffers`` and return the result."""
    buf = buffers.copy()
    off = schedule.chunk_offsets
    lo_s = off[schedule.src_chunk]
    hi_s = off[schedule.src_chunk + schedule.nchunks]
    lo_d = off[schedule.dst_chunk]
    for i in range(len(schedule)):
        s, d = schedule.src[i], schedule.dst[i]
        a, b, c = lo_s[i], hi_s[i], lo_d[i]
        payload = buf[s, a:b].copy()
        if schedule.reduce[i]:
            buf[d, c:c + (b - a)] += payload
        else:
            buf[d, c:c + (b - a)] = payload
    return buf


def _message_slices(schedule: Schedule):
    off = schedule.chunk_offsets
    for c in range(schedule.message_chunks):
        yield c, slice(int(off[c]), int(off[c + 1]))


def expected_difference(schedule: Schedule, before: np.ndarray, after: np.ndarray) -> list[str]:
    """Compare final buffers with the collective's definition; return a list of mismatches."""
    p, msg = schedule.ranks, int(schedule.chunk_offsets[schedule.message_chunks])
    total = before[:p, :msg].sum(axis=0)
    coll = schedule.collective
    problems: list[str] = []

    def check(rank, sl, want, what):
        if not np.array_equal(after[rank, sl], want):
            problems.append(f"rank {rank}: {what} wrong")

    if coll == "allreduce":
        for r in range(p):
            check(r, slice(0, msg), total, "sum")
    elif coll == "reduce":
        check(schedule.root, slice(0, msg), total, "sum at root")
    elif coll == "broadcast":
        for r in range(p):
            check(r, slice(0, msg), before[schedule.root, :msg], "root's data")
    elif coll in ("reduce_scatter", "allgather"):
        blocks = schedule.block_of_chunk
        for c, sl in _message_slices(schedule):
            owner = int(blocks[c])
            if coll == "reduce_scatter":
                check(owner, sl, total[sl], f"reduced block chunk {c}")
            else:
                for r in range(p):
                    check(r, sl, before[owner, sl], f"gathered chunk {c}")
    elif coll == "alltoall":
        # Input block j of rank r (chunks of block j) lands in rank j's output block r, which
        # sits at chunk offset message_chunks + (chunk index of block r's first chunk).
        blocks = schedule.block_of_chunk
        out0 = int(schedule.chunk_offsets[schedule.message_chunks])
        first = {int(b): c for c, b in reversed(list(enumerate(blocks[: schedule.message_chunks])))}
        for c, sl in _message_slices(schedule):
            j = int(blocks[c])
            for r in range(p):
                # block j of rank r -> rank j, output slot of block r, same position inside block
                pos = sl.start - int(schedule.chunk_offsets[first[j]])
                dst_start = out0 + int(schedule.chunk_offsets[first[r]]) + pos
                want = before[r, sl]
                got = after[j, dst_start:dst_start + (sl.stop - sl.start)]
                if not np.array_equal(got, want):
                    problems.append(f"rank {j}: block from rank {r} chunk {c} wrong")
    else:
        raise ScheduleError(f"no definition for collective {coll!r}")
    return problems


def verify(schedule: Schedule, seed: int = 0) -> list[str]:
    """Execute ``schedule`` on random integers and return what it got wrong (empty if correct)."""
    before = initial_buffers(schedule, np.random.default_rng(seed))
    return expected_difference(schedule, before, run(schedule, before))
