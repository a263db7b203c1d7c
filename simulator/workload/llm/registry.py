"""Named transformer configurations, each with the publication its numbers come from.

``LLM_MODELS[name]`` is a :class:`~.model.TransformerConfig`; :func:`get_llm_model` refuses an
unknown name with the list of valid ones. ``published_params`` is the count the source quotes;
``tests/test_llm_model.py`` checks our count against it (within 3 %).

Sources (shapes copied from the tables named in each ``source``):

* GPT-3: Brown et al. 2020, "Language Models are Few-Shot Learners", Table 2.1 (n_layers,
  d_model, n_heads, d_head; 2048-token context; GPT-2's 50,257-token BPE vocabulary, learned
  positions, tied output layer, LayerNorm, biases).
* Llama 2: Touvron et al. 2023, "Llama 2: Open Foundation and Fine-Tuned Chat Models", Table 1
  and Section 2.2, and Meta's model cards / ``params.json`` (dim, n_layers, n_heads, n_kv_heads,
  ffn 11008/13824/28672, vocabulary 32,000, 4,096 context, RMSNorm, RoPE, SwiGLU, untied).
* Llama 3 / 3.1: Llama Team, "The Llama 3 Herd of Models", 2024 (arXiv 2407.21783), Table 3
  (layers, model dim, FFN dim, heads, key/value heads, vocabulary 128K = 128,256 in the released
  configs; 8,192-token pre-training context).
* Mixtral 8x7B: Jiang et al. 2024, "Mixtral of Experts" (arXiv 2401.04088), Table 1 (dim 4096,
  32 layers, head_dim 128, hidden_dim 14336, 32 heads, 8 kv heads, context 32768, vocabulary
  32000, 8 experts, top-2); "47B total, 13B active parameters".
* DeepSeekMoE 16B: Dai et al. 2024, "DeepSeekMoE" (arXiv 2401.06066), Section 5.1 and the
  released ``config.json`` of deepseek-moe-16b-base (28 layers, hidden 2048, 16 heads, first
  layer dense with FFN 10944, then 64 routed experts of 1408 with top-6 plus 2 shared experts,
  vocabulary 102400, 4096 context): "16.4B total parameters", 2.8B activated.
* DeepSeek-V3 (``deepseek-v3``): DeepSeek-AI 2024, "DeepSeek-V3 Technical Report" (arXiv
  2412.19437), Section 4.2: 61 layers, hidden 7168, 128 heads of 128 (+ 64 rotary) with
  multi-latent attention (query latent 1536, key-value latent 512, value heads 128), the first
  three layers dense (FFN 18432), then 1 shared and 256 routed experts of 2048 with top-8, one
  multi-token-prediction module; "671B total parameters ... 37B are activated for each
  token", and "685B, which includes 671B of the Main Model weights and 14B of the Multi-Token
  Prediction (MTP) Module weights" (Section 1 / the model card). The shapes as Megatron-Bridge
  trains them (NVIDIA-NeMo/Megatron-Bridge @21d102f5: ``DeepSeekV3Bridge``,
  ``src/megatron/bridge/models/deepseek/deepseek_v3_bridge.py`` lines 59-98: RMSNorm, SwiGLU,
  no biases, untied output layer, ``mtp_num_layers`` 1; the released ``config.json`` values
  in ``tests/unit_tests/models/deepseek/test_deepseek_bridges.py`` lines 201-264: vocabulary
  129,280, ``first_k_dense_replace`` 3). Its router's sigmoid scores and group-limited top-k
  are not counted (elementwise work on ``T x 256`` scores).
* Qwen3 MoE (``qwen3-30b-a3b``, ``qwen3-235b-a22b``): Qwen Team 2025, "Qwen3 Technical Report"
  (arXiv 2505.09388), Table 2 (layers 48 / 94, query / key-value heads 32/4 and 64/4, 128 experts
  of which 8 are activated, no shared experts; 30.5B / 235B total parameters), and the shapes
  Megatron-Bridge trains them with (NVIDIA-NeMo/Megatron-Bridge
  ``src/megatron/bridge/models/qwen/qwen_provider.py`` @07d0d14a, ``Qwen3MoEModelProvider30B_A3B``
  and ``..235B_A22B``: hidden 2048 / 4096, ``kv_channels`` 128 (so the query width 4096 / 8192
  is not the hidden size), ``moe_ffn_hidden_size`` 768 / 1536, vocabulary 151,936, untied
  output layer, RMSNorm, SwiGLU, RoPE, no biases; QK-norm, an RMSNorm per head on the queries
  and keys, is not counted: ``2 x 128`` parameters a layer and elementwise work only).
* GPT-OSS 120B (``gpt-oss-120b``): OpenAI 2025, "gpt-oss-120b & gpt-oss-20b Model Card" (arXiv
  2508.10925: 116.8B total, 5.1B active parameters; "alternating dense and locally banded sparse
  attention patterns") and the configuration huggingface/transformers
  ``src/transformers/models/gpt_oss/configuration_gpt_oss.py`` (@02b8f42b) gives as the 120B
  defaults: 36 layers, hidden 2880, 64 query / 8 key-value heads of 64 (query width 4096), 128
  experts of 2880 with top-4, SwiGLU (clamped), vocabulary 201,088, untied, RMSNorm, attention
  and expert biases, sliding window 128 on layers 0, 2, 4, ... (``layer_types``: sliding when
  ``(i + 1) % 2``), full attention on the others. Its learned attention sinks (one logit per
  head) and router bias are not counted.
* Megatron GPT (``megatron-gpt-*``): Narayanan et al. SC 2021 (arXiv 2104.04473), Table 1
  (layers, hidden, heads; vocabulary 51,200, sequence 2,048) - the rows of
  ``train_llm_megatron_a100_v100.csv``. Megatron GPT-2 (``megatron-gpt2-*``): NVIDIA/Megatron-LM
  README of 2020-09 (commit 5281919), the weak-scaling table (sequence 1,024, vocabulary 51,200).
"""

