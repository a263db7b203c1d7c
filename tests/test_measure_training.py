"""``clustersim measure training``: real DDP and parameter-server steps with torch, the
training rows they write, and ``compare`` of those rows against the simulator."""

import os
import shutil
import subprocess
import sys

import pytest

from simulator.comparison.training import compare_training
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
                             iterations=3, warmup=1, bucket_bytes=1 << 20)
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
    assert (frame["efficiency"] == frame["speedup"] / frame["gpus"]).all()
    assert (frame["comm_s"] == frame["iteration_s"] - frame["compute_s"]).all()
    assert frame["compute_1rank_s"].nunique() == 1 and (frame["compute_1rank_s"] > 0).all()
    assert (frame["parameters"] == get_model("small_cnn").params).all()
    assert (frame["gradient_bytes"] == 4 * frame["parameters"]).all()
    ddp = frame[frame["arch"] == "allreduce"]
    assert (ddp["bucket_bytes"] == 1 << 20).all()
    assert (frame["cores"] >= 1).all() and (frame["iterations"] == 3).all()
    assert (frame["repeats"] == 1).all() and set(frame["network"]) == {"loopback"}
    assert set(frame["throughput_unit"]) == {"samples/s"} and set(frame["precision"]) == {"FP32"}


def test_csv_header_is_the_public_training_layout_plus_the_measured_columns(loopback):
    from simulator.measure.training import EXTRA_COLUMNS

    _, path = loopback
    header = path.read_text(encoding="utf-8").splitlines()[0].split(",")
    public = "/work/shared/measurements/train_dlperf_v100x32_edr.csv"
    if os.path.exists(public):
        with open(public, encoding="utf-8") as fh:
            layout = fh.readline().strip().split(",")
    else:
        from simulator.measure.training import TRAINING_TABLE_COLUMNS as layout
    assert header == list(layout) + list(EXTRA_COLUMNS)
    assert not list(path.parent.glob(".*.tmp"))   # written through a rename, nothing left


def test_repeats_pool_fresh_runs_and_mlp_trains():
    pytest.importorskip("torch")
    from simulator.measure.training import measure_training

    frame = measure_training(ranks=(1,), aggregations=("ddp",), model="mlp", batch=4,
                             iterations=2, warmup=0, repeats=2)
    row = frame.iloc[0]
    assert (row["model"], row["gpus"], row["speedup"], row["repeats"]) == ("mlp", 1, 1.0, 2)
    assert row["parameters"] == 1_707_274 and bool(row["correct"])


def test_deadline_kills_the_ranks_and_says_so():
    pytest.importorskip("torch")
    from simulator.measure import MeasurementError
    from simulator.measure.training import measure_training

    with pytest.raises(MeasurementError, match="did not finish in"):
        measure_training(ranks=(2,), aggregations=("ps",), batch=4, iterations=2,
                         warmup=0, timeout_s=0.5)


def test_a_failing_rank_kills_the_others_and_reports_its_last_line(monkeypatch):
    pytest.importorskip("torch")
    import simulator.measure.training as training
    from simulator.measure import MeasurementError

    started = []

    class Popen(subprocess.Popen):   # rank 1 dies at once; rank 0 then waits for it forever
        def __init__(self, argv, **kwargs):
            if argv[-1] == "1":
                argv = [sys.executable, "-c", "import sys; sys.exit('boom: rank 1 broke')"]
            super().__init__(argv, **kwargs)
            started.append(self)

    monkeypatch.setattr(training.subprocess, "Popen", Popen)
    with pytest.raises(MeasurementError, match=r"rank 1 failed \(exit 1\): boom: rank 1 broke"):
        training.measure_training(ranks=(2,), aggregations=("ddp",), batch=4, iterations=2,
                                  warmup=0, timeout_s=60)
    assert len(started) >= 2 and all(p.poll() is not None for p in started)


