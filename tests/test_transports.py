"""Network transports as NCCL runs them (simulator/library/netplugins.py): each transport's
constants give the hand-computed framing, per-step latency, reported latency and protocols, and
the presets carry them."""

import math

import pytest

from simulator.errors import ConfigError
from simulator.library import netplugins as NP
from simulator.library.machine import machine_facts
from simulator.library.nccl import NcclLibrary, link_efficiency, search_speed
from simulator.library.nccl_constants import PCIE_EFFICIENCY
from simulator.library.transport import framing
from simulator.topology.builders import build
from simulator.topology.presets import load_topology

# hand-computed payload fractions: payload / (MTU + Ethernet L2 38 B) or IB 26 B per packet
EFA_EFF = (9001 - 20 - 8 - 12 - 4) / (9001 + 38)          # 8957 / 9039
TCPXO_EFF = (8244 - 20 - 20 - 12) / (8244 + 38)           # 8192 / 8282


@pytest.mark.parametrize("network, transport, expected", [
    ("ib", "rdma", 4096 / (4096 + 26)),
    ("ib", "ib", 4096 / (4096 + 26)),
    ("ethernet", "rdma", 4096 / (4096 + 38 + 44)),
    ("ethernet", "roce", 4096 / (4096 + 38 + 44)),
    ("ethernet", "tcp", 1448 / (1448 + 90)),
    ("ethernet", "socket", 1448 / (1448 + 90)),
    ("ethernet", "efa", EFA_EFF),
    ("ethernet", "efa2", EFA_EFF),
    ("ethernet", "tcpxo", TCPXO_EFF),
    ("ethernet", "tcpx", TCPXO_EFF),
])
def test_framing_of_every_transport(network, transport, expected):
    assert framing(network, transport).efficiency == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("name, ll, simple, reported", [
    ("ib", 0.0, 0.0, 0.0),
    ("roce", 0.0, 0.0, 0.0),
    ("socket", 0.0, 0.0, 0.0),
    ("tcpxo", 0.0, 0.0, 0.0),                      # none published: NCCL's figure, reported 0
    ("efa", 36.0 - 2.7, 36.0 - 2.7 + 3.0, 75.0),     # p4d: fitted 36 us (reports 75), +3 Simple
    ("efa2", 20.0 - 2.7, 20.0 - 2.7 + 3.0, 75.0),    # p5: net_lat 20 us, +3 us Simple
])
def test_step_latency_and_reported_latency(name, ll, simple, reported):
    assert NP.network_step_latency_us(name, "LL") == pytest.approx(ll)
    assert NP.network_step_latency_us(name, "LL128") == pytest.approx(ll)
    assert NP.network_step_latency_us(name, "Simple") == pytest.approx(simple)
    # NCCL >= 2.18 adds props->latency to each network step of its model, twice for Simple
    assert NP.reported_latency_us(name, "LL") == reported
    assert NP.reported_latency_us(name, "Simple") == 2 * reported
    assert NP.reported_latency_us(name, "Simple", version=(2, 12)) == 0.0


def test_legacy_names_resolve_and_unknown_names_fail():
    assert NP.get_transport("rdma", "ib").name == "ib"
    assert NP.get_transport("rdma", "ethernet").name == "roce"
    assert NP.get_transport("tcp", "ethernet").name == "socket"
    with pytest.raises(ConfigError, match="unknown transport"):
        NP.get_transport("carrier-pigeon")


def test_protocols_and_per_connection_limits():
    assert NP.enabled_protocols("tcpxo") == ("LL128", "Simple")      # NCCL_PROTO=Simple,LL128
    assert NP.enabled_protocols("tcpxo", version=(2, 21)) == ("Simple",)  # the 2024 releases
    assert NP.enabled_protocols("efa2") is None
    tcpxo = NP.TRANSPORTS["tcpxo"]
    assert tcpxo.flows_per_connection == 2                             # FASTRAK_NUM_FLOWS
    line = 25e9                                                        # 200 Gbps
    assert tcpxo.connection_bytes_per_s(line) == pytest.approx(line * TCPXO_EFF)
    assert NP.SOCKET_FLOWS == {"default": 1, "aws": 16, "gcp": 4}
    # aws-ofi-nccl's tuners defer to NCCL's on two nodes (the comparisons here)
    assert not NP.plugin_tuner_applies("efa2", 2) and NP.plugin_tuner_applies("efa2", 4)
    assert not NP.plugin_tuner_applies("efa", 4) and not NP.plugin_tuner_applies("tcpxo", 4)
    for row in NP.describe():
        assert row["sources"], row["transport"]                       # every transport sourced


