"""Training iterations: closed forms where they exist, and the directions theory predicts."""

import math
from dataclasses import dataclass

import pytest

from simulator import theory
from simulator.topology import load_topology
from simulator.workload.training import (PsConfig, make_buckets, place_variables,
                                         simulate_training)


@dataclass(frozen=True)
class Layer:
    name: str
    forward_s: float
    backward_s: float


@dataclass(frozen=True)
class Profile:
    layers: tuple
    optimizer_s: float


def profile(layers=10, forward_s=0.01, backward_s=0.02, optimizer_s=0.001):
    return Profile(tuple(Layer(f"l{i}", forward_s, backward_s) for i in range(layers)),
                   optimizer_s)


def star(hosts, bw="10GB/s", lat="1us"):
    return load_topology("star", {"hosts": hosts, "link_bandwidth": bw, "link_latency": lat})


def run(graph, gpus, aggregation, grad, prof=None, **kw):
    prof = prof or profile(len(grad))
    return simulate_training(graph, prof, gpus=gpus, batch_per_gpu=32, aggregation=aggregation,
                             model_name="toy", gradient_bytes=grad, **kw).row


def test_buckets_follow_backward_order_and_cap():
    buckets = make_buckets([10, 10, 10, 10], [1.0, 2.0, 3.0, 4.0], bucket_bytes=20)
    assert [b.layers for b in buckets] == [(3, 2), (1, 0)]
    assert [b.ready_s for b in buckets] == [7.0, 10.0]
    single = make_buckets([10, 10, 10, 10], [1.0, 2.0, 3.0, 4.0], 20, overlap=False)
    assert single[0].size_bytes == 40 and single[0].ready_s == 10.0


def test_round_robin_and_greedy_placement():
    grad = [100, 0, 10, 10, 10]
    assert place_variables(grad, 2, "round_robin").tolist() == [0, -1, 1, 0, 1]
    assert place_variables(grad, 2, "greedy").tolist() == [0, -1, 1, 1, 1]


def test_one_gpu_is_compute_only():
    row = run(star(2), 1, "ring", [1 << 20] * 10)
    assert math.isclose(row["iteration_s"], 10 * 0.03 + 0.001, rel_tol=1e-12)
    assert row["speedup"] == pytest.approx(1.0) and row["exposed_comm_s"] == 0


def test_no_overlap_ring_iteration_is_compute_plus_closed_form():
    """One bucket after backward: iteration = compute + the ring all-reduce closed form."""
    grad = [3 << 20] * 8
    g = star(8)
    row = run(g, 8, "ring", grad, overlap=False)
    comm = theory.ring_allreduce(8, sum(grad), 2e-6, 1 / 10e9)
    assert math.isclose(row["iteration_s"], 8 * 0.03 + 0.001 + comm, rel_tol=1e-9)


def test_overlap_raises_efficiency_for_ring_and_ps():
    grad = [8 << 20] * 10
    g = star(17)
    for agg, kw in (("ring", {}), ("ps", {"ps": PsConfig(servers=1)})):
        hidden = run(g, 16, agg, grad, **kw)
        exposed = run(g, 16, agg, grad, overlap=False, **kw)
        assert hidden["efficiency"] > exposed["efficiency"], agg


def test_bigger_models_and_slower_links_hurt_ps_more_than_ring():
    g_fast, g_slow = star(17, "10GB/s"), star(17, "2.5GB/s")
    small, big = [2 << 20] * 10, [8 << 20] * 10
    ps = {"ps": PsConfig(servers=1)}
    eff = {}
    for name, g, grad in (("base", g_fast, small), ("big", g_fast, big),
                          ("slow", g_slow, small)):
        eff[name] = (run(g, 16, "ring", grad)["efficiency"],
                     run(g, 16, "ps", grad, **ps)["efficiency"])
    for worse in ("big", "slow"):
        ring_drop = eff["base"][0] - eff[worse][0]
        ps_drop = eff["base"][1] - eff[worse][1]
        assert ps_drop > max(ring_drop, 0.0) + 0.05, (worse, eff)


def test_more_servers_raise_ps_efficiency():
    grad = [4 << 20] * 12
    g = star(16 + 4)
    effs = [run(g, 16, "ps", grad, ps=PsConfig(servers=s, sharding="even"))["efficiency"]
            for s in (1, 2, 4)]
    assert effs[0] < effs[1] < effs[2]


def test_async_and_ssp_keep_throughput_and_report_staleness():
    grad = [4 << 20] * 10
    g = star(9)
    bsp = run(g, 8, "ps", grad, ps=PsConfig(servers=1, staleness=0, iterations=6))
    ssp = run(g, 8, "ps", grad, ps=PsConfig(servers=1, staleness=2, iterations=6))
    asy = run(g, 8, "ps", grad, ps=PsConfig(servers=1, staleness=None, iterations=6))
    assert bsp["staleness_max"] == 0 or bsp["consistency"] == "bsp"
    assert asy["throughput_samples_s"] >= bsp["throughput_samples_s"] * 0.999
    assert ssp["throughput_samples_s"] >= bsp["throughput_samples_s"] * 0.999
    assert asy["consistency"] == "async" and ssp["consistency"] == "ssp2"
    assert asy["staleness_mean"] > 0


