"""Collectives of a parallel group: their alone-time from the collective library, and the flows
that carry them in a step.

Costing (:class:`GroupCoster`). A group's collective is timed ALONE by
:func:`simulator.collective.run_collective` through the collective library (NCCL's protocols,
channels, latencies and tuner; the exact fast engines), cached per (collective, group shape,
size). ``run_collective`` places ranks on the first ``n`` endpoints and the library's plan
reads the machine facts of those endpoints, so a group elsewhere is costed on its own view:

* a group that IS the first ``n`` endpoints (or any group on a topology that is not a
  ``gpu_cluster``: ``star`` and ``fat_tree`` hosts are interchangeable) runs on the topology
  itself: its time equals ``clustersim collective`` exactly;
* otherwise (a data-parallel group with one GPU per machine over 16 machines, a pipeline
  stage's tensor group in machine 7) on the ``gpu_cluster`` builder's topology narrowed to the
  group's shape: ``nodes`` = the machines it spans, ``gpus_per_node`` = its ranks per machine,
  and the NICs those GPUs own (``nics_per_node x gpus_per_node' / gpus_per_node``, at least
  one: on a rail-wise machine every GPU keeps its own NIC). Groups must hold the same number of
  ranks on every machine they span (Megatron's layouts do).

Flows (:class:`Bundle`). In the step a collective runs as a bundle of flows on the group's
real links, so that concurrent groups crossing shared NICs, PCIe switches and fabric links slow
each other as max-min sharing says:

* all-reduce, reduce-scatter, all-gather: one flow per ring edge ``rank i -> rank i+1`` (the
  ring the library runs; trees and NVLS move the same bytes per rank to first order), each
  carrying the per-rank bytes of the algorithm, ``2(n-1)/n S`` for all-reduce, ``(n-1)/n S``
  for reduce-scatter and all-gather;
* all-to-all: one flow per ordered pair, ``S / n`` each (``(n-1)/n S`` per rank);
* every flow has a private rate cap (a resource of its own) so that the bundle ALONE takes
  exactly the library's alone-time ``T``: cap = ``b / T`` for ``b`` bytes, after scaling ``b``
  down where the bundle alone would exceed a link (library algorithms that beat the ring's
  per-link bytes, NVLS or trees): every link then carries at most its capacity at the capped
  rates, so alone no link binds and each flow drains at exactly ``T``. The latency part of
  ``T`` thus becomes a lower rate, not a delay: a latency-bound collective barely loads links
  (as a real one does).

What is approximated: the bundle ends when its slowest flow drains; a real ring would slow all
its edges to the slowest one and give the others' bandwidth back to other traffic (second
order). Sizes whose alone-time is zero (one rank) cost nothing.

Folded replicas (:class:`ReplicaFold`). The data-parallel replicas of a layout do the same work
at the same times; when shifting every rank by ``unit`` data-parallel indices maps every path the
step uses onto a path of the same capacities and latency (a permutation ``sigma`` of the links
under which no link stays put: machines on a star fabric, rail switches), the max-min fair
rates are the same in every replica, and the step is exactly that of the first ``unit``
replicas with each link standing for its ``dp / unit`` copies (its orbit under ``sigma``). Why
exactly: the load a flow orbit puts on a link is one flow's rate per crossing of the link's
orbit, in the full network as in the folded one, so the unique max-min allocation of the folded
network, copied to every replica, is the full network's. A data-parallel bundle then keeps the
flows leaving the simulated ranks (one per orbit of ring edges); the edge from the last
simulated rank to the first rank of the next replica crosses that replica's links, which stand
for their copies in the first. Whatever is not checked is not folded: a path whose image has
another length, capacity or latency, a link shared by two replicas (a fabric core link, a NIC
two replicas use), a path crossing two copies of one link.
"""

from __future__ import annotations

import math

import networkx as nx

from ...collective import run_collective
from ...errors import ConfigError
from ...library import resolve_library
from ...topology import build, endpoints, owned_nics

__all__ = ["GroupCoster", "Bundle", "FlowLauncher", "ReplicaFold", "FoldMiss",
           "per_rank_bytes", "COLLECTIVE_NAME"]

