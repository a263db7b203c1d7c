"""One H100 machine from NVIDIA/nccl-tests #290, a check only (tests/data/measurements/SOURCES.md;
docs/validation/sources.md, "One H100 machine at 128 MiB - 4 GiB"): eight H100 on NVSwitch,
one thread driving all eight GPUs (``-g 8``), 128 MiB - 4 GiB. Nothing was fitted to it."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.comparison.collective import compare, summarise
from simulator.measure.schema import read_measurements
from simulator.topology import load_topology

TABLE = Path(__file__).parent / "data" / "measurements" / "nccl_nccltests290_h100_1node_g8.csv"


def test_the_table_is_transcribed_whole():
    points = read_measurements(TABLE)
    assert list(points["size_bytes"]) == [128 << 20 << k for k in range(6)]
    assert list(points["time_us"]) == [613.3, 1139.2, 2175.8, 4038.8, 8020.3, 15870.0]
    assert set(points["launch"]) == {"group:8"}               # eight Rank lines, one Pid
    for row in points.itertuples():
        assert row.algbw_GBps == pytest.approx(row.size_bytes / row.time_us / 1e3, rel=1e-4)
        assert row.busbw_GBps == pytest.approx(row.algbw_GBps * 2 * 7 / 8, abs=0.02)


def test_one_h100_machine_from_128_mib():
    """NVLink SHARP all the way (as NVIDIA's reply says), within 6 % at every size and 3 % on
    average; both curves still climb from 128 MiB to 4 GiB."""
    result = compare(read_measurements(TABLE), load_topology("hgx-h100", {}))
    assert set(result["simulated_algorithm"]) == {"auto:nvls"}
    bands = summarise(result)["size_band"].set_index("size_band")
    assert bands.loc[">=1MiB", "mape_pct"] < 3.5
    assert abs(bands.loc[">=1MiB", "bias_pct"]) < 3.5
    assert (result["error_pct"].abs() < 6).all()
    for column in ("measured_busbw_GBps", "simulated_busbw_GBps"):
        assert result[column].iloc[-1] > 1.15 * result[column].iloc[0]
