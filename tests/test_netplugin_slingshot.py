"""HPE Slingshot-11 as NCCL runs it: aws-ofi-nccl over libfabric's cxi provider
(simulator/library/netplugins.py ``slingshot``, ``slingshot-sw`` and ``slingshot-rdzv``), the
``perlmutter-gpu`` and ``gh200`` presets that carry it, and the CSCS Alps two-node all_reduce
table it is compared with."""

from pathlib import Path

import pytest

from simulator.collective import run_collective
from simulator.errors import ConfigError
from simulator.library import netplugins as NP
from simulator.library.machine import machine_facts
from simulator.library.transport import framing
from simulator.measure.schema import read_measurements
from simulator.topology import endpoints, load_topology
from simulator.topology.builders import build

# hand-computed: 2048 B of payload per 2112 B packet (HPC MTU 2 KiB + the largest 64 B header)
CXI_EFF = 2048 / 2112
# RoCEv2 for contrast: 4096 B payload, 44 B headers, 38 B Ethernet L2
ROCE_EFF = 4096 / (4096 + 44 + 38)
# one rendezvous message = eager send 1.64 us + Get round trip 2.70 us; NCCL's own is 2.7 us
RDZV_EXTRA_US = 1.64 + 2.70 - 2.7
# software matching: an eager payload above 4096 B reaches the GPU by a cudaMemcpy (6-7 us)
COPY_US = 6.5

ALPS = Path(__file__).parent / "data" / "measurements" / "nccl_cscs_alps_gh200_2node_slingshot.csv"
# perlmutter-gpu made into an Alps GH200 node: 4 GH200, 150 GB/s NVLink per pair (4 x 37.5),
# NVLink-C2C as the GPU's host link (as the gh200 preset), Grace CPU
ALPS_PARAMS = {"nodes": "2", "gpu": "gh200-96gb", "nvlink_bandwidth": "37.5 GB/s",
               "cpu": "cpu-grace-72c", "pcie_bandwidth": "450 GB/s"}


def _time_us(transport, nodes, algorithm, size_bytes, protocol, **params):
    graph = load_topology("perlmutter-gpu", {"nodes": str(nodes), "transport": transport,
                                             **params})
    run = run_collective(graph, "allreduce", algorithm, size_bytes, library="nccl",
                         protocol=protocol, engine="auto")
    return run.row["time_us"], run.row["busbw_GBps"]


def test_constants_of_both_settings():
    eager, rdzv = NP.TRANSPORTS["slingshot"], NP.TRANSPORTS["slingshot-rdzv"]
    for t in (eager, rdzv):
        assert t.networks == ("ethernet",)
        assert t.efficiency == pytest.approx(CXI_EFF, rel=1e-12)
        assert framing("ethernet", t.name).efficiency == pytest.approx(CXI_EFF, rel=1e-12)
        assert t.flows_per_connection == 1 and t.simple_extra_us == 0.0
        assert NP.enabled_protocols(t.name) == ("LL", "Simple")          # NCCL_PROTO=^LL128
        assert NP.reported_latency_us(t.name, "LL") == 0.0              # OFI_NCCL_NET_LATENCY
        assert NP.reported_latency_us(t.name, "Simple") == 0.0
        assert not NP.plugin_tuner_applies(t.name, 8)                   # no tuner for CXI
        assert t.connection_bytes_per_s(25e9) == pytest.approx(25e9 * CXI_EFF)
    # eager sends (1.64 us) are faster than NCCL's 2.7 us: nothing is added
    assert eager.message_latency_us == pytest.approx(1.64)
    assert NP.network_step_latency_us("slingshot", "LL") == 0.0
    # a rendezvous message adds the Get round trip
    assert rdzv.message_latency_us == pytest.approx(4.34)
    for proto in ("LL", "LL128", "Simple"):
        assert NP.network_step_latency_us("slingshot-rdzv", proto) == pytest.approx(RDZV_EXTRA_US)
    rows = {r["transport"]: r for r in NP.describe()}
    for name in ("slingshot", "slingshot-sw", "slingshot-rdzv"):
        assert {"framing", "message_latency_us", "reported_latency_us", "protocols"} <= set(
            rows[name]["sources"])
    assert "rendezvous" in rows["slingshot"]["sources"]
    assert "host_copy" in rows["slingshot-sw"]["sources"]
    # the size-dependent costs are listed with the transport (hand values)
    assert (rows["slingshot"]["rendezvous_above_bytes"],
            rows["slingshot-sw"]["rendezvous_above_bytes"]) == (16384, 16384 + 2049)
    assert rows["slingshot-sw"]["host_copy_above_bytes"] == 4096
    assert rows["slingshot-sw"]["host_copy_us"] == pytest.approx(COPY_US)
    assert rows["slingshot"]["host_copy_above_bytes"] is None
    assert rows["slingshot-rdzv"]["rendezvous_above_bytes"] is None


