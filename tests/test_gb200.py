"""GB200 NVL72: a multi-node NVLink domain as one machine, the GB200 GPU, and NVIDIA's published
DGX-GB200 pre-training rows (Megatron-Bridge 26.04.01)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from simulator import theory
from simulator.collective import run_collective
from simulator.topology import endpoints, load_topology
from simulator.topology.devices import get_device

DATA = Path(__file__).parent / "data" / "measurements"
TABLE = DATA / "train_llm_nvidia_dgxgb200.csv"


def _nic_of(graph, gpu: str) -> str:
    (switch,) = [v for v in graph.successors(gpu) if graph.nodes[v]["kind"] == "pcie_switch"]
    (nic,) = [v for v in graph.successors(switch) if graph.nodes[v]["kind"] == "nic"]
    return nic


def test_a_rack_is_one_nvlink_domain_of_72_gpus_each_with_its_nic():
    graph = load_topology("gb200-nvl72", {})
    params = graph.graph["params"]
    assert len(endpoints(graph)) == 72 and params["nics_per_node"] == 72
    assert params["intra"] == "nvswitch" and params["nvlink_bandwidth"] == 900e9
    assert params["nic_bandwidth"] == 50e9 and params["network"] == "ib"
    nics = [_nic_of(graph, f"n0.gpu{j}") for j in range(72)]
    assert len(set(nics)) == 72                    # every GPU leaves through its own NIC
    assert {graph.nodes[g]["device"] for g in endpoints(graph)} == {"gb200-186gb"}
    # Megatron-Bridge's 256-GPU runs: four domains of 64 (Slurm segment 16 trays)
    four = load_topology("gb200-nvl72", {"nodes": "4", "gpus_per_node": "64"})
    assert len(endpoints(four)) == 256
    assert sum(1 for n, k in four.nodes(data="kind") if k == "nic") == 256
    assert graph.graph["source"]


@pytest.mark.parametrize("gpus", [8, 64])
def test_a_job_inside_one_domain_runs_at_nvlink_speed(gpus):
    """Ranks of one NVLink domain never cross a NIC: a ring all-reduce is the closed form with
    the NVSwitch's 900 GB/s per GPU, whereas the same ranks as eight-GPU HGX B200 machines
    cross 400 Gb/s InfiniBand."""
    size = 256 << 20
    rack = load_topology("gb200-nvl72", {})
    row = run_collective(rack, "allreduce", "ring", size, gpus=gpus,
                         reduce_compute=False).row
    want = theory.ring_allreduce(gpus, size, 0.5e-6, 1 / 900e9)
    assert math.isclose(row["time_s"], want, rel_tol=1e-9)
    hgx = load_topology("hgx-b200", {"nodes": str(gpus // 8)})
    slower = run_collective(hgx, "allreduce", "ring", size, reduce_compute=False).row
    if gpus == 8:          # one HGX machine: the same NVSwitch
        assert math.isclose(slower["time_s"], row["time_s"], rel_tol=1e-9)
    else:                  # eight rings, one per NIC: (1/8) / 50 GB/s against 1 / 900 GB/s
        assert slower["time_s"] > 2 * row["time_s"]


def test_the_gb200_gpu_is_the_b200_die_a_little_faster():
    """NVIDIA's GB200 NVL72 table per GPU (dense = half the sparse figures) and Bekman's MAMF:
    the GEMMs of a GB200 run 1822 / 1745 of a B200's (bf16), 3615.6 / 3432.5 (fp8)."""
    from simulator.workload.compute import device_efficiency
    from simulator.workload.llm.compute import gemm, kernel_time

    gb, b = get_device("gb200-186gb"), get_device("b200-sxm-180gb")
    assert (gb.fp16_flops_per_s, gb.memory_bandwidth_bytes_per_s) == (2.5e15, 8e12)
    assert gb.memory_bytes == 186 * 2**30
    launch = device_efficiency("b200-sxm-180gb").kernel_overhead_s
    for precision, ratio in (("bf16", 1822 / 1745), ("fp8", 3615.6 / 3432.5)):
        k = gemm(8192, 8192, 8192, precision)
        assert (kernel_time(b, k) - launch) / (kernel_time(gb, k) - launch) == pytest.approx(
            ratio, rel=1e-3)          # the fractions are the MAMF ratios to three digits


def test_the_table_names_the_gb200_and_its_domains():
    from simulator.comparison.llm import _device_of, row_layout
    from simulator.measure.llm_table import read_llm_table

    table = read_llm_table(TABLE)
    assert len(table) == 7
    for _, row in table.iterrows():
        assert _device_of(row, "gb200-186gb") == (None, None)
        assert _device_of(row, "b200-sxm-180gb") == ("gb200-186gb", "gpu=gb200-186gb")
        assert row["gpus_per_node"] == min(row["gpus"], 64)   # Slurm segment: 16 trays
        layout, _ = row_layout(row)
        assert layout.gpus == row["gpus"] and layout.main_grads == "bf16"
    deepseek = table[table.model == "deepseek-v3"].iloc[0]
    assert (deepseek["ep"], deepseek["pp"], deepseek["virtual_stages"]) == (64, 4, 4)


