"""Hierarchical (2D) all-reduce composed from registered algorithms.

Ranks are numbered node-major: rank ``node·L + i`` is local rank ``i`` of ``node``, with ``L =
local_ranks`` ranks per node. Three phases, each a registered schedule embedded into the global
one (:func:`embed`):

1. reduce-scatter inside every node with the ``inner`` algorithm: local rank ``i`` ends with the
   node's sum of block ``i`` (the inner schedule's own blocks, size about ``n/L``);
2. all-reduce of block ``i`` across nodes, among the ranks with local index ``i``, with the
   ``outer`` algorithm (``L`` independent all-reduces of ``n/L`` bytes, over disjoint ranks);
3. all-gather inside every node with the ``inner`` algorithm.

With rings at both levels and ``p = p1·p2`` (``p1 = L``) this is the 2D ring:
``2(p1-1)·alpha1 + 2(p1-1)/p1·n·beta1 + 2(p2-1)·alpha2 + 2(p2-1)/p2·(n/p1)·beta2`` -- the
slow inter-node links carry ``1/L`` of what a flat ring would put on them (the hierarchical
scheme of Horovod and of Jia et al. 2018, "Highly scalable deep learning training system with
mixed-precision", built from Thakur et al.'s and Patarasuk and Yuan's building blocks).

The global chunk partition is the common refinement of the inner schedule's chunks and, inside
each block, the outer schedule's chunks, so every transfer of every level is a contiguous run of
global chunks. Each phase gets its own channels (like separate communicators), and phase steps
are numbered one after the other. The copies of one phase (one per node, or one per block) run
concurrently; barriers inside a sub-schedule (binomial rounds, the fold of halving-doubling) are
shared by all copies of its phase (see :func:`embed`). Sub-schedules are built without slicing; ``slices`` applies to
the composed schedule.
"""

from __future__ import annotations

import numpy as np

from ..errors import ScheduleError
from .base import Schedule, ScheduleBuilder
from .registry import make_schedule


