"""Time outside communication: the slowest of N workers, the input pipeline on the host's
cores, the framework's fixed cost per step; hand-derived values, seeded sampling."""

import math

import numpy as np
import pytest

from simulator.errors import ConfigError
from simulator.topology import load_topology
from simulator.workload.compute import ComputeProfile, LayerTime
from simulator.workload.overheads import (DECODE_CPU_S_TF_CNN_2017, TrainingOverheads,
                                          blom_max_normal, expected_max_normal,
                                          for_measured_row, jitter_factor, pipeline_factor)
from simulator.workload.training import PsConfig, simulate_training


def test_expected_max_of_normals_is_exact_where_a_closed_form_exists():
    assert expected_max_normal(1) == 0.0
    assert expected_max_normal(2) == pytest.approx(1 / math.sqrt(math.pi), rel=1e-9)
    assert expected_max_normal(3) == pytest.approx(1.5 / math.sqrt(math.pi), rel=1e-9)
    # tabulated (Harter 1961): n = 8 -> 1.42360, n = 64 -> 2.34373
    assert expected_max_normal(8) == pytest.approx(1.42360, abs=1e-5)
    assert expected_max_normal(64) == pytest.approx(2.34373, abs=1e-5)
    for n in (2, 8, 32, 256):
        assert blom_max_normal(n) == pytest.approx(expected_max_normal(n), rel=0.05)


def test_jitter_factor_expected_and_sampled_with_a_seeded_generator():
    assert jitter_factor(1, 0.05) == 1.0 and jitter_factor(8, 0.0) == 1.0
    assert jitter_factor(8, 0.05) == pytest.approx(1 + 0.05 * expected_max_normal(8))
    a = jitter_factor(8, 0.05, "sampled", np.random.default_rng(7), steps=20000)
    b = jitter_factor(8, 0.05, "sampled", np.random.default_rng(7), steps=20000)
    assert a == b                                    # same seed, same result
    assert a == pytest.approx(jitter_factor(8, 0.05), rel=2e-3)
    with pytest.raises(ConfigError, match="Generator"):
        jitter_factor(8, 0.05, "sampled")


def test_pipeline_is_the_later_of_gpu_and_cpu():
    # 8 GPUs x 64 images x 25 ms on 40 cores = 0.32 s of pipeline per 0.2 s GPU step
    assert pipeline_factor(0.2, 512, 0.025, 40) == pytest.approx(0.32 / 0.2)
    assert pipeline_factor(0.5, 512, 0.025, 40) == 1.0      # hidden behind the GPU
    assert pipeline_factor(0.2, 512, 0.0, 40) == 1.0 and pipeline_factor(0.2, 512, 1, None) == 1
    with pytest.raises(ConfigError):
        TrainingOverheads(jitter_cv=-0.1)


def _profile(step_s=0.1, layers=4):
    per = step_s / layers / 3
    return ComputeProfile(tuple(LayerTime(f"l{i}", per, 2 * per) for i in range(layers)), 0.0)


def _iteration(gpus, overheads=None, aggregation="ring", ps=None, graph=None):
    graph = graph or load_topology("star", {"hosts": 16, "link_bandwidth": "1TB/s",
                                            "link_latency": "0us"})
    row = simulate_training(graph, _profile(), gpus=gpus, batch_per_gpu=64,
                            aggregation=aggregation, model_name="toy",
                            gradient_bytes=[4] * 4, overlap=False, ps=ps,
                            overheads=overheads).row
    return row["iteration_s"]


def test_a_synchronous_step_waits_for_the_expected_slowest_worker():
    base = _iteration(8)
    jittered = _iteration(8, TrainingOverheads(jitter_cv=0.05))
    assert jittered / base == pytest.approx(1 + 0.05 * expected_max_normal(8), rel=1e-3)
    assert _iteration(1, TrainingOverheads(jitter_cv=0.05)) == pytest.approx(_iteration(1))
    # sampled: deterministic for a seed
    s = TrainingOverheads(jitter_cv=0.05, jitter_mode="sampled", seed=3)
    assert _iteration(8, s) == _iteration(8, s)


def test_asynchronous_servers_do_not_wait_for_the_slowest():
    ps = PsConfig(servers=1, placement="dedicated", staleness=None)
    base = _iteration(4, aggregation="ps", ps=ps)
    assert _iteration(4, TrainingOverheads(jitter_cv=0.05), "ps", ps) == pytest.approx(base)


def test_step_overhead_adds_once_per_iteration():
    assert _iteration(4, TrainingOverheads(step_overhead_s=0.01)) == pytest.approx(
        _iteration(4) + 0.01, rel=1e-9)


def test_gpus_of_one_machine_share_its_cores_for_the_input_pipeline():
    graph = load_topology("dgx1-p100")
    ov = TrainingOverheads(decode_cpu_s_per_sample=0.025, host_cores=40)
    one, eight = _iteration(1, ov, graph=graph), _iteration(8, ov, graph=graph)
    assert one == pytest.approx(_iteration(1, graph=graph))        # 1.6 s of CPU per 40 cores
    assert eight >= 8 * 64 * 0.025 / 40 - 1e-9                     # CPU-bound: 0.32 s


def test_measured_rows_get_the_sourced_overheads():
    real = {"hardware": "NVIDIA DGX-1, 8x Tesla P100", "dataset": "ImageNet (real data)"}
    assert for_measured_row(real).decode_cpu_s_per_sample == 0.0     # no checked source
    assert for_measured_row(real).host_cores == 40 and for_measured_row(real).jitter_cv > 0
    chosen = for_measured_row(real, decode_cpu_s_per_sample=DECODE_CPU_S_TF_CNN_2017)
    assert chosen.decode_cpu_s_per_sample == DECODE_CPU_S_TF_CNN_2017
    synthetic = dict(real, dataset="ImageNet (synthetic data)")
    assert for_measured_row(synthetic, decode_cpu_s_per_sample=0.02).decode_cpu_s_per_sample == 0


def test_train_command_flags_set_the_overheads(capsys):
    """``clustersim train --jitter-cv/--step-overhead``: a slower step at 8 GPUs than without,
    none at 1 GPU for the jitter (the slowest of one worker is that worker); a bad value is one
    line."""
    import pandas as pd
    from io import StringIO

    from simulator.cli import main

    base = ["train", "--topology", "dgx-a100", "--model", "resnet50", "--gpus", "1,8",
            "--aggregation", "ring", "--format", "csv"]

    def frame(*extra):
        assert main(base + list(extra)) == 0
        return pd.read_csv(StringIO(capsys.readouterr().out)).set_index("gpus")

    plain = frame()
    jitter = frame("--jitter-cv", "0.02")
    overhead = frame("--step-overhead", "5ms")
    assert jitter.loc[1, "iteration_s"] == plain.loc[1, "iteration_s"]
    assert jitter.loc[8, "iteration_s"] > plain.loc[8, "iteration_s"]
    assert overhead.loc[1, "iteration_s"] > plain.loc[1, "iteration_s"]
    assert main(base + ["--jitter-cv", "1.5"]) == 2
    err = capsys.readouterr().err
    assert "--jitter-cv" in err and len(err.strip().splitlines()) == 1
