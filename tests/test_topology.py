"""Topology layer: builders' shapes, the schema, routing rules, presets and their errors."""

import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import networkx as nx
import pytest

from simulator.errors import ConfigError, TopologyError, UnitError
from simulator.topology import (
    BUILDERS, DEVICES, Router, build, describe, endpoints, fat_tree, get_device, gpu_cluster,
    list_topologies, load_topology, parameter_names, preset_names, ps_endpoints, star, validate,
)
from simulator.topology.graph import add_duplex, new_graph

PRESETS = preset_names()
EXPECTED_PRESETS = {
    "dgx-a100", "hgx-h100", "dgx1-v100", "pcie-4x-consumer", "tianhe-k80",
    "dgx1-v100-2node-roce", "dgx-a100-2node", "pcie-2x-2080ti", "k80-cloud-8",
}


def node_kinds(graph, path):
    return [graph.nodes[n]["kind"] for n in path.nodes]


def link_kinds(graph, path):
    return [graph.edges[e]["kind"] for e in path.links]


# --- builders: shapes and schema ----------------------------------------------------------------

@pytest.mark.parametrize("hosts", [1, 2, 8, 33])
def test_star_shape(hosts):
    g = star(hosts=hosts)
    assert g.number_of_nodes() == hosts + 1
    assert g.number_of_edges() == 2 * hosts
    assert endpoints(g) == [f"host{i}" for i in range(hosts)]
    assert ps_endpoints(g) == []
    assert all(g.nodes[h]["reduce_bytes_per_s"] == math.inf for h in endpoints(g))


@pytest.mark.parametrize("per_leaf,leaves,spines", [(4, 4, 2), (1, 1, 1), (3, 5, 4)])
def test_fat_tree_shape(per_leaf, leaves, spines):
    g = fat_tree(hosts_per_leaf=per_leaf, leaves=leaves, spines=spines)
    hosts = per_leaf * leaves
    assert g.number_of_nodes() == hosts + leaves + spines
    assert g.number_of_edges() == 2 * (hosts + leaves * spines)
    assert len(endpoints(g)) == hosts


@pytest.mark.parametrize("kwargs,intra_links,extra_nodes", [
    ({}, 8, 1),                                                          # nvswitch: 8 + node
    ({"intra": "pcie"}, 0, 0),
    ({"intra": "nvlink_ring", "gpus_per_node": 4}, 4, 0),
    ({"intra": "nvlink_ring", "gpus_per_node": 2}, 1, 0),
    ({"intra": "nvlink_mesh", "gpus_per_node": 3, "nvlink_pairs": [[0, 1, 2], [1, 2, 1]]}, 2, 0),
])
@pytest.mark.parametrize("nodes,nics,switches,ps", [(1, 1, 4, 0), (3, 2, 2, 2), (2, 8, 0, 1)])
def test_gpu_cluster_shape(kwargs, intra_links, extra_nodes, nodes, nics, switches, ps):
    g = gpu_cluster(nodes=nodes, nics_per_node=nics, pcie_switches=switches, ps_hosts=ps,
                    **kwargs)
    gpus = kwargs.get("gpus_per_node", 8)
    per_machine_nodes = gpus + switches + 2 + nics + extra_nodes  # + bridge + cpu
    per_machine_cables = 1 + switches + gpus + nics + intra_links
    assert g.number_of_nodes() == nodes * per_machine_nodes + ps + 1  # + fabric switch
    assert g.number_of_edges() == 2 * (nodes * per_machine_cables + nodes * nics + ps)
    assert len(endpoints(g)) == nodes * gpus
    assert ps_endpoints(g) == [f"ps{k}" for k in range(ps)]


def test_gpu_cluster_fat_tree_fabric():
    g = gpu_cluster(nodes=4, nics_per_node=2, fabric="fat_tree", nics_per_leaf=3, spines=2,
                    ps_hosts=1)
    ports = 4 * 2 + 1
    leaves = math.ceil(ports / 3)
    assert sum(1 for _, k in g.nodes(data="kind") if k == "switch") == leaves + 2
    assert g.nodes["ps0"]["node_index"] == 4
    uplink = g.edges["leaf0", "spine0"]["bandwidth_bytes_per_s"]
    assert uplink == pytest.approx(3 * 200e9 / 8 / 2)  # non-blocking by default


