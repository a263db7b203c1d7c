"""Gradient compression: payload sizes, bytes on links, all-gather for sparse formats, and the
(de)compression kernels' time, all against hand-derived counts and closed forms."""

import math
from dataclasses import dataclass

import pytest

from simulator import theory
from simulator.errors import ConfigError
from simulator.records import compute_frame, links_frame, transfers_frame
from simulator.scenario import read_scenario
from simulator.topology import load_topology
from simulator.workload.compression import Compression, get_compression, parse_compression
from simulator.workload.training import PsConfig, simulate_training


@dataclass(frozen=True)
class Layer:
    name: str
    forward_s: float
    backward_s: float


@dataclass(frozen=True)
class Profile:
    layers: tuple
    optimizer_s: float


def profile(layers, forward_s=0.01, backward_s=0.02, optimizer_s=0.001):
    return Profile(tuple(Layer(f"l{i}", forward_s, backward_s) for i in range(layers)),
                   optimizer_s)


def star(hosts, bw="10GB/s", lat="1us", reduce=None):
    params = {"hosts": hosts, "link_bandwidth": bw, "link_latency": lat}
    if reduce is not None:
        params["reduce_bandwidth"] = reduce
    return load_topology("star", params)


def simulate(graph, gpus, aggregation, grad, **kw):
    return simulate_training(graph, profile(len(grad)), gpus=gpus, batch_per_gpu=32,
                             aggregation=aggregation, model_name="toy", gradient_bytes=grad,
                             **kw)


def carried(result) -> dict:
    frame = links_frame(result.engine, 1.0)
    return dict(zip(frame["link"], frame["bytes_carried"]))


TOPK = Compression("topk", fraction=0.01, error_feedback=True)


# -- formats ---------------------------------------------------------------------------------

def test_payload_sizes_by_hand():
    n = 1000                                           # elements, fp32 = 4000 bytes
    assert get_compression("none").wire_bytes(4000) == 4000
    assert get_compression("fp16").wire_bytes(4000) == 2000
    assert get_compression("bf16").wire_bytes(4000) == 2000
    assert get_compression("fp16").wire_bytes(2000, element_bytes=2) == 2000   # already half
    assert TOPK.wire_bytes(4000) == 10 * (4 + 4)        # ceil(0.01 n) values + int32 indices
    assert Compression("topk", fraction=0.003).wire_bytes(4000) == 3 * 8
    assert get_compression("onebit").wire_bytes(4000) == n // 8 + 4          # bits + one scale
    assert Compression("onebit", chunk_elements=256).wire_bytes(4000) == 125 + 4 * 4
    # pulls: dense, half with fp16/bf16
    assert TOPK.pull_bytes(4000) == 4000 and get_compression("bf16").pull_bytes(4000) == 2000


def test_kernel_traffic_by_hand():
    n = 1000
    assert get_compression("fp16").compress_traffic_bytes(4 * n) == 6 * n      # read 4, write 2
    assert get_compression("fp16").unpack_traffic_bytes(4 * n) == 6 * n
    # top-k: 3 passes over the gradient, write 10 x 8, residual read + write
    assert TOPK.compress_traffic_bytes(4 * n) == 3 * 4 * n + 80 + 8 * n
    # accumulate one top-k payload: read it, read + write the 10 touched floats
    assert TOPK.accumulate_traffic_bytes(4 * n) == 80 + 2 * 4 * 10
    # gather of 4 payloads: zero the buffer, then 4 accumulations
    assert TOPK.gather_decompress_traffic_bytes(4 * n, 4) == 4 * n + 4 * 160
    # dense accumulation is the engine's 3 bytes per message byte
    assert get_compression("none").accumulate_traffic_bytes(4 * n) == 3 * 4 * n


def test_parse_and_validation():
    assert parse_compression("fp16") == get_compression("fp16")
    assert parse_compression("topk:0.05") == Compression("topk", 0.05, error_feedback=True)
    assert parse_compression("onebit:2048").chunk_elements == 2048
    assert parse_compression("topk:0.05").label == "topk:0.05"
    for bad in ("zip", "topk:x", "topk:0", "topk:1.5", "fp16:3", "onebit:1.5"):
        with pytest.raises(ConfigError):
            parse_compression(bad)
    with pytest.raises(ConfigError, match="error_feedback"):
        Compression("fp16", error_feedback=True)


