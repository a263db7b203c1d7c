"""The collective-library layer: NCCL's cost model, its tuner, and its costs reaching the engine.

Numbers asserted here are hand-computed from NVIDIA/nccl's tuning.cc constants (see
``simulator/library/nccl_constants.py``), not read back from the code under test.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from simulator.cli import main
from simulator.collective import run_collective
from simulator.errors import ConfigError
from simulator.library import default_library, get_library, parse_launch
from simulator.library.launch import Launch, launch_from_notes
from simulator.library.datapath import LL128_RING_CHANNEL_RATE
from simulator.library.machine import machine_facts, node_index_slot
from simulator.library.nccl_constants import DEFAULT_VERSION, get_version, release_number
from simulator.schedules import make_schedule
from simulator.schedules.double_tree import channel_trees
from simulator.schedules.execute import verify
from simulator.topology import build, load_topology

A100 = load_topology("dgx-a100", {})
A100_2 = load_topology("dgx-a100-2node", {})
H100 = load_topology("hgx-h100", {})


def _cand(lib, graph, size, gpus, algo, proto):
    for c in lib.candidates(graph, "allreduce", size, gpus):
        if (c.algorithm, c.protocol) == (algo, proto):
            return c
    raise AssertionError(f"{algo}/{proto} not a candidate")


def test_default_library_by_topology():
    assert default_library(A100) == "nccl"
    assert default_library(build("star", {"hosts": 4})) == "ideal"
    assert default_library(build("fat_tree", {})) == "ideal"


def test_ideal_library_is_the_bare_engine():
    star = build("star", {"hosts": 8})
    plain = run_collective(star, "allreduce", "ring", 1 << 20)
    ideal = run_collective(star, "allreduce", "ring", 1 << 20, library="ideal")
    assert plain.row["time_s"] == ideal.row["time_s"]
    assert ideal.row["library"] == "ideal" and ideal.row["protocol"] == ""
    # 2(p-1)(2 latency + c/B) with c = n/p: the closed form the ideal library keeps
    expected = 14 * (2e-6 + (1 << 20) / 8 / 12.5e9)
    assert ideal.row["time_s"] == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("version, ring_ll, tree_ll", [
    ("2.30", 6.6 + 14 * 0.6, 6.8 + 2 * 7 * 0.6),     # baseLat + nsteps x hwLat[NVLINK]
    ("2.12", 3.6 + 14 * 0.47, 4.4 + 2 * 7 * 0.52),
    ("2.5", 3.6 + 14 * 0.4, 4.4 + 2 * 7 * 0.5),
])
def test_single_node_latencies_are_nccls(version, ring_ll, tree_ll):
    lib = get_library("nccl", version=version)
    assert _cand(lib, A100, 8, 8, "ring", "LL").latency_us == pytest.approx(ring_ll)
    assert _cand(lib, A100, 8, 8, "tree", "LL").latency_us == pytest.approx(tree_ll)


def test_multi_node_ring_latency_counts_network_steps_and_amd_overhead():
    # DGX A100 has AMD EPYC CPUs: NCCL >= 2.18 charges max(hwLat, 2 us) per intra step across
    # nodes; 16 ranks, 2 nodes: 30 steps, 2 of them over the network (2.7 us for LL).
    lib = get_library("nccl", version="2.30")
    assert _cand(lib, A100_2, 8, 16, "ring", "LL").latency_us == pytest.approx(
        6.6 + 28 * 2.0 + 2 * 2.7)
    # 2.10 / 2.11: no net overhead, LL intra latency x1.8 across nodes, 2 (nNodes - 1)
    # network steps (v2.10.3-1 tuning.cc:115)
    lib = get_library("nccl", version="2.11.4")
    assert lib.version.name == "2.10"
    assert _cand(lib, A100_2, 8, 16, "ring", "LL").latency_us == pytest.approx(
        3.6 + 28 * 0.47 * 1.8 + 2 * 2.7)
    # 2.12 to 2.17 count 2 x nNodes network steps for an all-reduce (v2.12.12-1 tuning.cc:114)
    for version in ("2.12", "2.14"):
        lib = get_library("nccl", version=version)
        assert _cand(lib, A100_2, 8, 16, "ring", "LL").latency_us == pytest.approx(
            3.6 + 26 * 0.47 * 1.8 + 4 * 2.7)
    # 2.18 to 2.22 too (v2.18.3-1 tuning.cc:161), with 2.18's AMD net overhead per intra step
    lib = get_library("nccl", version="2.18")
    assert _cand(lib, A100_2, 8, 16, "ring", "LL").latency_us == pytest.approx(
        6.6 + 26 * 2.0 + 4 * 2.7)
    # the network ring Simple step: 9.6 us in 2.10-2.11 and 2.14-2.17, 28 in 2.12-2.13
    nets = {v: get_library("nccl", version=v).version.hw_latency_us["net"]["ring"][2]
            for v in ("2.10", "2.12", "2.14")}
    assert nets == {"2.10": 9.6, "2.12": 28, "2.14": 9.6}


@pytest.mark.parametrize("asked, table", [
    ("2.5.6", "2.5"), ("2.6.4", "2.6"), ("2.7.8", "2.7"), ("2.8.4", "2.8"), ("2.9.9", "2.8"),
    ("2.10.3", "2.10"), ("2.11.4", "2.10"), ("2.12.12", "2.12"),
    ("2.13.4", "2.12"), ("2.14.3", "2.14"), ("2.17.1", "2.14"), ("2.18.3", "2.18"),
    ("2.30.4", "2.30"),
])
def test_each_release_gets_the_newest_table_not_newer(asked, table):
    assert get_library("nccl", version=asked).version.name == table


@pytest.mark.parametrize("version, factor", [("2.10", 0.7), ("2.21", 0.7), ("2.30", 0.92)])
def test_ll128_ring_with_one_gpu_per_machine(version, factor):
    """``busBw * (ppn < 2 ? 0.7 : 0.92)`` for LL128 rings (v2.10.3-1:129 .. v2.21.5-1:181; 2.23
    on keeps 0.92 whatever the GPUs per machine)."""
    one = load_topology("dgx-a100-2node", {"gpus_per_node": 1})
    lib = get_library("nccl", version=version)
    ll128 = _cand(lib, one, 1 << 30, 2, "ring", "LL128")
    # one GPU a machine: its PCIe link (NCCL's 24 GB/s) carries every channel, so one
    per_channel = lib.version.ring_ll128_channel_cap("allreduce", "ampere", node_index_slot(2))
    assert ll128.channels == 1 and ll128.wire_busbw_GBps == pytest.approx(24.0)
    assert ll128.busbw_GBps == pytest.approx(min(
        min(ll128.wire_busbw_GBps, 235.0 if version == "2.10" else float("inf")) * factor,
        per_channel * ll128.channels))
    assert (ll128.busbw_GBps < ll128.wire_busbw_GBps * 0.92) == (factor < 0.92 or per_channel
                                                                 < 24.0 * 0.92)


@pytest.mark.parametrize("version, cap", [("2.10", 235.0), ("2.12", 235.0), ("2.14", 235.0),
                                          ("2.18", None)])
def test_nccl_210_to_212_cap_a100_bus_bandwidth_at_235(version, cap):
    """``if (compCap80) busBw = std::min(busBw, 235.0f)`` (v2.10.3-1 to v2.17.1-1 tuning.cc),
    gone in 2.18: 12 NVLink3 links at NCCL's 20 GB/s are 240 GB/s."""
    simple = _cand(get_library("nccl", version=version), A100, 1 << 30, 8, "ring", "Simple")
    assert simple.busbw_GBps == pytest.approx(cap if cap else 240.0)