def all_graphs():
    yield star(hosts=5)
    yield fat_tree()
    yield gpu_cluster(ps_hosts=2)
    yield gpu_cluster(intra="nvlink_ring", fabric="fat_tree", nics_per_node=2, nics_per_leaf=2)
    for name in PRESETS:
        yield load_topology(name)


@pytest.mark.parametrize("graph", list(all_graphs()), ids=lambda g: g.graph["name"])
def test_schema_and_full_duplex(graph):
    assert validate(graph) is graph
    for u, v, attrs in graph.edges(data=True):
        assert graph.has_edge(v, u), (u, v)
        assert graph.edges[v, u] == attrs
    for node in endpoints(graph) + ps_endpoints(graph):
        assert graph.nodes[node]["reduce_bytes_per_s"] > 0


def test_endpoints_ordered_by_machine_then_local_index():
    g = gpu_cluster(nodes=2, gpus_per_node=12, intra="pcie", pcie_switches=3)
    eps = endpoints(g)
    assert eps[:12] == [f"n0.gpu{j}" for j in range(12)]  # gpu10 after gpu9, not after gpu1
    assert eps[12] == "n1.gpu0"
    assert [(g.nodes[n]["node_index"], g.nodes[n]["local_index"]) for n in eps] == \
        sorted((i, j) for i in range(2) for j in range(12))


def test_gpu_attributes_come_from_device_preset():
    g = gpu_cluster(gpu="v100-sxm2-32gb")
    attrs = g.nodes["n0.gpu3"]
    assert attrs["device"] == "v100-sxm2-32gb"
    assert attrs["memory_bandwidth_bytes_per_s"] == 900e9
    assert attrs["reduce_bytes_per_s"] == pytest.approx(900e9 / 3)
    assert gpu_cluster(reduce_bandwidth="inf").nodes["n0.gpu0"]["reduce_bytes_per_s"] == math.inf
    assert gpu_cluster(reduce_bandwidth="10 GB/s").nodes["n0.gpu0"]["reduce_bytes_per_s"] == 10e9


def test_params_are_resolved_si():
    g = star(link_bandwidth="100 Gbps", link_latency="2 us")
    assert g.graph["params"]["link_bandwidth"] == 12.5e9
    assert g.graph["params"]["link_latency"] == 2e-6
    assert g.graph["builder"] == "star"


@pytest.mark.parametrize("call,key", [
    (lambda: star(hosts=0), "hosts"),
    (lambda: star(hosts=True), "hosts"),
    (lambda: star(kind="token-ring"), "kind"),
    (lambda: fat_tree(spines=2.5), "spines"),
    (lambda: gpu_cluster(intra="hypercube"), "intra"),
    (lambda: gpu_cluster(gpu="tpu-v4"), "gpu"),
    (lambda: gpu_cluster(intra="nvlink_mesh"), "nvlink_pairs"),
    (lambda: gpu_cluster(nvlink_pairs=[[0, 1, 1]]), "nvlink_pairs"),
    (lambda: gpu_cluster(intra="nvlink_mesh", nvlink_pairs=[[0, 8, 1]]), "nvlink_pairs"),
    (lambda: gpu_cluster(intra="nvlink_mesh", nvlink_pairs=[[0, 1], [1, 0]]), "nvlink_pairs"),
    (lambda: gpu_cluster(nics_per_node=2, nic_attach=[0]), "nic_attach"),
    (lambda: gpu_cluster(nic_attach=[7]), "nic_attach"),
])
def test_builder_rejects_bad_values_naming_the_parameter(call, key):
    with pytest.raises(ConfigError, match=key):
        call()


def test_bad_unit_string_names_the_parameter():
    with pytest.raises(UnitError, match="nvlink_bandwidth"):
        gpu_cluster(nvlink_bandwidth="fast")
    with pytest.raises(UnitError, match="link_latency"):
        star(link_latency="1 GB")


