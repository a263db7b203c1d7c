"""The compiled event simulation (simulator.engine.compiled) equals the event engine.

Every registered algorithm and collective, pipelined and not, on uncontended and contended
topologies, with reductions charged: the time, the bytes on every link and the reduction time
on every device must be the event engine's (the kernel runs the same algorithm in the same
event order, so they agree to floating-point identity; 1e-12 is asserted).
"""

import math

import numpy as np
import pytest

from simulator.collective import placement
from simulator.engine.compiled import compiled_time
from simulator.engine.runner import simulate
from simulator.engine.tree_pipeline import numba_available
from simulator.schedules import ALGORITHMS, make_schedule
from simulator.topology import load_topology

pytestmark = pytest.mark.skipif(not numba_available(), reason="numba (extra 'fast') missing")


def star(hosts, **extra):
    params = {"hosts": str(hosts), "link_bandwidth": "12.5GB/s", "link_latency": "1us"}
    params.update(extra)
    return load_topology("star", params)


def assert_equal_to_engine(schedule, graph, nodes, reduce_compute=True):
    run, engine = simulate(schedule, graph, nodes, reduce_compute=reduce_compute)
    fast = compiled_time(schedule, graph, nodes, reduce_compute)
    assert fast.applicable and fast.method == "compiled-events", fast.reason
    assert math.isclose(fast.time_s, run.time_s, rel_tol=1e-12, abs_tol=1e-18)
    carried = {key: b for key, _cap, b in fast.links}
    for key, _cap, b, _busy in engine.network.link_table():
        assert math.isclose(carried.get(key, 0.0), b, rel_tol=1e-12, abs_tol=1e-6), key
    busy: dict = {}
    for device, _label, start, end in engine.compute_log:
        busy[device] = busy.get(device, 0.0) + (end - start)
    assert set(busy) == {d for d, _s in fast.reduce_s}
    for device, seconds in fast.reduce_s:
        assert math.isclose(seconds, busy[device], rel_tol=1e-9)
    return fast, run


CASES = [(name, collective) for name, alg in sorted(ALGORITHMS.items())
         for collective in alg.collectives if name != "ps"]   # (its helpers: own tests)


@pytest.mark.parametrize("slices", [1, 3])
@pytest.mark.parametrize("algorithm,collective", CASES)
def test_every_algorithm_on_a_star_with_reductions(algorithm, collective, slices):
    graph = star(6, reduce_bandwidth="20GB/s")
    size = 3_000_018 if collective == "alltoall" else 3_000_017   # alltoall: divisible by 6
    opts = {"local_ranks": 3} if algorithm == "hierarchical" else {}
    sched = make_schedule(algorithm, collective, 6, size, slices=slices, **opts)
    nodes = placement(graph, 6) + ["switch"] * sched.helper_ranks   # in-network reductions
    fast, _run = assert_equal_to_engine(sched, graph, nodes)
    if any(sched.reduce & (sched.dst < sched.ranks)):   # a switch (collnet) reduces for free
        assert fast.reduce_s


@pytest.mark.parametrize("algorithm,opts", [
    ("ring", {}), ("ring", {"channels": 4}), ("double_binary_tree", {}),
    ("halving_doubling", {}), ("hierarchical", {"local_ranks": 8}), ("direct", {}),
])
@pytest.mark.parametrize("slices", [1, 4])
def test_two_dgx_a100_nvswitch_pcie_and_nics(algorithm, opts, slices):
    graph = load_topology("dgx-a100", {"nodes": "2"})
    sched = make_schedule(algorithm, "allreduce", 16, 48 << 20, slices=slices, **opts)
    assert_equal_to_engine(sched, graph, placement(graph, 16))


