"""Routing modes (simulator.topology.routing): static ECMP by seeded flow hash, adaptive
path pinning, the ideal spread; seeded reproducibility, and hand-computed collisions."""

import math

import pytest

from simulator.collective import run_collective
from simulator.engine.runner import Engine
from simulator.errors import TopologyError
from simulator.topology import Router, endpoints, fat_tree, gpu_cluster, star
from simulator.topology.fabrics import rail_optimised, three_tier
from simulator.topology.routing import set_routing

GB = 1e9
N = 1 << 30
SMALL = dict(gpus_per_node=2, pcie_switches=2, nics_per_node=2, nic_bandwidth="10 GB/s")


def tor(routing, seed=0):
    """Two pods of two ToR leaves (two 2-GPU machines each), four spines per pod."""
    return three_tier(nodes=8, nodes_per_pod=4, nodes_per_leaf=2, spines_per_pod=4,
                      cores_per_plane=2, routing=routing, routing_seed=seed, **SMALL)


def all_paths(graph, router=None):
    router = router or Router(graph)
    eps = endpoints(graph)
    return {(a, b): router.path(a, b).nodes for a in eps for b in eps}


def finish_times(graph, pairs, size=N):
    """Start one flow of ``size`` bytes per (src, dst) at once; their drain times."""
    engine = Engine(graph)
    net, router, done = engine.network, engine.router, {}
    for k, (a, b) in enumerate(pairs):
        res = [net.resource(key, router.capacity(key)) for key in router.path(a, b).resources]
        net.start(res, size, lambda f: done.__setitem__(f.tag, f.finish), tag=k)
    engine.env.run()
    return [done[k] for k in range(len(pairs))]


def two_leaves(routing, seed=0):
    """hosts 0,1 on leaf0 and 2,3 on leaf1; two spines; every link 10 GB/s, no latency."""
    g = fat_tree(hosts_per_leaf=2, leaves=2, spines=2, host_bandwidth="10GB/s",
                 uplink_bandwidth="10GB/s", host_latency=0, uplink_latency=0)
    return set_routing(g, routing, seed)


def spine_of(graph, a, b):
    return Router(graph).path(a, b).nodes[2]


# --- reproducibility ----------------------------------------------------------------------------

def test_same_seed_same_paths_different_seed_different_paths():
    assert all_paths(tor("ecmp", 7)) == all_paths(tor("ecmp", 7))
    assert all_paths(tor("ecmp", 7)) != all_paths(tor("ecmp", 8))
    assert all_paths(tor("adaptive", 7)) == all_paths(tor("adaptive", 7))


def test_router_arguments_override_the_topology():
    g = tor("ideal")
    assert Router(g, routing="ecmp", seed=3).routing == "ecmp"
    assert Engine(g, routing="ecmp", routing_seed=3).router.seed == 3
    with pytest.raises(TopologyError, match="routing"):
        Router(g, routing="spray")


def test_ecmp_uses_every_spine_and_flow_ids_rehash():
    g = tor("ecmp", 1)
    router = Router(g)
    eps = endpoints(g)
    used = {n for a in eps for b in eps for n in router.path(a, b).nodes if "spine" in n}
    assert used == {f"spine{p}.{s}" for p in range(2) for s in range(4)}
    a, b = "n0.gpu0", "n2.gpu0"
    spines = {router.path(a, b, flow=f).nodes[4] for f in range(16)}
    assert len(spines) > 1              # other connections of the pair hash elsewhere


# --- the default and ideal routing where there is one path --------------------------------------

@pytest.mark.parametrize("mode", ["ideal", "ecmp", "adaptive"])
def test_single_path_topologies_route_as_before(mode):
    """Where the fabric offers one shortest path, every mode gives today's path and times."""
    for build in (lambda: gpu_cluster(nodes=2, nics_per_node=2),
                  lambda: star(hosts=4),
                  lambda: fat_tree(hosts_per_leaf=2, leaves=2, spines=1)):
        before, after = build(), set_routing(build(), mode, 5)
        assert all_paths(before) == all_paths(after)
        assert Router(before).path(*endpoints(before)[:2]) == \
            Router(after).path(*endpoints(after)[:2])
        n = len(endpoints(before))
        t0 = run_collective(before, "allreduce", "ring", 1 << 24, gpus=n).row["time_s"]
        t1 = run_collective(after, "allreduce", "ring", 1 << 24, gpus=n).row["time_s"]
        assert t0 == t1


