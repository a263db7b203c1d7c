"""Energy per iteration: GPU busy/idle power and per-bit link energy, against hand counts."""

import math
from dataclasses import dataclass

from simulator import theory
from simulator.topology import get_device, load_topology
from simulator.workload.energy import (IDLE_POWER_FRACTION, LINK_JOULES_PER_BIT, EnergyModel,
                                       energy_columns)
from simulator.workload.sweep import EXTRA_COLUMNS, TrainingSpec, run_training
from simulator.workload.training import PsConfig, simulate_training

V100 = get_device("v100-sxm2-16gb")           # 300 W


@dataclass(frozen=True)
class Layer:
    name: str
    forward_s: float
    backward_s: float


@dataclass(frozen=True)
class Profile:
    layers: tuple
    optimizer_s: float


PROFILE = Profile(tuple(Layer(f"l{i}", 0.01, 0.02) for i in range(8)), 0.001)
COMPUTE_S = 8 * 0.03 + 0.001


def star(hosts, bw="10GB/s", **extra):
    return load_topology("star", {"hosts": hosts, "link_bandwidth": bw, "link_latency": "1us",
                                  **extra})


def run(graph, gpus, grad, **kw):
    return simulate_training(graph, PROFILE, gpus=gpus, batch_per_gpu=32, aggregation="ring",
                             model_name="toy", gradient_bytes=grad, **kw)


def test_ring_on_star_by_hand():
    """No overlap: every GPU computes COMPUTE_S and waits for the ring; every host link carries
    2(N-1)/N M each way at 10 pJ/bit (Ethernet)."""
    n, grad = 4, [3 << 20] * 8
    m = sum(grad)
    result = run(star(n), n, grad, overlap=False)
    comm = theory.ring_allreduce(n, m, 2e-6, 1 / 10e9)
    iteration = COMPUTE_S + comm
    assert math.isclose(result.row["iteration_s"], iteration, rel_tol=1e-9)
    got = energy_columns(result.row, result.engine, V100, n)
    gpu = n * (COMPUTE_S * 300 + comm * IDLE_POWER_FRACTION * 300)
    network = 2 * n * (2 * (n - 1) / n * m) * 8 * LINK_JOULES_PER_BIT["ethernet"]
    assert math.isclose(got["gpu_joules"], gpu, rel_tol=1e-9)
    assert math.isclose(got["network_joules"], network, rel_tol=1e-12)
    assert math.isclose(got["joules_per_iteration"], gpu + network, rel_tol=1e-12)
    assert math.isclose(got["joules_per_sample"], (gpu + network) / (n * 32), rel_tol=1e-12)
    # static link power: every used link at its full-rate power for the whole iteration
    static = energy_columns(result.row, result.engine, V100, n,
                            model=EnergyModel(static_fraction=0.5))
    extra = 0.5 * 2 * n * 10e9 * 8 * LINK_JOULES_PER_BIT["ethernet"] * iteration
    assert math.isclose(static["network_joules"], network + extra, rel_tol=1e-9)


def test_reduction_kernels_count_as_busy():
    """With reductions charged on the GPUs, each rank sums (N-1)/N M bytes at the reduce rate."""
    n, grad, rate = 4, [3 << 20] * 8, 1e9
    result = run(star(n, reduce_bandwidth=rate), n, grad, overlap=False)
    reduce_s = (n - 1) / n * sum(grad) / rate
    iteration = result.row["iteration_s"]
    got = energy_columns(result.row, result.engine, V100, n)
    busy = COMPUTE_S + reduce_s
    expected = n * (busy * 300 + (iteration - busy) * IDLE_POWER_FRACTION * 300)
    assert math.isclose(got["gpu_joules"], expected, rel_tol=1e-9)


def test_ps_iterations_are_averaged_and_servers_are_not_gpus():
    n, grad = 4, [1 << 20] * 8
    result = simulate_training(star(5, reduce_bandwidth=1e9), PROFILE, gpus=n, batch_per_gpu=32,
                               aggregation="ps", model_name="toy", gradient_bytes=grad,
                               ps=PsConfig(servers=1, iterations=5))
    assert result.iterations == 5
    got = energy_columns(result.row, result.engine, V100, n, iterations=result.iterations)
    # per iteration every worker pushes and pulls the model once: 2 hops each way
    network = n * 2 * sum(grad) * 2 * 8 * LINK_JOULES_PER_BIT["ethernet"]
    assert math.isclose(got["network_joules"], network, rel_tol=1e-12)
    it = result.row["iteration_s"]
    gpu = n * (COMPUTE_S * 300 + (it - COMPUTE_S) * IDLE_POWER_FRACTION * 300)
    assert math.isclose(got["gpu_joules"], gpu, rel_tol=1e-9)   # server sums not counted


def test_joules_per_sample_flat_when_scaling_is_perfect_and_rising_when_exposed():
    grad = [3 << 20] * 8
    fast = star(8, bw="1TB/s")
    slow = star(8, bw="1GB/s")
    flat = [energy_columns(r.row, r.engine, V100, n)["joules_per_sample"]
            for n, r in ((n, run(fast, n, grad)) for n in (2, 4, 8))]
    assert max(flat) / min(flat) < 1.01
    single = COMPUTE_S * 300 / 32
    assert math.isclose(flat[0], single, rel_tol=0.01)
    rising = [energy_columns(r.row, r.engine, V100, n)["joules_per_sample"]
              for n, r in ((n, run(slow, n, grad, overlap=False)) for n in (2, 4, 8))]
    assert rising[0] < rising[1] < rising[2]
    # at N = 8 the exposed ring adds its idle power per sample
    comm = theory.ring_allreduce(8, sum(grad), 2e-6, 1 / 1e9)
    network = 2 * 8 * (2 * 7 / 8 * sum(grad)) * 8 * LINK_JOULES_PER_BIT["ethernet"]
    expected = (COMPUTE_S * 300 + comm * IDLE_POWER_FRACTION * 300) / 32 + network / (8 * 32)
    assert math.isclose(rising[2], expected, rel_tol=1e-9)


def test_training_rows_carry_energy_columns():
    spec = TrainingSpec(models=("resnet50",), batch_per_gpu=32, gpus=(1, 2),
                        aggregations=("ring",), device="v100-sxm2-16gb")
    frame = run_training(star(4), spec)
    for column in ("joules_per_iteration", "joules_per_sample", "gpu_joules",
                   "network_joules", "compression", "wire_bytes_per_iteration"):
        assert column in EXTRA_COLUMNS and frame[column].notna().all(), column
    one, two = frame.iloc[0], frame.iloc[1]
    assert one["network_joules"] == 0 and two["network_joules"] > 0
    # one GPU alone computes all the time: TDP x iteration
    assert math.isclose(one["gpu_joules"], 300 * one["iteration_s"], rel_tol=1e-12)
    assert (frame["compression"] == "none").all()
