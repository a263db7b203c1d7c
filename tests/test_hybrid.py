"""Hybrid PS + all-reduce (DLRM-style): distinct rows under Zipf, bytes per server, hot shards,
and both traffics on the fabric at once."""

import math

import numpy as np
import pytest

from simulator.errors import ConfigError
from simulator.records import link_timeline, links_frame, transfers_frame
from simulator.report.plots import link_heatmap_data
from simulator.topology import load_topology
from simulator.workload.hybrid import (HybridSpec, dlrm_dense, expected_distinct,
                                       rows_per_server, simulate_hybrid)


def distinct_by_hand(rows, draws, alpha, ranks=None):
    """sum over ranks of 1 - (1 - p_i)^L, p_i = i^-alpha / H, term by term in Python."""
    h = math.fsum(i ** -alpha for i in range(1, rows + 1))
    ranks = ranks or range(1, rows + 1)
    return math.fsum(1 - (1 - i ** -alpha / h) ** draws for i in ranks)


def test_expected_distinct_rows():
    assert math.isclose(expected_distinct(1000, 500, 1.1), distinct_by_hand(1000, 500, 1.1),
                        rel_tol=1e-12)
    # uniform: R (1 - (1 - 1/R)^L)
    assert math.isclose(expected_distinct(5000, 3000, 0.0), 5000 * (1 - (1 - 1 / 5000) ** 3000),
                        rel_tol=1e-12)
    # more skew, fewer distinct rows; never more than the draws or the rows
    values = [expected_distinct(10_000, 4096, a) for a in (0.0, 0.8, 1.2, 2.0)]
    assert values == sorted(values, reverse=True) and values[0] < 4096


def test_large_tables_match_the_exact_sum():
    """Beyond 2^20 ranks the sum is Euler-Maclaurin; against the exact sum at 3 M rows."""
    rows, draws = 3_000_000, 2048
    i = np.arange(1, rows + 1, dtype=np.float64)
    for alpha in (0.0, 1.05):
        p = i ** -alpha / np.sum(i ** -alpha)
        exact = float(np.sum(-np.expm1(draws * np.log1p(-p))))
        assert math.isclose(expected_distinct(rows, draws, alpha), exact, rel_tol=1e-10)


def test_range_shards_by_hand():
    rows, draws, alpha = 1000, 400, 1.2
    got = rows_per_server(rows, draws, alpha, 4, "range")
    for s in range(4):
        assert math.isclose(got[s], distinct_by_hand(rows, draws, alpha,
                                                     range(250 * s + 1, 250 * s + 251)),
                            rel_tol=1e-12)
    assert got[0] > 3 * got[1]                       # the hot shard
    hashed = rows_per_server(rows, draws, alpha, 4, "hash")
    assert np.allclose(hashed, got.sum() / 4, rtol=1e-12)


def small(**kw):
    base = dict(tables=4, rows=5000, dim=16, lookups_per_sample=2, alpha=1.1, servers=2,
                batch_per_gpu=256, bottom_mlp=(13, 64, 16), top_mlp=(64, 1), iterations=2)
    base.update(kw)
    return HybridSpec(**base)


def cluster():
    return load_topology("gpu_cluster", {"nodes": 2, "gpus_per_node": 2, "ps_hosts": 2})


def test_bytes_per_iteration_follow_the_distinct_row_formula():
    spec = small(sharding="hash")
    gpus = 4
    result = simulate_hybrid(cluster(), spec, gpus)
    draws = 256 * 2
    per_server_rows = 4 * round(distinct_by_hand(5000, draws, 1.1) / 2)   # 4 equal tables
    per_server = per_server_rows * 16 * 4
    assert result.server_bytes.tolist() == [per_server, per_server]
    links = dict(zip(*links_frame(result.engine, 1.0)[["link", "bytes_carried"]].T.values))
    for s in ("ps0", "ps1"):
        assert links[f"{s}->switch"] == spec.iterations * gpus * per_server       # pulls
        assert links[f"switch->{s}"] == spec.iterations * gpus * per_server       # pushes
    assert result.row["embedding_bytes_per_iteration"] == 2 * gpus * 2 * per_server
    assert result.row["distinct_rows_per_worker"] == 2 * per_server_rows


def test_range_sharding_under_skew_makes_a_hot_server():
    hashed = simulate_hybrid(cluster(), small(sharding="hash", alpha=1.2), 4)
    ranged = simulate_hybrid(cluster(), small(sharding="range", alpha=1.2), 4)

    def server_links(result):
        frame = links_frame(result.engine, 1.0).set_index("link")["bytes_carried"]
        return frame["ps0->switch"], frame["ps1->switch"]

    hot, cold = server_links(ranged)
    assert hot > 3 * cold
    a, b = server_links(hashed)
    assert a == b
    assert ranged.row["hot_server_share"] > 0.75 and hashed.row["hot_server_share"] == 0.5
    assert ranged.row["iteration_s"] > hashed.row["iteration_s"]


def test_ps_and_allreduce_traffic_overlap():
    """The heatmap data shows a PS host link and a NIC link busy in the same time bins and the
    all-reduce on NVSwitch; the transfers show a ring flow and an embedding push on the same NIC
    link at the same time. A 1024-wide top MLP in 1 MiB buckets is still all-reducing when the
    embedding gradients are pushed."""
    result = simulate_hybrid(cluster(), small(top_mlp=(1024, 1024, 1), bucket_bytes=1 << 20),
                             4, record_rates=True)
    timeline = link_timeline(result.engine)
    links, _edges, util, _mean = link_heatmap_data(timeline, top=1000, bins=2000)
    ps = np.array([name.startswith(("switch->ps", "ps")) for name in links])
    nvswitch = np.array(["nvswitch" in name for name in links])
    nic = np.array(["nic" in name for name in links])
    assert ps.any() and nvswitch.any() and nic.any()
    assert ((util[ps] > 0).any(axis=0) & (util[nic] > 0).any(axis=0)).any()
    frame = transfers_frame(result.engine.runs)
    on_nic = frame[frame["path"].str.contains("n0.nic0->switch", regex=False)]
    ring = on_nic[on_nic["run"].str.startswith("allreduce")]
    push = on_nic[on_nic["run"].str.startswith("push")]
    assert len(ring) and len(push)
    overlap = [(r.start_s < p.drained_s) and (p.start_s < r.drained_s)
               for r in ring.itertuples() for p in push.itertuples()]
    assert any(overlap)


def test_model_and_validation():
    model = dlrm_dense(26, 128, 1, (13, 512, 256, 128), (1024, 1024, 512, 256, 1))
    top0 = next(layer for layer in model.layers if layer.name == "top0")
    assert top0.params == 479 * 1024 + 1024          # 128 + 27 x 26 / 2 inputs (MLPerf)
    assert sum(layer.params for layer in model.layers if layer.kind == "embedding") == 0
    with pytest.raises(ConfigError):
        HybridSpec(bottom_mlp=(13, 64))                # must end at dim
    with pytest.raises(ConfigError):
        HybridSpec(sharding="modulo")
    with pytest.raises(ConfigError):
        HybridSpec(tables=2, rows=(10, 20, 30))