def test_default_routing_is_unchanged_on_multipath_fabrics():
    g = fat_tree(hosts_per_leaf=4, leaves=4, spines=4)
    assert Router(g).routing is None
    # rule 5 as before: zlib.crc32("src->dst") over the sorted equal-cost paths
    import zlib
    path = Router(g).path("host0", "host5").nodes
    k = zlib.crc32(b"host0->host5") % 4
    assert path == ("host0", "leaf0", f"spine{k}", "leaf1", "host5")


# --- ECMP collisions, adaptive, ideal: hand-computed ---------------------------------------------

def colliding_seeds():
    """Seeds under which host0->host2 and host1->host3 pick the same spine, and not."""
    same, apart = None, None
    for seed in range(64):
        g = two_leaves("ecmp", seed)
        if spine_of(g, "host0", "host2") == spine_of(g, "host1", "host3"):
            same = seed if same is None else same
        else:
            apart = seed if apart is None else apart
    return same, apart


def test_ecmp_collision_halves_both_flows():
    """Two 1 GiB flows leaf0 -> leaf1. Apart: each alone on its 10 GB/s spine path, N/10 GB/s.
    Collided on one uplink: max-min gives each 5 GB/s, both end at N/5 GB/s (2x slower) while
    the other spine idles."""
    same, apart = colliding_seeds()
    assert same is not None and apart is not None
    pairs = [("host0", "host2"), ("host1", "host3")]
    hit = finish_times(two_leaves("ecmp", same), pairs)
    assert hit == pytest.approx([N / (5 * GB)] * 2, rel=1e-12)
    ok = finish_times(two_leaves("ecmp", apart), pairs)
    assert ok == pytest.approx([N / (10 * GB)] * 2, rel=1e-12)


def test_adaptive_and_ideal_avoid_the_collision():
    pairs = [("host0", "host2"), ("host1", "host3")]
    for seed in range(8):
        g = two_leaves("adaptive", seed)
        assert finish_times(g, pairs) == pytest.approx([N / (10 * GB)] * 2, rel=1e-12)
        assert spine_of(g, "host0", "host2") != spine_of(g, "host1", "host3")
    ideal = two_leaves("ideal")
    path = Router(ideal).path("host0", "host2")
    assert len(path.spread) == 2 and path.resources[1][0] == "spread"
    assert Router(ideal).capacity(path.resources[1]) == 20 * GB
    assert finish_times(ideal, pairs) == pytest.approx([N / (10 * GB)] * 2, rel=1e-12)


def test_ideal_spread_beats_one_path_for_a_single_flow():
    """One flow over 10 GB/s host links but 5 GB/s uplinks: one path gives 5 GB/s, the even
    split over both spines 2 x 5 = 10 GB/s (the host link)."""
    def g(mode):
        t = fat_tree(hosts_per_leaf=2, leaves=2, spines=2, host_bandwidth="10GB/s",
                     uplink_bandwidth="5GB/s", host_latency=0, uplink_latency=0)
        return set_routing(t, mode)
    pairs = [("host0", "host2")]
    assert finish_times(g("ideal"), pairs) == pytest.approx([N / (10 * GB)], rel=1e-12)
    assert finish_times(g("ecmp"), pairs) == pytest.approx([N / (5 * GB)], rel=1e-12)
    assert finish_times(g("adaptive"), pairs) == pytest.approx([N / (5 * GB)], rel=1e-12)


def test_adaptive_loads_are_shared_per_graph_and_reset_per_seed():
    g = two_leaves("adaptive", 0)
    first = Router(g).path("host0", "host2").nodes
    second = Router(g).path("host1", "host3").nodes       # another router, same graph
    assert first[2] != second[2]
    assert Router(g).path("host0", "host2").nodes == first  # pinned


# --- the engines agree under every mode ----------------------------------------------------------

@pytest.mark.parametrize("mode", ["ideal", "ecmp", "adaptive"])
def test_event_and_fast_engines_agree(mode):
    g = tor(mode, 3)
    event = run_collective(g, "allreduce", "ring", 1 << 24, engine="event").row["time_s"]
    fast = run_collective(g, "allreduce", "ring", 1 << 24, engine="auto")
    assert math.isclose(fast.row["time_s"], event, rel_tol=1e-9)