@pytest.mark.parametrize("version", ["2.10", "2.12", "2.30"])
def test_tree_correction_from_nccl_210(version):
    """treeCorrectionFactor (identical from 2.10.3 to 2.30.7): at 64 KiB, log2(64 KiB / 64) =
    10, the LL tree runs at 0.6 of its bus bandwidth, Simple at 0.6, LL128 at 0.6."""
    lib = get_library("nccl", version=version)
    for proto in ("LL", "LL128", "Simple"):
        tree = _cand(lib, A100_2, 64 << 10, 16, "tree", proto)
        assert tree.algbw_GBps == pytest.approx(0.5 * tree.busbw_GBps * 0.6)


@pytest.mark.parametrize("version, below, at", [
    ("2.12", 32 << 10, 64 << 10),     # nBytes >= nRanks / 16 x 64 KiB: 16 ranks -> 64 KiB
    ("2.30", 8 << 10, 16 << 10),      # nBytes / (16 run-time channels x 16 ranks) >= 64
])
def test_ring_plateau_starts_where_nccl_says(version, below, at):
    lib = get_library("nccl", version=version)
    base = lib.version.plateau[1]          # A100: compute capability 8.0
    small = _cand(lib, A100_2, below, 16, "ring", "Simple")
    large = _cand(lib, A100_2, at, 16, "ring", "Simple")
    lat, *_ = lib._latency("ring", "Simple", 2, "allreduce", 30, machine_facts(A100_2, 16))
    assert small.latency_us == pytest.approx(lat)
    assert large.latency_us == pytest.approx(lat * base)


def test_protocol_bandwidths_follow_nccl_refinements():
    lib = get_library("nccl", version="2.30")
    wire = 300.0 * 20.0 / 25.0          # 12 NVLink3 links at NCCL's 20 GB/s each
    simple = _cand(lib, A100, 1 << 30, 8, "ring", "Simple")
    assert simple.wire_busbw_GBps == pytest.approx(wire)
    assert simple.busbw_GBps == pytest.approx(wire)
    assert _cand(lib, A100, 1 << 30, 8, "ring", "LL").busbw_GBps == pytest.approx(87.7)
    ll128 = _cand(lib, A100, 1 << 30, 8, "ring", "LL128")
    assert ll128.busbw_GBps == pytest.approx(min(wire * 0.92, 12 * 20.0))
    assert ll128.channels == 12          # 240 GB/s / 20 GB/s per channel