from __future__ import annotations

import math

from simulator.errors import ConfigError, unknown_name

from .model import MoEConfig, TransformerConfig

__all__ = ["LLM_MODELS", "get_llm_model", "model_from_row", "model_for_row"]

_GPT3 = "Brown et al. 2020, 'Language Models are Few-Shot Learners', Table 2.1"
_LLAMA2 = ("Touvron et al. 2023, 'Llama 2', Table 1 / Section 2.2, and Meta's released "
           "params.json")
_LLAMA3 = "Llama Team 2024, 'The Llama 3 Herd of Models' (arXiv 2407.21783), Table 3"
_QWEN3 = ("Qwen Team 2025, 'Qwen3 Technical Report' (arXiv 2505.09388), Table 2; shapes of "
          "Megatron-Bridge qwen_provider.py @07d0d14a (Qwen3MoEModelProvider30B_A3B / 235B_A22B)")
_NARAYANAN = "Narayanan et al. SC21 (arXiv 2104.04473), Table 1"
_MEGATRON_2020 = "NVIDIA/Megatron-LM README 2020-09 (commit 5281919), weak-scaling table"


def _gpt3(name, layers, hidden, heads, published, note=""):
    return TransformerConfig(
        name=name, layers=layers, hidden=hidden, heads=heads, ffn_hidden=4 * hidden,
        vocab=50_257, seq_len=2048, ffn_kind="gelu", tied_embeddings=True, positions="learned",
        norm="layernorm", bias=True, published_params=published, source=_GPT3 + note)


def _llama(name, layers, hidden, heads, kv_heads, ffn, vocab, seq, published, source):
    return TransformerConfig(
        name=name, layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, ffn_hidden=ffn,
        vocab=vocab, seq_len=seq, ffn_kind="swiglu", tied_embeddings=False, positions="rope",
        norm="rmsnorm", bias=False, published_params=published, source=source)


def _megatron_gpt(name, layers, hidden, heads, seq, published, source):
    return TransformerConfig(
        name=name, layers=layers, hidden=hidden, heads=heads, ffn_hidden=4 * hidden,
        vocab=51_200, seq_len=seq, ffn_kind="gelu", tied_embeddings=True, positions="learned",
        norm="layernorm", bias=True, published_params=published, source=source)


