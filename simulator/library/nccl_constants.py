"""NCCL's cost-model constants, per NCCL version, as printed in NVIDIA/nccl's source.

Everything here is copied from ``src/graph/tuning.cc``, ``src/graph/topo.h``/``topo.cc`` and
``src/include/device.h`` of NVIDIA/nccl at the tag named in each table (the git tags
``v2.5.6-2``, ``v2.12.12-1``, ``v2.18.3-1``, ``v2.21.5-1`` and master at 2.30.7, commit
``5067397c``). Latencies are microseconds and bandwidths GB/s (1e9 bytes/s), NCCL's own units;
:mod:`simulator.library.nccl` converts them to seconds and bytes/s at the edge.

Index conventions, as in NCCL: algorithms ``tree, ring, collnet_direct, collnet_chain, nvls,
nvls_tree``; protocols ``LL, LL128, Simple``; hardware classes ``nvlink, pci, net``; GPU
generations ``volta, ampere, hopper, blackwell`` (compute capability 7.x, 8.x, 9.x, 10.x; NCCL
files older GPUs under Volta); node-count index ``N1, N2, N4`` (1, 2, more nodes).
"""

from __future__ import annotations

import math
import re

from dataclasses import dataclass, field, replace

PROTOCOLS = ("LL", "LL128", "Simple")
ALGORITHMS = ("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree")
HW_CLASSES = ("nvlink", "pci", "net")
GENERATIONS = ("volta", "ampere", "hopper", "blackwell")


def _lat(tree, ring, cd=(0, 0, 0), cc=(0, 0, 0), nvls=(0, 0, 0), nvls_tree=(0, 0, 0)):
    return dict(zip(ALGORITHMS, (tree, ring, cd, cc, nvls, nvls_tree)))


