"""Concurrent collectives against SimGrid, flow by flow (issue 27).

SimGrid (CM02, no correction factors, no cross traffic, latency added after the drain as our
engine does; :data:`simulator.validation.simgrid.SIMGRID_CONFIG`) shares links max-min fairly,
as our engine does, so every transfer of every job must start and end at the same instant in
both. The bound 1e-9 is the engine's own exactness bound (its closed-form tests); what remains
is rounding, and the engine's 1e-12 s tolerance for completions that nearly coincide
(``_EPS`` in ``simulator/engine/network.py``), far below it in these runs. The last tests show
the comparison is sensitive: SimGrid's stock model, or its own latency semantics, move the
same jobs by tenths of a percent to percents.
"""

import math
import sys

import pytest

from simulator.errors import ConfigError
from simulator.schedules import make_schedule
from simulator.topology import endpoints, load_topology
from simulator.validation import simgrid as sgv
from simulator.validation.simgrid import ReplayJob, compare
from simulator.workload.jobs import CollectiveJob

try:
    sgv.load_simgrid()
    MISSING = ""
except ConfigError as exc:
    MISSING = str(exc)
needs_simgrid = pytest.mark.skipif(bool(MISSING), reason=f"SimGrid is not importable: {MISSING}")

GB = 1e9
EXACT = 1e-9


def _fat_tree(**params):
    base = {"hosts_per_leaf": 4, "leaves": 2, "spines": 1}
    return load_topology("fat_tree", {**base, **params})


def _alone(graph, job):
    return compare(graph, [job]).jobs.set_index("job").loc[job.name]


@needs_simgrid
def test_two_rings_across_one_uplink_take_twice_as_long_on_simgrid_too():
    """Hosts 0,1 on leaf 0, hosts 2,3 on leaf 1; ring a = (0, 2), ring b = (1, 3): each ring
    moves n/2 each way twice, and the two share each uplink direction: 2 x alone."""
    graph = load_topology("fat_tree", {"hosts_per_leaf": 2, "leaves": 2, "spines": 1,
                                       "host_bandwidth": "10GB/s", "uplink_bandwidth": "10GB/s",
                                       "host_latency": "0us", "uplink_latency": "0us"})
    n = 256 << 20
    jobs = [CollectiveJob("a", "allreduce", "ring", n, (0, 2)),
            CollectiveJob("b", "allreduce", "ring", n, (1, 3))]
    result = compare(graph, jobs)
    alone = 2 * (n / 2) / (10 * GB)
    for name in ("a", "b"):
        row = result.jobs.set_index("job").loc[name]
        assert math.isclose(row["simgrid_s"], 2 * alone, rel_tol=EXACT)
        assert math.isclose(row["ours_s"], 2 * alone, rel_tol=EXACT)
    assert result.worst_rel_diff <= EXACT
    assert len(result.flows) == 2 * 2 * 2          # 2 jobs x 2 ranks x 2 phases


@needs_simgrid
@pytest.mark.parametrize("algorithm", ["halving_doubling", "double_binary_tree", "direct"])
def test_a_ring_and_another_algorithm_sharing_uplinks_agree_flow_by_flow(algorithm):
    """Both jobs span both leaves (1 us per hop, so intra-leaf and cross-leaf paths differ in
    latency) and slow each other on the uplinks (as fast as one host link: 2:1
    oversubscribed); SimGrid gives every flow the same start and end."""
    graph = _fat_tree(uplink_bandwidth="100Gbps")
    a = CollectiveJob("a", "allreduce", "ring", 64 << 20, (0, 1, 4, 5))
    b = CollectiveJob("b", "allreduce", algorithm, 16 << 20, (2, 6, 3, 7), iterations=2)
    result = compare(graph, [a, b])
    rows = result.jobs.set_index("job")
    assert result.worst_rel_diff <= EXACT
    assert result.worst_duration_rel_diff <= EXACT
    assert (rows["rel_diff"] <= EXACT).all()
    # they do meet: each is slower together than alone, on SimGrid as well
    for job in (a, b):
        assert rows.loc[job.name, "simgrid_s"] > _alone(graph, job)["simgrid_s"] * (1 + 1e-3)
    assert len(result.flows) == len(make_schedule("ring", "allreduce", 4, a.size_bytes)) + 2 * len(
        make_schedule(algorithm, "allreduce", 4, b.size_bytes))


@needs_simgrid
def test_reduction_compute_and_fifo_slices_replay_exactly():
    """One pipelined ring (4 slices per transfer: FIFO connections) beside a tree, with a
    finite reduction rate on every host (summations queue on the receiving device)."""
    graph = _fat_tree(reduce_bandwidth="20GB/s")
    eps = endpoints(graph)
    ring = ReplayJob("ring", make_schedule("ring", "allreduce", 4, 32 << 20, slices=4),
                     tuple(eps[r] for r in (0, 4, 1, 5)))
    tree = CollectiveJob("tree", "allreduce", "tree", 8 << 20, (2, 6, 3, 7))
    result = compare(graph, [ring, tree])
    assert result.worst_rel_diff <= EXACT
    assert result.worst_duration_rel_diff <= EXACT
    free = compare(graph, [ring, tree], reduce_compute=False)
    assert free.worst_rel_diff <= EXACT
    # the summations cost time: the last job ends later with them
    assert result.jobs["simgrid_s"].max() > free.jobs["simgrid_s"].max() * (1 + 1e-3)


@needs_simgrid
def test_one_job_alone_matches_the_ring_closed_form():
    """8-rank ring whose every hop crosses the spine (ranks alternate leaves): each step is
    4 links of 1 us plus n/p bytes at a quarter of an uplink (4 flows share each direction)."""
    graph = _fat_tree()
    n, p = 64 << 20, 8
    ranks = (0, 4, 1, 5, 2, 6, 3, 7)
    result = compare(graph, [CollectiveJob("solo", "allreduce", "ring", n, ranks)])
    assert result.worst_rel_diff <= EXACT
    uplink = graph.edges["leaf0", "spine0"]["bandwidth_bytes_per_s"]
    step = 4 * 1e-6 + (n / p) / (uplink / 4)
    assert math.isclose(result.jobs["simgrid_s"].iloc[0], 2 * (p - 1) * step, rel_tol=EXACT)


@needs_simgrid
def test_simgrids_stock_settings_disagree_so_the_check_has_teeth():
    """SimGrid's default LV08 (bandwidth x 0.97, latency x 13.01, RTT-weighted sharing), and
    its own latency semantics (latency paid before the bytes, shares weighted by route
    latency), move the same jobs by percents and tenths of a percent."""
    graph = _fat_tree()
    jobs = [CollectiveJob("a", "allreduce", "ring", 64 << 20, (0, 1, 4, 5)),
            CollectiveJob("b", "allreduce", "halving_doubling", 16 << 20, (2, 6, 3, 7))]
    lv08 = compare(graph, jobs, config=("network/model:LV08",))
    assert lv08.jobs["rel_diff"].min() > 0.01
    native = compare(graph, jobs, latency_on_links=True)
    assert native.worst_rel_diff > 1e-3


def test_without_simgrid_the_error_says_how_to_install_it(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "simgrid", None)     # makes `import simgrid` fail
    monkeypatch.setattr(sgv, "SYSTEM_SITE_DIRS", (str(tmp_path),))
    with pytest.raises(ConfigError, match=r"simgrid comparison.*apt-get install python3-simgrid"):
        sgv.load_simgrid()
    with pytest.raises(ConfigError, match="not importable"):
        compare(_fat_tree(), [CollectiveJob("a", "allreduce", "ring", 1 << 20, (0, 4))])
