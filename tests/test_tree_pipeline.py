"""The compiled tree-pipeline path equals the event engine (time and per-link bytes)."""

import math

import pytest

from simulator.collective import default_options, placement, run_collective
from simulator.engine.tree_pipeline import numba_available, tree_pipeline_time
from simulator.topology import load_topology

pytestmark = pytest.mark.skipif(not numba_available(), reason="numba (extra 'fast') missing")


def star(p):
    return load_topology("star", {"hosts": str(p), "link_bandwidth": "12.5GB/s",
                                  "link_latency": "1us"})


def both(graph, collective, algorithm, size, n, **opts):
    event = run_collective(graph, collective, algorithm, size, gpus=n, **opts)
    fast = tree_pipeline_time(graph, placement(graph, n), collective, algorithm, size, n,
                              default_options(graph, algorithm, n, opts))
    assert fast.applicable, fast.reason
    return event, fast


@pytest.mark.parametrize("p", [2, 3, 5, 8, 13, 31, 64])
@pytest.mark.parametrize("algorithm,collective,opts", [
    ("double_binary_tree", "allreduce", {}),
    ("double_binary_tree", "allreduce", {"segments": 3}),
    ("tree", "allreduce", {"segments": 7}),
    ("tree", "reduce", {"segments": 4}),
    ("tree", "broadcast", {"segments": 5}),
    ("tree", "allreduce", {}),
])
def test_equals_event_engine_on_star(p, algorithm, collective, opts):
    event, fast = both(star(p), collective, algorithm, 16 << 20, p, **opts)
    assert math.isclose(fast.time_s, event.row["time_s"], rel_tol=1e-9)
    carried = {key: b for key, _cap, b in fast.links}
    for key, _cap, b, _busy in event.engine.network.link_table():
        assert math.isclose(carried.get(key, 0.0), b, rel_tol=1e-9, abs_tol=1e-6), key


@pytest.mark.parametrize("size", [1 << 20, 48 << 20])
def test_equals_event_engine_with_reductions_and_nics(size):
    """Four DGX A100s: NVSwitch, PCIe, NICs, reductions charged on the GPUs."""
    graph = load_topology("dgx-a100", {"nodes": "4"})
    event, fast = both(graph, "allreduce", "double_binary_tree", size, 32)
    assert math.isclose(fast.time_s, event.row["time_s"], rel_tol=1e-9)
    assert fast.reduce_s and all(s > 0 for _d, s in fast.reduce_s)


def test_auto_engine_uses_it_and_time_changes_with_inputs():
    graph = star(16)
    rows = [run_collective(graph, "allreduce", "double_binary_tree", size, engine="auto").row
            for size in (16 << 20, 64 << 20)]
    assert {r["engine"] for r in rows} == {"fast"}
    assert rows[1]["time_s"] > 3 * rows[0]["time_s"]
    slow = load_topology("star", {"hosts": "16", "link_bandwidth": "1.25GB/s",
                                  "link_latency": "1us"})
    row = run_collective(slow, "allreduce", "double_binary_tree", 16 << 20, engine="fast").row
    assert row["time_s"] > 9 * rows[0]["time_s"]


def test_kernel_caches_older_than_the_shared_helpers_are_dropped(tmp_path):
    """numba notices edits of a kernel's own file only: a cached kernel older than
    _flow_kernel.py (whose helpers it compiled in) must be deleted, a newer one kept."""
    import os

    from simulator.engine.common import stale_kernel_caches

    cache = tmp_path / "__pycache__"
    cache.mkdir()
    old = [cache / "_tree_kernel.simulate_tree_pipeline-115.py311.nbi",
           cache / "_schedule_kernel.simulate_schedule-75.py311.1.nbc"]
    new = cache / "_tree_kernel._ready-23.py311.nbi"
    other = cache / "_flow_kernel.solve-500.py311.nbi"      # its own file: numba checks it
    for f in [*old, new, other]:
        f.write_bytes(b"x")
    shared = tmp_path / "_flow_kernel.py"
    shared.write_text("# helpers\n")
    t = shared.stat().st_mtime
    for f in [*old, other]:
        os.utime(f, (t - 100, t - 100))
    os.utime(new, (t + 100, t + 100))
    assert stale_kernel_caches(tmp_path) == old       # (kernel modules in order)
    stale_kernel_caches(tmp_path, delete=True)
    assert not any(f.exists() for f in old)
    assert new.exists() and other.exists()


def _spy_mirror(monkeypatch):
    """Record whether each call of the mirror quotient applied."""
    from simulator.engine import tree_pipeline as tp

    applied = []
    original = tp.mirror_quotient

    def spy(*args, **kwargs):
        out = original(*args, **kwargs)
        applied.append(out is not None)
        return out

    monkeypatch.setattr(tp, "mirror_quotient", spy)
    return applied


@pytest.mark.parametrize("collective", ["allreduce", "reduce", "broadcast"])
def test_mirror_half_gives_the_whole_double_tree_bit_for_bit(monkeypatch, collective):
    """On a symmetric fabric with an even rank count, tree 0 on the quotient network (tree 1
    left out) gives the same time and per-link bytes as both trees, to the bit."""
    applied = _spy_mirror(monkeypatch)
    p = 96
    graph, nodes = star(p), placement(star(p), p)
    size = 24 << 20
    half = tree_pipeline_time(graph, nodes, collective, "double_binary_tree", size, p, {})
    whole = tree_pipeline_time(graph, nodes, collective, "double_binary_tree", size, p,
                               {"mirror": False})
    assert applied == [True]
    assert half.time_s == whole.time_s
    assert sorted(half.links) == sorted(whole.links)
    assert half.bytes_sent == whole.bytes_sent


