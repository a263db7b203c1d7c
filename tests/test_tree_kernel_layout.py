"""The tree kernel's own bookkeeping keeps the event engine's results: its completion queue (a
bucket's flows listed in chunks, stale entries skipped), transfers of no bytes, and the copies
of completed-segment counts that decide when a connection may send."""

import numpy as np
import pytest

from simulator.collective import default_options, placement, run_collective
from simulator.engine.tree_pipeline import numba_available, tree_pipeline_time
from simulator.topology import load_topology

pytestmark = pytest.mark.skipif(not numba_available(), reason="numba (extra 'fast') missing")


def star(p):
    return load_topology("star", {"hosts": str(p), "link_bandwidth": "12.5GB/s",
                                  "link_latency": "1us"})


def test_completion_queue_hands_out_flows_by_finish_then_flow_id():
    """Flows inserted, moved between buckets (leaving stale entries behind) and re-inserted,
    with many ties and -0.0 next to 0.0, the chunk pool grown midway: the take order is sorted
    by (finish, flow id), every queued flow once."""
    from simulator.engine import _tree_kernel as kernel
    from simulator.engine.tree_pipeline import _scratch

    rng = np.random.default_rng(5)
    n = 3000
    bf, bi, qs = _scratch(kernel, n, 1, 2)[:3]
    cr = np.zeros((n, 16))
    ci, cj = cr.view(np.int64), cr.view(np.int32)
    cj[:, kernel._B_OF] = -1
    ci[:, kernel._FID] = rng.permutation(n)
    times = np.array([0.0, -0.0, 1.5, 2.0, 2.5, 1e-9, 7.0])
    queued = set()
    for round_ in range(4):
        for c in rng.permutation(n)[: n // 2]:
            cr[c, kernel._FINISH] = (times[rng.integers(len(times))] if rng.random() < 0.9
                                     else rng.random())
            kernel._queue_set(c, cr, ci, cj, bf, bi, qs)
            queued.add(int(c))
        if round_ == 1:
            qs = kernel._more_chunks(qs)
    out = np.empty(n, dtype=np.int64)
    n_out = 0
    while kernel._queue_first(qs) < np.inf:
        n_out = kernel._queue_take(ci, cj, bf, bi, qs, out, n_out)
    want = sorted(queued, key=lambda c: (cr[c, kernel._FINISH], ci[c, kernel._FID]))
    assert out[:n_out].tolist() == want


@pytest.mark.parametrize("algorithm,collective,opts,size", [
    ("double_binary_tree", "allreduce", {"segments": 9}, 12),  # 6 bytes a tree, 9 segments
    ("tree", "allreduce", {"segments": 5}, 3),
    ("tree", "reduce", {"segments": 4}, 2),
    ("tree", "broadcast", {"segments": 3}, 1),
])
def test_segments_of_no_bytes_equal_the_event_engine(algorithm, collective, opts, size):
    """Segments of no bytes drain at once (ZERO events) and still deliver one latency later:
    the same time and per-link bytes as the event engine, to the bit."""
    p = 7
    graph = star(p)
    event = run_collective(graph, collective, algorithm, size, gpus=p, **opts)
    fast = tree_pipeline_time(graph, placement(graph, p), collective, algorithm, size, p,
                              default_options(graph, algorithm, p, opts))
    assert fast.applicable, fast.reason
    assert fast.time_s == event.row["time_s"] > 0
    carried = {key: b for key, _cap, b in fast.links}
    for key, _cap, b, _busy in event.engine.network.link_table():
        assert carried.get(key, 0.0) == b, key


def test_many_segments_wait_for_every_child():
    """A connection sends segment s only once every connection it waits for completed s: with
    more segments the pipeline fills and the time falls, equal to the event engine (double
    binary tree, 31 ranks: odd, so tree 1 is the shifted tree and rank 0 has one child in
    tree 0)."""
    p = 31
    graph = star(p)
    times = []
    for segments in (1, 16):
        event = run_collective(graph, "allreduce", "double_binary_tree", 8 << 20, gpus=p,
                               segments=segments)
        fast = tree_pipeline_time(graph, placement(graph, p), "allreduce",
                                  "double_binary_tree", 8 << 20, p,
                                  default_options(graph, "double_binary_tree", p,
                                                  {"segments": segments}))
        assert fast.time_s == event.row["time_s"]
        times.append(fast.time_s)
    assert times[1] < 0.5 * times[0]
