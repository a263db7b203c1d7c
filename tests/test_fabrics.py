"""Fabric builders of the largest clusters: node and link counts and bisection bandwidth on
small instances, against hand-computed values (simulator.topology.fabrics)."""

import math

import pytest

from simulator.collective import run_collective
from simulator.errors import ConfigError
from simulator.topology import BUILDERS, Router, build, endpoints, load_topology, parameter_names
from simulator.topology.fabrics import bisection, dragonfly, multi_plane, rail_optimised, three_tier

GB = 1e9
# a small machine: 2 GPUs, 2 PCIe switches, 2 NICs of 10 GB/s -> per machine 9 nodes
# (2 gpu + 2 pcie + bridge + cpu + 2 nic + nvswitch) and 9 internal cables
# (bridge-cpu, 2 switch-bridge, 2 gpu-pcie, 2 nic-pcie, 2 gpu-nvswitch)
SMALL = dict(gpus_per_node=2, pcie_switches=2, nics_per_node=2, nic_bandwidth="10 GB/s")
MACHINE_NODES, MACHINE_CABLES = 9, 9


def test_registered_with_machine_parameters():
    for name in ("rail_optimised", "multi_plane", "three_tier", "dragonfly"):
        assert name in BUILDERS
        names = parameter_names(name)
        assert {"routing", "routing_seed", "nodes", "gpus_per_node", "nic_bandwidth",
                "transport"} <= set(names)
        assert "fabric" not in names and "ps_hosts" not in names


def test_rail_optimised_counts_and_bisection():
    g = rail_optimised(nodes=4, nodes_per_su=2, spines=2, **SMALL)
    leaves, spines = 2 * 2, 2                     # 2 SUs x 2 rails
    assert g.number_of_nodes() == 4 * MACHINE_NODES + leaves + spines
    assert g.number_of_edges() == 2 * (4 * MACHINE_CABLES + 4 * 2 + leaves * spines)
    # NIC k of every machine of SU u on leaf u.k
    assert set(g.successors("n1.nic1")) == {"n1.pcie1", "leaf0.1"}
    assert set(g.successors("n2.nic0")) == {"n2.pcie0", "leaf1.0"}
    # non-blocking default: uplink = 2 ports x 10 / 2 spines = 10 GB/s; SU0 -> SU1 carries
    # all 4 of SU0's NICs
    assert g.edges["leaf0.0", "spine1"]["bandwidth_bytes_per_s"] == 10 * GB
    assert bisection(g) == pytest.approx(4 * 10 * GB)
    half = rail_optimised(nodes=4, nodes_per_su=2, spines=2, uplink_bandwidth="5 GB/s", **SMALL)
    assert half.graph["params"]["leaf_oversubscription"] == 2.0
    assert bisection(half) == pytest.approx(2 * 2 * 5 * GB)   # 2 leaves x 2 spines x 5


def test_multi_plane_counts_and_bisection():
    g = multi_plane(nodes=4, nodes_per_su=2, spines=2, **SMALL)
    per_plane = 4 + 2                              # leaves + spines
    assert g.number_of_nodes() == 4 * MACHINE_NODES + 2 * per_plane
    assert g.number_of_edges() == 2 * (4 * MACHINE_CABLES + 4 * 2 * 2 + 2 * 4 * 2)
    # every NIC has one port of 5 GB/s on each plane
    assert {v for v in g.successors("n0.nic1") if v.startswith("leaf")} == \
        {"leaf0.1.p0", "leaf0.1.p1"}
    assert g.edges["n0.nic1", "leaf0.1.p1"]["bandwidth_bytes_per_s"] == 5 * GB
    assert bisection(g) == pytest.approx(4 * 10 * GB)


@pytest.mark.parametrize("per_leaf", [None, 2])
def test_three_tier_counts_oversubscription_and_bisection(per_leaf):
    g = three_tier(nodes=8, nodes_per_pod=4, nodes_per_leaf=per_leaf, spines_per_pod=2,
                   cores_per_plane=2, leaf_oversubscription=2, spine_oversubscription=2, **SMALL)
    pods, leaves, spines, cores = 2, 2, 2, 2       # rail leaves: 2 rails; ToR: 4/2 machines
    assert g.number_of_nodes() == 8 * MACHINE_NODES + pods * (leaves + spines) + spines * cores
    cables = 8 * MACHINE_CABLES + 8 * 2 + pods * leaves * spines + pods * spines * cores
    assert g.number_of_edges() == 2 * cables
    p = g.graph["params"]
    # each leaf has 4 ports x 10 down: up = 40 / (2 x 2 spines) = 10; spine: 2 leaves x 10
    # down, up = 20 / (2 x 2 cores) = 5
    assert p["leaf_uplink_bandwidth"] == 10 * GB and p["spine_uplink_bandwidth"] == 5 * GB
    assert g.edges["spine1.1", "core1.0"]["bandwidth_bytes_per_s"] == 5 * GB
    # pod 0 -> pod 1 is cut at the cores: 2 spines x 2 cores x 5 GB/s = 20 (NICs: 80)
    assert bisection(g) == pytest.approx(20 * GB)
    if per_leaf is None:
        assert set(g.successors("n5.nic1")) == {"n5.pcie1", "leaf1.1"}
    else:
        assert set(g.successors("n5.nic1")) == {"n5.pcie1", "leaf1.0"}
        assert set(g.successors("n7.nic0")) == {"n7.pcie0", "leaf1.1"}