@dataclass(frozen=True)
class NcclVersion:
    """One NCCL release's tuning constants (see the module docstring for units and indices).

    Attributes
    ----------
    name : str
        The version, ``"2.21"``.
    source : str
        Tag and file the numbers are copied from.
    base_latency_us : dict
        ``baseLat[algorithm] -> (LL, LL128, Simple)``.
    hw_latency_us : dict
        ``hwLat[hw class][algorithm] -> (LL, LL128, Simple)``: per-step latency.
    ll_max_busbw : dict
        ``llMaxBws[row] -> (N1, N2, N4)``; row is the GPU generation on one node, ``"intel"``
        or ``"amd"`` (by CPU vendor) across nodes.
    per_channel_ring_ll128 / per_channel_tree / per_channel_tree_ll128 / per_channel_nvls_tree
        : dict
        Per-channel bus-bandwidth caps by generation -> (N1, N2, N4); empty where the version
        has none.
    ring_ll_factor : float
        Ring/LL bus bandwidth = this x the wire rate (LL moves 8 payload bytes per 16).
    ring_ll_factor_one_machine : float or None
        2.7 to 2.20: 1/3 instead for an all-gather, reduce-scatter or broadcast on one machine
        (``(nNodes > 1 || coll == ncclFuncAllReduce || coll == ncclFuncReduce) ? 1.0/4.0 :
        1.0/3.0``, v2.7.8-1 :113, v2.12.12-1 :127, v2.20.3-1 :181; 2.21 on x.5 for all).
    ring_ll128_factor : float
        Ring/LL128 (NCCL writes 0.92 for 120/128).
    ring_ll128_one_rank_factor : float or None
        Ring/LL128 with one GPU per machine (``ppn < 2 ? 0.7 : 0.92``: 2.8 to 2.22,
        v2.10.3-1:129, v2.21.5-1:181; gone in v2.23.4-1); None: ``ring_ll128_factor``.
    tree_factor, tree_ll_factor : float
        Tree bus bandwidth factors (all protocols; LL on top).
    ll128_generations : tuple
        Generations on which LL128 is enabled by default (over NVLink-only machine paths).
    net_overhead : bool
        Inter-node rings charge ``max(intra latency, net overhead)`` per intra step (NCCL >= 2.18).
    ll_multinode_intra_factor : float
        Intra-node LL latency multiplier across nodes (2.12's ``intraLat *= 1.8``), 1 otherwise.
    plateau : tuple
        Ring/Simple multi-node all-reduce latency multiplier (pre-Ampere, Ampere and later),
        ``(1, 1)`` where the version has none.
    nvls : bool
        NVLink SHARP all-reduce exists (NCCL >= 2.17).
    nvls_efficiency : dict
        ``nvlsEfficiency`` by generation.
    nvls_min_local_gpus : int
        The fewest GPUs a machine's NCCL topology must hold for NVLink SHARP to be set up
        (``ncclNvlsInit`` in ``src/transport/nvls.cc``: 2.17 ``localRanks <= 1``, 2.18 to
        2.28.6 ``gpuCount <= 2``, 2.28.7 on ``gpuCount < 2`` return without NVLS).
    tree_correction : tuple
        ``treeCorrectionFactor[protocol]``: 24 factors for powers of two 64 B .. 512 MiB;
        empty where the version has none.
    max_channels : int
        ``MAXCHANNELS``: the most channels a communicator runs (32 up to 2.24, 64 from 2.25).
    busbw_cap : dict
        A cap on every algorithm's bus bandwidth by generation, GB/s, before the protocol
        factors (2.8-2.17: ``if (compCap80) busBw = std::min(busBw, 235.0f)``); empty from
        2.18.
    plateau_trigger : str
        When the ring/Simple multi-machine all-reduce "plateau" multiplier applies: ``"ranks"``
        (2.10-2.17: ``nBytes >= nRanks/16.0*65536``) or ``"channels"`` (2.18 on:
        ``nBytes/(comm->nChannels*nRanks) >= 64``, the communicator's run-time channels).
    inter_steps_all_nodes : bool
        2.12 to 2.22 count ``2 x nNodes`` network steps in an all-reduce ring (``nNodes > 1 ?
        2*nNodes : 0``, v2.12.12-1:114 .. v2.21.5-1:161), 2.10-2.11 and 2.23 on ``2 x (nNodes -
        1)`` (v2.23.4-1:258). The tuner's choice and prediction take the release's count (NCCL
        2.22.3's printed predictions in NVIDIA/nccl issue #1453 carry ``2 x nNodes``); the time
        a call is charged takes ``2 x (nNodes - 1)`` in every release
        (:meth:`simulator.library.nccl.NcclLibrary._latency`).
    ring_latency_slowest_link : bool
        2.5 and 2.6 charge every ring step the latency of the slowest link class
        (``latencies += nsteps*hwLat[hw]``, ``hw`` the network across machines; v2.5.6-2 and
        v2.6.4-1 ``tuning.cc``); 2.7 on split intra- and inter-machine steps.
    tree_caps : tuple or None
        The tree's total bus-bandwidth cap where the version has no per-channel one:
        ``(nodes, cap, cap above, cap A100 LL128, cap above A100 LL128)``, GB/s, the second of
        each pair for more than ``nodes`` machines (2.5: ``nNodes > 1 ? 70 : 90``; 2.6:
        ``nNodes > 2 ? 80 : 110``; 2.7: the same, 130 / 105 for LL128 on A100).
    tree_ll128_factors : tuple
        Tree/LL128 bus-bandwidth factor on one machine and on several (2.5, 2.6: 7/9 and 7/9;
        2.7 to 2.9: 7/9 and 0.915; 2.10 on: 7/9 and 120/128).
    ll128_collective_caps : dict
        2.7 to 2.9: LL128's per-channel cap by collective (``ll128MaxBwPerCh[coll]``), for
        rings and, times ``tree_ll128_cap_scale``, the all-reduce tree; empty: the
        per-generation tables above.
    ll128_collective_totals : dict
        2.5 and 2.6: ring/LL128's total cap by collective (``ll128MaxBw[coll]``), GB/s.
    tree_ll128_cap_scale : float
        2.7's tree/LL128 cap is ``ll128MaxBwPerCh[coll] x nChannels x 7/9``; 1 otherwise.
    nvls_tree_correction : bool
        2.29 on: the tuner applies ``treeCorrectionFactor`` to the NVLS tree's all-reduce too,
        on Blackwell with x86 hosts (``algorithm == NCCL_ALGO_NVLS_TREE && ... && minCompCap >=
        100 && cpuArch == NCCL_TOPO_CPU_ARCH_X86``, v2.29.2-1 ``tuning.cc``:595, 2.30.7 :644):
        the choice between NVLS trees and trees moves, the NVLS tree's run time does not.
    nvls_generations : tuple
        Generations NVLink SHARP runs on in this release (Hopper from 2.17, Blackwell from
        2.25, the first release for it); the NVSwitch must support multicast.
    """

    name: str
    source: str
    base_latency_us: dict
    hw_latency_us: dict
    ll_max_busbw: dict
    per_channel_ring_ll128: dict = field(default_factory=dict)
    per_channel_tree: dict = field(default_factory=dict)
    per_channel_tree_ll128: dict = field(default_factory=dict)
    per_channel_nvls_tree: dict = field(default_factory=dict)
    ring_ll_factor: float = 0.5
    ring_ll_factor_one_machine: float | None = None
    ring_ll128_factor: float = 0.92
    ring_ll128_one_rank_factor: float | None = None
    tree_factor: float = 0.92
    tree_ll_factor: float = 1.0 / 3.8
    ll128_generations: tuple = ("volta", "ampere", "hopper", "blackwell")
    net_overhead: bool = True
    ll_multinode_intra_factor: float = 1.0
    plateau: tuple = (1.9, 1.4)
    nvls: bool = True
    nvls_efficiency: dict = field(default_factory=dict)
    nvls_min_local_gpus: int = 3
    tree_correction: tuple = ()
    max_channels: int = 32
    nvls_generations: tuple = ("hopper",)
    nvls_tree_correction: bool = False
    busbw_cap: dict = field(default_factory=dict)
    plateau_trigger: str = "channels"
    inter_steps_all_nodes: bool = False
    ring_latency_slowest_link: bool = False
    tree_caps: tuple | None = None
    tree_ll128_factors: tuple = (7.0 / 9.0, 120.0 / 128.0)
    ll128_collective_caps: dict = field(default_factory=dict)
    ll128_collective_totals: dict = field(default_factory=dict)
    tree_ll128_cap_scale: float = 1.0

    @property
    def number(self) -> tuple[int, int]:
        major, minor = self.name.split(".")
        return int(major), int(minor)

    def ring_ll_factor_for(self, collective: str, nodes: int) -> float:
        """Ring/LL's bus-bandwidth factor for ``collective`` on ``nodes`` machines."""
        if (self.ring_ll_factor_one_machine is not None and nodes == 1
                and collective not in ("allreduce", "reduce")):
            return self.ring_ll_factor_one_machine
        return self.ring_ll_factor

    def tree_ll128_factor(self, nodes: int) -> float:
        """Tree/LL128's bus-bandwidth factor for ``nodes`` machines (``tree_ll128_factors``)."""
        return self.tree_ll128_factors[0 if nodes == 1 else 1]

    def ring_ll128_channel_cap(self, collective: str, generation: str, slot: int) -> float:
        """Ring/LL128's per-channel bus-bandwidth cap, GB/s (inf where there is none)."""
        if self.ll128_collective_caps:
            return self.ll128_collective_caps.get(collective, math.inf)
        return per_channel_cap(self.per_channel_ring_ll128, generation, slot)

    def tree_ll128_channel_cap(self, generation: str, slot: int) -> float:
        """Tree/LL128's per-channel bus-bandwidth cap (an all-reduce), GB/s."""
        if self.ll128_collective_caps:
            return self.ll128_collective_caps["allreduce"] * self.tree_ll128_cap_scale
        return per_channel_cap(self.per_channel_tree_ll128, generation, slot)

    def tree_cap(self, nodes: int, protocol: str, generation: str, slot: int,
                 channels: int) -> float:
        """The tree's bus-bandwidth cap for a call on ``channels`` search channels, GB/s:
        per channel where the version has a table, else its total cap (``tree_caps``)."""
        if self.per_channel_tree:
            return per_channel_cap(self.per_channel_tree, generation, slot) * channels
        if self.tree_caps is None:
            return math.inf
        split, cap, above, cap_ll128, above_ll128 = self.tree_caps
        if protocol == "LL128" and generation == "ampere":
            cap, above = cap_ll128, above_ll128
        return above if nodes > split else cap


