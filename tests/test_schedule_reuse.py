"""Work shared between the collectives of a training iteration, and that it changes nothing.

* The hierarchical schedule is built column-wise (:func:`simulator.schedules.hierarchical.embed`
  appends whole phases with :meth:`ScheduleBuilder.extend`): the schedules must be the ones a
  row-by-row ``send`` of every transfer builds, array for array.
* The compiled simulation derives a schedule's dependencies, epochs and connections once per
  structure (:func:`simulator.engine.compiled._structure`) and reuses them for the next bucket
  size: the answers must be those of a fresh derivation and of the event engine, and a schedule
  whose columns differ (even one changed in place after a call) must never get another's.
"""

import dataclasses
import importlib
import math

import numpy as np
import pytest

from simulator.collective import placement
from simulator.engine import compiled
from simulator.engine.compiled import compiled_time
from simulator.engine.runner import simulate
from simulator.engine.tree_pipeline import numba_available
from simulator.schedules import ScheduleBuilder, make_schedule
from simulator.schedules.base import _TRANSFER_FIELDS
from simulator.topology import load_topology

# the module itself (the package re-exports the function under the module's name)
hier_module = importlib.import_module("simulator.schedules.hierarchical")
needs_numba = pytest.mark.skipif(not numba_available(), reason="numba (extra 'fast') missing")
COLUMNS = _TRANSFER_FIELDS + ("chunk_bytes",)


def embed_row_by_row(builder, instances, step_offset=0, channel_offset=0, phase_prefix=""):
    """The definition embed must equal: copies merged epoch by epoch, one send per transfer,
    the first transfer of every later epoch the shared barrier."""
    mapped = []
    for sub, rank_map, chunk_map in instances:
        rank_map = np.asarray(rank_map, dtype=np.int64)
        if np.ndim(chunk_map) == 0:
            chunk_map = int(chunk_map) + np.arange(len(sub.chunk_bytes) + 1)
        chunk_map = np.asarray(chunk_map, dtype=np.int64)
        mapped.append((sub, rank_map, chunk_map, np.cumsum(sub.sync)))
    n_epochs = max((int(ep[-1]) + 1 for *_x, ep in mapped if len(ep)), default=0)
    for e in range(n_epochs):
        barrier = e > 0
        for sub, rank_map, chunk_map, ep in mapped:
            for i in np.flatnonzero(ep == e).tolist():
                first = int(chunk_map[sub.src_chunk[i]])
                builder.send(int(rank_map[sub.src[i]]), int(rank_map[sub.dst[i]]), first,
                             nchunks=int(chunk_map[sub.src_chunk[i] + sub.nchunks[i]]) - first,
                             dst_chunk=int(chunk_map[sub.dst_chunk[i]]),
                             reduce=bool(sub.reduce[i]), step=int(sub.step[i]) + step_offset,
                             phase=phase_prefix + sub.phase_of(i),
                             channel=int(sub.channel[i]) + channel_offset, sync=barrier)
                barrier = False


def assert_same_schedule(a, b):
    assert a.phase_names == b.phase_names
    assert (a.ranks, a.helper_ranks, a.message_chunks, a.notes) == \
        (b.ranks, b.helper_ranks, b.message_chunks, b.notes)
    for name in COLUMNS:
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and np.array_equal(x, y), name


@pytest.mark.parametrize("inner", ["ring", "halving_doubling", "direct"])
@pytest.mark.parametrize("outer", ["ring", "halving_doubling", "tree", "binomial_tree",
                                   "double_binary_tree", "direct"])
def test_hierarchical_built_by_columns_equals_row_by_row(monkeypatch, inner, outer):
    cases = [(12, 3, 100_003, 1), (24, 8, 7, 2), (24, 8, 30_257_056, 1), (16, 4, 0, 1)]
    for ranks, local, size, slices in cases:   # 3 nodes: halving-doubling folds (barriers)
        kw = {"slices": slices, "local_ranks": local, "inner": inner, "outer": outer}
        fast = make_schedule("hierarchical", "allreduce", ranks, size, **kw)
        with monkeypatch.context() as m:
            m.setattr(hier_module, "embed", embed_row_by_row)
            reference = make_schedule("hierarchical", "allreduce", ranks, size, **kw)
        assert_same_schedule(fast, reference)
        if outer == "halving_doubling" and ranks == 24:
            assert fast.sync.any()