@pytest.mark.parametrize("wire_bytes, hardware, software", [
    # (message bytes, slingshot's extra latency, slingshot-sw's (latency, copy)), by hand:
    (8, 0.0, (0.0, 0.0)),
    (4096, 0.0, (0.0, 0.0)),                    # a CPU store through the GPU mapping
    (4097, 0.0, (0.0, COPY_US)),                # above FI_CXI_SAFE_DEVMEM_COPY_THRESHOLD
    (16384, 0.0, (0.0, COPY_US)),
    (16385, RDZV_EXTRA_US, (0.0, COPY_US)),     # NERSC: GET_MIN 0, rendezvous above 16 KiB
    (16384 + 2049, RDZV_EXTRA_US, (0.0, COPY_US)),            # CSCS: still eager
    (16384 + 2050, RDZV_EXTRA_US, (RDZV_EXTRA_US, COPY_US)),  # 16 KiB eager part copied
    (1 << 20, RDZV_EXTRA_US, (RDZV_EXTRA_US, COPY_US))])
def test_message_costs_by_size(wire_bytes, hardware, software):
    assert NP.message_extra_us("slingshot", wire_bytes) == pytest.approx(hardware)
    assert NP.host_copy_us("slingshot", wire_bytes) == 0.0        # hardware matching
    assert (NP.message_extra_us("slingshot-sw", wire_bytes),
            NP.host_copy_us("slingshot-sw", wire_bytes)) == pytest.approx(software)
    # all-rendezvous: priced per step (message_latency_us), nothing per message on top
    assert NP.message_extra_us("slingshot-rdzv", wire_bytes) == 0.0
    assert NP.host_copy_us("slingshot-rdzv", wire_bytes) == 0.0
    for other in ("ib", "roce", "efa2", "tcpxo", "socket"):
        assert NP.message_extra_us(other, wire_bytes) == 0.0
        assert NP.host_copy_us(other, wire_bytes) == 0.0
    # p4d's EFA reads a message larger than one eager packet (libfabric, GPU buffers)
    read = NP.EFA_P4D_READ_EXTRA_US if wire_bytes > NP.EFA_EAGER_MAX_BYTES else 0.0
    assert NP.message_extra_us("efa", wire_bytes) == read
    assert NP.host_copy_us("efa", wire_bytes) == 0.0


def _gh200_us(transport, algorithm, size_bytes):
    graph = load_topology("gh200", {"nodes": "2", "transport": transport})
    run = run_collective(graph, "allreduce", algorithm, size_bytes, library="nccl",
                         protocol="LL", engine="auto")
    return run.row["time_us"]


@pytest.mark.parametrize("algorithm, size_bytes, copies", [
    # tree, one channel: 2048 B travel as 4096 B of LL lines (a CPU store), 4096 B as 8192
    # (a cudaMemcpy) on the way up and again on the way down
    ("tree", 2048, 0), ("tree", 4096, 2),
    # ring of 8 ranks: a connection takes one 8 KiB message in each of its 14 steps, and its
    # CPU copies them one after the other
    ("ring", 256 << 10, 14)])