def test_build_checks_names():
    assert build("star", {"hosts": 3}).number_of_nodes() == 4
    with pytest.raises(ConfigError, match="'hostz'.*valid: hosts, link_bandwidth"):
        build("star", {"hostz": 3})
    with pytest.raises(ConfigError, match="valid: dragonfly, fat_tree, gpu_cluster, "
                                          "multi_plane, rail_optimised, star, three_tier"):
        build("torus", {})
    assert parameter_names("star") == ["hosts", "link_bandwidth", "link_latency",
                                       "reduce_bandwidth", "kind"]


# --- validate -------------------------------------------------------------------------------------

def two_hosts():
    g = new_graph("t", "manual", {})
    for i in range(2):
        g.add_node(f"h{i}", kind="host", node_index=i, local_index=0, reduce_bytes_per_s=math.inf)
    g.add_node("sw", kind="switch")
    add_duplex(g, "h0", "sw", 1e9, 1e-6, "ethernet")
    add_duplex(g, "h1", "sw", 1e9, 1e-6, "ethernet")
    return g


@pytest.mark.parametrize("mutate,match", [
    (lambda g: g.edges["h0", "sw"].pop("bandwidth_bytes_per_s"), r"'h0' -> 'sw'.*bandwidth"),
    (lambda g: g.edges["h0", "sw"].update(bandwidth_bytes_per_s=0.0), "bandwidth_bytes_per_s"),
    (lambda g: g.edges["sw", "h1"].update(latency_s=-1.0), r"'sw' -> 'h1'.*latency_s"),
    (lambda g: g.edges["sw", "h1"].update(kind="carrier-pigeon"), "kind"),
    (lambda g: g.nodes["sw"].update(kind="router"), r"'sw'.*kind"),
    (lambda g: g.nodes["sw"].update(throughput_bytes_per_s=-5), "throughput_bytes_per_s"),
    (lambda g: g.nodes["h1"].update(node_index=0), r"'h1'.*also used by 'h0'"),
    (lambda g: g.nodes["h1"].pop("reduce_bytes_per_s"), r"'h1'.*reduce_bytes_per_s"),
    (lambda g: g.nodes["h1"].update(local_index=True), r"'h1'.*local_index"),
    (lambda g: g.graph.pop("source"), "source"),
    (lambda g: g.add_edge("sw", "sw", bandwidth_bytes_per_s=1.0, latency_s=0.0,
                          kind="loopback"), "self-loop"),
])
def test_validate_names_node_or_edge_and_attribute(mutate, match):
    g = two_hosts()
    validate(g)
    mutate(g)
    with pytest.raises(TopologyError, match=match):
        validate(g)


# --- routing ----------------------------------------------------------------------------------

def test_star_path_is_two_links_with_twice_the_latency():
    g = star(hosts=4, link_bandwidth="10 GB/s", link_latency="3 us")
    path = Router(g).path("host1", "host3")
    assert path.nodes == ("host1", "switch", "host3")
    assert path.links == (("host1", "switch"), ("switch", "host3"))
    assert path.latency_s == pytest.approx(6e-6)
    assert [Router(g).capacity(r) for r in path.resources] == [10e9, 10e9]


def test_same_endpoint_path_is_empty():
    path = Router(star()).path("host2", "host2")
    assert path.nodes == ("host2",) and path.links == () and path.resources == ()
    assert path.latency_s == 0


def test_paths_are_cached_and_consistent():
    router = Router(gpu_cluster())
    path = router.path("n0.gpu0", "n1.gpu5")
    assert router.path("n0.gpu0", "n1.gpu5") is path
    assert all(a[1] == b[0] for a, b in zip(path.links, path.links[1:]))
    assert path.latency_s == pytest.approx(sum(router.graph.edges[e]["latency_s"]
                                               for e in path.links))


def test_unreachable_and_unknown_nodes_raise_naming_both_ends():
    g = two_hosts()
    g.remove_edge("sw", "h1")
    with pytest.raises(TopologyError, match="'h0'.*'h1'"):
        Router(g).path("h0", "h1")
    with pytest.raises(TopologyError, match="'nowhere'"):
        Router(g).path("h0", "nowhere")


@pytest.mark.parametrize("graph", [gpu_cluster(intra="nvlink_ring", gpus_per_node=4),
                                   load_topology("dgx1-v100"), gpu_cluster(ps_hosts=2)],
                         ids=["ring", "dgx1", "ps"])
