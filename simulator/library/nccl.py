"""The ``nccl`` library: NVIDIA NCCL's protocols, channels, latencies, NVLS and tuner.

What NCCL adds between an algorithm and the wires, with its constants per NCCL version
(:mod:`simulator.library.nccl_constants`, copied from NVIDIA/nccl's ``src/graph/tuning.cc``):

Protocols
    ``LL`` (8 payload bytes per 16-byte line: flag-based, lowest latency), ``LL128`` (120 per 128:
    on NVLink machines of the generations NCCL enables it for) and ``Simple`` (bulk copies,
    highest per-step latency). Each has a base latency per algorithm (``baseLat``) and a
    per-step latency per link class (``hwLat``: NVLink, PCIe, network), and a bus bandwidth
    that is the wire's times a protocol factor, capped per channel or in total (``llMaxBws``,
    ``perChMax*Bws``).
Channels
    NCCL runs a collective on ``C`` channels; for small messages it uses fewer, dropping one while
    ``bytes < channels x threads x threadThreshold`` (``enqueue.cc``); a channel is one thread
    block, and the links out of a GPU carry at most the call's channels times one channel's
    rate.
Tuner
    For every enabled (algorithm, protocol), NCCL predicts ``latency + bytes / bandwidth`` and
    runs the fastest (``ncclTopoGetAlgoTime``). :meth:`NcclLibrary.tune` does the same with the
    same constants; forcing an algorithm or protocol mirrors ``NCCL_ALGO`` / ``NCCL_PROTO``.
Algorithms
    ``ring``; ``tree`` (NCCL's double binary tree: the ``double_binary_tree`` schedule pipelined
    in the protocol's step size); ``nvls`` (NVLink SHARP, NVSwitch machines of Hopper and later:
    the switch reduces and multicasts, which is exactly an in-switch parameter server: the
    ``ps`` schedule with the NVSwitch as its one server, push and pull overlapped, reduction
    free).

How the engine sees it (one mechanism for every engine method): :meth:`NcclLibrary.plan` writes
the chosen protocol's costs into a copy of the topology, as data:

* every link's bandwidth x the link class's achievable fraction (NCCL's own link rates against
  the nominal ones: NVLink ``SMxx_NVLINK_BW`` per link, PCIe ``width x speed / 80``; the
  network at its port speed, as NCCL takes it) x the protocol's factor and caps; and every
  link out of a GPU at most the call's channels times one channel's rate (a channel is one
  thread block: ring and tree, on one machine or across machines);
* the per-step latency on the links: a GPU's outgoing links carry the intra-node step latency,
  a NIC's link into the fabric the rest of the network step latency, every other link zero, so
  that a step inside a machine costs ``hwLat[intra]`` and one across machines ``hwLat[net]``;
* the base latency once per call (``fixed_time_s``), and the host's launch time
  (:mod:`simulator.library.launch`).

The engine then runs the schedule step-synchronously on that graph: for a ring this is
``nsteps x (syncs x step latency + chunk / rate)``, with contention, channel placement on NICs
and every link's real rate from the simulation instead of a formula. ``syncs`` and the rate
inside a machine come from NCCL's data path (:mod:`simulator.library.datapath`): every slice of
every ring loop waits and posts once (two per step for Simple up to a few hundred MiB, more
beyond), and a small call runs on fewer channels, each at one channel's rate. NCCL's tuner line
is the special case of one sync per step on every channel; the tuner still chooses the
(algorithm, protocol) by that line, as NCCL does.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import networkx as nx

from ..errors import ConfigError
from ..topology.graph import endpoints
from ..topology.rings import ring_orders
from ..topology.routing import Router
from . import nccl_env
from .base import Plan
from .launch import LAUNCH_COSTS, parse_launch
from .transport import NETWORK_LINK_KINDS, framing
from .netplugins import (HOST_STAGED_CHANNEL_BYTES_PER_S, NcclSettings, handshake_latency_us,
                         host_copy_us, host_staged, message_extra_us, nccl_settings,
                         net_post_overhead_us, network_step_latency_us, plugin_tuner_applies,
                         proxy_step_us)
from .ofi_regions import region_choice
from .machine import MachineFacts, log2i, machine_facts, node_index_slot
from .datapath import (LL128_RING_CHANNEL_RATE, THREAD_THRESHOLD, THREADS, DataPath,
                       proxy_round_floor_us,
                       nvls_fill_s, planned_channels, ring_datapath, runtime_channels,
                       tree_chunk_bytes, tuned_channels)
from .nccl_constants import (NVLINK_PER_LINK, PAYLOAD_FRACTION, PCIE_EFFICIENCY, PROTOCOLS,
                             NcclVersion, get_version, per_channel_cap, release_number,
                             inter_cpu_GBps)

#: User-facing algorithm names and the NCCL algorithm each is.
NCCL_ALGORITHM = {"ring": "ring", "tree": "tree", "double_binary_tree": "tree",
                  "two_tree": "tree", "nvls": "nvls", "nvls_tree": "nvls_tree",
                  "collnet": "collnet_direct"}
#: The registered schedule the engine runs for each NCCL algorithm.
SCHEDULE = {"ring": "ring", "tree": "double_binary_tree", "nvls": "nvls_tree",
            "nvls_tree": "nvls_tree", "collnet_direct": "collnet"}

#: NCCL threads per block by protocol and bytes per thread below which a channel is dropped:
#: :data:`simulator.library.datapath.THREADS`, :data:`~simulator.library.datapath.THREAD_THRESHOLD`.
#: Collectives whose ring NCCL runs through the data path of :mod:`simulator.library.datapath`.
DATAPATH_COLLECTIVES = ("allreduce", "allgather", "reduce_scatter")

#: Bus bandwidth NCCL's graph search gives one channel on a single machine without NVSwitch
#: (PCIe, NVLink meshes and rings), GB/s; the count of channels follows as total / per-channel,
#: at least 2, at most ``MAXCHANNELS`` 32. NVSwitch machines and machines joined by a network
#: take the search's own answer (:meth:`NcclLibrary._search`: :func:`nvswitch_search`, one
#: channel per NIC at :func:`search_speed`).
CHANNEL_SPEED = {"volta": 20.0, "ampere": 20.0, "hopper": 40.0, "blackwell": 40.0}
MAX_CHANNELS = 32
MAX_TREE_SEGMENTS = 64
#: The first NCCL release with trees: 2.4.2-1 "Add tree algorithms for allreduce to improve
#: performance at scale" (NVIDIA/nccl commit 1450d426, 2018-12-13; v2.3.7-1 has no tree code).
#: An older release the model runs on its oldest table (2.5) keeps NCCL's rings only.
TREES_SINCE = (2, 4)
#: Smallest pipeline segment of a tree in the engine (finer than NCCL's chunks, so that the
#: engine's bandwidth term is the pipelined rate NCCL's model assumes; NCCL's own shortfall
#: for mid sizes is its treeCorrectionFactor, applied to the rate).
TREE_SEGMENT_BYTES = 4096
#: Payload one trip of an LL thread block forwards: every thread one 16-byte line carrying 8
#: bytes of data (``NCCL_LL_MAX_NTHREADS`` 512 threads x ``EltPerLine`` 8 bytes; NVIDIA/nccl
#: v2.27.7-1 ``src/device/prims_ll.h`` ``LLGenericOp``: ``eltPerTrip = nthreads*EltPerLine``).
LL_TRIP_BYTES = THREADS["LL"] * 8
#: NVLS moves data in chunks of ``NCCL_NVLS_CHUNKSIZE``, default 128 KiB
#: (``src/transport/nvls.cc``, 2.30.7); the engine pipelines at most MAX_TREE_SEGMENTS of them.
NVLS_CHUNK_BYTES = 128 * 1024
#: CollNet Direct's chunks: NCCL halves them while a message has fewer than a few per channel
#: and head, down to 128 KiB (``src/enqueue.cc``, 2.30.7); the engine pipelines at that size.
COLLNET_CHUNK_BYTES = 128 * 1024

#: What NCCL's tuner keeps of a tree's bus bandwidth when its search ended on the plain tree
#: pattern (``busBw *= .85``, ``src/graph/tuning.cc`` v2.18.3-1:183 to 2.30.7:336); see
#: :meth:`NcclLibrary._tree_pattern_factor`.
TREE_PATTERN_FACTOR = 0.85

#: A NIC's port speed carries payload at the transport's framing efficiency
#: (:mod:`simulator.library.transport`: InfiniBand RC 99.4 %, RoCEv2 98.0 %, TCP over Ethernet
#: 94.1 %), which NCCL's tuner does not model (``net.bw = mbps / 8000``, ``src/graph/topo.cc``)
#: but the wire imposes.


@dataclass(frozen=True)
class Candidate:
    """One (algorithm, protocol) as NCCL's tuner sees it for one call."""

    algorithm: str
    protocol: str
    channels: int
    latency_us: float
    busbw_GBps: float
    algbw_GBps: float
    predicted_time_us: float
    intra_latency_us: float
    inter_latency_us: float
    wire_busbw_GBps: float
    steps_latency_us: float = 0.0
    nsteps: int = 0
    #: The latency the call's time is charged (us) where it differs from the tuner's
    #: ``latency_us`` (see :meth:`NcclLibrary._latency`); None: the tuner's.
    time_latency_us: float | None = None
    #: The bandwidth NCCL's graph search gives one of its channels, GB/s (NcclLibrary._search).
    channel_speed_GBps: float = 0.0

    @property
    def charged_latency_us(self) -> float:
        """The latency charged as time: the tuner's unless :attr:`time_latency_us` says
        otherwise."""
        return self.latency_us if self.time_latency_us is None else self.time_latency_us