#: work.py's collective names -> simulator.schedules' names.
COLLECTIVE_NAME = {"allreduce": "allreduce", "reducescatter": "reduce_scatter",
                   "reduce_scatter": "reduce_scatter", "allgather": "allgather",
                   "alltoall": "alltoall"}


def per_rank_bytes(collective: str, n: int, size_bytes: float) -> float:
    """Bytes each rank sends in a bandwidth-optimal algorithm (ring / pairwise)."""
    if n <= 1:
        return 0.0
    if collective == "allreduce":
        return 2.0 * (n - 1) / n * size_bytes
    return (n - 1) / n * size_bytes


class GroupCoster:
    """Alone-times of group collectives on one topology with one library (cached)."""

    def __init__(self, graph: nx.DiGraph, library="default"):
        self.graph = graph
        self.library = library
        self.lib = resolve_library(library, graph)
        self.eps = endpoints(graph)
        self._first = {e: i for i, e in enumerate(self.eps)}
        self._views: dict = {}
        self._cache: dict = {}
        self.calls = 0

    def algorithm(self, collective: str) -> str:
        if self.lib.name == "ideal":
            return "direct" if collective == "alltoall" else "ring"
        return "auto"

    def shape(self, nodes) -> tuple:
        """``("first", n)`` when ``nodes`` are the first n endpoints in order, else
        ``(machines, ranks per machine)``."""
        n = len(nodes)
        if all(self._first.get(e) == i for i, e in enumerate(nodes)):
            return ("first", n)
        if self.graph.graph.get("builder") != "gpu_cluster":
            return ("first", n)
        per: dict = {}
        for e in nodes:
            m = self.graph.nodes[e].get("node_index", 0)
            per[m] = per.get(m, 0) + 1
        counts = set(per.values())
        if len(counts) != 1:
            raise ConfigError(f"a group spans machines unevenly ({sorted(per.values())} ranks "
                              f"per machine): change the layout or the rank order")
        return (len(per), counts.pop())

    def view(self, shape: tuple) -> tuple[nx.DiGraph, int]:
        """The topology a group of ``shape`` is costed on, and its rank count."""
        if shape[0] == "first":
            return self.graph, shape[1]
        found = self._views.get(shape)
        if found is None:
            machines, per = shape
            params = dict(self.graph.graph.get("params") or {})
            gpn = int(params.get("gpus_per_node", per))
            nics = int(params.get("nics_per_node", 1))
            params.update(nodes=machines, gpus_per_node=per,
                          nics_per_node=owned_nics(nics, per, gpn))
            if params.get("nic_attach") is not None and \
                    len(params["nic_attach"]) != params["nics_per_node"]:
                params["nic_attach"] = None
            params.pop("nvlink_pairs", None) if params.get("intra") != "nvlink_mesh" else None
            if params.get("intra") == "nvlink_mesh":
                params["nvlink_pairs"] = [p for p in self.graph.graph["params"]["nvlink_pairs"]
                                          if p[0] < per and p[1] < per]
            params["ps_hosts"] = 0
            try:
                g = build("gpu_cluster", params)
            except ConfigError as exc:
                raise ConfigError(f"cannot build the view of a {machines}-machine x {per} "
                                  f"group: {exc}") from None
            for key in ("name", "library_settings"):
                if key in self.graph.graph:
                    g.graph[key] = self.graph.graph[key]
            found = self._views[shape] = (g, machines * per)
        return found

    def known(self) -> dict:
        """The alone-times computed so far, ``{(collective, shape, size): seconds}`` (a copy;
        :meth:`learn` gives them to another coster of the same topology and library)."""
        return dict(self._cache)

    def learn(self, times: dict) -> None:
        """Take alone-times another coster of the same topology and library computed (they
        are deterministic: the same numbers this coster would compute)."""
        for key, t in times.items():
            self._cache.setdefault(key, t)

    def time_s(self, collective: str, nodes, size_bytes: int) -> float:
        """Alone-time of ``collective`` of ``size_bytes`` over the ranks on ``nodes``."""
        n = len(nodes)
        coll = COLLECTIVE_NAME[collective]
        if n <= 1 or size_bytes <= 0:
            return 0.0
        shape = self.shape(nodes)
        key = (coll, shape, int(size_bytes))
        t = self._cache.get(key)
        if t is None:
            g, gpus = self.view(shape)
            self.calls += 1
            res = run_collective(g, coll, self.algorithm(coll), int(size_bytes), gpus=gpus,
                                 library=self.library, engine="auto")
            t = self._cache[key] = float(res.row["time_s"])
        return t