def refine(a, b) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Common refinement of two partitions (chunk sizes) of the same number of bytes.

    Returns ``(fine, bounds_a, bounds_b)``: ``fine`` are the refined chunk sizes and chunk ``c`` of
    ``a`` is fine chunks ``bounds_a[c] .. bounds_a[c+1]-1`` (never empty: a zero-byte chunk of
    either partition becomes a zero-byte fine chunk of its own). Likewise ``bounds_b``.
    """
    a, b = [int(x) for x in a], [int(x) for x in b]
    if sum(a) != sum(b):
        raise ValueError("partitions of different sizes")
    fine: list[int] = []
    ba, bb = [], []
    i = j = 0
    ra = rb = None                 # bytes left in the current chunk of a / b (None: not begun)
    while i < len(a) or j < len(b):
        if i < len(a) and ra is None:
            ba.append(len(fine))
            ra = a[i]
        if j < len(b) and rb is None:
            bb.append(len(fine))
            rb = b[j]
        if ra == 0 or rb == 0 or ra is None or rb is None:
            fine.append(0)         # a zero-byte chunk (of a, of b, or trailing ones of either)
            if ra == 0:
                i, ra = i + 1, None
            else:
                j, rb = j + 1, None
            continue
        m = min(ra, rb)
        fine.append(m)
        ra, rb = ra - m, rb - m
        if ra == 0:
            i, ra = i + 1, None
        if rb == 0:
            j, rb = j + 1, None
    ba.append(len(fine))
    bb.append(len(fine))
    return (np.asarray(fine, dtype=np.int64), np.asarray(ba, dtype=np.int64),
            np.asarray(bb, dtype=np.int64))


def embed(builder: ScheduleBuilder, instances, step_offset: int = 0, channel_offset: int = 0,
          phase_prefix: str = "") -> None:
    """Append concurrent copies of sub-schedules to ``builder``, translated into the global one.

    Parameters
    ----------
    instances : list of (Schedule, rank_map, chunk_map)
        Each sub-schedule with the global rank of each of its ranks, and either a chunk offset
        (sub chunk ``c`` is global chunk ``offset + c``) or the global chunk boundary of every
        sub chunk boundary (length ``len(sub.chunk_bytes) + 1``): a run of sub chunks
        ``[c, c+m)`` becomes global chunks ``[map[c], map[c+m])``. Instances must touch disjoint
        (rank, chunk) sets, as the copies of one phase do.
    step_offset, channel_offset : int
        Added to every transfer's step and channel.
    phase_prefix : str
        Prepended to the sub-schedules' phase names.

    Barriers: a ``sync`` epoch of a sub-schedule is a barrier over everything listed before it,
    so copies laid one after another would wait for each other. Instead the copies are merged
    epoch by epoch, with one shared barrier per epoch: all copies finish epoch ``e`` before any
    starts epoch ``e+1``, and copies without barriers simply interleave.
    """
    mapped = [_translate(sub, rank_map, chunk_map, step_offset, channel_offset, phase_prefix)
              for sub, rank_map, chunk_map in instances]
    mapped = [rows for rows in mapped if len(rows["epoch"])]
    if not mapped:
        return
    # phase codes registered in order of first use, as one send per row would register them
    names: dict[str, int] = {}
    for rows in mapped:
        rows["phase"] = np.asarray([names.setdefault(name, len(names))
                                    for name in rows["phase_names"]],
                                   dtype=np.int64)[rows["phase"]]
    cols = {key: np.concatenate([rows[key] for rows in mapped])
            for key in ("src", "dst", "src_chunk", "dst_chunk", "nchunks", "reduce", "step",
                        "channel", "phase", "epoch")}
    # epoch by epoch, the copies one after another (each copy's rows in its own order)
    copy = np.repeat(np.arange(len(mapped), dtype=np.int64),
                     [len(rows["epoch"]) for rows in mapped])
    order = np.lexsort((copy, cols["epoch"]))
    cols = {key: col[order] for key, col in cols.items()}
    first_use = np.unique(cols["phase"], return_index=True)[1]
    code = np.zeros(len(names), dtype=np.int64)
    by_name = list(names)
    for k in np.sort(first_use).tolist():
        tmp = int(cols["phase"][k])
        code[tmp] = builder.phase_code(by_name[tmp])
    cols["phase"] = code[cols["phase"]]
    # one shared barrier per epoch after the first: on its first row
    epoch = cols.pop("epoch")
    sync = np.zeros(len(epoch), dtype=bool)
    sync[1:] = epoch[1:] != epoch[:-1]
    sync[0] = epoch[0] > 0
    cols["sync"] = sync
    builder.extend(cols)


def _translate(sub: Schedule, rank_map, chunk_map, step_offset: int, channel_offset: int,
               phase_prefix: str) -> dict:
    """``sub``'s columns in global ranks, chunks, steps, channels and phase names (``phase``
    indexes ``phase_names``), with every transfer's barrier epoch in the sub-schedule."""
    rank_map = np.asarray(rank_map, dtype=np.int64)
    if np.ndim(chunk_map) == 0:
        chunk_map = int(chunk_map) + np.arange(len(sub.chunk_bytes) + 1, dtype=np.int64)
    chunk_map = np.asarray(chunk_map, dtype=np.int64)
    first = chunk_map[sub.src_chunk]
    return {"src": rank_map[sub.src], "dst": rank_map[sub.dst],
            "src_chunk": first, "dst_chunk": chunk_map[sub.dst_chunk],
            "nchunks": chunk_map[sub.src_chunk + sub.nchunks] - first,
            "reduce": sub.reduce, "step": sub.step + step_offset,
            "channel": sub.channel + channel_offset, "phase": sub.phase.astype(np.int64),
            "phase_names": [phase_prefix + name for name in sub.phase_names],
            "epoch": np.cumsum(sub.sync, dtype=np.int64)}


