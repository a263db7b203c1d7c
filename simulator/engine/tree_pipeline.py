"""Compiled event simulation of pipelined tree collectives (tree, double binary tree).

Why a separate path: a pipelined tree is the one family the step-level fast paths of
:mod:`.fast` cannot shortcut. Its FIFO segments of successive steps share links at the same
time, so there are no waves to solve once and repeat, and the ranks of NCCL's two trees have no
symmetry to exploit (colour refinement of the two trees separates every rank). The event engine
handles it exactly but pays ~3-8 us of Python per transfer, and a double binary tree of
256 MiB in 512 KiB segments has ``4·(p-1)·256`` transfers: 16.8 million at 16,384 ranks.

What this module does: it runs *the event engine's own algorithm* — the same events in the same
order, the same coalesced max-min solves, the same drained-flow rate takeover, the same
delivery batching and FIFO reduction queues — compiled with numba, on a state shaped by the tree
instead of a transfer list:

* one FIFO connection per tree edge and direction (child -> parent for the reduce phase,
  parent -> child for the broadcast), each carrying its segments in order, so a connection is
  never more than one active flow and flows are indexed by connection;
* data-flow readiness from counters instead of a dependency graph: a rank forwards segment
  ``s`` up once every child has delivered (and it has reduced) segment ``s``; a rank sends
  segment ``s`` down once its parent's copy arrived, or, at the root, once every child's
  reduction of ``s`` landed. These are exactly the dependencies :mod:`simulator.schedules.deps`
  derives from the schedule's reads and writes (the others it finds are implied by them);
* memory ``O(connections + resources)``, never ``O(transfers)``: the schedule is not built.

Exactness is by construction, and checked: ``tests/test_tree_pipeline.py`` compares the time
and per-link bytes with the event engine for single trees and double binary trees, all
collectives the trees implement, several rank counts, segment counts, topologies (star,
NVSwitch and PCIe machines with NICs) and with reduction compute charged, to 1e-9.

Simulation events and their order follow the SimPy engine: events at one instant are handled in
creation order (SimPy's event id), deliveries that fall on the same instant form one batch in
drain order, and the coalesced solve runs after every ordinary event of its instant. Floating-
point expressions for event times are the engine's (``now + (t - now)`` where SimPy computes a
timeout), so instants that coincide there coincide here.

numba is a base dependency; where it cannot be imported, :func:`tree_pipeline_time` reports
that it does not apply and ``--engine auto`` falls back to the event engine.
"""

from __future__ import annotations

import math

import networkx as nx
import numpy as np

from ..schedules.base import split_bytes
from .common import (FastResult, drop_stale_kernel_caches, interrupts_deferred, numba_available,
                     placed)

#: Algorithms this module times (their schedules come from ``schedules.tree.tree_schedule``).
TREE_ALGORITHMS = ("tree", "double_binary_tree")
#: Collectives the trees implement: reduce and broadcast phases.
UP_COLLECTIVES = ("allreduce", "reduce")
DOWN_COLLECTIVES = ("allreduce", "broadcast")

_KERNEL = None


