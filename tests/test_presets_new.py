"""Presets of the machines people run today (issue 15): each builds, multi-node by nodes=N, and
carries the numbers its sources state."""

from __future__ import annotations

import pytest

from simulator.errors import ConfigError
from simulator.topology import endpoints, load_topology

NEW = {
    # name: (GPUs per node, NVLink per GPU per direction or None, NICs, NIC bytes/s, transport)
    "hgx-h200": (8, 450e9, 8, 50e9, "rdma"),
    "hgx-b200": (8, 900e9, 8, 50e9, "rdma"),
    "l40s-pcie": (8, None, 2, 25e9, "rdma"),
    "aws-p4d": (8, 300e9, 4, 12.5e9, "efa"),         # simulator/library/netplugins.py
    "aws-p5": (8, 450e9, 8, 50e9, "efa2"),
    "gcp-a3-mega": (8, 450e9, 8, 25e9, "tcpxo"),
}


@pytest.mark.parametrize("name", sorted(NEW))
def test_new_preset_numbers(name):
    gpus, nvlink, nics, nic_bw, transport = NEW[name]
    graph = load_topology(name, {})
    params = graph.graph["params"]
    assert len(endpoints(graph)) == gpus
    assert params["nics_per_node"] == nics and params["nic_bandwidth"] == nic_bw
    assert params["transport"] == transport
    if nvlink is not None:
        assert params["intra"] == "nvswitch" and params["nvlink_bandwidth"] == nvlink
    else:
        assert params["intra"] == "pcie"
    four = load_topology(name, {"nodes": "4"})
    assert len(endpoints(four)) == 4 * gpus
    assert graph.graph["source"]            # every preset names its sources


def test_transport_is_checked():
    with pytest.raises(ConfigError, match="transport: expected one of rdma, tcp"):
        load_topology("hgx-h100", {"transport": "udp"})
    assert load_topology("hgx-h100", {}).graph["params"]["transport"] == "rdma"


def test_fewer_nics_than_gpus_still_use_every_nic():
    """p4d: 4 EFA NICs for 8 GPUs; the rings leave each machine through GPUs on all four."""
    from simulator.collective import run_collective

    p4d = load_topology("aws-p4d", {"nodes": "2"})
    run = run_collective(p4d, "allreduce", "ring", 256 << 20, library="nccl", protocol="Simple",
                         engine="auto")
    from simulator.library.transport import framing

    wire = framing("ethernet", "efa").efficiency    # EFA's jumbo frames
    # all four NICs carry the rings (one NIC's worth would be a quarter of this); NCCL's
    # search runs each NIC's channel at 12 GB/s, and EFA's per-step costs
    # (simulator.library.netplugins) take a few per cent at 256 MiB
    assert run.row["busbw_GBps"] == pytest.approx(4 * 12.5 * wire, rel=0.1)
    assert run.row["busbw_GBps"] > 3.5 * 12.0
    assert run.row["busbw_GBps"] < 4 * 12.5 * wire


def _nic_beside(graph, gpu: str) -> str:
    """The NIC that shares the GPU's PCIe switch (the superchip's Grace in gh200)."""
    (switch,) = [v for v in graph.successors(gpu) if graph.nodes[v]["kind"] == "pcie_switch"]
    (nic,) = [v for v in graph.successors(switch) if graph.nodes[v]["kind"] == "nic"]
    return nic


def test_gh200_node_is_four_superchips_each_with_its_nic():
    """JUPITER/Alps node: 4 GH200, NVLink all-to-all at 150 GB/s per pair, one NDR200 NIC per
    superchip, beside its own GPU; 4 nodes are 16 GPUs and 16 NICs."""
    graph = load_topology("gh200", {})
    params = graph.graph["params"]
    assert len(endpoints(graph)) == 4 and params["nics_per_node"] == 4
    assert params["intra"] == "nvlink_all" and params["nic_bandwidth"] == 25e9
    nvlink = [(u, v) for u, v, k in graph.edges(data="kind") if k == "nvlink"]
    assert len(nvlink) == 12                                  # 6 pairs, both directions
    assert {graph.edges[e]["bandwidth_bytes_per_s"] for e in nvlink} == {150e9}
    assert [_nic_beside(graph, f"n0.gpu{j}") for j in range(4)] == \
        [f"n0.nic{j}" for j in range(4)]
    four = load_topology("gh200", {"nodes": "4"})
    assert len(endpoints(four)) == 16
    assert sum(1 for _, k in four.nodes(data="kind") if k == "nic") == 16


def test_gh200_nics_follow_the_superchips_unless_given():
    one = load_topology("gh200", {"gpus_per_node": "1", "nodes": "2"})
    assert len(endpoints(one)) == 2 and one.graph["params"]["nics_per_node"] == 1
    assert not [k for _, _, k in one.edges(data="kind") if k == "nvlink"]
    two = load_topology("gh200", {"gpus_per_node": "2"})
    assert two.graph["params"]["nics_per_node"] == 2 and two.graph["params"]["pcie_switches"] == 2
    given = load_topology("gh200", {"nics_per_node": "2"})
    assert given.graph["params"]["nics_per_node"] == 2 and len(endpoints(given)) == 4


def test_gh200_node_uses_all_four_nics():
    """A large all-reduce between two nodes leaves through all four NICs of each: with one
    NIC per node it takes several times longer (the NIC is the bottleneck)."""
    from simulator.collective import run_collective

    size = 1 << 30
    times = {}
    for nics in ("4", "1"):
        graph = load_topology("gh200", {"nodes": "2", "nics_per_node": nics})
        times[nics] = run_collective(graph, "allreduce", "ring", size, library="nccl",
                                     protocol="Simple", engine="auto").row["time_s"]
    assert times["1"] > 3 * times["4"]

