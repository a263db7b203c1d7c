"""Topology builders: pure functions from parameters to a validated graph.

Each builder takes keyword parameters, accepts SI numbers or unit strings for every quantity
(``"100 Gbps"``, ``"25 GB/s"``, ``"1 us"``), parses them once at the top (errors name the
parameter), and returns a graph that :func:`~simulator.topology.graph.validate` accepts, with the
resolved SI parameters in ``graph.graph["params"]``. They are registered in :data:`BUILDERS`;
:func:`build` is the string boundary that checks parameter names.

Three families:

* :func:`star`: hosts around one non-blocking switch (the textbook alpha-beta network).
* :func:`fat_tree`: a two-level leaf/spine Clos network of hosts.
* :func:`gpu_cluster`: machines of GPUs with NVSwitch, NVLink or PCIe inside, NICs on PCIe
  switches, a star or fat-tree fabric between machines, and optional dedicated
  parameter-server hosts.
"""

from __future__ import annotations

import inspect
import math
import numbers

import networkx as nx

from simulator.errors import ConfigError, unknown_name
from simulator.topology.devices import SOCKET_LINKS, get_device, socket_link
from simulator.topology.graph import add_duplex, new_graph, validate
from simulator.units import parse_bandwidth, parse_duration

__all__ = ["BUILDERS", "build", "fat_tree", "gpu_cluster", "parameter_names", "star"]

NETWORK_KINDS = ("ethernet", "ib")
INTRA_MODES = ("nvswitch", "nvlink_ring", "nvlink_mesh", "nvlink_all", "pcie")
FABRICS = ("star", "fat_tree")
#: NCCL topology search patterns of the tree graph a machine may end on (``tree_pattern``).
TREE_PATTERNS = ("balanced", "tree")


# --- parameter parsing (errors name the parameter) --------------------------------------------

