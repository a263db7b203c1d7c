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
