"""The transformer model layer: parameter counts, FLOPs, activation and memory formulas."""

import csv
import dataclasses
from pathlib import Path

import pytest

from simulator.errors import ConfigError
from simulator.workload.llm.layout import Layout
from simulator.workload.llm.memory import (_state_bytes, check_memory, in_flight_chunks,
                                           memory_per_gpu)
from simulator.workload.llm.model import (MoEConfig, TransformerConfig,
                                          activation_bytes_per_layer,
                                          korthikanti_activation_bytes, layer_forward_flops,
                                          model_flops_per_step, narayanan_flops)
from simulator.workload.llm.registry import (LLM_MODELS, get_llm_model, model_for_row,
                                             model_from_row)

_TABLE = "train_llm_megatron_a100_v100.csv"
_CANDIDATES = [Path(__file__).parent / "data" / "training" / _TABLE,
               Path(__file__).parent / "data" / "measurements" / _TABLE,
               Path("/work/shared/measurements") / _TABLE]
MEASUREMENTS = next((p for p in _CANDIDATES if p.exists()), None)
#: The shape columns of that table (Narayanan et al. 2021, Table 1; Megatron README 2020), so
#: that the row builder is tested without the file.
INLINE_ROWS = [
    {"model": f"GPT {p}B", "params_b": p, "layers": l, "hidden": h, "heads": a, "ffn_hidden": "",
     "vocab": "51200.0", "seq_len": s}
    for p, l, h, a, s in ((1.7, 24, 2304, 24, 2048), (3.6, 30, 3072, 32, 2048),
                          (7.5, 36, 4096, 32, 2048), (18.4, 40, 6144, 48, 2048),
                          (39.1, 48, 8192, 64, 2048), (76.1, 60, 10240, 80, 2048),
                          (145.6, 80, 12288, 96, 2048), (310.1, 96, 16384, 128, 2048),
                          (529.6, 105, 20480, 128, 2048), (1008.0, 128, 25600, 160, 2048),
                          (1.16, 24, 1920, 15, 1024), (2.03, 30, 2304, 18, 1024),
                          (4.24, 36, 3072, 24, 1024), (8.67, 42, 4096, 32, 1024))]
GPT_NAMES = [n for n in LLM_MODELS if n.startswith(("megatron-gpt", "gpt3-"))]


# ------------------------------------------------------------------ parameters
@pytest.mark.parametrize("name", sorted(LLM_MODELS))
def test_parameter_count_matches_published(name):
    cfg = LLM_MODELS[name]
    assert cfg.published_params
    assert cfg.params == pytest.approx(cfg.published_params, rel=0.03)


def test_exact_counts_of_released_checkpoints():
    # Hugging Face / Meta released checkpoints: exact counts
    assert get_llm_model("llama2-7b").params == 6_738_415_616
    assert get_llm_model("llama2-13b").params == 13_015_864_320
    assert get_llm_model("llama2-70b").params == 68_976_648_192
    assert get_llm_model("llama3-8b").params == 8_030_261_248


def test_moe_active_parameters():
    mixtral = get_llm_model("mixtral-8x7b")
    assert mixtral.active_params == pytest.approx(12.9e9, rel=0.02)      # "13B active"
    deepseek = get_llm_model("deepseekmoe-16b")
    assert deepseek.active_params == pytest.approx(2.8e9, rel=0.03)
    assert deepseek.moe_layers == 27 and deepseek.dense_layers == 1
    # Qwen3 report, Table 2 / model cards: "30.5B in total and 3.3B activated", "235B in
    # total and 22B activated"
    assert get_llm_model("qwen3-30b-a3b").active_params == pytest.approx(3.3e9, rel=0.03)
    assert get_llm_model("qwen3-235b-a22b").active_params == pytest.approx(22e9, rel=0.03)
    assert get_llm_model("qwen3-30b-a3b").q_dim == 4096 != get_llm_model("qwen3-30b-a3b").hidden
    # gpt-oss model card (arXiv 2508.10925): 5.13B active, counted without the unembedding
    oss = get_llm_model("gpt-oss-120b")
    assert oss.active_params - oss.vocab * oss.hidden == pytest.approx(5.13e9, rel=0.01)