def test_devices_are_never_transit(graph):
    router = Router(graph)
    ranks = endpoints(graph) + ps_endpoints(graph)
    for src in ranks:
        for dst in ranks:
            middle = router.path(src, dst).nodes[1:-1]
            assert all(graph.nodes[n]["kind"] not in ("gpu", "host", "cpu") for n in middle)


def test_fat_tree_oversubscription_gives_the_stated_capacity():
    g = fat_tree(hosts_per_leaf=4, leaves=2, spines=2, host_bandwidth="10 GB/s",
                 uplink_bandwidth="10 GB/s")
    router = Router(g)
    down = sum(router.capacity((f"host{i}", "leaf0")) for i in range(4))
    uplinks = {link for i in range(4) for j in range(4, 8)
               for link in router.path(f"host{i}", f"host{j}").links if link[0] == "leaf0"}
    assert uplinks <= {("leaf0", "spine0"), ("leaf0", "spine1")}
    up = sum(router.capacity(link) for link in {("leaf0", "spine0"), ("leaf0", "spine1")})
    assert down / up == pytest.approx(4 * 10 / (2 * 10)) == 2.0
    assert router.path("host0", "host5").hops == 4
    assert router.path("host0", "host1").hops == 2  # same leaf: never via a spine


def test_ecmp_is_deterministic_and_spreads_over_spines():
    g = fat_tree(hosts_per_leaf=4, leaves=4, spines=4)
    a, b = Router(g), Router(fat_tree(hosts_per_leaf=4, leaves=4, spines=4))
    pairs = [(f"host{i}", f"host{j}") for i in range(16) for j in range(16) if i // 4 != j // 4]
    assert [a.path(*p).nodes for p in pairs] == [b.path(*p).nodes for p in pairs]
    spines = {a.path(*p).nodes[2] for p in pairs}
    assert spines == {f"spine{k}" for k in range(4)}


def test_ecmp_does_not_depend_on_hash_seed():
    code = ("from simulator.topology import Router, fat_tree; "
            "r = Router(fat_tree(spines=4)); "
            "print([r.path(f'host{i}', f'host{j}').nodes[2] for i in range(16) for j in range(16)"
            " if i // 4 != j // 4])")
    outputs = set()
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        outputs.add(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                                   text=True, check=True).stdout)
    assert len(outputs) == 1


def test_intra_node_gpus_use_nvswitch_not_the_shared_pcie_switch():
    # gpu0 and gpu1 share n0.pcie0: both routes are two hops; NVSwitch must win even when
    # PCIe is set faster and lower-latency.
    g = gpu_cluster(pcie_latency=0, nvlink_latency="5 us", pcie_bandwidth="1 TB/s")
    path = Router(g).path("n0.gpu0", "n0.gpu1")
    assert path.nodes == ("n0.gpu0", "n0.nvswitch", "n0.gpu1")
    assert link_kinds(g, path) == ["nvswitch", "nvswitch"]
    assert path.latency_s == pytest.approx(5e-6)


def test_nvlink_ring_and_mesh_routes():
    ring = gpu_cluster(intra="nvlink_ring", gpus_per_node=4, pcie_switches=1)
    router = Router(ring)
    assert link_kinds(ring, router.path("n0.gpu0", "n0.gpu1")) == ["nvlink"]
    assert link_kinds(ring, router.path("n0.gpu3", "n0.gpu0")) == ["nvlink"]
    assert link_kinds(ring, router.path("n0.gpu0", "n0.gpu2")) == ["pcie", "pcie"]
    dgx1 = load_topology("dgx1-v100")
    router = Router(dgx1)
    two_links = router.path("n0.gpu0", "n0.gpu3")
    assert two_links.hops == 1 and router.capacity(two_links.resources[0]) == 50e9
    no_nvlink = router.path("n0.gpu0", "n0.gpu5")
    # GPU 0 and GPU 5 sit under different sockets: the path crosses QPI (SYS)
    assert node_kinds(dgx1, no_nvlink) == ["gpu", "pcie_switch", "host_bridge", "host_bridge",
                                            "pcie_switch", "gpu"]
    assert link_kinds(dgx1, no_nvlink) == ["pcie", "pcie", "smp", "pcie", "pcie"]
    same_socket = router.path("n0.gpu1", "n0.gpu3")
    assert "smp" not in link_kinds(dgx1, same_socket)