def test_ring_simple_equals_nccls_additive_model_in_the_engine():
    """The library's costs reach the engine as data: on one NVSwitch machine the simulated
    ring is exactly base + 2(n-1) x (syncs x hwLat + chunk / rate), where syncs is the data
    path's wait/post rounds per step: 24 channels (12 search channels, doubled by connect.cc)
    each move 1 GiB / 24 in loops of 8 ranks x 2 MiB chunks: 3 loops of 2 slices."""
    size = 1 << 30
    run = run_collective(A100, "allreduce", "ring", size, library="nccl", protocol="Simple",
                         launch="none", engine="event")
    rate = 300e9 * 0.8                  # NVLink at NCCL's achievable rate, Simple factor 1
    assert run.plan.notes["dp_channels"] == 24 and run.plan.notes["dp_loops"] == 3
    expected = 8.4e-6 + 14 * (3 * 2 * 3.4e-6 + size / 8 / rate)
    assert run.row["time_s"] == pytest.approx(expected, rel=1e-9)
    assert run.row["protocol"] == "Simple" and run.row["library"] == "nccl"


@pytest.mark.parametrize("graph, gpus, algorithm, size", [
    (A100_2, 16, "ring", 8), (A100_2, 16, "ring", 4 << 20), (A100_2, 16, "tree", 64 << 10),
    (A100_2, 16, "tree", 8 << 20), (A100_2, 16, "auto", 1 << 20), (H100, 8, "nvls", 32 << 20),
    (H100, 8, "auto", 256 << 20), (A100, 8, "tree", 1 << 20),
])
def test_fast_engine_equals_event_engine_under_nccl(graph, gpus, algorithm, size):
    fast = run_collective(graph, "allreduce", algorithm, size, gpus=gpus, library="nccl",
                          engine="auto")
    event = run_collective(graph, "allreduce", algorithm, size, gpus=gpus, library="nccl",
                           engine="event")
    assert fast.row["engine"] == "fast"
    assert fast.row["time_s"] == pytest.approx(event.row["time_s"], rel=1e-9)
    assert fast.row["protocol"] == event.row["protocol"]


@pytest.mark.parametrize("size", [8, 4 << 20, 16 << 20, 256 << 20])
def test_multi_node_ring_is_nccls_prediction(size):
    """Across machines the engine runs the ring bulk-synchronously: NCCL's latency plus the
    bytes at the bottleneck's rate, which on two DGX A100 is NCCL's own prediction, plus the
    data path's extra wait/post rounds: every ring step pays the intra-node step latency once
    per slice of every loop (simulator/library/datapath.py), where the tuner charges it once.
    LL128 (4 and 16 MiB) runs on NCCL's 16 channels at the share of the tuner's rate one A100
    LL128 channel moves (datapath.LL128_RING_CHANNEL_RATE), which binds below the network."""
    run = run_collective(A100_2, "allreduce", "ring", size, gpus=16, library="nccl",
                         launch="none", engine="event")
    notes = run.plan.notes
    syncs = notes["dp_syncs_per_step"]
    extra = 30 * notes["intra_step_us"] * (syncs - 1) / syncs * 1e-6     # 2(16-1) steps
    expected = run.plan.predicted_time_s + extra
    if run.row["protocol"] != "LL128":
        assert run.row["time_s"] == pytest.approx(expected, rel=2e-3)
    else:
        latency = run.plan.fixed_time_s + 30 * notes["intra_step_us"] * 1e-6
        assert expected < run.row["time_s"]
        assert run.row["time_s"] - latency <= (expected - latency) / LL128_RING_CHANNEL_RATE[
            "ampere"] * 1.01


def test_ring_barriers_keep_the_sum_and_synchronise_steps():
    schedule = make_schedule("ring", "allreduce", 6, 6000, channels=2, barriers=True)
    assert verify(schedule) == []
    assert schedule.sync.sum() == schedule.steps - 1
    assert (np.diff(schedule.step) >= 0).all()
    with pytest.raises(ConfigError, match="barriers"):
        make_schedule("ring", "allreduce", 4, 64, barriers="yes")


def test_tuner_choices_on_h100():
    lib = get_library("nccl")
    small = lib.plan(H100, "allreduce", "auto", 8, 8)
    assert small.protocol == "LL" and small.label in ("ring", "tree")
    big = lib.plan(H100, "allreduce", "auto", 1 << 30, 8)
    assert big.label == "nvls" and big.protocol == "Simple"
    # the choice is the lowest predicted time
    cands = lib.candidates(H100, "allreduce", 1 << 30, 8)
    assert cands[0].algorithm == "nvls"
    assert all(a.predicted_time_us <= b.predicted_time_us for a, b in zip(cands, cands[1:]))


@pytest.mark.parametrize("version, gpus_per_node, nvls", [
    ("2.21", 1, False), ("2.21", 2, False), ("2.21", 3, True),
    ("2.30", 1, False), ("2.30", 2, True)])
def test_nvls_needs_enough_gpus_on_every_machine(version, gpus_per_node, nvls):
    """NCCL sets NVLink SHARP up only when a machine's topology holds enough GPUs
    (``ncclNvlsInit``: 2.18-2.28.6 return on ``gpuCount <= 2``, 2.28.7 on ``gpuCount < 2``): two
    H200 machines with one GPU each run rings and trees, and forcing NVLS says why."""
    lib = get_library("nccl", version=version)
    for nodes in (1, 2):
        if nodes == 1 and gpus_per_node == 1:
            continue
        graph = load_topology("hgx-h200", {"nodes": str(nodes), "gpus_per_node": str(gpus_per_node)})
        n = nodes * gpus_per_node
        algorithms = {c.algorithm for c in lib.candidates(graph, "allreduce", 1 << 30, n)}
        wanted = "nvls" if nodes == 1 else "nvls_tree"
        assert (wanted in algorithms) == nvls
        reason = lib.unavailable(graph, "allreduce", wanted, n)
        assert (reason == "") == nvls
        if not nvls:
            assert f"at least {3 if version == '2.21' else 2} GPUs on every machine" in reason
            assert lib.plan(graph, "allreduce", "auto", 1 << 30, n).label in ("ring", "tree")