def test_gpt_oss_alternates_windowed_and_full_attention():
    """transformers' GptOssConfig: layer_types[i] = sliding when (i + 1) % 2, window 128; a
    windowed layer's scores count each query's 128 keys, not the whole sequence."""
    oss = get_llm_model("gpt-oss-120b")
    assert [oss.attention_window(i) for i in range(4)] == [128, None, 128, None]
    full, windowed = layer_forward_flops(oss, 1, 1), layer_forward_flops(oss, 1, 0)
    assert windowed.scores == 2 * 4096 * 128 * 4096 and full.scores == 2 * 4096 * 4096 * 4096
    assert full.qkv == windowed.qkv and full.experts_fc1 == windowed.experts_fc1
    assert all(get_llm_model("llama3-8b").attention_window(i) is None for i in range(32))
    with pytest.raises(ConfigError, match="sliding_window must be a positive integer"):
        dataclasses.replace(oss, sliding_window=0)


def test_unknown_model_lists_valid_names():
    with pytest.raises(ConfigError) as err:
        get_llm_model("gpt5")
    assert "gpt5" in str(err.value) and "llama3-8b" in str(err.value)


def _check_rows(rows):
    for row in rows:
        cfg = model_from_row(row)
        assert cfg.ffn_hidden == 4 * cfg.hidden           # blank ffn_hidden: 4h
        assert cfg.params == pytest.approx(float(row["params_b"]) * 1e9, rel=0.03)
        assert model_for_row(row).name.startswith("megatron-gpt")


def test_model_from_row_builds_the_table_shapes():
    _check_rows(INLINE_ROWS)


@pytest.mark.skipif(MEASUREMENTS is None, reason="train_llm_megatron_a100_v100.csv not present")
def test_model_from_row_reads_the_measurement_table():
    with MEASUREMENTS.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) >= 22
    _check_rows(rows)


def test_model_from_row_refuses_blank_required_column():
    with pytest.raises(ConfigError, match="layers"):
        model_from_row({"model": "x", "layers": "", "hidden": 1024, "heads": 16,
                        "vocab": 51200, "seq_len": 2048})


def test_config_validation():
    with pytest.raises(ConfigError, match="kv_heads"):
        TransformerConfig("bad", 2, 1024, 16, 4096, 1000, 128, kv_heads=5)
    with pytest.raises(ConfigError, match="ffn_kind"):
        TransformerConfig("bad", 2, 1024, 16, 4096, 1000, 128, ffn_kind="relu")
    with pytest.raises(ConfigError, match="top_k"):
        MoEConfig(experts=2, top_k=3, expert_ffn_hidden=128)


# ------------------------------------------------------------------ FLOPs
@pytest.mark.parametrize("name", GPT_NAMES)
@pytest.mark.parametrize("recompute", [True, False])
def test_per_op_flops_equal_narayanan_closed_form(name, recompute):
    cfg = LLM_MODELS[name]
    per_op = model_flops_per_step(cfg, 512, "full" if recompute else "none")
    assert per_op == pytest.approx(narayanan_flops(cfg, 512, recompute), rel=1e-12)


def test_layer_flops_gqa_swiglu_are_twice_the_matmul_weights_per_token():
    cfg = get_llm_model("llama3-70b")
    f = layer_forward_flops(cfg, 1)
    weights = cfg.attention_params + cfg.dense_mlp_params      # no biases in Llama
    assert f.total - f.attention_core == pytest.approx(2 * cfg.seq_len * weights)
    assert f.attention_core == 4 * cfg.seq_len ** 2 * cfg.hidden


def test_moe_flops_use_top_k_experts():
    cfg = get_llm_model("mixtral-8x7b")
    f = layer_forward_flops(cfg, 1)
    per_token_active = (cfg.attention_params + 2 * cfg.mlp_params(14336) + cfg.router_params)
    assert f.total - f.attention_core == pytest.approx(2 * cfg.seq_len * per_token_active)


def test_selective_recompute_adds_only_the_attention_core():
    cfg = get_llm_model("gpt3-175b")
    base = model_flops_per_step(cfg, 8, "none")
    sel = model_flops_per_step(cfg, 8, "selective")
    core = sum(layer_forward_flops(cfg, 8, i).attention_core for i in range(cfg.layers))
    assert sel - base == pytest.approx(core)
    assert model_flops_per_step(cfg, 8, "full") > sel


# ------------------------------------------------------------------ activations
@pytest.mark.parametrize("t", [1, 2, 8])
@pytest.mark.parametrize("sp", [False, True])
@pytest.mark.parametrize("recompute", ["none", "selective"])
def test_activation_bytes_match_korthikanti_table2(t, sp, recompute):
    cfg = get_llm_model("gpt3-175b")
    for b in (1, 4):
        ours = activation_bytes_per_layer(cfg, b, tp=t, sequence_parallel=sp,
                                          recompute=recompute)
        table = korthikanti_activation_bytes(cfg.seq_len, b, cfg.hidden, cfg.heads, t,
                                             sp and t > 1, recompute)
        assert ours == pytest.approx(table)