def test_dragonfly_counts_global_links_and_bisection():
    g = dragonfly(nodes=8, groups=4, routers_per_group=2, global_links_per_router=3,
                  gpus_per_node=2, pcie_switches=2, nics_per_node=1, nic_bandwidth="25 GB/s",
                  local_bandwidth="25 GB/s", global_bandwidth="5 GB/s")
    assert g.graph["params"]["global_links_per_group_pair"] == 2      # 2 x 3 // 3
    machine_nodes, machine_cables = 8, 8          # one NIC
    routers = 8
    assert g.number_of_nodes() == 8 * machine_nodes + routers
    assert g.number_of_edges() == 2 * (8 * machine_cables + 8 + 4 * 1 + 6 * 2)
    glob = [(u, v) for u, v in g.edges if u.startswith("router") and v.startswith("router")
            and u.split(".")[0] != v.split(".")[0]]
    assert len(glob) == 2 * 6 * 2
    for r in range(2):                             # each router uses <= 3 global ports
        for grp in range(4):
            out = [v for u, v in glob if u == f"router{grp}.{r}"]
            assert len(out) <= 3
    # groups 0,1 (machines 0-3) vs 2,3: 4 group pairs x 2 global links x 5 GB/s
    assert bisection(g) == pytest.approx(40 * GB)


def test_builders_check_their_parameters():
    with pytest.raises(ConfigError, match="routing"):
        rail_optimised(routing="spray")
    with pytest.raises(ConfigError, match="unknown parameter 'spine'"):
        build("three_tier", {"spine": 2})
    with pytest.raises(ConfigError, match="nodes_per_leaf"):
        three_tier(nodes_per_pod=4, nodes_per_leaf=3)
    with pytest.raises(ConfigError, match="global_links_per_router"):
        dragonfly(groups=9, routers_per_group=2, global_links_per_router=1)
    with pytest.raises(ConfigError, match="leaf_oversubscription"):
        three_tier(leaf_oversubscription=0)
    g = build("rail_optimised", {"nic_bandwidth": "200 Gbps", "routing": "ecmp",
                                 "routing_seed": 3, "nodes": 2})
    assert g.graph["params"]["nic_bandwidth"] == 25e9
    assert (g.graph["params"]["routing"], g.graph["params"]["routing_seed"]) == ("ecmp", 3)
    assert g.graph["builder"] == "rail_optimised" and len(endpoints(g)) == 16


@pytest.mark.parametrize("name", ["superpod-h100-rail", "superpod-h100-3tier", "meta-roce-3tier",
                                  "slingshot-dragonfly"])
def test_fabric_presets_load(name):
    g = load_topology(name, {"nodes": 8})
    assert g.graph["source"] and len(endpoints(g)) == 8 * g.graph["params"]["gpus_per_node"]


def test_clos_spreads_are_exact_and_dragonfly_pools():
    for g in (rail_optimised(nodes=4, nodes_per_su=2, **SMALL),
              multi_plane(nodes=4, nodes_per_su=2, **SMALL),
              three_tier(nodes=8, nodes_per_pod=4, nodes_per_leaf=2, **SMALL)):
        router = Router(g)
        eps = endpoints(g)
        for a in eps:
            for b in eps:
                router.path(a, b)
        assert router.spread_exact, g.graph["builder"]
    g = dragonfly(nodes=8, groups=4, routers_per_group=2, global_links_per_router=3)
    router = Router(g)
    eps = endpoints(g)
    for a in eps:
        for b in eps:
            router.path(a, b)
    assert not router.spread_exact


def test_ring_on_rail_fabric_within_one_leaf_is_routing_independent():
    """One SU, one NIC per machine on its rail leaf: a single path per pair, so every routing
    mode gives the same time (and the fast methods agree with the event engine)."""
    times = set()
    for mode in ("ideal", "ecmp", "adaptive"):
        g = rail_optimised(nodes=4, nodes_per_su=4, routing=mode, **SMALL)
        for engine in ("event", "auto"):
            times.add(run_collective(g, "allreduce", "ring", 8 << 20, engine=engine)
                      .row["time_s"])
    assert max(times) - min(times) <= 1e-12 * max(times)
    assert not math.isnan(min(times))
