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
    "gh200": (1, None, 1, 50e9, "rdma"),
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
    # all four NICs carry the rings (one NIC's worth would be a quarter of this); EFA's 75 us
    # per network step (simulator.library.netplugins) costs a few per cent at 256 MiB
    assert run.row["busbw_GBps"] == pytest.approx(4 * 12.5 * wire, rel=0.06)
    assert run.row["busbw_GBps"] < 4 * 12.5 * wire
