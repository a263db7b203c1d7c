"""The flow engine against the closed forms of DESIGN.md section 3, plus invariants."""

import math

import pytest
import simpy
from hypothesis import given, settings, strategies as st

from simulator.engine.network import FlowNetwork, max_min_rates


def run_flows(capacities, flows, latencies=None):
    """flows: list of (start_s, size_bytes, [resource names]); returns delivery times."""
    env = simpy.Environment()
    net = FlowNetwork(env, record_rates=True)
    idx = {name: net.resource(name, cap) for name, cap in capacities.items()}
    latencies = latencies or {}
    done = [None] * len(flows)

    def launch(i, size, res):
        lat = sum(latencies.get(r, 0.0) for r in res)

        def drained(_f):
            ev = env.timeout(lat)
            ev.callbacks.append(lambda _e: done.__setitem__(i, env.now))
        net.start(tuple(idx[r] for r in res), size, drained)

    for i, (t0, size, res) in enumerate(flows):
        ev = env.timeout(t0)
        ev.callbacks.append(lambda _e, i=i, size=size, res=res: launch(i, size, res))
    env.run()
    return done, net


def close(a, b, rel=1e-9):
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-12)


def test_one_flow_two_links_latency_paid_once():
    done, _ = run_flows({"a": 10, "b": 5}, [(0, 100, ["a", "b"])], {"a": 1, "b": 2})
    assert close(done[0], 23.0)


def test_two_flows_share_one_link_equally():
    done, _ = run_flows({"l": 10}, [(0, 100, ["l"]), (0, 100, ["l"])])
    assert close(done[0], 20.0) and close(done[1], 20.0)


def test_staggered_arrival():
    done, _ = run_flows({"l": 10}, [(0, 100, ["l"]), (5, 100, ["l"])])
    assert close(done[0], 15.0) and close(done[1], 20.0)


def test_parking_lot():
    done, _ = run_flows({"l0": 10, "l1": 10},
                        [(0, 100, ["l0", "l1"]), (0, 50, ["l0"]), (0, 50, ["l1"])])
    assert close(done[1], 10.0) and close(done[2], 10.0) and close(done[0], 15.0)


def test_incast():
    caps = {"sink": 100e3, **{f"s{i}": 400e3 for i in range(16)}}
    done, _ = run_flows(caps, [(0, 1e6, [f"s{i}", "sink"]) for i in range(16)])
    assert all(close(t, 160.0) for t in done)


def test_independent_components():
    done, net = run_flows({"a": 100, "b": 10}, [(0, 100, ["a"]), (0, 100, ["b"])])
    assert close(done[0], 1.0) and close(done[1], 10.0)


def test_fifo_connection_through_engine():
    """3 x 10 B at 10 B/s, latency 1 s: delivered at 2, 3, 4 s (FIFO: next starts on drain)."""
    import networkx as nx

    from simulator.engine.runner import simulate
    from simulator.schedules.base import ScheduleBuilder

    g = nx.DiGraph(name="pair")
    g.add_node("a", kind="host", node_index=0, local_index=0)
    g.add_node("b", kind="host", node_index=1, local_index=0)
    g.add_edge("a", "b", bandwidth_bytes_per_s=10.0, latency_s=1.0, kind="ethernet")
    g.add_edge("b", "a", bandwidth_bytes_per_s=10.0, latency_s=1.0, kind="ethernet")
    b = ScheduleBuilder("allgather", "test", 2, [10, 10, 10], block_of_chunk=[0, 0, 0])
    for c in range(3):
        b.send(0, 1, c, reduce=False, step=c, phase="p")
    run, _ = simulate(b.build(), g, ["a", "b"])
    assert [round(t, 12) for t in run.t_delivered] == [2.0, 3.0, 4.0]


def test_rates_never_exceed_capacity_and_bytes_conserved():
    caps = {"x": 7.0, "y": 3.0, "z": 11.0}
    flows = [(0, 40, ["x", "y"]), (1, 25, ["y", "z"]), (0.5, 60, ["x", "z"]), (2, 5, ["z"])]
    done, net = run_flows(caps, flows)
    for i, key in enumerate(net.keys):
        for _t, rate in net.rate_log[i]:
            assert rate <= net.capacity[i] * (1 + 1e-12)
    used = {"x": 100, "y": 65, "z": 90}
    for i, key in enumerate(net.keys):
        assert close(net.bytes_carried[i], used[key])


def test_max_min_is_not_monotone_in_general():
    """Why the "adding a flow never speeds others up" property is stated for one shared link.

    Max-min fairness is not monotone on general networks: here a new flow on link c slows flow
    f1 (which shares c), and f1's lower rate frees capacity on link a for f0, which speeds up.
    """
    done, _ = run_flows({"a": 10, "c": 5}, [(0, 1, ["a"]), (0, 1, ["a", "c"])])
    more, _ = run_flows({"a": 10, "c": 5}, [(0, 1, ["a"]), (0, 1, ["a", "c"]), (0, 1, ["c"])])
    assert more[0] < done[0] and more[1] > done[1]


shared_link_flows = st.lists(
    st.tuples(st.floats(0, 5), st.integers(1, 1000), st.sampled_from(["p0", "p1", "p2", "p3"])),
    min_size=1, max_size=8)


@settings(max_examples=80, deadline=None)
@given(shared_link_flows, st.tuples(st.floats(0, 5), st.integers(1, 1000),
                                    st.sampled_from(["p0", "p1", "p2", "p3"])))
