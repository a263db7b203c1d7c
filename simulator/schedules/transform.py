"""Generic schedule transforms.

:func:`slice_schedule` turns any schedule into its pipelined form: every chunk is cut into ``k``
slices and every transfer into ``k`` transfers on the same FIFO connection. Data-flow
dependencies then make slice ``s`` of step ``t+1`` wait only for slice ``s`` of step ``t``, so
successive steps overlap exactly as NCCL's sliced channels do. With ``k = 1`` the schedule is
unchanged (step-synchronous: each step's chunk moves whole, the classic alpha-beta model).
"""

from __future__ import annotations

import numpy as np

from .base import Schedule, split_bytes


def slice_schedule(schedule: Schedule, k: int) -> Schedule:
    """Return ``schedule`` with every chunk cut into ``k`` slices (``k >= 1``)."""
    if k == 1:
        return schedule
    n_old = len(schedule.chunk_bytes)
    sub = np.concatenate([split_bytes(int(b), k) for b in schedule.chunk_bytes]) \
        if n_old else np.zeros(0, dtype=np.int64)
    n = len(schedule)
    reps = np.arange(k)
    # Transfer of chunks [c, c+m) becomes k transfers: piece j covers sub-chunks
    # [c*k + j*m, c*k + (j+1)*m) -- contiguous, and aligned between sender and receiver.
    m = np.repeat(schedule.nchunks, k)
    j = np.tile(reps, n)
    cols = {}
    for name in ("src", "dst", "reduce", "step", "phase", "channel"):
        cols[name] = np.repeat(getattr(schedule, name), k)
    cols["src_chunk"] = np.repeat(schedule.src_chunk, k) * k + j * m
    cols["dst_chunk"] = np.repeat(schedule.dst_chunk, k) * k + j * m
    cols["nchunks"] = m
    sync = np.zeros(n * k, dtype=bool)
    sync[::k] = schedule.sync  # a barrier still precedes the first slice of its transfer
    cols["sync"] = sync
    blocks = None if schedule.block_of_chunk is None else np.repeat(schedule.block_of_chunk, k)
    notes = dict(schedule.notes, slices=k)
    return Schedule(collective=schedule.collective, algorithm=schedule.algorithm,
                    ranks=schedule.ranks, chunk_bytes=sub,
                    message_chunks=schedule.message_chunks * k, phase_names=schedule.phase_names,
                    helper_ranks=schedule.helper_ranks, block_of_chunk=blocks,
                    root=schedule.root, notes=notes, **cols)