def tree_layout(collective: str, algorithm: str, ranks: int, size_bytes: int, options: dict):
    """The trees, segment count and per-tree segment sizes the schedule builder would use.

    Mirrors :func:`simulator.schedules.tree.tree` and
    :func:`simulator.schedules.double_tree.double_binary_tree` (same functions, same defaults).
    Returns ``(trees, segments, seg_bytes)`` with ``seg_bytes[t, s]`` in bytes.
    """
    from ..schedules.double_tree import DEFAULT_SEGMENT_BYTES, channel_trees, segments_for
    from ..schedules.tree import btree, positive_int, resolve_root

    if algorithm == "double_binary_tree":
        trees = channel_trees(ranks, options.get("channels", 1), options.get("local_ranks"))
        segments = options.get("segments")
        if segments is None:
            segments = segments_for(-(-int(size_bytes) // len(trees)),
                                    options.get("segment_bytes", DEFAULT_SEGMENT_BYTES))
    else:
        root = resolve_root(collective, ranks, options.get("root"))
        trees = [btree(ranks).rooted_at(root)]
        segments = options.get("segments", 1)
    segments = positive_int("segments", segments)
    parts = split_bytes(size_bytes, len(trees))
    seg_bytes = np.stack([split_bytes(int(part), segments) for part in parts]).astype(np.float64)
    return trees, segments, seg_bytes


def _connections(trees, collective: str):
    """FIFO connections in the event engine's numbering (order of first use in the schedule's
    transfer list: reduce phase before broadcast, tree by tree, edges in emission order).

    Returns arrays ``tree, child, kind`` (0 = up: child -> parent, 1 = down: parent -> child).
    """
    rows = []
    for kind, wanted in ((0, UP_COLLECTIVES), (1, DOWN_COLLECTIVES)):
        if collective not in wanted:
            continue
        for t, tree in enumerate(trees):
            child = np.flatnonzero(tree.parent >= 0)
            label = tree.up_step if kind == 0 else tree.down_step
            order = child[np.lexsort((child, label[child]))]
            rows.extend((t, int(r), kind) for r in order)
    arr = np.asarray(rows, dtype=np.int64).reshape(-1, 3)
    return arr[:, 0].copy(), arr[:, 1].copy(), arr[:, 2].copy()


def tree_pipeline_time(graph: nx.DiGraph, placement, collective: str, algorithm: str,
                       size_bytes: int, gpus: int, options: dict | None = None,
                       reduce_compute: bool = True):
    """Time a tree or double-binary-tree collective with the compiled event simulation.

    Returns a :class:`~simulator.engine.common.FastResult` with ``method="tree-pipeline"``; not
    applicable (with the reason) for other algorithms or when numba is missing.
    """

    options = dict(options or {})
    method = "tree-pipeline"
    if algorithm not in TREE_ALGORITHMS or collective not in set(UP_COLLECTIVES) | set(
            DOWN_COLLECTIVES):
        return FastResult(math.nan, False, f"{algorithm} {collective} is not a tree pipeline",
                          method)
    if not numba_available():
        return FastResult(math.nan, False, "numba is not installed (pip install "
                          "'clustersim[fast]')", method)
    p = int(gpus)
    trees, segments, seg_bytes = tree_layout(collective, algorithm, p, size_bytes, options)
    nodes = list(placement)[:p]
    if p < 2:
        return FastResult(0.0, True, "", method)
    conn_tree, conn_child, conn_kind = _connections(trees, collective)
    # The kernel numbers connections rank by rank (a rank's connections, and those of ranks
    # near it in the trees, sit close in memory); ``start_order`` keeps the engine's order for
    # the first try_start round, which is what decides flow ids.
    local = np.lexsort((conn_kind, conn_tree, conn_child))
    conn_tree, conn_child, conn_kind = conn_tree[local], conn_child[local], conn_kind[local]
    start_order = np.empty(len(local), dtype=np.int64)
    start_order[local] = np.arange(len(local))
    parent = np.stack([t.parent for t in trees]).astype(np.int64)
    conn_src = np.where(conn_kind == 0, conn_child, parent[conn_tree, conn_child])
    conn_dst = np.where(conn_kind == 0, parent[conn_tree, conn_child], conn_child)

    paths, path_of, res_ptr, res_idx, latency, devices, rank_device, rank_rate = placed(
        graph, nodes, conn_src, conn_dst, reduce_compute)
    caps = paths.caps()

    # per tree and rank: its up and down connection (-1: none), and its children (CSR)
    n_trees = len(trees)
    up_conn = np.full((n_trees, p), -1, dtype=np.int64)
    down_conn = np.full((n_trees, p), -1, dtype=np.int64)
    c_ids = np.arange(len(conn_tree), dtype=np.int64)
    up_conn[conn_tree[conn_kind == 0], conn_child[conn_kind == 0]] = c_ids[conn_kind == 0]
    down_conn[conn_tree[conn_kind == 1], conn_child[conn_kind == 1]] = c_ids[conn_kind == 1]
    child_ptr = np.zeros((n_trees, p + 1), dtype=np.int64)
    child_idx = np.zeros((n_trees, max(p - 1, 1)), dtype=np.int64)
    roots = np.zeros(n_trees, dtype=np.int64)
    for t, tree in enumerate(trees):
        kids = np.flatnonzero(tree.parent >= 0)
        order = kids[np.argsort(tree.parent[kids], kind="stable")]
        counts = np.bincount(tree.parent[kids], minlength=p)
        np.cumsum(counts, out=child_ptr[t, 1:])
        child_idx[t, :len(order)] = order
        roots[t] = tree.root

    kernel = _kernel()
    with interrupts_deferred():
        time_s, carried, reduce_dev_s, solves = kernel(
            conn_tree, conn_child, conn_kind, path_of, res_ptr, res_idx, latency, caps,
            seg_bytes, parent, roots, child_ptr, child_idx, up_conn, down_conn, rank_device,
            rank_rate, len(devices), start_order)
    if not math.isfinite(time_s):
        return FastResult(math.nan, False, "the compiled simulation made no progress (a "
                          "dependency never arrived)", method)
    links = paths.table(carried)
    reduce_s = tuple(sorted((devices[d], float(s)) for d, s in enumerate(reduce_dev_s)
                            if s > 0))
    phases = (collective in UP_COLLECTIVES) + (collective in DOWN_COLLECTIVES)
    bytes_sent = float(seg_bytes.sum()) * (p - 1) * phases
    return FastResult(float(time_s), True, "", method, steps=segments, solves=int(solves),
                      links=links, bytes_sent=bytes_sent, reduce_s=reduce_s)


def _kernel():
    """The compiled simulation (built on first use; numba caches it on disk)."""
    global _KERNEL
    if _KERNEL is None:
        drop_stale_kernel_caches()
        from ._tree_kernel import simulate_tree_pipeline
        _KERNEL = simulate_tree_pipeline
    return _KERNEL