def test_llama3_405b_on_128_chunks_leaves_the_ends_to_embedding_and_loss():
    """Megatron-Bridge's 405B recipe counts the embedding and the loss as layers
    (account_for_embedding/loss_in_pipeline_split): 126 + 2 over PP 16 x VP 8 = 128 chunks puts
    one decoder layer on each chunk but the first and the last."""
    from simulator.workload.llm.layout import Layout, check_layout
    from simulator.workload.llm.memory import chunk_layers
    from simulator.workload.llm.registry import get_llm_model

    model = get_llm_model("llama3-405b")
    layout = Layout(tp=4, pp=16, dp=4, virtual_stages=8, pipeline="interleaved",
                    global_batch=1536)
    check_layout(model, layout)
    sizes = [len(chunk_layers(model, layout, k % 16, k // 16)) for k in range(128)]
    assert sizes[0] == sizes[-1] == 0 and set(sizes[1:-1]) == {1}
    placed = [i for k in range(128) for i in chunk_layers(model, layout, k % 16, k // 16)]
    assert placed == list(range(126))


def test_the_dense_gb200_rows_compare_within_ten_per_cent():
    """The three dense rows (Llama 3 70B and 405B, FP8 and MXFP8) against the simulated step on
    the preset as NVIDIA's launcher lays out the domains (64 GPUs each)."""
    from simulator.comparison.llm import compare_llm
    from simulator.measure.llm_table import read_llm_table

    table = read_llm_table(TABLE)
    dense = table[table.model.str.startswith("llama")]
    points = compare_llm(dense, "gb200-nvl72", {"gpus_per_node": "64"})
    assert points["skipped"].tolist() == [""] * 3
    assert (points["error_pct"].abs() < 10).all(), points["error_pct"].tolist()
    # on eight-GPU HGX B200 machines the same 405B layout's pipeline crosses InfiniBand
    hgx = compare_llm(dense.iloc[1:2], "hgx-b200")
    assert hgx["simulated"].iloc[0] < points["simulated"].iloc[1]


@pytest.mark.parametrize("preset,gpu,gpus,nic_bw", [
    ("hgx-b300", "b300-sxm-270gb", 8, 100e9), ("gb300-nvl72", "gb300-288gb", 72, 100e9)])
def test_blackwell_ultra_presets_carry_800_gbps_nics(preset, gpu, gpus, nic_bw):
    graph = load_topology(preset, {"nodes": "2"})
    params = graph.graph["params"]
    assert len(endpoints(graph)) == 2 * gpus and params["nic_bandwidth"] == nic_bw
    assert params["nics_per_node"] == gpus and params["nvlink_bandwidth"] == 900e9
    assert {graph.nodes[g]["device"] for g in endpoints(graph)} == {gpu}
    assert graph.graph["source"]


def test_blackwell_ultra_gpus_are_blackwell_to_nccl_and_to_fp8():
    from simulator.library.machine import compute_capability, generation
    from simulator.workload.llm.compute import peak_flops

    for name, bf16, fp8, memory in (("b300-sxm-270gb", 2.25e15, 4.5e15, 270),
                                    ("gb300-288gb", 2.5e15, 5e15, 288)):
        dev = get_device(name)
        assert compute_capability(name) == 103 and generation(103) == "blackwell"
        assert (dev.fp16_flops_per_s, peak_flops(dev, "fp8")) == (bf16, fp8)
        assert dev.memory_bytes == memory * 2**30


@pytest.mark.parametrize("name,gpu,rows", [("dgxb300", "b300-sxm-270gb", 4),
                                           ("dgxgb300", "gb300-288gb", 7)])
def test_the_blackwell_ultra_tables_name_their_gpu_and_recipes(name, gpu, rows):
    from simulator.comparison.llm import _device_of, pipeline_layout_of, row_layout
    from simulator.measure.llm_table import read_llm_table
    from simulator.workload.llm.registry import get_llm_model

    table = read_llm_table(DATA / f"train_llm_nvidia_{name}.csv")
    assert len(table) == rows
    for _, row in table.iterrows():
        assert _device_of(row, "b200-sxm-180gb") == (gpu, f"gpu={gpu}")
        layout, _ = row_layout(row)
        assert layout.gpus == row["gpus"] and layout.main_grads == "bf16"
        layout = pipeline_layout_of(row, layout, get_llm_model(row["model"]))
        if row["model"] == "deepseek-v3":
            # Megatron-Bridge's DeepSeek-V3 split for the row's (PP, VP)
            chunks = layout.pp * layout.virtual_stages
            want = {8: (8,) * 7 + (5,), 16: (4,) * 15 + (1,)}[chunks]
            assert layout.pipeline_layout == want
