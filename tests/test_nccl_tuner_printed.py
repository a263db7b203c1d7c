"""The NCCL tuner replica against NCCL's own printed predictions.

``tests/data/nccl_tuner/issue1453_h100_3x8_nccl2223.csv`` holds what NCCL 2.22.3 printed
(``NCCL_DEBUG_SUBSYS=TUNING``) for an all-reduce on 3 machines of 8 H100 with 8 x 200 Gb/s
RoCE NICs each (NVIDIA/nccl issue #1453; provenance in the file's header). The replica must
pick the same algorithm and protocol at every printed size and predict the same time: the
latencies (``baseLat``, ``hwLat``, ``2 x nNodes`` network steps of 2.12-2.22), the graph
search's channel speed (8 x 24 GB/s, ``search.cc``'s speed table), the tree pattern's 0.85 and
the tree correction all enter these numbers.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from simulator.collective import run_collective
from simulator.errors import ConfigError
from simulator.library.machine import machine_facts
from simulator.library.nccl import (TREE_PATTERN_FACTOR, NcclLibrary, search_speed)
from simulator.topology import load_topology

DATA = Path(__file__).parent / "data" / "nccl_tuner" / "issue1453_h100_3x8_nccl2223.csv"
ALGORITHMS = {0: "tree", 1: "ring", 5: "nvls_tree"}
PROTOCOLS = {0: "LL", 1: "LL128", 2: "Simple"}
MACHINES = {"nodes": "3", "nic_bandwidth": "200Gbps", "network": "ethernet",
            "tree_pattern": "tree"}


def _printed() -> pd.DataFrame:
    return pd.read_csv(DATA, comment="#")


def _best(graph, size_bytes: int, version: str = "2.22"):
    return NcclLibrary(version=version).candidates(graph, "allreduce", size_bytes, 24)[0]


def test_the_file_is_what_the_issue_printed():
    rows = _printed()
    assert len(rows) == 20
    assert rows.size_bytes.is_monotonic_increasing
    assert set(rows.algo) == {0, 1, 5} and set(rows.proto) == {0, 1, 2}


@pytest.mark.parametrize("row", list(_printed().itertuples(index=False)),
                         ids=lambda r: f"{r.size_bytes}B")
def test_replica_picks_and_prices_as_nccl_2_22_printed(row):
    graph = load_topology("hgx-h100", MACHINES)
    best = _best(graph, int(row.size_bytes))
    assert (best.algorithm, best.protocol) == (ALGORITHMS[row.algo], PROTOCOLS[row.proto])
    # NCCL prints six decimals of a float computation
    assert best.predicted_time_us == pytest.approx(row.predicted_time_us, rel=1e-6, abs=2e-6)


def test_the_tree_pattern_is_what_moves_the_small_rows():
    """With the balanced tree's pattern the Tree/LL rate is 20.4 / 2 GB/s, not 0.85 of it:
    the printed 8 KiB prediction is then missed, and 512 KiB goes to Tree/LL128."""
    balanced = load_topology("hgx-h100", {**MACHINES, "tree_pattern": "balanced"})
    tree = load_topology("hgx-h100", MACHINES)
    ll_balanced = next(c for c in NcclLibrary(version="2.22").candidates(
        balanced, "allreduce", 8, 24) if (c.algorithm, c.protocol) == ("tree", "LL"))
    ll_tree = next(c for c in NcclLibrary(version="2.22").candidates(
        tree, "allreduce", 8, 24) if (c.algorithm, c.protocol) == ("tree", "LL"))
    assert ll_balanced.algbw_GBps == pytest.approx(10.2)
    assert ll_tree.algbw_GBps == pytest.approx(10.2 * TREE_PATTERN_FACTOR)
    assert _best(balanced, 8192).predicted_time_us != pytest.approx(26.549810, rel=1e-6)
    assert (_best(balanced, 524288).algorithm, _best(tree, 524288).algorithm) == (
        "tree", "nvls_tree")


def test_one_gpu_a_machine_always_takes_the_plain_tree_pattern():
    """NCCL's search forces the plain tree on a machine of one GPU (``ngpus == 1``), on any
    GPU, from 2.18 (where the tuner's 0.85 appears); the balanced default does not apply."""
    one = load_topology("dgx-a100", {"nodes": "2", "gpus_per_node": "1"})
    facts = machine_facts(one, 2)
    assert NcclLibrary(version="2.18")._tree_pattern_factor(facts) == TREE_PATTERN_FACTOR
    assert NcclLibrary(version="2.14")._tree_pattern_factor(facts) == 1.0
    eight = load_topology("dgx-a100", {"nodes": "2", "tree_pattern": "tree"})
    # Ampere never falls back to the plain tree: the search's retry is for sm90 and later
    assert NcclLibrary(version="2.30")._tree_pattern_factor(machine_facts(eight, 16)) == 1.0


def test_tree_pattern_parameter_is_checked():
    with pytest.raises(ConfigError, match="tree_pattern: expected one of balanced, tree"):
        load_topology("hgx-h100", {"nodes": "2", "tree_pattern": "split"})


@pytest.mark.parametrize("path_GBps, cc, speed", [
    (25.0, 90, 24.0), (50.0, 90, 48.0), (48.0, 90, 48.0), (47.9, 90, 48.0), (47.0, 90, 45.0),
    (47.0, 80, 30.0), (31.5 * 12 / 15.754, 80, 24.0),
    (12.5, 80, 12.0), (12.5, 90, 12.0), (0.01, 80, 0.12)])
def test_search_speed_is_the_fastest_table_entry_that_fits(path_GBps, cc, speed):
    assert search_speed(path_GBps, cc) == speed


def test_ring_time_counts_the_newer_network_steps():
    """The 2.22 tuner's ring carries 2 x nNodes network steps (its choice and prediction),
    the time charged 2 x (nNodes - 1), as NCCL 2.23 on counts them: the plan's fixed time
    differs from the tuner's latency by two network steps' extra latency, and is the same
    under the 2.23 table, whose tuner already counts that way."""
    graph = load_topology("hgx-h100", MACHINES)
    size = 512 << 20
    ring = next(c for c in NcclLibrary(version="2.22").candidates(graph, "allreduce", size, 24)
                if (c.algorithm, c.protocol) == ("ring", "Simple"))
    newer = next(c for c in NcclLibrary(version="2.23").candidates(graph, "allreduce", size,
                                                                   24)
                 if (c.algorithm, c.protocol) == ("ring", "Simple"))
    step_extra = (ring.inter_latency_us - ring.intra_latency_us) * 1.4   # plateau x 1.4
    assert ring.latency_us - ring.charged_latency_us == pytest.approx(2 * step_extra)
    assert newer.time_latency_us is None
    assert math.isclose(ring.charged_latency_us, newer.latency_us, rel_tol=1e-12)
    a = run_collective(graph, "allreduce", "ring", size, library=NcclLibrary(version="2.22"),
                       protocol="Simple", engine="fast")
    b = run_collective(graph, "allreduce", "ring", size, library=NcclLibrary(version="2.23"),
                       protocol="Simple", engine="fast")
    assert a.plan.fixed_time_s == pytest.approx(b.plan.fixed_time_s, rel=1e-12)


@pytest.mark.parametrize("preset", ["hgx-h100", "hgx-h200"])
def test_one_hopper_machine_runs_nccls_channels_and_choices(preset):
    """NCCL 2.30.7 on one machine of 8 H100 (and 8 H200, "decides identically"), as printed
    with NCCL_DEBUG_SUBSYS=TUNING in rakshithvasudev.github.io "Inside NCCL's all-reduce"
    (2026-08-02): ``4096 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..0}``, ``1048576
    Bytes -> Algo RING proto LL channel{Lo..Hi}={0..23}``, ``2097152 Bytes -> Algo NVLS proto
    SIMPLE``; "ring with LL up to 1 MiB, then straight to the switch from 2 MiB on", no tree,
    no LL128. The search: 6 channels at 60 GB/s, doubled to 12 at 30, run as 24."""
    graph = load_topology(preset, {})
    lib = NcclLibrary(version="2.30")
    for size in (256, 4096, 65536, 1 << 20):
        best = lib.candidates(graph, "allreduce", size, 8)[0]
        assert (best.algorithm, best.protocol) == ("ring", "LL"), size
    for size in (2 << 20, 64 << 20, 4 << 30):
        best = lib.candidates(graph, "allreduce", size, 8)[0]
        assert (best.algorithm, best.protocol) == ("nvls", "Simple"), size
    channels = {size: run_collective(graph, "allreduce", "auto", size, library=lib,
                                     engine="fast").plan.notes["dp_channels"]
                for size in (4096, 1 << 20)}
    assert channels == {4096: 1, 1 << 20: 24}


def test_eight_nics_of_200_gbps_run_sixteen_channels():
    """nccl#1453's machines (8 x 200 Gb/s NICs): "16 coll channels" (the search's 8, one per
    NIC at 24 GB/s, doubled at run time); the ring's data path runs on them."""
    graph = load_topology("hgx-h100", MACHINES)
    lib = NcclLibrary(version="2.22")
    facts = machine_facts(graph, 24)
    intra, inter, channels, speed, _ = lib._search(graph, 24, facts)
    assert (channels, speed, inter) == (8, 24.0, 192.0)
    run = run_collective(graph, "allreduce", "ring", 512 << 20, library=lib,
                         protocol="Simple", engine="fast")
    assert run.plan.notes["dp_channels_max"] == 16


@pytest.mark.parametrize("gpu, total_GBps, cc, release, printed, source", [
    # "24 coll channels" on one p5 machine (8 H100): stored log id 60735788134
    ("H100", 18 * 20.6, 90, (2, 27), 24, "p5.48xlarge, one machine"),
    # "Channel 23/24" on one HGX A100: NVIDIA/nccl-tests #100; p4d: stored log id 24143200807
    ("A100", 12 * 20.0, 80, (2, 27), 24, "nccl-tests#100"),
    # "32 coll channels" on one DGX B200, NCCL 2.25.1: NVIDIA/nccl #1646
    ("B200", 18 * 40.1, 100, (2, 25), 32, "nccl#1646"),
    # "16 coll channels" on one H800 machine (8 NVLinks), NCCL 2.18.3: stored log id 24836070500
    ("H800", 8 * 20.6, 90, (2, 18), 16, "Inspur NF5688M7"),
])
def test_one_nvswitch_machine_runs_the_channels_nccl_printed(gpu, total_GBps, cc, release,
                                                           printed, source):
    """``nvswitch_search``: the search's channels, doubled at run time, are what NCCL printed
    (``N coll channels``) on these machines; H800 needs pass 1's slower speeds (2 x 60 falls
    short of 164.8 GB/s, 4 x 40 is more)."""
    from simulator.library.nccl import nvswitch_search
    most = 32 if release >= (2, 25) else 16
    channels, speed = nvswitch_search(total_GBps, cc, release, most)
    assert 2 * channels == printed, source
    assert channels * speed <= total_GBps * 1.01


def test_two_h100_machines_with_eight_ndr_nics_run_sixteen_channels():
    """"16 coll channels, 16 collnet channels, 16 nvls channels" on 2 x 8 H100 with 8 x 400
    Gb/s ConnectX-7 InfiniBand, NCCL 2.26.2 (NVIDIA/nccl-tests #319, stored id 69706469670):
    the search's 8 x 48 GB/s, not doubled (Hopper, more than 4 channels below 50 GB/s)."""
    graph = load_topology("hgx-h100", {"nodes": 2})
    facts = machine_facts(graph, 16)
    _, inter, channels, speed, _ = NcclLibrary(version="2.26")._search(graph, 16, facts)
    assert (2 * channels, speed, inter) == (16, 48.0, 384.0)