def test_h100_large_allreduce_busbw():
    """NVLS reaches about 480 GB/s and the ring about 370 GB/s of bus bandwidth on HGX H100."""
    nvls = run_collective(H100, "allreduce", "nvls", 1 << 30, library="nccl", engine="auto")
    ring = run_collective(H100, "allreduce", "ring", 1 << 30, library="nccl", engine="auto")
    assert 440 < nvls.row["busbw_GBps"] < 520
    assert 340 < ring.row["busbw_GBps"] < 380


def test_forcing_what_nccl_cannot_do_says_why():
    lib = get_library("nccl")
    with pytest.raises(ConfigError, match="NVLS needs"):
        lib.plan(A100, "allreduce", "nvls", 1 << 20, 8)
    pcie = load_topology("pcie-2x-2080ti", {})
    with pytest.raises(ConfigError, match="LL128 is enabled"):
        lib.plan(pcie, "allreduce", "ring", 1 << 20, 2, protocol="LL128")
    with pytest.raises(ConfigError, match="unknown protocol"):
        lib.plan(A100, "allreduce", "ring", 1 << 20, 8, protocol="LL64")


def test_launch_modes_and_the_host_bound():
    assert parse_launch("group", gpus_per_node=8) == Launch("group", 8)
    assert parse_launch("group:2") == Launch("group", 2)
    assert parse_launch("mpi") == Launch("mpi")
    with pytest.raises(ConfigError, match="accepted: mpi"):
        parse_launch("threads")
    assert launch_from_notes("single process -g 2; -b 8", gpus=2, nodes=1) == Launch("group", 2)
    assert launch_from_notes("-b 8 -e 4G -f2 -g 1", gpus=16, nodes=2) == Launch("mpi")
    assert launch_from_notes("", gpus=8, nodes=1) == Launch("group", 8)
    assert launch_from_notes("", gpus=16, nodes=2) == Launch("mpi")
    # one thread driving 8 GPUs: 8 launches per call pace a back-to-back loop
    lib = get_library("nccl", launch="group:8")
    run = run_collective(A100, "allreduce", "auto", 8, library=lib, engine="auto")
    assert run.row["time_s"] == pytest.approx(1.60e-6 + 8 * 3.96e-6)
    mpi = run_collective(A100, "allreduce", "auto", 8, library="nccl", launch="mpi",
                         engine="auto")
    assert mpi.row["time_s"] < run.row["time_s"]


def test_group_launch_reproduces_the_single_thread_nccl_tests_line():
    """nccl-tests -g G on a DGX A100 (nccl-tests issue #123): 10.0 us at 2 GPUs, 33.7 at 8."""
    for gpus, measured in ((2, 10.0), (4, 16.88), (8, 33.7)):
        lib = get_library("nccl", launch=f"group:{gpus}")
        run = run_collective(A100, "allreduce", "ring", 8, gpus=gpus, library=lib,
                             engine="auto")
        assert run.row["time_us"] == pytest.approx(measured, rel=0.08)


def test_versions_resolve_to_the_newest_table_not_newer():
    assert get_version("2.5.6 (stated in requirements list)").name == "2.5"
    assert get_version("2.19.3").name == "2.18"
    assert get_version("not stated").name == "2.30"
    assert get_version("2.99").name == "2.30"


@pytest.mark.parametrize("p, channels, local", [(16, 4, 8), (12, 8, 4), (7, 3, 3), (8, 8, 8)])
def test_channel_trees_compute_the_sum(p, channels, local):
    schedule = make_schedule("double_binary_tree", "allreduce", p, 4096, channels=channels,
                             local_ranks=local, segments=2)
    assert verify(schedule) == []
    trees = channel_trees(p, channels, local)
    assert len(trees) == 2 * channels
    for tree in trees:
        assert (tree.parent >= 0).sum() == p - 1


def test_channel_trees_leave_machines_through_different_gpus():
    trees = channel_trees(16, 8, 8)
    crossing = set()
    for tree in trees:
        for child in np.flatnonzero(tree.parent >= 0):
            parent = int(tree.parent[child])
            if child // 8 != parent // 8:
                crossing.add(int(child))
    assert len(crossing) >= 4


def test_cli_collective_auto_prints_choices(capsys):
    code = main(["collective", "--topology", "hgx-h100", "--algorithm", "auto", "--size", "8B",
                 "--size", "1MiB", "--size", "1GiB", "--engine", "auto", "--format", "csv"])
    out, err = capsys.readouterr()
    assert code == 0
    assert "auto: chose nvls/Simple" in err and "of 1 GiB" in err
    assert err.count("auto: chose") == 3
    header = out.splitlines()[0].split(",")
    assert {"library", "protocol", "channels"} <= set(header)


