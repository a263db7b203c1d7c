"""The topology graph schema, its validator, and where ranks run.

A topology is a :class:`networkx.DiGraph` whose nodes are devices and whose edges are directed
links; a full-duplex cable is two edges, one per direction, each with its own bandwidth. The engine
reads exactly the attributes below, in SI units (bytes, seconds, bytes per second).

Graph attributes
    ``name`` (str), ``builder`` (str: the builder that made it), ``params`` (dict: the builder's
    resolved parameters, SI values) and ``source`` (str: where the numbers come from).
    ``description`` (str) is optional.

Node attributes
    ``kind``: one of :data:`NODE_KINDS`. Optional on any node: ``throughput_bytes_per_s``, an
    aggregate cap on all traffic passing *through* the node (a PCIe host bridge, a NIC engine),
    which the router lists as one more shared resource on every path that transits the node.

    Endpoints are where ranks run: the ``gpu`` nodes, or the ``host`` nodes when the graph has no
    GPU. In a graph with GPUs, ``host`` nodes are dedicated parameter servers
    (:func:`ps_endpoints`). Both carry ``node_index`` (int: which machine), ``local_index`` (int:
    index inside the machine) and ``reduce_bytes_per_s`` (float: message bytes per second the
    device can sum into a buffer; ``math.inf`` means free). Devices made from a preset also carry
    ``device`` (the :data:`~simulator.topology.devices.DEVICES` name) and
    ``memory_bandwidth_bytes_per_s``.

Edge attributes
    ``bandwidth_bytes_per_s`` (float > 0), ``latency_s`` (float >= 0), ``kind`` (one of
    :data:`EDGE_KINDS`).

Rank ``r`` of a collective runs on ``endpoints(graph)[r]``: endpoints are ordered by
``(node_index, local_index)``, so consecutive ranks share a machine.
"""

from __future__ import annotations

import math
import numbers

import networkx as nx

from simulator.errors import TopologyError

__all__ = [
    "EDGE_KINDS", "ENDPOINT_KINDS", "NODE_KINDS", "add_duplex", "describe", "endpoints",
    "new_graph", "owned_nics", "place_ranks", "ps_endpoints", "validate",
]

NODE_KINDS = frozenset(
    {"gpu", "host", "cpu", "nic", "pcie_switch", "host_bridge", "switch", "nvswitch"})
EDGE_KINDS = frozenset({"nvlink", "nvswitch", "pcie", "smp", "ib", "ethernet", "loopback"})
ENDPOINT_KINDS = frozenset({"gpu", "host"})
_GRAPH_ATTRS = {"name": str, "builder": str, "params": dict, "source": str}


def new_graph(name: str, builder: str, params: dict, source: str = "") -> nx.DiGraph:
    """An empty topology graph carrying the schema's graph attributes."""
    return nx.DiGraph(name=name, builder=builder, params=dict(params), source=source)


def add_duplex(graph: nx.DiGraph, a: str, b: str, bandwidth_bytes_per_s: float,
               latency_s: float, kind: str) -> None:
    """Add a full-duplex cable between ``a`` and ``b``: two directed edges, same numbers."""
    attrs = {"bandwidth_bytes_per_s": float(bandwidth_bytes_per_s),
             "latency_s": float(latency_s), "kind": kind}
    graph.add_edge(a, b, **attrs)
    graph.add_edge(b, a, **attrs)


def _sorted_by_index(graph: nx.DiGraph, nodes) -> list[str]:
    return sorted(nodes, key=lambda n: (graph.nodes[n]["node_index"],
                                        graph.nodes[n]["local_index"], n))


def _has_gpu(graph: nx.DiGraph) -> bool:
    return any(kind == "gpu" for _, kind in graph.nodes(data="kind"))


def endpoints(graph: nx.DiGraph) -> list[str]:
    """Node ids where ranks run, ordered by ``(node_index, local_index)``.

    These are the ``gpu`` nodes, or the ``host`` nodes when the graph has no GPU.
    """
    kind = "gpu" if _has_gpu(graph) else "host"
    return _sorted_by_index(graph, (n for n, k in graph.nodes(data="kind") if k == kind))