def nvlink_efficiency(cc: int) -> float:
    """NCCL's per-link NVLink rate over the nominal one for a compute capability."""
    for minimum, nccl_gbps, nominal_gbps in NVLINK_PER_LINK:
        if cc >= minimum:
            return nccl_gbps / nominal_gbps
    return NVLINK_PER_LINK[-1][1] / NVLINK_PER_LINK[-1][2]


#: The speeds NCCL's graph search tries for a channel across machines, fastest first, GB/s
#: (``speedArrayInter`` and, from compute capability 9.0, ``sm90SpeedArrayInter``;
#: ``src/graph/search.cc`` v2.18.3-1 to 2.30.7).
SEARCH_SPEEDS_INTER = (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0,
                       4.0, 3.0, 2.4, 1.2, 0.24, 0.12)
SEARCH_SPEEDS_INTER_SM90 = (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0,
                            6.0, 3.0, 2.4, 1.2, 0.24, 0.12)


#: Relative slack for :func:`search_speed` (rounded preset bandwidths).
SEARCH_SPEED_SLACK = 0.01


#: The speeds NCCL's graph search tries for a channel inside a machine, fastest first, GB/s
#: (``speedArrayIntra``, ``sm90SpeedArrayIntra``; ``sm100SpeedArrayIntra`` from 2.25, which
#: 2.27 extends by 18 and 2.29 by 45: ``src/graph/search.cc`` v2.18.3-1 .. 2.30.7).
SEARCH_SPEEDS_INTRA = (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0)
SEARCH_SPEEDS_INTRA_SM90 = (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0)
SEARCH_SPEEDS_INTRA_SM100 = (
    ((2, 29), (90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0)),
    ((2, 27), (90.0, 80.0, 70.0, 60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0)),
    ((2, 25), (90.0, 80.0, 70.0, 60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 19.0)),
)


def inter_search_speeds(compute_capability: int) -> tuple:
    """The speed table NCCL searches across machines with on these GPUs (see
    :func:`search_speed` for Blackwell's)."""
    return SEARCH_SPEEDS_INTER_SM90 if compute_capability >= 90 else SEARCH_SPEEDS_INTER


def raise_speed(speed: float, table: tuple, fits, ceiling: float = math.inf) -> float:
    """Pass 2 of NCCL's search: from ``speed`` up through the faster entries of ``table``
    while each one ``fits`` and the speed reached is still below ``ceiling``."""
    for faster in sorted(s for s in table if s > speed):
        if speed >= ceiling or not fits(faster):
            break
        speed = faster
    return speed


def intra_search_speeds(compute_capability: int, release: tuple) -> tuple:
    """The intra-machine speed table NCCL ``release`` searches with on these GPUs."""
    if compute_capability >= 100:
        for first, table in SEARCH_SPEEDS_INTRA_SM100:
            if tuple(release) >= first:
                return table
    return SEARCH_SPEEDS_INTRA_SM90 if compute_capability >= 90 else SEARCH_SPEEDS_INTRA


def dup_channels(channels: int, speed: float, compute_capability: int,
                 max_channels: int) -> tuple[int, float]:
    """``ncclTopoDupChannels`` (``search.cc``): a search ending at 25 GB/s a channel or more
    doubles its channels at half the speed, except on GPUs above compute capability 8.0
    running more than 4 channels below 50 GB/s; at most the search's ``max_channels``."""
    if speed < 25.0 or (compute_capability > 80 and speed < 50.0 and channels > 4):
        return channels, speed
    doubled = min(2 * channels, max_channels)
    return doubled, speed / math.ceil(doubled / channels)