class Bundle:
    """The flows of one collective of one group, started on an engine's network.

    ``on_done()`` is called when every flow has drained (the alone-time includes latencies)."""

    __slots__ = ("left", "on_done", "start_s", "label", "kind")

    def __init__(self, on_done, label="", kind=""):
        self.left = 0
        self.on_done = on_done
        self.start_s = math.nan
        self.label = label
        self.kind = kind


class FoldMiss(Exception):
    """A folded step routed a pair its :class:`ReplicaFold` did not check (it reruns
    unfolded)."""


def _link_name(key) -> str:
    """The name the link tables give a resource key (``u->v``), to pick an orbit's name."""
    if isinstance(key, tuple) and len(key) == 2 and key[0] != "node":
        return f"{key[0]}->{key[1]}"
    return str(key)


class ReplicaFold:
    """Data-parallel replicas folded onto the first ``unit`` of them (module docstring).

    :meth:`check` verifies, for each pair of ranks the folded step routes, that the pair's
    ``copies = dp / unit`` images (every rank shifted by ``k x unit`` data-parallel indices)
    route over paths of equal length, capacities and latency, and that the links at each
    position form one cycle of ``copies`` distinct links under a single consistent, one-to-one
    map ``sigma`` (image of a link under one shift). Each link then stands for its orbit,
    named by its smallest member (the tables' tie-break by name sees the same link)."""

    def __init__(self, router, placement, unit: int):
        self.router, self.pl, self.unit = router, placement, unit
        self.copies = placement.layout.dp // unit
        self._sigma: dict = {}
        self._inverse: dict = {}
        self._canon: dict = {}
        self._paths: dict = {}      # (src node, dst node) -> (canonical link keys, latency_s)

    def check(self, pairs) -> str:
        """``""`` when every (rank, rank) pair of ``pairs`` folds exactly, else why not."""
        for a, b in pairs:
            why = self._check(a, b)
            if why:
                return why
        return ""

    def _check(self, a: int, b: int) -> str:
        node, pl = self.pl.node, self.pl
        key = (node[a], node[b])
        if key in self._paths:
            return ""
        paths = [self.router.path(node[pl.shifted(a, k * self.unit)],
                                  node[pl.shifted(b, k * self.unit)])
                 for k in range(self.copies)]
        base = paths[0]
        n = len(base.resources)
        for p in paths[1:]:
            if len(p.resources) != n or not math.isclose(p.latency_s, base.latency_s,
                                                         rel_tol=1e-12, abs_tol=1e-18):
                return (f"the path {key[0]} -> {key[1]} differs from its image in another "
                        f"replica")
        cap = self.router.capacity
        for i in range(n):
            chain = [p.resources[i] for p in paths]
            if len(set(chain)) != self.copies:
                return f"replicas share {_link_name(chain[0])}"
            c0 = cap(chain[0])
            for k, x in enumerate(chain):
                y = chain[(k + 1) % self.copies]
                if cap(x) != c0 or self._sigma.setdefault(x, y) != y or \
                        self._inverse.setdefault(y, x) != x:
                    return f"the links near {_link_name(x)} are not the same in every replica"
        canon = tuple(self.canonical(r) for r in base.resources)
        if len(set(canon)) != n:
            return f"the path {key[0]} -> {key[1]} crosses two copies of one link"
        self._paths[key] = (canon, base.latency_s)
        return ""

    def canonical(self, key):
        """The link standing for ``key``'s orbit (its smallest member by name)."""
        found = self._canon.get(key)
        if found is None:
            orbit, x = [key], self._sigma[key]
            while x != key:
                orbit.append(x)
                x = self._sigma[x]
            found = min(orbit, key=_link_name)
            for x in orbit:
                self._canon[x] = found
        return found

    def path(self, src: str, dst: str) -> tuple:
        """``(canonical link keys, latency_s)`` of a checked pair of endpoints."""
        found = self._paths.get((src, dst))
        if found is None:
            raise FoldMiss(f"the pair {src} -> {dst} was not checked")
        return found