@pytest.mark.parametrize("argv, needle", [
    (["--library", "mpich"], "unknown library"),
    (["--library", "ideal", "--protocol", "LL"], "need --library nccl"),
    (["--protocol", "LL64"], "unknown protocol"),
    (["--launch", "threads"], "unknown launch mode"),
    (["--nccl-version", "latest"], "--nccl-version"),
])
def test_cli_library_mistakes_are_one_line(capsys, argv, needle):
    code = main(["collective", "--topology", "dgx-a100", "--size", "1MiB", *argv])
    err = capsys.readouterr().err
    assert code == 2 and needle in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_compare_nccl_beats_ideal_on_the_dgx_a100_file(tmp_path):
    from simulator.comparison.collective import compare, summarise
    from simulator.measure.schema import read_measurements
    from pathlib import Path

    path = Path(__file__).parent / "data" / "measurements" / "nccl_deepops_dgxa100_2node_ib_ring.csv"
    measured = read_measurements(path)
    ideal = summarise(compare(measured, A100_2, library="ideal"))["size_band"]
    nccl_points = compare(measured, A100_2, library="nccl")
    nccl = summarise(nccl_points)["size_band"]
    big_ideal = float(ideal.loc[ideal.size_band == ">=1MiB", "mape_pct"].iloc[0])
    big_nccl = float(nccl.loc[nccl.size_band == ">=1MiB", "mape_pct"].iloc[0])
    assert big_nccl < big_ideal
    assert set(nccl_points["launch_mode"]) == {"mpi"}          # the file's notes say -g 1
    assert set(nccl_points["simulated_protocol"]) <= {"LL", "LL128", "Simple"}
    assert not math.isnan(big_nccl)


_SCENARIO = """
name: lib
topology: {name: dgx-a100, params: {nodes: 2}}
collective: {collective: allreduce, algorithms: [ring], sizes: [1MiB], gpus: 16}
"""


def test_scenario_library_section():
    from simulator.scenario import read_scenario, run_point

    default = run_point(read_scenario(_SCENARIO), (16, 1 << 20, "ring"))
    assert default["library"] == "nccl"
    forced = read_scenario(_SCENARIO + "library: {name: nccl, protocol: Simple, launch: mpi}\n")
    row = run_point(forced, (16, 1 << 20, "ring"))
    assert row["protocol"] == "Simple" and row["time_s"] > default["time_s"]
    ideal = run_point(read_scenario(_SCENARIO + "library: ideal\n"), (16, 1 << 20, "ring"))
    assert ideal["library"] == "ideal" and ideal["time_s"] < default["time_s"]


@pytest.mark.parametrize("extra, needle", [
    ("library: mpich\n", "library.name: expected one of ideal, nccl, got 'mpich'"),
    ("library: {name: nccl, proto: LL}\n", "proto"),
    ("library: {name: ideal, protocol: LL}\n", "needs library name nccl"),
    ("library: {name: nccl, protocol: LL256}\n", "unknown protocol"),
    ("library: {name: nccl, launch: threads}\n", "unknown launch mode"),
])
def test_scenario_library_mistakes_name_the_key(extra, needle):
    from simulator.scenario import read_scenario

    with pytest.raises(ConfigError, match=needle) as info:
        read_scenario(_SCENARIO + extra, "s.yaml")
    assert "library" in str(info.value)


def _synthetic(graph, gpus, scale, launch="mpi"):
    import pandas as pd

    lib = get_library("nccl", scale=scale, launch=launch)
    rows = []
    for k in range(3, 31, 2):
        size = 1 << k
        row = run_collective(graph, "allreduce", "ring", size, gpus=gpus, library=lib,
                             engine="auto").row
        rows.append({"source": "synthetic", "topology": "", "collective": "allreduce",
                     "algorithm": "ring", "gpus": gpus, "size_bytes": size,
                     "time_us": row["time_us"], "algbw_GBps": row["algbw_GBps"],
                     "busbw_GBps": row["busbw_GBps"], "notes": "-g 1"})
    frame = pd.DataFrame(rows)
    frame.attrs["origin"] = "synthetic.csv"
    return frame


def test_calibrate_library_recovers_latency_and_bandwidth_scales(tmp_path):
    from simulator.comparison.calibrate_library import calibrate_library

    measured = _synthetic(A100_2, 16, {"latency": 1.5, "bandwidth": 0.8})
    result = calibrate_library(measured, "dgx-a100-2node", fit_fraction=0.5, seed=1,
                               max_evaluations=200)
    assert result.settings["scale"]["latency"] == pytest.approx(1.5, rel=0.05)
    assert result.settings["scale"]["bandwidth"] == pytest.approx(0.8, rel=0.05)
    assert "kernel_launch_s" in result.unseen          # mpi launches never bind here
    table = result.mape_table().set_index("size_band")
    assert table.loc["all", "mape_after_pct"] < 2.0 < table.loc["all", "mape_before_pct"]
    path = result.write(tmp_path / "cal.yaml")
    calibrated = load_topology(str(path))
    assert calibrated.graph["library_settings"]["scale"]["latency"] == pytest.approx(
        result.settings["scale"]["latency"])
    # the calibrated preset carries its library into compare
    from simulator.comparison.collective import compare

    again = compare(measured, calibrated)
    assert again["abs_error_pct"].mean() < 2.0


