"""Compiled event simulation of pipelined tree collectives (tree, double binary tree).

Why a separate path: a pipelined tree is the one family the step-level fast paths of
:mod:`.fast` cannot shortcut. Its FIFO segments of successive steps share links at the same
time, so there are no waves to solve once and repeat, and the ranks of one tree have no
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
* memory ``O(connections + resources)``, never ``O(transfers)``: the schedule is not built;
* half the work where the two trees are mirror images on a mirror-symmetric fabric (an even
  rank count, no reduction compute charged: a star, a symmetric fat tree): tree 1 then does at
  every instant what tree 0's image does, so tree 0 alone is simulated, on the network whose
  resources are the pairs of mirror-image links (:func:`mirror_quotient`; same time and
  per-link bytes, to the bit in the tests).

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

from ..schedules.base import (LOCAL_FLOW_CAP_NOTE, NETWORK_FLOW_CAP_NOTE, connection_caps,
                              network_flow_cap, split_bytes)
from .common import (FastResult, drop_stale_kernel_caches, interrupts_deferred, numba_available,
                     placed, with_connection_caps)

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
        trees = channel_trees(ranks, options.get("channels", 1), options.get("local_ranks"),
                              options.get("chains"))
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
    parts = []
    for kind, wanted in ((0, UP_COLLECTIVES), (1, DOWN_COLLECTIVES)):
        if collective not in wanted:
            continue
        for t, tree in enumerate(trees):
            child = np.flatnonzero(tree.parent >= 0)
            label = tree.up_step if kind == 0 else tree.down_step
            order = child[np.lexsort((child, label[child]))].astype(np.int64)
            parts.append((np.full(len(order), t, dtype=np.int64), order,
                          np.full(len(order), kind, dtype=np.int64)))
    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty.copy(), empty.copy()
    return tuple(np.concatenate([part[i] for part in parts]) for i in range(3))


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
    parent = np.stack([t.parent for t in trees]).astype(np.int64)
    conn_src = np.where(conn_kind == 0, conn_child, parent[conn_tree, conn_child])
    conn_dst = np.where(conn_kind == 0, parent[conn_tree, conn_child], conn_child)
    paths, path_of, res_ptr, res_idx, latency, devices, rank_device, rank_rate = placed(
        graph, nodes, conn_src, conn_dst, reduce_compute)
    caps = paths.caps()
    n_links = len(caps)
    cap = options.get("local_flow_cap_bytes_per_s")
    network_cap = options.get("network_flow_cap")
    # the schedule's per-connection caps (schedules.base.connection_caps), from the options
    # the schedule would be built with
    notes = {} if cap is None else {LOCAL_FLOW_CAP_NOTE: (cap, int(options.get("local_ranks")
                                                                    or p))}
    if network_cap is not None:
        notes[NETWORK_FLOW_CAP_NOTE] = network_flow_cap(network_cap, len(trees))
    flow_caps = connection_caps(notes, conn_src, conn_dst)
    capped = bool(np.isfinite(flow_caps).any())
    phases = (collective in UP_COLLECTIVES) + (collective in DOWN_COLLECTIVES)
    bytes_sent = float(seg_bytes.sum()) * (p - 1) * phases
    orbit_of = None
    if options.get("mirror", True) and not capped:
        quotient = mirror_quotient(trees, seg_bytes, conn_tree, conn_child, conn_kind, path_of,
                                   res_ptr, res_idx, latency, caps, rank_rate)
        if quotient is not None:
            keep, path_of, res_ptr, res_idx, latency, caps, orbit_of = quotient
            trees, seg_bytes, parent = trees[:1], seg_bytes[:1], parent[:1]
            conn_tree, conn_child, conn_kind = conn_tree[keep], conn_child[keep], conn_kind[keep]
    # The kernel numbers connections rank by rank (a rank's connections, and those of ranks
    # near it in the trees, sit close in memory); ``start_order`` keeps the engine's order for
    # the first try_start round, which is what decides flow ids.
    local = np.lexsort((conn_kind, conn_tree, conn_child))
    conn_tree, conn_child, conn_kind = conn_tree[local], conn_child[local], conn_kind[local]
    path_of = path_of[local]
    start_order = np.empty(len(local), dtype=np.int64)
    start_order[local] = np.arange(len(local))
    n_conn, n_res = len(conn_tree), len(caps)
    if capped:
        path_of, res_ptr, res_idx, latency, caps = with_connection_caps(
            path_of, res_ptr, res_idx, latency, caps, flow_caps[local])
        n_res = len(caps)

    kernel = _kernel()
    preds, succs = _links(trees, p, conn_tree, conn_child, conn_kind, parent)
    k_max = preds.shape[1]
    # a path is represented by its first connection (its id is that connection's): the path's
    # departures of an instant are kept in that connection's record
    rep = np.unique(path_of, return_index=True)[1]
    lengths = np.diff(res_ptr)
    width = int(lengths.max(initial=0))
    # per connection, the record of its transfers (see _tree_kernel: read as floats and as
    # 32-bit integers) ...
    cr = np.zeros((n_conn, max(16, -(-(kernel._PD + 3 * k_max) // 2))))
    cj = cr.view(np.int32)
    cr[:, kernel._FINISH] = np.inf
    cj[:, kernel._B_OF] = -1
    cj[:, kernel._ROW] = conn_tree
    cj[:, kernel._PATH] = rep[path_of]
    # ... with the tree: how many connections it waits for (their completed-segment counts,
    # 0 so far, are copied into its record), and those it unblocks with the slot of its count
    # in theirs
    cj[:, kernel._N_PRED] = (preds >= 0).sum(axis=1)
    cj[:, kernel._N_SUCC] = (succs >= 0).sum(axis=1)
    for j in range(k_max):
        has = succs[:, j] >= 0
        d = succs[has, j]
        cj[has, kernel._PD + k_max + 2 * j] = d
        cj[has, kernel._PD + k_max + 2 * j + 1] = kernel._PD + np.argmax(
            preds[d] == np.flatnonzero(has)[:, None], axis=1)
    lat = np.zeros(n_conn)
    lat[rep] = latency
    # ... and what the max-min solves read: flags, (rate, candidate rate), and (resources,
    # bottleneck, the resources of its path)
    c_res = np.zeros((n_conn, kernel._R0 + max(width, 1)), dtype=np.int32)
    c_res[:, kernel._NRES] = lengths[path_of]
    for j in range(width):
        has = lengths[path_of] > j
        c_res[has, kernel._R0 + j] = res_idx[res_ptr[path_of[has]] + j]
    fl = (np.zeros(n_conn, dtype=np.uint8), np.zeros((n_conn, 2)), c_res)
    # per resource: its record, the connections whose path crosses it (CSR, in connection
    # order: the order the engine adds up their rates in) and its flags
    user_conn = np.repeat(np.arange(n_conn, dtype=np.int64), lengths[path_of])
    user_res = res_idx[_ranges(res_ptr[path_of], lengths[path_of])]
    user_idx = user_conn[np.lexsort((user_conn, user_res))].astype(np.int32)
    user_ptr = np.zeros(n_res + 1, dtype=np.int32)
    np.cumsum(np.bincount(user_res, minlength=n_res), out=user_ptr[1:])
    r_val = np.zeros((n_res, kernel.RES_SLOTS))
    r_val[:, kernel._CAP] = caps
    rs = (r_val, r_val.view(np.int32), user_ptr, np.zeros(n_res, dtype=np.uint8))
    conn_rx = np.where(conn_kind == 0, parent[conn_tree, conn_child], -1)

    with interrupts_deferred():
        time_s, reduce_dev_s, solves = kernel.simulate_tree_pipeline(
            fl, rs, cr, cr.view(np.int64), cj, lat, k_max, user_idx, seg_bytes, conn_rx,
            rank_device, rank_rate, len(devices), start_order,
            _scratch(kernel, n_conn, n_res, k_max))
    if not math.isfinite(time_s):
        return FastResult(math.nan, False, "the compiled simulation made no progress (a "
                          "dependency never arrived)", method)
    # bytes per resource: every segment of every connection crossed its path (integers below
    # 2**53: the float sums are exact, as the engine's are, in any order)
    carried = np.bincount(user_res, weights=seg_bytes.sum(axis=1)[conn_tree[user_conn]],
                          minlength=n_res)
    if orbit_of is not None:
        # each link of an orbit carried what the orbit did (its twin's image traffic)
        carried = np.where(orbit_of >= 0, carried[np.maximum(orbit_of, 0)], 0.0)
    links = paths.table(carried[:n_links])
    reduce_s = tuple(sorted((devices[d], float(s)) for d, s in enumerate(reduce_dev_s)
                            if s > 0))
    return FastResult(float(time_s), True, "", method, steps=segments, solves=int(solves),
                      links=links, bytes_sent=bytes_sent, reduce_s=reduce_s)


def _kernel():
    """The compiled simulation's module (built on first use; numba caches it on disk)."""
    global _KERNEL
    if _KERNEL is None:
        drop_stale_kernel_caches()
        from . import _tree_kernel
        _KERNEL = _tree_kernel
    return _KERNEL


