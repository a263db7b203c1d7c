"""Beyond plain data parallelism: ZeRO memory and traffic, pipeline bubbles, time to train."""

import itertools
import math

import numpy as np
import pandas as pd
import pytest

from simulator.engine.runner import simulate
from simulator.errors import ConfigError
from simulator.schedules import make_schedule
from simulator.topology import load_topology
from simulator.topology.devices import get_device
from simulator.workload.compute import ComputeProfile, LayerTime
from simulator.workload.models import Layer, Model
from simulator.workload.pipeline import (gpipe, one_f_one_b, partition_layers, peak_in_flight,
                                         pipeline_schedule, simulate_pipeline,
                                         theoretical_bubble)
from simulator.workload.time_to_train import (CONVERGENCE, IMAGENET_TRAIN_IMAGES,
                                              ConvergenceModel, best_gpu_count,
                                              examples_to_target, steps_to_target,
                                              time_to_train)
from simulator.workload.zero import (activation_memory, check_fits, gpt3_6_7b, layer_groups,
                                     simulate_zero, zero_memory, zero_memory_table,
                                     zero_traffic_bytes)

A100_80 = get_device("a100-sxm4-80gb")


def star(hosts, bw="10GB/s", lat="1us"):
    return load_topology("star", {"hosts": hosts, "link_bandwidth": bw, "link_latency": lat})


def toy_model(layers, params=1_000_000, activation_bytes=4096):
    return Model("toy", tuple(Layer(f"l{i}", "linear", params, 1.0, activation_bytes)
                              for i in range(layers)),
                 "one sample", "sequences", layers * params, "test")


def uniform_profile(layers, forward_s=0.01, backward_s=0.02, optimizer_s=0.0):
    return ComputeProfile(tuple(LayerTime(f"l{i}", forward_s, backward_s)
                                for i in range(layers)), optimizer_s)


# ---------------------------------------------------------------------------------------------
# ZeRO
# ---------------------------------------------------------------------------------------------

def test_zero_memory_is_the_papers_figure_1_for_7b_on_64_gpus():
    psi, n, k = 7e9, 64, 12
    expected = {0: (2 + 2 + k) * psi,
                1: (2 + 2) * psi + k * psi / n,
                2: 2 * psi + (2 + k) * psi / n,
                3: (2 + 2 + k) * psi / n}
    for stage, total in expected.items():
        assert zero_memory(7_000_000_000, n, stage).model_state_bytes == total
    assert expected[0] == 112e9 and expected[1] == 28e9 + 84e9 / 64
    # terms: stage 2 keeps the fp16 parameters whole, shards gradients and optimizer states
    m2 = zero_memory(7_000_000_000, n, 2)
    assert (m2.param_bytes, m2.gradient_bytes, m2.optimizer_bytes) == (14e9, 14e9 / 64, 84e9 / 64)


def test_stage_0_of_7b_is_refused_on_a100_80gb_and_stage_1_fits():
    with pytest.raises(ConfigError, match=r"stage 0 .* 112\.000 GB .* a100-sxm4-80gb has "
                                          r"85\.899 GB \(80 GiB\)"):
        check_fits(zero_memory(7_000_000_000, 64, 0), A100_80)
    for stage in (1, 2, 3):
        check_fits(zero_memory(7_000_000_000, 64, stage), A100_80)


def test_simulate_zero_refuses_before_simulating():
    model = gpt3_6_7b()
    assert model.params == 6_658_404_352
    with pytest.raises(ConfigError, match="stage 0 on 64 GPUs needs"):
        simulate_zero(star(64), model, A100_80, 0, 64, 1)
    table = zero_memory_table(model, A100_80, 64, 1, checkpointing=True)
    assert table["fits"].tolist() == [False, True, True, True]
    assert table["total_bytes"].is_monotonic_decreasing