def test_scenario_key():
    base = ("name: t\ntopology: {name: star, params: {hosts: 4}}\ntraining:\n"
            "  models: [resnet50]\n  gpus: [2]\n  aggregations: [ring]\n")
    spec = read_scenario(base + "  compression: bf16\n").training
    assert spec.compression == get_compression("bf16")
    spec = read_scenario(base + "  compression: {kind: topk, fraction: 0.05, "
                                "error_feedback: false}\n").training
    assert spec.compression == Compression("topk", 0.05, error_feedback=False)
    with pytest.raises(ConfigError, match=r"compression\.fraction"):
        read_scenario(base + "  compression: {kind: fp16, fraction: 0.5}\n")
    with pytest.raises(ConfigError, match="unknown key 'frac'"):
        read_scenario(base + "  compression: {kind: topk, frac: 0.5}\n")


# -- bytes on the network --------------------------------------------------------------------

def test_none_is_identical_to_no_argument():
    grad = [3 << 20] * 8
    for agg, kw in (("ring", {}), ("ps", {"ps": PsConfig(servers=2)})):
        g = star(6, reduce="20GB/s")
        a = simulate(g, 4, agg, grad, **kw).row
        b = simulate(g, 4, agg, grad, compression=Compression(), **kw).row
        assert a == b, agg


def test_fp16_halves_every_ring_link():
    grad = [4 << 20] * 8                      # buckets of 28 MiB and 4 MiB
    g = star(4)
    dense = simulate(g, 4, "ring", grad)
    half = simulate(g, 4, "ring", grad, compression=get_compression("fp16"))
    full, halved = carried(dense), carried(half)
    assert full.keys() == halved.keys()
    for link, value in full.items():
        assert value > 0 and halved[link] * 2 == value, link
    # a host link carries 2(N-1)/N of the gradient in each direction
    assert full["host0->switch"] == 2 * 3 / 4 * sum(grad)
    assert half.row["wire_bytes_per_iteration"] * 2 == dense.row["wire_bytes_per_iteration"]
    assert half.row["compression"] == "fp16" and dense.row["compression"] == "none"


def test_fp16_halves_the_parameter_server_link():
    grad = [4 << 20] * 8
    g = star(5)
    ps = PsConfig(servers=1)
    dense = carried(simulate(g, 4, "ps", grad, ps=ps))
    half = carried(simulate(g, 4, "ps", grad, ps=ps, compression=get_compression("fp16")))
    for link in ("switch->host4", "host4->switch"):         # pushes in, pulls out
        assert half[link] * 2 == dense[link] > 0


def test_topk_cuts_server_inbound_to_values_plus_indices():
    """N workers push ceil(0.01 E) fp32 values + int32 indices per bucket: N (0.01 P 8)."""
    layer_bytes, layers, n = 400_000, 10, 4             # 100k elements per layer
    grad = [layer_bytes] * layers                       # buckets: 3, 3, 3, 1 layers
    g = star(5, reduce="10GB/s")
    result = simulate(g, n, "ps", grad, ps=PsConfig(servers=1, iterations=4),
                      compression=TOPK, bucket_bytes=1_000_000)
    links = carried(result)
    elements = layers * layer_bytes // 4                 # P = 1e6
    per_iteration = n * (0.01 * elements * (4 + 4))      # 320,000 bytes
    assert links["switch->host4"] / result.iterations == per_iteration
    # pulls stay dense
    assert links["host4->switch"] / result.iterations == n * sum(grad)
    # the server decompresses every payload into its sum: 16 bytes per kept value
    work = compute_frame(result.engine)
    acc = work[(work["device"] == "host4") & work["label"].str.startswith("accumulate")]
    assert len(acc) == n * result.iterations * 4
    kept = 0.01 * elements
    assert math.isclose((acc["end_s"] - acc["start_s"]).sum(),
                        n * result.iterations * 16 * kept / (3 * 10e9), rel_tol=1e-9)
    assert result.row["wire_bytes_per_iteration"] == per_iteration + n * sum(grad)