def test_dgx1_nvlink_mesh_has_six_links_per_gpu():
    g = load_topology("dgx1-v100")
    for gpu in endpoints(g):
        nvlink = sum(a["bandwidth_bytes_per_s"] for _, _, a in g.out_edges(gpu, data=True)
                     if a["kind"] == "nvlink")
        assert nvlink == pytest.approx(6 * 25e9)


def test_inter_node_route_crosses_pcie_nic_fabric_nic_pcie():
    g = load_topology("dgx-a100-2node")
    path = Router(g).path("n0.gpu0", "n1.gpu0")
    assert node_kinds(g, path) == ["gpu", "pcie_switch", "nic", "switch", "nic", "pcie_switch",
                                   "gpu"]
    assert link_kinds(g, path) == ["pcie", "pcie", "ib", "ib", "pcie", "pcie"]
    assert path.latency_s == pytest.approx(2.7e-6)  # NCCL's NET Ring/LL per-step figure
    assert path.nodes[2] in ("n0.nic0", "n0.nic1")  # a NIC on the GPU's own PCIe switch


def test_throughput_caps_appear_in_resources():
    g = gpu_cluster(intra="pcie", pcie_switches=0, host_bridge_bandwidth="9 GB/s")
    router = Router(g)
    path = router.path("n0.gpu0", "n0.gpu1")
    assert ("node", "n0.bridge") in path.resources
    assert router.capacity(("node", "n0.bridge")) == 9e9
    assert path.resources == (("n0.gpu0", "n0.bridge"), ("node", "n0.bridge"),
                              ("n0.bridge", "n0.gpu1"))
    # only transit nodes count: a cap on the source or destination itself is not a resource
    s = star(hosts=3)
    s.nodes["switch"]["throughput_bytes_per_s"] = 5e9
    s.nodes["host0"]["throughput_bytes_per_s"] = 1e9
    assert Router(s).path("host0", "host1").resources == (
        ("host0", "switch"), ("node", "switch"), ("switch", "host1"))


def test_ps_hosts_are_reached_over_the_fabric():
    g = gpu_cluster(ps_hosts=2, ps_bandwidth="50 Gbps")
    path = Router(g).path("n1.gpu2", "ps1")
    assert node_kinds(g, path)[-3:] == ["nic", "switch", "host"]
    assert Router(g).capacity(path.links[-1]) == 50e9 / 8
    assert g.nodes["ps1"]["reduce_bytes_per_s"] == pytest.approx(
        get_device("cpu-host").memory_bandwidth_bytes_per_s / 3)
    assert "ps0" not in endpoints(g)


def test_large_cluster_routes_quickly():
    g = gpu_cluster(nodes=256, nics_per_node=8)
    router = Router(g)
    eps = endpoints(g)
    for r in range(0, len(eps), 7):
        assert router.path(eps[r], eps[(r + 8) % len(eps)]).hops == 6


# --- devices ------------------------------------------------------------------------------------

def test_device_presets():
    required = {"k80-gk210", "p100-sxm2-16gb", "v100-sxm2-16gb", "v100-sxm2-32gb",
                "a100-sxm4-40gb", "a100-sxm4-80gb", "h100-sxm5-80gb", "rtx-2080ti", "rtx-3090",
                "rtx-4090", "cpu-host"}
    assert required <= set(DEVICES)
    for device in DEVICES.values():
        assert device.source and device.fp16_flops_per_s >= device.fp32_flops_per_s > 0
        assert device.reduce_bytes_per_s == pytest.approx(device.memory_bandwidth_bytes_per_s / 3)
    k80 = DEVICES["k80-gk210"]  # one die: half a K80 board
    assert k80.fp32_flops_per_s == pytest.approx(2496 * 2 * 875e6)
    assert 2 * k80.fp32_flops_per_s == pytest.approx(8.73e12, rel=1e-3)
    assert (k80.memory_bandwidth_bytes_per_s, k80.memory_bytes) == (240e9, 12 * 2**30)
    assert 100e9 <= DEVICES["cpu-host"].memory_bandwidth_bytes_per_s <= 200e9
    with pytest.raises(ConfigError, match="valid: a100-sxm4-40gb"):
        get_device("gtx-480")