def test_activation_checkpointing_keeps_group_inputs_and_one_group():
    model = Model("acts", tuple(Layer(f"l{i}", "linear", 10, 1.0, 100 * (i + 1))
                                for i in range(4)), "x", "sequences", 40, "test")
    groups = layer_groups([10] * 4, group_bytes=20)
    assert groups == [(0, 2), (2, 4)]
    assert activation_memory(model, 2, "fp32") == 2 * (100 + 200 + 300 + 400)
    # checkpoints: outputs of l1 and l3; recompute: the larger group (l2, l3)
    assert activation_memory(model, 2, "fp32", True, groups) == 2 * (200 + 400 + 700)
    assert activation_memory(model, 2, "fp16", True, groups) == (200 + 400 + 700)


def _zero_row(stage, prefetch=True, gpus=8, bw="10GB/s"):
    model = toy_model(8, params=10_000_000)
    profile = uniform_profile(8, 0.001, 0.002, 0.0005)
    return simulate_zero(star(gpus, bw=bw), model, A100_80, stage, gpus, 1, prefetch=prefetch,
                         group_bytes=20_000_000, profile=profile).row


def test_stage_3_sends_one_and_a_half_times_stage_0_in_the_engine():
    rows = {stage: _zero_row(stage) for stage in (0, 1, 2, 3)}
    n, grad_bytes = 8, 2 * 80_000_000
    # every rank of a ring sends (n-1)/n of each reduce-scatter / all-gather: summed over the
    # ranks this is exact in integers
    assert rows[0]["bytes_sent_total"] == 2 * (n - 1) * grad_bytes
    assert rows[3]["bytes_sent_total"] * 2 == rows[0]["bytes_sent_total"] * 3
    assert rows[1]["bytes_sent_total"] == rows[2]["bytes_sent_total"] == \
        rows[0]["bytes_sent_total"]
    for stage, row in rows.items():
        assert row["bytes_per_gpu_per_step"] == pytest.approx(
            row["predicted_bytes_per_gpu_per_step"], rel=1e-12)
        assert row["predicted_bytes_per_gpu_per_step"] == zero_traffic_bytes(80_000_000, n, stage)
        assert row["iteration_s"] >= row["compute_s"] - 1e-12


def test_prefetch_lowers_stage_3_iteration_time():
    with_prefetch, without = _zero_row(3, True), _zero_row(3, False)
    assert with_prefetch["iteration_s"] < without["iteration_s"]
    assert with_prefetch["bytes_sent_total"] == without["bytes_sent_total"]
    # without prefetch every gather is exposed: 16 all-gathers of 20 MB on an 8-rank ring
    gather = simulate(make_schedule("ring", "allgather", 8, 20_000_000), star(8),
                      [f"host{i}" for i in range(8)])[0].time_s
    assert without["exposed_comm_s"] >= 16 * gather * (1 - 1e-9)


def test_one_gpu_zero_is_compute_only():
    row = simulate_zero(star(2), toy_model(4), A100_80, 3, 1, 1,
                        profile=uniform_profile(4, 0.01, 0.02, 0.004)).row
    assert row["iteration_s"] == pytest.approx(4 * 0.03 + 0.004, rel=1e-12)
    assert row["bytes_sent_total"] == 0


def test_zero_rejects_bad_arguments():
    with pytest.raises(ConfigError, match="stage must be one of"):
        zero_memory(10, 2, 4)
    with pytest.raises(ConfigError, match="unknown precision"):
        zero_memory(10, 2, 1, precision="int8")
    with pytest.raises(ConfigError, match="8 GPUs requested"):
        simulate_zero(star(4), toy_model(2), A100_80, 1, 8, 1)