def test_mirror_declines_an_asymmetric_fabric_and_stays_exact(monkeypatch):
    """One slower host link breaks the fabric's mirror symmetry: the quotient is refused and
    the result still equals the event engine (and differs from the symmetric star's)."""
    applied = _spy_mirror(monkeypatch)
    p = 16
    graph = star(p)
    graph.edges["host3", "switch"]["bandwidth_bytes_per_s"] /= 4
    event, fast = both(graph, "allreduce", "double_binary_tree", 16 << 20, p)
    assert applied == [False]
    assert math.isclose(fast.time_s, event.row["time_s"], rel_tol=1e-9)
    symmetric = tree_pipeline_time(star(p), placement(star(p), p), "allreduce",
                                   "double_binary_tree", 16 << 20, p, {})
    assert applied == [False, True]
    assert fast.time_s > 1.5 * symmetric.time_s


@pytest.mark.parametrize("p,size,graph", [
    (15, 16 << 20, None),                 # odd: tree 1 is a shift, not a mirror
    (16, (16 << 20) + 1, None),           # the trees' halves differ by a byte
    (32, 16 << 20, "dgx-a100"),           # reductions charged on the GPUs (FIFO queues)
])
def test_mirror_applies_only_where_the_argument_holds(monkeypatch, p, size, graph):
    applied = _spy_mirror(monkeypatch)
    g = load_topology(graph, {"nodes": "4"}) if graph else star(p)
    fast = tree_pipeline_time(g, placement(g, p), "allreduce", "double_binary_tree", size, p,
                              default_options(g, "double_binary_tree", p, {}))
    assert fast.applicable and applied == [False]


@pytest.mark.parametrize("size,segments", [(1 << 20, 1), (24 << 20, 4)])
def test_local_flow_cap_equals_event_engine(size, segments):
    """Two DGX A100s with every transfer inside a machine capped at 9 GB/s (one NCCL channel):
    the pipeline and the event engine agree, the cap slows the call, and the cross-machine
    transfers keep their links' rate."""
    graph = load_topology("dgx-a100", {"nodes": "2"})
    opts = {"channels": 4, "local_ranks": 8, "segments": segments}
    free, fast_free = both(graph, "allreduce", "double_binary_tree", size, 16, **opts)
    capped, fast = both(graph, "allreduce", "double_binary_tree", size, 16, **opts,
                        local_flow_cap_bytes_per_s=9e9)
    assert capped.row["engine"] == "event"
    assert math.isclose(fast.time_s, capped.row["time_s"], rel_tol=1e-9)
    assert math.isclose(fast_free.time_s, free.row["time_s"], rel_tol=1e-9)
    assert capped.row["time_s"] > 1.5 * free.row["time_s"]
    carried = {key: b for key, _cap, b in fast.links}
    table = capped.engine.network.link_table()
    assert all(key[0] != "cap" for key, *_ in table)
    for key, _cap, b, _busy in table:
        assert math.isclose(carried.get(key, 0.0), b, rel_tol=1e-9, abs_tol=1e-6), key


def test_local_flow_cap_is_a_closed_form():
    """Two ranks of one machine, one segment: each of the channel's two trees sends half the
    message up and then down, the trees on opposite links, so the call takes
    2 x (bytes / 2 / rate + path latency) with rate = min(cap, link rate): the cap where it is
    below the link, the link where it is not; both engines."""
    graph = star(2)
    size = 8 << 20
    for cap, rate in ((2e9, 2e9), (50e9, 12.5e9)):
        for engine in ("event", "auto"):
            row = run_collective(graph, "allreduce", "double_binary_tree", size, gpus=2,
                                 channels=1, local_ranks=2, segments=1, engine=engine,
                                 local_flow_cap_bytes_per_s=cap).row
            assert math.isclose(row["time_s"], 2 * (size / 2 / rate + 2e-6), rel_tol=1e-12)


@pytest.mark.parametrize("bad", [0, -1.0, "9GB/s", True])
def test_local_flow_cap_rejects_bad_values(bad):
    from simulator.errors import ConfigError
    from simulator.schedules import make_schedule

    with pytest.raises(ConfigError, match="local_flow_cap_bytes_per_s"):
        make_schedule("double_binary_tree", "allreduce", 8, 1 << 20,
                      local_flow_cap_bytes_per_s=bad)


@pytest.mark.parametrize("p,local", [(8, 4), (16, 8), (12, 4), (10, 4)])
def test_local_flow_cap_on_stars_of_several_shapes(p, local):
    """Capped connections on stars of whole and partial machines (10 ranks, 4 a machine: the
    last machine has 2): time and bytes per link are the event engine's, with the mirror
    quotient allowed or not, and the cap slows the call."""
    graph = star(p)
    opts = {"channels": 2, "local_ranks": local, "segments": 3,
            "local_flow_cap_bytes_per_s": 4e9}
    event, fast = both(graph, "allreduce", "double_binary_tree", 24 << 20, p, **opts)
    assert math.isclose(fast.time_s, event.row["time_s"], rel_tol=1e-9)
    whole = tree_pipeline_time(graph, placement(graph, p), "allreduce", "double_binary_tree",
                               24 << 20, p, default_options(graph, "double_binary_tree", p,
                                                            {**opts, "mirror": False}))
    assert whole.time_s == fast.time_s
    carried = {key: b for key, _cap, b in fast.links}
    for key, _cap, b, _busy in event.engine.network.link_table():
        assert math.isclose(carried.get(key, 0.0), b, rel_tol=1e-9, abs_tol=1e-6), key
    free = run_collective(graph, "allreduce", "double_binary_tree", 24 << 20, gpus=p,
                          **{k: v for k, v in opts.items() if k != "local_flow_cap_bytes_per_s"})
    assert event.row["time_s"] > 1.15 * free.row["time_s"]