@pytest.mark.parametrize("preset, transport, nics, gbps", [
    ("aws-p4d", "efa", 4, 100), ("aws-p5", "efa2", 8, 400), ("gcp-a3-mega", "tcpxo", 8, 200)])
def test_two_node_presets_carry_their_transport(preset, transport, nics, gbps):
    graph = load_topology(preset, {"nodes": "2"})
    assert NP.graph_transport(graph).name == transport
    facts = machine_facts(graph, 16)
    assert facts.transport == transport and facts.nodes == 2 and facts.nics == nics
    eff = EFA_EFF if transport.startswith("efa") else TCPXO_EFF
    assert link_efficiency("ethernet", facts) == pytest.approx(eff)
    # the network bandwidth NCCL's tuner sees: per NIC, the port's nominal rate (NCCL knows no
    # framing) or the NIC's PCIe link at NCCL's PCIe rate, whichever is slower, run at the
    # fastest channel speed of the graph search's table that fits (p4d 12, p5 48, A3 Mega 24)
    _, inter, _ = NcclLibrary()._bandwidths(graph, 16, facts)
    pcie = graph.graph["params"]["pcie_bandwidth"] / 1e9 * PCIE_EFFICIENCY
    assert inter == pytest.approx(nics * search_speed(min(gbps / 8, pcie), 90))
    assert inter == {"efa": 4 * 12.0, "efa2": 8 * 48.0, "tcpxo": 8 * 24.0}[transport]


def test_two_node_p5_network_step_latency_by_hand():
    """aws-p5, 2 nodes, ring all-reduce over 16 ranks: 2 network steps, each paying EFA's
    20 us per 8 B message instead of NCCL's 2.7 us: +2 x 17.3 us (LL) or 2 x 20.3 us
    (Simple) on the call."""
    graph = load_topology("aws-p5", {"nodes": "2"})
    t = NP.graph_transport(graph)
    n_inter = 2 * (2 - 1)
    assert n_inter * t.step_latency_us("LL") == pytest.approx(34.6)
    assert n_inter * t.step_latency_us("Simple") == pytest.approx(40.6)


def test_builder_accepts_the_transports_and_checks_the_network():
    graph = build("gpu_cluster", {"nodes": 2, "gpus_per_node": 2, "network": "ethernet",
                                  "transport": "efa"})
    assert graph.graph["params"]["transport"] == "efa"
    with pytest.raises(ConfigError, match="runs on ethernet"):
        build("gpu_cluster", {"nodes": 2, "gpus_per_node": 2, "network": "ib",
                              "transport": "tcpxo"})
    with pytest.raises(ConfigError, match="transport"):
        build("gpu_cluster", {"nodes": 2, "gpus_per_node": 2, "transport": "smoke"})
    assert math.isinf(NP.TRANSPORTS["ib"].flow_bytes_per_s)


@pytest.mark.parametrize("version, protocols, algorithms", [
    # Google's release notes (container-engine-accelerators gpudirect-tcpxo/README.md):
    ((2, 21), ("Simple",), ("ring", "tree")),             # v1.0.1-v1.0.8, NCCL 2.21.5
    ((2, 23), ("LL128", "Simple"), ("ring", "tree")),     # v1.0.9-v1.0.11: LL128 by default
    ((2, 26), ("LL128", "Simple"), None),                 # v1.0.12 on: NVLS tree by default
    ((2, 28), ("LL128", "Simple"), None),
    ((2, 12), ("Simple",), ("ring", "tree")),             # older than every release: the first
])
def test_tcpxo_settings_follow_the_nccl_release(version, protocols, algorithms):
    settings = NP.nccl_settings("tcpxo", "ethernet", version)
    assert (settings.protocols, settings.algorithms) == (protocols, algorithms)
    assert settings.simple_buffer_bytes == 8 << 20            # NCCL_BUFFSIZE=8388608, every release
    assert NP.nccl_settings("ib", "ib", version).simple_buffer_bytes is None


