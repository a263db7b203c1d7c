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
    with pytest.raises(ConfigError, match="valid: byteps, ideal, mxnet-kvstore, tf-grpc"):
        get_ps_impl("grpc")
    assert dataclasses.replace(PsConfig(), impl="byteps").impl == "byteps"
