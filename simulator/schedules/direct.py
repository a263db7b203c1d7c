"""Direct (pairwise, one-shot) algorithms: every rank talks to every other rank at once.

The message is cut into ``p`` blocks, block ``j`` belonging to rank ``j``. Reduce-scatter: every
rank sends block ``j`` straight to rank ``j``, which adds the ``p-1`` contributions. All-gather:
rank ``j`` sends its block to every other rank. All-reduce is the two in sequence, the one-shot
scheme NCCL and MSCCL use on fully connected NVLink/NVSwitch systems. Each rank sends and receives
``(p-1)/p·n`` per phase over ``p-1`` concurrent connections, so with full bisection the time is
``2·alpha + 2(p-1)/p·n·beta`` (Thakur, Rabenseifner and Gropp 2005 discuss the pairwise-exchange
variants; with a flow model all peers run concurrently).

All-to-all: rank ``r`` sends its input block ``j`` to rank ``j``, which stores it as output block
``r``. The output area follows the layout convention of :mod:`.execute`: message chunks are the
input blocks, chunks ``p .. 2p-1`` the output blocks in the same layout. A rank's own block is
copied locally (``src == dst``; the engine completes it at once, since it crosses no link), so
per-rank network bytes are those of transfers with ``src != dst``. Every block must have the same
size (the size is a multiple of ``p``): an unequal block could not land in a slot of another size.
"""

from __future__ import annotations

import numpy as np

from ..errors import ScheduleError
from .base import Schedule, ScheduleBuilder, split_bytes


def direct(collective: str, ranks: int, size_bytes: int) -> Schedule:
    """Pairwise reduce-scatter and/or all-gather, or all-to-all, all peers concurrently."""
    p = ranks
    blocks = np.arange(p, dtype=np.int64)
    chunk_bytes = split_bytes(size_bytes, p)
    if collective == "alltoall":
        if size_bytes % p:
            raise ScheduleError(f"alltoall needs a size divisible by the {p} ranks (every rank "
                                f"sends size/ranks bytes to each peer); got {size_bytes} bytes")
        chunk_bytes = np.concatenate((chunk_bytes, chunk_bytes))
    b = ScheduleBuilder(collective, "direct", p, chunk_bytes, message_chunks=p,
                        block_of_chunk=blocks)
    src, dst = np.repeat(blocks, p).tolist(), np.tile(blocks, p).tolist()
    if collective == "alltoall":
        for s, t in zip(src, dst):
            b.send(s, t, t, dst_chunk=p + s, reduce=False, step=0, phase="all-to-all")
        return b.build()
    step = 0
    if collective in ("allreduce", "reduce_scatter"):
        for s, t in zip(src, dst):
            if s != t:
                b.send(s, t, t, reduce=True, step=0, phase="reduce-scatter")
        step = 1 if collective == "allreduce" else 0
    if collective in ("allreduce", "allgather"):
        for s, t in zip(src, dst):
            if s != t:
                b.send(s, t, s, reduce=False, step=step, phase="all-gather")
    return b.build()
