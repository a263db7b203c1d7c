"""Nine more public tables (tests/data/measurements/SOURCES.md, "More clouds and bare metal"):
Azure NDm A100 v4, Voltage Park H100 on one and four machines, GKE A3 Mega (TCPXO) and A3 High
(TCPX), p4d on EKS, p5 from 2 to 32 machines (all-reduce, all-gather, all-to-all). Checks only, nothing fitted
(docs/validation/sources.md, "More clouds and bare metal"): each test keeps where the simulator
stands with the preset a user would pick, so a change that moves it shows."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.collective import bus_factor
from simulator.comparison.collective import compare, summarise
from simulator.measure.schema import read_measurements
from simulator.topology import load_topology

DATA = Path(__file__).parent / "data" / "measurements"

#: file, preset, params, {band: (lowest, highest) signed bias in %}
STANDINGS = [
    ("nccl_jzhang_azure_ndmv4_a100_2node_ib.csv", "dgx-a100",
     {"nodes": 2, "gpu": "a100-sxm4-80gb"},
     {"<64KiB": (-16, -6), "64KiB-1MiB": (-20, -10), ">=1MiB": (-12, -3)}),
    ("nccl_vpbench_h100_1node_g8.csv", "hgx-h100", {},
     {"<64KiB": (-3, 4), "64KiB-1MiB": (0, 8), ">=1MiB": (5, 12)}),
    # 64 KiB - 1 MiB +28.2 -> +22.7 when LL trees came to forward a trip of the block at a
    # time instead of a whole chunk (docs/validation/sources.md, "LL trees forward a line")
    ("nccl_vpbench_h100_4node_ib.csv", "hgx-h100", {"nodes": 4},
     {"<64KiB": (1, 11), "64KiB-1MiB": (18, 28), ">=1MiB": (-6, 4)}),
    ("nccl_clustertoolkit_a3mega_gke_tcpxo_2node_allgather.csv", "gcp-a3-mega", {"nodes": 2},
     {"<64KiB": (-52, -44), "64KiB-1MiB": (-63, -55), ">=1MiB": (-28, -20)}),
    ("nccl_aicp_a3high_2node_tcpx_ring_simple.csv", "gcp-a3-mega",
     {"nodes": 2, "nics_per_node": 4, "pcie_switches": 4, "transport": "tcpx"},
     {">=1MiB": (-44, -36)}),
    ("nccl_awsefaeks_p4d_2node_efa_ring.csv", "aws-p4d", {"nodes": 2},
     {"<64KiB": (-6, 2), "64KiB-1MiB": (14, 22), ">=1MiB": (-30, -22)}),
]


P5_TABLES = [f"nccl_crazyguitar_p5_2to32node_efa_{c}.csv"
             for c in ("allreduce", "allgather", "alltoall")]


@pytest.mark.parametrize("name", [row[0] for row in STANDINGS] + P5_TABLES)
def test_tables_are_transcribed_whole(name):
    points = read_measurements(DATA / name)
    assert len(points) >= 14 and (points["time_us"] > 0).all()
    for row in points.itertuples():
        expected = row.size_bytes / row.time_us / 1e3
        assert abs(row.algbw_GBps - expected) <= 0.006 + 3e-3 * expected
        if row.busbw_GBps >= 1.0:
            factor = bus_factor(row.collective, row.gpus)
            assert abs(row.busbw_GBps / row.algbw_GBps - factor) < 0.02 * factor + 0.01
    sizes = points.groupby("gpus")["size_bytes"].apply(list)
    assert all(s == sorted(s) for s in sizes)


def _bands(name, preset, params):
    graph = load_topology(preset, params)
    return summarise(compare(read_measurements(DATA / name), graph))


@pytest.mark.parametrize("name, preset, params, bounds", STANDINGS,
                         ids=[row[0].split("_")[1] for row in STANDINGS])
def test_where_the_simulator_stands(name, preset, params, bounds):
    bands = _bands(name, preset, params)["size_band"].set_index("size_band")
    assert set(bands.index) == set(bounds)
    for band, (low, high) in bounds.items():
        assert low <= bands.loc[band, "bias_pct"] <= high, (band, bands.loc[band, "bias_pct"])


def test_p5_from_2_to_32_machines_grows_too_fast_with_scale():
    """With aws-ofi-nccl's region tuner choosing from 4 machines on (as the run's
    NCCL_TUNER_PLUGIN did), the simulator reaches p5's bus bandwidth at smaller sizes than the
    machines do, more so the more machines: over 32 MiB - 8 GiB it is 12 % too fast on 2
    machines and 24 % on 32 (33 % before the channels came from NCCL's graph search); at 4 -
    8 GiB it is within 13 % everywhere (not explained)."""
    summary = _bands("nccl_crazyguitar_p5_2to32node_efa_allreduce.csv", "aws-p5", {"nodes": 32})
    by_gpus = summary["gpus"].set_index("gpus")["bias_pct"]
    assert list(by_gpus.index) == [16, 32, 64, 128, 256]
    assert -15 < by_gpus[16] < -9 and -27 < by_gpus[256] < -20
    assert by_gpus[256] < by_gpus[128] < by_gpus[64]
    points = compare(read_measurements(DATA / "nccl_crazyguitar_p5_2to32node_efa_allreduce.csv"),
                     load_topology("aws-p5", {"nodes": 32}))
    large = points[points["size_bytes"] >= 4 << 30]
    assert large["error_pct"].abs().max() < 13.5


@pytest.mark.parametrize("collective, at_16, at_256", [("allgather", (-13, -6), (-27, -20)),
                                                       ("alltoall", (-25, -18), (-41, -35))])
def test_p5_all_gather_and_all_to_all_are_too_fast_more_so_at_scale(collective, at_16, at_256):
    """The same machines' all-gather and all-to-all (32 MiB - 2 GiB): 10 and 22 % too fast on 2
    machines, 23 and 38 % on 32, as the all-reduce (the all-gather's 32 machines 27 % before
    a proxy thread's sends bounded a ring step across machines)."""
    summary = _bands(f"nccl_crazyguitar_p5_2to32node_efa_{collective}.csv", "aws-p5",
                     {"nodes": 32})
    by_gpus = summary["gpus"].set_index("gpus")["bias_pct"]
    assert at_16[0] < by_gpus[16] < at_16[1] and at_256[0] < by_gpus[256] < at_256[1]
