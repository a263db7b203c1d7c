"""Sweeps: 200 points locally and on a Dask LocalCluster give identical CSVs; resume works."""

import pandas as pd
import pytest

from simulator.cli import main
from simulator.sweep import run_sweep

SCENARIO = """\
name: sweep200
topology:
  name: star
  params: {hosts: 9, link_bandwidth: 10GB/s, link_latency: 1us}
collective:
  collective: allreduce
  algorithms: [ring, double_binary_tree, halving_doubling, direct]
  sizes: [1KiB, 4KiB, 16KiB, 64KiB, 256KiB, 1MiB, 2MiB, 4MiB, 8MiB, 16MiB]
  gpus: [2, 3, 4, 6, 8]
"""


def canonical(frame):
    return frame.sort_values(["gpus", "size_bytes", "algorithm"]).reset_index(drop=True)


def test_200_points_local_processes_and_dask_identical(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    local = run_sweep(str(path), str(tmp_path / "local.csv"), workers=2, progress=False)
    assert len(local) == 200
    pytest.importorskip("dask.distributed")
    dask = run_sweep(str(path), str(tmp_path / "dask.csv"), scheduler="local", progress=False)
    a = canonical(pd.read_csv(tmp_path / "local.csv"))
    b = canonical(pd.read_csv(tmp_path / "dask.csv"))
    pd.testing.assert_frame_equal(a, b)
    assert len(dask) == 200


def test_resume_skips_points_already_done(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    out = tmp_path / "r.csv"
    full = run_sweep(str(path), str(out), workers=1, progress=False)
    partial = full.iloc[:50].copy()
    partial.loc[partial.index[0], "time_s"] = -1.0   # marker: a resumed row is kept, not redone
    partial.to_csv(out, index=False)
    resumed = run_sweep(str(path), str(out), workers=1, progress=False)
    assert len(resumed) == 200
    assert (resumed["time_s"] == -1.0).sum() == 1
    on_disk = pd.read_csv(out)
    assert len(on_disk) == 200


def test_sweep_cli_progress_and_bad_output(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO.replace("gpus: [2, 3, 4, 6, 8]", "gpus: [2]"))
    out = tmp_path / "o.csv"
    assert main(["sweep", str(path), "-o", str(out), "--workers", "1"]) == 0
    err = capsys.readouterr().err
    assert "40/40" in err and "40 rows" in err
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    assert main(["sweep", str(path), "-o", str(bad), "--workers", "1"]) == 2
    assert "missing columns" in capsys.readouterr().err
