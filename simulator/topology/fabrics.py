"""The fabrics of the largest GPU clusters, as builders: rail-optimised, multi-plane, three-tier
Clos with oversubscription per tier, and dragonfly.

Every builder here makes its machines with :func:`~simulator.topology.builders.gpu_cluster`
itself (same parameters, same machine internals: GPUs, NVSwitch/NVLink/PCIe, NICs), drops
that builder's one-switch fabric and wires the machines' NICs into its own. So every machine
parameter of ``gpu_cluster`` (``gpus_per_node``, ``gpu``, ``intra``, ``nics_per_node``,
``nic_bandwidth``, ``network``, ``transport``, ...) is a parameter here too, with the same
default, except those of its own fabric (``fabric``, ``nics_per_leaf``, ``spines``,
``uplink_*``) and its parameter-server hosts.

Every builder also takes ``routing`` (``"ideal"``, ``"ecmp"`` or ``"adaptive"``) and
``routing_seed``, which the router reads (:mod:`simulator.topology.routing`): the ideal even
spread over equal-cost paths, static ECMP by a seeded flow hash at every hop, or load-aware
path pinning per connection. Numbers and their sources: ``docs/validation/sources_fabrics.md``.

Node names (all fabric switches are of kind ``switch``):

* ``rail_optimised`` / ``multi_plane``: leaf ``leaf{u}.{k}`` is rail ``k`` of scalable unit
  ``u`` (NIC ``k`` of every machine of the unit hangs on it), ``spine{m}``; with several
  planes each name ends in ``.p{plane}``.
* ``three_tier``: ``leaf{pod}.{k}`` (a rail leaf, or the ``k``-th top-of-rack leaf),
  ``spine{pod}.{s}``, ``core{s}.{c}`` (core plane ``s`` joins spine ``s`` of every pod).
* ``dragonfly``: ``router{g}.{r}``.

:func:`bisection` gives the max-flow between the two halves of the machines, the bisection
bandwidth the tests check against hand-computed values.
"""

from __future__ import annotations

import inspect
import math

import networkx as nx

from simulator.errors import ConfigError
from simulator.topology import builders as _builders
from simulator.topology.builders import _bandwidth, _count, _latency, gpu_cluster
from simulator.topology.graph import add_duplex, validate
from simulator.topology.routing import ROUTING_MODES

__all__ = ["FABRIC_BUILDERS", "bisection", "dragonfly", "multi_plane", "rail_optimised",
           "three_tier"]

#: gpu_cluster parameters that belong to its own fabric, not to the machines
_NOT_MACHINE = frozenset({"fabric", "nics_per_leaf", "spines", "uplink_bandwidth",
                          "uplink_latency", "ps_hosts", "ps_bandwidth", "ps_reduce_bandwidth"})


def _machine_parameters() -> list[inspect.Parameter]:
    return [p for name, p in inspect.signature(gpu_cluster).parameters.items()
            if name not in _NOT_MACHINE]


def _machines(machine: dict, builder: str, params: dict, source: str) -> nx.DiGraph:
    """The machines of ``gpu_cluster(**machine)`` with their NICs unwired, and the graph
    attributes of ``builder``: its own ``params`` after the machines' resolved ones."""
    graph = gpu_cluster(**machine, fabric="star")
    graph.remove_node("switch")
    resolved = {k: v for k, v in graph.graph["params"].items() if k not in _NOT_MACHINE}
    graph.graph.update(name=builder, builder=builder, params={**resolved, **params},
                       source=source)
    return graph


def _routing(routing, seed) -> tuple[str, int]:
    if routing not in ROUTING_MODES:
        raise ConfigError(f"routing: expected one of {', '.join(ROUTING_MODES)}, got "
                          f"{routing!r}")
    return routing, _count(seed, "routing_seed", 0)


def _ratio(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 \
            or not math.isfinite(value):
        raise ConfigError(f"{what}: expected a number > 0 (down:up bandwidth), got {value!r}")
    return float(value)


def _split(kwargs: dict, own: dict) -> tuple[dict, dict]:
    """Split a builder's keyword arguments into its own (defaults filled) and the machines'."""
    machine_names = {p.name for p in _machine_parameters()}
    unknown = sorted(set(kwargs) - machine_names - set(own))
    if unknown:
        raise ConfigError(f"unknown parameter {', '.join(map(repr, unknown))}")
    mine = {k: kwargs.get(k, v) for k, v in own.items()}
    machine = {k: v for k, v in kwargs.items() if k in machine_names}
    for k in set(own) & machine_names:          # a machine default this builder changes
        machine.setdefault(k, mine[k])
    return mine, machine


def _with_signature(fn, own: dict):
    """Give ``fn(**kwargs)`` the signature: its own parameters, then the machine ones."""
    params = [inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, default=v)
              for k, v in own.items()]
    params += [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in _machine_parameters()
               if p.name not in own]
    fn.__signature__ = inspect.Signature(params)
    return fn