def test_adding_a_flow_never_speeds_others_up_on_a_shared_link(flows, extra):
    """Incast shape: every flow crosses one shared link plus a private link of its own speed."""
    caps = {"shared": 10.0, "p0": 2.0, "p1": 5.0, "p2": 20.0, "p3": 7.0}
    as_paths = [(t, b, [p, "shared"]) for t, b, p in flows]
    before, net = run_flows(caps, as_paths)
    after, _ = run_flows(caps, as_paths + [(extra[0], extra[1], [extra[2], "shared"])])
    for t0, t1 in zip(before, after):
        assert t1 >= t0 * (1 - 1e-9)
    for i in range(len(net.keys)):
        assert all(r <= net.capacity[i] * (1 + 1e-12) for _t, r in net.rate_log[i])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.integers(0, 4), min_size=1, max_size=3, unique=True), min_size=1,
                max_size=6),
       st.lists(st.integers(0, 4), min_size=1, max_size=3, unique=True),
       st.lists(st.sampled_from([1.0, 2.0, 3.0, 5.0, 8.0, 10.0]), min_size=5, max_size=5))
def test_adding_a_flow_never_raises_the_smallest_rate(flow_res, extra, caps):
    """The max-min objective itself is monotone: the worst-off flow never gains."""
    capacity = dict(enumerate(caps))
    before = max_min_rates([tuple(r) for r in flow_res], capacity)
    after = max_min_rates([tuple(r) for r in flow_res] + [tuple(extra)], capacity)
    assert min(after[: len(before)]) <= min(before) * (1 + 1e-9)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.lists(st.integers(0, 5), min_size=1, max_size=4, unique=True), min_size=1,
                max_size=10),
       st.lists(st.floats(0.5, 100), min_size=6, max_size=6))
def test_max_min_fairness_condition(flow_res, caps):
    """Every flow has a saturated resource on which it gets the largest rate (max-min)."""
    capacity = dict(enumerate(caps))
    rates = max_min_rates([tuple(r) for r in flow_res], capacity)
    load = {r: 0.0 for r in capacity}
    for res, rate in zip(flow_res, rates):
        for r in res:
            load[r] += rate
    for r in capacity:
        assert load[r] <= capacity[r] * (1 + 1e-9)
    for i, res in enumerate(flow_res):
        assert any(math.isclose(load[r], capacity[r], rel_tol=1e-9)
                   and all(rates[j] <= rates[i] * (1 + 1e-9)
                           for j, other in enumerate(flow_res) if r in other)
                   for r in res)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.integers(0, 7), min_size=1, max_size=4, unique=True), min_size=1,
                max_size=30),
       st.lists(st.sampled_from([1.0, 2.0, 3.0, 5.0, 7.5, 10.0, 12.5]), min_size=8,
                max_size=8))
def test_vector_solver_equals_heap_solver(flow_res, caps):
    from simulator.engine.network import max_min_rates_vector

    capacity = dict(enumerate(caps))
    a = max_min_rates([tuple(r) for r in flow_res], capacity)
    b = max_min_rates_vector([tuple(r) for r in flow_res], capacity)
    assert all(math.isclose(x, y, rel_tol=1e-9) for x, y in zip(a, b))


def test_failed_node_in_a_synchronous_collective_reports_stuck_ranks_quickly():
    """A host dies mid ring all-reduce: the run stops with the stuck-rank report, no hang."""
    import time

    from simulator.engine.runner import Engine
    from simulator.errors import SimulationError
    from simulator.schedules import make_schedule
    from simulator.topology import load_topology

    g = load_topology("star", {"hosts": 8, "link_bandwidth": "10GB/s"})
    engine = Engine(g)
    engine.launch(make_schedule("ring", "allreduce", 8, 64 << 20), [f"host{i}" for i in range(8)])
    engine.fail_node("host3", at_s=1e-3)
    t0 = time.perf_counter()
    with pytest.raises(SimulationError) as err:
        engine.run()
    assert time.perf_counter() - t0 < 1.0
    text = str(err.value)
    assert "stuck ranks" in text and "failed nodes [host3] (at t=0.001 s)" in text
    assert "cut off ranks [2, 3]" in text   # host3 (rank 3) and its ring predecessor


def test_failure_after_completion_changes_nothing():
    from simulator.engine.runner import Engine
    from simulator.schedules import make_schedule
    from simulator.topology import load_topology

    g = load_topology("star", {"hosts": 4, "link_bandwidth": "10GB/s"})
    engine = Engine(g)
    run = engine.launch(make_schedule("ring", "allreduce", 4, 1 << 20), [f"host{i}" for i in range(4)])
    engine.fail_node("host1", at_s=10.0)
    engine.run()
    assert run.remaining == 0 and run.end_s < 1e-3


def test_link_rate_timeline_sums_rates_in_flow_order():
    """A link's logged rate is its flows' rates summed in start order, never in the order a set
    of flows happens to iterate (floating-point sums depend on order: the same scenario must
    give byte-identical timelines)."""
    rates = [0.1 * k for k in range(1, 13)] + [0.3, 0.2, 0.1, 0.7, 0.05]
    caps = {"shared": 1000.0} | {f"own{k}": r for k, r in enumerate(rates)}
    flows = [(0, 1.0, ["shared", f"own{k}"]) for k in range(len(rates))]
    expected = 0.0
    for r in rates:
        expected += r
    keep = []     # a set of flows iterates in address order: vary the addresses across runs
    for _ in range(8):
        _done, net = run_flows(caps, flows)
        shared = net.keys.index("shared")
        assert net.rate_log[shared][0] == (0.0, expected)   # exact: the same additions
        keep.append(net)
    # and a different order would have given another value for these rates
    assert sum(sorted(rates)) != expected