# ---------------------------------------------------------------------------------------------
# Pipeline
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("build", [gpipe, one_f_one_b])
@pytest.mark.parametrize("p,m", [(1, 1), (2, 1), (3, 5), (4, 4), (5, 2), (8, 16)])
def test_schedules_run_every_op_once_forward_first(build, p, m):
    plan = build(p, m)
    assert len(plan) == p
    for s, ops in enumerate(plan):
        assert sorted((o.micro_batch, o.kind) for o in ops) == sorted(
            itertools.product(range(m), "BF"))
        assert all(o.stage == s for o in ops)
        seen = set()
        for o in ops:
            assert o.kind == "F" or o.micro_batch in seen
            seen.add(o.micro_batch)
    expected = [m] * p if build is gpipe else [min(p - s, m) for s in range(p)]
    assert [peak_in_flight(ops) for ops in plan] == expected


def test_one_f_one_b_order_on_the_first_stage():
    ops = one_f_one_b(3, 4)[0]
    assert [f"{o.kind}{o.micro_batch}" for o in ops] == \
        ["F0", "F1", "F2", "B0", "F3", "B1", "B2", "B3"]
    with pytest.raises(ConfigError, match="valid: 1f1b, gpipe"):
        pipeline_schedule("interleaved", 2, 2)


def _free_comm_pipeline(p, m, schedule, replicas=1, lat=0, activation_bytes=0):
    model = toy_model(2 * p, activation_bytes=activation_bytes)
    return simulate_pipeline(star(p * replicas, lat=lat), model, stages=p, micro_batches=m,
                             micro_batch=1, schedule=schedule, replicas=replicas,
                             profile=uniform_profile(2 * p, 0.5, 1.0, 0.0))


@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (4, 3), (3, 7), (8, 16), (6, 1)])
def test_measured_bubble_is_p_minus_1_over_m_plus_p_minus_1(p, m):
    for schedule in ("gpipe", "1f1b"):
        row = _free_comm_pipeline(p, m, schedule).row
        assert abs(row["bubble_fraction"] - (p - 1) / (m + p - 1)) < 1e-9
        assert row["theoretical_bubble"] == theoretical_bubble(p, m)
        # the whole pipeline: (m + p - 1) slots of forward + backward
        assert row["pipeline_s"] == pytest.approx((m + p - 1) * 3.0, rel=1e-12)


@pytest.mark.parametrize("costs", [(1, 2, 1, 1), (3, 1, 1, 1), (1, 2, 3, 4)])
def test_unequal_stages_pay_the_slowest_stage(costs):
    model = toy_model(4, activation_bytes=0)
    profile = ComputeProfile(tuple(LayerTime(f"l{i}", t, 2 * t) for i, t in enumerate(costs)))
    for m in (1, 3, 8):
        rows = {s: simulate_pipeline(star(4, lat=0), model, stages=4, micro_batches=m,
                                     micro_batch=1, schedule=s, profile=profile).row
                for s in ("gpipe", "1f1b")}
        t = 3 * np.asarray(costs, dtype=float)
        expected = 1 - m * t.sum() / (4 * (t.sum() + (m - 1) * t.max()))
        assert rows["gpipe"]["imbalance_bubble"] == pytest.approx(expected, rel=1e-12)
        assert rows["gpipe"]["bubble_fraction"] == pytest.approx(expected, abs=1e-9)
        assert rows["1f1b"]["bubble_fraction"] <= expected + 1e-9
        assert rows["gpipe"]["bubble_fraction"] >= theoretical_bubble(4, m) - 1e-9


def test_stages_are_cut_between_blocks():
    from simulator.workload.pipeline import module_of, partition_blocks

    assert [module_of(n) for n in ("h.6.attn.qkv", "layer1.0.conv1.conv", "embeddings.word",
                                   "features.12", "fc", "stem.bn")] == \
        ["h.6", "layer1.0", "embeddings", "features.12", "fc", "stem"]
    names = ["wte", "h.0.a", "h.0.b", "h.0.c", "h.1.a", "h.1.b", "h.1.c", "head"]
    costs = [0.1, 1, 1, 1, 1, 1, 1, 0.1]
    assert partition_blocks(names, costs, 2) == [(0, 4), (4, 8)]
    assert partition_layers(costs, 2) == [(0, 4), (4, 8)]
    assert partition_blocks(names, [5, 1, 1, 1, 1, 1, 1, 5], 3) == [(0, 1), (1, 7), (7, 8)]
    # fewer blocks than stages: cut per layer
    assert partition_blocks(names[:4], [1, 1, 1, 1], 4) == [(0, 1), (1, 2), (2, 3), (3, 4)]