def per_channel_cap(table: dict, generation: str, slot: int) -> float:
    """A per-channel cap of NCCL's tuner (``perChMax*Bws[generation][N1, N2, N4]``), GB/s;
    unbounded where the version has none."""
    return table.get(generation, (math.inf,) * 3)[slot]


_TREE_CORRECTION = (
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0,
     1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9,
     1.0, 1.0, 1.0),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9,
     .9),
)

#: ``ll128MaxBw[coll]`` of 2.5 and 2.6: ring/LL128's total cap, GB/s (v2.5.6-2, v2.6.4-1
#: ``tuning.cc``:77; broadcast, reduce, all-gather, reduce-scatter, all-reduce).
_LL128_TOTAL_25 = {"broadcast": 113.0, "reduce": 72.0, "allgather": 110.0,
                   "reduce_scatter": 91.0, "allreduce": 100.0}
#: ``ll128MaxBwPerCh[coll]`` of 2.7 to 2.9, GB/s per channel, but all-reduce (16.7 in 2.7,
#: 16.9 in 2.8 and 2.9): v2.7.8-1 ``tuning.cc``:74, v2.8.4-1 :73.
_LL128_PER_CHANNEL_27 = {"broadcast": 18.8, "reduce": 12.0, "allgather": 18.3,
                         "reduce_scatter": 15.2}
#: ``treeCorrectionFactor`` of 2.6 (v2.6.4-1 :232-236), 2.7 (v2.7.8-1 :247-251: 22 sizes)
#: and 2.8 / 2.9 (v2.8.4-1 :265-269: 23 sizes).
_TREE_CORRECTION_26 = (
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .5, .5, .6, .7, .8, .9, .9, 1.0, 1.0,
     1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .8, .7, .7, .7, .6, .6, .7, .7, .8, .8, .9, .9,
     1.0),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .5, .5, .6, .6, .7, .8, .9),
)
_TREE_CORRECTION_27 = (
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0,
     1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .5, .6, .6, .7, .7, .8, .9, .9,
     1.0),
    _TREE_CORRECTION_26[2],
)
_TREE_CORRECTION_28 = (
    _TREE_CORRECTION_27[0] + (1.0,),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .5, .6, .6, .7, .7, .8, .9, .9,
     .92, .92),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9),
)
_LL_MAX_212 = {"volta": (39.0, 39.0, 20.4), "ampere": (87.7, 22.5, 19.0),
               "intel": (39.0, 39.0, 20.4), "amd": (87.7, 22.5, 19.0)}
_PER_CH_TREE = {"volta": (26.5, 18.5, 10.0), "ampere": (24.0, 23.6, 17.8),
                "hopper": (38.7, 41.4, 36.0), "blackwell": (70.0, 42.8, 24.0)}
_PER_CH_RING_LL128 = {"volta": (20.0,) * 3, "ampere": (20.0,) * 3, "hopper": (36.7,) * 3,
                      "blackwell": (40.0,) * 3}
_PER_CH_NVLS_TREE = {"hopper": (0.0, 57.7, 45.5), "blackwell": (0.0, 96.0, 80.0)}
_PER_CH_TREE_LL128 = {"volta": (20.0,) * 3, "ampere": (20.0,) * 3,
                      "hopper": (36.7, 36.7, 29.0), "blackwell": (55.6, 31.67, 20.0)}

VERSIONS: dict[str, NcclVersion] = {}


def _add(version: NcclVersion) -> None:
    VERSIONS[version.name] = version