def test_software_matching_copies_every_message_above_4kib(algorithm, size_bytes, copies):
    """Alps's step from 22 to 32 us between 2 and 4 KiB (CSCS's table) is the copy: the
    same call with hardware matching differs by exactly the copies."""
    software = _gh200_us("slingshot-sw", algorithm, size_bytes)
    hardware = _gh200_us("slingshot", algorithm, size_bytes)
    assert software - hardware == pytest.approx(copies * COPY_US, abs=1e-9)


@pytest.mark.parametrize("nodes, algorithm, network_steps", [
    (2, "ring", 2), (4, "ring", 6),     # ring all-reduce: 2 (nodes - 1) network steps
    (2, "tree", 2), (4, "tree", 4)])    # tree: 2 log2(nodes)
def test_small_messages_pay_the_rendezvous_per_network_step(nodes, algorithm, network_steps):
    eager, _ = _time_us("slingshot", nodes, algorithm, 8, "LL")
    rdzv, _ = _time_us("slingshot-rdzv", nodes, algorithm, 8, "LL")
    roce, _ = _time_us("roce", nodes, algorithm, 8, "LL")
    # NCCL's own per-step latency stands; RoCE adds its proxies' cost to a tree's network
    # steps (a ring's are in NCCL 2.30's own line already)
    proxy = 0.0 if algorithm == "ring" else NP.proxy_step_us("roce", "amd")   # EPYC hosts
    assert eager == pytest.approx(roce - network_steps * proxy, rel=1e-6)
    assert rdzv - eager == pytest.approx(network_steps * RDZV_EXTRA_US, rel=1e-6)


def test_large_messages_pay_the_framing_not_the_latency():
    """1 GiB ring with the NICs the bottleneck (halved to 100 Gb/s): rendezvous changes the
    time by less than 0.1 %, the framing (2048 of 2112 B) costs what it costs against RoCE."""
    slow_nic = {"nic_bandwidth": "100 Gbps"}
    eager_t, eager_bw = _time_us("slingshot", 2, "ring", 1 << 30, "Simple", **slow_nic)
    rdzv_t, _ = _time_us("slingshot-rdzv", 2, "ring", 1 << 30, "Simple", **slow_nic)
    _, roce_bw = _time_us("roce", 2, "ring", 1 << 30, "Simple", **slow_nic)
    assert 0 < rdzv_t - eager_t < 1e-3 * eager_t
    assert roce_bw / eager_bw == pytest.approx(ROCE_EFF / CXI_EFF, rel=2e-3)
    # all four NICs carry the rings: close to (and below) 4 x 12.5 GB/s x the framing (NCCL's
    # search runs each NIC's channel at 12 GB/s, so the channels carry at most 4 x 12)
    assert eager_bw == pytest.approx(4 * 12.5 * CXI_EFF, rel=0.05)
    assert eager_bw < 4 * 12.5 * CXI_EFF


def test_perlmutter_preset():
    one = load_topology("perlmutter-gpu", {})
    params = one.graph["params"]
    assert len(endpoints(one)) == 4 and params["gpu"] == "a100-sxm4-40gb"
    assert params["nics_per_node"] == 4 and params["nic_bandwidth"] == 25e9
    assert params["network"] == "ethernet" and params["transport"] == "slingshot"
    assert NP.graph_transport(one).name == "slingshot"
    # NVLink 3 all-to-all: 4 links of 25 GB/s between every pair of the 4 GPUs
    assert params["intra"] == "nvlink_mesh" and params["nvlink_bandwidth"] == 25e9
    assert sorted(tuple(p) for p in params["nvlink_pairs"]) == [
        (a, b, 4) for a in range(4) for b in range(a + 1, 4)]
    assert one.graph["source"]
    two = load_topology("perlmutter-gpu", {"nodes": "2"})
    facts = machine_facts(two, 8)
    assert facts.nodes == 2 and facts.nics == 4 and facts.transport == "slingshot"
    assert facts.cpu_vendor == "amd"
    large = load_topology("perlmutter-gpu", {"gpu": "a100-sxm4-80gb"})
    assert large.graph["params"]["gpu"] == "a100-sxm4-80gb"