def _source(builder: str) -> str:
    return (f"simulator.topology.fabrics.{builder} with the parameters in graph['params']; "
            f"sources in docs/validation/sources_fabrics.md")


# --- rail-optimised and multi-plane two-tier fabrics ----------------------------------------

_RAIL = {"nodes": 8, "nodes_per_su": 4, "spines": 4, "planes": 1, "uplink_bandwidth": None,
         "uplink_latency": "0.5 us", "routing": "ideal",
         "routing_seed": 0}


def _rail(kwargs: dict, own: dict, builder: str) -> nx.DiGraph:
    mine, machine = _split(kwargs, own)
    nodes = _count(mine["nodes"], "nodes")
    per_su = _count(mine["nodes_per_su"], "nodes_per_su")
    spines = _count(mine["spines"], "spines")
    planes = _count(mine["planes"], "planes")
    up_lat = _latency(mine["uplink_latency"], "uplink_latency")
    routing, seed = _routing(mine["routing"], mine["routing_seed"])
    graph = _machines({**machine, "nodes": nodes}, builder, {}, _source(builder))
    p = graph.graph["params"]
    rails, nic_bw, nic_lat, kind = p["nics_per_node"], p["nic_bandwidth"], p["nic_latency"], \
        p["network"]
    port_bw = nic_bw / planes
    up_bw = mine["uplink_bandwidth"]
    up_bw = per_su * port_bw / spines if up_bw is None else _bandwidth(up_bw, "uplink_bandwidth")
    units = -(-nodes // per_su)
    suffix = (lambda q: f".p{q}") if planes > 1 else (lambda q: "")
    for q in range(planes):
        for u in range(units):
            for k in range(rails):
                graph.add_node(f"leaf{u}.{k}{suffix(q)}", kind="switch")
        for m in range(spines):
            graph.add_node(f"spine{m}{suffix(q)}", kind="switch")
    for i in range(nodes):
        for k in range(rails):
            for q in range(planes):
                add_duplex(graph, f"n{i}.nic{k}", f"leaf{i // per_su}.{k}{suffix(q)}", port_bw,
                           nic_lat, kind)
    for q in range(planes):
        for u in range(units):
            for k in range(rails):
                for m in range(spines):
                    add_duplex(graph, f"leaf{u}.{k}{suffix(q)}", f"spine{m}{suffix(q)}", up_bw,
                               up_lat, kind)
    p.update(nodes_per_su=per_su, spines=spines, planes=planes, uplink_bandwidth=up_bw,
             uplink_latency=up_lat, routing=routing, routing_seed=seed,
             leaf_oversubscription=per_su * port_bw / (spines * up_bw))
    return validate(graph)


def rail_optimised(**kwargs) -> nx.DiGraph:
    """A rail-optimised two-tier fat tree (NVIDIA DGX SuperPOD's compute fabric).

    Machines are grouped into scalable units (SUs) of ``nodes_per_su``. NIC ``k`` of every
    machine of unit ``u`` (the NIC of GPU ``k``: rail ``k``) has its link to rail leaf
    ``leaf{u}.{k}``, so same-rank GPUs of a unit are one switch apart. Every leaf has one
    uplink to every ``spine{m}`` (a spine with several cables to a leaf is counted as that many
    spines: what ECMP and the bisection see is the number of uplinks). ``planes > 1`` builds
    that many independent copies of the leaf/spine fabric (``.p{plane}`` names), and every NIC
    has one port on each, of ``nic_bandwidth / planes``: :func:`multi_plane`.

    Parameters (besides every machine parameter of ``gpu_cluster``)
    ----------------------------------------------------------------
    nodes : int
        Machines.
    nodes_per_su : int
        Machines per scalable unit, i.e. down-ports of each rail leaf (SuperPOD: 32).
    spines : int
        Spine switches per plane = uplinks per leaf.
    planes : int
        Independent fabric planes (1: a plain rail-optimised fat tree).
    uplink_bandwidth : bandwidth or None
        Per direction of each leaf-spine link; None: non-blocking (``nodes_per_su`` x port
        bandwidth / ``spines``). Oversubscription is ``params["leaf_oversubscription"]``.
    uplink_latency : duration
        Leaf-spine links (NIC-leaf links use ``nic_latency``).
    routing : {"ideal", "ecmp", "adaptive"}
    routing_seed : int
    """
    return _rail(kwargs, _RAIL, "rail_optimised")


_MULTI = {**_RAIL, "planes": 2, "nic_bandwidth": "400 Gbps"}


def multi_plane(**kwargs) -> nx.DiGraph:
    """A multi-plane rail-optimised fabric (Alibaba HPN's dual-plane; 2 planes by default):
    :func:`rail_optimised` with ``planes=2``, every NIC's two ports (each half of
    ``nic_bandwidth``, default 2 x 200 Gbps as HPN's) on different planes. Traffic between
    two NICs may take either plane: ECMP hashes a connection onto one port, ``ideal`` spreads
    it over both."""
    return _rail(kwargs, _MULTI, "multi_plane")


# --- three-tier Clos ------------------------------------------------------------------------

_CLOS = {"nodes": 16, "nodes_per_pod": 4, "nodes_per_leaf": None, "spines_per_pod": 2,
         "cores_per_plane": 2, "leaf_oversubscription": 1.0, "spine_oversubscription": 1.0,
         "uplink_latency": "0.5 us", "core_latency": "0.5 us", "routing": "ideal",
         "routing_seed": 0}


def three_tier(**kwargs) -> nx.DiGraph:
    """A three-tier Clos (leaf / spine / core) with an oversubscription ratio at each tier
    (the DGX SuperPOD beyond 8 SUs; Meta's RTSW / CTSW / ATSW AI zones).

    Machines are grouped into pods of ``nodes_per_pod``. Leaves: with ``nodes_per_leaf``
    None, rail leaves (``leaf{pod}.{k}`` holds NIC ``k`` of every machine of the pod), else
    top-of-rack leaves holding every NIC of ``nodes_per_leaf`` machines. Every leaf has one
    uplink to each of the pod's ``spines_per_pod`` spines, and spine ``s`` of every pod one
    uplink to each of the ``cores_per_plane`` cores of core plane ``s``. Uplink bandwidths
    follow from the ratios: a leaf's down-bandwidth / its up-bandwidth is
    ``leaf_oversubscription``, a spine's (down from its leaves) / (up to its cores) is
    ``spine_oversubscription`` (1: non-blocking).

    Parameters (besides every machine parameter of ``gpu_cluster``)
    ----------------------------------------------------------------
    nodes, nodes_per_pod : int
        Machines, and machines per pod (the last pod may be partial).
    nodes_per_leaf : int or None
        None: rail leaves; an int: top-of-rack leaves of that many machines.
    spines_per_pod, cores_per_plane : int
    leaf_oversubscription, spine_oversubscription : float
        Down:up ratios (>= 1 usual; 1 non-blocking).
    uplink_latency, core_latency : duration
        Leaf-spine and spine-core links.
    routing, routing_seed : see :mod:`simulator.topology.routing`
    """
    mine, machine = _split(kwargs, _CLOS)
    nodes = _count(mine["nodes"], "nodes")
    per_pod = _count(mine["nodes_per_pod"], "nodes_per_pod")
    per_leaf = mine["nodes_per_leaf"]
    per_leaf = None if per_leaf is None else _count(per_leaf, "nodes_per_leaf")
    if per_leaf is not None and per_pod % per_leaf:
        raise ConfigError(f"nodes_per_leaf: must divide nodes_per_pod ({per_pod}), got "
                          f"{per_leaf}")
    spines = _count(mine["spines_per_pod"], "spines_per_pod")
    cores = _count(mine["cores_per_plane"], "cores_per_plane")
    leaf_ratio = _ratio(mine["leaf_oversubscription"], "leaf_oversubscription")
    spine_ratio = _ratio(mine["spine_oversubscription"], "spine_oversubscription")
    up_lat = _latency(mine["uplink_latency"], "uplink_latency")
    core_lat = _latency(mine["core_latency"], "core_latency")
    routing, seed = _routing(mine["routing"], mine["routing_seed"])
    graph = _machines({**machine, "nodes": nodes}, "three_tier", {}, _source("three_tier"))
    p = graph.graph["params"]
    nics, nic_bw, nic_lat, kind = p["nics_per_node"], p["nic_bandwidth"], p["nic_latency"], \
        p["network"]
    pods = -(-nodes // per_pod)
    if per_leaf is None:
        leaves, ports = nics, per_pod                       # rail k of the pod
        leaf_of = lambda i, k: f"leaf{i // per_pod}.{k}"     # noqa: E731
    else:
        leaves, ports = per_pod // per_leaf, per_leaf * nics
        leaf_of = lambda i, k: f"leaf{i // per_pod}.{(i % per_pod) // per_leaf}"  # noqa: E731
    leaf_up = ports * nic_bw / (leaf_ratio * spines)
    spine_up = leaves * leaf_up / (spine_ratio * cores)
    for pod in range(pods):
        for j in range(leaves):
            graph.add_node(f"leaf{pod}.{j}", kind="switch")
        for s in range(spines):
            graph.add_node(f"spine{pod}.{s}", kind="switch")
    for s in range(spines):
        for c in range(cores):
            graph.add_node(f"core{s}.{c}", kind="switch")
    for i in range(nodes):
        for k in range(nics):
            add_duplex(graph, f"n{i}.nic{k}", leaf_of(i, k), nic_bw, nic_lat, kind)
    for pod in range(pods):
        for s in range(spines):
            for j in range(leaves):
                add_duplex(graph, f"leaf{pod}.{j}", f"spine{pod}.{s}", leaf_up, up_lat, kind)
            for c in range(cores):
                add_duplex(graph, f"spine{pod}.{s}", f"core{s}.{c}", spine_up, core_lat, kind)
    p.update(nodes_per_pod=per_pod, nodes_per_leaf=per_leaf, spines_per_pod=spines,
             cores_per_plane=cores, leaf_oversubscription=leaf_ratio,
             spine_oversubscription=spine_ratio, leaf_uplink_bandwidth=leaf_up,
             spine_uplink_bandwidth=spine_up, uplink_latency=up_lat, core_latency=core_lat,
             routing=routing, routing_seed=seed)
    return validate(graph)


# --- dragonfly --------------------------------------------------------------------------------

_DRAGONFLY = {"nodes": 16, "groups": 4, "routers_per_group": 4, "nodes_per_router": 1,
              "global_links_per_router": 1, "local_bandwidth": "200 Gbps",
              "global_bandwidth": "200 Gbps", "local_latency": "0.3 us",
              "global_latency": "1 us", "routing": "ideal", "routing_seed": 0,
              "nic_bandwidth": "200 Gbps"}


def dragonfly(**kwargs) -> nx.DiGraph:
    """A dragonfly (Kim, Dally, Scott and Abts, ISCA 2008; HPE Slingshot): groups of routers
    joined all-to-all inside, and global links between groups.

    Machine ``i`` hangs every NIC on router ``router{g}.{r}`` with ``(g, r) =
    divmod(i // nodes_per_router, routers_per_group)``. Inside a group every pair of routers
    has one local link. Each router has ``global_links_per_router`` global ports; a group's
    ``a x h`` ports are shared out evenly over the other groups: every pair of groups gets
    ``m = a h // (groups - 1)`` global links (at least one is required), the ``t``-th between
    groups ``g`` and ``g'`` on router ``(d m + t) mod a`` of ``g``, where ``d = (g' - g - 1) mod
    groups`` (and symmetrically in ``g'``), so a group's links to one group sit on different
    routers (with ``m > a``, cables that land on one router pair are one link of their summed
    bandwidth). Slingshot's Rosetta (64 x 200 Gbps ports) at full scale: 32 routers per group,
    16 endpoint, 31 local and 17 global ports each, up to 545 groups.

    Routing is over minimal paths (local, global, local: at most three switch-to-switch hops).
    ``ideal`` spreads over them (on a dragonfly the spread stages of different flows overlap,
    so it is an optimistic pooling: :attr:`Router.spread_exact` says so); Slingshot's own
    adaptive routing also takes non-minimal paths, which are not modelled.

    Parameters (besides every machine parameter of ``gpu_cluster``)
    ----------------------------------------------------------------
    nodes, groups, routers_per_group, nodes_per_router, global_links_per_router : int
    local_bandwidth, global_bandwidth : bandwidth
    local_latency, global_latency : duration
    routing, routing_seed : see :mod:`simulator.topology.routing`
    """
    mine, machine = _split(kwargs, _DRAGONFLY)
    nodes = _count(mine["nodes"], "nodes")
    groups = _count(mine["groups"], "groups")
    a = _count(mine["routers_per_group"], "routers_per_group")
    per_router = _count(mine["nodes_per_router"], "nodes_per_router")
    h = _count(mine["global_links_per_router"], "global_links_per_router", 0)
    local_bw = _bandwidth(mine["local_bandwidth"], "local_bandwidth")
    global_bw = _bandwidth(mine["global_bandwidth"], "global_bandwidth")
    local_lat = _latency(mine["local_latency"], "local_latency")
    global_lat = _latency(mine["global_latency"], "global_latency")
    routing, seed = _routing(mine["routing"], mine["routing_seed"])
    if nodes > groups * a * per_router:
        raise ConfigError(f"nodes: {nodes} machines need more than the {groups} x {a} routers "
                          f"x {per_router} machines per router")
    m = a * h // (groups - 1) if groups > 1 else 0
    if groups > 1 and m < 1:
        raise ConfigError(f"global_links_per_router: {a} routers x {h} global ports cannot "
                          f"reach the other {groups - 1} groups")
    graph = _machines({**machine, "nodes": nodes}, "dragonfly", {}, _source("dragonfly"))
    p = graph.graph["params"]
    nics, nic_bw, nic_lat, kind = p["nics_per_node"], p["nic_bandwidth"], p["nic_latency"], \
        p["network"]
    for g in range(groups):
        for r in range(a):
            graph.add_node(f"router{g}.{r}", kind="switch")
    for i in range(nodes):
        g, r = divmod(i // per_router, a)
        for k in range(nics):
            add_duplex(graph, f"n{i}.nic{k}", f"router{g}.{r}", nic_bw, nic_lat, kind)
    for g in range(groups):
        for r in range(a):
            for r2 in range(r + 1, a):
                add_duplex(graph, f"router{g}.{r}", f"router{g}.{r2}", local_bw, local_lat, kind)
    for g in range(groups):
        for g2 in range(g + 1, groups):
            d, d2 = (g2 - g - 1) % groups, (g - g2 - 1) % groups
            for t in range(m):
                x, y = f"router{g}.{(d * m + t) % a}", f"router{g2}.{(d2 * m + t) % a}"
                if graph.has_edge(x, y):        # m > a: parallel cables, one wider link
                    for e in ((x, y), (y, x)):
                        graph.edges[e]["bandwidth_bytes_per_s"] += global_bw
                else:
                    add_duplex(graph, x, y, global_bw, global_lat, kind)
    p.update(groups=groups, routers_per_group=a, nodes_per_router=per_router,
             global_links_per_router=h, global_links_per_group_pair=m,
             local_bandwidth=local_bw, global_bandwidth=global_bw, local_latency=local_lat,
             global_latency=global_lat, routing=routing, routing_seed=seed)
    return validate(graph)


_with_signature(rail_optimised, _RAIL)
_with_signature(multi_plane, _MULTI)
_with_signature(three_tier, _CLOS)
_with_signature(dragonfly, _DRAGONFLY)

#: The builders of this module, registered in :data:`simulator.topology.builders.BUILDERS`.
FABRIC_BUILDERS = {"rail_optimised": rail_optimised, "multi_plane": multi_plane,
                   "three_tier": three_tier, "dragonfly": dragonfly}
_builders.BUILDERS.update(FABRIC_BUILDERS)


# --- measures -------------------------------------------------------------------------------

def bisection(graph: nx.DiGraph) -> float:
    """Bytes/s that the first half of the machines (by ``node_index``) can send to the second
    half at once: the max-flow from all NICs of the one half to all NICs of the other over the
    fabric (every link at its bandwidth, NIC links included). For the fabrics here, whose
    halves are symmetric, this is the bisection bandwidth of that cut, one direction."""
    nics = [(n, a["node_index"]) for n, a in graph.nodes(data=True) if a.get("kind") == "nic"]
    machines = sorted({i for _n, i in nics})
    half = set(machines[:len(machines) // 2])
    flow = nx.DiGraph()
    for u, v, attrs in graph.edges(data=True):
        kinds = (graph.nodes[u]["kind"], graph.nodes[v]["kind"])
        if kinds[0] in ("switch", "nic") and kinds[1] in ("switch", "nic"):
            flow.add_edge(u, v, capacity=attrs["bandwidth_bytes_per_s"])
    for n, i in nics:
        if i in half:
            flow.add_edge("_src", n)          # no capacity: unbounded
        else:
            flow.add_edge(n, "_dst")
    return float(nx.maximum_flow_value(flow, "_src", "_dst"))
