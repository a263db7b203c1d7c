"""Routing: one fixed path per (source, destination), chosen deterministically.

Rules, in order:

1. Only forwarding elements carry transit traffic. ``gpu``, ``host`` and ``cpu`` nodes are never
   in the middle of a path (GPUs do not forward for each other; a parameter-server host is not a
   router); they appear only as the path's own source or destination.
2. Fewest hops wins (breadth-first search; see :meth:`Router.shortest_paths`).
3. Among equally short paths, the one whose links are of the better class wins: NVLink/NVSwitch
   (class 0) before PCIe (1) before the network (2), summed over the path. This is NCCL's own
   preference (its path types ``PATH_NVL < PATH_PIX < ... < PATH_NET``, NVIDIA/nccl
   ``src/graph/topo.h``), and it is what keeps two GPUs under one PCIe switch talking over their
   NVSwitch (both routes are two hops) whatever the latencies are set to.
4. Among those, the path whose NICs match the GPU at their end wins: GPU ``j`` uses NIC ``j``
   of its machine when both sit equally close (NCCL's GPU-NIC affinity: each GPU of a DGX
   talks through its own rail NIC, so its rings spread over all NICs). A machine with more
   NICs than GPUs (``N`` NICs, ``G`` GPUs: two ports per GPU, say) gives GPU ``j`` the NICs
   ``i`` with ``i x G // N == j``, and a connection is split evenly over the matching NICs of
   both its ends, as a spread (see ``"ideal"`` below): NCCL hands a GPU's channels to its
   local NICs in turn (``ncclTopoGetLocalNet``, ``src/graph/topo.cc`` v2.19.3-1:735-750:
   ``net += channelId % DIVUP(localNetCount, localGpuCount)``), and the engines route one
   connection per pair of nodes for all its channels.
5. Paths still tied are equal-cost multipaths (ECMP): they are sorted and the one at index
   ``zlib.crc32(f"{src}->{dst}".encode()) % count`` is taken, the way a switch hashes a flow onto
   one of its uplinks. The choice is the same in every run and under every ``PYTHONHASHSEED``,
   and different pairs spread over the alternatives.
6. Without PCIe peer-to-peer (``gpu_cluster`` with ``p2p: false``: GeForce cards, or a
   platform that forbids it) two GPUs of one machine cannot write into each other's memory:
   their traffic is staged through host memory, as NCCL's SHM transport does. The path is the
   sender's route to its socket's ``cpu`` node (its memory) followed by the route from there to
   the receiver, so the bytes cross the sender's PCIe links up, the memory, and the receiver's
   PCIe links down, and share every PCIe switch uplink and root port on the way with the other
   staged transfers.

A :class:`Path` lists its directed links and the transit nodes that cap throughput; the engine
treats each of those ``resources`` as one shared capacity (:meth:`Router.capacity`).

Routing modes (rules 1-4 and 6 hold in every mode, and rule 5 still picks the devices a path
crosses: GPU, PCIe, NIC; the mode chooses among the alternatives that differ only in their
fabric switches). A topology chooses one with
the parameters ``routing`` and ``routing_seed`` (``graph.graph["params"]``, as the builders of
:mod:`~simulator.topology.fabrics` write them; ``graph.graph["routing"]`` /
``["routing_seed"]``, set by :func:`set_routing`, win over them), or a caller passes them to
:class:`Router`. Without either, rule 5 above is used unchanged (every existing result stays
the same):

``"ecmp"``
    Static ECMP by flow hash, hop by hop: at every node where the remaining equal-cost paths
    leave by more than one next hop, ``blake2b(seed, node, src, dst, flow) mod count`` picks
    one of the sorted next hops. The node's name in the hash stands for each switch's own hash
    seed (without it all switches of a tier would make the same choice: hash polarisation).
    Two large flows can therefore land on one uplink while another sits idle, and max-min
    sharing halves both: the ECMP collisions Meta and Alibaba report for RoCE training fabrics.
``"adaptive"``
    Load-aware path pinning when a connection is set up: each new ``(src, dst, flow)`` takes the
    equal-cost path whose busiest link already carries the fewest connections (then the fewest
    in total; remaining ties by the seeded hash), and keeps it. Loads are counted per topology
    graph object, shared by every Router on it (the event engine and the fast methods then see
    the same paths); they count connections, not bytes, since a collective's connections are
    set up together and carry equal bytes. This is the flow-level picture of adaptive routing
    at connection (queue-pair / flowlet) granularity, and of Meta's traffic-engineered path
    pinning: collisions between connections are avoided, but one connection is never split, so
    a fabric with fewer connections than paths still leaves links idle. Per-packet adaptive
    routing (InfiniBand AR, Slingshot), whose fluid limit spreads every flow over all paths,
    is ``"ideal"``.
``"ideal"``
    The ideal spread: every flow is split evenly over all its equal-cost paths. Where a hop of
    those paths (a *stage*: the links at one position) has several links, the path's resource
    there is the stage as a whole, ``("spread", label, links)``, with the summed capacity. On
    Clos fabrics (fat tree, rail-optimised, multi-plane, three-tier) every flow crossing any
    link of a stage crosses all of them in equal parts, so the stage's one constraint is
    exactly the per-link constraints of the even split; :attr:`Router.spread_exact` turns False
    if a route breaks that (stages that overlap without being equal, or uneven shares, as the
    minimal paths of a dragonfly do), and the stages then pool capacity optimistically. Where
    there is only one shortest path, ``"ideal"``, ``"ecmp"``, ``"adaptive"`` and the default
    give the same path.
"""