def test_slingshot_runs_on_ethernet_only():
    with pytest.raises(ConfigError, match="runs on ethernet"):
        build("gpu_cluster", {"nodes": 2, "gpus_per_node": 2, "network": "ib",
                              "transport": "slingshot"})


def test_alps_table_is_a_consistent_nccl_tests_table():
    points = read_measurements(ALPS)
    assert len(points) == 25
    assert list(points["size_bytes"]) == [8 << k for k in range(25)]     # 8 B .. 128 MiB
    assert set(points["gpus"]) == {8} and set(points["collective"]) == {"allreduce"}
    for row in points.itertuples():
        # nccl-tests: algbw = size / time; busbw = algbw x 2 (n - 1) / n; bandwidths printed to
        # 0.01 GB/s, times to 4 significant digits (182.1 us: up to 3e-4 relative)
        expected = row.size_bytes / row.time_us / 1e3
        assert abs(row.algbw_GBps - expected) <= 0.006 + 1e-3 * expected
        assert row.busbw_GBps == pytest.approx(row.algbw_GBps * 1.75, abs=0.02)


def test_alps_comparison_stays_within_recorded_bounds():
    """Not fitted: the comparison recorded in docs/validation/sources.md, with the settings
    the table ran under (CSCS's software matching: slingshot-sw): MAPE 7.8 / 23.8 / 10.4 %
    (< 64 KiB, 64 KiB - 1 MiB, >= 1 MiB). With hardware matching (slingshot) the mixed band is
    64 % too fast: the copies are what was missing."""
    from simulator.comparison.collective import compare, summarise

    bands = {}
    for transport in ("slingshot-sw", "slingshot"):
        graph = load_topology("gh200", {"nodes": "2", "transport": transport})
        points = compare(read_measurements(ALPS), graph)
        assert len(points) == 25 and points["simulated_time_us"].notna().all()
        bands[transport] = summarise(points)["size_band"].set_index("size_band")
    sw, hw = bands["slingshot-sw"], bands["slingshot"]
    assert sw.loc["<64KiB", "mape_pct"] < 10
    assert sw.loc["64KiB-1MiB", "mape_pct"] < 30 and abs(sw.loc["64KiB-1MiB", "bias_pct"]) < 10
    assert sw.loc[">=1MiB", "mape_pct"] < 15
    assert hw.loc["64KiB-1MiB", "bias_pct"] < -50


@pytest.mark.parametrize("size_bytes", [8, 256 << 10, 16 << 20, 128 << 20])
def test_gh200_preset_with_slingshot_is_the_alps_node(size_bytes):
    """Two descriptions of the same machine: the four-superchip gh200 preset (Slingshot by
    default) and perlmutter-gpu made into an Alps node time every all-reduce the same, to the
    digit, with either transport."""
    for transport in ("slingshot-sw", "slingshot-rdzv"):
        gh200 = load_topology("gh200", {"nodes": "2", "transport": transport})
        alps = load_topology("perlmutter-gpu", {**ALPS_PARAMS, "transport": transport})
        times = [run_collective(g, "allreduce", "auto", size_bytes, library="nccl",
                                engine="auto").row["time_us"] for g in (gh200, alps)]
        assert times[0] == pytest.approx(times[1], rel=1e-12)
    # and not by accident: JUPITER's InfiniBand NDR200 (LL128 enabled) differs
    ib = load_topology("gh200", {"nodes": "2", "network": "ib", "transport": "ib"})
    if size_bytes >= 16 << 20:
        assert run_collective(ib, "allreduce", "auto", size_bytes, library="nccl",
                              engine="auto").row["time_us"] != pytest.approx(times[0], rel=0.02)