def test_calibrate_cli_fits_the_library(tmp_path, capsys):
    path = tmp_path / "m.csv"
    _synthetic(A100_2, 16, {"latency": 1.3}).to_csv(path, index=False)
    out = tmp_path / "c.yaml"
    assert main(["calibrate", str(path), "--topology", "dgx-a100-2node", "--out",
                 str(out)]) == 0
    text = capsys.readouterr().out
    assert "calibrated the nccl library" in text and "fitted: latency" in text
    assert "library:" in out.read_text()


def test_preset_library_section_is_checked(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nbuilder: gpu_cluster\nlibrary:\n  name: nccl\n  scale:\n"
                   "    latency: -1\n")
    with pytest.raises(ConfigError, match="scale.latency"):
        load_topology(str(bad))


def test_without_p2p_gpu_traffic_is_staged_through_host_memory():
    from simulator.topology.routing import Router

    box = load_topology("pcie-2x-2080ti", {})
    path = Router(box).path("n0.gpu0", "n0.gpu1")
    assert path.nodes == ("n0.gpu0", "n0.pcie0", "n0.bridge", "n0.cpu", "n0.bridge",
                          "n0.pcie0", "n0.gpu1")
    p2p = load_topology("pcie-2x-2080ti", {"p2p": "true"})
    assert Router(p2p).path("n0.gpu0", "n0.gpu1").nodes == ("n0.gpu0", "n0.pcie0", "n0.gpu1")
    # both directions of a 2-GPU ring share the switch's one uplink: half the rate each
    rate = 15.75e9 * 12 / (8 * 16 * 128 / 130 / 8)   # NCCL's PCIe Gen3 x16: 12 GB/s
    for engine in ("event", "auto"):
        ring = run_collective(box, "allreduce", "ring", 1 << 30, library="nccl", protocol="Simple",
                              launch="none", engine=engine)
        assert ring.row["busbw_GBps"] == pytest.approx(rate / 2 / 1e9, rel=0.01)
        bcast = run_collective(box, "broadcast", "ring", 1 << 30, library="nccl",
                               protocol="Simple", launch="none", engine=engine)
        assert bcast.row["busbw_GBps"] == pytest.approx(rate / 1e9, rel=0.01)
    with pytest.raises(ConfigError, match="p2p"):
        load_topology("pcie-2x-2080ti", {"p2p": "sometimes"})


@pytest.mark.parametrize("engine", ["event", "auto"])
def test_without_p2p_a_gpus_own_block_is_not_staged(engine):
    """A rank's block to itself is a copy in its own memory (NCCL's send to self has no
    transport): on a machine without PCIe peer-to-peer it must not ride the staged path up to
    host memory and back. A 2-GPU all-to-all of S bytes then moves S/2 each way, and both
    directions share the switch's down link: S / bw + the path's latency, not 2 S / bw."""
    from simulator.topology.routing import Router

    box = load_topology("pcie-2x-2080ti", {})
    router = Router(box)
    assert router.path("n0.gpu0", "n0.gpu0").links == ()
    assert router.path("n0.gpu1", "n0.gpu1").links == ()
    size = 1 << 30
    down = box.edges["n0.bridge", "n0.pcie0"]["bandwidth_bytes_per_s"]
    latency = router.path("n0.gpu0", "n0.gpu1").latency_s
    a2a = run_collective(box, "alltoall", "direct", size, library="ideal", engine=engine)
    assert a2a.row["time_s"] == pytest.approx(size / down + latency, rel=1e-9)
    # the same bytes as the all-gather whose output is S: each rank's half to the other
    gather = run_collective(box, "allgather", "direct", size, library="ideal", engine=engine)
    assert a2a.row["time_s"] == pytest.approx(gather.row["time_s"], rel=1e-9)


def test_training_buckets_go_through_the_library(capsys):
    argv = ["train", "--topology", "dgx-a100", "--param", "nodes=2", "--model", "resnet50",
            "--gpus", "16", "--aggregation", "ring", "--bucket", "1MiB", "--format", "csv"]
    assert main(argv + ["--library", "ideal"]) == 0
    ideal = capsys.readouterr().out.splitlines()
    assert main(argv) == 0   # GPU clusters default to nccl
    nccl = capsys.readouterr().out.splitlines()
    col = ideal[0].split(",").index("iteration_s")
    # 1 MiB buckets pay NCCL's latency per call: the iteration gets longer
    assert float(nccl[1].split(",")[col]) > float(ideal[1].split(",")[col])
    assert main(argv + ["--library", "nccl", "--protocol", "LL"]) == 2
    assert "train lets the library choose" in capsys.readouterr().err


def test_h100_tuner_switches_to_nvls_at_2mib():
    """A user's HGX H100 log: ring LL from 8 B to 1 MB, NVLS Simple from 2 MB on (nccl-tests
    issue #309); NCCL's tuner constants make the same choice."""
    lib = get_library("nccl")
    assert [lib.plan(H100, "allreduce", "auto", 1 << k, 8).label for k in (3, 20, 21, 30)] == \
        ["ring", "ring", "nvls", "nvls"]


@pytest.mark.parametrize("p, local", [(1, None), (4, None), (8, 4), (16, 8), (6, 3)])
def test_collnet_schedule_computes_the_sum(p, local):
    opts = {} if local is None else {"local_ranks": local}
    schedule = make_schedule("collnet", "allreduce", p, 999 + p, **opts)
    assert verify(schedule) == []
    assert schedule.helper_ranks == 1


