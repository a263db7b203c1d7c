"""Two OCI BM.GPU4.8 machines (8 A100-SXM4-40GB each, 16 x 100 Gb/s RoCE ports) from Oracle's
OKE guide (NCCL 2.19.3; see tests/data/measurements/SOURCES.md). A check, nothing fitted
(docs/validation/sources.md, "Two OCI A100 machines over RoCE")."""

from __future__ import annotations

from pathlib import Path

from simulator.comparison.collective import compare, summarise
from simulator.measure.schema import read_measurements
from simulator.topology import load_topology

TABLE = (Path(__file__).parent / "data" / "measurements"
         / "nccl_ocihpcoke_bmgpu48_a100_2node_roce.csv")


def test_the_table_is_transcribed_whole():
    points = read_measurements(TABLE)
    assert list(points["size_bytes"]) == [8 << k for k in range(31)]          # 8 B .. 8 GiB
    assert set(points["gpus"]) == {16} and set(points["launch"]) == {"mpi"}
    assert set(points["library_version"]) == {"2.19.3"}
    for row in points.itertuples():
        expected = row.size_bytes / row.time_us / 1e3
        assert abs(row.algbw_GBps - expected) <= 0.006 + 2e-3 * expected
        if row.busbw_GBps >= 1.0:
            assert abs(row.busbw_GBps / row.algbw_GBps - 30 / 16) < 0.02


def _bands(**params):
    graph = load_topology("dgx-a100", {"nodes": 2, **params})
    return summarise(compare(read_measurements(TABLE), graph))["size_band"].set_index(
        "size_band")


def test_where_the_simulator_stands_on_two_oci_a100_machines():
    """With the preset a user picks (8 x 200 Gb/s per machine, the same 1.6 Tb/s): within 15 %
    from 1 MiB (11 % too slow since the channels come from NCCL's graph search: 16 at run time
    where the model ran 32; 12 % too fast before) and 12 % from 64 KiB, but 18 % too fast
    below 64 KiB (37-50 us measured, 33-42 us simulated with the IB proxies' 2 x 4 us on AMD
    hosts; 36 % before). Modelled as the 16 x 100 Gb/s ports
    it has, each GPU spreads over its two ports (routing rule 4), and NCCL's search gives
    those 16 ports a channel each (32 at run time at 6 GB/s, against 16 at 12 for 8 ports):
    the large sizes come nearer, 9.5 % MAPE."""
    bands = _bands()
    assert bands.loc[">=1MiB", "mape_pct"] < 15.5 and 8 < bands.loc[">=1MiB", "bias_pct"] < 14
    assert bands.loc["64KiB-1MiB", "mape_pct"] < 12.5
    assert bands.loc["<64KiB", "bias_pct"] < -12      # -17.6 with IB proxies' cost
    ports = _bands(nics_per_node=16, nic_bandwidth="100Gbps")      # +110 % before rule 4
    assert ports.loc[">=1MiB", "mape_pct"] < min(11.0, bands.loc[">=1MiB", "mape_pct"])
