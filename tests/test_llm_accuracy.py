"""The LLM step model against published measurements (tests/data/llm/, each row with its source).

* Korthikanti et al. 2022 (arXiv 2205.05198), Table 4: forward and backward time of ONE
  transformer layer of a 22B GPT on 8 A100s (Megatron-LM, tp 8), five recompute / sequence-
  parallel variants. These ten numbers are the data :data:`TRAINING_GEMM_EFFICIENCY`, the one
  fitted constant of the cost model, is fitted to (least squares of the relative errors); the
  test refits it and checks the committed value is that fit.
* Korthikanti et al. 2022, Table 5: end-to-end iteration times of the 22B, 175B, 530B and 1T
  configurations (Table 3), with full recompute and with selective recompute + sequence
  parallelism. Not fitted: a check (pipeline, embedding, head, optimizer included).
* Dao 2023 (FlashAttention-2, arXiv 2307.08691), Table 1: end-to-end GPT training TFLOP/s on
  8 A100s with FlashAttention-2 (a 2023 stack). Not fitted: a check of the flash path.
* NVIDIA NeMo 24.07 performance summary: H100 FP8 pre-training model TFLOP/s. Not fitted.
  (Its GPT-3 175B row, 842 TFLOP/s on 512 GPUs, is left out: as stated it needs 84.7 GiB per
  GPU in this memory model, so it cannot be simulated without guessing its recomputation.)

Per-layer times are the layer's compute kernels plus its non-overlapped tensor-parallel
collectives, each timed alone through the collective library on one DGX A100 (NVSwitch), as the
step runner times TP groups inside a machine.
"""

import csv
import dataclasses
from pathlib import Path

import numpy as np
import pytest

import simulator.workload.llm.compute as llm_compute
from simulator.topology import endpoints, load_topology
from simulator.workload.llm.costs import step_work
from simulator.workload.llm.groups import GroupCoster
from simulator.workload.llm.layout import Layout
from simulator.workload.llm.model import TransformerConfig
from simulator.workload.llm.registry import get_llm_model
from simulator.workload.llm.step import simulate_step

DATA = Path(__file__).parent / "data" / "llm"

#: Tolerances (relative). Per-layer times are the fitted data (worst now 3.3 %). End-to-end
#: A100 checks: worst now the 1T run of Korthikanti's Table 5 (sim 10.1 % slow: 64 pipeline
#: stages, the bubble and point-to-point exposure are the step runner's); FlashAttention-2's
#: table within 3 %. H100 (NeMo 24.07 FP8): worst Llama 2 7B on 8 GPUs, +13.6 %.
PER_LAYER_TOL = 0.05
END_TO_END_TOL = 0.12
FLASH2_TOL = 0.06
H100_TOL = 0.15


def _rows(name):
    with (DATA / name).open(newline="") as handle:
        return list(csv.DictReader(handle))


def _gpt(name, layers, hidden, heads, seq=2048, vocab=51200):
    return TransformerConfig(name=name, layers=layers, hidden=hidden, heads=heads,
                             ffn_hidden=4 * hidden, vocab=vocab, seq_len=seq)


@pytest.fixture(scope="module")
def dgx_a100():
    graph = load_topology("dgx-a100-2node", {"nodes": "1", "gpu": "a100-sxm4-80gb"})
    return GroupCoster(graph), sorted(endpoints(graph))[:8]


def _layer_ms(ops, coster, ranks, layer="l1."):
    total = 0.0
    for op in ops:
        if not op.name.startswith(layer):
            continue
        total += op.compute_s
        if op.comm is not None and not op.comm.overlapped:
            total += coster.time_s(op.comm.collective, ranks, op.comm.size_bytes)
    return 1e3 * total


def _korthikanti_layers(dgx_a100):
    """(simulated, measured) forward and backward ms of one 22B layer, Table 4's five rows."""
    coster, ranks = dgx_a100
    model = _gpt("korthikanti-22b", 2, 6144, 64)     # one layer's ops do not depend on depth
    out = []
    for row in _rows("korthikanti2022_table4.csv"):
        layout = Layout(tp=8, micro_batch=4, global_batch=4, recompute=row["recompute"],
                        sequence_parallel=row["sequence_parallel"] == "1", precision="fp16",
                        attention="unfused")
        chunk = step_work(model, layout, "a100-sxm4-80gb").chunks[(0, 0)]
        out.append((_layer_ms(chunk.forward, coster, ranks), float(row["forward_ms"])))
        out.append((_layer_ms(chunk.backward, coster, ranks), float(row["backward_ms"])))
    return out


def test_korthikanti_per_layer_times(dgx_a100):
    pairs = _korthikanti_layers(dgx_a100)
    errors = [sim / meas - 1 for sim, meas in pairs]
    assert len(errors) == 10
    assert max(abs(e) for e in errors) <= PER_LAYER_TOL, errors
    assert abs(np.mean(errors)) <= 0.02