def nvswitch_search(total_GBps: float, compute_capability: int, release: tuple,
                    max_channels: int) -> tuple[int, float]:
    """(channels, GB/s each) of NCCL's ring search on one NVSwitch machine whose GPUs each
    reach the switch at ``total_GBps`` (``ncclTopoCompute``): the first speed of the table not
    above it with as many channels as fit, slower speeds while that falls short (pass 1),
    :func:`dup_channels`, then pass 2 raises the speed while the channels still fit. 8 H100 (370.8 GB/s): 6 x 60 -> 12 x 30 (NCCL
    runs twice that, 24: ``channel{Lo..Hi}={0..23}`` in NCCL 2.30.7's printed choices for
    8 H100, rakshithvasudev.github.io "Inside NCCL's all-reduce"); 8 A100 (240): 6 x 40 ->
    12 x 20; 8 B200 (721.8): 8 x 90 -> 16 x 45 (32: "32 coll channels", NVIDIA/nccl #1646,
    DGX B200, 2.25.1); 8 H800 (8 links, 164.8): 2 x 60 falls short, 4 x 40 is more, doubled
    to 8 x 20 ("16 coll channels", NCCL 2.18.3 on an Inspur NF5688M7, stored log id
    24836070500)."""
    table = intra_search_speeds(compute_capability, release)
    room = total_GBps * (1 + SEARCH_SPEED_SLACK)
    fitting = [speed for speed in table if speed <= room] or [table[-1]]

    def fit(speed: float) -> int:
        return max(1, min(max_channels, int(room // speed)))

    # pass 1: the first speed, then slower ones while they are above 0.49 of the best so far
    # and the best falls short of the GPU's total (``speedArray[speedIndex+1] / bwInter >
    # .49``); a slower speed replaces the best only with more bandwidth in all
    speed = fitting[0]
    for slower in fitting[1:]:
        if fit(speed) * speed >= total_GBps or slower / speed <= 0.49:
            break
        if fit(slower) * slower > fit(speed) * speed:
            speed = slower
    channels, speed = dup_channels(fit(speed), speed, compute_capability, max_channels)
    return channels, raise_speed(speed, table, lambda faster: channels * faster <= room)


def tree_speed_two_machines(speed: float, channels: int, intra_GBps: float,
                            compute_capability: int) -> float:
    """A two-machine tree channel's speed inside a machine: NCCL's search (pass 2) raises
    ``bwIntra`` through its speed table while it is below twice the network's ``speed`` and
    the GPUs' NVLink still carries the channels (``search.cc`` "increase bwIntra for trees (2
    nodes or collnet)"): A100 with 200 Gb/s NICs 24 -> 30, p4d 12 -> 24, H100 with 400 Gb/s
    NICs stays at 48 (the table's first entry)."""
    room = intra_GBps * (1 + SEARCH_SPEED_SLACK)
    return raise_speed(speed, inter_search_speeds(compute_capability),
                       lambda faster: max(1, channels - 1) * faster <= room, ceiling=2 * speed)


def search_speed(path_GBps: float, compute_capability: int) -> float:
    """The channel speed NCCL's graph search settles on for a path of ``path_GBps`` to a NIC:
    the fastest of its speed table not above it (``while (speedArray[speedIndex] > maxBw
    ...) speedIndex++``; ``search.cc``), the slowest entry at least. Blackwell's own table
    (``sm100SpeedArrayInter``, 2.25 on) is Hopper's up to 48 GB/s except 47.9 in 2.27; its
    entries above 48 (96, 86, 80 from 2.28, for 800 Gb/s NICs) are not modelled: no preset has
    such NICs. NCCL 2.22.3's printed
    predictions for 8 x 200 Gb/s NICs (NVIDIA/nccl issue #1453) carry 8 x 24 GB/s. A path within
    :data:`SEARCH_SPEED_SLACK` below an entry takes it: NCCL reads its PCIe rate from the
    link's generation and width (Gen4 x16: exactly 24 GB/s), a preset's PCIe bandwidth is
    rounded (``31.5 GB/s`` gives 23.99)."""
    table = inter_search_speeds(compute_capability)
    return next((speed for speed in table if speed <= path_GBps * (1 + SEARCH_SPEED_SLACK)),
                table[-1])


def link_efficiency(kind: str, facts: MachineFacts) -> float:
    """Achievable fraction of a link's nominal rate, as NCCL's topology model takes it."""
    if kind in ("nvlink", "nvswitch"):
        return nvlink_efficiency(facts.compute_capability)
    if kind == "pcie":
        return PCIE_EFFICIENCY
    if kind in NETWORK_LINK_KINDS:
        return framing(kind, facts.transport).efficiency
    return 1.0


def link_rate(kind: str, bandwidth_bytes_per_s: float, facts: MachineFacts,
              release: tuple | None = None) -> float:
    """A link's rate as NCCL's topology model takes it, bytes/s: the nominal rate times
    :func:`link_efficiency`; a link between CPU sockets (``smp``) at NCCL's inter-CPU bandwidth
    of the host's CPU class (``topo.h``), at most its nominal rate.

    The libraries pass no ``release``: the newest table's figure stands for the hardware
    whatever NCCL runs on it, as :data:`PCIE_EFFICIENCY` does for PCIe. Older tables are
    NCCL's earlier estimates of the same sockets (Skylake 9.0 before 2.18, 10.0 after;
    Sapphire and Emerald Rapids classed as Skylake before 2.26), which steer its search but
    do not slow the wires; ``release`` reads them."""
    if kind == "smp":
        return min(bandwidth_bytes_per_s, inter_cpu_GBps(facts.cpu_family, release) * 1e9)
    return bandwidth_bytes_per_s * link_efficiency(kind, facts)


def tree_chains(graph: nx.DiGraph, gpus: int, channels: int, local: int,
                one_machine: bool = False) -> list | None:
    """Each tree channel's chain through a machine (local GPU indices, head first) as NCCL
    builds it, or None where that is the default rotation (``c x local // channels`` onwards).

    NCCL's trees follow the channels its search found (``src/graph/search.cc``: every channel
    starts at a NIC, enters the machine through a GPU on the best path from it and visits the
    GPUs over the best links; ``src/graph/connect.cc`` chains a machine's ranks in the tree
    graph's ``intra`` order, v2.18.3-1 lines 37-57). On machines whose GPUs
    are joined point to point (a DGX-1's NVLink cube-mesh) these are the NIC-local NVLink paths
    of :func:`simulator.topology.rings.ring_orders`, never a PCIe hop between GPUs; they
    replace the rotation where it would hop between two GPUs without a direct link (a
    DGX-1's 3 -> 4). Elsewhere (NVSwitch machines, all-to-all NVLink, PCIe-only boxes) the
    rotation stands, except that a head farther from every NIC than its machine's closest
    GPUs (eight GPUs sharing one NIC) becomes the next GPU in chain order that is closest, not
    one across the host bridge or the CPU sockets.

    ``one_machine``: a call inside one machine, whose tree NCCL searches over the GPUs' links
    alone (no NIC): on a point-to-point machine the chains are its NVLink rings
    (:func:`~simulator.topology.rings.ring_orders`' ``nvlink-rings``) opened at their first
    GPU; anywhere else the rotation stands.
    """
    default = [[(c * local // channels + i) % local for i in range(local)]
               for c in range(channels)]
    machine = endpoints(graph)[:gpus][:local]
    if not machine:
        return None
    direct = all(graph.has_edge(machine[a], machine[b])
                 for chain in default for a, b in zip(chain, chain[1:]))
    plan = ring_orders(graph, gpus) if not direct else None
    method = "nvlink-rings" if one_machine else "nic-paths"
    if plan is not None and plan.method == method and plan.orders:
        chains = [list(plan.orders[c % len(plan.orders)][:local]) for c in range(channels)]
        if all(sorted(chain) == list(range(local)) for chain in chains):
            return None if chains == default else chains
    if one_machine:
        return None
    # hops to the machine's nearest NIC, as the ring search ranks GPUs for a NIC
    index = graph.nodes[machine[0]].get("node_index", 0)
    nics = [n for n, a in graph.nodes(data=True)
            if a.get("kind") == "nic" and a.get("node_index") == index]
    if not nics:
        return None
    router = Router(graph)
    hops = {gpu: min(router.path(gpu, nic).hops for nic in nics) for gpu in machine}
    best = min(hops.values())
    chains = []
    for chain in default:
        step = next(k for k in range(local) if hops[machine[chain[k]]] == best)
        chains.append(chain[step:] + chain[:step])
    return None if chains == default else chains


def store_cost_graph(cache: dict, key, graph: nx.DiGraph, out: nx.DiGraph, library: str,
                     cap_scale: float = 1.0) -> nx.DiGraph:
    """Finish a library's costed copy ``out`` of ``graph``: every PCIe switch's aggregate cap
    at NCCL's PCIe efficiency (times ``cap_scale``), the library's name on the graph; kept in
    ``cache`` under ``key`` (at most 64 graphs) and returned."""
    for node, attrs in out.nodes(data=True):
        if attrs.get("throughput_bytes_per_s"):
            attrs["throughput_bytes_per_s"] = (graph.nodes[node]["throughput_bytes_per_s"]
                                               * PCIE_EFFICIENCY * cap_scale)
    out.graph["library"] = library
    if len(cache) > 64:
        cache.clear()
    cache[key] = (graph, out)
    return out


class NcclLibrary:
    """NCCL's cost model, tuner and protocol costs (see the module docstring).

    Parameters
    ----------
    version : str or None
        NCCL version whose constants to use (``"2.18"``, ``"2.5.6"``); default the newest.
    launch : str, Launch or None
        How calls are issued (:func:`~simulator.library.launch.parse_launch`); default ``mpi``.
    costs : dict or None
        Overrides of the launch costs (:data:`~simulator.library.launch.LAUNCH_COSTS`).
    scale : dict or None
        Calibrated multipliers: ``latency`` (every NCCL latency) and ``bandwidth`` (every link
        rate), 1.0 by default; what ``clustersim calibrate`` fits.
    """

    name = "nccl"
    summary = "NVIDIA NCCL: LL/LL128/Simple protocols, channels, per-step latencies, NVLS, tuner"

    def __init__(self, version=None, launch=None, costs: dict | None = None,
                 scale: dict | None = None, channels=None):
        self.version: NcclVersion = (version if isinstance(version, NcclVersion)
                                     else get_version(version))
        # the run's channel bounds (least, most): NCCL_MIN_NCHANNELS / NCCL_MIN_CTAS and
        # NCCL_MAX_NCHANNELS / NCCL_MAX_CTAS (nccl_env.channel_bounds)
        self.channel_bounds = _channel_bounds(channels)
        # the release asked for ((major, minor)): a platform's documented NCCL environment
        # follows it (netplugins.NcclSettings), where the constants follow the nearest table
        self.release: tuple = _release(version, self.version)
        self.launch = launch
        self.costs = {**LAUNCH_COSTS, **(costs or {})}
        self.scale = {"latency": 1.0, "bandwidth": 1.0, **(scale or {})}
        self._graphs: dict = {}

    def describe(self) -> str:
        return f"{self.summary} (constants of NCCL {self.version.name})"

    # -- what NCCL's graph search would find -------------------------------------------------
    def _bandwidths(self, graph: nx.DiGraph, gpus: int, facts: MachineFacts):
        """(intra, inter, channels): per-GPU bus bandwidth inside a machine, per-machine
        network bandwidth (GB/s, NCCL's achievable link rates) and NCCL's channel count (the
        graph search's; it runs twice that). :meth:`_search` adds the speed of a channel."""
        intra, inter, channels, _, _ = self._search(graph, gpus, facts)
        return intra, inter, channels

    def _search(self, graph: nx.DiGraph, gpus: int, facts: MachineFacts):
        """(intra, inter, channels, speed, tree_speed): :meth:`_bandwidths` and the bandwidth
        NCCL's graph search gives one of its ring and tree channels, GB/s. On one NVSwitch
        machine that is :func:`nvswitch_search`; across machines each NIC carries one ring
        channel at :func:`search_speed` (more where the port takes several) until the channels
        reach a GPU's total bandwidth (NVLink, or PCIe without it; one GPU a machine: its
        PCIe link), then :func:`dup_channels` (8 NICs of 200 Gb/s: 8 x 24, which NCCL runs
        as "16 coll channels" in NVIDIA/nccl issue #1453). A tree over two machines raises its
        channels' speed inside the machines up to twice the network's (``search.cc`` "increase
        bwIntra for trees (2 nodes or collnet)"): :func:`tree_speed_two_machines`. Other
        machines: ``CHANNEL_SPEED``."""
        eps = endpoints(graph)[:gpus]
        intra = self._intra_total(graph, eps, facts)
        inter = math.inf
        first = graph.nodes[eps[0]].get("node_index", 0)
        nics = [n for n, a in graph.nodes(data=True)
                if a.get("kind") == "nic" and a.get("node_index") == first]
        cc = facts.compute_capability
        most = max(1, self.version.max_channels // 2)
        ports = [self._nic_rate(graph, nic) for nic in nics] if facts.nodes > 1 else []
        if any(ports):
            # NCCL's view of a NIC: its port's nominal rate (``net.bw = mbps / 8000``,
            # ``topo.cc``; no framing) and the PCIe path to it at NCCL's PCIe rate; the graph
            # search then runs each NIC's channel at the fastest speed of its table that fits
            # (:func:`search_speed`)
            inter = sum(search_speed(min([port] + [
                graph.edges[nic, v]["bandwidth_bytes_per_s"] / 1e9
                * link_efficiency(graph.edges[nic, v].get("kind"), facts)
                for v in graph.successors(nic)
                if graph.edges[nic, v].get("kind") not in NETWORK_LINK_KINDS]), cc)
                for nic, port in zip(nics, ports) if port)
            speed = inter / len(nics)
            per_nic = [max(1, int(port * (1 + SEARCH_SPEED_SLACK) // speed)) for port in ports]
            # the search stops once its channels reach a GPU's total bandwidth (``totalBw``:
            # its NVLink, or its PCIe without NVLink); a GPU's PCIe link carries the channels
            # whose NIC is its own, so with one GPU a machine every channel goes through it
            fit = max(1, math.ceil(intra / speed - SEARCH_SPEED_SLACK))
            pcie = self._gpu_pcie_rate(graph, eps[0])
            if pcie:
                fit = min(fit, max(1, int(max(1.0, facts.ranks_per_node)) * max(
                    1, int(pcie * (1 + SEARCH_SPEED_SLACK) // speed))))
            channels = min(most, sum(per_nic), max(1, fit))
            inter = channels * speed
            channels, speed = dup_channels(channels, speed, cc, most)
            tree_speed = (tree_speed_two_machines(speed, channels, intra, cc)
                          if facts.nodes == 2 else speed)
            return intra, inter, channels, speed, tree_speed
        elif facts.nodes == 1:
            channels, speed = self._machine_search(intra, facts)
            intra = channels * speed if facts.nvswitch and facts.intra_hw == "nvlink" else intra
            return intra, inter, channels, speed, speed
        channels, speed = self._machine_search(intra, facts, nvswitch=False)
        return intra, inter, channels, speed, speed

    def _machine_search(self, intra_GBps: float, facts: MachineFacts,
                        nvswitch: bool = True) -> tuple[int, float]:
        """(channels, GB/s each) of NCCL's ring search inside one machine whose GPUs each reach
        the others at ``intra_GBps``: :func:`nvswitch_search` on an NVSwitch machine (unless
        ``nvswitch`` is False), else ``CHANNEL_SPEED`` of the GPU's generation."""
        if nvswitch and facts.nvswitch and facts.intra_hw == "nvlink":
            return nvswitch_search(intra_GBps, facts.compute_capability, self.release,
                                   max(1, self.version.max_channels // 2))
        speed = CHANNEL_SPEED[facts.generation]
        return min(MAX_CHANNELS, max(2, int(math.ceil(intra_GBps / speed - 1e-9)))), speed

    @staticmethod
    def _intra_total(graph: nx.DiGraph, eps: list, facts: MachineFacts) -> float:
        """The bandwidth, GB/s, with which the slowest GPU of the first machine reaches the
        others at NCCL's link rates: its NVLink (NVSwitch) links, or its PCIe link without
        NVLink, at most the throughput of the node it reaches them through (1.0 when none)."""
        intra = math.inf
        for e in eps[:max(1, int(facts.ranks_per_node))]:
            total = 0.0
            for v in graph.successors(e):
                kind = graph.edges[e, v].get("kind")
                if (facts.intra_hw == "nvlink") == (kind in ("nvlink", "nvswitch")):
                    total += graph.edges[e, v]["bandwidth_bytes_per_s"] * link_efficiency(
                        kind, facts)
                    cap = graph.nodes[v].get("throughput_bytes_per_s")
                    if cap:
                        total = min(total, cap * PCIE_EFFICIENCY)
            intra = min(intra, total / 1e9)
        return intra if math.isfinite(intra) and intra > 0 else 1.0

    def _block_speed(self, graph: nx.DiGraph, gpus: int, facts: MachineFacts,
                     search_GBps: float) -> float:
        """The speed, GB/s, of one channel's copies between two GPUs of one machine: the speed
        NCCL's search gives one channel of that machine on its own (:meth:`_machine_search`),
        or ``search_GBps``, the call's own graph channel, where that is faster (a tree over two
        machines raises it). A graph across machines slows its channels to the NIC's speed
        (``search.cc``: one speed for ``bwIntra`` and ``bwInter``); that is a bandwidth budget
        the NIC sets, not the rate at which a thread block copies inside the machine."""
        machine = self._machine_search(
            self._intra_total(graph, endpoints(graph)[:gpus], facts), facts)[1]
        return max(machine, search_GBps)

    @staticmethod
    def _gpu_pcie_rate(graph: nx.DiGraph, gpu) -> float:
        """A GPU's PCIe link at NCCL's PCIe rate, GB/s (0 when it has none)."""
        rates = [graph.edges[gpu, v]["bandwidth_bytes_per_s"] * PCIE_EFFICIENCY
                 for v in graph.successors(gpu) if graph.edges[gpu, v].get("kind") == "pcie"]
        return max(rates) / 1e9 if rates else 0.0

    @staticmethod
    def _nic_rate(graph: nx.DiGraph, nic) -> float:
        """A NIC's port rate as NCCL reads it, GB/s (nominal, ``mbps / 8000``)."""
        rates = [graph.edges[nic, v]["bandwidth_bytes_per_s"] for v in graph.successors(nic)
                 if graph.edges[nic, v].get("kind") in NETWORK_LINK_KINDS]
        return min(rates) / 1e9 if rates else 0.0

    # -- the tuner ------------------------------------------------------------------------
    def candidates(self, graph: nx.DiGraph, collective: str, size_bytes: int, gpus: int,
                   *, facts: MachineFacts | None = None) -> list[Candidate]:
        """Every enabled (algorithm, protocol) with NCCL's predicted time, fastest first."""
        facts = facts or machine_facts(graph, gpus)
        v = self.version
        n, nodes = facts.ranks, facts.nodes
        if n <= 1:
            return [Candidate("ring", "Simple", 1, 0.0, math.inf, math.inf, 0.0, 0.0, 0.0,
                              math.inf)]
        intra_bw, inter_bw, channels, channel_speed, tree_speed = self._search(graph, gpus,
                                                                             facts)
        wire = intra_bw if nodes == 1 else min(intra_bw, inter_bw)
        slot = node_index_slot(nodes)
        gen = facts.generation
        ll_row = gen if nodes == 1 else facts.cpu_vendor
        ll_max = v.ll_max_busbw.get(ll_row, (math.inf,) * 3)[slot]
        nsteps = (2 * (n - 1) if collective == "allreduce" else
                  n - 1 if collective in ("reduce_scatter", "allgather") else n)
        ppn = facts.ranks_per_node
        settings = self._settings(facts)
        enabled = settings.protocols if settings is not None else None
        algorithms = settings.algorithms if settings is not None else None
        out = []
        for algo in ("tree", "ring", "nvls", "nvls_tree", "collnet_direct"):
            if algo == "tree" and (collective != "allreduce" or self.release < TREES_SINCE):
                continue
            if algorithms is not None and algo not in algorithms:
                continue          # the platform's documented NCCL_ALGO / NCCL_NVLS_ENABLE
            if algo == "collnet_direct" and not (collective == "allreduce" and facts.sharp
                                                 and nodes > 1 and v.number >= (2, 12)):
                continue
            if algo in ("nvls", "nvls_tree") and not (
                    collective == "allreduce" and v.nvls and facts.nvswitch
                    and facts.local_ranks_min >= v.nvls_min_local_gpus
                    and (nodes == 1) == (algo == "nvls") and gen in v.nvls_generations):
                continue
            for p_index, proto in enumerate(PROTOCOLS):
                if algo in ("nvls", "nvls_tree", "collnet_direct") and proto != "Simple":
                    continue
                if proto == "LL128" and not self._ll128_enabled(facts):
                    continue
                if enabled is not None and proto not in enabled:
                    continue      # the platform's documented NCCL_PROTO leaves it out
                # NCCL's tuner takes the graph's intra-machine bandwidth on one or two
                # machines (tuning.cc: ``bw = nNodes <= 2 ? bwIntra : bwInter``); a ring's
                # search keeps bwIntra = bwInter, but a two-machine tree's raises bwIntra up to
                # twice bwInter (search.cc, "increase bwIntra for trees (2 nodes or collnet)";
                # v2.9.9 to 2.30.7), so large messages go to the tree there
                algo_wire = (min(intra_bw, channels * tree_speed) if algo == "tree"
                             and nodes == 2 else wire)
                bus = min(algo_wire, v.busbw_cap.get(gen, math.inf))
                if algo == "ring" and proto == "LL":
                    bus = min(ll_max, bus * v.ring_ll_factor_for(collective, nodes))
                if algo == "ring" and proto == "LL128":
                    factor = (v.ring_ll128_one_rank_factor
                              if ppn < 2 and v.ring_ll128_one_rank_factor is not None
                              else v.ring_ll128_factor)
                    cap = min(v.ring_ll128_channel_cap(collective, gen, slot) * channels,
                              v.ll128_collective_totals.get(collective, math.inf))
                    bus = min(bus * factor, cap)
                if algo == "tree":
                    bus = min(bus * v.tree_factor, v.tree_cap(nodes, proto, gen, slot, channels))
                    if proto == "LL":
                        bus = min(bus * v.tree_ll_factor, ll_max)
                    if proto == "LL128":
                        cap = v.tree_ll128_channel_cap(gen, slot) * channels
                        bus = min(bus * v.tree_ll128_factor(nodes), cap)
                    bus *= self._tree_pattern_factor(facts)
                if algo in ("nvls", "nvls_tree") and v.number >= (2, 28):
                    eff = v.nvls_efficiency[gen]
                    bus = intra_bw * eff * (channels - 1) / channels * 2.0
                    if algo == "nvls_tree":
                        tree_cap = per_channel_cap(v.per_channel_nvls_tree, gen, slot)
                        bus = min(bus, inter_bw * (2 if nodes <= 2 else 1), tree_cap * channels)
                elif algo == "nvls":                # 2.18-2.27: min(intra, inter), x 5/6 below
                    bus = intra_bw
                elif algo == "nvls_tree":
                    bus = min(intra_bw, inter_bw if nodes <= 2 else inter_bw / 2)
                if algo == "collnet_direct":
                    # CollNet Direct needs a NIC per GPU for full speed (GPU/NIC ratio)
                    factor = ppn / max(1, facts.nics)
                    factor -= (factor - 1) / 2
                    bus = intra_bw / factor * (0.85 if facts.compute_capability >= 90 else 1.0)
                ratio = 0.5 if algo in ("tree", "collnet_direct") else n / nsteps
                if algo in ("nvls", "nvls_tree") and v.number < (2, 28):
                    ratio = 5.0 / 6.0
                algbw = bus * ratio
                lat, intra_lat, inter_lat = self._latency(algo, proto, p_index, collective,
                                                          nsteps, facts)
                # the time charged counts the ring's network steps as NCCL 2.23 on does
                time_lat = (self._latency(algo, proto, p_index, collective, nsteps, facts,
                                          tuner=False)[0]
                            if algo == "ring" and v.inter_steps_all_nodes and nodes > 1
                            else lat)
                steps_lat = lat - v.base_latency_us[algo][p_index] if algo != "nvls" else 0.0
                algbw_eff = algbw
                log_size = int(math.floor(math.log2(size_bytes >> 6))) if size_bytes >= 64 \
                    else -1
                if (algo == "tree" and v.tree_correction
                        and 0 <= log_size < min(23, len(v.tree_correction[p_index]))):
                    algbw_eff *= v.tree_correction[p_index][log_size]
                # 2.29 on, Blackwell on x86: the tuner corrects the NVLS tree too; its choice
                # moves, the engine's NVLS tree does not (it has no rate from the tuner)
                tuner_only = 1.0
                if (algo == "nvls_tree" and v.nvls_tree_correction and gen == "blackwell"
                        and facts.cpu_family != "arm"
                        and 0 <= log_size < len(v.tree_correction[p_index])):
                    tuner_only = v.tree_correction[p_index][log_size]
                if (algo == "ring" and proto == "Simple" and nodes > 1
                        and collective == "allreduce" and self._plateau(size_bytes, n, channels)):
                    lat *= v.plateau[0 if facts.compute_capability < 80 else 1]
                    time_lat *= v.plateau[0 if facts.compute_capability < 80 else 1]
                lat *= self.scale["latency"]
                time_lat *= self.scale["latency"]
                algbw_eff *= self.scale["bandwidth"]
                time_us = lat + size_bytes / (1000.0 * algbw_eff * tuner_only)
                out.append(Candidate(algo, proto, channels, lat, bus, algbw_eff, time_us,
                                     intra_lat, inter_lat, algo_wire, steps_lat, nsteps,
                                     None if time_lat == lat else time_lat,
                                     tree_speed if algo == "tree" else channel_speed))
        out.sort(key=lambda c: c.predicted_time_us)
        return out

    def _plateau(self, size_bytes: int, ranks: int, channels: int) -> bool:
        """Whether NCCL's ring/Simple "plateau" latency multiplier applies to a multi-machine
        all-reduce of ``size_bytes`` (``ncclTopoGetAlgoTime``): 2.10-2.17 from ``nRanks/16 x
        64 KiB``, 2.18 on from 64 bytes per rank and run-time channel (``comm->nChannels``,
        the search's channels doubled by ``connect.cc``)."""
        if self.version.plateau_trigger == "ranks":
            return size_bytes >= ranks / 16.0 * 65536
        return size_bytes / (runtime_channels(self.version, channels, self.channel_bounds)
                             * ranks) >= 64

    def _settings(self, facts: MachineFacts) -> NcclSettings | None:
        """The NCCL environment the network platform documents (machines joined by a plugin
        or transport that has one), None on one machine."""
        if facts.nodes <= 1:
            return None
        return nccl_settings(facts.transport, facts.network, self.release)

    def _simple_buffer(self, facts: MachineFacts) -> int | None:
        settings = self._settings(facts)
        return settings.simple_buffer_bytes if settings is not None else None

    def _nvls_gpus(self) -> str:
        """The GPU generations NVLS runs on in this release, for messages."""
        return " or ".join(g.capitalize() for g in self.version.nvls_generations)

    def _ll128_enabled(self, facts: MachineFacts) -> bool:
        """NCCL enables LL128 by default only on NVLink machines of listed generations whose
        NICs share a PCIe switch with the GPUs (``typeIntra <= NVB``, ``typeInter <= PXB``)."""
        if facts.compute_capability < 70 or facts.intra_hw != "nvlink":
            return False
        if facts.nodes > 1 and facts.gpu_nic_path != "pxb":
            return False
        return facts.generation in self.version.ll128_generations

    def _latency(self, algo, proto, p, collective, nsteps, facts, tuner: bool = True):
        """(total latency, intra step, inter step) in us, as ``ncclTopoTuneModel``.

        ``tuner=False`` gives the latency the call's time is charged, which differs in one
        place: a multi-machine all-reduce ring's network steps. NCCL 2.12 to 2.22 count
        ``2 x nNodes`` of them (``nInterSteps``, v2.12.12-1:114 to v2.22.3-1:161; NCCL
        2.22.3's own predictions in NVIDIA/nccl issue #1453 carry them), 2.10 and 2.23 on
        ``2 x (nNodes - 1)`` (v2.23.4-1:258). The kernels' ring did not change between 2.22
        and 2.23; the tuner's choice keeps its release's count and the time the newer one
        (docs/validation/sources.md, "NCCL 2.22's tuner, printed")."""
        v = self.version
        nodes, ppn = facts.nodes, facts.ranks_per_node
        hw = v.hw_latency_us
        intra = hw[facts.intra_hw][algo][p]
        if algo != "nvls" and ppn == 1 and v.number >= (2, 23):
            inter = hw["net"]["tree"][p]
        else:
            inter = hw["net"][algo][p]
        lat = v.base_latency_us[algo][p]
        if nodes > 1 and proto == "LL":
            intra *= v.ll_multinode_intra_factor
        if algo == "ring":
            if v.net_overhead and nodes > 1:
                overhead = net_post_overhead_us(facts.cpu_vendor, facts.cpu_family)
                intra = max(intra, overhead * (3 if proto == "Simple" else 1))
            if v.ring_latency_slowest_link:
                # NCCL 2.5 and 2.6 charge every step the latency of the slowest link class.
                intra = inter = hw["net" if nodes > 1 else facts.intra_hw]["ring"][p]
            n_inter = 0 if nodes == 1 else (
                (2 * nodes if v.inter_steps_all_nodes and tuner else 2 * (nodes - 1))
                if collective == "allreduce" else nodes - 1)
            lat += (nsteps - n_inter) * intra + n_inter * inter
        elif algo == "tree":
            lat += 2 * ((ppn - 1) * intra + log2i(nodes) * inter)
        elif algo == "nvls":
            lat = intra
            if nodes > 1:
                lat += inter
        elif algo == "nvls_tree":
            lat += intra + 2 * log2i(nodes) * inter
        elif algo == "collnet_direct":
            # arity serialisation: 0.5 us per local rank (2.12), 0.4 us (2.18 and later)
            arity = 0.5 if v.number < (2, 18) else 0.4
            lat += 2 * (min(1, ppn - 1) * intra + (ppn - 1) * arity) + inter
        if nodes > 1:
            # the network transport's own latency per network step (EFA's SRD through
            # aws-ofi-nccl, GPUDirect-TCPXO, ...; 0 for NCCL's IB verbs and sockets), on top of
            # hwLat[NET]: see simulator.library.netplugins for the values and their sources
            extra = network_step_latency_us(facts.transport, proto, facts.network)
            if extra:
                if algo == "ring":
                    lat += n_inter * extra
                elif algo in ("tree", "nvls_tree"):
                    lat += 2 * log2i(nodes) * extra
                else:
                    lat += extra
                inter += extra
        return lat, intra, inter

    # -- the plan ---------------------------------------------------------------------------
    def plan(self, graph: nx.DiGraph, collective: str, algorithm: str, size_bytes: int,
             gpus: int, *, protocol: str | None = None, launch=None, exclude=()) -> Plan:
        """How NCCL runs ``algorithm`` (``auto``: its tuner's choice, never one of
        ``exclude``) for this call."""
        facts = machine_facts(graph, gpus)
        protocol, allowed = _protocols(protocol, collective)
        launch = parse_launch(launch if launch is not None else (self.launch or "mpi"),
                              gpus_per_node=int(facts.ranks_per_node))
        host = launch.host_time_s(self.costs)
        skew = launch.skew_s(self.costs)
        cands = self.candidates(graph, collective, size_bytes, gpus, facts=facts)
        if algorithm == "auto" and collective == "alltoall":
            algorithm = "direct"   # NCCL's all-to-all is every pair's send/recv at once
        if algorithm == "auto" or algorithm in NCCL_ALGORITHM:
            wanted = None if algorithm == "auto" else NCCL_ALGORITHM[algorithm]
            pool = [c for c in cands if (wanted is None or c.algorithm == wanted)
                    and (allowed is None or c.protocol in allowed)
                    and c.algorithm not in exclude]
            if not pool:
                raise ConfigError(self._none_enabled(collective, wanted, protocol, facts,
                                                     allowed, exclude))
            chosen, plugin = pool[0], None
            if wanted is None:
                plugin = self._plugin_choice(facts, collective, size_bytes, pool)
                chosen = plugin or chosen
            plan = self._nccl_plan(graph, collective, size_bytes, gpus, facts, chosen, host,
                                   launch)
            if plugin is not None:
                plan = dataclasses.replace(plan, notes={**plan.notes,
                                                        "tuner": "aws-ofi-nccl regions"})
            if skew:
                plan = dataclasses.replace(plan, fixed_time_s=plan.fixed_time_s + skew,
                                           notes={**plan.notes, "launch_skew_us": skew * 1e6})
            return plan
        # An algorithm NCCL does not have (parameter server, halving-doubling, ...): run it
        # over NCCL's transports with the Simple protocol's ring step costs.
        simple = [c for c in cands if c.algorithm == "ring" and c.protocol == "Simple"]
        base = simple[0] if simple else cands[0]
        if algorithm == "ring" or facts.ranks <= 1:
            base = cands[0]
        if allowed is not None and "Simple" not in allowed:
            raise ConfigError(f"--protocol {'/'.join(sorted(allowed))}: algorithm {algorithm!r} "
                              f"is not an NCCL algorithm and runs over NCCL's transports with "
                              f"Simple only")
        new_graph = self._cost_graph(graph, facts, 1.0, base.intra_latency_us,
                                     base.inter_latency_us)
        return Plan(library=self.name, algorithm=algorithm, label=algorithm, protocol="Simple",
                    channels=0, graph=new_graph, host_time_s=host, fixed_time_s=skew,
                    reduce_compute=False,
                    notes={"launch": str(launch), "version": self.version.name})

    def _plugin_choice(self, facts: MachineFacts, collective: str, size_bytes: int,
                       pool: list) -> Candidate | None:
        """The candidate a network plugin's own tuner makes NCCL run, None where it leaves
        NCCL's choice: aws-ofi-nccl's region tuner on p5 (transport ``efa2``) from three
        machines (:mod:`.ofi_regions`), with NCCL releases that load tuner plugins (2.19 on,
        ``NCCL_TUNER_PLUGIN``). It only picks among what NCCL could run (``pool``)."""
        if (self.release < (2, 19)
                or not plugin_tuner_applies(facts.transport, facts.nodes, facts.network)):
            return None
        choice = region_choice(collective, size_bytes, facts.ranks, facts.nodes,
                               {(c.algorithm, c.protocol) for c in pool})
        return next((c for c in pool if (c.algorithm, c.protocol) == choice), None)

    def unavailable(self, graph: nx.DiGraph, collective: str, algorithm: str, gpus: int, *,
                    protocol: str | None = None) -> str:
        """Why this NCCL cannot run ``algorithm`` for ``collective`` over ``gpus`` ranks of
        ``graph`` (one short reason), or ``""`` when :meth:`plan` can. Whether an algorithm
        is enabled does not depend on the size."""
        protocol, allowed = _protocols(protocol, collective)
        if algorithm == "auto" or algorithm not in NCCL_ALGORITHM:
            if algorithm != "auto" and allowed is not None and "Simple" not in allowed:
                return "not an NCCL algorithm: runs over NCCL's transports with Simple only"
            return ""
        facts = machine_facts(graph, gpus)
        wanted = NCCL_ALGORITHM[algorithm]
        cands = self.candidates(graph, collective, 1 << 20, gpus, facts=facts)
        if any(c.algorithm == wanted and (allowed is None or c.protocol in allowed)
               for c in cands):
            return ""
        reasons = self._reasons(collective, wanted, protocol, facts)
        return reasons[0] if reasons else f"not enabled in NCCL {self.version.name} here"

    def _none_enabled(self, collective, wanted, protocol, facts, allowed=None,
                      exclude=()) -> str:
        what = f"algorithm {wanted!r}" if wanted else "no algorithm"
        reasons = self._reasons(collective, wanted, protocol, facts)
        if allowed is not None and protocol is None:
            reasons.append(f"the run's NCCL_PROTO leaves only {', '.join(sorted(allowed))}")
        if exclude:
            reasons.append(f"the run's NCCL_ALGO leaves out {', '.join(exclude)}")
        why = "; ".join(reasons) or "not enabled here"
        return (f"NCCL {self.version.name} cannot run {collective} with {what}"
                f"{' and protocol ' + protocol if protocol else ''} on this topology: {why}")

    def _reasons(self, collective, wanted, protocol, facts) -> list[str]:
        reasons = []
        # first: what the platform's documented environment leaves out
        settings = self._settings(facts)
        if settings is not None and settings.algorithms is not None and wanted \
                and wanted not in settings.algorithms:
            reasons.append(f"the network platform's documented NCCL settings ({settings.release}) "
                           f"enable only {', '.join(settings.algorithms)}")
        if settings is not None and settings.protocols is not None and protocol \
                and protocol not in settings.protocols:
            reasons.append(f"the network platform's documented NCCL settings ({settings.release}) "
                           f"enable only the protocols {', '.join(settings.protocols)}")
        too_few = facts.nvswitch and facts.local_ranks_min < self.version.nvls_min_local_gpus
        if wanted in ("nvls", "nvls_tree") and too_few:
            reasons.append(f"NCCL {self.version.name} sets NVLS up only with at least "
                           f"{self.version.nvls_min_local_gpus} GPUs on every machine (here "
                           f"{facts.local_ranks_min})")
        elif wanted == "nvls":
            reasons.append(f"NVLS needs one NVSwitch machine of {self._nvls_gpus()} GPUs "
                           "(NCCL >= 2.17; Blackwell from 2.25)")
        elif wanted == "nvls_tree":
            reasons.append(f"NVLS tree needs several NVSwitch machines of {self._nvls_gpus()} "
                           "GPUs (NCCL >= 2.18; Blackwell from 2.25)")
        if wanted == "tree" and collective != "allreduce":
            reasons.append("NCCL's tree runs all-reduce only")
        if wanted == "tree" and self.release < TREES_SINCE:
            reasons.append(f"NCCL has trees from {'.'.join(map(str, TREES_SINCE))} on (the "
                           f"release asked for is {'.'.join(map(str, self.release))})")
        if wanted == "collnet_direct":
            reasons.append("CollNet needs several machines on a SHARP fabric (topology "
                           "parameter sharp: true) and NCCL >= 2.12")
        if protocol == "LL128" and not self._ll128_enabled(facts):
            reasons.append("LL128 is enabled on NVLink machines of "
                           f"{', '.join(self.version.ll128_generations)} GPUs only "
                           f"(this: {facts.generation}, intra {facts.intra_hw})")
        return reasons

    @staticmethod
    def _network_message(facts, c: Candidate, collective: str, size_bytes: int, used: int,
                         path, tree_chunk):
        """One network message of the call, or None when no message crosses machines:
        (its bytes on the wire, the sender's lead in us, the network steps on the call's
        latency path, the messages one receiving connection takes in turn). The lead is what
        the sender does before its first network send: nothing in a ring (its first step
        crosses machines), the chain up to the machine's tree root in a tree. The latency
        path has the network steps NCCL's latency model counts (a ring's 2(nodes-1) for
        all-reduce, nodes-1 otherwise; a tree's 2 log2(nodes)). A ring's connection takes
        one message every step, a tree's the messages of its way up and down."""
        if facts.nodes < 2 or c.algorithm not in ("ring", "tree", "nvls_tree"):
            return None
        if c.algorithm == "ring":
            per_step = -(-size_bytes // max(1, used * facts.ranks))
            if path is not None:
                per_step = min(per_step, path.chunk_bytes)
            lead_us = 0.0
            on_path = 2 * (facts.nodes - 1) if collective == "allreduce" else facts.nodes - 1
            in_turn = c.nsteps
        else:
            if c.algorithm == "tree":
                # each of the call's channels carries its share through one tree, in NCCL's
                # chunks
                per_step = -(-size_bytes // max(1, used))
                if tree_chunk:
                    per_step = min(per_step, tree_chunk)
                lead_us = (max(1.0, facts.ranks_per_node) - 1) * c.intra_latency_us
            else:
                per_step = min(NVLS_CHUNK_BYTES, -(-size_bytes // max(1, c.channels)))
                lead_us = 0.0
            on_path = in_turn = 2 * log2i(facts.nodes)
        return per_step / PAYLOAD_FRACTION[c.protocol], lead_us, on_path, in_turn

    @classmethod
    def _message_costs_s(cls, facts, c: Candidate, collective: str, size_bytes: int,
                         used: int, path, tree_chunk,
                         ring_overhead_charged: bool = False) -> tuple[float, float]:
        """(handshake, per-message costs) of the call, s, on transports that charge them (see
        :mod:`simulator.library.netplugins`); NCCL's tuner knows none of them, so they change
        the time and not its choice.

        handshake
            the first network message's wait for the receiver's control message
            (aws-ofi-nccl's RDMA protocol), less the sender's lead: both ends start together;
        per-message costs
            a rendezvous read above the eager limit and the proxies' post and completion
            (:func:`~simulator.library.netplugins.proxy_step_us`; not on a ring when
            ``ring_overhead_charged``: the release's tuner line already charges its every step
            NCCL's post overhead), on every network step of the latency path; and the
            receiving CPU's copy of a payload that landed in a host buffer, for
            every message one connection receives: one CPU thread copies them one after
            the other, and the GPU waits for each.
        """
        message = cls._network_message(facts, c, collective, size_bytes, used, path,
                                       tree_chunk)
        if message is None:
            return 0.0, 0.0
        wire, lead_us, on_path, in_turn = message
        wait_us = handshake_latency_us(facts.transport, wire, facts.network)
        # NCCL 2.19 on already charges a ring's every step the post overhead (``_latency``)
        proxy_us = 0.0 if c.algorithm == "ring" and ring_overhead_charged else proxy_step_us(
            facts.transport, facts.cpu_vendor, facts.cpu_family, facts.network)
        extra_us = (on_path * (message_extra_us(facts.transport, wire, facts.network)
                               + proxy_us)
                    + in_turn * host_copy_us(facts.transport, wire, facts.network))
        return max(0.0, wait_us - lead_us) * 1e-6, extra_us * 1e-6

    def _nccl_plan(self, graph, collective, size_bytes, gpus, facts, c: Candidate, host,
                   launch) -> Plan:
        v = self.version
        threads = THREADS[c.protocol]
        threshold = THREAD_THRESHOLD[c.protocol] * (facts.ranks if c.algorithm == "ring"
                                                    and c.protocol == "LL" else 1)
        used = c.channels
        if c.algorithm != "nvls":
            used = tuned_channels(used, size_bytes, threads, threshold)
        # The protocol's bus bandwidth over the wire's, on every link; the links out of a GPU
        # at most the call's channels times one channel's rate (rings and trees; NVLS and
        # CollNet keep the tuner's), and the treeCorrectionFactor stays in the tuner: the
        # engine pipelines the trees itself.
        wire_scale = c.busbw_GBps / c.wire_busbw_GBps if c.wire_busbw_GBps > 0 else 1.0
        scale = wire_scale * self.scale["bandwidth"]
        path: DataPath | None = None
        fixed = c.charged_latency_us * 1e-6
        options: dict = {}
        helpers: tuple = ()
        slices = None
        tree_chunk = None
        nvlink_scale = 1.0
        channel_cap = math.inf  # bytes/s out of each GPU
        nccl_channels = 1  # the channels NCCL runs the call on (their connections' caps)
        fill_s = 0.0
        proxy_floor_us = None
        if c.algorithm == "ring":
            # NCCL's ring as its kernels run it (simulator.library.datapath), timed by the
            # engine: bulk-synchronous steps (each costs its slowest transfer); every step pays
            # the per-step latency once per wait/post round its channels make (loops x slices
            # per chunk) on every GPU's links, and moves its bytes on the channels the call
            # uses at their share of the rate. The network steps' extra latency (the proxy keeps
            # NCCL_STEPS slices in flight, so it overlaps), the base latency and the plateau
            # are charged once, as the tuner does. With one sync per step and every channel
            # this is the tuner's additive line.
            lat_scale = self.scale["latency"]
            syncs = 1
            if collective in DATAPATH_COLLECTIVES:
                path = ring_datapath(v, collective, c.protocol, int(size_bytes), facts.ranks,
                                     c.channels, c.wire_busbw_GBps,
                                     self._simple_buffer(facts), self.release,
                                     self.channel_bounds)
                syncs = path.syncs_per_step
                used = path.channels
                # a channel is one thread block moving at most its own rate: the call's
                # channels carry at most their count of it (NCCL's tuner: bw / nChannels x
                # channels) out of every GPU, on one machine or across machines
                channel_cap = used * self._channel_busbw(
                    facts, c.protocol, collective=collective,
                    speed=c.channel_speed_GBps) * 1e9 * self.scale["bandwidth"]
            per_round = c.intra_latency_us * lat_scale
            if path is not None and facts.nodes > 1:
                per_round, proxy_floor_us = self._proxy_floored_round_us(
                    facts, c, path, per_round, int(size_bytes), channel_cap)
            intra_lat = per_round * syncs
            inter_lat = intra_lat
            fixed = (c.charged_latency_us - c.nsteps * c.intra_latency_us * lat_scale) * 1e-6
            options["barriers"] = True
            if collective in ("broadcast", "reduce"):
                # NCCL pipelines the chain in protocol steps: the engine slices it finely and
                # NCCL's chain latency is charged once.
                intra_lat = inter_lat = 0.0
                fixed = c.charged_latency_us * 1e-6
                options.pop("barriers")
                slices = max(1, min(MAX_TREE_SEGMENTS, -(-int(size_bytes) // TREE_SEGMENT_BYTES)))
        elif c.algorithm == "tree":
            # NCCL's additive model again: its tree latency (base and per-hop) is charged once
            # and the engine times the bytes through the trees of every channel (each
            # channel's pair entered through other GPUs, so the channels cross machines on
            # different NICs), finely pipelined, at the protocol's rate times NCCL's measured
            # tree correction for this size (treeCorrectionFactor).
            intra_lat = inter_lat = 0.0
            fixed = c.charged_latency_us * 1e-6
            scale *= c.algbw_GBps / (c.busbw_GBps * 0.5 * self.scale["bandwidth"])
            local = max(1, int(facts.ranks_per_node))
            tree_channels = min(c.channels, local)
            per_tree = -(-int(size_bytes) // (2 * tree_channels))
            # the engine pipelines NCCL's own chunks (one FIFO step each, datapath.
            # tree_chunk_bytes), so a chunk's way through the chain and the network hops (the
            # pipeline fill) is NCCL's; MAX_TREE_SEGMENTS bounds the work for huge messages
            segment = tree_chunk = tree_chunk_bytes(
                c.protocol, int(size_bytes), c.channels, facts.nodes, facts.ranks_per_node,
                self._simple_buffer(facts), self.release)
            if c.protocol == "LL":
                # LL is not stored and forwarded by the chunk: every thread reads its line as
                # soon as the line's flag arrives, reduces it and stores it to the next peer
                # in the same pass (prims_ll.h LLGenericOp), so a chunk crosses a hop one trip
                # of the thread block at a time
                segment = LL_TRIP_BYTES
            options.update(channels=tree_channels, local_ranks=local,
                           segments=max(1, min(MAX_TREE_SEGMENTS, -(-per_tree // segment))))
            chains = self._tree_chains(graph, gpus, tree_channels, local,
                                       one_machine=facts.nodes == 1)
            # the call's channels as NCCL runs them (the search's, doubled, fewer for a small
            # call), each one thread block at one channel's rate, as on a ring
            runtime = planned_channels(self.release, collective, c.protocol, int(size_bytes),
                                       facts.ranks, tuned_channels(
                                           runtime_channels(v, c.channels,
                                                            self.channel_bounds), size_bytes,
                                           threads, threshold))
            # one channel is one thread block: inside a machine it copies at the speed NCCL's
            # search gives a channel of that machine (:meth:`_block_speed`), not at the
            # network's share a graph across machines budgets it; the NICs' own links bound
            # what crosses machines
            one_channel = self._channel_busbw(facts, c.protocol, "tree", speed=self._block_speed(
                graph, gpus, facts, c.channel_speed_GBps)) * 1e9 * self.scale["bandwidth"]
            channel_cap = runtime * one_channel
            # each tree is one channel, whose thread block copies every chunk between two GPUs
            # of a machine: one such transfer moves at most that block's speed (two runtime
            # channels share a search channel's speed only while both use the link, which
            # channel_cap says), however idle the link. Chunks store and forward hop by hop
            # (one FIFO step each), so a mid-size call has few transfers on a link at a time.
            # Across machines the NIC moves them.
            options["local_flow_cap_bytes_per_s"] = 2 * one_channel
            nccl_channels = runtime
            if chains is not None:
                options["chains"] = chains
        elif c.algorithm == "collnet_direct":
            # In-network reduction: the collnet schedule (intra-machine reduce-scatter, the
            # fabric switch sums every block, intra-machine all-gather) pipelined in NCCL's
            # CollNet chunks; NCCL's latency once.
            intra_lat = inter_lat = 0.0
            fixed = c.charged_latency_us * 1e-6
            local = max(1, int(facts.ranks_per_node))
            options.update(local_ranks=local)
            slices = max(1, min(MAX_TREE_SEGMENTS, -(-int(size_bytes) // (
                local * COLLNET_CHUNK_BYTES))))
            scale = (0.85 if facts.compute_capability >= 90 else 1.0) * self.scale["bandwidth"]
        else:
            # NVLS / NVLS tree: every machine's NVSwitch sums and multicasts (the nvls_tree
            # schedule, its switches as helper ranks), machines joined over their NICs; the
            # NVLink rates x NCCL's NVLS efficiency, pipelined in NVLS chunks, NCCL's latency
            # once.
            intra_lat = inter_lat = 0.0
            fixed = c.charged_latency_us * 1e-6
            local = max(1, int(facts.ranks_per_node))
            options.update(local_ranks=local, loops=max(1, min(
                MAX_TREE_SEGMENTS, -(-int(size_bytes) // (local * NVLS_CHUNK_BYTES)))))
            # NCCL's NVLS efficiency on the NVLink rate (its tuner's further (C-1)/C and x2 are
            # its way of counting the traffic that the schedule here moves explicitly)
            nvlink_scale = v.nvls_efficiency[facts.generation]
            scale = self.scale["bandwidth"]
            # NCCL shrinks NVLS chunks for smaller messages; the pipeline fill they leave
            # (simulator.library.datapath.nvls_fill_s) is charged once, with the latency
            fill_s = nvls_fill_s(self.release, c.algorithm, facts.generation, int(size_bytes),
                                 local, facts.nodes,
                                 c.algbw_GBps * 1e9 * self.scale["bandwidth"])
            fixed += fill_s
        if c.algorithm == "ring":
            nccl_channels = used
        staged = self._staged_cap(facts, wire_scale, nccl_channels)
        if staged is not None:
            options["network_flow_cap"] = staged
        handshake_s, messages_s = self._message_costs_s(
            facts, c, collective, int(size_bytes), used, path, tree_chunk,
            ring_overhead_charged=v.net_overhead)
        fixed += handshake_s + messages_s
        new_graph = self._cost_graph(graph, facts, scale, intra_lat, inter_lat, nvlink_scale,
                                     channel_cap)
        return Plan(library=self.name, algorithm=SCHEDULE[c.algorithm], label=c.algorithm,
                    protocol=c.protocol, channels=used, graph=new_graph, options=options,
                    helper_nodes=helpers, fixed_time_s=fixed, host_time_s=host,
                    predicted_time_s=c.predicted_time_us * 1e-6, slices=slices,
                    reduce_compute=False,
                    notes={"launch": str(launch), "version": v.name,
                           "busbw_GBps": c.busbw_GBps, "channels_max": c.channels,
                           "intra_step_us": intra_lat, "inter_step_us": inter_lat,
                           **({"handshake_us": handshake_s * 1e6} if handshake_s else {}),
                           **({"net_messages_us": messages_s * 1e6} if messages_s else {}),
                           **({"nvls_fill_us": fill_s * 1e6} if fill_s else {}),
                           **({"proxy_floor_us": proxy_floor_us}
                              if proxy_floor_us is not None else {}),
                           **({"channel_bounds": self.channel_bounds}
                              if self.channel_bounds else {}),
                           **({"staged_channel_GBps": staged[0] / 1e9} if staged else {}),
                           **(path.as_notes() if path is not None else {})})

    def _proxy_floored_round_us(self, facts: MachineFacts, c: Candidate, path: DataPath,
                                per_round_us: float, size_bytes: int,
                                channel_cap: float) -> tuple[float, float]:
        """One wait/post round's latency of a ring across machines, raised so that the round
        (latency plus its share of the step's bytes) lasts at least what one proxy thread needs
        to post its operations (:func:`~.datapath.proxy_round_floor_us`). The step's bytes move
        at the call's per-GPU rate (its channels' cap, at most the tuner's bus bandwidth for
        those channels); the engine adds latency and transfer, so the floor enters as the
        latency that makes the sum reach it. Returns (the round's latency, the floor), us."""
        floor_us = proxy_round_floor_us(
            path.channels, facts.ranks_per_node,
            net_post_overhead_us(facts.cpu_vendor, facts.cpu_family))
        rate = min(channel_cap, c.busbw_GBps * 1e9 * path.rate_fraction * self.scale["bandwidth"])
        transfer_us = (size_bytes / max(1, facts.ranks)) / rate / path.syncs_per_step * 1e6 \
            if rate > 0 else 0.0
        return max(per_round_us, floor_us - transfer_us), floor_us

    def _staged_cap(self, facts: MachineFacts, wire_scale: float, channels: int) -> tuple | None:
        """The ``network_flow_cap`` option of a call on ``channels`` NCCL channels whose network
        connections NCCL stages through host memory (sockets; no GPUDirect RDMA:
        :func:`~.netplugins.host_staged`), else None: each channel's connection between
        machines at :data:`~.netplugins.HOST_STAGED_CHANNEL_BYTES_PER_S` of the protocol's wire
        bytes (``wire_scale`` of them payload). Time only: NCCL's search and tuner do not see
        it."""
        if facts.nodes < 2 or not host_staged(facts.transport, facts.network,
                                              facts.gpu_nic_path):
            return None
        cap = HOST_STAGED_CHANNEL_BYTES_PER_S * wire_scale * self.scale["bandwidth"]
        return cap, max(1, int(facts.ranks_per_node)), max(1, int(channels))

    def _tree_pattern_factor(self, facts: MachineFacts) -> float:
        """The share of a tree's bus bandwidth NCCL's tuner keeps for the pattern its search
        ended on: :data:`TREE_PATTERN_FACTOR` for the plain ``NCCL_TOPO_PATTERN_TREE`` (all of a
        channel's network traffic in and out of one GPU), 1 for the balanced and split trees
        (``tuning.cc`` ``if (a == NCCL_ALGO_TREE && ... pattern == NCCL_TOPO_PATTERN_TREE)
        busBw *= .85``, v2.18.3-1 to 2.30.7). The search takes the plain tree whenever a
        machine has one GPU (``search.cc`` ``if (ngpus == 1) ... pattern =
        NCCL_TOPO_PATTERN_TREE``), and on Hopper and later GPUs when the balanced tree's
        search falls short (``if (ccMin >= 90 && tmpGraph.pattern ==
        NCCL_TOPO_PATTERN_BALANCED_TREE)``), which depends on the machine: the topology's
        ``tree_pattern`` parameter says so (NCCL prints it: ``NCCL INFO Pattern 3, ...``)."""
        if self.version.number < (2, 18) or facts.nodes < 2:
            return 1.0
        if facts.local_ranks_min <= 1 or (facts.tree_pattern == "tree"
                                          and facts.compute_capability >= 90):
            return TREE_PATTERN_FACTOR
        return 1.0

    def _channel_busbw(self, facts: MachineFacts, protocol: str, algorithm: str = "ring",
                       collective: str = "allreduce", speed: float | None = None) -> float:
        """Bus bandwidth one channel (one thread block) of ``algorithm`` moves, GB/s: half the
        graph search's per-channel bandwidth ``speed`` (:meth:`_search`; the generation's
        ``CHANNEL_SPEED`` when not given; each search channel becomes two, ``connect.cc``),
        times the protocol's factors and per-channel caps of NCCL's tuner
        for the communicator's machine count (``tuning.cc``: ring LL ``x ring_ll_factor``, ring
        LL128 ``min(x ring_ll128_factor, perChMaxRingLL128Bw)``; tree ``min(x tree_factor,
        perChMaxTreeBw)``, LL on top ``x tree_ll_factor``, LL128 ``min(x`` the version's
        ``tree_ll128_factor`` ``, perChMaxTreeLL128Bw)``; 2.7 to 2.9 cap LL128 by
        ``collective``), and for ring LL128 the share
        of that a channel really moves
        (:data:`~simulator.library.datapath.LL128_RING_CHANNEL_RATE`, fitted on A100)."""
        v = self.version
        gen, slot = facts.generation, node_index_slot(facts.nodes)
        speed = speed or CHANNEL_SPEED[gen]
        if algorithm == "tree":
            speed = min(speed * v.tree_factor, per_channel_cap(v.per_channel_tree, gen, slot))
            if protocol == "LL":
                speed *= v.tree_ll_factor
            elif protocol == "LL128":
                speed = min(speed * v.tree_ll128_factor(facts.nodes),
                            v.tree_ll128_channel_cap(gen, slot))
        elif protocol == "LL":
            speed *= v.ring_ll_factor_for(collective, facts.nodes)
        elif protocol == "LL128":
            speed = min(speed * v.ring_ll128_factor,
                        v.ring_ll128_channel_cap(collective, gen, slot))
            speed *= LL128_RING_CHANNEL_RATE.get(gen, 1.0)
        return speed / 2.0

    def _tree_chains(self, graph: nx.DiGraph, gpus: int, channels: int, local: int,
                     one_machine: bool = False):
        """:func:`tree_chains`, kept per graph (the ring search behind it is not free)."""
        key = ("chains", id(graph), gpus, channels, local, one_machine)
        cached = self._graphs.get(key)
        if cached is None or cached[0] is not graph:
            cached = (graph, tree_chains(graph, gpus, channels, local, one_machine))
            self._graphs[key] = cached
        return cached[1]

    def _cost_graph(self, graph: nx.DiGraph, facts: MachineFacts, scale: float,
                    intra_us: float, inter_us: float, nvlink_scale: float = 1.0,
                    channel_cap_bytes_per_s: float = math.inf) -> nx.DiGraph:
        """A copy of ``graph`` with the plan's link rates (``scale`` on every link,
        ``nvlink_scale`` on NVLink ones besides, and every link out of a GPU at most
        ``channel_cap_bytes_per_s``: what the call's channels, one thread block each, can
        move) and per-step latencies."""
        key = (id(graph), facts, round(scale, 12), round(intra_us, 9), round(inter_us, 9),
               round(nvlink_scale, 12), channel_cap_bytes_per_s)
        cached = self._graphs.get(key)
        if cached is not None and cached[0] is graph:
            return cached[1]
        out = graph.copy()
        kinds = nx.get_node_attributes(graph, "kind")
        for a, b, attrs in out.edges(data=True):
            kind = attrs.get("kind")
            attrs["bandwidth_bytes_per_s"] = (
                link_rate(kind, graph.edges[a, b]["bandwidth_bytes_per_s"], facts) * scale
                * (nvlink_scale if kind in ("nvlink", "nvswitch") else 1.0))
            if kinds.get(a) == "gpu":
                attrs["bandwidth_bytes_per_s"] = min(attrs["bandwidth_bytes_per_s"],
                                                     channel_cap_bytes_per_s)
            if kinds.get(a) == "gpu":
                attrs["latency_s"] = intra_us * 1e-6
            elif kinds.get(a) == "nic" and kind in ("ib", "ethernet"):
                attrs["latency_s"] = max(0.0, inter_us - intra_us) * 1e-6
            else:
                attrs["latency_s"] = 0.0
        return store_cost_graph(self._graphs, key, graph, out, self.name, scale)


def _protocol(text: str) -> str:
    for proto in PROTOCOLS:
        if str(text).lower() == proto.lower():
            return proto
    raise ConfigError(f"--protocol: unknown protocol {text!r}; accepted: LL, LL128, Simple, "
                      f"auto, or a list in NCCL_PROTO's grammar (Simple,LL128 or ^LL128)")


def protocol_setting(text) -> str | None:
    """A ``--protocol`` / ``library: protocol`` value checked: None for ``auto``, NCCL's
    spelling of one protocol, or a list in ``NCCL_PROTO``'s grammar (:mod:`.nccl_env`)."""
    if text in (None, "", "auto"):
        return None
    if nccl_env.is_selection(text):
        nccl_env.allowed_protocols(text, "allreduce")     # NCCL's grammar, or a clear error
        return str(text).replace(" ", "")
    return _protocol(text)


def _protocols(text, collective: str) -> tuple:
    """(the one protocol ``text`` names, for messages, or None; the set of protocols it leaves
    ``collective``, or None for all): one name forces that protocol, a list in
    ``NCCL_PROTO``'s grammar leaves the tuner what it names."""
    if text in (None, "", "auto"):
        return None, None
    if nccl_env.is_selection(text):
        return None, nccl_env.allowed_protocols(text, collective)
    one = _protocol(text)
    return one, frozenset((one,))


def _release(text, table: NcclVersion) -> tuple:
    """(major, minor) of the NCCL version asked for, else the table's."""
    if isinstance(text, NcclVersion):
        return table.number
    return release_number(text) or table.number


def _channel_bounds(channels) -> tuple[int, int | None] | None:
    """The library's ``channels`` setting as (least, most): None, a pair ``[least, most]``
    (either may be None) or a mapping ``{min: .., max: ..}``; a clear error otherwise."""
    if channels is None:
        return None
    if isinstance(channels, dict):
        unknown = set(channels) - {"min", "max"}
        if unknown:
            raise ConfigError(f"library setting channels: unknown key(s) {sorted(unknown)}; "
                              f"expected min and max (NCCL_MIN_NCHANNELS, NCCL_MAX_NCHANNELS)")
        pair = (channels.get("min"), channels.get("max"))
    elif isinstance(channels, (list, tuple)) and len(channels) == 2:
        pair = tuple(channels)
    else:
        raise ConfigError(f"library setting channels: expected [least, most] or {{min: .., "
                          f"max: ..}} (NCCL_MIN_NCHANNELS, NCCL_MAX_NCHANNELS), got "
                          f"{channels!r}")
    least, most = pair
    for name, value in (("least", least), ("most", most)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < (0 if name == "least" else 1)):
            raise ConfigError(f"library setting channels: the {name} channel count must be "
                              f"a whole number >= {0 if name == 'least' else 1}, got {value!r}")
    if least is None and most is None:
        return None
    return int(least or 0), (None if most is None else int(most))
