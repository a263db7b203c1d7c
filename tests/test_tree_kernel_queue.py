"""The compiled flow network's completion queue (buckets of one finish time) and the tree
kernel's exactness: bit-identical to the event engine, not merely close."""

import numpy as np
import pytest

from simulator.collective import default_options, placement, run_collective
from simulator.engine.tree_pipeline import numba_available, tree_pipeline_time
from simulator.topology import load_topology

pytestmark = pytest.mark.skipif(not numba_available(), reason="numba (extra 'fast') missing")


def test_queue_hands_out_flows_by_finish_then_flow_id():
    """Random finish times with many ties (buckets above and below the insertion-sort size),
    flows moved between buckets and re-queued: the take order is sorted (finish, fid)."""
    from simulator.engine._flow_kernel import (flow_heap, flow_heap_first, flow_heap_set,
                                               flow_heap_take)

    rng = np.random.default_rng(3)
    n = 3000
    flows = flow_heap(n)
    f_finish = np.full(n, np.inf)
    f_fid = rng.permutation(n).astype(np.int64)
    times = np.array([0.0, -0.0, 1.5, 2.0, 2.5, 1e-9, 7.0])
    queued = set()
    for _round in range(4):
        for c in rng.permutation(n)[: n // 2]:
            f_finish[c] = times[rng.integers(len(times))] if rng.random() < 0.9 else rng.random()
            flow_heap_set(c, flows, f_finish, f_fid)
            queued.add(int(c))
    out = np.empty(n, dtype=np.int64)
    n_out = 0
    while flow_heap_first(flows) < np.inf:
        n_out = flow_heap_take(flows, f_fid, out, n_out)
    assert n_out == len(queued)
    got = out[:n_out]
    want = sorted(queued, key=lambda c: (f_finish[c], f_fid[c]))
    assert got.tolist() == want


@pytest.mark.parametrize("p,opts", [(64, {}), (100, {"segments": 5})])
def test_double_binary_tree_bit_identical_to_event_engine(p, opts):
    graph = load_topology("star", {"hosts": str(p), "link_bandwidth": "12.5GB/s",
                                   "link_latency": "1us"})
    event = run_collective(graph, "allreduce", "double_binary_tree", 16 << 20, gpus=p, **opts)
    fast = tree_pipeline_time(graph, placement(graph, p), "allreduce", "double_binary_tree",
                              16 << 20, p, default_options(graph, "double_binary_tree", p, opts))
    assert fast.applicable, fast.reason
    assert fast.time_s == event.row["time_s"]
    carried = {key: b for key, _cap, b in fast.links}
    for key, _cap, b, _busy in event.engine.network.link_table():
        assert carried.get(key, 0.0) == b, key