# --- presets ------------------------------------------------------------------------------------

def test_all_expected_presets_exist():
    assert EXPECTED_PRESETS <= set(PRESETS)
    assert list_topologies() == sorted(BUILDERS) + PRESETS


@pytest.mark.parametrize("name", PRESETS)
def test_preset_loads_by_name_with_sources(name):
    g = load_topology(name)
    validate(g)
    assert g.graph["name"] == name
    assert g.graph["description"] and g.graph["source"]
    assert describe(g)["endpoints"] == len(endpoints(g)) > 0


@pytest.mark.parametrize("name,key,value", [
    ("dgx-a100", "nvlink_bandwidth", 300e9), ("dgx-a100", "nic_bandwidth", 25e9),
    ("dgx-a100", "nics_per_node", 8), ("hgx-h100", "nvlink_bandwidth", 450e9),
    ("hgx-h100", "nic_bandwidth", 50e9), ("dgx1-v100", "nvlink_bandwidth", 25e9),
    ("dgx1-v100", "nics_per_node", 4), ("dgx1-v100", "nic_bandwidth", 12.5e9),
    ("dgx1-v100-2node-roce", "nics_per_node", 2), ("dgx1-v100-2node-roce", "network", "ethernet"),
    ("dgx-a100-2node", "nodes", 2), ("tianhe-k80", "nodes", 32),
    ("tianhe-k80", "gpus_per_node", 4), ("tianhe-k80", "nic_bandwidth", 7e9),
    ("k80-cloud-8", "nic_bandwidth", 1.25e9), ("pcie-2x-2080ti", "pcie_bandwidth", 15.75e9), ("pcie-2x-2080ti", "p2p", False),
    ("pcie-4x-consumer", "intra", "pcie"),
])
def test_preset_key_numbers(name, key, value):
    assert load_topology(name).graph["params"][key] == value


def test_overrides_replace_params():
    g = load_topology("dgx-a100", {"nodes": "4", "nic_bandwidth": "400 Gbps", "fabric": "fat_tree",
                                   "nics_per_leaf": "16", "host_bridge_bandwidth": "none"})
    assert len(endpoints(g)) == 32
    assert g.graph["params"]["nic_bandwidth"] == 50e9
    assert g.graph["name"] == "dgx-a100"
    assert load_topology("star", {"hosts": "64"}).number_of_nodes() == 65
    pairs = load_topology("gpu_cluster", {"intra": "nvlink_mesh", "gpus_per_node": "2",
                                          "nvlink_pairs": "[[0, 1, 4]]"})
    assert pairs.edges["n0.gpu0", "n0.gpu1"]["bandwidth_bytes_per_s"] == 4 * 300e9


def test_override_and_name_errors():
    with pytest.raises(ConfigError, match=r"--param bogus.*valid: nodes, gpus_per_node"):
        load_topology("dgx-a100", {"bogus": "1"})
    with pytest.raises(ConfigError, match=r"'nope'.*valid: aws-p4d.*dgx-a100.*star"):
        load_topology("nope")
    with pytest.raises(ConfigError, match="not found"):
        load_topology("missing/file.yaml")
    with pytest.raises(UnitError, match=r"--param nic_bandwidth: nic_bandwidth: cannot parse"):
        load_topology("dgx-a100", {"nic_bandwidth": "fast"})
    with pytest.raises(ConfigError, match=r"--param hosts: hosts"):
        load_topology("star", {"hosts": "many"})


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "mine.yaml"
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_load_from_path(tmp_path):
    path = write(tmp_path, """\
        name: lab
        description: three hosts
        builder: star
        params:
          hosts: 3
          link_bandwidth: 10 Gbps
        sources: [our switch datasheet]
        """)
    g = load_topology(path, {"hosts": "5"})
    assert len(endpoints(g)) == 5 and g.graph["source"] == "our switch datasheet"
    assert g.graph["params"]["link_bandwidth"] == 1.25e9