def test_training_gemm_efficiency_is_the_fit_to_korthikanti_table4(dgx_a100, monkeypatch):
    def loss(value):
        monkeypatch.setattr(llm_compute, "TRAINING_GEMM_EFFICIENCY", value)
        return float(np.mean([(s / m - 1) ** 2 for s, m in _korthikanti_layers(dgx_a100)]))

    grid = np.round(np.arange(0.70, 0.9001, 0.005), 3)
    best = float(grid[np.argmin([loss(v) for v in grid])])
    monkeypatch.undo()
    # within two grid steps: the fit moves a little when the collective library's times for
    # the layer's TP collectives change; more than that means the constant must be refitted
    assert abs(llm_compute.TRAINING_GEMM_EFFICIENCY - best) <= 0.010 + 1e-9, best
    # without it (MAMF as is) the layer is ~15 % too fast: the gap the constant closes
    monkeypatch.setattr(llm_compute, "TRAINING_GEMM_EFFICIENCY", 1.0)
    assert np.mean([s / m - 1 for s, m in _korthikanti_layers(dgx_a100)]) < -0.10


@pytest.mark.parametrize("row", _rows("korthikanti2022_table5.csv"), ids=lambda r: r["model"])
def test_korthikanti_end_to_end_iteration_times(row):
    model = _gpt("korthikanti-" + row["model"], int(row["layers"]), int(row["hidden"]),
                 int(row["heads"]))
    gpus = int(row["gpus"])
    graph = load_topology("dgx-a100-2node", {"nodes": str(gpus // 8), "gpu": "a100-sxm4-80gb"})
    v = int(row["virtual_stages"])
    base = Layout(tp=int(row["tp"]), pp=int(row["pp"]), dp=1, virtual_stages=v,
                  pipeline="interleaved" if v > 1 else "1f1b",
                  micro_batch=int(row["micro_batch"]), global_batch=int(row["global_batch"]),
                  precision="fp16", attention="unfused")
    for layout, column in ((dataclasses.replace(base, recompute="full"), "full_recompute_s"),
                           (dataclasses.replace(base, recompute="selective",
                                                sequence_parallel=True), "present_work_s")):
        step = simulate_step(graph, model, layout).row["step_time_s"]
        measured = float(row[column])
        assert abs(step / measured - 1) <= END_TO_END_TOL, (column, step, measured)


@pytest.mark.parametrize("row", _rows("dao2023_flashattention2_table1.csv"),
                         ids=lambda r: f"{r['model']}-{r['seq_len']}")
def test_flash_attention2_end_to_end_tflops(row):
    seq = int(row["seq_len"])
    model = dataclasses.replace(get_llm_model(row["model"]), seq_len=seq)
    graph = load_topology("dgx-a100-2node", {"nodes": "1", "gpu": "a100-sxm4-80gb"})
    micro = 16384 // seq                               # not stated: 16K tokens per micro-batch
    layout = Layout(dp=8, micro_batch=micro, global_batch=8 * micro * 4, recompute="none",
                    precision="bf16", attention="flash", distributed_optimizer=True)
    step = simulate_step(graph, model, layout).row["step_time_s"]
    flops = (6 * seq * model.params + 12 * model.layers * model.hidden * seq ** 2) \
        * layout.global_batch                          # the paper's counting
    tflops = flops / step / 8 / 1e12
    assert abs(tflops / float(row["flash2_tflops"]) - 1) <= FLASH2_TOL


@pytest.mark.parametrize("row", _rows("nvidia_h100_published.csv"),
                         ids=lambda r: f"{r['model']}-{r['gpus']}")
def test_h100_published_throughput(row):
    model = dataclasses.replace(get_llm_model(row["model"]), seq_len=int(row["seq_len"]))
    gpus, tp, pp, cp = (int(row[c]) for c in ("gpus", "tp", "pp", "cp"))
    v = int(row["virtual_stages"])
    graph = load_topology("hgx-h100", {"nodes": str(gpus // 8)})
    layout = Layout(tp=tp, pp=pp, cp=cp, dp=gpus // (tp * pp * cp), virtual_stages=v,
                    pipeline="interleaved" if v > 1 else "1f1b",
                    micro_batch=int(row["micro_batch"]), global_batch=int(row["global_batch"]),
                    sequence_parallel=tp > 1, distributed_optimizer=True,
                    recompute=row["recompute"],
                    precision=row["precision"], attention="flash")
    tflops = simulate_step(graph, model, layout).row["model_tflops_per_gpu"]
    assert abs(tflops / float(row["model_tflops_per_gpu"]) - 1) <= H100_TOL