from __future__ import annotations

import hashlib
import itertools
import re
import weakref
import zlib
from dataclasses import dataclass

import networkx as nx

from simulator.errors import TopologyError

__all__ = ["LINK_CLASS", "NON_TRANSIT_KINDS", "Path", "ROUTING_MODES", "Router", "routing_of",
           "set_routing"]

#: Routing modes a topology's ``routing`` parameter takes (see the module docstring).
ROUTING_MODES = ("ideal", "ecmp", "adaptive")
# adaptive routing's connection loads and pinned paths, per graph object and (mode, seed)
_SHARED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def routing_of(graph: nx.DiGraph) -> tuple[str | None, int]:
    """The ``(routing, routing_seed)`` a topology asks for (None: the default rule 5)."""
    params = graph.graph.get("params") or {}
    mode = graph.graph.get("routing", params.get("routing"))
    seed = graph.graph.get("routing_seed", params.get("routing_seed", 0))
    return mode, int(seed or 0)


def set_routing(graph: nx.DiGraph, routing: str | None, seed: int = 0) -> nx.DiGraph:
    """Make every later Router on ``graph`` (any builder's) use ``routing`` with ``seed``;
    ``None`` restores the default. Returns ``graph``."""
    if routing is not None and routing not in ROUTING_MODES:
        raise TopologyError(f"routing: expected one of {', '.join(ROUTING_MODES)}, "
                            f"got {routing!r}")
    graph.graph["routing"] = routing
    graph.graph["routing_seed"] = int(seed)
    return graph

NON_TRANSIT_KINDS = frozenset({"gpu", "host", "cpu"})
LINK_CLASS = {"loopback": 0, "nvlink": 0, "nvswitch": 0, "pcie": 1, "smp": 1, "ib": 2,
              "ethernet": 2}


