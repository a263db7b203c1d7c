"""TensorFlow-era parameter servers as they ran: whole variables on servers (one large
variable makes one hot server) and the CPU-bound receive path of one gRPC server task."""

import pytest

from simulator.topology import load_topology
from simulator.workload.compute import ComputeProfile, LayerTime
from simulator.workload.ps_impls import get_ps_impl
from simulator.workload.training import PsConfig, place_variables, simulate_training

MB = 10**6


def test_grpc_receive_costs_its_measured_rate_per_byte():
    impl = get_ps_impl("tf-grpc")
    star = load_topology("star", {"hosts": 2})
    assert impl.receive_bytes_per_s == pytest.approx(0.9e9)
    assert impl.copy_seconds(star, "host0", 0.9e9, 2, receive=True) == pytest.approx(1.0)
    assert get_ps_impl("ideal").copy_seconds(star, "host0", 1e9, 2, receive=True) == 0.0


def test_one_large_variable_makes_one_hot_server_whatever_the_placement():
    grads = [1 * MB, 411 * MB, 16 * MB, 4 * MB]        # a VGG-like fc6
    for policy in ("round_robin", "greedy"):
        owner = place_variables(grads, 4, policy)
        load = [sum(g for g, o in zip(grads, owner) if o == k) for k in range(4)]
        assert max(load) >= 411 * MB


def _iteration(impl, sharding, workers=4, servers=4):
    graph = load_topology("star", {"hosts": workers + servers, "link_bandwidth": "25Gbps",
                                   "link_latency": "5us"})
    grads = [2 * MB, 400 * MB, 16 * MB, 2 * MB]
    prof = ComputeProfile(tuple(LayerTime(f"l{i}", 0.01, 0.02) for i in range(4)), 0.0)
    return simulate_training(graph, prof, gpus=workers, batch_per_gpu=32, aggregation="ps",
                             model_name="toy", gradient_bytes=grads,
                             ps=PsConfig(servers=servers, placement="dedicated",
                                         sharding=sharding, impl=impl)).row["iteration_s"]


def test_the_hot_server_task_serialises_every_workers_push_at_the_grpc_rate():
    hot = _iteration("tf-grpc", "round_robin")
    # the fc6 server receives 4 x 400 MB at 0.9 GB/s: at least 1.78 s per iteration
    assert hot >= 4 * 400 * MB / 0.9e9
    assert hot > 1.5 * _iteration("ideal", "round_robin")
    # spreading the bytes evenly over the four tasks removes the hotspot
    assert _iteration("tf-grpc", "even") < 0.5 * hot


def test_tf_benchmarks_parameter_server_mode_places_variables_greedily():
    """tf_cnn_benchmarks' distributed parameter_server mode passes GreedyLoadBalancingStrategy
    (byte size) to replica_device_setter; distributed_replicated keeps the default
    round-robin; other frameworks keep the caller's placement."""
    from simulator.comparison.training import default_ps

    ps_text = "TensorFlow distributed (parameter servers over gRPC)"
    assert default_ps({"framework": ps_text}).sharding == "greedy"
    assert default_ps({"framework": "TensorFlow 1.1.0 (tf_cnn_benchmarks): "
                                    "distributed_replicated"}).sharding == "round_robin"
    assert default_ps({"framework": "MXNet dist_sync kvstore"}).sharding == "round_robin"
    # a forced implementation does not change where TensorFlow put the variables; gRPC
    # forced on a row that names no framework means TensorFlow's placement
    assert default_ps({"framework": ps_text}, impl="ideal").sharding == "greedy"
    assert default_ps({"framework": "parameter servers"}).sharding == "round_robin"
    assert default_ps({"framework": "parameter servers"}, impl="tf-grpc").sharding == "greedy"


def test_greedy_placement_balances_a_network_of_conv_and_batch_norm_layers():
    """Layers alternating weights and small batch-norm vectors: round-robin over an even
    number of servers puts every weight on half the servers; greedy by bytes spreads them."""
    from simulator.workload.models import get_model

    grads = [layer.params * 4 for layer in get_model("resnet101").layers]
    for policy, worst in (("round_robin", 1.9), ("greedy", 1.15)):
        owner = place_variables(grads, 4, policy)
        load = [sum(g for g, o in zip(grads, owner) if o == k) for k in range(4)]
        ratio = max(load) / (sum(load) / 4)
        assert (ratio >= worst) if policy == "round_robin" else (ratio <= worst), (policy, load)