def _count(value, what: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ConfigError(f"{what}: expected an integer >= {minimum}, got {value!r}")
    return int(value)


def _choice(value, what: str, options) -> str:
    if value not in options:
        raise ConfigError(f"{what}: expected one of {', '.join(options)}, got {value!r}")
    return value


def _bandwidth(value, what: str) -> float:
    return parse_bandwidth(value, what=what)


def _optional_bandwidth(value, what: str) -> float | None:
    return None if value is None else parse_bandwidth(value, what=what)


def _latency(value, what: str) -> float:
    return parse_duration(value, what=what)


def _device(value, what: str):
    try:
        return get_device(value)
    except ConfigError as exc:
        raise ConfigError(f"{what}: {exc}") from None


def _reduce_rate(value, what: str, default: float) -> float:
    """A reduction rate in bytes/s; ``None`` means ``default``; ``"inf"`` means free."""
    if value is None:
        return default
    if value == math.inf or (isinstance(value, str) and value.strip().lower() in ("inf", "free")):
        return math.inf
    return parse_bandwidth(value, what=what)


def _source(builder: str) -> str:
    return f"simulator.topology.builders.{builder} with the parameters in graph['params']"


def _add_endpoint(graph, node, kind, node_index, local_index, reduce_bytes_per_s, device=None):
    attrs = {"kind": kind, "node_index": node_index, "local_index": local_index,
             "reduce_bytes_per_s": float(reduce_bytes_per_s)}
    if device is not None:
        attrs.update(device=device.name,
                     memory_bandwidth_bytes_per_s=device.memory_bandwidth_bytes_per_s)
    graph.add_node(node, **attrs)


# --- star and fat tree ------------------------------------------------------------------------

def star(hosts=8, link_bandwidth="12.5 GB/s", link_latency="1 us", reduce_bandwidth=None,
         kind="ethernet") -> nx.DiGraph:
    """Hosts around one non-blocking switch.

    Nodes ``host0`` .. ``host{H-1}`` (the endpoints) and ``switch``; every host has one
    full-duplex link to the switch, so a host-to-host path is two links and its latency is twice
    ``link_latency``. This is the network of the alpha-beta cost model: alpha = 2 x link_latency,
    beta = 1 / link_bandwidth.

    Parameters
    ----------
    hosts : int
        Number of hosts H >= 1.
    link_bandwidth : bandwidth
        Per direction of each host link, bytes/s or a unit string (default 12.5 GB/s = 100 Gbps).
    link_latency : duration
        Latency of each link, s or a unit string (default 1 us).
    reduce_bandwidth : bandwidth or None
        Rate at which a host sums an incoming message into its buffer, bytes/s of message.
        ``None`` (default) makes reduction free (``math.inf``).
    kind : {"ethernet", "ib"}
        Link kind.

    Returns
    -------
    networkx.DiGraph
        A validated topology.
    """
    hosts = _count(hosts, "hosts")
    bandwidth = _bandwidth(link_bandwidth, "link_bandwidth")
    latency = _latency(link_latency, "link_latency")
    reduce = _reduce_rate(reduce_bandwidth, "reduce_bandwidth", math.inf)
    kind = _choice(kind, "kind", NETWORK_KINDS)
    params = {"hosts": hosts, "link_bandwidth": bandwidth, "link_latency": latency,
              "reduce_bandwidth": reduce, "kind": kind}
    graph = new_graph("star", "star", params, _source("star"))
    for i in range(hosts):
        _add_endpoint(graph, f"host{i}", "host", i, 0, reduce)
    graph.add_node("switch", kind="switch")
    for i in range(hosts):
        add_duplex(graph, f"host{i}", "switch", bandwidth, latency, kind)
    return validate(graph)


def _leaf_spine(graph, ports, per_leaf, spines, port_latency, uplink_bandwidth, uplink_latency,
                kind):
    """Hang ``ports`` (``(node id, bandwidth)``, in order) on leaves of ``per_leaf``; join every
    leaf to every spine with one uplink. Returns the number of leaves."""
    leaves = -(-len(ports) // per_leaf)
    for j in range(leaves):
        graph.add_node(f"leaf{j}", kind="switch")
    for k in range(spines):
        graph.add_node(f"spine{k}", kind="switch")
    for p, (port, bandwidth) in enumerate(ports):
        add_duplex(graph, port, f"leaf{p // per_leaf}", bandwidth, port_latency, kind)
    for j in range(leaves):
        for k in range(spines):
            add_duplex(graph, f"leaf{j}", f"spine{k}", uplink_bandwidth, uplink_latency, kind)
    return leaves


def fat_tree(hosts_per_leaf=4, leaves=4, spines=2, host_bandwidth="100 Gbps",
             host_latency="1 us", uplink_bandwidth="200 Gbps", uplink_latency="1 us", kind="ib",
             reduce_bandwidth=None) -> nx.DiGraph:
    """A two-level leaf/spine (folded Clos) network of hosts.

    Nodes ``host{i}`` (endpoints; host ``i`` hangs on ``leaf{i // hosts_per_leaf}``),
    ``leaf{j}`` and ``spine{k}``. Every leaf has one uplink to every spine, so the
    oversubscription of a leaf is ``hosts_per_leaf * host_bandwidth / (spines *
    uplink_bandwidth)``: traffic leaving a leaf shares ``spines * uplink_bandwidth``. Paths
    between leaves are four links; which spine a pair uses is the router's ECMP hash.
    The defaults (4 x 100 Gbps down, 2 x 200 Gbps up) are non-blocking (1:1).

    Parameters
    ----------
    hosts_per_leaf : int
        Hosts on each leaf switch, >= 1.
    leaves : int
        Number of leaf switches, >= 1.
    spines : int
        Number of spine switches, >= 1.
    host_bandwidth : bandwidth
        Per direction of each host-leaf link (default 100 Gbps = 12.5e9 bytes/s).
    host_latency : duration
        Latency of each host-leaf link (default 1 us).
    uplink_bandwidth : bandwidth
        Per direction of each leaf-spine link (default 200 Gbps).
    uplink_latency : duration
        Latency of each leaf-spine link (default 1 us).
    kind : {"ib", "ethernet"}
        Link kind.
    reduce_bandwidth : bandwidth or None
        Hosts' reduction rate, bytes/s of message; ``None`` (default) means free.

    Returns
    -------
    networkx.DiGraph
        A validated topology.
    """
    hosts_per_leaf = _count(hosts_per_leaf, "hosts_per_leaf")
    leaves = _count(leaves, "leaves")
    spines = _count(spines, "spines")
    host_bw = _bandwidth(host_bandwidth, "host_bandwidth")
    host_lat = _latency(host_latency, "host_latency")
    up_bw = _bandwidth(uplink_bandwidth, "uplink_bandwidth")
    up_lat = _latency(uplink_latency, "uplink_latency")
    kind = _choice(kind, "kind", NETWORK_KINDS)
    reduce = _reduce_rate(reduce_bandwidth, "reduce_bandwidth", math.inf)
    params = {"hosts_per_leaf": hosts_per_leaf, "leaves": leaves, "spines": spines,
              "host_bandwidth": host_bw, "host_latency": host_lat, "uplink_bandwidth": up_bw,
              "uplink_latency": up_lat, "kind": kind, "reduce_bandwidth": reduce}
    graph = new_graph("fat_tree", "fat_tree", params, _source("fat_tree"))
    hosts = [f"host{i}" for i in range(hosts_per_leaf * leaves)]
    for i, host in enumerate(hosts):
        _add_endpoint(graph, host, "host", i, 0, reduce)
    _leaf_spine(graph, [(h, host_bw) for h in hosts], hosts_per_leaf, spines, host_lat, up_bw,
                up_lat, kind)
    return validate(graph)


# --- GPU clusters -----------------------------------------------------------------------------

def _nvlink_pairs(pairs, gpus: int) -> list[tuple[int, int, int]]:
    if not isinstance(pairs, (list, tuple)) or not pairs:
        raise ConfigError("nvlink_pairs: intra='nvlink_mesh' needs a non-empty list of "
                          f"[gpu_a, gpu_b, links]; got {pairs!r}")
    result, seen = [], set()
    for entry in pairs:
        if not isinstance(entry, (list, tuple)) or len(entry) not in (2, 3):
            raise ConfigError(f"nvlink_pairs: each entry is [gpu_a, gpu_b, links]; got {entry!r}")
        a = _count(entry[0], "nvlink_pairs gpu index", 0)
        b = _count(entry[1], "nvlink_pairs gpu index", 0)
        links = _count(entry[2], "nvlink_pairs links", 1) if len(entry) == 3 else 1
        if a >= gpus or b >= gpus or a == b or frozenset((a, b)) in seen:
            raise ConfigError(f"nvlink_pairs: {list(entry)!r} must join two different GPUs in "
                              f"0..{gpus - 1}, each pair once")
        seen.add(frozenset((a, b)))
        result.append((a, b, links))
    return result


def _nic_attach(value, nics: int, switches: int) -> list:
    """PCIe switch index (or ``"bridge"``) of each NIC; default spreads NICs evenly in order."""
    if value is None:
        if switches == 0:
            return ["bridge"] * nics
        return [k * switches // nics for k in range(nics)]
    if not isinstance(value, (list, tuple)) or len(value) != nics:
        raise ConfigError(f"nic_attach: expected a list of {nics} entries (one per NIC), each a "
                          f"PCIe switch index or 'bridge'; got {value!r}")
    for entry in value:
        if entry != "bridge" and not (isinstance(entry, numbers.Integral)
                                      and not isinstance(entry, bool) and 0 <= entry < switches):
            raise ConfigError(f"nic_attach: {entry!r} is neither 'bridge' nor a PCIe switch "
                              f"index in 0..{switches - 1}")
    return list(value)


def _socket_link_bandwidth(value, sockets: int, cpu: str):
    """Per-direction rate of the links between two sockets, bytes/s (None for one socket)."""
    if value is not None:
        return _bandwidth(value, "socket_link_bandwidth")
    if sockets == 1:
        return None
    link = socket_link(cpu)
    if link is None:
        raise ConfigError(f"socket_link_bandwidth: the cpu preset {cpu!r} carries no socket-link "
                          f"figure (presets with one: {', '.join(sorted(SOCKET_LINKS))}); give "
                          f"the rate of its links between sockets, e.g. '38.4 GB/s'")
    return link.bandwidth_bytes_per_s


def gpu_cluster(
    nodes=2, gpus_per_node=8, gpu="a100-sxm4-40gb", reduce_bandwidth=None,
    intra="nvswitch", nvlink_bandwidth="300 GB/s", nvlink_latency="0.5 us", nvlink_pairs=None,
    pcie_bandwidth="31.5 GB/s", pcie_latency="0.5 us", pcie_switches=4,
    host_bridge_bandwidth=None, cpu="cpu-host", sockets=1, socket_link_bandwidth=None,
    nics_per_node=1, nic_bandwidth="200 Gbps", nic_latency="0.35 us", nic_attach=None,
    network="ib", fabric="star", nics_per_leaf=8, spines=2, uplink_bandwidth=None,
    uplink_latency="0.5 us", ps_hosts=0, ps_bandwidth=None, ps_reduce_bandwidth=None,
    p2p=True, transport="rdma", sharp=False, tree_pattern="balanced",
) -> nx.DiGraph:
    """Machines of GPUs joined by a network.

    Inside machine ``i`` (node ids prefixed ``n{i}.``): GPUs ``gpu{j}``; PCIe switches
    ``pcie{k}`` (GPU ``j`` sits under switch ``j * pcie_switches // gpus_per_node``); the host
    bridge ``bridge`` (the CPU's PCIe root complex) above the switches; the CPU ``cpu`` and its
    memory below the bridge; NICs ``nic{k}`` on a PCIe switch or on the bridge. With
    ``pcie_switches = 0`` every GPU and NIC sits directly on a root port of the bridge. With
    ``sockets = S > 1`` the host has S root complexes, ``bridge`` (socket 0) and ``bridge{s}``,
    joined pairwise by ``smp`` links (Intel QPI/UPI) of ``socket_link_bandwidth``; switch ``k``
    hangs under socket ``k * S // pcie_switches`` (without switches GPU ``j`` under socket
    ``j * S // G`` and NIC ``k`` under ``k * S // nics``), so a GPU reaches a GPU or NIC of the
    other socket across the socket link (``SYS`` in ``nvidia-smi topo -m``). ``cpu`` stays the
    machine's CPU as one device (both sockets' compute and memory, on socket 0); ``cpu{s}``
    stands for socket ``s``'s memory (a per-socket share of the preset's bandwidth), where
    transfers between GPUs of socket ``s`` are staged without peer-to-peer. The
    intra-machine GPU fabric is one of:

    * ``"nvswitch"``: every GPU has one link of ``nvlink_bandwidth`` to ``n{i}.nvswitch`` (one
      non-blocking node standing for all NVSwitch chips, as in DGX A100 and HGX H100);
    * ``"nvlink_ring"``: GPU ``j`` linked to GPU ``j+1 mod G``;
    * ``"nvlink_mesh"``: the explicit ``nvlink_pairs``, e.g. DGX-1's hybrid cube-mesh;
    * ``"nvlink_all"``: every pair of GPUs joined directly (GH200 superchips in one machine);
    * ``"pcie"``: no NVLink; GPUs talk over PCIe (through their shared switch, or through the
      host bridge, whose ``throughput_bytes_per_s`` caps everything that crosses it).

    Every GPU also has its PCIe attachment in every mode, so GPU-to-NIC traffic crosses PCIe. A
    GPU-to-GPU route inside a machine is as short over NVSwitch (GPU-switch-GPU) as over a
    shared PCIe switch; the router breaks that tie in favour of NVLink-class links (see
    :mod:`~simulator.topology.routing`), as NCCL does. GPUs never forward traffic, so two GPUs
    without a direct NVLink talk over PCIe.

    Between machines, NIC ``n{i}.nic{k}`` has a full-duplex link of ``nic_bandwidth`` to the
    fabric: one non-blocking ``switch`` (``fabric="star"``) or leaves ``leaf{j}`` holding
    ``nics_per_leaf`` ports each, every leaf linked to every ``spine{k}``
    (``fabric="fat_tree"``). A GPU in machine ``a`` reaches one in machine ``b`` over
    GPU -> PCIe -> NIC -> fabric -> NIC -> PCIe -> GPU. Dedicated parameter servers ``ps{k}``
    (kind ``host``, ``node_index = nodes + k``) hang on the fabric after the NICs; they are not
    endpoints (:func:`~simulator.topology.graph.ps_endpoints` lists them).

    Latency defaults follow NCCL's per-step hardware latencies (``hwLat``, Ring/LL, in NVIDIA/nccl
    ``src/graph/tuning.cc``): GPU-GPU over NVLink 0.47 us (0.5 us here), over PCIe 1.0 us (two
    PCIe links of 0.5 us), over the network 2.7 us (four PCIe links, GPU-switch-NIC on each side,
    plus two NIC links of 0.35 us).

    Parameters
    ----------
    nodes : int
        Number of machines, >= 1.
    gpus_per_node : int
        GPUs per machine G, >= 1.
    gpu : str
        Device preset of the GPUs (:data:`~simulator.topology.devices.DEVICES`).
    reduce_bandwidth : bandwidth or None
        GPUs' reduction rate, bytes/s of message; ``None`` (default) derives it from the preset:
        memory bandwidth / 3 (a sum reads two operands and writes one); ``"inf"`` makes it free.
    intra : {"nvswitch", "nvlink_ring", "nvlink_mesh", "nvlink_all", "pcie"}
        GPU-to-GPU fabric inside a machine (see above).
    nvlink_bandwidth : bandwidth
        Per direction. ``nvswitch``: each GPU's total NVLink bandwidth to the switch (DGX A100:
        12 links x 25 GB/s = 300 GB/s, the default); ``nvlink_ring``: each ring connection;
        ``nvlink_mesh``: ONE link, multiplied by each pair's link count; ``nvlink_all``: each
        pair's connection (all its links together).
    nvlink_latency : duration
        GPU-to-GPU latency over NVLink: one direct link, or the two links through the NVSwitch
        (each gets half). Default 0.5 us.
    nvlink_pairs : list of [int, int, int] or None
        ``intra="nvlink_mesh"`` only: ``[gpu_a, gpu_b, links]`` per connected pair.
    pcie_bandwidth : bandwidth
        Per direction of every PCIe link (device-switch, switch-bridge, device-bridge). Default
        31.5 GB/s = PCIe Gen4 x16 (16 GT/s x 16 lanes x 128/130 / 8); Gen3 x16 is 15.75 GB/s.
    pcie_latency : duration
        Latency of every PCIe link, default 0.5 us.
    pcie_switches : int
        PCIe switches per machine, >= 0; 0 puts GPUs and NICs on root ports of the bridge.
    host_bridge_bandwidth : bandwidth or None
        Aggregate cap on all traffic through ``n{i}.bridge`` (``throughput_bytes_per_s``), e.g.
        GPU-to-GPU copies staged through host memory without PCIe peer-to-peer. ``None``: no cap.
    cpu : str
        Device preset of the host CPU (and of parameter-server hosts); its memory bandwidth is
        the bridge-CPU link.
    sockets : int
        CPU sockets (root complexes) per machine, >= 1 (default 1: one host bridge).
    socket_link_bandwidth : bandwidth or None
        Per direction of the links between two sockets (all QPI/UPI links together);
        ``None`` takes the ``cpu`` preset's figure
        (:data:`~simulator.topology.devices.SOCKET_LINKS`), an error where it has none.
    nics_per_node : int
        NICs per machine, >= 1.
    nic_bandwidth : bandwidth
        Per direction of each NIC's fabric link (default 200 Gbps, InfiniBand HDR).
    nic_latency : duration
        Latency of each NIC-fabric link (default 0.35 us).
    nic_attach : list or None
        PCIe switch index, or ``"bridge"``, of each NIC; ``None`` spreads the NICs evenly over
        the switches in order (NIC ``k`` on switch ``k * pcie_switches // nics_per_node``), or
        puts them on the bridge when there is no switch.
    network : {"ib", "ethernet"}
        Kind of the fabric links (RoCE is ``"ethernet"``).
    fabric : {"star", "fat_tree"}
        Topology of the network between machines.
    nics_per_leaf : int
        ``fat_tree`` only: fabric ports (NICs, then PS hosts) per leaf switch.
    spines : int
        ``fat_tree`` only: number of spine switches.
    uplink_bandwidth : bandwidth or None
        ``fat_tree`` only: per direction of each leaf-spine link; ``None`` makes the tree
        non-blocking (``nics_per_leaf * nic_bandwidth / spines``).
    uplink_latency : duration
        ``fat_tree`` only: latency of each leaf-spine link (default 0.5 us).
    ps_hosts : int
        Dedicated parameter-server hosts on the fabric, >= 0.
    ps_bandwidth : bandwidth or None
        Per direction of each PS host's link; ``None`` means ``nic_bandwidth``.
    ps_reduce_bandwidth : bandwidth or None
        PS hosts' reduction rate; ``None`` derives it from the ``cpu`` preset (memory bw / 3).
    transport : str
        How the NICs move bytes between machines, as NCCL runs it: ``"rdma"`` (NCCL's
        InfiniBand verbs transport, RoCE on Ethernet; the default), ``"tcp"`` (NCCL's socket
        transport), or a named transport of :mod:`simulator.library.netplugins`: ``"ib"``,
        ``"roce"``, ``"efa"`` (AWS EFA of p4d/p4de through aws-ofi-nccl), ``"efa2"`` (EFAv2 of
        p5/p5e), ``"tcpxo"`` (GCP GPUDirect-TCPXO), ``"tcpx"`` (GPUDirect-TCPX), ``"socket"``.
        Recorded for the collective library (its framing, per-message latency and protocols);
        the wires are the same.
    sharp : bool
        The fabric's switches reduce in-network (InfiniBand SHARP; default False). Enables the
        ``collnet`` algorithm in the ``nccl`` library's tuner, as ``NCCL_COLLNET_ENABLE=1``
        with the SHARP plugin does.
    tree_pattern : str
        The tree pattern NCCL's topology search ends on, as ``NCCL_DEBUG=INFO`` prints it
        for the tree graph: ``"balanced"`` (``Pattern 1``, the default) or ``"tree"``
        (``Pattern 3``: every channel's network traffic in and out of one GPU, which NCCL's
        tuner rates 15 % lower). Hopper and later GPUs fall back to it on some machines;
        machines of one GPU always use it. Read by the ``nccl`` library only.
    p2p : bool
        PCIe peer-to-peer between GPUs of a machine (default True). ``False`` (GeForce cards,
        which NVIDIA's drivers do not let write into each other's memory) stages every
        GPU-to-GPU transfer without NVLink through host memory: the router sends it up to the
        machine's ``cpu`` node and down to the receiver (:mod:`~simulator.topology.routing`).

    Returns
    -------
    networkx.DiGraph
        A validated topology.
    """
    nodes = _count(nodes, "nodes")
    gpus = _count(gpus_per_node, "gpus_per_node")
    gpu_device = _device(gpu, "gpu")
    cpu_device = _device(cpu, "cpu")
    gpu_reduce = _reduce_rate(reduce_bandwidth, "reduce_bandwidth", gpu_device.reduce_bytes_per_s)
    intra = _choice(intra, "intra", INTRA_MODES)
    nvlink_bw = _bandwidth(nvlink_bandwidth, "nvlink_bandwidth")
    nvlink_lat = _latency(nvlink_latency, "nvlink_latency")
    if intra == "nvlink_mesh":
        pairs = _nvlink_pairs(nvlink_pairs, gpus)
    elif nvlink_pairs is not None:
        raise ConfigError(f"nvlink_pairs: only used with intra='nvlink_mesh', not {intra!r}")
    else:
        pairs = []
    pcie_bw = _bandwidth(pcie_bandwidth, "pcie_bandwidth")
    pcie_lat = _latency(pcie_latency, "pcie_latency")
    switches = _count(pcie_switches, "pcie_switches", 0)
    bridge_cap = _optional_bandwidth(host_bridge_bandwidth, "host_bridge_bandwidth")
    sockets = _count(sockets, "sockets")
    socket_bw = _socket_link_bandwidth(socket_link_bandwidth, sockets, cpu_device.name)
    nics = _count(nics_per_node, "nics_per_node")
    nic_bw = _bandwidth(nic_bandwidth, "nic_bandwidth")
    nic_lat = _latency(nic_latency, "nic_latency")
    attach = _nic_attach(nic_attach, nics, switches)
    network = _choice(network, "network", NETWORK_KINDS)
    fabric = _choice(fabric, "fabric", FABRICS)
    per_leaf = _count(nics_per_leaf, "nics_per_leaf")
    spines = _count(spines, "spines")
    up_bw = _optional_bandwidth(uplink_bandwidth, "uplink_bandwidth")
    up_bw = per_leaf * nic_bw / spines if up_bw is None else up_bw
    up_lat = _latency(uplink_latency, "uplink_latency")
    ps_count = _count(ps_hosts, "ps_hosts", 0)
    ps_bw = _optional_bandwidth(ps_bandwidth, "ps_bandwidth") or nic_bw
    ps_reduce = _reduce_rate(ps_reduce_bandwidth, "ps_reduce_bandwidth",
                             cpu_device.reduce_bytes_per_s)
    if not isinstance(p2p, bool):
        raise ConfigError(f"p2p: expected true or false, got {p2p!r}")
    transport = _choice(transport, "transport", TRANSPORTS)
    if transport not in ("rdma", "tcp"):
        from simulator.library.netplugins import get_transport

        if network not in get_transport(transport).networks:
            raise ConfigError(f"transport: {transport!r} runs on "
                              f"{' or '.join(get_transport(transport).networks)} networks, not "
                              f"network={network!r}")
    if not isinstance(sharp, bool):
        raise ConfigError(f"sharp: expected true or false, got {sharp!r}")
    tree_pattern = _choice(tree_pattern, "tree_pattern", TREE_PATTERNS)
    params = {
        "nodes": nodes, "gpus_per_node": gpus, "gpu": gpu, "reduce_bandwidth": gpu_reduce,
        "intra": intra, "nvlink_bandwidth": nvlink_bw, "nvlink_latency": nvlink_lat,
        "nvlink_pairs": [list(p) for p in pairs] or None, "pcie_bandwidth": pcie_bw,
        "pcie_latency": pcie_lat, "pcie_switches": switches, "host_bridge_bandwidth": bridge_cap,
        "cpu": cpu, "sockets": sockets, "socket_link_bandwidth": socket_bw,
        "nics_per_node": nics, "nic_bandwidth": nic_bw, "nic_latency": nic_lat,
        "nic_attach": attach, "network": network, "fabric": fabric, "nics_per_leaf": per_leaf,
        "spines": spines, "uplink_bandwidth": up_bw, "uplink_latency": up_lat,
        "ps_hosts": ps_count, "ps_bandwidth": ps_bw, "ps_reduce_bandwidth": ps_reduce,
        "p2p": p2p, "transport": transport, "sharp": sharp, "tree_pattern": tree_pattern,
    }
    graph = new_graph("gpu_cluster", "gpu_cluster", params, _source("gpu_cluster"))
    ports = []
    for i in range(nodes):
        _add_machine(graph, i, gpus, gpu_device, gpu_reduce, cpu_device, intra, nvlink_bw,
                     nvlink_lat, pairs, pcie_bw, pcie_lat, switches, bridge_cap, attach,
                     sockets, socket_bw)
        for k in range(nics):
            graph.add_node(f"n{i}.nic{k}", kind="nic", node_index=i, local_index=k)
            ports.append(f"n{i}.nic{k}")
    for k in range(ps_count):
        _add_endpoint(graph, f"ps{k}", "host", nodes + k, 0, ps_reduce, cpu_device)
    if fabric == "star":
        graph.add_node("switch", kind="switch")
        for port in ports:
            add_duplex(graph, port, "switch", nic_bw, nic_lat, network)
        for k in range(ps_count):
            add_duplex(graph, f"ps{k}", "switch", ps_bw, nic_lat, network)
    else:
        fabric_ports = [(n, nic_bw) for n in ports] + [(f"ps{k}", ps_bw) for k in range(ps_count)]
        _leaf_spine(graph, fabric_ports, per_leaf, spines, nic_lat, up_bw, up_lat, network)
    return validate(graph)


def _add_machine(graph, i, gpus, gpu_device, gpu_reduce, cpu_device, intra, nvlink_bw,
                 nvlink_lat, pairs, pcie_bw, pcie_lat, switches, bridge_cap, attach,
                 sockets=1, socket_bw=None):
    """One machine's GPUs, PCIe tree (one root complex per socket), CPU, NVLink fabric and NIC
    attachments."""
    p = f"n{i}."
    bridges = [f"{p}bridge"] + [f"{p}bridge{s}" for s in range(1, sockets)]
    gpu_socket = [(j * switches // gpus) * sockets // switches if switches
                  else j * sockets // gpus for j in range(gpus)]
    for j in range(gpus):
        _add_endpoint(graph, f"{p}gpu{j}", "gpu", i, j, gpu_reduce, gpu_device)
        if sockets > 1:
            graph.nodes[f"{p}gpu{j}"]["socket"] = gpu_socket[j]
    for s, name in enumerate(bridges):
        where = {"socket": s} if sockets > 1 else {}
        bridge = {"kind": "host_bridge", "node_index": i, **where}
        if bridge_cap is not None:
            bridge["throughput_bytes_per_s"] = bridge_cap
        graph.add_node(name, **bridge)
        # socket 0's memory node is the machine's CPU device; the others are one socket's memory
        share = 1 if s == 0 else sockets
        cpu = f"{p}cpu" if s == 0 else f"{p}cpu{s}"
        device = {"device": cpu_device.name} if s == 0 else {}
        graph.add_node(cpu, kind="cpu", node_index=i, **device, **where,
                       memory_bandwidth_bytes_per_s=cpu_device.memory_bandwidth_bytes_per_s / share,
                       reduce_bytes_per_s=cpu_device.reduce_bytes_per_s / share)
        add_duplex(graph, name, cpu, cpu_device.memory_bandwidth_bytes_per_s / share,
                   pcie_lat, "pcie")
    for s in range(sockets):
        for t in range(s + 1, sockets):
            add_duplex(graph, bridges[s], bridges[t], socket_bw, 0.0, "smp")
    for k in range(switches):
        graph.add_node(f"{p}pcie{k}", kind="pcie_switch", node_index=i)
        add_duplex(graph, f"{p}pcie{k}", bridges[k * sockets // switches], pcie_bw, pcie_lat,
                   "pcie")
    for j in range(gpus):
        parent = f"{p}pcie{j * switches // gpus}" if switches else bridges[gpu_socket[j]]
        add_duplex(graph, f"{p}gpu{j}", parent, pcie_bw, pcie_lat, "pcie")
    for k, where in enumerate(attach):
        parent = (bridges[k * sockets // len(attach)] if where == "bridge"
                  else f"{p}pcie{where}")
        add_duplex(graph, f"{p}nic{k}", parent, pcie_bw, pcie_lat, "pcie")
    if intra == "nvswitch":
        graph.add_node(f"{p}nvswitch", kind="nvswitch", node_index=i)
        for j in range(gpus):
            add_duplex(graph, f"{p}gpu{j}", f"{p}nvswitch", nvlink_bw, nvlink_lat / 2, "nvswitch")
    elif intra == "nvlink_ring":
        ring = {frozenset((j, (j + 1) % gpus)) for j in range(gpus)} if gpus > 1 else set()
        for a, b in sorted(tuple(sorted(pair)) for pair in ring):
            add_duplex(graph, f"{p}gpu{a}", f"{p}gpu{b}", nvlink_bw, nvlink_lat, "nvlink")
    elif intra == "nvlink_all":
        for a in range(gpus):
            for b in range(a + 1, gpus):
                add_duplex(graph, f"{p}gpu{a}", f"{p}gpu{b}", nvlink_bw, nvlink_lat, "nvlink")
    for a, b, links in pairs:
        add_duplex(graph, f"{p}gpu{a}", f"{p}gpu{b}", links * nvlink_bw, nvlink_lat, "nvlink")


#: Transports of ``gpu_cluster`` networks: ``rdma`` (NCCL's IB verbs transport: InfiniBand, or
#: RoCE on Ethernet), ``tcp`` (NCCL's socket transport) and the named transports of
#: :mod:`simulator.library.netplugins` (``ib``, ``roce``, ``efa``, ``efa2``, ``tcpxo``,
#: ``tcpx``, ``socket``, ``slingshot``, ``slingshot-sw``, ``slingshot-rdzv``).
TRANSPORTS = ("rdma", "tcp", "ib", "roce", "efa", "efa2", "tcpxo", "tcpx", "socket",
              "slingshot", "slingshot-sw", "slingshot-rdzv")


BUILDERS = {"star": star, "fat_tree": fat_tree, "gpu_cluster": gpu_cluster}


def parameter_names(builder_name: str) -> list[str]:
    """The parameter names a builder accepts, in signature order."""
    if builder_name not in BUILDERS:
        raise unknown_name("topology builder", builder_name, BUILDERS)
    return list(inspect.signature(BUILDERS[builder_name]).parameters)


def build(builder_name: str, params: dict | None = None) -> nx.DiGraph:
    """Build a topology by builder name; unknown builders and parameter names raise ConfigError.

    ``params`` values may be SI numbers or unit strings; missing ones take the defaults.
    """
    valid = parameter_names(builder_name)
    params = dict(params or {})
    unknown = sorted(set(params) - set(valid))
    if unknown:
        raise ConfigError(f"unknown parameter {', '.join(map(repr, unknown))} for topology "
                          f"builder {builder_name!r}; valid: {', '.join(valid)}")
    from simulator.guard import check_topology

    check_topology(BUILDERS[builder_name], params)
    return BUILDERS[builder_name](**params)