@pytest.mark.parametrize("text,error,match", [
    ("name: x\nbuilder: star\ncolour: blue\n", ConfigError, r"mine.yaml:3: colour: unknown key 'colour'"),
    ("name: x\nbuilder: star\nparams:\n  hosts: 2\n  speed: 3\n", ConfigError,
     r"mine.yaml:5: params.speed: unknown parameter 'speed'.*valid: hosts"),
    ("name: x\nbuilder: star\nparams:\n  link_bandwidth: fast\n", UnitError,
     r"mine.yaml:4: link_bandwidth: cannot parse"),
    ("name: x\nbuilder: star\nparams:\n  hosts: 0\n", ConfigError, r"mine.yaml:4: hosts"),
    ("name: x\nbuilder: ring\n", ConfigError, r"mine.yaml:2: builder: expected one of star, fat_tree, gpu_cluster, rail_optimised, multi_plane, three_tier, dragonfly, got 'ring'"),
    ("name: x\nbuilder: star\nparams: [1, 2]\n", ConfigError, r"mine.yaml:3: params: expected a mapping, got \[1, 2\]"),
    ("name: x\nbuilder: star\nsources: [1]\n", ConfigError, r"mine.yaml:3: sources.0: expected a string, got 1"),
    ("name: x\nname: y\nbuilder: star\n", ConfigError, r"mine.yaml:2: duplicate key 'name'"),
    ("builder: star\n", ConfigError, r"missing required key 'name'"),
    ("name: [unclosed\n", ConfigError, r"invalid YAML"),
])
def test_preset_file_errors_name_file_key_and_line(tmp_path, text, error, match):
    with pytest.raises(error, match=match):
        load_topology(write(tmp_path, text))


def test_describe_summarises_devices_and_links():
    d = describe(load_topology("dgx-a100-2node", {"ps_hosts": "1"}))
    assert d["endpoints"] == 16 and d["ps_endpoints"] == ["ps0"]
    assert d["nodes"]["gpu"] == 16 and d["nodes"]["nic"] == 16
    assert d["devices"]["a100-sxm4-40gb"] == 16
    ib = [row for row in d["links"] if row["kind"] == "ib"]
    assert ib == [{"kind": "ib", "bandwidth_bytes_per_s": 25e9, "count": 2 * 17}]


def test_topology_layer_does_not_import_simpy():
    code = "import sys, simulator.topology; print('simpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "False"


def test_graph_is_a_plain_digraph():
    assert type(star()) is nx.DiGraph


def test_nvlink_all_joins_every_pair_at_the_pair_rate():
    graph = gpu_cluster(nodes=1, gpus_per_node=3, intra="nvlink_all", nvlink_bandwidth=100e9)
    nvlink = {(u, v): d["bandwidth_bytes_per_s"] for u, v, d in graph.edges(data=True)
              if d["kind"] == "nvlink"}
    assert set(nvlink) == {(f"n0.gpu{a}", f"n0.gpu{b}") for a in range(3) for b in range(3)
                           if a != b}
    assert set(nvlink.values()) == {100e9}
    route = Router(graph).path("n0.gpu0", "n0.gpu2")
    assert list(route.nodes) == ["n0.gpu0", "n0.gpu2"]      # direct, never through PCIe
    assert not [k for _, _, k in gpu_cluster(nodes=1, gpus_per_node=1, intra="nvlink_all")
                .edges(data="kind") if k == "nvlink"]
    with pytest.raises(ConfigError, match="nvlink_pairs: only used with intra='nvlink_mesh'"):
        gpu_cluster(intra="nvlink_all", nvlink_pairs=[[0, 1, 2]])


PER_GPU = """\
    name: superchips
    builder: gpu_cluster
    params:
      nodes: 2
      gpus_per_node: 4
      intra: nvlink_all
    per_gpu:
      nics_per_node: 1
      pcie_switches: 1
    """


def test_per_gpu_counts_follow_gpus_per_node(tmp_path):
    path = write(tmp_path, PER_GPU)
    params = load_topology(path).graph["params"]
    assert (params["nics_per_node"], params["pcie_switches"]) == (4, 4)
    params = load_topology(path, {"gpus_per_node": "2"}).graph["params"]
    assert (params["nics_per_node"], params["pcie_switches"]) == (2, 2)
    params = load_topology(path, {"gpus_per_node": "2", "nics_per_node": "3"}).graph["params"]
    assert (params["nics_per_node"], params["pcie_switches"]) == (3, 2)   # a --param wins