def local_ranks(graph: nx.DiGraph, gpus: int) -> int:
    """Endpoints per machine among the first ``gpus`` endpoints (for hierarchical algorithms)."""
    eps = endpoints(graph)[:gpus]
    first = graph.nodes[eps[0]].get("node_index", 0)
    return sum(1 for e in eps if graph.nodes[e].get("node_index", 0) == first)


def owned_nics(nics: int, ranks: int, gpus: int) -> int:
    """NICs that ``ranks`` of a machine's ``gpus`` GPUs own among its ``nics``: their share,
    at least one (on a rail-wise machine every GPU keeps its own NIC). NCCL's search takes
    the NICs nearest its GPUs, so a job on part of a machine uses that many."""
    return max(1, nics * ranks // max(1, gpus))


def place_ranks(graph: nx.DiGraph, machines: int, per: int) -> nx.DiGraph | None:
    """A copy of ``graph`` whose endpoints are the first ``per`` of each of its first
    ``machines`` machines: how a job of ``machines x per`` ranks sits on bigger machines when
    each rank takes its machine's device ``local rank`` (nccl-tests under MPI, torchrun).

    The other endpoints and their links are left out, and so are the NICs those ranks do not
    own: a machine keeps its first :func:`owned_nics` NICs, the rule the LLM step's group
    views use. Every switch, CPU and
    fabric link stays, so routes and shared links are the machine's own. None when ``graph``
    has fewer machines, or a machine fewer endpoints, than that.
    """
    by_machine: dict = {}
    for e in endpoints(graph):
        by_machine.setdefault(graph.nodes[e].get("node_index", 0), []).append(e)
    chosen = sorted(by_machine)[:machines]
    if len(chosen) < machines or any(len(by_machine[m]) < per for m in chosen):
        return None
    keep = {e for m in chosen for e in by_machine[m][:per]}
    drop = [e for eps in by_machine.values() for e in eps if e not in keep]
    nics: dict = {}
    for n, attrs in graph.nodes(data=True):
        if attrs.get("kind") == "nic":
            nics.setdefault(attrs.get("node_index", 0), []).append(n)
    for m, names in nics.items():
        names.sort(key=lambda n: (graph.nodes[n].get("local_index", 0), n))
        drop.extend(names[owned_nics(len(names), per, len(by_machine.get(m, ())) or per):])
    placed = graph.copy()
    placed.remove_nodes_from(drop)
    return placed


def ps_endpoints(graph: nx.DiGraph) -> list[str]:
    """Dedicated parameter-server hosts (``host`` nodes of a graph with GPUs), in order.

    In a graph without GPUs the hosts are the endpoints themselves and this is empty.
    """
    if not _has_gpu(graph):
        return []
    return _sorted_by_index(graph, (n for n, k in graph.nodes(data="kind") if k == "host"))


def _is_number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _check_number(where: str, attrs: dict, key: str, *, minimum: float, strict: bool,
                  allow_inf: bool, required: bool = True) -> None:
    if key not in attrs:
        if required:
            raise TopologyError(f"{where}: missing attribute {key!r}")
        return
    value = attrs[key]
    ok = _is_number(value) and not math.isnan(value) and (allow_inf or math.isfinite(value))
    ok = ok and (value > minimum if strict else value >= minimum)
    if not ok:
        bound = f"{'>' if strict else '>='} {minimum:g}"
        finite = "" if allow_inf else ", finite"
        raise TopologyError(f"{where}: attribute {key!r} must be a number {bound}{finite}; "
                            f"got {value!r}")


def _check_index(where: str, attrs: dict, key: str) -> None:
    value = attrs.get(key)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise TopologyError(f"{where}: attribute {key!r} must be an int >= 0; got {value!r}")


def validate(graph: nx.DiGraph) -> nx.DiGraph:
    """Check ``graph`` against the schema above; return it unchanged or raise TopologyError.

    The message names the offending node or edge and attribute.
    """
    if not isinstance(graph, nx.DiGraph) or graph.is_multigraph():
        raise TopologyError(f"a topology must be a networkx.DiGraph, got {type(graph).__name__}")
    for key, kind in _GRAPH_ATTRS.items():
        if not isinstance(graph.graph.get(key), kind):
            raise TopologyError(f"graph attribute {key!r} must be a {kind.__name__}; "
                                f"got {graph.graph.get(key)!r}")
    for node, attrs in graph.nodes(data=True):
        where = f"node {node!r}"
        if not isinstance(node, str) or node == "node":
            raise TopologyError(f"{where}: node ids must be strings other than 'node'")
        if attrs.get("kind") not in NODE_KINDS:
            raise TopologyError(f"{where}: attribute 'kind' must be one of "
                                f"{', '.join(sorted(NODE_KINDS))}; got {attrs.get('kind')!r}")
        _check_number(where, attrs, "throughput_bytes_per_s", minimum=0, strict=True,
                      allow_inf=False, required=False)
        _check_number(where, attrs, "memory_bandwidth_bytes_per_s", minimum=0, strict=True,
                      allow_inf=False, required=False)
        if "device" in attrs and not isinstance(attrs["device"], str):
            raise TopologyError(f"{where}: attribute 'device' must be a str")
    ranked = endpoints(graph) + ps_endpoints(graph)
    if not ranked:
        raise TopologyError("topology has no endpoints (no 'gpu' or 'host' node)")
    seen = {}
    for node in ranked:
        attrs, where = graph.nodes[node], f"endpoint {node!r}"
        _check_index(where, attrs, "node_index")
        _check_index(where, attrs, "local_index")
        _check_number(where, attrs, "reduce_bytes_per_s", minimum=0, strict=True, allow_inf=True)
        key = (attrs["node_index"], attrs["local_index"])
        if key in seen:
            raise TopologyError(f"{where}: (node_index, local_index) = {key} is also used by "
                                f"{seen[key]!r}")
        seen[key] = node
    for u, v, attrs in graph.edges(data=True):
        where = f"edge {u!r} -> {v!r}"
        if u == v:
            raise TopologyError(f"{where}: self-loops are not links")
        _check_number(where, attrs, "bandwidth_bytes_per_s", minimum=0, strict=True,
                      allow_inf=False)
        _check_number(where, attrs, "latency_s", minimum=0, strict=False, allow_inf=False)
        if attrs.get("kind") not in EDGE_KINDS:
            raise TopologyError(f"{where}: attribute 'kind' must be one of "
                                f"{', '.join(sorted(EDGE_KINDS))}; got {attrs.get('kind')!r}")
    return graph


def describe(graph: nx.DiGraph) -> dict:
    """A plain summary of a topology for ``clustersim topology show`` (no formatting).

    Keys: ``name``, ``builder``, ``description``, ``endpoints`` (count), ``ps_endpoints`` (ids),
    ``nodes`` (count by kind), ``devices`` (count by device preset), ``links`` (directed links
    grouped by kind and bandwidth, each ``{"kind", "bandwidth_bytes_per_s", "count"}``) and
    ``throughput_caps`` (nodes with a cap, grouped by kind and cap).
    """
    def counts(items) -> dict:
        result: dict = {}
        for item in items:
            result[item] = result.get(item, 0) + 1
        return result

    nodes = graph.nodes(data=True)
    links = counts((a["kind"], a["bandwidth_bytes_per_s"]) for _, _, a in graph.edges(data=True))
    caps = counts((a["kind"], a["throughput_bytes_per_s"]) for _, a in nodes
                  if "throughput_bytes_per_s" in a)
    return {
        "name": graph.graph.get("name"),
        "builder": graph.graph.get("builder"),
        "description": graph.graph.get("description", ""),
        "endpoints": len(endpoints(graph)),
        "ps_endpoints": ps_endpoints(graph),
        "nodes": dict(sorted(counts(a["kind"] for _, a in nodes).items())),
        "devices": dict(sorted(counts(a["device"] for _, a in nodes if "device" in a).items())),
        "links": [{"kind": k, "bandwidth_bytes_per_s": bw, "count": n}
                  for (k, bw), n in sorted(links.items(), key=lambda x: (x[0][0], -x[0][1]))],
        "throughput_caps": [{"kind": k, "throughput_bytes_per_s": cap, "count": n}
                            for (k, cap), n in sorted(caps.items())],
    }