class FlowLauncher:
    """Starts bundles of capped flows on an :class:`~simulator.engine.runner.Engine`.

    ``fold`` (a :class:`ReplicaFold`, set by the step when its replicas fold): every path's
    links are replaced by the links standing for their orbits."""

    def __init__(self, engine):
        self.engine = engine
        self.net = engine.network
        self.router = engine.router
        self._res: dict = {}        # path resources by (src, dst)
        self._caps = 0
        self.bytes_by_kind: dict[str, float] = {}
        self.flows = 0
        self.fold: ReplicaFold | None = None

    def resources(self, src: str, dst: str):
        key = (src, dst)
        found = self._res.get(key)
        if found is None:
            if self.fold is not None:
                keys, latency_s = self.fold.path(src, dst)
            else:
                path = self.router.path(src, dst)
                keys, latency_s = path.resources, path.latency_s
            res = tuple(self.net.resource(k, self.router.capacity(k)) for k in keys)
            found = self._res[key] = (res, latency_s)
        return found

    def edges(self, collective: str, nodes, size_bytes: float):
        """``(src, dst, bytes)`` of the bundle's flows."""
        n = len(nodes)
        if n <= 1:
            return []
        if collective == "alltoall":
            b = size_bytes / n
            return [(nodes[i], nodes[j], b) for i in range(n) for j in range(n) if i != j]
        b = per_rank_bytes(collective, n, size_bytes)
        return [(nodes[i], nodes[(i + 1) % n], b) for i in range(n)]

    def plan(self, collective: str, nodes, size_bytes: float, time_s: float, keep=None):
        """The flows ``(resources, bytes, cap)`` whose bundle alone takes exactly ``time_s``.

        Cached by the caller; flows whose links would be oversubscribed by the bundle alone at
        rate ``b / T`` carry proportionally fewer bytes (see the module docstring). ``keep``
        (a set of nodes; folded replicas): only the flows leaving those nodes."""
        edges = self.edges(collective, nodes, size_bytes)
        if keep is not None:
            edges = [e for e in edges if e[0] in keep]
        if not edges or time_s <= 0:
            return []
        load: dict[int, float] = {}
        routed = []
        for s, d, b in edges:
            res, _lat = self.resources(s, d)
            routed.append((res, b))
            for r in res:
                load[r] = load.get(r, 0.0) + b / time_s
        cap = self.net.capacity
        scale = min([1.0] + [cap[r] / l for r, l in load.items() if l > cap[r]])
        out = []
        for res, b in routed:
            b = b * scale
            if b > 0:
                # the flow's own rate cap: private to this (group, collective, size), reused by
                # its later calls (a group's calls of one kind run one after another)
                self._caps += 1
                private = self.net.resource(("cap", self._caps), b / time_s)
                out.append((res + (private,), b))
        return out

    def start(self, flows, bundle: Bundle, kind: str) -> None:
        """Start the planned ``flows`` of ``bundle`` now, each with its private cap."""
        net = self.net
        bundle.start_s = self.engine.env.now
        if not flows:
            self.engine.call_at(bundle.start_s, bundle.on_done)
            return
        bundle.left = len(flows)
        total = 0.0
        for res, b in flows:
            net.start(res, b, self._drained, bundle)
            total += b
        self.flows += len(flows)
        self.bytes_by_kind[kind] = self.bytes_by_kind.get(kind, 0.0) + total

    def p2p(self, src: str, dst: str, size_bytes: float, then, kind: str = "pp") -> None:
        """One point-to-point message on the wire: drained, then the path latency."""
        res, lat = self.resources(src, dst)
        self.bytes_by_kind[kind] = self.bytes_by_kind.get(kind, 0.0) + size_bytes
        self.flows += 1
        env = self.engine.env

        def drained(_flow):
            if lat > 0:
                ev = env.timeout(lat)
                ev.callbacks.append(lambda _e: then())
            else:
                then()

        if size_bytes <= 0 or not res:
            self.engine.call_at(env.now + lat, then)
            return
        self.net.start(res, size_bytes, drained)

    @staticmethod
    def _drained(flow) -> None:
        bundle = flow.tag
        bundle.left -= 1
        if bundle.left == 0:
            bundle.on_done()