@pytest.mark.parametrize("section,match", [
    ("per_gpu:\n  colour: 1\n", r"mine.yaml:6: per_gpu.colour: unknown count 'colour' for "
                                r"builder 'gpu_cluster'; valid: nodes, pcie_switches, sockets, "
                                r"nics_per_node, nics_per_leaf, spines, ps_hosts$"),
    ("per_gpu:\n  gpu: 1\n", r"per_gpu.gpu: unknown count 'gpu'"),
    ("per_gpu:\n  gpus_per_node: 1\n", r"per_gpu.gpus_per_node: unknown count"),
    ("per_gpu:\n  nics_per_node: -1\n", r"mine.yaml:6: per_gpu.nics_per_node: must be >= 0"),
    ("per_gpu:\n  nics_per_node: two\n", r"mine.yaml:6: per_gpu.nics_per_node: expected an "
                                         r"integer, got 'two'"),
    ("per_gpu:\n  nics_per_node: 0\n", r"mine.yaml:6 \(per_gpu\): nics_per_node: expected an "
                                       r"integer >= 1, got 0"),
    ("per_gpu:\n  nodes: 1\n", None),
])
def test_per_gpu_errors_name_the_line(tmp_path, section, match):
    path = write(tmp_path, "name: x\nbuilder: gpu_cluster\nparams:\n  gpus_per_node: 2\n"
                 + section)
    if match is None:            # nodes per GPU is odd but legal: 2 GPUs, 2 machines
        assert len(endpoints(load_topology(path))) == 4
        return
    with pytest.raises(ConfigError, match=match):
        load_topology(path)


def test_per_gpu_needs_gpus_and_one_place_per_key(tmp_path):
    with pytest.raises(ConfigError, match=r"per_gpu needs a builder with gpus_per_node"):
        load_topology(write(tmp_path, "name: x\nbuilder: star\nper_gpu:\n  hosts: 2\n"))
    with pytest.raises(ConfigError, match=r"'nics_per_node' is in params and in per_gpu"):
        load_topology(write(tmp_path, "name: x\nbuilder: gpu_cluster\nparams:\n"
                                      "  nics_per_node: 2\nper_gpu:\n  nics_per_node: 1\n"))


def test_calibrated_preset_keeps_the_per_gpu_counts(tmp_path):
    from simulator.comparison.calibrate import _preset, _preset_document

    path = write(tmp_path, PER_GPU)
    import pandas as pd

    raw, builder, description, sources, per_gpu = _preset(path)
    assert per_gpu == {"nics_per_node": 1, "pcie_switches": 1}
    bands = {"size_band": pd.DataFrame({"size_band": ["all"], "mape_pct": [1.0]})}
    doc = _preset_document(path, builder, raw, {"gpus_per_node": 2}, {"nic_bandwidth": 20e9},
                           {}, description, sources, [], [], pd.DataFrame(), [], [], 0.5, 0,
                           bands, bands, per_gpu)
    assert doc["per_gpu"] == per_gpu and "nics_per_node" not in doc["params"]
    out = tmp_path / "calibrated.yaml"
    import yaml
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    params = load_topology(str(out)).graph["params"]
    assert (params["gpus_per_node"], params["nics_per_node"], params["nic_bandwidth"]) == \
        (2, 2, 20e9)


def test_library_calibration_keeps_the_per_gpu_counts(tmp_path):
    from simulator.comparison.calibrate_library import _document

    import pandas as pd

    path = write(tmp_path, PER_GPU)
    bands = {"size_band": pd.DataFrame({"size_band": ["all"], "mape_pct": [1.0]})}
    doc = _document(path, {"name": "nccl"}, pd.DataFrame(), [], [], 0.5, 0, [], [], bands,
                    bands, {"gpus_per_node": 2, "nics_per_node": 3})
    assert doc["per_gpu"] == {"pcie_switches": 1}          # nics_per_node was given itself
    assert doc["params"]["nics_per_node"] == 3