def test_1f1b_holds_fewer_micro_batches_than_gpipe():
    g = _free_comm_pipeline(4, 8, "gpipe", activation_bytes=4096)
    f = _free_comm_pipeline(4, 8, "1f1b", activation_bytes=4096)
    assert (g.row["peak_in_flight"], f.row["peak_in_flight"]) == (8, 4)
    assert f.row["peak_activation_bytes"] == g.row["peak_activation_bytes"] / 2
    assert f.stages["peak_in_flight"].tolist() == [4, 3, 2, 1]


def test_data_parallel_replicas_add_the_gradient_allreduce():
    for schedule in ("gpipe", "1f1b"):
        one = _free_comm_pipeline(4, 8, schedule, lat="1us")
        two = _free_comm_pipeline(4, 8, schedule, replicas=2, lat="1us")
        # stage 0 finishes last; its 2 M parameters (fp16) are all-reduced with host4
        ring = simulate(make_schedule("ring", "allreduce", 2, 2 * 2_000_000), star(8, lat="1us"),
                        ["host0", "host4"])[0].time_s
        assert two.row["iteration_s"] == pytest.approx(one.row["iteration_s"] + ring, rel=1e-12)
        assert two.row["dp_allreduce_s"] == pytest.approx(ring, rel=1e-12)
        assert two.row["bubble_fraction"] == pytest.approx(one.row["bubble_fraction"], abs=1e-12)


def test_activation_transfers_cost_time_on_the_network():
    free = _free_comm_pipeline(4, 8, "1f1b")
    costly = _free_comm_pipeline(4, 8, "1f1b", lat="1ms", activation_bytes=40_000_000)
    assert costly.row["iteration_s"] > free.row["iteration_s"]
    assert costly.row["bubble_fraction"] > free.row["bubble_fraction"]


def test_partition_minimises_the_most_expensive_stage():
    assert partition_layers([1.0] * 8, 4) == [(0, 2), (2, 4), (4, 6), (6, 8)]
    assert partition_layers([5, 1, 1, 1, 1, 1], 2) == [(0, 1), (1, 6)]
    rng = np.random.default_rng(7)
    for _ in range(20):
        costs = rng.uniform(0.1, 1.0, size=7)
        for p in (2, 3):
            best = min(max(sum(costs[a:b]) for a, b in zip((0,) + c, c + (7,)))
                       for c in itertools.combinations(range(1, 7), p - 1))
            got = partition_layers(costs, p)
            assert max(sum(costs[a:b]) for a, b in got) == pytest.approx(best, rel=1e-12)
    with pytest.raises(ConfigError, match="at least 5 layers"):
        partition_layers([1.0] * 4, 5)


# ---------------------------------------------------------------------------------------------
# Time to train
# ---------------------------------------------------------------------------------------------

TOY = ConvergenceModel("toy", "toy", examples_min=1e6, critical_batch=4096,
                       dataset_examples=100_000, target="t", source="test")


def test_published_limits_become_parameters():
    sgd = CONVERGENCE["sgd"]
    assert sgd.critical_batch == 8192 and sgd.examples_min == 90 * IMAGENET_TRAIN_IMAGES
    # perfect scaling up to 8K: the same 90 epochs; beyond, no fewer steps
    assert steps_to_target(256, "sgd") == 90 * 1_281_167 / 256
    assert examples_to_target(8192, "sgd") == 90 * 1_281_167
    assert steps_to_target(16384, "sgd") == steps_to_target(8192, "sgd")
    assert CONVERGENCE["lars"].critical_batch == 32768
    # LAMB: 512 x 1,000k baseline steps, and 15.6k steps at 32K
    assert steps_to_target(512, "lamb") == 1_000_000
    assert steps_to_target(32768, "lamb") == 15_625