def _block_runs(sub: Schedule, owners: int) -> tuple[np.ndarray, np.ndarray]:
    """First and last+1 chunk of every rank's block; each block must be one contiguous run."""
    blocks = sub.block_of_chunk[: sub.message_chunks]
    first, stop = np.zeros(owners, dtype=np.int64), np.zeros(owners, dtype=np.int64)
    for i in range(owners):
        where = np.flatnonzero(blocks == i)
        if len(where) == 0 or where[-1] - where[0] + 1 != len(where):
            raise ScheduleError(f"hierarchical: inner algorithm {sub.algorithm!r} must give every "
                                f"local rank one contiguous block")
        first[i], stop[i] = where[0], where[-1] + 1
    return first, stop


def _check_plain(sub: Schedule, role: str) -> None:
    if sub.helper_ranks or sub.message_chunks != len(sub.chunk_bytes):
        raise ScheduleError(f"hierarchical: {role} algorithm {sub.algorithm!r} needs helper ranks "
                            f"or scratch space, which cannot be embedded; choose another")


def hierarchical(collective: str, ranks: int, size_bytes: int, local_ranks: int | None = None,
                 inner: str = "ring", outer: str = "ring") -> Schedule:
    """Intra-node reduce-scatter, inter-node all-reduce per block, intra-node all-gather."""
    if local_ranks is None:
        raise ScheduleError("hierarchical needs option local_ranks (ranks per node, e.g. the "
                            "topology's GPUs per node)")
    if isinstance(local_ranks, bool) or not isinstance(local_ranks, (int, np.integer)) \
            or local_ranks < 1 or ranks % local_ranks:
        raise ScheduleError(f"hierarchical: local_ranks must be a positive divisor of the {ranks} "
                            f"ranks, got {local_ranks!r}")
    L, nodes = int(local_ranks), ranks // int(local_ranks)
    rs = make_schedule(inner, "reduce_scatter", L, size_bytes)
    ag = make_schedule(inner, "allgather", L, size_bytes)
    for sub in (rs, ag):
        _check_plain(sub, "inner")
    if not (np.array_equal(rs.chunk_bytes, ag.chunk_bytes)
            and np.array_equal(rs.block_of_chunk, ag.block_of_chunk)):
        raise ScheduleError(f"hierarchical: inner algorithm {inner!r} cuts the message "
                            f"differently for reduce-scatter and all-gather")
    first, stop = _block_runs(rs, L)
    off = rs.chunk_offsets
    by_size: dict[int, Schedule] = {}
    for i in range(L):
        size = int(off[stop[i]] - off[first[i]])
        if size not in by_size:
            by_size[size] = make_schedule(outer, "allreduce", nodes, size)
            _check_plain(by_size[size], "outer")
    outers = [by_size[int(off[stop[i]] - off[first[i]])] for i in range(L)]
    # Outer partitions laid end to end in block order, refined with the inner chunks.
    order = np.argsort(first, kind="stable")
    fine, inner_map, outer_map = refine(
        rs.chunk_bytes, np.concatenate([outers[i].chunk_bytes for i in order]))
    outer_start = np.zeros(L, dtype=np.int64)
    outer_start[order] = np.concatenate(([0], np.cumsum([len(outers[i].chunk_bytes)
                                                        for i in order])[:-1]))

    b = ScheduleBuilder(collective, "hierarchical", ranks, fine)
    local = np.arange(L, dtype=np.int64)
    chan_outer = int(rs.channel.max(initial=-1)) + 1
    chan_ag = chan_outer + max(int(o.channel.max(initial=-1)) + 1 for o in outers)
    embed(b, [(rs, node * L + local, inner_map) for node in range(nodes)],
          0, 0, "intra-node ")
    embed(b, [(o, np.arange(nodes) * L + i,
               outer_map[outer_start[i]: outer_start[i] + len(o.chunk_bytes) + 1])
              for i, o in enumerate(outers)], rs.steps, chan_outer, "inter-node ")
    embed(b, [(ag, node * L + local, inner_map) for node in range(nodes)],
          rs.steps + max(o.steps for o in outers), chan_ag, "intra-node ")
    b.notes.update(local_ranks=L, nodes=nodes, inner=inner, outer=outer)
    return b.build()