def _rows():
    yield _gpt3("gpt3-350m", 24, 1024, 16, 350e6)
    yield _gpt3("gpt3-1.3b", 24, 2048, 16, 1.3e9,
                "; the table prints 24 heads of d_head 128, which does not multiply to d_model "
                "2048: 16 heads of 128 are used")
    yield _gpt3("gpt3-2.7b", 32, 2560, 32, 2.7e9)
    yield _gpt3("gpt3-6.7b", 32, 4096, 32, 6.7e9)
    yield _gpt3("gpt3-13b", 40, 5120, 40, 13.0e9,
                "; the table prints d_model 5140, a typo for 40 heads x 128 = 5120")
    yield _gpt3("gpt3-175b", 96, 12288, 96, 175.0e9)

    yield _llama("llama2-7b", 32, 4096, 32, 32, 11008, 32_000, 4096, 6.74e9, _LLAMA2)
    yield _llama("llama2-13b", 40, 5120, 40, 40, 13824, 32_000, 4096, 13.0e9, _LLAMA2)
    yield _llama("llama2-70b", 80, 8192, 64, 8, 28672, 32_000, 4096, 70e9, _LLAMA2)
    yield _llama("llama3-8b", 32, 4096, 32, 8, 14336, 128_256, 8192, 8.03e9, _LLAMA3)
    yield _llama("llama3-70b", 80, 8192, 64, 8, 28672, 128_256, 8192, 70.6e9, _LLAMA3)
    yield _llama("llama3-405b", 126, 16384, 128, 8, 53248, 128_256, 8192, 405e9, _LLAMA3)

    yield TransformerConfig(
        name="mixtral-8x7b", layers=32, hidden=4096, heads=32, kv_heads=8, ffn_hidden=14336,
        vocab=32_000, seq_len=32768, ffn_kind="swiglu", tied_embeddings=False,
        positions="rope", norm="rmsnorm", bias=False,
        moe=MoEConfig(experts=8, top_k=2, expert_ffn_hidden=14336),
        published_params=46.7e9,
        source="Jiang et al. 2024, 'Mixtral of Experts' (arXiv 2401.04088), Table 1; 46.7B "
               "total (the paper's '47B'), 12.9B active")
    yield TransformerConfig(
        name="deepseekmoe-16b", layers=28, hidden=2048, heads=16, ffn_hidden=10944,
        vocab=102_400, seq_len=4096, ffn_kind="swiglu", tied_embeddings=False,
        positions="rope", norm="rmsnorm", bias=False,
        moe=MoEConfig(experts=64, top_k=6, expert_ffn_hidden=1408, shared_experts=2,
                      first_dense_layers=1),
        published_params=16.4e9,
        source="Dai et al. 2024, 'DeepSeekMoE' (arXiv 2401.06066), Section 5.1, and "
               "deepseek-moe-16b-base config.json; 16.4B total, 2.8B activated")

    for name, layers, hidden, heads, expert_ffn, published in (
            ("qwen3-30b-a3b", 48, 2048, 32, 768, 30.5e9),
            ("qwen3-235b-a22b", 94, 4096, 64, 1536, 235e9)):
        yield TransformerConfig(
            name=name, layers=layers, hidden=hidden, heads=heads, kv_heads=4, head_dim=128,
            ffn_hidden=expert_ffn, vocab=151_936, seq_len=4096, ffn_kind="swiglu",
            tied_embeddings=False, positions="rope", norm="rmsnorm", bias=False,
            moe=MoEConfig(experts=128, top_k=8, expert_ffn_hidden=expert_ffn),
            published_params=published, source=_QWEN3)

    yield TransformerConfig(
        name="deepseek-v3", layers=61, hidden=7168, heads=128, head_dim=128, ffn_hidden=18432,
        vocab=129_280, seq_len=4096, ffn_kind="swiglu", tied_embeddings=False,
        positions="rope", norm="rmsnorm", bias=False,
        moe=MoEConfig(experts=256, top_k=8, expert_ffn_hidden=2048, shared_experts=1,
                      first_dense_layers=3),
        q_lora_rank=1536, kv_lora_rank=512, rope_head_dim=64, v_head_dim=128, mtp_layers=1,
        published_params=671e9,
        source="DeepSeek-AI 2024, 'DeepSeek-V3 Technical Report' (arXiv 2412.19437), Section "
               "4.2: 671B total (685B with the 14B MTP module), 37B activated; shapes of "
               "Megatron-Bridge DeepSeekV3Bridge @21d102f5")
    yield TransformerConfig(
        name="gpt-oss-120b", layers=36, hidden=2880, heads=64, kv_heads=8, head_dim=64,
        ffn_hidden=2880, vocab=201_088, seq_len=4096, ffn_kind="swiglu", tied_embeddings=False,
        positions="rope", norm="rmsnorm", bias=True,
        moe=MoEConfig(experts=128, top_k=4, expert_ffn_hidden=2880),
        sliding_window=128, full_attention_every=2, published_params=116.8e9,
        source="OpenAI 2025, gpt-oss model card (arXiv 2508.10925): 116.8B total, 5.1B active; "
               "shapes of huggingface/transformers configuration_gpt_oss.py @02b8f42b")

    for params_b, layers, hidden, heads in (
            (1.7, 24, 2304, 24), (3.6, 30, 3072, 32), (7.5, 36, 4096, 32),
            (18.4, 40, 6144, 48), (39.1, 48, 8192, 64), (76.1, 60, 10240, 80),
            (145.6, 80, 12288, 96), (310.1, 96, 16384, 128), (529.6, 105, 20480, 128),
            (1008.0, 128, 25600, 160)):
        yield _megatron_gpt(f"megatron-gpt-{params_b:g}b", layers, hidden, heads, 2048,
                            params_b * 1e9, _NARAYANAN)
    for label, params_b, layers, hidden, heads in (
            ("1.2b", 1.16, 24, 1920, 15), ("2b", 2.03, 30, 2304, 18),
            ("4b", 4.24, 36, 3072, 24), ("8b", 8.67, 42, 4096, 32)):
        yield _megatron_gpt(f"megatron-gpt2-{label}", layers, hidden, heads, 1024,
                            params_b * 1e9, _MEGATRON_2020)


