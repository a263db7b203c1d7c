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
   talks through its own rail NIC, so its rings spread over all NICs).
5. Paths still tied are equal-cost multipaths (ECMP): they are sorted and the one at index
   ``zlib.crc32(f"{src}->{dst}".encode()) % count`` is taken, the way a switch hashes a flow onto
   one of its uplinks. The choice is the same in every run and under every ``PYTHONHASHSEED``,
   and different pairs spread over the alternatives.
6. Without PCIe peer-to-peer (``gpu_cluster`` with ``p2p: false``: GeForce cards, or a
   platform that forbids it) two GPUs of one machine cannot write into each other's memory:
   their traffic is staged through host memory, as NCCL's SHM transport does. The path is the
   sender's route to its machine's ``cpu`` node (its memory) followed by the route from there to
   the receiver, so the bytes cross the sender's PCIe links up, the memory, and the receiver's
   PCIe links down, and share every PCIe switch uplink and root port on the way with the other
   staged transfers.

A :class:`Path` lists its directed links and the transit nodes that cap throughput; the engine
treats each of those ``resources`` as one shared capacity (:meth:`Router.capacity`).
"""

from __future__ import annotations

import itertools
import zlib
from dataclasses import dataclass

import networkx as nx

from simulator.errors import TopologyError

__all__ = ["LINK_CLASS", "NON_TRANSIT_KINDS", "Path", "Router"]

NON_TRANSIT_KINDS = frozenset({"gpu", "host", "cpu"})
LINK_CLASS = {"loopback": 0, "nvlink": 0, "nvswitch": 0, "pcie": 1, "ib": 2, "ethernet": 2}


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
        ``("node", n)`` for each transit node ``n`` with ``throughput_bytes_per_s``.
    """

    nodes: tuple[str, ...]
    links: tuple[tuple[str, str], ...]
    latency_s: float
    resources: tuple

    @property
    def hops(self) -> int:
        """Number of links."""
        return len(self.links)


class Router:
    """Deterministic shortest-path router over a validated topology graph; caches every path."""

    def __init__(self, graph: nx.DiGraph):
        self.graph = graph
        self._transit = frozenset(n for n, kind in graph.nodes(data="kind")
                                  if kind not in NON_TRANSIT_KINDS)
        self._cache: dict[tuple[str, str], Path] = {}
        # per node, its successors and predecessors that may carry transit (built on first
        # use: a switch with thousands of hosts would otherwise be scanned once per route)
        self._transit_succ: dict[str, list[str]] = {}
        self._transit_pred: dict[str, list[str]] = {}
        self._cpus: dict | None = None

    def path(self, src: str, dst: str) -> Path:
        """The path from ``src`` to ``dst`` (cached); ``src == dst`` gives an empty path."""
        key = (src, dst)
        found = self._cache.get(key)
        if found is None:
            found = self._cache[key] = self._route(src, dst)
        return found

    def capacity(self, resource) -> float:
        """Bytes/s of a resource from :attr:`Path.resources`: link bandwidth or node cap."""
        if resource[0] == "node":
            return self.graph.nodes[resource[1]]["throughput_bytes_per_s"]
        return self.graph.edges[resource]["bandwidth_bytes_per_s"]

    def _route(self, src: str, dst: str) -> Path:
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
        chosen = best[zlib.crc32(f"{src}->{dst}".encode()) % len(best)]
        return self._make_path(chosen)

    def _staging_cpu(self, src: str, dst: str):
        """The ``cpu`` node that stages GPU-to-GPU traffic inside a machine without PCIe
        peer-to-peer (rule 6), else None."""
        if (self.graph.graph.get("params") or {}).get("p2p", True):
            return None
        nodes = self.graph.nodes
        a, b = nodes[src], nodes[dst]
        if a.get("kind") != "gpu" or b.get("kind") != "gpu" \
                or a.get("node_index") != b.get("node_index"):
            return None
        if self._cpus is None:
            self._cpus = {attrs.get("node_index"): n for n, attrs in nodes(data=True)
                          if attrs.get("kind") == "cpu"}
        return self._cpus.get(a.get("node_index"))

    def _affinity_misses(self, nodes: tuple[str, ...]) -> int:
        """NICs on the path whose index differs from the GPU on their machine's end."""
        nodes_attr = self.graph.nodes
        ends = (nodes_attr[nodes[0]], nodes_attr[nodes[-1]])
        misses = 0
        for n in nodes[1:-1]:
            attrs = nodes_attr[n]
            if attrs.get("kind") != "nic" or "local_index" not in attrs:
                continue
            end = ends[0] if attrs.get("node_index") == ends[0].get("node_index") else ends[1]
            if end.get("kind") == "gpu" and end.get("local_index") != attrs["local_index"]:
                misses += 1
        return misses

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