_add(NcclVersion(
    name="2.5", source="NVIDIA/nccl v2.5.6-2 src/graph/tuning.cc (baseLat, hwLat, ll128MaxBw, "
    "ncclSetThresholds)",
    base_latency_us=_lat((4.4, 4.4, 0.0), (3.6, 3.6, 8.4)),
    hw_latency_us={
        "nvlink": _lat((.5, 1.9, 28), (.4, 2.5, 5.7)),
        "pci": _lat((1.0, 1.9, 28), (1.0, 2.5, 5.7)),
        "net": _lat((5.0, 7.5, 50), (.9, 2.5, 6.6)),
    },
    # 2.5 caps no LL bandwidth by generation: ring LL is a quarter of the wire rate.
    ll_max_busbw={},
    ring_ll_factor=0.25, ring_ll128_factor=120.0 / 128.0, tree_factor=0.9,
    tree_ll_factor=1.0 / 3.0, ll128_generations=("volta",), net_overhead=False,
    plateau=(1.0, 1.0), nvls=False, ring_latency_slowest_link=True,
    tree_caps=(1, 90.0, 70.0, 90.0, 70.0), tree_ll128_factors=(7.0 / 9.0, 7.0 / 9.0),
    ll128_collective_totals=_LL128_TOTAL_25,
))
# NCCL 2.6 (v2.6.4-1 src/graph/tuning.cc; git diff v2.5.6-2 v2.6.4-1): 2.5's latencies and
# factors; the tree capped at 110 GB/s up to two machines and 80 beyond (was 90 / 70 one and
# several); treeCorrectionFactor appears (22 sizes). Volta alone runs LL128.
_add(replace(
    VERSIONS["2.5"], name="2.6",
    source="NVIDIA/nccl v2.6.4-1 src/graph/tuning.cc (:60-77 baseLat, hwLat, ll128MaxBw; :111-115 "
    "refinements, tree min(x.9, nNodes > 2 ? 80 : 110); :232-236 treeCorrectionFactor)",
    tree_caps=(2, 110.0, 80.0, 110.0, 80.0), tree_correction=_TREE_CORRECTION_26,
))
# NCCL 2.7 (v2.7.8-1; v2.7.3-1 to v2.7.8-1 alike): Ampere arrives. New latencies (ring LL128
# base 10 us, NVLink ring LL 0.47 us, network Simple tree 50 us), LL's intra-machine steps
# x1.8 across machines, intra and network steps split; A100 capped at 235 GB/s and runs
# LL128; LL128 capped per channel by collective (ll128MaxBwPerCh, the tree x7/9); the tree's
# total cap 110 / 80 GB/s (130 / 105 for LL128 on A100); the ring/Simple plateau x1.9.
_add(NcclVersion(
    name="2.7",
    source="NVIDIA/nccl v2.7.8-1 src/graph/tuning.cc (:56 baseLat, :63-70 hwLat, :74 "
    "ll128MaxBwPerCh, :112-124 refinements, :132 LL x1.8, :136 ring steps, :247-251 "
    "treeCorrectionFactor, :262 ring plateau x1.9)",
    base_latency_us=_lat((4.4, 4.4, 0.0), (3.6, 10.0, 8.4), (4.4, 4.4, 0.0)),
    hw_latency_us={
        "nvlink": _lat((.52, 1.2, 28), (.47, 1.9, 3.4), (.5, 1.2, 4.0)),
        "pci": _lat((1.0, 1.9, 28), (1.0, 2.5, 5.7), (1.0, 1.9, 5.5)),
        "net": _lat((5.0, 8.5, 50), (2.7, 4.0, 9.6), (5.0, 5.0, 10.7)),
    },
    ll_max_busbw={}, ring_ll_factor=0.25, ring_ll_factor_one_machine=1.0 / 3.0,
    ring_ll128_factor=0.92, ring_ll128_one_rank_factor=0.7, tree_factor=0.9,
    tree_ll_factor=1.0 / 3.8,
    ll128_generations=("volta", "ampere"), net_overhead=False, ll_multinode_intra_factor=1.8,
    plateau=(1.9, 1.9), nvls=False, tree_correction=_TREE_CORRECTION_27,
    busbw_cap={"ampere": 235.0}, plateau_trigger="ranks",
    tree_caps=(2, 110.0, 80.0, 130.0, 105.0), tree_ll128_factors=(7.0 / 9.0, 0.915),
    ll128_collective_caps={**_LL128_PER_CHANNEL_27, "allreduce": 16.7},
    tree_ll128_cap_scale=7.0 / 9.0,
))
# NCCL 2.8 and 2.9 (v2.8.3-1 to v2.9.9-1: tuning.cc differs only in CollNet between v2.8.4-1
# and v2.9.9-1): per-channel tree caps (perChMaxTreeBws) and LL caps (llMaxBws) replace the
# total tree cap; the tree factor 0.92; LL128's all-reduce cap 16.9 per channel, the tree no
# longer x7/9; NVLink tree LL128 1.25 us, network Simple tree 28 us; 23 correction sizes.
_add(replace(
    VERSIONS["2.7"], name="2.8",
    source="NVIDIA/nccl v2.8.4-1 src/graph/tuning.cc (:65-69 hwLat, :73-76 ll128MaxBwPerCh, "
    "llMaxBws, perChMaxTreeBws, :124-130 refinements, :265-269 treeCorrectionFactor); "
    "v2.9.9-1 the same outside CollNet",
    hw_latency_us={
        "nvlink": _lat((.52, 1.25, 28), (.47, 1.9, 3.4), (.5, 1.2, 4.0)),
        "pci": _lat((1.0, 1.9, 28), (1.0, 2.5, 5.7), (1.0, 1.9, 5.5)),
        "net": _lat((5.0, 8.5, 28), (2.7, 4.0, 9.6), (5.0, 5.0, 10.7)),
    },
    ll_max_busbw=_LL_MAX_212, tree_factor=0.92,
    per_channel_tree={"volta": (26.5, 18.5, 10.0), "ampere": (24.0, 22.5, 16.0)},
    tree_caps=None, ll128_collective_caps={**_LL128_PER_CHANNEL_27, "allreduce": 16.9},
    tree_ll128_cap_scale=1.0, tree_correction=_TREE_CORRECTION_28,
))
#: What 2.10 to 2.17 share (v2.10.3-1 and v2.11.4-1 ``src/graph/tuning.cc`` are identical;
#: v2.12.12-1 and v2.13.4-1 set ``hwLat[NET][Ring][Simple]`` to 28 instead of 9.6, and from 2.12
#: to 2.17 an all-reduce ring counts ``2 x nNodes`` network steps).
def _hw_latency_210(net_ring_simple: float) -> dict:
    """``hwLat`` of 2.10 to 2.17: identical but for the network ring's Simple step."""
    return {
        "nvlink": _lat((.52, 1.25, 28), (.47, 1.9, 3.4), (.5, 1.2, 8.0)),
        "pci": _lat((1.0, 1.9, 28), (1.0, 2.5, 5.7), (1.0, 1.9, 8.0)),
        "net": _lat((5.0, 8.5, 28), (2.7, 4.0, net_ring_simple), (5.0, 5.0, 10.7)),
    }