def test_activation_bytes_known_values():
    cfg = get_llm_model("gpt3-175b")
    s, h, a = 2048, 12288, 96
    # no parallelism: sbh(34 + 5as/h)
    assert activation_bytes_per_layer(cfg, 1) == s * h * (34 + 5 * a * s / h)
    # tp 8 + SP + selective: 34 sbh / t  (Korthikanti et al. 2022, Table 2)
    assert activation_bytes_per_layer(cfg, 1, tp=8, sequence_parallel=True,
                                      recompute="selective") == pytest.approx(34 * s * h / 8)
    # full recompute keeps the input only: 2sbh (/t with SP)
    assert activation_bytes_per_layer(cfg, 1, tp=8, recompute="full") == 2 * s * h
    assert activation_bytes_per_layer(cfg, 1, tp=8, sequence_parallel=True,
                                      recompute="full") == 2 * s * h / 8
    # FlashAttention drops the 5as^2b scores, like selective recompute
    assert activation_bytes_per_layer(cfg, 1, flash=True) == \
        activation_bytes_per_layer(cfg, 1, recompute="selective")
    # context parallelism halves everything at cp = 2 (scores: s/cp x s)
    assert activation_bytes_per_layer(cfg, 1, cp=2) == pytest.approx(
        activation_bytes_per_layer(cfg, 1) / 2)


# ------------------------------------------------------------------ memory
def test_zero_paper_7_5b_example():
    # Rajbhandari et al. 2020, Figure 1: 7.5B parameters, Adam, mixed precision (16 B/param)
    psi = 7.5e9
    for stage, nd, expected_gb in ((1, 1, 120.0), (1, 64, 31.4), (2, 64, 16.6), (3, 64, 1.88)):
        layout = Layout(zero_stage=stage, dp=nd, global_batch=nd)
        total = sum(_state_bytes(layout, psi, nd))
        assert total / 1e9 == pytest.approx(expected_gb, rel=0.01)


def test_megatron_distributed_optimizer_bytes_per_parameter():
    # NVIDIA/Megatron-LM docs: bf16 params + fp32 grads: 18 (non-distributed), 6 + 12/d
    assert sum(_state_bytes(Layout(), 1, 1)) == 18
    assert sum(_state_bytes(Layout(distributed_optimizer=True), 1, 8)) == pytest.approx(6 + 12 / 8)
    # fp16 params + fp16 grads: 20, 4 + 16/d
    assert sum(_state_bytes(Layout(precision="fp16"), 1, 1)) == 20
    assert sum(_state_bytes(Layout(precision="fp16", distributed_optimizer=True), 1, 4)) == \
        pytest.approx(4 + 16 / 4)


def test_interleaved_in_flight_matches_korthikanti():
    for pp, v in ((4, 2), (8, 3), (2, 4)):
        layout = Layout(pp=pp, virtual_stages=v, pipeline="interleaved", dp=1,
                        global_batch=8 * pp)
        assert in_flight_chunks(layout, 0) / v == pytest.approx(pp * (1 + (pp - 1) / (pp * v)))
    onefoneb = Layout(pp=4, global_batch=16)
    assert [in_flight_chunks(onefoneb, s) for s in range(4)] == [4, 3, 2, 1]
    assert in_flight_chunks(Layout(pp=4, global_batch=16, pipeline="gpipe"), 2) == 16


def test_memory_first_stage_is_the_largest_and_parts_are_positive():
    cfg = get_llm_model("gpt3-175b")
    layout = Layout(tp=8, pp=8, dp=2, global_batch=64, sequence_parallel=True,
                    recompute="selective", distributed_optimizer=True)
    mem = memory_per_gpu(cfg, layout, "h100-sxm5-80gb")
    assert mem.stage == 0 and mem.fits
    assert all(v > 0 for v in mem.items.values())


def test_check_memory_refuses_in_one_line():
    cfg = get_llm_model("llama3-70b")
    with pytest.raises(ConfigError) as err:
        check_memory(cfg, Layout(tp=1, dp=8, global_batch=8), "a100-sxm4-80gb")
    message = str(err.value)
    assert "\n" not in message and "GiB missing" in message and "optimizer states" in message