def _scratch(kernel, n_conn: int, n_res: int, k_max: int):
    """The kernel's working arrays, allocated here rather than in the kernel: numpy asks the
    operating system for huge pages for large arrays (``madvise``), which the kernel's own
    allocator does not, and with 100,000 ranks the kernel's scattered accesses then miss the
    TLB far less often (its run time measured ~8 % shorter at 65,536 ranks)."""
    nb = max(n_conn, 1)
    size = 16
    while size < 2 * nb:
        size *= 2
    # completion queue: buckets (records), their heap, free ids, the hash table of their times
    # and the chunks of their member lists (a solve inserts each flow at most twice, each
    # insertion taking at most one chunk: the kernel keeps room for that before every solve)
    bf = np.zeros((nb, kernel.BUCKET_SLOTS))
    bi = bf.view(np.int64)
    bi[:, kernel._BHEAD] = -1
    bi[:, kernel._BTAIL] = -1
    bi[:, kernel._BFILL] = kernel.CHUNK
    n_chunks = 2 * n_conn + 2 + n_conn // 4 + 64
    fbits = np.zeros(1)
    qs = (np.zeros(nb), np.zeros(nb, dtype=np.int64), np.zeros(nb, dtype=np.int64),
          np.arange(nb - 1, -1, -1, dtype=np.int64), np.full(size, -1, dtype=np.int64),
          np.array([0, nb, -1, size - 1, n_chunks], dtype=np.int64), fbits,
          fbits.view(np.int64), np.empty(nb, dtype=np.int64), np.empty(nb, dtype=np.int64),
          np.empty(n_chunks * kernel.CHUNK, dtype=np.int32),
          np.empty(n_chunks * kernel.CHUNK, dtype=np.int32), np.empty(n_chunks, dtype=np.int32),
          np.arange(n_chunks - 1, -1, -1, dtype=np.int32))
    # the instant's lists and scratch: drained flows, departed paths, arrivals, dirty
    # resources, a component's resources and flows, a local solve's lists
    done = np.empty(n_conn, dtype=np.int64)
    inst = (np.empty(n_conn, dtype=np.int64), np.empty(n_conn, dtype=np.int64),
            np.empty(n_res, dtype=np.int64), np.empty(n_res, dtype=np.int64),
            np.empty(n_conn, dtype=np.int64), np.empty((5, max(n_conn, n_res)), dtype=np.int64))
    # fill's heap (keys, resources, the place of each resource); the try_start worklist (one
    # event adds at most a connection per drained flow, or those a completion unblocks) and
    # the transfers of no bytes of one round
    heap = (np.zeros(n_res), np.zeros(n_res, dtype=np.int32), np.full(n_res, -1, dtype=np.int32))
    pending = np.empty(n_conn + k_max + 2, dtype=np.int64)
    return bf, bi, qs, done, inst, heap, pending, np.empty_like(pending)


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The indices ``starts[i] .. starts[i] + lengths[i] - 1`` of every ``i``, concatenated."""
    total = int(lengths.sum())
    ends = np.cumsum(lengths)
    return np.arange(total, dtype=np.int64) - np.repeat(ends - lengths - starts, lengths)


def _links(trees, p: int, conn_tree, conn_child, conn_kind, parent):
    """Per connection, the connections whose completed segments it waits for (``preds``) and
    those a completion of its own may unblock (``succs``, in the order the engine tries them):
    two arrays of ``k_max`` columns (the largest fan-out), -1 after the last.

    Up connection ``r -> parent``: it forwards segment ``s`` once every child of ``r``
    delivered it; a completion unblocks the parent's up connection, or at the root the down
    connections to the root's children. Down connection ``parent -> r``: it waits for the
    parent's copy (at the root: for every child's reduction, when there is a reduce phase); a
    completion unblocks the down connections to ``r``'s children."""
    n_trees = len(trees)
    n_conn = len(conn_tree)
    ids = np.arange(n_conn, dtype=np.int64)
    up = np.full((n_trees, p), -1, dtype=np.int64)
    down = np.full((n_trees, p), -1, dtype=np.int64)
    up[conn_tree[conn_kind == 0], conn_child[conn_kind == 0]] = ids[conn_kind == 0]
    down[conn_tree[conn_kind == 1], conn_child[conn_kind == 1]] = ids[conn_kind == 1]
    fanout = max(1, max(int(np.bincount(t.parent[t.parent >= 0], minlength=p).max())
                        for t in trees))
    kids = np.full((n_trees, p, fanout), -1, dtype=np.int64)   # children in rank order
    roots = np.zeros(n_trees, dtype=np.int64)
    for t, tree in enumerate(trees):
        child = np.flatnonzero(tree.parent >= 0)              # ascending rank
        par = tree.parent[child]
        by_par = np.argsort(par, kind="stable")
        child, par = child[by_par], par[by_par]
        first = np.searchsorted(par, par)                     # first child of each parent
        kids[t, par, np.arange(len(child)) - first] = child
        roots[t] = tree.root

    def conns(table, t, ranks):
        """``table[t, kids[t, ranks]]`` per connection, -1 where there is no child."""
        k = kids[t, ranks]                                    # (n, fanout)
        out = np.where(k >= 0, table[t[:, None], np.maximum(k, 0)], -1)
        return out

    t, r = conn_tree, conn_child
    par = parent[t, r]
    at_root = par == roots[t]
    has_up = bool((conn_kind == 0).any())
    preds = np.full((n_conn, fanout), -1, dtype=np.int64)
    succs = np.full((n_conn, fanout), -1, dtype=np.int64)
    kind0 = conn_kind == 0
    preds[kind0] = conns(up, t[kind0], r[kind0])
    m = kind0 & ~at_root
    succs[m, 0] = up[t[m], par[m]]
    m = kind0 & at_root
    succs[m] = conns(down, t[m], par[m])
    m = ~kind0 & ~at_root
    preds[m, 0] = down[t[m], par[m]]
    if has_up:
        m = ~kind0 & at_root
        preds[m] = conns(up, t[m], par[m])
    m = ~kind0
    succs[m] = conns(down, t[m], r[m])
    return preds, succs