_V210_TO_217 = dict(
    base_latency_us=_lat((4.4, 4.4, 0.0), (3.6, 10.0, 8.4), (4.4, 4.4, 0.0)),
    ll_max_busbw=_LL_MAX_212,
    per_channel_ring_ll128={g: (20.0,) * 3 for g in GENERATIONS},
    per_channel_tree={"volta": (26.5, 18.5, 10.0), "ampere": (24.0, 23.6, 17.8)},
    per_channel_tree_ll128={g: (20.0,) * 3 for g in GENERATIONS},
    ring_ll_factor=0.25, ring_ll_factor_one_machine=1.0 / 3.0,
    ll128_generations=("volta", "ampere"), net_overhead=False,
    ll_multinode_intra_factor=1.8, plateau=(1.9, 1.9), nvls=False,
    tree_correction=_TREE_CORRECTION, busbw_cap={"ampere": 235.0}, plateau_trigger="ranks",
    ring_ll128_one_rank_factor=0.7,
)
for _name, _net_ring_simple, _all_nodes, _source in (
        ("2.10", 9.6, False, "NVIDIA/nccl v2.10.3-1 src/graph/tuning.cc (baseLat, hwLat, llMaxBws, "
         "perChMaxTreeBws, ll128MaxBwPerCh 20, compCap80 cap 235 :127, nInterSteps 2 x (nNodes "
         "- 1) :115, treeCorrectionFactor :265-271, ring plateau :282-283); v2.11.4-1 identical"),
        ("2.12", 28, True, "NVIDIA/nccl v2.12.12-1 src/graph/tuning.cc (baseLat, hwLat, llMaxBws, "
         "perChMaxTreeBws, ll128MaxBwPerCh 20, compCap80 cap 235 :126, nInterSteps 2 x nNodes "
         ":114, treeCorrectionFactor :267-271, ring plateau 1.9 :282-283); v2.13.4-1 the same"),
        ("2.14", 9.6, True, "NVIDIA/nccl v2.14.3-1 src/graph/tuning.cc: the 2.12 table with "
         "hwLat[NET][Ring][Simple] back at 9.6 (:71); the same in v2.15.5-1, v2.16.5-1 and "
         "v2.17.1-1 (2.17 adds Hopper rows and NVLS, not tabled here: use 2.18 for Hopper)")):
    _add(NcclVersion(name=_name, source=_source,
                     hw_latency_us=_hw_latency_210(net_ring_simple=_net_ring_simple),
                     inter_steps_all_nodes=_all_nodes, **_V210_TO_217))
_add(NcclVersion(
    name="2.18", source="NVIDIA/nccl v2.18.3-1 src/graph/tuning.cc (baseLat, hwLat, llMaxBws, "
    "perChMax*Bws, nvlsEfficiency; enqueue.cc plateau)",
    base_latency_us=_lat((6.8, 14.0, 0.0), (6.6, 14.0, 8.4), (6.8, 14.0, 0.0),
                         (6.8, 14.0, 0.0), (0, 0, 23.0), (0, 0, 23.0)),
    hw_latency_us={
        "nvlink": _lat((.6, 1.25, 4), (.6, 1.9, 3.4), (0, 0, 8.0), (0, 0, 4.75)),
        "pci": _lat((1.0, 1.9, 6), (1.0, 2.5, 5.7), (0, 0, 8.0), (0, 0, 8.0)),
        "net": _lat((5.0, 8.5, 14), (2.7, 4.0, 14.0), (0, 0, 10.7), (0, 0, 14), (0, 0, 18),
                    (0, 0, 19)),
    },
    ll_max_busbw={**_LL_MAX_212, "hopper": (87.7, 22.5, 19.0)},
    per_channel_ring_ll128=_PER_CH_RING_LL128, per_channel_tree=_PER_CH_TREE,
    per_channel_tree_ll128=_PER_CH_TREE_LL128,
    ring_ll_factor=0.25, ring_ll_factor_one_machine=1.0 / 3.0,
    ll128_generations=("volta", "ampere", "hopper"),
    nvls_efficiency={"hopper": 0.85}, tree_correction=_TREE_CORRECTION,
    inter_steps_all_nodes=True,
    ring_ll128_one_rank_factor=0.7,
))


def _hw_latency_221(tree_simple_intra: float, tree_simple_net: float,
                    nvls_tree_net: float = 14) -> dict:
    """``hwLat`` of NCCL 2.21 on (v2.21.5-1, v2.23.4-1 :66-77; 2.30's
    ``ncclTunerConstantsDefaults``): the releases differ in the Simple tree's per-hop latency
    inside a machine and across it, and 2.30 in NVLS tree's network latency."""
    return {
        "nvlink": _lat((.6, 1.25, tree_simple_intra), (.6, 1.9, 3.4), (0, 0, 3.7), (0, 0, 2.8),
                       (0, 0, 25), (0, 0, 25)),
        "pci": _lat((1.0, 1.9, tree_simple_intra), (1.0, 2.5, 5.7), (0, 0, 3.7), (0, 0, 2.8)),
        "net": _lat((5.0, 8.5, tree_simple_net), (2.7, 4.0, 14.0), (0, 0, 31), (0, 0, 30),
                    (0, 0, 18), (0, 0, nvls_tree_net)),
    }


