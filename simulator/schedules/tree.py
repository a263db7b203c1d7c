"""Tree algorithms: reduce up a rooted tree, broadcast down it (NCCL tree; MPICH binomial).

A tree is a ``parent`` array over the ranks (``-1`` at the root) plus the step at which each edge
fires in each direction. The *reduce* phase sends every rank's partial sum to its parent, which
adds it into its own buffer; a rank forwards only after all its children's contributions have
landed (data flow guarantees that). The *broadcast* phase copies the root's data down the edges.
All-reduce is reduce followed by broadcast. This one emitter (:func:`tree_schedule`) serves every
tree-shaped algorithm: the single NCCL tree here, the double binary tree
(:mod:`.double_tree`), and the chain that :mod:`.ring` uses for broadcast and reduce.

Pipelining: the message is cut into ``segments`` chunks sent in order on the same FIFO connection
(one per parent/child pair and tree). Segment ``s`` at a rank waits only for segment ``s`` from
its children, so with ``k`` segments and height ``h`` one phase takes ``h + k - 1`` steps of size
``n/k`` instead of ``h`` steps of size ``n``; in all-reduce the root starts broadcasting segment
``s`` as soon as it is reduced, so the two phases overlap by data flow alone.

Trees provided:

* :func:`btree` -- NCCL's balanced binary tree (``ncclGetBtree`` in NCCL ``src/graph/trees.cc``):
  built from the bit pattern of the ranks, every rank has at most two children, odd ranks are
  leaves, and the root 0 has a single child (the largest power of two below ``p``); its height is
  ``ceil(lg p)``. Algorithm ``tree``.
* :func:`binomial` -- the binomial tree of MPICH's reduce and broadcast (Thakur, Rabenseifner and
  Gropp 2005): the parent of ``v`` is ``v`` with its lowest set bit cleared; the edge to ``v``
  fires at step ``tz(v)`` (trailing zeros) going up and ``ceil(lg p) - 1 - tz(v)`` going down, so
  all-reduce takes ``2·ceil(lg p)`` whole-message steps:
  ``2·ceil(lg p)·(alpha + n·beta) + ceil(lg p)·n·gamma``. MPICH sends with blocking calls, so a
  rank serves its children one round after another; the schedule reproduces that with a ``sync``
  barrier at every step (without it the root would feed all its children at once, sharing its
  link). Algorithm ``binomial_tree``.
* :func:`chain` -- the path ``0 - 1 - ... - p-1`` (ring broadcast and reduce).

Rooted collectives (broadcast, reduce) take a ``root`` option; the tree is rotated so its root is
that rank. In the NCCL tree and the chain, a rank's transfers to (or from) its two children
overlap in time and share its links, as in NCCL.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from .base import Schedule, ScheduleBuilder, split_bytes

ROOTED = ("broadcast", "reduce")


@dataclass(frozen=True)
class Tree:
    """A rooted spanning tree over ranks ``0 .. p-1`` and the step labels of its edges.

    Attributes
    ----------
    parent : ndarray of int64
        Parent of every rank, ``-1`` at the root.
    up_step : ndarray of int64
        Reduce phase: the step at which rank ``r`` sends to ``parent[r]`` (strictly larger than
        its children's); ignored at the root.
    down_step : ndarray of int64
        Broadcast phase: the step at which ``parent[r]`` sends to ``r`` (strictly larger than its
        parent's); ignored at the root.
    """

    parent: np.ndarray
    up_step: np.ndarray
    down_step: np.ndarray

    @property
    def size(self) -> int:
        return len(self.parent)

    @property
    def root(self) -> int:
        return int(np.flatnonzero(self.parent < 0)[0])

    def children(self) -> np.ndarray:
        """Number of children of every rank."""
        return np.bincount(self.parent[self.parent >= 0], minlength=self.size)

    def height(self) -> int:
        """Edges on the longest root-to-leaf path."""
        return int(_depths(self.parent).max()) if self.size else 0

    def interior(self) -> np.ndarray:
        """Boolean mask of ranks with at least one child."""
        return self.children() > 0

    def relabel(self, rank_of) -> "Tree":
        """The same tree with vertex ``v`` renamed ``rank_of[v]`` (a permutation)."""
        rank_of = np.asarray(rank_of, dtype=np.int64)
        parent = np.full(self.size, -1, dtype=np.int64)
        up, down = np.empty_like(parent), np.empty_like(parent)
        has = self.parent >= 0
        parent[rank_of[has]] = rank_of[self.parent[has]]
        up[rank_of] = self.up_step
        down[rank_of] = self.down_step
        return Tree(parent, up, down)

    def rooted_at(self, root: int) -> "Tree":
        """Rotate ranks so the root (assumed 0) becomes ``root``."""
        return self.relabel((np.arange(self.size) + root) % self.size)


def _depths(parent: np.ndarray) -> np.ndarray:
    """Depth of every vertex (root 0), by pointer jumping: O(p log p) without recursion."""
    depth = (parent >= 0).astype(np.int64)
    up = np.where(parent >= 0, parent, np.arange(len(parent)))
    while True:
        step = np.where(up != np.arange(len(up)), depth[up], 0)
        if not step.any():
            return depth
        depth = depth + step
        up = up[up]


def from_parent(parent) -> Tree:
    """A tree whose edges fire as early as data flow allows.

    Up: a rank sends when its subtree is reduced (step = height of its subtree). Down: the edge to
    ``r`` fires at the depth of its parent. Whole-message all-reduce then takes ``2·height``
    steps.
    """
    parent = np.asarray(parent, dtype=np.int64)
    if np.count_nonzero(parent < 0) != 1:
        raise ValueError("a tree needs exactly one root")
    depth = _depths(parent)
    height = np.zeros_like(parent)
    for v in np.argsort(-depth, kind="stable").tolist():   # deepest first
        u = parent[v]
        if u >= 0 and height[v] + 1 > height[u]:
            height[u] = height[v] + 1
    return Tree(parent, height, depth - 1)


def btree(p: int) -> Tree:
    """NCCL's binary tree over ``p`` ranks rooted at 0 (``ncclGetBtree``).

    For ``v > 0`` with lowest set bit ``b``: the parent is ``(v ^ b) | (b << 1)``, or ``v ^ b``
    when that is out of range.
    """
    v = np.arange(p, dtype=np.int64)
    bit = v & -v
    up = (v ^ bit) | (bit << 1)
    up = np.where(up >= p, v ^ bit, up)
    if p:
        up[0] = -1
    return from_parent(up)


def ceil_lg(p: int) -> int:
    """``ceil(log2 p)`` for ``p >= 1``."""
    return (int(p) - 1).bit_length()


def binomial(p: int) -> Tree:
    """MPICH's binomial tree rooted at 0, with MPICH's step of every edge."""
    v = np.arange(p, dtype=np.int64)
    parent = v & (v - 1)
    tz = np.zeros(p, dtype=np.int64)
    tz[1:] = np.log2(v[1:] & -v[1:]).astype(np.int64)   # exact for powers of two
    if p:
        parent[0] = -1
    return Tree(parent, tz, ceil_lg(p) - 1 - tz)


def chain(p: int) -> Tree:
    """The path ``0 - 1 - ... - p-1`` rooted at 0."""
    return from_parent(np.arange(p, dtype=np.int64) - 1)


# -- validation shared by the tree-shaped builders ------------------------------------------------
def positive_int(name: str, value) -> int:
    """``value`` as an int >= 1, or a :class:`ConfigError` naming the option."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ConfigError(f"option {name} must be an integer >= 1, got {value!r}")
    return int(value)


def resolve_root(collective: str, ranks: int, root) -> int:
    """The root rank: ``root`` for broadcast and reduce (default 0); rejected elsewhere."""
    if root is None:
        return 0
    if collective not in ROOTED:
        raise ConfigError(f"option root applies to {' and '.join(ROOTED)} only, "
                          f"not {collective}")
    if isinstance(root, bool) or not isinstance(root, (int, np.integer)) \
            or not 0 <= root < ranks:
        raise ConfigError(f"option root must be a rank in 0..{ranks - 1}, got {root!r}")
    return int(root)


# -- the emitter -----------------------------------------------------------------------------------
def _edges(tree: Tree, chunks, *, up: bool, first_step: int):
    """Transfers ``(src, dst, chunk, step)`` of one phase of ``tree``, segment by segment."""
    child = np.flatnonzero(tree.parent >= 0)
    label = tree.up_step if up else tree.down_step
    order = child[np.lexsort((child, label[child]))]  # children before parents (up), after (down)
    for s, c in enumerate(chunks):
        for r in order.tolist():
            par, step = int(tree.parent[r]), first_step + s + int(label[r])
            yield (r, par, int(c), step) if up else (par, r, int(c), step)


def _span(tree: Tree, up: bool, segments: int) -> int:
    """Steps one phase occupies: its deepest edge label + 1, plus ``segments - 1``."""
    child = tree.parent >= 0
    if not child.any():
        return 0
    labels = tree.up_step[child] if up else tree.down_step[child]
    return int(labels.max()) + segments


def tree_schedule(collective: str, algorithm: str, ranks: int, size_bytes: int, trees,
                  segments: int = 1, rounds: bool = False) -> Schedule:
    """Reduce and/or broadcast over one or more trees, each carrying an equal share of the data.

    Tree ``t`` carries part ``t`` of the message (``split_bytes(size, len(trees))``), cut into
    ``segments`` chunks, on channel ``t``. Reduce-type collectives run the up phase, broadcast-type
    ones the down phase, all-reduce both (down phase steps numbered after the up phase's).

    ``rounds=True`` makes the steps real rounds (MPICH's blocking sends): every step starts with a
    ``sync`` barrier, so a rank sending to several children does so one step after another
    instead of sharing its link between them. Without it (NCCL), transfers run as soon as data
    flow allows.
    """
    segments = positive_int("segments", segments)
    if rounds and (segments > 1 or len(trees) > 1):
        raise ValueError("rounds apply to one tree with whole-message steps")
    up = collective in ("allreduce", "reduce")
    down = collective in ("allreduce", "broadcast")
    parts = split_bytes(size_bytes, len(trees))
    chunk_bytes = np.concatenate([split_bytes(int(part), segments) for part in parts])
    root = trees[0].root if collective in ROOTED else 0
    b = ScheduleBuilder(collective, algorithm, ranks, chunk_bytes, root=root)
    seg = [range(t * segments, (t + 1) * segments) for t in range(len(trees))]
    down_first = max(_span(t, True, segments) for t in trees) if up else 0
    last_step = 0
    for going_up, first, phase in ((True, 0, "reduce"), (False, down_first, "broadcast")):
        if not (up if going_up else down):
            continue
        for t, tree in enumerate(trees):
            for src, dst, chunk, step in _edges(tree, seg[t], up=going_up, first_step=first):
                b.send(src, dst, chunk, reduce=going_up, step=step, phase=phase, channel=t,
                       sync=rounds and step != last_step)
                last_step = step
    b.notes.update(segments=segments, trees=len(trees),
                   height=max(tree.height() for tree in trees))
    return b.build()


# -- registered builders ---------------------------------------------------------------------------
def tree(collective: str, ranks: int, size_bytes: int, segments: int = 1,
         root: int | None = None) -> Schedule:
    """NCCL's binary tree: whole message per hop, or pipelined in ``segments``."""
    r = resolve_root(collective, ranks, root)
    return tree_schedule(collective, "tree", ranks, size_bytes, [btree(ranks).rooted_at(r)],
                         segments)


def binomial_tree(collective: str, ranks: int, size_bytes: int,
                  root: int | None = None) -> Schedule:
    """MPICH binomial-tree reduce and/or broadcast, whole message per step, in rounds."""
    r = resolve_root(collective, ranks, root)
    return tree_schedule(collective, "binomial_tree", ranks, size_bytes,
                         [binomial(ranks).rooted_at(r)], rounds=True)