@pytest.mark.parametrize("kwargs, needle", [
    ({"ranks": (0,)}, "rank count must be an integer >= 1"),
    ({"ranks": ()}, "ranks must not be empty"),
    ({"aggregations": ("ring",)}, "valid: ddp, ps"),
    ({"model": "resnet50"}, "valid: mlp, small_cnn"),
    ({"repeats": 0}, "repeats must be"),
    ({"bandwidth": 25e6}, "shaped' only"),
    ({"topology_out": "x.yaml"}, "needs network 'shaped'"),
    ({"timeout_s": 0}, "timeout_s must be"),
])
def test_api_mistakes_raise_config_error(kwargs, needle):
    from simulator.errors import ConfigError
    from simulator.measure.training import measure_training

    with pytest.raises(ConfigError, match=needle):
        measure_training(**kwargs)


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
    (("--ranks", "1,two"), "--ranks expects"),
    (("--aggregation", "allgather"), "valid: ddp, ps"),
    (("--bandwidth", "1Gbps"), "--bandwidth needs --network shaped"),
    (("--model", "resnet50"), "valid: mlp, small_cnn"),
    (("--repeats", "0"), "--repeats must be >= 1"),
    (("--bucket", "lots"), "--bucket"),
    (("--topology-out", "t.yaml"), "--topology-out needs --network shaped"),
])
def test_cli_mistakes_are_one_line_and_write_nothing(tmp_path, args, needle):
    out = tmp_path / "m.csv"
    done = _cli(*args, "-o", str(out))
    assert done.returncode == 2, done.stderr
    assert needle in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not out.exists() and not list(tmp_path.iterdir())


@needs_root_network
def test_shaped_parameter_server_is_bandwidth_bound_and_matches_the_simulator(tmp_path):
    """200 Mbit/s links: the one-server PS is bandwidth-bound (4.3 MB each way per worker per
    step: the server's link carries 2 n S per step), far above the compute of a step, and
    measured and simulated iteration agree closely; measured 2026-11-25: 0.0-0.7 % at 2
    workers over two runs, 2026-11-27: -1.5 to +3.2 % with both cores kept busy by other
    processes. A real network on a shared 2-core runner is now and then disturbed for a whole
    run (CI once measured 15.3 %), so a miss is measured again with fresh processes: the test
    fails when two independent measurements both miss."""
    pytest.importorskip("torch")
    errors = []
    for attempt in range(2):
        errors.append(_shaped_ps_speedup_error_pct(tmp_path / f"attempt{attempt}"))
        if abs(errors[-1]) < 15.0:
            break
    assert abs(errors[-1]) < 15.0, errors


def _shaped_ps_speedup_error_pct(where):
    """Measure the one-server PS at 1 and 2 workers on 25 MB/s links, check the measurement
    is bandwidth-bound and correct, and return the simulator's speedup error at 2 workers."""
    from simulator.measure.training import measure_training

    where.mkdir()
    topo = where / "shaped.yaml"
    bandwidth = 25e6
    frame = measure_training(ranks=(1, 2), aggregations=("ps",), batch=16, iterations=3,
                             warmup=1, network="shaped", bandwidth=bandwidth,
                             topology_out=topo)
    assert load_topology(str(topo)).graph is not None
    assert "hosts: 3" in topo.read_text()   # 2 workers + the server
    two = frame[frame["gpus"] == 2].iloc[0]
    wire_s = 2 * 2 * two["gradient_bytes"] / bandwidth
    assert two["iteration_s"] > 3 * two["compute_1rank_s"]
    assert two["comm_s"] > 0.9 * wire_s and two["iteration_s"] < 2 * wire_s + two["compute_s"]
    assert bool(two["correct"]) and two["bandwidth_bytes_per_s"] == bandwidth
    frame.to_csv(where / "m.csv", index=False)
    points = compare_training(read_training(where / "m.csv"), load_topology(str(topo)),
                              device="cpu-host")
    return float(points[points["gpus"] == 2].iloc[0]["speedup_error_pct"])
