"""Ring algorithms (Patarasuk and Yuan 2009; the NCCL ring).

The message is cut into ``p`` chunks. Reduce-scatter: at step ``k`` rank ``r`` sends chunk
``(r-k-1) mod p`` to ``r+1``, which adds it to its own copy; after ``p-1`` steps rank ``r`` holds
the full sum of chunk ``r``. All-gather: at step ``k`` rank ``r`` forwards chunk ``(r-k) mod p``,
overwriting; after ``p-1`` more steps everyone has everything. Every rank sends and receives
``(p-1)/p`` of the message per phase, which is optimal; the price is ``p-1`` latency-bound steps
per phase.

Closed form, uncontended, step-synchronous, largest chunk ``c = ceil(n/p)``:
``2(p-1)·(alpha + c·beta) + (p-1)·c·gamma`` for all-reduce.

Channels (NCCL runs several rings at once, one per NIC or NVLink set): with ``channels = C`` the
message is split into ``C`` parts, each all-reduced on its own ring and FIFO channel. With
``local_ranks = L`` (ranks per machine) channel ``c`` visits each machine's ranks rotated by
``c``, so the rank that leaves a machine, and with it the NIC the ring crosses, differs from
channel to channel, which is how NCCL spreads inter-node rings over all NICs. Without it every
channel follows the same cycle (parallel flows on the same links). With ``orders`` (one
permutation of the ranks per channel) every channel follows its own given cycle instead: the
topology-aware rings of :mod:`simulator.topology.rings`, which keep every hop of a DGX-1 ring
on NVLink, arrive this way; ``channels`` is then ``len(orders)`` and ``local_ranks`` is unused.

Broadcast and reduce run as a pipeline along the chain ``root, root+1, ..., root-1`` (the ring
with one edge unused): broadcast copies the message down the chain, reduce adds it up towards the
root. Both take ``p-1`` whole-message steps and are efficient only when sliced (``--slices k``:
``(p-1+k-1)·(alpha + n·beta/k)``). They reuse the tree emitter of :mod:`.tree` on a chain. With
several channels every channel carries its part of the message down its own ring's chain, so
the chains leave a machine through different GPUs and NICs, as the all-reduce's rings do.
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError
from .base import Schedule, split_bytes
from .tree import ROOTED, chain, positive_int, resolve_root, tree_schedule

_PHASES = ("reduce-scatter", "all-gather")


def _ring_steps(p: int, first_step: int, chunk_of_rank_at_step, reduce: bool, phase: int):
    """Columns of ``p-1`` ring steps where rank r sends ``chunk_of_rank_at_step(r, k)``."""
    r = np.tile(np.arange(p, dtype=np.int64), p - 1)
    k = np.repeat(np.arange(p - 1, dtype=np.int64), p)
    return dict(src=r, dst=(r + 1) % p, chunk=chunk_of_rank_at_step(r, k) % p,
                step=k + first_step, reduce=np.full(r.shape, reduce),
                phase=np.full(r.shape, phase, dtype=np.int16))


def ring_order(p: int, channel: int, local_ranks: int | None,
               channels: int | None = None) -> np.ndarray:
    """Ranks in ring order for ``channel``: machines in order, each machine's ranks rotated.

    Channel ``c`` of ``channels`` rotates by ``c`` when there are at least as many channels as
    ranks per machine, else by ``c x L // channels``, so that fewer channels than GPUs (one per
    NIC on a machine with fewer NICs than GPUs) still leave each machine through GPUs spread
    over all its NICs."""
    if not local_ranks or local_ranks >= p or p % local_ranks:
        return np.arange(p, dtype=np.int64)
    shift = channel if not channels or channels >= local_ranks \
        else channel * local_ranks // channels
    j = np.arange(local_ranks, dtype=np.int64)
    nodes = np.arange(p // local_ranks, dtype=np.int64)
    return (nodes[:, None] * local_ranks + (j[None, :] + shift) % local_ranks).ravel()


def explicit_orders(orders, p: int) -> list[np.ndarray]:
    """The ``orders`` option as one array per channel, each a permutation of ``0..p-1``.

    Anything else (not a non-empty list of lists, a wrong length, a repeated or missing rank)
    raises a :class:`ConfigError` naming the option and the offending channel.
    """
    if isinstance(orders, (str, bytes)) or not hasattr(orders, "__len__") or len(orders) == 0:
        raise ConfigError(f"option orders must be a non-empty list of rank orders (one "
                          f"permutation of 0..{p - 1} per channel), got {orders!r}")
    result = []
    for c, order in enumerate(orders):
        ok = not isinstance(order, (str, bytes)) and hasattr(order, "__len__")
        values = list(order) if ok else []
        ok = ok and all(isinstance(r, (int, np.integer)) and not isinstance(r, bool)
                        for r in values)
        if not ok or sorted(int(r) for r in values) != list(range(p)):
            raise ConfigError(f"option orders: channel {c} order {order!r} is not a "
                              f"permutation of the ranks 0..{p - 1}")
        result.append(np.asarray(values, dtype=np.int64))
    return result


def channel_orders(p: int, channels: int | None, local_ranks: int | None,
                   orders=None) -> list[np.ndarray]:
    """Every channel's ring order: the explicit ``orders``, else :func:`ring_order` per channel.

    ``channels`` defaults to ``len(orders)`` (or 1); given with ``orders`` it must agree.
    """
    if orders is None:
        count = 1 if channels is None else positive_int("channels", channels)
        return [ring_order(p, c, local_ranks, count) for c in range(count)]
    result = explicit_orders(orders, p)
    if channels is not None and positive_int("channels", channels) != len(result):
        raise ConfigError(f"option channels={channels} disagrees with the {len(result)} "
                          f"ring order(s) of option orders; give one of them, or both equal")
    return result


def _chain_from(order: np.ndarray, root: int):
    """The chain along the ring ``order`` from ``root``: root, its successor, ..., its
    predecessor (the ring with its edge into the root unused)."""
    start = int(np.flatnonzero(np.asarray(order) == root)[0])
    return chain(len(order)).relabel(np.roll(np.asarray(order, dtype=np.int64), -start))


def ring(collective: str, ranks: int, size_bytes: int, root: int | None = None,
         channels: int | None = None, local_ranks: int | None = None,
         orders=None, barriers: bool = False) -> Schedule:
    """Ring reduce-scatter, all-gather, or both (all-reduce); chain broadcast and reduce.

    ``orders`` (one permutation of the ranks per channel) overrides the index order. Broadcast
    and reduce run one chain per channel, along that channel's ring from the root, each
    carrying an equal part of the message on its own channel, as NCCL splits a broadcast over
    its ring channels (``broadcast.h``: ``runRing`` per channel); with one channel in index
    order that is the chain ``root, root+1, ...``.

    ``barriers=True`` makes the steps bulk-synchronous: the transfers are listed step by step
    (all channels' step ``k`` before step ``k+1``) and every step after the first opens with a
    ``sync`` barrier, so a step starts when the whole previous step is complete and costs its
    slowest transfer. This is the additive model of NCCL's tuner (``nsteps`` x step latency +
    bytes / bandwidth), which the ``nccl`` library runs.
    """
    if not isinstance(barriers, (bool, np.bool_)):
        raise ConfigError(f"option barriers must be true or false, got {barriers!r}")
    p = ranks
    root = resolve_root(collective, ranks, root)
    orders = channel_orders(p, channels, local_ranks, orders)
    channels = len(orders)
    if collective in ROOTED:
        return tree_schedule(collective, "ring", p, size_bytes,
                             [_chain_from(order, root) for order in orders])
    parts = []
    if collective in ("allreduce", "reduce_scatter"):
        parts.append(_ring_steps(p, 0, lambda r, k: r - k - 1, True, 0))
    if collective in ("allreduce", "allgather"):
        first = p - 1 if collective == "allreduce" else 0
        parts.append(_ring_steps(p, first, lambda r, k: r - k, False, 1))
    one = {key: np.concatenate([part[key] for part in parts]) if p > 1
           else np.zeros(0, dtype=parts[0][key].dtype) for key in parts[0]}
    cols: dict[str, list] = {key: [] for key in one}
    cols["channel"] = []
    blocks, chunk_bytes = [], []
    for c, (order, part_bytes) in enumerate(zip(orders, split_bytes(size_bytes, channels))):
        for key, value in one.items():
            if key in ("src", "dst"):
                value = order[value]
            elif key == "chunk":
                value = value + c * p
            cols[key].append(value)
        cols["channel"].append(np.full(len(one["src"]), c, dtype=np.int64))
        blocks.append(order)              # position r of channel c ends owning chunk c*p + r
        chunk_bytes.append(split_bytes(int(part_bytes), p))
    cols = {key: np.concatenate(value) for key, value in cols.items()}
    n = len(cols["src"])
    sync = np.zeros(n, dtype=bool)
    if barriers and n:
        order = np.argsort(cols["step"], kind="stable")
        cols = {key: value[order] for key, value in cols.items()}
        sync[1:] = cols["step"][1:] != cols["step"][:-1]
    return Schedule(collective=collective, algorithm="ring", ranks=p,
                    chunk_bytes=np.concatenate(chunk_bytes), message_chunks=p * channels,
                    src=cols["src"], dst=cols["dst"], src_chunk=cols["chunk"],
                    dst_chunk=cols["chunk"].copy(), nchunks=np.ones(n, dtype=np.int64),
                    reduce=cols["reduce"], step=cols["step"], phase=cols["phase"],
                    channel=cols["channel"], sync=sync,
                    phase_names=_PHASES, block_of_chunk=np.concatenate(blocks))
