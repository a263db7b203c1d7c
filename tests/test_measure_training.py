"""``clustersim measure training``: real DDP and parameter-server steps with torch, the
training rows they write, and ``compare`` of those rows against the simulator."""

import os
import shutil
import subprocess
import sys

import pytest

from simulator.compare_training import compare_training
from simulator.measure.schema import read_training
from simulator.topology import load_topology
from simulator.workload.models import get_model
from simulator.workload.sweep import TrainingSpec, contention

HAVE_NETWORK_TOOLS = (hasattr(os, "geteuid") and os.geteuid() == 0
                      and shutil.which("ip") is not None and shutil.which("tc") is not None)
needs_root_network = pytest.mark.skipif(not HAVE_NETWORK_TOOLS,
                                        reason="needs root and iproute2 (ip, tc)")


def test_contention_is_ranks_times_threads_over_cores():
    spec = TrainingSpec(models=("small_cnn",), batch_per_gpu=8, gpus=(4,),
                        aggregations=("ring",), shared_cores=2)
    assert [contention(spec, n) for n in (1, 2, 4, 8)] == [1.0, 1.0, 2.0, 4.0]
    assert contention(TrainingSpec(models=("small_cnn",), batch_per_gpu=8, gpus=(4,),
                                   aggregations=("ring",)), 64) == 1.0


def test_torch_small_cnn_is_the_registry_model():
    torch = pytest.importorskip("torch")
    from simulator.measure.training import build_small_cnn

    module = build_small_cnn(torch)
    assert sum(p.numel() for p in module.parameters()) == get_model("small_cnn").params
    assert module(torch.zeros(2, 3, 32, 32)).shape == (2, 10)


@pytest.fixture(scope="module")
def loopback(tmp_path_factory):
    pytest.importorskip("torch")
    from simulator.measure.training import measure_training, write_training_csv

    frame = measure_training(ranks=(1, 2), aggregations=("ddp", "ps"), batch=8,
                             iterations=3, warmup=1)
    path = write_training_csv(frame, tmp_path_factory.mktemp("mt") / "measured.csv")
    return frame, path


def test_loopback_rows_have_the_training_table_layout_and_agree(loopback):
    from simulator.measure.training import EXTRA_COLUMNS, TRAINING_TABLE_COLUMNS

    frame, _ = loopback
    assert list(frame.columns) == list(TRAINING_TABLE_COLUMNS + EXTRA_COLUMNS)
    assert sorted(zip(frame["arch"], frame["gpus"])) == [("allreduce", 1), ("allreduce", 2),
                                                         ("ps", 1), ("ps", 2)]
    assert frame["correct"].all()
    one = frame[frame["gpus"] == 1]
    assert (one["speedup"] == 1.0).all()
    assert (frame["iteration_s"] > 0).all() and (frame["compute_s"] > 0).all()
    assert (frame["throughput_img_s"] == frame["gpus"] * 8 / frame["iteration_s"]).all()


def test_measured_rows_read_back_and_compare(loopback):
    _, path = loopback
    measured = read_training(path)
    assert (measured["cores"] >= 1).all() and (measured["threads_per_rank"] == 1).all()
    points = compare_training(measured, load_topology("star", {"hosts": 3}), device="cpu-host")
    ps = points[points["arch"] == "ps"]
    assert set(ps["framework_model"]) == {"single-bucket"}
    assert (points.loc[points["gpus"] == 1, "simulated_speedup"] == 1.0).all()


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "simulator", "measure", "training", *args],
                          capture_output=True, text=True)


@pytest.mark.parametrize("args, needle", [
    (("--ranks", "0"), "--ranks expects"),
    (("--aggregation", "allgather"), "valid: ddp, ps"),
    (("--bandwidth", "1Gbps"), "--bandwidth needs --network shaped"),
    (("--model", "resnet50"), "valid: small_cnn"),
])
def test_cli_mistakes_are_one_line_and_write_nothing(tmp_path, args, needle):
    out = tmp_path / "m.csv"
    done = _cli(*args, "-o", str(out))
    assert done.returncode == 2
    assert needle in done.stderr and "Traceback" not in done.stderr
    assert not out.exists()


@needs_root_network
def test_shaped_parameter_server_matches_the_simulator(tmp_path):
    """200 Mbit/s links: the one-server PS is bandwidth-bound (4.3 MB each way per worker per
    step), so measured and simulated iteration agree closely; measured 2026-11-25: 0.0-0.7 %
    at 2 workers over two runs."""
    pytest.importorskip("torch")
    from simulator.measure.training import measure_training

    topo = tmp_path / "shaped.yaml"
    frame = measure_training(ranks=(1, 2), aggregations=("ps",), batch=16, iterations=3,
                             warmup=1, network="shaped", bandwidth=25e6, topology_out=topo)
    frame.to_csv(tmp_path / "m.csv", index=False)
    points = compare_training(read_training(tmp_path / "m.csv"), load_topology(str(topo)),
                              device="cpu-host")
    two = points[points["gpus"] == 2].iloc[0]
    assert abs(two["speedup_error_pct"]) < 15.0