def mirror_quotient(trees, seg_bytes, conn_tree, conn_child, conn_kind, path_of, res_ptr,
                    res_idx, latency, caps, rank_rate):
    """The half of a double binary tree that determines the other, where the fabric allows it.

    With an even rank count NCCL's second tree is the mirror ``r -> p-1-r`` of the first
    (:mod:`simulator.schedules.double_tree`). When the fabric is mirror-symmetric too (a
    permutation ``sigma`` of its resources, with equal capacities, maps every path of tree 0
    onto the path of its image connection in tree 1 and back, with equal latencies), the whole
    simulation is: the flows of tree 1 are the images of those of tree 0, with the same rates
    at the same instants (max-min rates are unique, and the flow set is symmetric at every
    instant). Link ``x`` then carries tree 0's flows through ``x`` and the images of tree 0's
    flows through ``sigma(x)``; so tree 0 alone, on the quotient network whose resources are
    the orbits ``{x, sigma(x)}`` (each with one link's capacity), has the same rates, times and
    per-link bytes, in half the connections.

    Applies only where that argument holds exactly: two trees, equal segment sizes, the
    mirror relation, a consistent ``sigma`` without fixed points, no tree-0 path crossing both
    links of one orbit, and no reduction compute charged (FIFO reduction queues break ties by
    creation order, which the mirror does not preserve). Returns ``None`` otherwise, or
    ``(keep, path_of, res_ptr, res_idx, latency, caps, orbit_of)``: the tree-0 connections to
    keep (in their order), the compacted paths over orbit ids, the orbits' capacities, and each
    original resource's orbit (-1: unused).
    """
    p = len(trees[0].parent) if trees else 0
    if (len(trees) != 2 or p < 2 or p % 2 or not np.isinf(rank_rate).all()
            or not np.array_equal(seg_bytes[0], seg_bytes[1])):
        return None
    a, b = trees[0].parent, trees[1].parent
    ranks = np.arange(p)
    if not np.array_equal(b[p - 1 - ranks], np.where(a >= 0, p - 1 - a, -1)):
        return None
    key = (conn_tree * p + conn_child) * 2 + conn_kind
    order = np.argsort(key, kind="stable")
    keep = np.flatnonzero(conn_tree == 0)
    if 2 * len(keep) != len(key):
        return None
    image_key = (p + (p - 1 - conn_child[keep])) * 2 + conn_kind[keep]
    pos = np.minimum(np.searchsorted(key[order], image_key), len(key) - 1)
    if not np.array_equal(key[order][pos], image_key):
        return None
    image = order[pos]
    lengths = np.diff(res_ptr)
    pa, pb = path_of[keep], path_of[image]
    if (not np.array_equal(lengths[pa], lengths[pb])
            or not np.array_equal(latency[pa], latency[pb])):
        return None
    ra = res_idx[_ranges(res_ptr[pa], lengths[pa])]
    rb = res_idx[_ranges(res_ptr[pb], lengths[pb])]
    src, dst = np.concatenate([ra, rb]), np.concatenate([rb, ra])
    sigma = np.full(len(caps), -1, dtype=np.int64)
    sigma[src] = dst
    if (not np.array_equal(sigma[src], dst) or (sigma[src] == src).any()
            or not np.array_equal(caps[src], caps[dst])):
        return None
    used = np.flatnonzero(sigma >= 0)
    orbits, orbit = np.unique(np.minimum(used, sigma[used]), return_inverse=True)
    orbit_of = np.full(len(caps), -1, dtype=np.int64)
    orbit_of[used] = orbit
    # no tree-0 path may cross both links of one orbit (it would count once, not twice)
    owner = np.repeat(np.arange(len(keep), dtype=np.int64), lengths[pa])
    pairs = owner * len(orbits) + orbit_of[ra]
    if len(np.unique(pairs)) != len(pairs):
        return None
    kept_pairs, new_path_of = np.unique(pa, return_inverse=True)
    new_lengths = lengths[kept_pairs]
    new_ptr = np.zeros(len(kept_pairs) + 1, dtype=res_ptr.dtype)
    np.cumsum(new_lengths, out=new_ptr[1:])
    new_idx = orbit_of[res_idx[_ranges(res_ptr[kept_pairs], new_lengths)]].astype(res_idx.dtype)
    return (keep, new_path_of.astype(np.int64), new_ptr, new_idx, latency[kept_pairs],
            np.asarray(caps)[orbits], orbit_of)