def test_hierarchical_on_a_gpu_cluster_whose_outer_rings_share_the_nic():
    """The case the step analyses decline: eight outer rings per machine share one NIC over
    unequal paths, so their steps drift apart and overlap on it."""
    graph = load_topology("gpu_cluster", {"nodes": "4", "gpus_per_node": "8"})
    sched = make_schedule("hierarchical", "allreduce", 32, 25 * 2**20 + 12, local_ranks=8)
    assert_equal_to_engine(sched, graph, placement(graph, 32))


@pytest.mark.parametrize("opts", [{"servers": 2}, {"servers": 1}, {"servers": 2,
                                                                    "phased": False},
                                  {"servers": 3, "shards": [0.5, 0.3, 0.2]}])
def test_parameter_servers_with_barriers(opts):
    graph = star(12, reduce_bandwidth="30GB/s")
    sched = make_schedule("ps", "allreduce", 8, 10_000_019, **opts)
    nodes = placement(graph, 8, opts["servers"], True)
    assert_equal_to_engine(sched, graph, nodes)


def test_contended_fat_tree_without_reduction_compute():
    graph = load_topology("fat_tree", {"hosts_per_leaf": "4", "leaves": "4", "spines": "2"})
    sched = make_schedule("halving_doubling", "allreduce", 16, 64 << 20)
    assert_equal_to_engine(sched, graph, placement(graph, 16), reduce_compute=False)


def test_time_follows_the_inputs():
    """Not a constant: a slower link or a bigger message takes longer, by the right amount."""
    sched = make_schedule("ring", "allreduce", 4, 64 << 20, slices=4)
    fast = compiled_time(sched, star(4), placement(star(4), 4))
    slow_graph = star(4, link_bandwidth="6.25GB/s")
    slow = compiled_time(sched, slow_graph, placement(slow_graph, 4))
    big = compiled_time(make_schedule("ring", "allreduce", 4, 128 << 20, slices=4), star(4),
                        placement(star(4), 4))
    assert slow.time_s > 1.9 * fast.time_s and big.time_s > 1.9 * fast.time_s
    # pipelined ring, 4 slices: 2(p-1) steps of S/p/4 bytes, (p-1)*4 + ... on a FIFO pipeline;
    # bounded below by the bandwidth term and above by the step-synchronous time
    s_bytes, p, bw = 64 << 20, 4, 12.5e9
    assert fast.time_s >= 2 * (p - 1) / p * s_bytes / bw
    assert fast.time_s <= 2 * (p - 1) * (2e-6 + s_bytes / p / bw) * 1.0001


def test_zero_byte_transfers_and_colocated_ranks():
    """Zero-byte chunks (size < ranks) and two ranks on one device (no path) drain at once."""
    graph = star(4)
    sched = make_schedule("ring", "allreduce", 6, 5)
    nodes = placement(graph, 4) + placement(graph, 2)   # ranks 4, 5 share hosts 0, 1
    fast, run = assert_equal_to_engine(sched, graph, nodes)
    assert np.isfinite(fast.time_s) and run.time_s > 0


@pytest.mark.parametrize("slices", [1, 4])
def test_connections_with_their_own_caps(slices):
    """A double binary tree on two DGX A100s with every transfer inside a machine capped
    (schedules.base.LOCAL_FLOW_CAP_NOTE): the compiled events equal the event engine, the cap
    slows the call, and the private resources stay out of the link table."""
    graph = load_topology("dgx-a100", {"nodes": "2"})
    opts = {"channels": 4, "local_ranks": 8, "segments": 2}
    free = make_schedule("double_binary_tree", "allreduce", 16, 8 << 20, slices=slices, **opts)
    capped = make_schedule("double_binary_tree", "allreduce", 16, 8 << 20, slices=slices,
                           local_flow_cap_bytes_per_s=5e9, **opts)
    nodes = placement(graph, 16)
    fast, run = assert_equal_to_engine(capped, graph, nodes)
    assert all(key[0] != "cap" for key, _cap, _b in fast.links)
    assert fast.time_s > 1.5 * compiled_time(free, graph, nodes).time_s
