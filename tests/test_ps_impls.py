"""Parameter-server implementations: framing from the frame formats, copies on host memory,
and iterations that get slower by exactly what the transport takes."""

import dataclasses

import pytest

from simulator.library.transport import FRAMINGS, framing
from simulator.topology import load_topology
from simulator.workload import ps_impls
from simulator.workload.ps_impls import PsImpl, detect_ps_impl, get_ps_impl, wire_graph
from simulator.workload.training import PsConfig, simulate_training
from simulator.errors import ConfigError

from test_training import profile


def test_framing_efficiencies_are_the_frame_formats():
    assert framing("ib", "rdma").efficiency == pytest.approx(4096 / (4096 + 26))
    assert framing("ethernet", "rdma").efficiency == pytest.approx(4096 / (4096 + 82))
    assert framing("ethernet", "tcp").efficiency == pytest.approx(1448 / (1448 + 90))
    assert set(FRAMINGS) == {("ib", "rdma"), ("ethernet", "rdma"), ("ethernet", "tcp"),
                             ("ib", "tcp")}
    assert framing("nvlink", "rdma").efficiency == 1.0


def test_wire_graph_scales_only_network_links():
    graph = load_topology("k80-cloud-8", {"nodes": 2})
    tcp = wire_graph(graph, get_ps_impl("tf-grpc"))
    for u, v, attrs in graph.edges(data=True):
        ratio = tcp.edges[u, v]["bandwidth_bytes_per_s"] / attrs["bandwidth_bytes_per_s"]
        expected = 1448 / 1538 if attrs["kind"] == "ethernet" else 1.0
        assert ratio == pytest.approx(expected)
    assert wire_graph(graph, get_ps_impl("ideal")) is graph


def test_copy_seconds_reads_and_writes_every_byte_on_the_node_memory():
    graph = load_topology("k80-cloud-8", {"nodes": 1})
    impl = get_ps_impl("tf-grpc")
    bw = graph.nodes["n0.cpu"]["memory_bandwidth_bytes_per_s"]
    assert impl.copy_seconds(graph, "n0.cpu", 1e9, 2) == pytest.approx(2 * 2 * 1e9 / bw)
    star = load_topology("star", {"hosts": 2})
    assert impl.copy_seconds(star, "host0", 1e9, 2) == 0.0


def _ps_iteration(graph, impl, gpus=2, grad=(64 << 20,)):
    prof = profile(len(grad), forward_s=1e-3, backward_s=1e-3, optimizer_s=0.0)
    row = simulate_training(graph, prof, gpus=gpus, batch_per_gpu=1, aggregation="ps",
                            model_name="toy", gradient_bytes=list(grad), overlap=False,
                            ps=PsConfig(servers=1, placement="dedicated", impl=impl)).row
    return row["iteration_s"], row["compute_s"]


def test_tcp_framing_slows_a_bandwidth_bound_ps_by_exactly_its_efficiency(monkeypatch):
    monkeypatch.setitem(ps_impls.PS_IMPLS, "tcp-only", PsImpl("tcp-only", "tcp", 0, 0, "test"))
    star = load_topology("star", {"hosts": 3, "link_latency": "0us"})
    ideal, compute = _ps_iteration(star, "ideal")
    tcp, _ = _ps_iteration(star, "tcp-only")
    assert (tcp - compute) / (ideal - compute) == pytest.approx(1538 / 1448, rel=1e-9)


def test_grpc_copies_cost_more_than_zero_copy_and_rdma_least():
    graph = load_topology("k80-cloud-8", {"nodes": 3, "ps_hosts": 0})
    times = {}
    for impl in ("ideal", "byteps", "mxnet-kvstore", "tf-grpc"):
        cfg = PsConfig(servers="per_node", placement="colocated", impl=impl)
        prof = profile(4, forward_s=1e-3, backward_s=1e-3, optimizer_s=0.0)
        times[impl] = simulate_training(graph, prof, gpus=24, batch_per_gpu=1,
                                        aggregation="ps", model_name="toy",
                                        gradient_bytes=[16 << 20] * 4, ps=cfg).row["iteration_s"]
    assert times["ideal"] <= times["byteps"] < times["mxnet-kvstore"] < times["tf-grpc"]


