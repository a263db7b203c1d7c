"""Two-socket hosts: root complexes joined by QPI/UPI (``gpu_cluster`` ``sockets``), NCCL's rate
across them (``topo.h``), and NCCL's tree chains, which follow the paths its search found."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from simulator.collective import run_collective
from simulator.errors import ConfigError
from simulator.library import get_library
from simulator.library.machine import machine_facts
from simulator.library.nccl import link_rate, tree_chains
from simulator.library.nccl_constants import PCIE_EFFICIENCY, inter_cpu_GBps
from simulator.schedules import make_schedule
from simulator.schedules.execute import verify
from simulator.topology import Router, load_topology
from simulator.topology.builders import gpu_cluster


def kinds(graph, path):
    return [graph.edges[e]["kind"] for e in path.links]


def test_two_sockets_split_switches_and_join_the_bridges_at_the_cpu_presets_rate():
    g = gpu_cluster(nodes=1, gpus_per_node=8, intra="pcie", pcie_switches=4, nics_per_node=4,
                    sockets=2, cpu="cpu-host")
    assert g.edges["n0.bridge", "n0.bridge1"]["kind"] == "smp"
    assert g.edges["n0.bridge", "n0.bridge1"]["bandwidth_bytes_per_s"] == 38.4e9
    assert [g.nodes[f"n0.gpu{j}"]["socket"] for j in range(8)] == [0] * 4 + [1] * 4
    assert g.has_edge("n0.pcie2", "n0.bridge1") and g.has_edge("n0.pcie1", "n0.bridge")
    router = Router(g)
    assert "smp" in kinds(g, router.path("n0.gpu3", "n0.gpu4"))
    assert "smp" not in kinds(g, router.path("n0.gpu0", "n0.gpu3"))
    assert "smp" in kinds(g, router.path("n0.gpu5", "n0.cpu"))     # the machine's CPU: socket 0
    # without switches the GPUs and NICs are spread over the sockets' root ports
    flat = gpu_cluster(nodes=1, gpus_per_node=4, pcie_switches=0, nics_per_node=2, sockets=2)
    assert flat.has_edge("n0.gpu3", "n0.bridge1") and flat.has_edge("n0.nic1", "n0.bridge1")
    assert flat.has_edge("n0.gpu0", "n0.bridge") and flat.has_edge("n0.nic0", "n0.bridge")
    # one socket is the old machine, node for node
    one = gpu_cluster(nodes=1, gpus_per_node=8, pcie_switches=4, nics_per_node=4)
    assert "n0.bridge1" not in one and "socket" not in one.nodes["n0.gpu5"]


def test_a_cpu_preset_without_a_socket_link_figure_needs_the_rate_given():
    with pytest.raises(ConfigError, match="socket_link_bandwidth.*cpu-epyc-7742-2s"):
        gpu_cluster(nodes=1, sockets=2, cpu="cpu-epyc-7742-2s")
    g = gpu_cluster(nodes=1, sockets=2, cpu="cpu-epyc-7742-2s", socket_link_bandwidth="64 GB/s")
    assert g.edges["n0.bridge1", "n0.bridge"]["bandwidth_bytes_per_s"] == 64e9
    done = subprocess.run([sys.executable, "-m", "simulator", "collective", "--topology",
                           "dgx-a100", "--param", "sockets=2", "--size", "1MiB"],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "socket_link_bandwidth" in done.stderr and "cpu-host" in done.stderr


@pytest.mark.parametrize("family, release, expected", [
    ("bdw", (2, 5), 8.0), ("bdw", (2, 7), 6.0), ("bdw", None, 6.0),
    ("skl", (2, 5), 12.0), ("skl", (2, 12), 9.0), ("skl", (2, 18), 10.0),
    ("srp", (2, 21), 10.0), ("srp", (2, 26), 22.0), ("erp", (2, 30), 40.0),
    ("amd", (2, 18), math.inf), ("amd", (2, 19), 16.0), ("arm", None, 6.0), ("", None, math.inf),
])
def test_nccls_inter_cpu_bandwidth_follows_topo_h(family, release, expected):
    assert inter_cpu_GBps(family, release) == expected


def test_nccl_crosses_the_sockets_at_the_newest_tables_rate_for_the_cpu_class():
    dgx1 = load_topology("dgx1-p100", {})
    facts = machine_facts(dgx1, 8)
    assert facts.cpu_family == "bdw"
    for release, rate in (((2, 5), 8e9), ((2, 7), 6e9), (None, 6e9)):
        assert link_rate("smp", 38.4e9, facts, release) == pytest.approx(rate)
    h100 = machine_facts(load_topology("hgx-h100", {}), 8)
    assert link_rate("smp", 128e9, h100, (2, 21)) == pytest.approx(10e9)
    assert link_rate("smp", 128e9, h100, (2, 30)) == pytest.approx(22e9)
    assert link_rate("smp", 5e9, h100, (2, 30)) == pytest.approx(5e9)   # never above the wire
    # the library's costed graph carries it: NCCL 1's one ring crosses QPI twice per turn
    slow = run_collective(dgx1, "allreduce", "ring", 256 << 20, library=get_library(
        "nccl", version="1.3"), launch="none")
    assert 2 * 7 / 8 * (256 << 20) / slow.row["time_s"] == pytest.approx(6e9, rel=0.02)
    # the wires do not change with the release NCCL's tables come from (an older table only
    # classed Sapphire Rapids as Skylake): an L40S box crosses UPI at 22 GB/s under 2.21 too
    l40s = load_topology("l40s-pcie", {})
    for version in ("2.21", "2.30"):
        plan = get_library("nccl", version=version).plan(l40s, "allreduce", "ring", 1 << 30, 8)
        crossing = plan.graph.edges["n0.bridge", "n0.bridge1"]["bandwidth_bytes_per_s"]
        pcie = plan.graph.edges["n0.bridge", "n0.pcie0"]["bandwidth_bytes_per_s"]
        assert crossing / pcie == pytest.approx(22e9 / (31.5e9 * PCIE_EFFICIENCY))


def test_staging_without_peer_to_peer_uses_the_senders_socket_memory():
    g = gpu_cluster(nodes=1, gpus_per_node=4, pcie_switches=2, nics_per_node=1, sockets=2,
                    p2p=False)
    router = Router(g)
    same = router.path("n0.gpu2", "n0.gpu3")
    assert "n0.cpu1" in same.nodes and "smp" not in kinds(g, same)
    across = router.path("n0.gpu2", "n0.gpu0")
    assert "n0.cpu1" in across.nodes and kinds(g, across).count("smp") == 1


def test_dgx1_tree_chains_follow_nvlink_and_leave_every_rank_with_the_sum():
    """NCCL's trees on DGX-1s chain each machine's GPUs along the NVLink path its search
    found; the device-order chain would hop 3 -> 4 over PCIe and QPI."""
    g = load_topology("dgx1-v100", {"nodes": 2})
    lib = get_library("nccl")
    plan = lib.plan(g, "allreduce", "tree", 64 << 20, 16)
    chains = plan.options["chains"]
    assert len(chains) == plan.options["channels"]
    for chain in chains:
        assert sorted(chain) == list(range(8))
        assert all(g.has_edge(f"n0.gpu{a}", f"n0.gpu{b}") for a, b in zip(chain, chain[1:]))
    schedule = make_schedule("double_binary_tree", "allreduce", 16, 1 << 16,
                             **{k: v for k, v in plan.options.items() if k != "barriers"})
    assert verify(schedule) == []
    fast = run_collective(g, "allreduce", "tree", 64 << 20, library=lib)
    assert "smp" not in fast.row["bottleneck_link"] and "bridge" not in fast.row["bottleneck_link"]
    # all-to-all NVLink (Perlmutter) and NVSwitch machines keep the rotation
    assert tree_chains(load_topology("perlmutter-gpu", {"nodes": 2}), 8, 4, 4) is None
    assert tree_chains(load_topology("hgx-h100", {"nodes": 2}), 16, 8, 8) is None


def test_one_nic_for_eight_gpus_enters_every_tree_beside_the_nic():
    g = load_topology("dgx1-v100", {"nodes": 2, "nics_per_node": 1})
    flat = load_topology("dgx1-v100", {"nodes": 2, "nics_per_node": 1, "sockets": 1})
    lib = get_library("nccl")
    plan = lib.plan(g, "allreduce", "tree", 64 << 20, 16)
    assert {chain[0] for chain in plan.options["chains"]} <= {0, 1}   # GPUs 0/1 share mlx5_0
    two = run_collective(g, "allreduce", "tree", 64 << 20, library="nccl").row["time_s"]
    one = run_collective(flat, "allreduce", "tree", 64 << 20, library="nccl").row["time_s"]
    assert two == pytest.approx(one, rel=1e-9)
    nvswitch = load_topology("hgx-h100", {"nodes": 2, "nics_per_node": 1, "pcie_switches": 8})
    chains = tree_chains(nvswitch, 16, 2, 8)
    assert chains is not None and [c[0] for c in chains] == [0, 0]