_add(NcclVersion(
    name="2.21", source="NVIDIA/nccl v2.21.5-1 src/graph/tuning.cc (baseLat, hwLat, llMaxBws, "
    "perChMax*Bws, nvlsEfficiency, treeCorrectionFactor; ring LL x0.5); v2.22.3-1 the same. Its "
    "nInterSteps is 2 x nNodes (:161), as NCCL 2.22.3's printed predictions carry (NVIDIA/nccl "
    "issue #1453); the time charged counts 2 x (nNodes - 1), see NcclLibrary._latency",
    base_latency_us=_lat((6.8, 14.0, 0.0), (6.6, 14.0, 8.4)),
    hw_latency_us=_hw_latency_221(tree_simple_intra=28, tree_simple_net=28),
    ll_max_busbw={**_LL_MAX_212, "hopper": (141.0, 45.0, 35.0)},
    per_channel_ring_ll128=_PER_CH_RING_LL128, per_channel_tree=_PER_CH_TREE,
    per_channel_tree_ll128=_PER_CH_TREE_LL128,
    ll128_generations=("volta", "ampere", "hopper"),
    nvls_efficiency={"hopper": 0.85}, tree_correction=_TREE_CORRECTION,
    ring_ll128_one_rank_factor=0.7, inter_steps_all_nodes=True,
))
# NCCL 2.23 re-costed the Simple tree and the network steps (git diff v2.22.3-1 v2.23.4-1 --
# src/graph/tuning.cc): baseLat[Tree][Simple] 0 -> 8.4; hwLat[NVLINK|PCI][Tree][Simple]
# 28 -> 4.0 and hwLat[NET][Tree][Simple] 28 -> 14; nInterSteps 2 x nNodes -> 2 x (nNodes - 1);
# the ring LL128 discount for one GPU a machine (ppn < 2 ? 0.7) removed; with one GPU a
# machine every network step costs the tree's network latency ("ppn == 1 ?"). The same
# constants through v2.27.3-1 (v2.28 moves them into ncclTunerConstantsDefaults, the 2.30
# table).
_add(replace(
    VERSIONS["2.21"], name="2.23",
    source="NVIDIA/nccl v2.23.4-1 src/graph/tuning.cc (baseLat :57, hwLat :66-77, nInterSteps "
    ":258, ppn == 1 network latency :236); v2.24.3-1 to v2.27.3-1 the same constants",
    base_latency_us=_lat((6.8, 14.0, 8.4), (6.6, 14.0, 8.4)),
    hw_latency_us=_hw_latency_221(tree_simple_intra=4.0, tree_simple_net=14),
    ring_ll128_one_rank_factor=None, inter_steps_all_nodes=False,
))
# NCCL 2.25 to 2.27 (v2.25.1-1, v2.26.2-1, v2.27.3-1 src/graph/tuning.cc: ``git diff v2.23.4-1
# v2.25.1-1`` adds Blackwell, the first release for it): Blackwell rows in llMaxBws (282, 90,
# 70), perChMaxRingLL128Bws (73.4), perChMaxTreeLL128Bws (73.4, 73.4, 58) and perChMaxTreeBws
# (77.4, 82.8, 72), all "2*" Hopper's; LL128 on Blackwell (``case 100: pEnable &= 1``,
# v2.25.1-1:435; from 2.27 any compute capability >= 7.0 on NVLink); NVLS on Blackwell; 64
# channels (MAXCHANNELS, v2.25.1-1 device.h). Latencies as 2.23.
_add(replace(
    VERSIONS["2.23"], name="2.25",
    source="NVIDIA/nccl v2.25.1-1 src/graph/tuning.cc (:150-175 Blackwell rows, :426-436 LL128 "
    "on Blackwell); v2.26.2-1 and v2.27.3-1 the same constants",
    ll_max_busbw={**VERSIONS["2.23"].ll_max_busbw, "blackwell": (282.0, 90.0, 70.0)},
    per_channel_ring_ll128={**_PER_CH_RING_LL128, "blackwell": (73.4,) * 3},
    per_channel_tree_ll128={**_PER_CH_TREE_LL128, "blackwell": (73.4, 73.4, 58.0)},
    per_channel_tree={**_PER_CH_TREE, "blackwell": (77.4, 82.8, 72.0)},
    ll128_generations=GENERATIONS, nvls_generations=("hopper", "blackwell"), max_channels=64,
    # the engine's NVLS rate on Blackwell: NCCL's own figure from 2.28 (v2.28.3-1
    # nvlsEfficiency 0.74), as the older tables take Hopper's 0.85 (the 2.25 tuner has none)
    nvls_efficiency={"hopper": 0.85, "blackwell": 0.74},
))
_add(NcclVersion(
    name="2.30", source="NVIDIA/nccl master 2.30.7 (5067397c) src/graph/tuning.cc "
    "(ncclTunerConstantsDefaults, nvlsEfficiency, treeCorrectionFactor); src/transport/nvls.cc "
    "(NVLS from 2 GPUs a machine)",
    nvls_min_local_gpus=2,
    base_latency_us=_lat((6.8, 14.0, 8.4), (6.6, 14.0, 8.4)),
    hw_latency_us=_hw_latency_221(tree_simple_intra=4.0, tree_simple_net=14, nvls_tree_net=20.9),
    ll_max_busbw={"volta": (39.0, 39.0, 20.4), "ampere": (87.7, 22.5, 19.0),
                  "hopper": (141.0, 45.0, 35.0), "blackwell": (282.0, 90.0, 70.0),
                  "intel": (39.0, 39.0, 20.4), "amd": (87.7, 22.5, 19.0)},
    per_channel_ring_ll128=_PER_CH_RING_LL128, per_channel_tree=_PER_CH_TREE,
    per_channel_tree_ll128=_PER_CH_TREE_LL128,
    per_channel_nvls_tree=_PER_CH_NVLS_TREE,
    nvls_efficiency={"hopper": 0.85, "blackwell": 0.74}, tree_correction=_TREE_CORRECTION,
    max_channels=64, nvls_generations=("hopper", "blackwell"), nvls_tree_correction=True,
))