def test_detect_and_unknown_names():
    assert detect_ps_impl("TensorFlow (tf_cnn_benchmarks): parameter_server").name == "tf-grpc"
    assert detect_ps_impl("MXNet 1.6 dist_sync").name == "mxnet-kvstore"
    assert detect_ps_impl("BytePS 0.2").name == "byteps"
    assert detect_ps_impl("something else").name == "ideal"
    with pytest.raises(ConfigError, match="valid: byteps, ideal, mxnet-kvstore, tf-grpc, torch-gloo"):
        get_ps_impl("grpc")
    assert dataclasses.replace(PsConfig(), impl="byteps").impl == "byteps"


# -- elastic averaging and rack aggregators -----------------------------------------------------

@pytest.mark.parametrize("tau", [1, 4, 16])
def test_easgd_iteration_and_traffic_are_the_hand_derived_values(tau):
    star = load_topology("star", {"hosts": 2, "link_bandwidth": "1GB/s", "link_latency": "0us"})
    prof = profile(4, forward_s=0.01, backward_s=0.02, optimizer_s=0.001)
    row = simulate_training(star, prof, gpus=1, batch_per_gpu=1, aggregation="ps",
                            model_name="toy", gradient_bytes=[25_000_000] * 4,
                            ps=PsConfig(servers=1, easgd_tau=tau)).row
    step = 4 * (0.01 + 0.02) + 0.001
    exchange = 2 * 100e6 / 1e9            # push the elastic difference, pull the center
    assert row["iteration_s"] == pytest.approx(step + exchange / tau, rel=1e-12)
    assert row["wire_bytes_per_iteration"] == pytest.approx(2 * 100e6 / tau)
    assert row["consistency"] == f"easgd{tau}"


def test_rack_aggregators_cut_server_traffic_by_the_rack_size():
    from simulator.workload.sweep import TrainingSpec, run_training_point

    tree = load_topology("fat_tree", {"hosts_per_leaf": 4, "leaves": 4})
    rows = {}
    for level in ("none", "rack"):
        spec = TrainingSpec(models=("resnet50",), batch_per_gpu=32, gpus=(8,),
                            aggregations=("ps",), device="v100-sxm2-16gb",
                            ps=PsConfig(servers=1, hierarchy=level))
        rows[level] = run_training_point(tree, spec, "resnet50", "ps", 8).row
    # 8 workers under 2 leaves: 8 pushes per iteration become 2
    assert rows["rack"]["ps_in_bytes_per_iteration"] == pytest.approx(
        rows["none"]["ps_in_bytes_per_iteration"] * 2 / 8)
    assert rows["rack"]["ps_out_bytes_per_iteration"] == pytest.approx(
        rows["none"]["ps_out_bytes_per_iteration"] * 2 / 8)
    assert rows["rack"]["iteration_s"] < rows["none"]["iteration_s"]


def test_easgd_and_hierarchy_from_cli_and_scenario(tmp_path):
    from simulator.cli import main
    from simulator.scenario import load_scenario

    assert main(["train", "--topology", "fat_tree", "--device", "v100-sxm2-16gb", "--model",
                 "resnet50", "--gpus", "8", "--aggregation", "ps-easgd4", "--ps-hierarchy",
                 "rack", "--format", "csv"]) == 0
    assert main(["train", "--topology", "fat_tree", "--device", "v100-sxm2-16gb", "--model",
                 "resnet50", "--gpus", "8", "--aggregation", "ps", "--consistency",
                 "easgd:0"]) == 2
    path = tmp_path / "s.yaml"
    path.write_text("name: e\ntopology: fat_tree\ntraining:\n  models: [resnet50]\n"
                    "  gpus: [8]\n  aggregations: [ps]\n  device: v100-sxm2-16gb\n"
                    "  ps: {consistency: easgd, tau: 8, hierarchy: rack}\n")
    ps = load_scenario(str(path)).training.ps
    assert (ps.easgd_tau, ps.hierarchy, ps.consistency) == (8, "rack", "easgd8")
    path.write_text(path.read_text().replace("consistency: easgd, ", ""))
    with pytest.raises(ConfigError, match="tau"):
        load_scenario(str(path))