def test_tcpxo_2024_settings_reach_the_tuner_and_the_data_path():
    """Two A3 Mega machines: with NCCL 2.21 the documented environment leaves Simple rings and
    trees only (no NVLS tree, no LL128), and Simple moves 1 MiB FIFO steps (8 MiB / 8); with
    NCCL 2.30 the NVLS tree and LL128 are back."""
    graph = load_topology("gcp-a3-mega", {"nodes": "2"})
    old = NcclLibrary(version="2.21.5")
    pairs = {(c.algorithm, c.protocol) for c in old.candidates(graph, "allreduce", 64 << 20, 16)}
    assert pairs == {("ring", "Simple"), ("tree", "Simple")}
    new = NcclLibrary(version="2.30")
    pairs = {(c.algorithm, c.protocol) for c in new.candidates(graph, "allreduce", 64 << 20, 16)}
    assert ("nvls_tree", "Simple") in pairs and ("tree", "LL128") in pairs
    reason = old.unavailable(graph, "allreduce", "nvls_tree", 16)
    assert "documented NCCL settings" in reason and "ring, tree" in reason
    # a tree's segments are NCCL's Simple chunks: one 1 MiB FIFO step each (4 MiB / 8 elsewhere)
    plan = old.plan(graph, "allreduce", "tree", 256 << 20, 16, protocol="Simple")
    per_tree = -(-(256 << 20) // (2 * plan.options["channels"]))
    assert plan.options["segments"] == -(-per_tree // (1 << 20))
    ib = load_topology("hgx-h100", {"nodes": "2"})
    plan = old.plan(ib, "allreduce", "tree", 256 << 20, 16, protocol="Simple")
    per_tree = -(-(256 << 20) // (2 * plan.options["channels"]))
    assert plan.options["segments"] == -(-per_tree // (512 << 10))
    # one machine: no network platform, NCCL's own defaults
    one = load_topology("gcp-a3-mega", {})
    assert any(c.algorithm == "nvls" for c in old.candidates(one, "allreduce", 64 << 20, 8))


def test_tcpxo_files_by_hand_checked_bands():
    """The two published A3 Mega tables, with the preset and what their sources state: the
    all-reduce (plugin v1.0.3, NCCL 2.21.5: Simple rings and trees) within 10 % below 64 KiB
    with no TCPXO latency of its own, and the all-gather (no version stated) within 15 %."""
    from pathlib import Path

    from simulator.comparison.collective import compare, summarise
    from simulator.measure.schema import read_measurements
    root = Path(__file__).parent / "data" / "measurements"
    graph = load_topology("gcp-a3-mega", {"nodes": "2"})
    frame = read_measurements(root / "nccl_a3mega_2node_tcpxo.csv")
    bands = summarise(compare(frame, graph))["size_band"].set_index("size_band")
    assert bands.loc["<64KiB", "mape_pct"] < 10.0
    assert bands.loc[">=1MiB", "mape_pct"] < 25.0          # 33.7 % with LL128 / NVLS trees
    frame = read_measurements(root / "nccl_dstack_a3mega_2node_tcpxo_allgather.csv")
    bands = summarise(compare(frame, graph))["size_band"].set_index("size_band")
    assert bands.loc[">=1MiB", "mape_pct"] < 15.0


def test_efa2_messages_above_eager_wait_for_the_receiver_once_per_call():
    """aws-ofi-nccl's RDMA protocol (p5): a message over EAGER_MAX_SIZE (8 KiB) waits for the
    receiver's control message. Both ends start together, so a ring's first (network) step
    waits one whole 20 us message latency; a tree's up-chain (7 NVLink steps of 1.25 us,
    LL128) hides part of it; an eager message waits nothing. The other transports have no
    such wait."""
    assert NP.handshake_latency_us("efa2", 8192, "ethernet") == 0.0
    assert NP.handshake_latency_us("efa2", 8193, "ethernet") == pytest.approx(20.0)
    for name, network in (("ib", "ib"), ("roce", "ethernet"), ("efa", "ethernet"),
                          ("tcpxo", "ethernet"), ("slingshot", "ethernet")):
        assert NP.handshake_latency_us(name, 1 << 30, network) == 0.0
    graph = load_topology("aws-p5", {"nodes": "2"})
    lib = NcclLibrary()
    ring = lib.plan(graph, "allreduce", "ring", 64 << 20, 16, protocol="Simple")
    assert ring.notes["handshake_us"] == pytest.approx(20.0)
    tree = lib.plan(graph, "allreduce", "tree", 1 << 20, 16, protocol="LL128")
    intra = lib.version.hw_latency_us["nvlink"]["tree"][1]
    assert tree.notes["handshake_us"] == pytest.approx(20.0 - 7 * intra)
    small = lib.plan(graph, "allreduce", "tree", 8192, 16, protocol="LL")
    assert "handshake_us" not in small.notes
    one = lib.plan(load_topology("aws-p5", {}), "allreduce", "ring", 64 << 20, 8,
                   protocol="Simple")
    assert "handshake_us" not in one.notes                 # one machine: no network


def test_efa2_handshake_adds_exactly_its_wait_to_the_call(monkeypatch):
    """The same ring all-reduce with the handshake switched off is faster by the wait and
    nothing else."""
    import dataclasses

    from simulator.collective import run_collective

    graph = load_topology("aws-p5", {"nodes": "2"})
    times = []
    for handshake in (8192, None):
        monkeypatch.setitem(NP.TRANSPORTS, "efa2", dataclasses.replace(
            NP.TRANSPORTS["efa2"], handshake_above_bytes=handshake))
        times.append(run_collective(graph, "allreduce", "ring", 64 << 20, library="nccl",
                                    protocol="Simple", engine="auto").row["time_s"])
    assert times[0] - times[1] == pytest.approx(20e-6, rel=1e-6)


@pytest.mark.parametrize("preset, params, overhead_us", [
    ("dgx-a100", {"nodes": "2"}, 2.0),          # AMD EPYC 7742: NCCL's 2 us post overhead
    ("hgx-h100", {"nodes": "2"}, 1.0),          # Xeon 8480C: 1 us
    ("hgx-h100", {"nodes": "4"}, 1.0),
])
def test_ib_proxy_cost_is_charged_per_network_step_and_not_to_the_choice(
        monkeypatch, preset, params, overhead_us):
    """NCCL's own IB transport: every network step of the latency path (a tree's
    2 log2(nodes)) costs IB_PROXY_POSTS_PER_STEP x the CPU's post overhead on top of NCCL's
    line; the tuner's choice and its predicted time do not move."""
    import dataclasses

    from simulator.collective import run_collective

    graph = load_topology(preset, params)
    nodes = int(params["nodes"])
    runs = []
    for posts in (NP.IB_PROXY_POSTS_PER_STEP, 0.0):
        monkeypatch.setitem(NP.TRANSPORTS, "ib", dataclasses.replace(
            NP.TRANSPORTS["ib"], proxy_posts_per_step=posts))
        runs.append(run_collective(graph, "allreduce", "auto", 8, library="nccl",
                                   engine="auto"))
    with_cost, without = runs
    assert with_cost.plan.label == without.plan.label == "tree"
    assert with_cost.plan.protocol == without.plan.protocol == "LL"
    assert with_cost.plan.predicted_time_s == without.plan.predicted_time_s
    steps = 2 * int(math.log2(nodes))
    assert with_cost.row["time_s"] - without.row["time_s"] == pytest.approx(
        steps * NP.IB_PROXY_POSTS_PER_STEP * overhead_us * 1e-6, rel=1e-9)
    assert NP.proxy_step_us("ib", "amd") == 2 * NP.proxy_step_us("ib", "intel")
    assert NP.proxy_step_us("ib", "amd", "arm") == NP.proxy_step_us("ib", "intel")


@pytest.mark.parametrize("transport", ["efa", "efa2", "tcpxo", "tcpx", "socket", "slingshot"])
def test_proxy_cost_only_on_nccls_own_ib_transport(transport):
    """Plugins carry their own per-message costs; sockets none: no proxy cost charged."""
    assert NP.proxy_step_us(transport, "amd") == 0.0
    assert NP.proxy_step_us("roce", "amd", network="ethernet") == 4.0