#: NCCL 2.28 and 2.29 (v2.28.3-1, v2.29.2-1 ``ncclTunerConstantsDefaults`` and
#: ``nvlsEfficiency``: 2.30's way of costing NVLS). Against 2.30: the NVLS tree's network step
#: 14 us in 2.28 (20.9 from 2.29), Blackwell's ring/LL128 per channel 73.4 GB/s in 2.28 and
#: 34.5 / 34.6 / 34.5 in 2.29 (40 in 2.30), Blackwell's NVLS tree per channel 43.1 (2.28) and
#: 43.8 (2.29) with more than two machines (80 in 2.30); NVLS needs three GPUs a machine up to
#: 2.28.6 (``gpuCount <= 2``), two from 2.28.7 (taken for 2.29).
_add(replace(
    VERSIONS["2.30"], name="2.28",
    source="NVIDIA/nccl v2.28.3-1 src/graph/tuning.cc (ncclTunerConstantsDefaults :140-200, "
    "nvlsEfficiency :134-139)",
    nvls_min_local_gpus=3, nvls_tree_correction=False,
    hw_latency_us=_hw_latency_221(tree_simple_intra=4.0, tree_simple_net=14, nvls_tree_net=14),
    per_channel_ring_ll128={**_PER_CH_RING_LL128, "blackwell": (73.4,) * 3},
    per_channel_nvls_tree={**_PER_CH_NVLS_TREE, "blackwell": (0.0, 96.0, 43.1)},
))
_add(replace(
    VERSIONS["2.30"], name="2.29",
    source="NVIDIA/nccl v2.29.2-1 src/graph/tuning.cc (ncclTunerConstantsDefaults :140-200)",
    per_channel_ring_ll128={**_PER_CH_RING_LL128, "blackwell": (34.5, 34.6, 34.5)},
    per_channel_nvls_tree={**_PER_CH_NVLS_TREE, "blackwell": (0.0, 96.0, 43.8)},
))

#: The version used when none is given: the newest.
DEFAULT_VERSION = "2.30"


def min_traffic_per_channel(release: tuple) -> int:
    """``MinTrafficPerChannel`` of NCCL's kernel planner (``scheduleCollTasksToPlan`` in
    ``src/enqueue.cc``): the traffic, bytes, below which a call is not spread over one more
    channel. 512 in 2.22 (v2.22.3-1:614), 16 KiB from 2.23 to 2.28 (v2.23.4-1:723,
    v2.28.3-1:512), 32 KiB from 2.29 (v2.29.2-1:576, v2.30.7-1:585); none before 2.22."""
    release = tuple(release)
    if release >= (2, 29):
        return 32 << 10
    if release >= (2, 23):
        return 16 << 10
    return 512 if release >= (2, 22) else 0


def ll_traffic_factor(release: tuple) -> int:
    """How much smaller the planner's cells are for LL: ``trafficPerByte *= 4`` from 2.27
    (v2.27.3-1 ``enqueue.cc``; absent in v2.25.1-1), so an LL call spreads over four times
    the channels of a Simple one of its size."""
    return 4 if tuple(release) >= (2, 27) else 1

#: NCCL's achievable bandwidth of one NVLink per direction, GB/s, by compute capability
#: (``SM60_NVLINK_BW`` .. ``SM100_NVLINK_BW`` in ``src/graph/topo.h``, 2.30.7; SM70 is 20.0
#: since 2.6, 21.0 before) against the nominal per-link rate of that NVLink generation
#: (NVLink 1: 20 GB/s, NVLink 2/3/4: 25 GB/s, NVLink 5: 50 GB/s per direction; NVIDIA
#: P100/V100/A100/H100/B200 datasheets). Keys: (min compute capability, NCCL GB/s, nominal GB/s).
NVLINK_PER_LINK = ((100, 40.1, 50.0), (90, 20.6, 25.0), (86, 12.0, 14.0625), (80, 20.0, 25.0),
                   (70, 20.0, 25.0), (60, 18.0, 20.0))

#: NCCL's PCIe bandwidth: ``width * speed / 80`` GB/s with speed in 100 Mb/s per lane
#: (``kvDictPciGen``, ``src/graph/topo.cc``): Gen3 x16 = 16 x 60 / 80 = 12 GB/s, Gen4 24, Gen5 48,
#: against the 128b/130b line rate (Gen3 x16 15.754 GB/s): 12 / 15.754.
PCIE_EFFICIENCY = 12.0 / (8.0 * 16 * 128 / 130 / 8)