def test_ring_with_topk_is_an_allgather_of_payloads():
    n, grad = 4, [400_000] * 10
    g = star(n)
    result = simulate(g, n, "ring", grad, compression=TOPK, bucket_bytes=1_000_000)
    payloads = [3000 * 8, 3000 * 8, 3000 * 8, 1000 * 8]  # ceil(0.01 E) x (4 + 4) per bucket
    runs = result.engine.runs
    assert [r.schedule.collective for r in runs] == ["allgather"] * 4
    frame = transfers_frame(runs)
    for run, payload in zip(frame.groupby("run", sort=False), payloads):
        received = run[1].groupby("dst_rank")["size_bytes"].sum()
        assert (received == (n - 1) * payload).all()
    assert carried(result)["switch->host0"] == (n - 1) * sum(payloads)
    # algorithms without an all-gather gather with the ring; halving-doubling keeps its own
    tree = simulate(g, n, "tree", grad, compression=TOPK, bucket_bytes=1_000_000)
    assert {r.schedule.algorithm for r in tree.engine.runs} == {"ring"}
    hd = simulate(g, n, "halving_doubling", grad, compression=TOPK, bucket_bytes=1_000_000)
    assert {r.schedule.algorithm for r in hd.engine.runs} == {"halving_doubling"}
    # 1-bit: one sign bit per element and one scale per bucket
    onebit = simulate(g, n, "ring", grad, compression=get_compression("onebit"),
                      bucket_bytes=1_000_000)
    bits = [300_000 // 8 + 4] * 3 + [100_000 // 8 + 4]
    assert carried(onebit)["switch->host0"] == (n - 1) * sum(bits)


# -- compute ---------------------------------------------------------------------------------

def test_compression_kernels_delay_the_aggregation_exactly():
    """One bucket after backward: compute + cast (6 E bytes) + ring of the half message with
    reductions + cast back, the casts at 3 x the reduce rate (the star's memory bandwidth)."""
    n, grad = 4, [3 << 20] * 8
    m, elements = sum(grad), sum(grad) // 4
    reduce_rate, bw = 1e9, 100e9
    g = star(n, bw=bw, reduce=reduce_rate)
    compute = 8 * 0.03 + 0.001
    dense = simulate(g, n, "ring", grad, overlap=False).row
    half = simulate(g, n, "ring", grad, overlap=False,
                    compression=get_compression("fp16")).row
    cast = 6 * elements / (3 * reduce_rate)
    assert math.isclose(dense["iteration_s"], compute + theory.ring_allreduce(
        n, m, 2e-6, 1 / bw, 1 / reduce_rate), rel_tol=1e-9)
    assert math.isclose(half["iteration_s"], compute + 2 * cast + theory.ring_allreduce(
        n, m // 2, 2e-6, 1 / bw, 1 / reduce_rate), rel_tol=1e-9)
    # slow GPU, fast network: the kernels cost more than the halved traffic saves
    assert half["iteration_s"] > dense["iteration_s"]
    # fast GPU, slow network: halving the traffic wins
    g = star(n, bw="1GB/s", reduce="1TB/s")
    assert simulate(g, n, "ring", grad, overlap=False,
                    compression=get_compression("fp16")).row["iteration_s"] < \
        simulate(g, n, "ring", grad, overlap=False).row["iteration_s"]


def test_topk_decompression_grows_with_workers():
    """The all-gather's decompress-and-sum touches N payloads: its kernel time is
    (E e + N 16 K) / memory bandwidth."""
    grad = [400_000] * 10
    g = star(8, bw="1TB/s", reduce="1GB/s")
    times = {}
    for n in (2, 8):
        result = simulate(g, n, "ring", grad, overlap=False, compression=TOPK)
        work = compute_frame(result.engine)
        dec = work[(work["device"] == "host0") & work["label"].str.startswith("decompress")]
        times[n] = float((dec["end_s"] - dec["start_s"]).sum())
        expected = (4e6 * 1 + n * 16 * 10_000) / 3e9     # one bucket of 1e6 elements
        assert math.isclose(times[n], expected, rel_tol=1e-12)
    assert times[8] > times[2]
