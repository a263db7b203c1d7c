"""Four more public tables (tests/data/measurements/SOURCES.md, "Four more public tables"): three
from NVIDIA/nccl-tests issue #309 (four Dell XE9680 run as VMs; one H100 InfiniBand cluster at
2, 4 and 8 machines, NCCL's own choice; the same cluster's two machines with ``NCCL_ALGO=Ring``)
and Google's GKE A3 High test plan over GPUDirect-TCPX. Checks of the transcription, and of where
the simulator stands on them (docs/validation/sources.md, "Four more public tables"); nothing
was fitted to any."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.comparison.collective import compare, summarise
from simulator.measure.schema import read_measurements
from simulator.topology import load_topology

ROOT = Path(__file__).parent / "data" / "measurements"
VM4 = ROOT / "nccl_nccltests309_xe9680vm_h100_4node_ib.csv"
SERIES = ROOT / "nccl_nccltests309_gjaion_h100_2to8node_ib.csv"
RING = ROOT / "nccl_nccltests309_gjaion_h100_2node_ib_ring.csv"
TCPX = ROOT / "nccl_clustertoolkit_a3high_gke_tcpx_2node_allgather.csv"


@pytest.mark.parametrize("path, runs, rows", [(VM4, {32: 32}, 32),
                                               (SERIES, {16: 14, 32: 14, 64: 14}, 42),
                                               (RING, {16: 14}, 14), (TCPX, {16: 10}, 10)])
def test_tables_are_consistent(path, runs, rows):
    """Every row: algbw = size / time and busbw = size / time x nccl-tests' factor for its
    ranks, to the printed precision; the runs have the rank counts their '#  Rank' lines give."""
    points = read_measurements(path)
    assert len(points) == rows
    assert points.groupby("gpus").size().to_dict() == runs
    for row in points.itertuples():
        n = row.gpus
        factor = 2 * (n - 1) / n if row.collective == "allreduce" else (n - 1) / n
        expected = row.size_bytes / row.time_us / 1e3
        assert abs(row.algbw_GBps - expected) <= 0.006 + 1e-3 * expected
        assert abs(row.busbw_GBps - expected * factor) <= 0.006 + 1e-3 * row.busbw_GBps


def _bands(path, preset, params):
    table = compare(read_measurements(path), load_topology(preset, params))
    return table, summarise(table)["size_band"].set_index("size_band")


def test_where_the_simulator_stands_on_the_infiniband_tables():
    """Recorded in the ledger: the four VMs within 5 % above 1 MiB (bias +4.3 %); the cluster
    at 2, 4 and 8 machines 12.6 % too fast there; and with NCCL_ALGO=Ring its LL128 ring at 1 - 4
    MiB takes 157 - 178 us where the model, on the run's 24 channels (NCCL_MIN_CTAS=24) and
    their proxies' sends, gives 107 - 108 (31 - 40 % too fast): a ring step across machines
    still costs more than the model charges."""
    _, vm4 = _bands(VM4, "hgx-h100", {"nodes": 4})
    assert 0 < vm4.loc[">=1MiB", "bias_pct"] < 10
    _, series = _bands(SERIES, "hgx-h100", {"nodes": 8})
    assert -20 < series.loc[">=1MiB", "bias_pct"] < -5
    ring, _ = _bands(RING, "hgx-h100", {"nodes": 2})
    assert set(ring["simulated_algorithm"]) == {"ring"}          # the table's NCCL_ALGO
    small = ring[ring["size_bytes"] <= 4 << 20]
    assert set(small["simulated_protocol"]) == {"LL128"}
    assert set(ring["channels"]) == {24}                         # the run's NCCL_MIN_CTAS
    assert (small["error_pct"] < -25).all()
    assert (ring.loc[ring["size_bytes"] >= 128 << 20, "error_pct"] > 0).all()


def test_gpudirect_tcpx_is_still_far_too_fast():
    """A fourth TCPX table, the same gap: a 1 - 4 MiB all-gather takes about 1 ms (66 us for
    each of the 15 ring steps) and the model gives a fraction of that; no published TCPX cost
    prices it, so the transport stays unvalidated."""
    table, bands = _bands(TCPX, "gcp-a3-mega", {"nodes": 2, "nics_per_node": 4,
                                                 "pcie_switches": 4, "transport": "tcpx"})
    assert set(table["simulated_protocol"]) == {"Simple"} and set(
        table["simulated_algorithm"]) == {"ring"}
    assert bands.loc[">=1MiB", "bias_pct"] < -50
    assert (table.loc[table["size_bytes"] <= 4 << 20, "measured_time_us"] > 900).all()


TORCH = ROOT / "nccl_hid_a3mega_1to3node_tcpxo_torch_allreduce.csv"


def test_the_a3_mega_torch_sweeps_are_consistent_and_timed_as_torch_runs():
    """torch.distributed all_reduce on 1, 2 and 3 A3 Mega (24 ranks twice: NCCL's choice and
    NCCL_ALGO=Tree): algbw = size / time, busbw the all-reduce factor, the torch launch and
    the script's 15 iterations on every row."""
    points = read_measurements(TORCH)
    assert points.groupby("gpus").size().to_dict() == {8: 29, 16: 29, 24: 58}
    assert set(points["launch"]) == {"torch"} and set(points["iterations"]) == {15}
    for row in points.itertuples():
        n = row.gpus
        expected = row.size_bytes / row.time_us / 1e3
        rounding = expected * 0.5 / row.time_us          # the time is printed in whole us
        assert abs(row.algbw_GBps - expected) <= 0.006 + 1e-3 * expected + rounding
        factor = 2 * (n - 1) / n
        assert abs(row.busbw_GBps - expected * factor) <= 0.006 + factor * (
            1e-3 * expected + rounding)


def test_tcpxo_small_calls_across_machines_are_far_too_fast():
    """Recorded in the ledger: below 1 MiB the two- and three-machine calls take 68 - 201 us
    (median 137) where the model's LL128 tree gives about 50 (three machines 64 % too fast,
    two 40 %); above 1 MiB 11 % too fast on average."""
    table, bands = _bands(TORCH, "gcp-a3-mega", {"nodes": 3})
    assert set(table["launch_mode"]) == {"torch"}
    three = table[(table["gpus"] == 24) & (table["size_bytes"] < 1 << 20)]
    assert three["error_pct"].median() < -55 and (three["error_pct"] < -10).all()
    assert -15 < bands.loc[">=1MiB", "bias_pct"] < -5