def test_collnet_nic_bytes_do_not_grow_with_machines():
    """Each GPU's NIC carries n / L each way however many machines: in-network reduction."""
    size = 64 << 20
    for nodes in (2, 4):
        sched = make_schedule("collnet", "allreduce", 8 * nodes, size, local_ranks=8)
        to_switch = sched.transfer_bytes[sched.dst == sched.ranks]
        assert (to_switch == size // 8).all() and len(to_switch) == 8 * nodes


def test_collnet_in_the_tuner_needs_a_sharp_fabric():
    lib = get_library("nccl")
    plain = load_topology("dgx-a100", {"nodes": "4"})
    sharp = load_topology("dgx-a100", {"nodes": "4", "sharp": "true"})
    assert all(c.algorithm != "collnet_direct" for c in lib.candidates(plain, "allreduce",
                                                                       1 << 26, 32))
    assert lib.plan(sharp, "allreduce", "auto", 1 << 26, 32).label == "collnet_direct"
    with pytest.raises(ConfigError, match="SHARP fabric"):
        lib.plan(plain, "allreduce", "collnet", 1 << 26, 32)
    fast = run_collective(sharp, "allreduce", "collnet", 1 << 26, gpus=32, library="nccl",
                          engine="auto")
    event = run_collective(sharp, "allreduce", "collnet", 1 << 26, gpus=32, library="nccl",
                           engine="event")
    assert fast.row["time_s"] == pytest.approx(event.row["time_s"], rel=1e-9)
    # 2 us per intra step of 4 machines' ring vs one trip to the switch: collnet wins
    ring = run_collective(sharp, "allreduce", "ring", 1 << 26, gpus=32, library="nccl",
                          engine="auto")
    assert fast.row["time_s"] < ring.row["time_s"]


@pytest.mark.parametrize("p, local, loops", [(8, None, 3), (16, 8, 2), (24, 8, 1), (12, 4, 2)])
def test_nvls_tree_schedule_computes_the_sum(p, local, loops):
    opts = {"loops": loops} if local is None else {"local_ranks": local, "loops": loops}
    schedule = make_schedule("nvls_tree", "allreduce", p, 4999 + p, **opts)
    assert verify(schedule) == []
    assert schedule.helper_ranks == p // (local or p)


def test_nvls_tree_across_h100_machines():
    """NVLS tree on two HGX H100: chosen by NCCL's tuner for large messages, equal on both
    engines, and about the 430-480 GB/s users report against ~330 for the ring (nccl #1221)."""
    two = load_topology("hgx-h100", {"nodes": "2"})
    lib = get_library("nccl", launch="none")
    assert lib.plan(two, "allreduce", "auto", 64 << 20, 16).label == "nvls_tree"
    fast = run_collective(two, "allreduce", "nvls_tree", 64 << 20, gpus=16, library=lib,
                          engine="auto")
    event = run_collective(two, "allreduce", "nvls_tree", 64 << 20, gpus=16, library=lib,
                           engine="event")
    assert fast.row["time_s"] == pytest.approx(event.row["time_s"], rel=1e-9)
    big = run_collective(two, "allreduce", "auto", 1 << 30, gpus=16, library=lib,
                         engine="auto")
    assert 420 < big.row["busbw_GBps"] < 520
    with pytest.raises(ConfigError, match="NVLS tree needs"):
        lib.plan(load_topology("dgx-a100", {"nodes": "2"}), "allreduce", "nvls_tree",
                 1 << 26, 16)


@pytest.mark.parametrize("text, release, table", [
    ("2.18.3", (2, 18), "2.18"), ("2.5.6 (stated in requirements list)", (2, 5), "2.5"),
    ("NCCL version 2.27.3+cuda12.9", (2, 27), "2.25"),
    ("CUDA 11.6, NCCL 2.11.4-1", (2, 11), "2.10"), ("2.11.4-1+cuda11.6", (2, 11), "2.10"),
    ("not stated (CUDA 12.4, driver 550.90.07)", None, DEFAULT_VERSION),
    ("not stated (horovod/horovod:latest container, CUDA 11.3)", None, DEFAULT_VERSION),
    ("not printed (TCPXO plugin image nccl-plugin-gpudirecttcpx-dev:v1.0.15)", None,
     DEFAULT_VERSION),                       # a plugin's v1.0.15 is not NCCL 1.0
    ("unknown; container v1.2", None, DEFAULT_VERSION),
    ("", None, DEFAULT_VERSION), (None, None, DEFAULT_VERSION)])
def test_a_version_cell_names_nccls_release_not_cudas(text, release, table):
    """A measured file's nccl_version cell: NCCL's release, never the CUDA or driver version
    written beside it ("not stated (CUDA 12.4 ...)" was read as release 12.4)."""
    assert release_number(text) == release
    assert get_version(text).name == table
    assert get_library("nccl", version=text).release == (release or get_version(None).number)


# --- NCCL 2.6 to 2.9 (the A100's first releases) -------------------------------------------------

def _wire(lib, graph, gpus):
    """(the tuner's bus rate before its refinements, the search's channels) for the call."""
    from simulator.library.machine import machine_facts as facts_of

    intra, inter, channels = lib._bandwidths(graph, gpus, facts_of(graph, gpus))
    return min(intra, 235.0), channels


def test_nccl_26_to_29_latencies_as_their_tuning_cc():
    """baseLat + steps x hwLat of each release (v2.6.4-1, v2.7.8-1, v2.8.4-1 tuning.cc): 2.6
    charges every ring step the slowest link's latency (the network's 0.9 us across
    machines), 2.7 on split the steps and multiply LL's intra-machine ones by 1.8; the
    network Simple tree step is 50 us in 2.7, 28 in 2.8 and 2.9."""
    one = {v: get_library("nccl", version=v) for v in ("2.6.4", "2.7.8", "2.9.9")}
    assert _cand(one["2.6.4"], A100, 8, 8, "ring", "LL").latency_us == pytest.approx(
        3.6 + 14 * 0.4)
    assert _cand(one["2.7.8"], A100, 8, 8, "ring", "LL").latency_us == pytest.approx(
        3.6 + 14 * 0.47)
    assert _cand(one["2.6.4"], A100_2, 8, 16, "ring", "LL").latency_us == pytest.approx(
        3.6 + 30 * 0.9)
    for v in ("2.7.8", "2.9.9"):
        assert _cand(one[v], A100_2, 8, 16, "ring", "LL").latency_us == pytest.approx(
            3.6 + 28 * 0.47 * 1.8 + 2 * 2.7)
    assert _cand(one["2.7.8"], A100_2, 8, 16, "tree", "Simple").latency_us == pytest.approx(
        2 * (7 * 28 + 50))
    assert _cand(one["2.9.9"], A100_2, 8, 16, "tree", "Simple").latency_us == pytest.approx(
        2 * (7 * 28 + 28))


def test_nccl_26_to_29_bandwidths_as_their_tuning_cc():
    """2.6 runs LL128 on Volta only and caps the tree at 110 GB/s on one or two machines;
    2.7 brings LL128 to the A100 (its tree cap 130 GB/s, x7/9, and LL128 at most
    ll128MaxBwPerCh[coll] per channel: all-reduce 16.7, all-gather 18.3); 2.8 and 2.9 cap
    the tree per channel (A100: 24 GB/s on one machine) and all-reduce's LL128 at 16.9."""
    v26, v27, v28 = (get_library("nccl", version=v) for v in ("2.6", "2.7", "2.8"))
    wire, channels = _wire(v27, A100, 8)
    names = {(c.algorithm, c.protocol) for c in v26.candidates(A100, "allreduce", 1 << 20, 8)}
    assert ("ring", "LL128") not in names and ("ring", "LL") in names
    assert _cand(v26, A100, 1 << 20, 8, "tree", "Simple").busbw_GBps == pytest.approx(
        min(wire * 0.9, 110.0))
    assert _cand(v27, A100, 1 << 20, 8, "tree", "LL128").busbw_GBps == pytest.approx(
        min(min(wire * 0.9, 130.0) * 7 / 9, 16.7 * channels * 7 / 9))
    assert _cand(v27, A100, 1 << 20, 8, "ring", "LL128").busbw_GBps == pytest.approx(
        min(wire * 0.92, 16.7 * channels))
    gather = [c for c in v27.candidates(A100, "allgather", 1 << 20, 8)
              if (c.algorithm, c.protocol) == ("ring", "LL128")][0]
    assert gather.busbw_GBps == pytest.approx(min(wire * 0.92, 18.3 * channels))
    assert _cand(v28, A100, 1 << 20, 8, "tree", "Simple").busbw_GBps == pytest.approx(
        min(wire * 0.92, 24.0 * channels))
    assert _cand(v28, A100, 1 << 20, 8, "ring", "LL128").busbw_GBps == pytest.approx(
        min(wire * 0.92, 16.9 * channels))
    # the tree correction: 22 sizes in 2.6 / 2.7 (none from 256 MiB), 23 from 2.8
    for lib, factor in ((v27, 1.0), (v28, 0.9)):
        tree = _cand(lib, A100, 256 << 20, 8, "tree", "Simple")
        assert tree.algbw_GBps == pytest.approx(tree.busbw_GBps * 0.5 * factor)


def test_ring_ll_runs_at_a_third_for_gathers_on_one_machine_from_27_to_220():
    """``(nNodes > 1 || coll == AllReduce || coll == Reduce) ? 1.0/4.0 : 1.0/3.0`` (v2.7.8-1
    :113 to v2.20.3-1 :181); 2.5 / 2.6 take a quarter for all, 2.21 on a half."""
    def ring_ll(version, graph, gpus, collective):
        lib = get_library("nccl", version=version)
        return next(c for c in lib.candidates(graph, collective, 1 << 20, gpus)
                    if (c.algorithm, c.protocol) == ("ring", "LL")).busbw_GBps

    for version, wire in (("2.7", 235.0), ("2.10", 235.0), ("2.18", 240.0)):   # 2.18: no cap
        assert ring_ll(version, A100, 8, "allgather") == pytest.approx(min(wire / 3, 87.7))
        assert ring_ll(version, A100, 8, "allreduce") == pytest.approx(wire / 4)
        assert ring_ll(version, A100_2, 16, "allgather") < ring_ll(version, A100, 8, "allgather")
    assert ring_ll("2.6", A100, 8, "allgather") == pytest.approx(240.0 / 4)
    assert ring_ll("2.21", A100, 8, "allgather") == ring_ll("2.21", A100, 8, "allreduce")