def test_per_node_servers_resolve_to_machines():
    g = load_topology("tianhe-k80", {"nodes": 4})
    grad = [1 << 20] * 10
    row = run(g, 8, "ps", grad, ps=PsConfig(servers="per_node", placement="colocated"))
    assert row["ps_servers"] == 2


# -- gradient accumulation -----------------------------------------------------------------------

def _compute_profile(layers=8, forward_s=0.01, backward_s=0.02, optimizer_s=0.001):
    from simulator.workload.compute import ComputeProfile, LayerTime

    return ComputeProfile(tuple(LayerTime(f"l{i}", forward_s, backward_s)
                                for i in range(layers)), optimizer_s)


@pytest.mark.parametrize("steps", [2, 4, 16])
def test_accumulation_without_overlap_is_k_micro_batches_plus_one_ring_closed_form(steps):
    """K micro-batches, then one all-reduce of the whole gradient: iteration = K x (forward +
    backward) + optimizer + the ring closed form; throughput counts K x batch samples."""
    grad = [3 << 20] * 8
    row = run(star(8), 8, "ring", grad, prof=_compute_profile(), overlap=False,
              accumulation=steps)
    comm = theory.ring_allreduce(8, sum(grad), 2e-6, 1 / 10e9)
    assert math.isclose(row["iteration_s"], steps * 8 * 0.03 + 0.001 + comm, rel_tol=1e-9)
    assert row["throughput_samples_s"] == pytest.approx(8 * 32 * steps / row["iteration_s"],
                                                        rel=1e-12)
    assert row["accumulation"] == steps and row["batch_per_gpu"] == 32


def test_accumulation_hides_behind_the_last_backward_only_and_amortises_the_rest():
    """With overlap, only the last micro-batch's backward hides the buckets (the first K-1
    run before it, as DDP's no_sync): the exposed tail is the same for every K, to the
    bit, while the step grows by (K-1) micro-batches and the speedup rises towards N."""
    grad = [8 << 20] * 8
    base = run(star(8, bw="1GB/s"), 8, "ring", grad, prof=_compute_profile())
    rows = [run(star(8, bw="1GB/s"), 8, "ring", grad, prof=_compute_profile(),
                accumulation=k) for k in (2, 8)]
    assert base["exposed_comm_s"] > 0.01                     # communication-bound at K = 1
    for k, row in zip((2, 8), rows):
        assert row["exposed_comm_s"] == pytest.approx(base["exposed_comm_s"], rel=1e-12)
        assert row["iteration_s"] == pytest.approx(base["iteration_s"] + (k - 1) * 8 * 0.03,
                                                   rel=1e-12)
    assert base["speedup"] < rows[0]["speedup"] < rows[1]["speedup"] < 8


def test_accumulation_must_be_a_whole_number_of_micro_batches():
    from simulator.errors import ConfigError

    for bad in (0, -1, 1.5, True):
        with pytest.raises(ConfigError, match="accumulation must be an integer >= 1"):
            run(star(2), 2, "ring", [1 << 20] * 8, prof=_compute_profile(), accumulation=bad)
    with pytest.raises(ValueError, match="accumulation steps"):
        _compute_profile().accumulated(0)
    assert _compute_profile().accumulated(1) == _compute_profile()


def test_time_to_train_and_energy_count_every_micro_batch():
    import pandas as pd

    from simulator.workload.energy import energy_columns
    from simulator.workload.time_to_train import time_to_train

    rows = pd.DataFrame([{"gpus": 8, "iteration_s": 1.0, "batch_per_gpu": 32},
                         {"gpus": 8, "iteration_s": 4.0, "batch_per_gpu": 32,
                          "accumulation": 4}])
    out = time_to_train(rows, "sgd")     # a row without the column counts one micro-batch
    assert list(out["global_batch"]) == [256, 1024]
    assert out.loc[1, "time_to_train_s"] == pytest.approx(
        out.loc[1, "steps"] * 4.0, rel=1e-12)
    g = star(8)
    row = run(g, 8, "ring", [1 << 20] * 8, prof=_compute_profile(), accumulation=4)
    from simulator.workload.training import simulate_training

    result = simulate_training(g, _compute_profile(), gpus=8, batch_per_gpu=32,
                               aggregation="ring", model_name="toy",
                               gradient_bytes=[1 << 20] * 8, accumulation=4)
    energy = energy_columns(result.row, result.engine, "v100-sxm2-16gb", 8, 1)
    assert energy["joules_per_sample"] == pytest.approx(
        energy["joules_per_iteration"] / (8 * 32 * 4), rel=1e-12)
    assert row["accumulation"] == 4
