"""What the engine's timing methods share: their result type, path routing, kernel caches.

The lowest module of :mod:`simulator.engine` besides the event engine's own: the fast methods
(:mod:`.fast`, :mod:`.tree_pipeline`, :mod:`.compiled`) and the entrance that orders them
(:mod:`.dispatch`) import from here, and it imports none of them.
"""

from __future__ import annotations

import contextlib
import math
import signal
import threading
import weakref
from dataclasses import dataclass

import networkx as nx
import numpy as np

from ..errors import SimulationError, TopologyError
from ..topology.routing import NON_TRANSIT_KINDS, Router


class NotApplicable(SimulationError):
    """The fast path cannot prove that it equals the event engine for this case."""


@dataclass(frozen=True)
class FastResult:
    """Outcome of a fast-path evaluation.

    Attributes
    ----------
    time_s : float
        Simulated time of the collective (``nan`` when not applicable).
    applicable : bool
        Whether the fast path applies (and ``time_s`` equals the event engine's).
    reason : str
        Why it does not apply (empty when it does).
    method : str
        ``"ring-symmetric"``, ``"ring-recurrence"``, ``"aligned-steps"``,
        ``"step-synchronous"`` or ``"tree-pipeline"`` (or the one that was tried last).
    steps : int
        Algorithm steps evaluated.
    solves : int
        Max-min solves performed (flows alone on their links need none).
    links : tuple of (key, capacity_bytes_per_s, bytes_carried)
        Every resource on a path the schedule uses, with the bytes that crossed it.
    bytes_sent : float
        Bytes of all transfers (``schedule.transfer_bytes.sum()``).
    reduce_s : tuple of (node, seconds)
        Total reduction compute charged on each device (what the engine's compute log sums to).
    declined : tuple of str
        From the entrance (:func:`~simulator.engine.dispatch.fast_collective`): every method
        tried or skipped before this one, with why it did not answer.
    """

    time_s: float
    applicable: bool
    reason: str = ""
    method: str = ""
    steps: int = 0
    solves: int = 0
    links: tuple = ()
    bytes_sent: float = 0.0
    reduce_s: tuple = ()
    declined: tuple = ()

    def bottleneck(self, graph: nx.DiGraph) -> tuple[str, float]:
        """Most utilised resource over the run and its utilisation, as the engine's rows."""
        from ..records import describe_resource

        best_name, best_util = "", 0.0
        rows = []
        for key, cap, carried in self.links:
            util = carried / (cap * self.time_s) if self.time_s > 0 else 0.0
            rows.append((-util, describe_resource(graph, key)[0]))
        if rows:
            neg, best_name = min(rows)
            best_util = -neg
        return best_name, float(best_util)


# -- paths ---------------------------------------------------------------------------------------
def declined_as(method: str, analysis, *args) -> FastResult:
    """``analysis(*args)``, a :class:`NotApplicable` it raises turned into a declined result of
    ``method`` (the reason is the exception's message)."""
    try:
        return analysis(*args)
    except NotApplicable as exc:
        return FastResult(math.nan, False, str(exc), method)


def check_placement(schedule, placement) -> None:
    """Refuse a placement with fewer nodes than the schedule has ranks."""
    if len(placement) < schedule.total_ranks:
        raise TopologyError(f"schedule needs {schedule.total_ranks} ranks, "
                            f"placement has {len(placement)}")


class _Paths:
    """Resources (global ids), capacities and latency of every routed (src, dst) node pair."""

    def __init__(self, graph: nx.DiGraph):
        self.graph = graph
        self._router: Router | None = None
        self.index: dict = {}
        self.keys: list = []
        self.capacity: list[float] = []

    def _resource(self, key, capacity: float) -> int:
        idx = self.index.get(key)
        if idx is None:
            idx = self.index[key] = len(self.keys)
            self.keys.append(key)
            self.capacity.append(float(capacity))
        return idx

    def _hub(self, nodes) -> str | None:
        """The common hub of ``nodes`` when each has one out-link and one in-link, to it (and
        the hub forwards between them: not a PCIe switch whose GPUs lack peer-to-peer)."""
        if not (self.graph.graph.get("params") or {}).get("p2p", True):
            return None
        succ, pred = self.graph.succ, self.graph.pred
        hub = None
        for n in nodes:
            out, inn = succ[n], pred[n]
            if len(out) != 1 or len(inn) != 1:
                return None
            (h,) = out
            (h2,) = inn
            if h != h2 or (hub is not None and h != hub):
                return None
            hub = h
        if hub is None or self.graph.nodes[hub].get("kind") in NON_TRANSIT_KINDS:
            return None
        return hub

    def route(self, src_nodes: list, dst_nodes: list):
        """CSR ``(ptr, res)`` of resource ids and ``latency`` for each (src, dst) pair."""
        graph = self.graph
        pairs = len(src_nodes)
        lengths = np.zeros(pairs, dtype=np.int64)
        latency = np.zeros(pairs)
        res: list[int] = []
        hub = self._hub(sorted(set(src_nodes) | set(dst_nodes)))
        if hub is not None:
            cap = graph.nodes[hub].get("throughput_bytes_per_s")
            hub_res = [] if cap is None else [self._resource(("node", hub), cap)]
            up, down = {}, {}
            for k, (s, d) in enumerate(zip(src_nodes, dst_nodes)):
                if s == d:
                    continue
                u = up.get(s)
                if u is None:
                    e = graph.edges[s, hub]
                    u = up[s] = (self._resource((s, hub), e["bandwidth_bytes_per_s"]),
                                 e["latency_s"])
                v = down.get(d)
                if v is None:
                    e = graph.edges[hub, d]
                    v = down[d] = (self._resource((hub, d), e["bandwidth_bytes_per_s"]),
                                   e["latency_s"])
                res.append(u[0])
                res.extend(hub_res)
                res.append(v[0])
                lengths[k] = 2 + len(hub_res)
                latency[k] = float(sum((u[1], v[1])))   # as Router: 0 + l1 + l2
        else:
            router = self._router = self._router or Router(graph)
            for k, (s, d) in enumerate(zip(src_nodes, dst_nodes)):
                path = router.path(s, d)
                ids = [self._resource(key, router.capacity(key)) for key in path.resources]
                res.extend(ids)
                lengths[k] = len(ids)
                latency[k] = path.latency_s
        ptr = np.zeros(pairs + 1, dtype=np.int64)
        np.cumsum(lengths, out=ptr[1:])
        return ptr, np.asarray(res, dtype=np.int64), latency

    def caps(self) -> np.ndarray:
        return np.asarray(self.capacity, dtype=np.float64)

    def table(self, res_bytes: np.ndarray) -> tuple:
        return tuple((k, c, float(b)) for k, c, b in zip(self.keys, self.capacity, res_bytes))