def test_ecmp_slows_an_allreduce_on_a_tor_fabric_and_ideal_is_the_bound():
    """A ring over 8 machines on ToR leaves: ECMP can only be as fast as the ideal spread."""
    ideal = run_collective(tor("ideal"), "allreduce", "ring", 1 << 26).row["time_s"]
    for seed in range(3):
        ecmp = run_collective(tor("ecmp", seed), "allreduce", "ring", 1 << 26).row["time_s"]
        assert ecmp >= ideal * (1 - 1e-12)


def test_rail_fabric_spread_is_exact():
    g = rail_optimised(nodes=4, nodes_per_su=2, spines=2, **SMALL)
    router = Router(g)
    path = router.path("n0.gpu0", "n2.gpu0")
    spread = [r for r in path.resources if r[0] == "spread"]
    assert len(spread) == 2 and all(router.capacity(r) == 20 * GB for r in spread)
    assert router.spread_exact


# --- machines with more NICs than GPUs (rule 4) -------------------------------------------------

def _rich(nics, bandwidth, routing=None):
    """Two machines of two GPUs on one PCIe switch, ``nics`` NICs of ``bandwidth`` each."""
    g = gpu_cluster(nodes=2, gpus_per_node=2, pcie_switches=1, nics_per_node=nics,
                    nic_bandwidth=bandwidth, nic_latency="0 us", pcie_latency="0 us",
                    nvlink_latency="0 us")
    return set_routing(g, routing) if routing else g


def test_a_gpu_spreads_over_its_own_nics_when_the_machine_has_more_nics_than_gpus():
    """Four NICs for two GPUs: GPU j gets NICs 2j and 2j + 1 (NCCL hands a GPU's channels to
    its local NICs in turn), a connection is split over both on each end, and one flow moves
    at two NICs' rate."""
    g = _rich(4, "10 GB/s")
    router = Router(g)
    path = router.path("n0.gpu1", "n1.gpu1")
    assert len(path.spread) == 4                      # 2 NICs here x 2 NICs there
    nics = {n for p in path.spread for n in p if g.nodes[n].get("kind") == "nic"}
    assert nics == {"n0.nic2", "n0.nic3", "n1.nic2", "n1.nic3"}
    assert finish_times(g, [("n0.gpu1", "n1.gpu1")]) == pytest.approx([N / (20 * GB)],
                                                                        rel=1e-12)
    # both GPUs at once: each on its own pair of NICs, nothing shared
    both = finish_times(g, [("n0.gpu0", "n1.gpu0"), ("n0.gpu1", "n1.gpu1")])
    assert both == pytest.approx([N / (20 * GB)] * 2, rel=1e-12)
    assert router.spread_exact


def test_as_many_nics_as_gpus_routes_as_before():
    g = _rich(2, "20 GB/s")
    path = Router(g).path("n0.gpu1", "n1.gpu1")
    assert path.spread == () and "n0.nic1" in path.nodes and "n1.nic1" in path.nodes


@pytest.mark.parametrize("algorithm", ["ring", "double_binary_tree"])
def test_twice_the_nics_at_half_the_rate_take_the_same_time(algorithm):
    """The same network per machine as 2 x 20 GB/s or 4 x 10 GB/s: the same all-reduce time
    (before rule 4's spread, GPU j used only NIC j: half the network, twice the time)."""
    times = [run_collective(_rich(nics, bw), "allreduce", algorithm, 1 << 26,
                            engine="event").row["time_s"]
             for nics, bw in ((2, "20 GB/s"), (4, "10 GB/s"))]
    assert times[1] == pytest.approx(times[0], rel=1e-9)
    fast = run_collective(_rich(4, "10 GB/s"), "allreduce", algorithm, 1 << 26).row["time_s"]
    assert fast == pytest.approx(times[1], rel=1e-9)


@pytest.mark.parametrize("mode", ["ideal", "ecmp", "adaptive"])
def test_the_nic_spread_holds_under_every_routing_mode(mode):
    g = _rich(4, "10 GB/s", mode)
    assert finish_times(g, [("n0.gpu0", "n1.gpu0")]) == pytest.approx([N / (20 * GB)],
                                                                        rel=1e-12)
