"""Contention that closed forms cannot do: the flow engine against hand-derived max-min answers.

Each case states the naive alpha-beta answer (every transfer at its path's bottleneck bandwidth,
as if alone) and the max-min answer derived by hand; the engine must give the latter.
"""

import math

import numpy as np
import pytest

from simulator.collective import run_collective
from simulator.engine.runner import Engine
from simulator.schedules import make_schedule
from simulator.topology import load_topology
from simulator.topology.graph import add_duplex, new_graph, validate

GB = 1e9


def incast_graph(workers: int, worker_bw: float, server_bw: float):
    """Workers on 10 GB/s links and one server on a faster link, all on one switch."""
    g = new_graph("incast", "test", {})
    g.add_node("switch", kind="switch")
    for i in range(workers + 1):
        name = f"h{i}"
        g.add_node(name, kind="host", node_index=i, local_index=0, reduce_bytes_per_s=math.inf)
        add_duplex(g, name, "switch", server_bw if i == workers else worker_bw, 0.0, "ethernet")
    return validate(g)


def test_ps_incast_saturates_the_server_link():
    """8 workers x 10 GB/s push into a 40 GB/s server: each flow gets 5 GB/s, not 10."""
    n = 1 << 30
    g = incast_graph(8, 10 * GB, 40 * GB)
    t = run_collective(g, "allreduce", "ps", n, gpus=8).row["time_s"]
    naive = 2 * n / (10 * GB)                 # each worker's own link as if alone
    max_min = 2 * (8 * n) / (40 * GB)         # the server link shared by 8 flows, both phases
    assert math.isclose(t, max_min, rel_tol=1e-9) and t > naive * 1.9


def test_ps_with_fast_server_is_worker_bound():
    """The same incast with a 100 GB/s server: the workers' links are the bottleneck."""
    n = 1 << 30
    t = run_collective(incast_graph(8, 10 * GB, 100 * GB), "allreduce", "ps", n,
                       gpus=8).row["time_s"]
    assert math.isclose(t, 2 * n / (10 * GB), rel_tol=1e-9)


def test_halving_doubling_on_oversubscribed_fat_tree():
    """8 hosts on 2 leaves, one 10 GB/s uplink per leaf (4:1): the distance-4 steps cross it.

    Recursive halving's first step and doubling's last send n/2 between leaves: four flows share
    each uplink direction at 2.5 GB/s. The other steps stay inside a leaf at 10 GB/s.
    """
    g = load_topology("fat_tree", {"hosts_per_leaf": 4, "leaves": 2, "spines": 1,
                                   "host_bandwidth": "10GB/s", "uplink_bandwidth": "10GB/s",
                                   "host_latency": "1us", "uplink_latency": "2us"})
    n = 64 << 20
    t = run_collective(g, "allreduce", "halving_doubling", n).row["time_s"]
    a_in, a_x = 2e-6, 2e-6 + 4e-6
    per_phase = (a_x + (n / 2) / (2.5 * GB)) + (a_in + (n / 4) / (10 * GB)) \
        + (a_in + (n / 8) / (10 * GB))
    naive = 2 * 3 * a_in + 2 * 7 / 8 * n / (10 * GB)
    assert math.isclose(t, 2 * per_phase, rel_tol=1e-9)
    assert t > 2 * naive


def test_two_concurrent_allreduces_share_the_uplink():
    """Two 2-rank rings, each spanning both leaves, share one uplink: each runs at half speed."""
    g = load_topology("fat_tree", {"hosts_per_leaf": 2, "leaves": 2, "spines": 1,
                                   "host_bandwidth": "10GB/s", "uplink_bandwidth": "10GB/s",
                                   "host_latency": "0us", "uplink_latency": "0us"})
    n = 256 << 20
    sched = make_schedule("ring", "allreduce", 2, n)
    alone = Engine(g)
    run = alone.launch(sched, ["host0", "host2"])
    alone.run()
    both = Engine(g)
    a = both.launch(sched, ["host0", "host2"])
    b = both.launch(sched, ["host1", "host3"])
    both.run()
    assert math.isclose(run.time_s, 2 * (n / 2) / (10 * GB), rel_tol=1e-9)
    assert math.isclose(a.time_s, 2 * (n / 2) / (5 * GB), rel_tol=1e-9)
    assert math.isclose(b.time_s, a.time_s, rel_tol=1e-12)


@pytest.mark.parametrize("shards", [[0.75, 0.25], [0.5, 0.3, 0.2], [0.9, 0.05, 0.05]])
def test_ps_hot_shard_sets_the_pace(shards):
    """Uneven shards: the server with the largest shard carries N x that shard, both ways."""
    workers, n = 8, 120 << 20
    g = load_topology("star", {"hosts": workers + len(shards), "link_bandwidth": "10GB/s",
                               "link_latency": "0us"})
    result = run_collective(g, "allreduce", "ps", n, gpus=workers, servers=len(shards),
                            shards=shards)
    hot = int(np.argmax(shards))
    largest = max(np.floor(np.asarray(shards) * n))
    expected = 2 * workers * largest / (10 * GB)
    assert math.isclose(result.row["time_s"], expected, rel_tol=1e-6)
    even = run_collective(g, "allreduce", "ps", n, gpus=workers,
                          servers=len(shards)).row["time_s"]
    assert result.row["time_s"] > even
    assert result.row["bottleneck_link"] in (f"host{workers + hot}->switch",
                                             f"switch->host{workers + hot}")
