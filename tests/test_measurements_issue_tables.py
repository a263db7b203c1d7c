"""Three more public tables, checks only (tests/data/measurements/SOURCES.md, "Tables from NCCL
issues and from UCCL's L40S report"; docs/validation/sources.md, same section): eight A100 at
128 KiB - 4 MiB (NVIDIA/nccl #2355, NCCL 2.29.7 and 2.31.2), eight H100 at 1-32 KiB
(NVIDIA/nccl #2094, NCCL 2.29.7) and L40S servers (UCCL's summary, NCCL 2.31.2). Nothing was
fitted to them; these tests keep the transcription and where the simulator stands."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.comparison.collective import compare, summarise
from simulator.measure.schema import read_measurements
from simulator.topology import load_topology

DATA = Path(__file__).parent / "data" / "measurements"
A100 = DATA / "nccl_nvidia2355_a100sxm80_1node.csv"
H100 = DATA / "nccl_nvidia2094_h100_1node_small.csv"
L40S = DATA / "nccl_uccl_l40s_summary.csv"


def _bands(points, graph, **kwargs):
    result = compare(points, graph, **kwargs)
    return result, summarise(result)["size_band"].set_index("size_band")


@pytest.mark.parametrize("path, ranks_of", [
    (A100, lambda row: 8),
    (L40S, lambda row: row.gpus),
])
def test_busbw_only_tables_derive_time_from_busbw(path, ranks_of):
    """Both sources print bus bandwidth only: algbw = busbw x n / 2(n-1), time = size / algbw."""
    for row in read_measurements(path).itertuples():
        n = ranks_of(row)
        assert row.algbw_GBps == pytest.approx(row.busbw_GBps * n / (2 * (n - 1)), abs=1e-3)
        assert row.time_us == pytest.approx(row.size_bytes / row.algbw_GBps / 1e3, rel=1e-3)


def test_the_three_tables_are_transcribed_whole():
    a100 = read_measurements(A100)
    assert sorted(set(a100["library_version"].astype(str))) == ["2.29.7", "2.31.2"]
    assert list(a100["size_bytes"][:6]) == [128 << 10 << k for k in range(6)]
    assert set(a100["launch"]) == {"mpi"}                      # mpirun -np 8, no -g
    assert a100["busbw_GBps"].iloc[3] == 52.648                # also quoted by PR #2357
    h100 = read_measurements(H100)
    assert list(h100["size_bytes"]) == [1024 << k for k in range(6)]
    assert list(h100["time_us"]) == [34.57, 33.40, 32.51, 32.89, 32.41, 33.56]
    l40s = read_measurements(L40S)
    assert len(l40s) == 30 and set(l40s["library_version"].astype(str)) == {"2.31.2"}
    s8 = l40s[l40s["source"] == "uccl_l40s_s8"]
    assert list(s8["busbw_GBps"]) == [9.37, 14.53, 14.27, 14.16, 14.43]


def test_eight_a100_at_mid_sizes():
    """Within 3 % from 128 KiB to 1 MiB; 12-14 % slower than the machine at 2 and 4 MiB, the
    opposite sign of the thanos and dkh tables at the same sizes."""
    graph = load_topology("dgx-a100", {"gpu": "a100-sxm4-80gb"})
    result, bands = _bands(read_measurements(A100), graph)
    assert bands.loc["64KiB-1MiB", "mape_pct"] < 3
    assert 5 < bands.loc[">=1MiB", "bias_pct"] < 15
    assert (result[result["size_bytes"] >= 2 << 20]["error_pct"] > 8).all()


def test_eight_h100_small_calls_and_the_harness():
    """The table does not state its launch: the one-machine default (one thread driving all
    eight GPUs, nccl-tests' first README command) is within 4 %; one process per GPU would be
    about half the measured time."""
    graph = load_topology("hgx-h100", {})
    points = read_measurements(H100)
    _, bands = _bands(points, graph)
    assert bands.loc["<64KiB", "mape_pct"] < 4
    _, per_process = _bands(points, graph, launch="mpi")
    assert per_process.loc["<64KiB", "bias_pct"] < -30


def test_l40s_servers():
    """One machine: two and four GPUs within 10 % from 16 MiB; eight GPUs (across the CPU
    sockets) 27-34 % too fast there: the preset's socket link is NCCL's Sapphire Rapids
    22 GB/s, the machine (CPU not stated) levels at 14.4 GB/s. Two machines (each placement on
    the GPUs it states: 2 + 2, 4 + 4, 8 + 8) 16-42 % too fast from 16 MiB: the report's network
    is not the preset's."""
    graph = load_topology("l40s-pcie", {"nodes": 2})
    result = compare(read_measurements(L40S), graph)
    large = result[result["size_bytes"] >= 16 << 20]
    one = large[large["source"].isin(["uccl_l40s_s2", "uccl_l40s_s4"])]
    assert (one["abs_error_pct"] < 10).all()
    eight = large[large["source"] == "uccl_l40s_s8"]
    assert (eight["error_pct"] < -25).all() and (eight["error_pct"] > -40).all()
    two = large[large["source"].str.startswith("uccl_l40s_x")]
    assert (two["error_pct"] < -15).all() and (two["error_pct"] > -45).all()
    # X4 runs on GPUs 0-1 of each machine: its ring crosses the network, S4's does not
    x4 = result[(result["source"] == "uccl_l40s_x4")]["simulated_time_us"].to_numpy()
    s4 = result[(result["source"] == "uccl_l40s_s4")]["simulated_time_us"].to_numpy()
    assert (x4[1:] != s4[1:]).all()