#: The data path inside one call (:mod:`simulator.library.datapath`), identical in every
#: version tabled here (NVIDIA/nccl v2.5.6-2 .. v2.30.7-1; ``docs/nccl_sources.md`` section 2):
#:
#: ``NCCL_STEPS`` 8: slots of every connection's FIFO (``src/include/device.h``).
NCCL_STEPS = 8
#: Bytes of one connection's FIFO per protocol: Simple ``DEFAULT_BUFFSIZE`` 4 MiB; LL
#: ``NCCL_LL_LINES_PER_THREAD x NCCL_LL_MAX_NTHREADS x NCCL_STEPS x 16`` = 512 KiB; LL128
#: ``NCCL_LL128_ELEMS_PER_THREAD x NCCL_LL128_MAX_NTHREADS x NCCL_STEPS x 8`` = 4,915,200
#: (``src/init.cc``).
BUFFSIZE = {"Simple": 4 << 20, "LL": 8 * 512 * 8 * 16, "LL128": 120 * 640 * 8 * 8}
#: Payload bytes per FIFO byte: LL carries 8 data bytes per 16-byte line (``calcBytePerStep``
#: ``/2``, ``prims_ll.h``), LL128 ``NCCL_LL128_DATAELEMS / NCCL_LL128_LINEELEMS`` = 15/16
#: (``prims_ll128.h``), Simple all of it.
PAYLOAD_FRACTION = {"Simple": 1.0, "LL": 0.5, "LL128": 15.0 / 16.0}
#: ``(CHUNKSTEPS, SLICESTEPS)`` of the ring collectives with the Simple protocol
#: (``src/include/collectives.h``: ``ALLREDUCE_CHUNKSTEPS = NCCL_STEPS/2``, ``ALLREDUCE_SLICESTEPS
#: = NCCL_STEPS/4``, the same for all-gather and reduce-scatter; broadcast and reduce 1, 1).
#: LL and LL128 move one step per chunk in one slice (``enqueue.cc``: ``chunkSteps =
#: sliceSteps = 1`` unless Simple and ring).
RING_STEPS = {"allreduce": (NCCL_STEPS // 2, NCCL_STEPS // 4),
              "allgather": (NCCL_STEPS // 2, NCCL_STEPS // 4),
              "reduce_scatter": (NCCL_STEPS // 2, NCCL_STEPS // 4),
              "broadcast": (1, 1), "reduce": (1, 1)}
#: NCCL's PCIe bandwidth of a Gen3 x16 link, GB/s (``PCI_BW`` 12.0, ``src/graph/topo.h``): a ring
#: whose graph bandwidth is at most this runs Simple with 256 threads, else 512
#: (``tuning.cc``: ``simpleDefaultThreads``).
PCI_BW = 12.0


def inter_cpu_GBps(family: str, release: tuple | None = None) -> float:
    """NCCL's bandwidth between two CPU sockets, GB/s (``ncclTopoGetInterCpuBw``).

    ``family`` is the CPU class NCCL detects (``ncclTopoCpuType``): ``"bdw"`` (Intel before
    Skylake), ``"skl"``, ``"srp"``, ``"erp"``, ``"amd"``, ``"arm"``; ``release`` the NCCL
    ``(major, minor)`` (None: the newest). Values of ``src/graph/topo.h``: v2.5.6 ``QPI_WIDTH``
    8 and ``SKL_QPI_WIDTH`` 12; v2.6.4 6.0 and 9.0 (``ARM_WIDTH`` 6.0); v2.18.1 ``SKL_QPI_BW``
    10.0; v2.19.1 ``AMD_BW`` 16.0 (before it an AMD host's sockets were not limited:
    ``LOC_BW``); v2.26.2 ``SRP_QPI_BW`` 22.0 and ``ERP_QPI_BW`` 40.0 (before it NCCL classed
    those CPUs as Skylake: ``modelId >= 0x55``). An unknown family is not limited (inf).
    """
    release = release or (99, 99)
    if family in ("srp", "erp") and release < (2, 26):
        family = "skl"
    if family == "bdw":
        return 8.0 if release < (2, 6) else 6.0
    if family == "skl":
        return 12.0 if release < (2, 6) else 9.0 if release < (2, 18) else 10.0
    if family == "srp":
        return 22.0
    if family == "erp":
        return 40.0
    if family == "amd":
        return math.inf if release < (2, 19) else 16.0
    if family == "arm":
        return 6.0
    return math.inf


_NAMED_RELEASE = re.compile(r"nccl\D{0,12}?(\d+)\.(\d+)", re.IGNORECASE)
_RELEASE = re.compile(r"(?<![\d.])(\d)\.(\d+)")
_NOT_STATED = re.compile(r"\s*(not\b|unknown|unstated|n/?a\b|none\b)", re.IGNORECASE)


def release_number(text) -> tuple | None:
    """(major, minor) of the NCCL release a text names (``"2.18.3"``, ``"2.5.6 (stated in
    requirements list)"``, ``"NCCL 2.11.4, CUDA 11.6"``), or None where it names none.

    A release written after the word NCCL wins; otherwise the first ``x.y`` with a one-digit
    major (NCCL's are 1 and 2; CUDA's, drivers' and frameworks' numbers around it are not
    NCCL's). A text that says the version is not stated (``not ...``, ``unknown``,
    ``n/a``, ``none``) names none, whatever it mentions after that (``"not stated (CUDA 12.4,
    driver 550.90.07)"``, ``"not printed (plugin image v1.0.15)"``).
    """
    text = str(text or "")
    if _NOT_STATED.match(text):
        return None
    match = _NAMED_RELEASE.search(text) or _RELEASE.search(text)
    return (int(match.group(1)), int(match.group(2))) if match else None


def get_version(text: str | None) -> NcclVersion:
    """The table for an NCCL version string (``"2.18.3"``, ``"2.5.6 (stated ...)"``, ``None``).

    The newest table not newer than the given version (:func:`release_number`); unknown or
    missing text gives :data:`DEFAULT_VERSION`; a version older than every table gives the
    oldest.
    """
    wanted = release_number(text)
    if wanted is None:
        return VERSIONS[DEFAULT_VERSION]
    ordered = sorted(VERSIONS.values(), key=lambda v: v.number)
    chosen = ordered[0]
    for version in ordered:
        if version.number <= wanted:
            chosen = version
    return chosen
