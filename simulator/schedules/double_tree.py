"""Double binary tree all-reduce (Sanders, Speck and Traeff 2009; NCCL 2.4).

A single binary tree wastes half the network: leaves only send up and receive down, while interior
ranks carry three times the message. Two *complementary* trees fix it: each carries half of the
data, and a rank that is interior in one tree is a leaf in the other, so every rank sends and
receives about ``2n`` in all and the bandwidth term is ``2·n·beta`` with about ``2·lg p`` latency
hops (Sanders, Speck and Traeff, "Two-tree algorithms for full bandwidth broadcast, reduction
and scan", Parallel Computing 2009; NVIDIA blog "Massively Scale Your Deep Learning Training
with NCCL 2.4", 2019).

The trees are NCCL's (``ncclGetDtree`` in ``src/graph/trees.cc``): tree 0 is the bit-pattern
binary tree of :func:`.tree.btree` (root 0; odd ranks are its leaves, even ranks interior); tree 1
is its *mirror* ``r -> p-1-r`` when ``p`` is even and its *shift* ``r -> r+1 mod p`` when ``p`` is
odd (root ``p-1`` or 1). What NCCL's construction guarantees, and the tests check for
``p <= 64``: every rank is interior in at least one tree, and no rank is interior in both, except
rank 0 when ``p`` is odd (the root of tree 0, with a single child, is the shifted image of the
interior rank ``p-1``).

Each half is reduced up its tree and broadcast down, cut into pipelined segments on its own
channel (0 and 1); the root starts broadcasting segment ``s`` as soon as it is reduced. Like NCCL,
the pipeline works in fixed-size chunks: by default each segment is at most ``segment_bytes`` =
512 KiB (NCCL's Simple protocol: a 4 MiB buffer in ``NCCL_STEPS`` = 8 slots), so large messages
fill the pipeline and approach the full link bandwidth, while small ones move in one segment and
pay about ``2·lg p`` latency hops. ``segments`` fixes the count instead. With ``p = 1`` there is
nothing to send.
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError
from .base import LOCAL_FLOW_CAP_NOTE, Schedule, positive_rate
from .tree import Tree, btree, from_parent, positive_int, tree_schedule

#: NCCL Simple protocol chunk: DEFAULT_BUFFSIZE 4 MiB / NCCL_STEPS 8 (NVIDIA/nccl src/include).
DEFAULT_SEGMENT_BYTES = 512 << 10


def double_trees(p: int) -> tuple[Tree, Tree]:
    """NCCL's two complementary binary trees over ``p`` ranks."""
    t0 = btree(p)
    v = np.arange(p, dtype=np.int64)
    t1 = t0.relabel((v + 1) % p if p % 2 else p - 1 - v)
    return t0, t1


def segments_for(part_bytes: int, segment_bytes: int) -> int:
    """Segments of at most ``segment_bytes`` that cover ``part_bytes`` (at least one)."""
    segment_bytes = positive_int("segment_bytes", segment_bytes)
    return max(1, -(-int(part_bytes) // segment_bytes))


def channel_trees(p: int, channels: int = 1, local_ranks: int | None = None,
                  chains=None) -> list[Tree]:
    """The two complementary trees of every channel, ``2 x channels`` trees in all.

    Without ``local_ranks`` (or with one machine's worth of ranks equal to ``p`` and one
    channel) these are NCCL's double binary trees over all ranks (:func:`double_trees`).

    With ``local_ranks = L`` (consecutive ranks share a machine), they are NCCL's trees as it
    builds them across machines (``src/graph/trees.cc``, ``connect.cc``): inside every machine a
    chain of its GPUs, entered through the channel's head GPU ``c x L // channels`` (so each
    channel crosses machines on another GPU's NIC); across machines a double binary tree over the
    machines, joining their heads. On one machine the pair is the chain and its reverse.
    ``chains`` (per channel, the machine's local indices in chain order, head first) replaces
    the default rotation: NCCL's trees follow the paths its search found, which enter each
    machine through a GPU beside the channel's NIC and travel NVLink inside
    (:mod:`simulator.library.nccl` chooses them).
    """
    channels = positive_int("channels", channels)
    if local_ranks is None:
        base = list(double_trees(p))
        if channels == 1:
            return base
        local_ranks = p
    local = positive_int("local_ranks", local_ranks)
    if p % local or local > p:
        local, chains = p, None      # ranks that do not fill machines: one chain of them all
    machines = p // local
    out = []
    if chains is not None:
        chains = [[int(g) for g in chain] for chain in chains]
        if len(chains) != channels or any(sorted(chain) != list(range(local))
                                          for chain in chains):
            raise ConfigError(f"option chains: expected {channels} orders of the local indices "
                              f"0..{local - 1}, got {chains!r}")
    for c in range(channels):
        head = (c * local // channels) % local
        chain = [(head + i) % local for i in range(local)] if chains is None else chains[c]
        if machines == 1:
            pairs = [(None, chain), (None, chain[::-1])]
        else:
            pairs = [(t, chain) for t in double_trees(machines)]
        for node_tree, order in pairs:
            parent = np.full(p, -1, dtype=np.int64)
            for m in range(machines):
                base_rank = m * local
                for i in range(1, local):
                    parent[base_rank + order[i]] = base_rank + order[i - 1]
                up = -1 if node_tree is None else int(node_tree.parent[m])
                if up >= 0:
                    parent[base_rank + order[0]] = up * local + order[0]
            out.append(from_parent(parent))
    return out


def double_binary_tree(collective: str, ranks: int, size_bytes: int, segments: int | None = None,
                       segment_bytes: int = DEFAULT_SEGMENT_BYTES, channels: int = 1,
                       local_ranks: int | None = None, chains=None,
                       local_flow_cap_bytes_per_s: float | None = None) -> Schedule:
    """Each channel's two complementary trees carry an equal share of the message.

    ``channels`` (default 1: NCCL's two trees) runs the pair on that many channels
    (:func:`channel_trees`); ``local_ranks`` is the ranks per machine they rotate within;
    ``chains`` each channel's order of a machine's GPUs (local indices, head first).
    ``local_flow_cap_bytes_per_s`` caps every transfer between two ranks of one machine (of
    ``local_ranks``) at that rate, whatever its links leave it: in NCCL a tree is one channel,
    and one channel's thread block copies each of its chunks (see
    :data:`LOCAL_FLOW_CAP_NOTE`).
    """
    trees = channel_trees(ranks, channels, local_ranks, chains)
    if segments is None:
        segments = segments_for(-(-int(size_bytes) // len(trees)), segment_bytes)
    schedule = tree_schedule(collective, "double_binary_tree", ranks, size_bytes, trees,
                             segments)
    if local_flow_cap_bytes_per_s is not None:
        cap = positive_rate(local_flow_cap_bytes_per_s, "option local_flow_cap_bytes_per_s")
        schedule.notes[LOCAL_FLOW_CAP_NOTE] = (cap, int(local_ranks or ranks))
    return schedule