def test_mccandlish_form_doubles_steps_and_examples_at_the_critical_batch():
    assert steps_to_target(4096, TOY, "mccandlish") == 2 * 1e6 / 4096
    assert examples_to_target(4096, TOY, "mccandlish") == 2e6
    # far below: perfect scaling; far above: S_min
    assert steps_to_target(4, TOY, "mccandlish") == pytest.approx(1e6 / 4, rel=1e-3)
    assert steps_to_target(4096e6, TOY, "mccandlish") == pytest.approx(1e6 / 4096, rel=1e-5)


def test_time_to_train_and_the_gpu_count_that_minimises_it():
    results = pd.DataFrame({"model": "toy", "gpus": [4, 8, 16, 32], "batch_per_gpu": 256,
                            "iteration_s": [1.0, 1.1, 1.2, 1.5]})
    piecewise = time_to_train(results, TOY)
    assert piecewise["global_batch"].tolist() == [1024, 2048, 4096, 8192]
    assert piecewise["steps"].tolist() == [976.5625, 488.28125, 244.140625, 244.140625]
    assert piecewise["time_to_train_s"].tolist() == pytest.approx(
        [976.5625, 537.109375, 292.96875, 366.2109375], rel=1e-15)
    assert piecewise["epochs"].tolist() == [10.0, 10.0, 10.0, 20.0]
    assert best_gpu_count(piecewise)["gpus"].tolist() == [16]
    smooth = time_to_train(results, TOY, "mccandlish")
    s_min = 1e6 / 4096
    assert smooth["steps"].tolist() == [5 * s_min, 3 * s_min, 2 * s_min, 1.5 * s_min]
    assert smooth["time_to_train_s"].tolist() == pytest.approx(
        [1220.703125, 805.6640625, 585.9375, 549.31640625], rel=1e-15)
    assert best_gpu_count(smooth)["gpus"].tolist() == [32]
    both = pd.concat([piecewise, smooth])
    assert best_gpu_count(both, by=["form"])["gpus"].tolist() == [32, 16]


def test_time_to_train_reads_global_batch_and_checks_columns():
    frame = pd.DataFrame({"gpus": [8], "global_batch": [8192], "iteration_s": [2.0]})
    assert time_to_train(frame, TOY)["time_to_train_s"].tolist() == [2.0 * 1e6 / 4096]
    with pytest.raises(ConfigError, match="iteration_s"):
        time_to_train(pd.DataFrame({"gpus": [8], "batch_per_gpu": [8]}), TOY)
    with pytest.raises(ConfigError, match="valid: lamb, lars, sgd"):
        time_to_train(frame, "adam")
    with pytest.raises(ConfigError, match="unknown form"):
        time_to_train(frame, TOY, "linear")


def test_time_to_train_of_a_simulated_sweep():
    from simulator.workload.sweep import TrainingSpec, run_training

    graph = load_topology("gpu_cluster", {"nodes": 2, "gpus_per_node": 4,
                                          "gpu": "a100-sxm4-80gb"})
    spec = TrainingSpec(models=("resnet50",), batch_per_gpu=1024, gpus=(2, 4, 8),
                        aggregations=("ring",), precision="fp16")
    frame = time_to_train(run_training(graph, spec), "sgd")
    # 2048 and 4096 images per step scale perfectly; 8192 is the critical batch
    assert frame["epochs"].tolist() == pytest.approx([90.0] * 3)
    assert frame["time_to_train_s"].tolist() == pytest.approx(
        (frame["iteration_s"] * 90 * IMAGENET_TRAIN_IMAGES / frame["global_batch"]).tolist())
    assert math.isfinite(best_gpu_count(frame)["time_to_train_s"].iloc[0])
