"""Recursive halving and doubling (Rabenseifner's all-reduce; Thakur, Rabenseifner and Gropp 2005).

For ``p = 2^d`` ranks the message is cut into ``p`` chunks. Reduce-scatter by recursive halving:
at step ``k`` rank ``v`` pairs with ``v XOR p/2^(k+1)``; of the range of chunks it is still
responsible for, it keeps the half containing its own chunk and sends the other half to the
partner, which adds it (the two send *different* halves, so the exchange is well defined). After
``lg p`` steps rank ``v`` holds the sum of chunk ``v``. All-gather by recursive doubling reverses
it: at step ``k`` rank ``v`` sends the ``2^k`` chunks it has to ``v XOR 2^k``. Each phase moves
``(p-1)/p·n`` per rank in ``lg p`` steps:
``2·lg p·alpha + 2(p-1)/p·n·beta + (p-1)/p·n·gamma``.

Other ``p`` (MPICH's fold/unfold): with ``p' = 2^floor(lg p)`` and ``r = p - p'``, each even
rank ``2i < 2r`` first sends its vector to ``2i+1`` (all-reduce and reduce-scatter: the whole
vector, added; all-gather: its own block, copied); the ``p'`` remaining ranks (odd ranks below
``2r``, all ranks from ``2r``) run the power-of-two algorithm, and finally ``2i+1`` sends ``2i``
its result (all-reduce: everything; reduce-scatter: block ``2i``; all-gather: all blocks but
``2i``'s own). That costs two extra whole-message steps for all-reduce. A ``sync`` barrier
after the fold makes the participants start together, as MPICH's blocking exchanges do (data
flow alone would let the other ranks push into a folding rank while its fold is still arriving,
sharing its link). All-reduce splits the message into ``p'`` equal chunks. Reduce-scatter and
all-gather keep one block per rank (``p`` chunks); the surviving rank of a folded pair is
responsible for both blocks of its pair, so recursive halving and doubling work on *groups* of
one or two blocks, as MPICH's ``MPIR_Reduce_scatter_intra_recursive_halving`` does.
"""

from __future__ import annotations

import numpy as np

from .base import Schedule, ScheduleBuilder, split_bytes


def halving_doubling(collective: str, ranks: int, size_bytes: int) -> Schedule:
    """Rabenseifner all-reduce, or its reduce-scatter / all-gather half, for any ``p``."""
    p = ranks
    d = p.bit_length() - 1
    q = 1 << d                       # p' participants
    r = p - q                        # folded pairs (2i, 2i+1), i < r
    g = np.arange(q, dtype=np.int64)
    actual = np.where(g < r, 2 * g + 1, g + r)          # participant -> rank
    if collective == "allreduce":
        chunk_bytes, blocks = split_bytes(size_bytes, q), None
        bounds = np.arange(q + 1, dtype=np.int64)       # group -> its chunks
    else:
        chunk_bytes, blocks = split_bytes(size_bytes, p), np.arange(p, dtype=np.int64)
        bounds = np.concatenate(([0], np.cumsum(np.where(g < r, 2, 1))))
    everything = len(chunk_bytes)
    b = ScheduleBuilder(collective, "halving_doubling", p, chunk_bytes, block_of_chunk=blocks)
    reduces = collective in ("allreduce", "reduce_scatter")
    gathers = collective in ("allreduce", "allgather")
    step = 0

    def send_groups(v: int, w: int, lo: int, hi: int, reduce: bool, phase: str) -> None:
        """Participant ``v`` sends groups ``[lo, hi)`` to ``w``; the first transfer after the
        ``r`` fold transfers is the barrier."""
        b.send(int(actual[v]), int(actual[w]), int(bounds[lo]),
               nchunks=int(bounds[hi] - bounds[lo]), reduce=reduce, step=step, phase=phase,
               sync=r > 0 and len(b.rows) == r)

    if r:
        for i in range(r):
            if reduces:
                b.send(2 * i, 2 * i + 1, 0, nchunks=everything, reduce=True, step=0, phase="fold")
            else:
                b.send(2 * i, 2 * i + 1, 2 * i, reduce=False, step=0, phase="fold")
        step += 1
    if reduces:
        for k in range(d):
            mask = q >> (k + 1)
            for v in range(q):
                base = v & ~(2 * mask - 1)
                give = base if v & mask else base + mask     # the half not containing v
                send_groups(v, v ^ mask, give, give + mask, True, "reduce-scatter")
            step += 1
    if gathers:
        for k in range(d):
            mask = 1 << k
            for v in range(q):
                base = v & ~(mask - 1)
                send_groups(v, v ^ mask, base, base + mask, False, "all-gather")
            step += 1
    if r:
        for i in range(r):
            if collective == "allreduce":
                b.send(2 * i + 1, 2 * i, 0, nchunks=everything, reduce=False, step=step,
                       phase="unfold")
            elif collective == "reduce_scatter":
                b.send(2 * i + 1, 2 * i, 2 * i, reduce=False, step=step, phase="unfold")
            else:
                for lo, hi in ((0, 2 * i), (2 * i + 1, p)):
                    if hi > lo:
                        b.send(2 * i + 1, 2 * i, lo, nchunks=hi - lo, reduce=False, step=step,
                               phase="unfold")
    return b.build()