@dataclass(frozen=True)
class Path:
    """A routed path.

    Attributes
    ----------
    nodes : tuple of str
        ``src``, the transit nodes, ``dst``.
    links : tuple of (str, str)
        The directed edges in order.
    latency_s : float
        Sum of the links' latencies, s (paid once per message by the engine).
    resources : tuple
        Every shared capacity the path uses, in path order: each link ``(u, v)``, and
        ``("node", n)`` for each transit node ``n`` with ``throughput_bytes_per_s``; with
        ``routing="ideal"``, ``("spread", label, links)`` for a stage of several parallel links.
    spread : tuple of tuple of str
        ``routing="ideal"`` only: every equal-cost path the flow is split over (``nodes`` and
        ``links`` are then the first of them); empty for a single path.
    """

    nodes: tuple[str, ...]
    links: tuple[tuple[str, str], ...]
    latency_s: float
    resources: tuple
    spread: tuple = ()

    @property
    def hops(self) -> int:
        """Number of links."""
        return len(self.links)


class Router:
    """Deterministic shortest-path router over a validated topology graph; caches every path.

    ``routing`` and ``seed`` override the topology's own choice (:func:`routing_of`).
    """

    def __init__(self, graph: nx.DiGraph, routing: str | None = None, seed: int | None = None):
        self.graph = graph
        mode, own_seed = routing_of(graph)
        self.routing = routing if routing is not None else mode
        self.seed = own_seed if seed is None else int(seed)
        if self.routing is not None and self.routing not in ROUTING_MODES:
            raise TopologyError(f"routing: expected one of {', '.join(ROUTING_MODES)}, "
                                f"got {self.routing!r}")
        #: False once an ideal spread had to pool overlapping or uneven stages (approximate)
        self.spread_exact = True
        self._stage_of: dict = {}        # link -> the stage key it was spread in
        self._flow_cache: dict[tuple[str, str, int], Path] = {}
        if self.routing == "adaptive":
            shared = _SHARED.setdefault(graph, {}).setdefault(
                ("adaptive", self.seed), {"paths": {}, "load": {}})
            self._pinned, self._load = shared["paths"], shared["load"]
        self._transit = frozenset(n for n, kind in graph.nodes(data="kind")
                                  if kind not in NON_TRANSIT_KINDS)
        self._cache: dict[tuple[str, str], Path] = {}
        # per node, its successors and predecessors that may carry transit (built on first
        # use: a switch with thousands of hosts would otherwise be scanned once per route)
        self._transit_succ: dict[str, list[str]] = {}
        self._transit_pred: dict[str, list[str]] = {}
        self._cpus: dict | None = None
        self._counts: dict | None = None    # machine -> (GPUs, NICs), rule 4

    def path(self, src: str, dst: str, flow: int = 0) -> Path:
        """The path from ``src`` to ``dst`` (cached); ``src == dst`` gives an empty path.

        ``flow`` tells connections between the same two nodes apart (``"ecmp"`` hashes it,
        ``"adaptive"`` pins each separately); the other modes ignore it. The engines route one
        connection per node pair (flow 0)."""
        if flow and self.routing in ("ecmp", "adaptive"):
            key3 = (src, dst, flow)
            found = self._flow_cache.get(key3)
            if found is None:
                found = self._flow_cache[key3] = self._route(src, dst, flow)
            return found
        key = (src, dst)
        found = self._cache.get(key)
        if found is None:
            found = self._cache[key] = self._route(src, dst, 0)
        return found

    def capacity(self, resource) -> float:
        """Bytes/s of a resource from :attr:`Path.resources`: link bandwidth, node cap, or
        the summed bandwidth of a spread stage."""
        if resource[0] == "node":
            return self.graph.nodes[resource[1]]["throughput_bytes_per_s"]
        if resource[0] == "spread":
            edges = self.graph.edges
            return float(sum(edges[e]["bandwidth_bytes_per_s"] for e in resource[2]))
        return self.graph.edges[resource]["bandwidth_bytes_per_s"]

    def _route(self, src: str, dst: str, flow: int = 0) -> Path:
        staging = self._staging_cpu(src, dst)
        if staging is not None:
            up, down = self._route(src, staging), self._route(staging, dst)
            return self._make_path(up.nodes + down.nodes[1:])
        candidates = self.shortest_paths(src, dst)
        cost = [sum(LINK_CLASS[self.graph.edges[e]["kind"]] for e in zip(p, p[1:]))
                for p in candidates]
        cost = [(c, self._affinity_misses(p)) for p, c in zip(candidates, cost)]
        lowest = min(cost)
        best = sorted(p for p, c in zip(candidates, cost) if c == lowest)
        spread = self._nic_spread(best, src, dst, flow)
        if spread is not None:
            return spread
        chosen = best[zlib.crc32(f"{src}->{dst}".encode()) % len(best)]
        if len(best) == 1 or self.routing is None:
            return self._make_path(chosen)
        # the modes choose among fabric alternatives only: paths through the same devices
        # (GPUs, PCIe, NICs: rule 5 as before) that differ only in their switches
        kind = self.graph.nodes
        devices = [n for n in chosen if kind[n].get("kind") != "switch"]
        best = [p for p in best if [n for n in p if kind[n].get("kind") != "switch"] == devices]
        if len(best) == 1:
            return self._make_path(chosen)
        if self.routing == "ecmp":
            return self._make_path(self._ecmp(best, src, dst, flow))
        if self.routing == "adaptive":
            return self._adaptive(best, src, dst, flow)
        return self._spread(best)

    # -- routing modes ------------------------------------------------------------------------
    def _hash(self, *parts) -> int:
        text = "|".join(map(str, (self.seed,) + parts)).encode()
        return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big")

    def _ecmp(self, paths: list, src: str, dst: str, flow: int) -> tuple[str, ...]:
        """Hop by hop: each node with several equal-cost next hops hashes the flow onto one."""
        for i in range(len(paths[0]) - 1):
            hops = sorted({p[i + 1] for p in paths})
            if len(hops) > 1:
                pick = hops[self._hash(paths[0][i], src, dst, flow) % len(hops)]
                paths = [p for p in paths if p[i + 1] == pick]
        return paths[0]

    def _adaptive(self, paths: list, src: str, dst: str, flow: int) -> Path:
        """Pin the connection on the least-loaded equal-cost path (loads shared per graph)."""
        key = (src, dst, flow)
        pinned = self._pinned.get(key)
        if pinned is None:
            load = self._load

            def score(p):
                counts = [load.get(e, 0) for e in zip(p, p[1:])]
                return (max(counts), sum(counts), self._hash(src, dst, flow, *p))

            pinned = min(paths, key=score)
            for e in zip(pinned, pinned[1:]):
                load[e] = load.get(e, 0) + 1
            self._pinned[key] = pinned
        return self._make_path(pinned)

    def _spread(self, paths: list) -> Path:
        """Split evenly over ``paths`` (equal hop counts): one resource per stage."""
        edges, nodes_attr = self.graph.edges, self.graph.nodes
        resources = []
        last = len(paths[0]) - 1
        for i in range(last):
            uses: dict = {}
            for p in paths:
                uses[(p[i], p[i + 1])] = uses.get((p[i], p[i + 1]), 0) + 1
            stage = tuple(sorted(uses))
            if len(stage) == 1:
                resources.append(stage[0])
            else:
                tails = sorted({u for u, _v in stage})
                heads = sorted({v for _u, v in stage})
                label = (f"{_names(tails)}->{_names(heads)}")
                key = ("spread", label, stage)
                caps = {edges[e]["bandwidth_bytes_per_s"] for e in stage}
                if len(set(uses.values())) != 1 or len(caps) != 1:
                    self.spread_exact = False
                for e in stage:
                    if self._stage_of.setdefault(e, key) != key:
                        self.spread_exact = False
                resources.append(key)
            if i + 1 < last:
                for v in sorted({p[i + 1] for p in paths}):
                    if "throughput_bytes_per_s" in nodes_attr[v]:
                        resources.append(("node", v))
        latency = max(sum(edges[e]["latency_s"] for e in zip(p, p[1:])) for p in paths)
        first = paths[0]
        return Path(first, tuple(zip(first, first[1:])), float(latency), tuple(resources),
                    tuple(paths))

    def _staging_cpu(self, src: str, dst: str):
        """The ``cpu`` node that stages GPU-to-GPU traffic inside a machine without PCIe
        peer-to-peer (rule 6), else None. A GPU's traffic to itself is not staged: it is a copy
        in its own memory and crosses no link (:meth:`path`: ``src == dst`` gives an empty
        path), as NCCL's send to self, which its kernel copies on the device without a
        transport (``addP2pToPlan``: ``selfSend``, no proxy op; ``src/enqueue.cc`` v2.27.7-1)."""
        if src == dst or (self.graph.graph.get("params") or {}).get("p2p", True):
            return None
        nodes = self.graph.nodes
        a, b = nodes[src], nodes[dst]
        if a.get("kind") != "gpu" or b.get("kind") != "gpu" \
                or a.get("node_index") != b.get("node_index"):
            return None
        if self._cpus is None:
            self._cpus = {(attrs.get("node_index"), attrs.get("socket", 0)): n
                          for n, attrs in nodes(data=True) if attrs.get("kind") == "cpu"}
        # the memory of the sender's socket (one socket: the machine's cpu)
        return self._cpus.get((a.get("node_index"), a.get("socket", 0)))

    def _machine_counts(self) -> dict:
        """Per machine (``node_index``), its ``(GPUs, NICs)``; built on first use."""
        if self._counts is None:
            counts: dict = {}
            for _n, attrs in self.graph.nodes(data=True):
                kind = attrs.get("kind")
                if kind in ("gpu", "nic"):
                    gpus, nics = counts.get(attrs.get("node_index"), (0, 0))
                    counts[attrs.get("node_index")] = (gpus + (kind == "gpu"),
                                                       nics + (kind == "nic"))
            self._counts = counts
        return self._counts

    def _owner(self, nic_attrs: dict) -> int:
        """The local index of the GPU a NIC serves (rule 4): its own index, or on a machine
        with more NICs than GPUs, ``index x GPUs // NICs`` (consecutive NICs per GPU)."""
        gpus, nics = self._machine_counts().get(nic_attrs.get("node_index"), (0, 0))
        index = nic_attrs["local_index"]
        return index * gpus // nics if 0 < gpus < nics else index

    def _affinity_misses(self, nodes: tuple[str, ...]) -> int:
        """NICs on the path that do not serve the GPU on their machine's end (rule 4)."""
        nodes_attr = self.graph.nodes
        ends = (nodes_attr[nodes[0]], nodes_attr[nodes[-1]])
        misses = 0
        for n in nodes[1:-1]:
            attrs = nodes_attr[n]
            if attrs.get("kind") != "nic" or "local_index" not in attrs:
                continue
            end = ends[0] if attrs.get("node_index") == ends[0].get("node_index") else ends[1]
            if end.get("kind") == "gpu" and end.get("local_index") != self._owner(attrs):
                misses += 1
        return misses

    def _nic_spread(self, best: list, src: str, dst: str, flow: int) -> Path | None:
        """Rule 4 on a machine with more NICs than GPUs: ``best`` split evenly over the NICs
        its paths may take (one path per choice of NICs, picked among fabric alternatives as
        the routing mode picks; ``"ideal"`` spreads over all of them); None where every path
        crosses the same NICs."""
        kind = self.graph.nodes
        counts = self._machine_counts()
        if not any(0 < gpus < nics for gpus, nics in
                   (counts.get(kind[end].get("node_index"), (0, 0)) for end in (src, dst))):
            return None
        groups: dict = {}
        for p in best:
            groups.setdefault(tuple(n for n in p if kind[n].get("kind") == "nic"), []).append(p)
        if len(groups) < 2:
            return None
        if self.routing == "ideal":
            return self._spread(best)
        picked = []
        for group in groups.values():
            if self.routing == "ecmp":
                picked.append(self._ecmp(group, src, dst, flow))
            else:      # the default, and "adaptive" (which pins whole connections): rule 5
                picked.append(group[zlib.crc32(f"{src}->{dst}".encode()) % len(group)])
        return self._spread(picked)

    def _make_path(self, nodes: tuple[str, ...]) -> Path:
        links = tuple(zip(nodes, nodes[1:]))
        resources = []
        for u, v in links:
            resources.append((u, v))
            if v != nodes[-1] and "throughput_bytes_per_s" in self.graph.nodes[v]:
                resources.append(("node", v))
        latency_s = sum(self.graph.edges[e]["latency_s"] for e in links)
        return Path(nodes, links, float(latency_s), tuple(resources))

    def shortest_paths(self, src: str, dst: str) -> list[tuple[str, ...]]:
        """All fewest-hop paths from ``src`` to ``dst`` whose middle nodes may carry transit.

        Bidirectional breadth-first search: the two searches grow one whole level at a time (the
        smaller frontier first) until a level of one meets the other's visited set. With ``a``
        levels forward and ``b`` backward at that moment, the first meeting proves the distance
        is ``a + b`` and the meeting nodes are exactly the nodes at distance ``a`` on shortest
        paths, so the paths are the products of their shortest prefixes and suffixes. Cost is
        proportional to the neighbourhood of the two ends, not to the whole fabric.
        """
        for node in (src, dst):
            if node not in self.graph:
                raise TopologyError(f"cannot route {src!r} -> {dst!r}: no node {node!r}")
        if src == dst:
            return [(src,)]
        succ, pred = self.graph.succ, self.graph.pred
        forward, backward = {src: ()}, {dst: ()}  # node -> neighbours one level closer
        front, back = [src], [dst]
        while front and back:
            if len(front) <= len(back):
                front = self._grow(front, forward, succ, self._transit_succ, dst)
                meet = [n for n in front if n in backward]
            else:
                back = self._grow(back, backward, pred, self._transit_pred, src)
                meet = [n for n in back if n in forward]
            if meet:
                break
        else:
            raise TopologyError(f"no route from {src!r} to {dst!r}")
        return [head + tail[1:] for m in meet
                for head, tail in itertools.product(self._chains(m, forward, reverse=True),
                                                    self._chains(m, backward, reverse=False))]

    def _grow(self, frontier, seen, neighbours, transit_of, goal):
        """Expand one BFS level; only transit nodes (and the goal) are entered.

        ``transit_of`` caches, per node, its neighbours that may carry transit; the goal, if it
        may not, is looked up directly. (The level's order may differ from a scan of all
        neighbours; the paths found are the same, and :meth:`_route` sorts them.)"""
        level: dict[str, list[str]] = {}
        transit = self._transit
        goal_is_end = goal not in transit
        for u in frontier:  # the origin, or transit nodes: the goal ends the search first
            nbrs = neighbours[u]
            candidates = transit_of.get(u)
            if candidates is None:
                candidates = transit_of[u] = [v for v in nbrs if v in transit]
            for v in candidates:
                if v not in seen:
                    level.setdefault(v, []).append(u)
            if goal_is_end and goal in nbrs and goal not in seen:
                level.setdefault(goal, []).append(u)
        for v, parents in level.items():
            seen[v] = tuple(parents)
        return list(level)

    def _chains(self, node, links, reverse):
        """Every chain from ``node`` back to its search's origin, origin-first if ``reverse``."""
        if not links[node]:
            return [(node,)]
        chains = [c + (node,) if reverse else (node,) + c
                  for parent in links[node] for c in self._chains(parent, links, reverse)]
        return chains


def _names(nodes: list[str]) -> str:
    """``leaf0`` or ``{spine0..spine31}`` (first..last of several, numbers in order)."""
    nodes = sorted(nodes, key=lambda n: [int(t) if t.isdigit() else t
                                         for t in re.split(r"(\d+)", n)])
    return nodes[0] if len(nodes) == 1 else f"{{{nodes[0]}..{nodes[-1]}}}"