LLM_MODELS: dict[str, TransformerConfig] = {cfg.name: cfg for cfg in _rows()}


def get_llm_model(name: str) -> TransformerConfig:
    """The registered configuration called ``name``; an unknown name lists the valid ones."""
    if not isinstance(name, str) or name not in LLM_MODELS:
        raise unknown_name("LLM model", name, LLM_MODELS)
    return LLM_MODELS[name]


def _int_cell(row, column: str, default=None):
    value = row.get(column) if hasattr(row, "get") else row[column]
    if value is None or (isinstance(value, float) and math.isnan(value)) or \
            (isinstance(value, str) and not value.strip()):
        if default is not None:
            return default
        raise ConfigError(f"model row {row.get('model', '?')!r}: column {column!r} is blank")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"model row: column {column!r} is not a number: {value!r}") from None
    if number != int(number) or number < 1:
        raise ConfigError(f"model row: column {column!r} must be a positive integer, "
                          f"not {value!r}")
    return int(number)


def model_from_row(row) -> TransformerConfig:
    """A GPT-style configuration from a table row (a dict or a pandas Series) with the columns of
    ``train_llm_megatron_a100_v100.csv``: ``layers, hidden, heads, ffn_hidden`` (blank: ``4h``),
    ``vocab, seq_len``, and optionally ``model`` (the name) and ``params_b`` (published billions).
    Megatron GPT conventions: GELU MLP, learned positions, LayerNorm, biases, tied embeddings."""
    hidden = _int_cell(row, "hidden")
    name = str(row.get("model", "") or "table-row")
    published = row.get("params_b")
    try:
        published = float(published) * 1e9 if published not in (None, "") else None
        if published is not None and math.isnan(published):
            published = None
    except (TypeError, ValueError):
        published = None
    return TransformerConfig(
        name=name, layers=_int_cell(row, "layers"), hidden=hidden, heads=_int_cell(row, "heads"),
        ffn_hidden=_int_cell(row, "ffn_hidden", 4 * hidden), vocab=_int_cell(row, "vocab"),
        seq_len=_int_cell(row, "seq_len"), ffn_kind="gelu", tied_embeddings=True,
        positions="learned", norm="layernorm", bias=True, published_params=published,
        source=str(row.get("source", "") or "table row"))


def model_for_row(row) -> TransformerConfig:
    """The registered model whose shape matches the row, else :func:`model_from_row`."""
    built = model_from_row(row)
    for cfg in LLM_MODELS.values():
        if (cfg.layers, cfg.hidden, cfg.heads, cfg.ffn_hidden, cfg.vocab, cfg.seq_len,
                cfg.ffn_kind) == (built.layers, built.hidden, built.heads, built.ffn_hidden,
                                  built.vocab, built.seq_len, built.ffn_kind):
            return cfg
    return built