def test_builder_keeps_list_order_across_sends_and_column_blocks():
    def send_all(b, rows):
        for src, dst, chunk, phase in rows:
            b.send(src, dst, chunk, reduce=src > dst, step=chunk, phase=phase)

    rows = [(0, 1, 0, "a"), (1, 2, 1, "b"), (2, 0, 2, "a"), (1, 0, 0, "c"), (0, 2, 1, "b")]
    reference = ScheduleBuilder("allreduce", "x", 3, [5, 6, 7])
    send_all(reference, rows)
    mixed = ScheduleBuilder("allreduce", "x", 3, [5, 6, 7])
    send_all(mixed, rows[:2])
    block = rows[2:4]
    mixed.extend({"src": [r[0] for r in block], "dst": [r[1] for r in block],
                  "src_chunk": [r[2] for r in block], "dst_chunk": [r[2] for r in block],
                  "nchunks": [1, 1], "reduce": [r[0] > r[1] for r in block],
                  "step": [r[2] for r in block],
                  "phase": [mixed.phase_code(r[3]) for r in block], "channel": [0, 0],
                  "sync": [False, False]})
    send_all(mixed, rows[4:])
    assert_same_schedule(mixed.build(), reference.build())


def cluster(nodes, gpus):
    return load_topology("gpu_cluster", {"nodes": str(nodes), "gpus_per_node": str(gpus)})


def assert_equal_results(a, b):
    assert (a.time_s, a.solves, a.links, a.bytes_sent, a.reduce_s, a.steps) == \
        (b.time_s, b.solves, b.links, b.bytes_sent, b.reduce_s, b.steps)


@needs_numba
def test_bucket_sizes_share_one_structure_and_keep_their_answers(monkeypatch):
    graph = cluster(4, 4)
    nodes = placement(graph, 16)
    monkeypatch.setattr(compiled, "_STRUCTURES", [])
    sizes = [30_257_056, 26_255_360, 17_348_864, 1_000_003]
    timed = []
    for size in sizes:
        sched = make_schedule("hierarchical", "allreduce", 16, size, local_ranks=4)
        timed.append((sched, compiled_time(sched, graph, nodes)))
    assert len(compiled._STRUCTURES) == 1       # one structure, derived once
    for sched, reused in timed:
        compiled._STRUCTURES.clear()
        assert_equal_results(reused, compiled_time(sched, graph, nodes))   # fresh derivation
        run, _engine = simulate(sched, graph, nodes)
        assert math.isclose(reused.time_s, run.time_s, rel_tol=1e-12)


@needs_numba
def test_a_different_structure_is_never_reused(monkeypatch):
    graph = cluster(2, 4)
    nodes = placement(graph, 8)
    monkeypatch.setattr(compiled, "_STRUCTURES", [])
    sched = make_schedule("hierarchical", "allreduce", 8, 8_000_000, local_ranks=4)
    plain = compiled_time(sched, graph, nodes)
    # same length, chunks and ranks; a barrier half way through the list
    sync = sched.sync.copy()
    sync[len(sched) // 2] = True
    barrier = dataclasses.replace(sched, sync=sync)
    with_barrier = compiled_time(barrier, graph, nodes)
    run, _engine = simulate(barrier, graph, nodes)
    assert math.isclose(with_barrier.time_s, run.time_s, rel_tol=1e-12)
    assert len(compiled._STRUCTURES) == 2
    # changed in place after its structure was remembered: derived again, not aliased
    sched.sync[len(sched) // 2] = True
    changed = compiled_time(sched, graph, nodes)
    assert_equal_results(changed, with_barrier)
    compiled._STRUCTURES.clear()
    sched.sync[len(sched) // 2] = False
    assert_equal_results(compiled_time(sched, graph, nodes), plain)


@needs_numba
def test_the_structure_cache_stays_within_its_bounds(monkeypatch):
    graph = cluster(2, 4)
    nodes = placement(graph, 8)
    monkeypatch.setattr(compiled, "_STRUCTURES", [])
    for algorithm, opts in [("hierarchical", {"local_ranks": 4}), ("halving_doubling", {}),
                            ("direct", {})]:
        compiled_time(make_schedule(algorithm, "allreduce", 8, 1 << 20, **opts), graph, nodes)
    assert len(compiled._STRUCTURES) == compiled._STRUCTURES_KEPT
    monkeypatch.setattr(compiled, "_STRUCTURES_BYTES", 1)
    compiled._STRUCTURES.clear()
    compiled_time(make_schedule("direct", "allreduce", 8, 1 << 20), graph, nodes)
    assert compiled._STRUCTURES == []


@needs_numba
def test_training_with_hierarchical_buckets_equals_the_event_engine():
    from simulator.workload.models import get_model
    from simulator.workload.sweep import _profile
    from simulator.workload.training import simulate_training

    graph = cluster(4, 4)
    prof = _profile("resnet50", "a100-sxm4-40gb", 32, "fp32", None)
    grads = [layer.params * 4 for layer in get_model("resnet50").layers]
    kw = {"gpus": 16, "batch_per_gpu": 32, "aggregation": "hierarchical",
          "model_name": "resnet50", "gradient_bytes": grads}
    auto = simulate_training(graph, prof, collective_engine="fast", **kw).row
    event = simulate_training(graph, prof, collective_engine="event", **kw).row
    for key in ("iteration_s", "comm_busy_s", "wire_bytes_per_iteration"):
        assert math.isclose(auto[key], event[key], rel_tol=1e-12), key