def _reduce_totals(nodes, dst_rank: np.ndarray, dur: np.ndarray) -> tuple:
    """``(node, seconds)`` of reduction compute per device, in node order."""
    per_rank = np.bincount(dst_rank, weights=dur, minlength=len(nodes))
    totals: dict = {}
    for node, sec in zip(nodes, per_rank.tolist()):
        if sec > 0:
            totals[node] = totals.get(node, 0.0) + sec
    return tuple(sorted(totals.items()))


# -- array helpers -------------------------------------------------------------------------------



@contextlib.contextmanager
def interrupts_deferred():
    """Hold Ctrl-C and SIGTERM while a compiled kernel runs and hands back its results.

    Python runs signal handlers only between bytecodes, so a kernel is never interrupted
    mid-way anyway; but a signal that arrives during it is handled while numba boxes the
    kernel's result tuple, and a ``KeyboardInterrupt`` raised there leaves a broken tuple
    (a segmentation fault when it is unpacked: seen with Ctrl-C during ``clustersim run``).
    Here a signal that arrives is only noted, and delivered again, to the handler it was
    meant for, once the results are Python objects: each signal that arrived, once, in the
    order they came. A signal that is ignored (``SIG_IGN``, e.g. Ctrl-C in a job started in
    the background by a shell) or whose handler was not set from Python is left as it is, so
    it stays ignored. Outside the main thread (where handlers cannot be set) nothing changes.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []

    def note(signum, _frame):
        if signum not in caught:
            caught.append(signum)

    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        handler = signal.getsignal(sig)
        if handler is None or handler is signal.SIG_IGN:
            continue                       # ignored, or set outside Python: leave it so
        previous[sig] = signal.signal(sig, note)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        first_error = None
        for sig in caught:                 # every one delivered, even if a handler raises
            try:
                signal.raise_signal(sig)
            except BaseException as exc:   # e.g. KeyboardInterrupt: raised after the rest
                first_error = first_error or exc
        if first_error is not None:
            raise first_error


def numba_available() -> bool:
    """Whether the compiled kernel can be built (numba installed and importable)."""
    try:
        import numba  # noqa: F401
    except ImportError:
        return False
    return True


#: The compiled kernels whose cached machine code includes :mod:`._flow_kernel`'s helpers.
KERNEL_MODULES = ("_tree_kernel", "_schedule_kernel")
_CACHES_CHECKED = False


def drop_stale_kernel_caches() -> None:
    """Delete the kernels' numba cache files that are older than ``_flow_kernel.py``.

    numba's disk cache of a function is invalidated by changes to the function's own file only,
    while the kernels compile :mod:`._flow_kernel`'s helpers into their machine code: after an
    edit of ``_flow_kernel.py`` they would go on running (and being timed with) the old helpers.
    Checked once per process, before the first kernel call; a fresh install or clone has no
    cache to check. (Caches that numba keeps elsewhere, e.g. under ``NUMBA_CACHE_DIR``, are not
    looked at.)"""
    global _CACHES_CHECKED
    if not _CACHES_CHECKED:
        _CACHES_CHECKED = True
        from pathlib import Path

        stale_kernel_caches(Path(__file__).parent, delete=True)


def stale_kernel_caches(folder, delete: bool = False) -> list:
    """The cache files of :data:`KERNEL_MODULES` in ``folder/__pycache__`` older than
    ``folder/_flow_kernel.py`` (deleted if ``delete``)."""
    stale = []
    try:
        shared = (folder / "_flow_kernel.py").stat().st_mtime
        for module in KERNEL_MODULES:
            for cached in sorted((folder / "__pycache__").glob(f"{module}.*.nb[ic]")):
                if cached.stat().st_mtime < shared:
                    stale.append(cached)
                    if delete:
                        cached.unlink(missing_ok=True)
    except OSError:     # a read-only install, or another process removing them as well
        pass
    return stale


#: Routes of recent placements per graph: a training iteration times one collective per
#: bucket size on the same ranks, and routing 8,192 rank pairs costs ~0.2 s each time.
_ROUTES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_ROUTES_PER_GRAPH = 8


def _routes(graph: nx.DiGraph, nodes: list, pairs: np.ndarray):
    """``(paths, res_ptr, res_idx, latency)`` of the rank pairs ``pairs`` (codes ``src * p +
    dst``) on ``nodes``; remembered per graph object (graphs are not changed once built), the
    arrays handed out as copies."""
    p = len(nodes)
    key = (tuple(nodes), pairs.tobytes())
    cache = _ROUTES.setdefault(graph, {})
    if key not in cache:
        paths = _Paths(graph)
        routed = paths.route([nodes[k // p] for k in pairs.tolist()],
                             [nodes[k % p] for k in pairs.tolist()])
        if len(cache) >= _ROUTES_PER_GRAPH:
            cache.pop(next(iter(cache)))
        cache[key] = (paths, *routed)
    paths, res_ptr, res_idx, latency = cache[key]
    return paths, res_ptr.copy(), res_idx.copy(), latency.copy()


def placed(graph: nx.DiGraph, nodes: list, src: np.ndarray, dst: np.ndarray,
           reduce_compute: bool):
    """What the compiled kernels need of a placement: routes (one per distinct (src, dst) rank
    pair; ``path_of`` maps each connection to its pair's) and every rank's device and
    reduction rate (``inf``: free).

    Returns ``(paths, path_of, res_ptr, res_idx, latency, devices, rank_device, rank_rate)``
    with ``paths`` the :class:`_Paths` (resource keys and capacities) and ``devices`` the
    device names in index order."""
    p = len(nodes)
    pairs, path_of = np.unique(np.asarray(src, dtype=np.int64) * p + dst,
                               return_inverse=True)
    paths, res_ptr, res_idx, latency = _routes(graph, nodes, pairs)
    index: dict = {}
    rank_device = np.asarray([index.setdefault(v, len(index)) for v in nodes], dtype=np.int64)
    rank_rate = np.full(p, np.inf)
    if reduce_compute:
        rank_rate = np.asarray([float(graph.nodes[v].get("reduce_bytes_per_s", math.inf))
                                for v in nodes])
    return (paths, path_of.astype(np.int64), res_ptr, res_idx, latency, list(index),
            rank_device, rank_rate)




def with_connection_caps(path_of: np.ndarray, res_ptr: np.ndarray, res_idx: np.ndarray,
                         latency: np.ndarray, caps: np.ndarray, conn_caps: np.ndarray):
    """The routes of :func:`placed` with each connection's own cap (``conn_caps``, ``inf``:
    none; see :data:`simulator.schedules.base.LOCAL_FLOW_CAP_NOTE`), as the event engine
    builds them: a capped connection gets a path of its own, its route plus a resource only
    it crosses, of its cap; the others keep their shared paths.

    Returns ``(path_of, res_ptr, res_idx, latency, caps)``: the shared paths keep their order,
    the capped connections' paths follow in connection order (shared paths no connection uses
    any more are dropped), and the private resources follow the links (``len(caps)`` on entry
    is the link count)."""
    own = np.isfinite(conn_caps)
    if not own.any():
        return path_of, res_ptr, res_idx, latency, caps
    n_links = len(caps)
    # a key per connection's path: its shared path, or (for a capped one) itself
    key = np.where(own, len(res_ptr) - 1 + np.arange(len(path_of)), path_of)
    _, first, new_of = np.unique(key, return_index=True, return_inverse=True)
    route_of = path_of[first]                    # each new path's original route
    private = np.full(len(first), -1, dtype=np.int64)
    capped_paths = np.flatnonzero(own[first])
    private[capped_paths] = n_links + np.arange(len(capped_paths))
    lengths = np.diff(res_ptr)[route_of] + (private >= 0)
    new_ptr = np.zeros(len(first) + 1, dtype=np.int64)
    np.cumsum(lengths, out=new_ptr[1:])
    new_idx = np.empty(new_ptr[-1], dtype=res_idx.dtype)
    for q, route in enumerate(route_of):
        links = res_idx[res_ptr[route]:res_ptr[route + 1]]
        new_idx[new_ptr[q]:new_ptr[q] + len(links)] = links
        if private[q] >= 0:
            new_idx[new_ptr[q + 1] - 1] = private[q]
    caps = np.concatenate([caps, np.asarray(conn_caps, dtype=float)[first[capped_paths]]])
    return new_of.astype(np.int64), new_ptr, new_idx, latency[route_of], caps
