"""A decoder-only transformer as numbers: parameters, FLOPs per operation, activation bytes.

Everything here is a closed form of the architecture (no device, no time). Sources:

* Parameters and FLOPs of GPT-style models: Narayanan et al., "Efficient Large-Scale Language
  Model Training on GPU Clusters Using Megatron-LM", SC 2021 (arXiv 2104.04473), Section 5.1 and
  Appendix: a layer's forward is ``24·B·s·h² + 4·B·s²·h`` FLOPs (GEMMs counted as 2·m·n·k), the
  logit layer ``2·B·s·h·V``; backward is twice the forward; with full activation recomputation one
  more forward of every layer, hence their equation (3)::

      F = 96·B·s·l·h² · (1 + s/(6h) + V/(16·l·h))          (with recomputation)
      F = 72·B·s·l·h² · (1 + s/(6h) + V/(12·l·h))          (without: 3 forwards' worth)

  This module counts the same FLOPs *per operation* (QKV, attention scores, attention over V,
  output projection, MLP GEMMs, router, experts, logits) so that grouped-query attention
  (Ainslie et al. 2023), gated MLPs (SwiGLU: Shazeer 2020; three ``h x f`` matrices) and
  mixture-of-experts (top-k routed, Fedus et al. 2021 / Jiang et al. 2024 / Dai et al. 2024)
  follow by construction; :func:`narayanan_flops` is the closed form, and the tests check that
  the per-op sum equals it for GPT shapes. Megatron-LM's own counter
  (``megatron/training/training.py: num_floating_point_operations``) counts the same GEMMs but
  halves the attention core for the causal mask; we follow Narayanan (no causal discount) for
  *model* FLOPs so that TFLOP/s compare with the published tables, and halve it only for the
  kernel *work* of a causal FlashAttention kernel (see :mod:`.compute`).
* Parameter counts: Megatron-LM's ``megatron/training/theoretical_memory_usage.py`` (attention
  ``2h²(1 + kv/heads)``, MLP ``2·h·f`` or ``3·h·f`` for gated MLPs, norms, router ``h·E``,
  embeddings ``V·h``, twice when untied), plus learned position embeddings ``s·h`` for GPT-2/3
  (Radford et al. 2019; Brown et al. 2020) and biases where the model has them.
* Activation memory: Korthikanti et al., "Reducing Activation Recomputation in Large Transformer
  Models", MLSys 2023 (arXiv 2205.05198), Section 4 and Table 2: per layer
  ``s·b·h·(34 + 5·a·s/h)`` bytes (16-bit activations, 1-byte dropout masks); with tensor
  parallelism ``t`` ``s·b·h·(10 + 24/t + 5·a·s/(h·t))``; with sequence parallelism
  ``s·b·h/t·(34 + 5·a·s/h)``; with selective recomputation the ``5·a·s/h`` term goes; with full
  recomputation only the layer input ``2·s·b·h`` is kept. :func:`activation_bytes_per_layer`
  counts the same tensors one by one (so GQA, SwiGLU, MoE and context parallelism follow) and
  :func:`korthikanti_activation_bytes` is the table, for the tests.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.errors import ConfigError

__all__ = [
    "FFN_KINDS", "MoEConfig", "TransformerConfig", "LayerFlops", "layer_forward_flops",
    "logits_forward_flops", "mtp_forward_flops", "forward_flops", "model_flops_per_step",
    "narayanan_flops",
    "activation_bytes_per_layer", "korthikanti_activation_bytes", "embedding_activation_bytes",
    "output_activation_bytes", "RECOMPUTE_POLICIES",
]

FFN_KINDS = ("gelu", "swiglu")
RECOMPUTE_POLICIES = ("none", "selective", "full")

#: Bytes of a 16-bit activation element and of a dropout mask element (Korthikanti et al. 2022,
#: Section 4.1: "we assume activations are stored in 16-bit ... dropout masks take 1 byte").
ACT_BYTES = 2
MASK_BYTES = 1
#: Bytes per element of a GEMM input Transformer Engine keeps for backward under fp8: its
#: quantized column-wise copy (NVIDIA/TransformerEngine @d0067d0d
#: ``transformer_engine/pytorch/module/linear.py`` lines 596-621: "Discard row-wise data since it
#: is not needed in backward pass", ``saved_inputmat = inputmat``; the scales, one per tensor or
#: one byte per 32 elements under MXFP8, are left out).
FP8_SAVED_BYTES = 1


@dataclass(frozen=True)
class MoEConfig:
    """Mixture-of-experts MLP: ``experts`` routed experts of ``expert_ffn_hidden``, each token sent
    to ``top_k`` of them (tokens beyond ``capacity_factor`` x the even share are dropped, so at
    most ``top_k x capacity_factor`` expert slots per token are computed and moved); plus
    ``shared_experts`` always-on experts (DeepSeekMoE) of ``shared_ffn_hidden`` each (default
    ``expert_ffn_hidden``). Layer ``i`` is an MoE layer when ``i >= first_dense_layers`` and
    ``(i - first_dense_layers) % moe_layer_freq == 0``; the others are dense with the model's
    ``ffn_hidden``."""

    experts: int
    top_k: int
    expert_ffn_hidden: int
    capacity_factor: float = 1.0
    shared_experts: int = 0
    shared_ffn_hidden: int | None = None
    moe_layer_freq: int = 1
    first_dense_layers: int = 0

    def __post_init__(self):
        for name in ("experts", "top_k", "expert_ffn_hidden", "moe_layer_freq"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"MoE {name} must be a positive integer, not {value!r}")
        if self.top_k > self.experts:
            raise ConfigError(f"MoE top_k {self.top_k} exceeds the {self.experts} experts")
        if not self.capacity_factor > 0:
            raise ConfigError(f"MoE capacity_factor must be > 0, not {self.capacity_factor!r}")
        if self.shared_experts < 0 or self.first_dense_layers < 0:
            raise ConfigError("MoE shared_experts and first_dense_layers must be >= 0")

    @property
    def shared_hidden(self) -> int:
        return self.shared_ffn_hidden or self.expert_ffn_hidden


@dataclass(frozen=True)
class TransformerConfig:
    """A decoder-only transformer (GPT, Llama, Mixtral, DeepSeekMoE shapes).

    ``kv_heads``: key/value heads (grouped-query attention; default ``heads``: multi-head).
    ``head_dim``: default ``hidden // heads``. ``ffn_kind``: ``"gelu"`` (two ``h x f`` GEMMs) or
    ``"swiglu"`` (gate and up ``h x f`` and down ``f x h``). ``positions``: ``"learned"`` adds an
    ``seq_len x h`` table (GPT-2/3), ``"rope"`` none. ``norm``: ``"layernorm"`` (weight + bias) or
    ``"rmsnorm"`` (weight). ``bias``: linear layers have biases (GPT) or not (Llama).
    ``published_params``: the count the source quotes, for the tests.
    ``sliding_window``: the keys a query of a windowed layer sees (its own and the ``w - 1``
    before it; Beltagy et al. 2020's local attention, GPT-OSS's alternating banded layers), None
    for full causal attention everywhere; ``full_attention_every``: with a window, every
    ``k``-th layer (1-based) attends fully (Megatron-Core's ``window_attn_skip_freq``; GPT-OSS:
    2, layers 0, 2, 4, ... windowed), None: every layer windowed.

    Multi-latent attention (MLA; DeepSeek-AI 2024, "DeepSeek-V2", arXiv 2405.04434, Section
    2.1, and "DeepSeek-V3", arXiv 2412.19437, Section 2.1.1) when ``kv_lora_rank`` is given: the
    layer input is projected down to a latent of ``kv_lora_rank`` (plus a key part of
    ``rope_head_dim`` shared by all heads, which carries the rotary positions), normalised, and
    projected up to every head's key (``head_dim``, the part without positions) and value
    (``v_head_dim``); queries likewise through a latent of ``q_lora_rank`` (None: one direct
    projection). A head's query and key are ``head_dim + rope_head_dim`` wide, its value
    ``v_head_dim``; every head has its own key and value (``kv_heads`` = ``heads``).

    ``mtp_layers``: multi-token prediction modules after the last layer (DeepSeek-V3, Section
    2.2; Megatron-Core ``transformer/multi_token_prediction.py`` @44151194, lines 808-1046): each
    looks the shifted tokens up in the (shared) embedding again, normalises that and the hidden
    state (``enorm``, ``hnorm``), projects their concatenation ``2h -> h`` (``eh_proj``, column
    parallel), runs one transformer layer of the last layer's kind, a final norm, and the
    model's own output layer and cross-entropy (``process_mtp_loss``).
    """

    name: str
    layers: int
    hidden: int
    heads: int
    ffn_hidden: int
    vocab: int
    seq_len: int
    kv_heads: int | None = None
    head_dim: int | None = None
    ffn_kind: str = "gelu"
    tied_embeddings: bool = True
    positions: str = "learned"
    norm: str = "layernorm"
    bias: bool = True
    moe: MoEConfig | None = None
    published_params: float | None = None
    source: str = ""
    sliding_window: int | None = None
    full_attention_every: int | None = None
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    rope_head_dim: int = 0
    v_head_dim: int | None = None
    mtp_layers: int = 0

    def __post_init__(self):
        for name in ("layers", "hidden", "heads", "ffn_hidden", "vocab", "seq_len"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"model {self.name!r}: {name} must be a positive integer, "
                                  f"not {value!r}")
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)
        if self.head_dim is None:
            if self.hidden % self.heads:
                raise ConfigError(f"model {self.name!r}: hidden {self.hidden} is not divisible "
                                  f"by heads {self.heads}; give head_dim")
            object.__setattr__(self, "head_dim", self.hidden // self.heads)
        if self.kv_heads < 1 or self.heads % self.kv_heads:
            raise ConfigError(f"model {self.name!r}: heads {self.heads} must be a multiple of "
                              f"kv_heads {self.kv_heads}")
        if self.ffn_kind not in FFN_KINDS:
            raise ConfigError(f"model {self.name!r}: ffn_kind must be one of "
                              f"{', '.join(FFN_KINDS)}, not {self.ffn_kind!r}")
        if self.positions not in ("learned", "rope"):
            raise ConfigError(f"model {self.name!r}: positions must be 'learned' or 'rope'")
        if self.norm not in ("layernorm", "rmsnorm"):
            raise ConfigError(f"model {self.name!r}: norm must be 'layernorm' or 'rmsnorm'")
        for name in ("sliding_window", "full_attention_every", "q_lora_rank", "kv_lora_rank",
                     "v_head_dim"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 1):
                raise ConfigError(f"model {self.name!r}: {name} must be a positive integer or "
                                  f"None, not {value!r}")
        for name in ("rope_head_dim", "mtp_layers"):
            r = getattr(self, name)
            if isinstance(r, bool) or not isinstance(r, int) or r < 0:
                raise ConfigError(f"model {self.name!r}: {name} must be an integer >= 0, "
                                  f"not {r!r}")
        r = self.rope_head_dim
        if not self.mla:
            extra = [n for n in ("q_lora_rank", "v_head_dim") if getattr(self, n) is not None]
            if r:
                extra.append("rope_head_dim")
            if extra:
                raise ConfigError(f"model {self.name!r}: {', '.join(extra)} belong to "
                                  f"multi-latent attention, which needs kv_lora_rank")
        elif self.kv_heads != self.heads:
            raise ConfigError(f"model {self.name!r}: multi-latent attention gives every head "
                              f"its own key and value: kv_heads must equal heads "
                              f"({self.heads}), not {self.kv_heads}")

    def attention_window(self, index: int) -> int | None:
        """The window of layer ``index``'s attention (keys per query at most), None for full
        causal attention."""
        if self.sliding_window is None:
            return None
        k = self.full_attention_every
        if k is not None and (index + 1) % k == 0:
            return None
        return self.sliding_window

    # ---------------------------------------------------------------- shapes
    @property
    def mla(self) -> bool:
        """Multi-latent attention (``kv_lora_rank`` given)."""
        return self.kv_lora_rank is not None

    @property
    def qk_head_dim(self) -> int:
        """A head's query and key width: ``head_dim`` (+ ``rope_head_dim`` under MLA)."""
        return self.head_dim + self.rope_head_dim

    @property
    def value_head_dim(self) -> int:
        """A head's value (and output) width: ``v_head_dim``, else ``head_dim``."""
        return self.v_head_dim or self.head_dim

    @property
    def q_dim(self) -> int:
        """Width of the queries: heads x qk_head_dim (= hidden for standard shapes)."""
        return self.heads * self.qk_head_dim

    @property
    def kv_dim(self) -> int:
        """Width of the keys: kv_heads x qk_head_dim (the values' too, without MLA)."""
        return self.kv_heads * self.qk_head_dim

    @property
    def v_dim(self) -> int:
        """Width of the values: kv_heads x value_head_dim."""
        return self.kv_heads * self.value_head_dim

    @property
    def o_dim(self) -> int:
        """Width of the attention's output, the output projection's input: heads x
        value_head_dim (= q_dim without MLA)."""
        return self.heads * self.value_head_dim

    def attention_gemm_flops(self, tokens: float) -> float:
        """Forward FLOPs of the projections that make the queries, keys and values of
        ``tokens`` tokens (not the output projection): one ``h x (q + 2kv)`` GEMM, or under MLA
        the down projections (``h x q_lora``; ``h x (kv_lora + rope)``) and the up projections
        (``q_lora x q``; ``kv_lora x heads·(head_dim + v_head_dim)``)."""
        h = self.hidden
        if not self.mla:
            return 2 * tokens * h * (self.q_dim + self.kv_dim + self.v_dim)
        ql = self.q_lora_rank
        q = h * self.q_dim if ql is None else h * ql + ql * self.q_dim
        kv = (h * (self.kv_lora_rank + self.rope_head_dim)
              + self.kv_lora_rank * self.heads * (self.head_dim + self.value_head_dim))
        return 2 * tokens * (q + kv)

    @property
    def gated(self) -> bool:
        return self.ffn_kind == "swiglu"

    def fc1_width(self, ffn: int) -> int:
        """Output width of the first MLP GEMM: ``f``, or ``2f`` for a gated MLP (gate + up)."""
        return 2 * ffn if self.gated else ffn

    def is_moe_layer(self, index: int) -> bool:
        m = self.moe
        if m is None or index < m.first_dense_layers:
            return False
        return (index - m.first_dense_layers) % m.moe_layer_freq == 0

    @property
    def moe_layers(self) -> int:
        return sum(self.is_moe_layer(i) for i in range(self.layers))

    @property
    def dense_layers(self) -> int:
        return self.layers - self.moe_layers

    # ---------------------------------------------------------------- parameters
    @property
    def norm_params(self) -> int:
        """One norm: weight (+ bias for LayerNorm)."""
        return self.hidden * (2 if self.norm == "layernorm" else 1)

    @property
    def attention_replicated_params(self) -> int:
        """Attention parameters every tensor-parallel rank holds whole: under MLA the down
        projections (Megatron-Core builds them ``parallel_mode='duplicated'``) and the latents'
        norms; 0 otherwise."""
        if not self.mla:
            return 0
        ql = self.q_lora_rank or 0
        kvl = self.kv_lora_rank
        return self.hidden * (ql + kvl + self.rope_head_dim) + ql + kvl

    @property
    def attention_params(self) -> int:
        """QKV and output projections (+ biases): ``h·(q + 2kv) + q·h``; ``4h²`` for MHA. Under
        MLA the down and up projections of :meth:`attention_gemm_flops` and the latents' two
        RMSNorms (``q_lora + kv_lora``)."""
        h = self.hidden
        w = self.attention_gemm_flops(1) // 2 + self.o_dim * h
        if self.mla:
            w += self.kv_lora_rank + (self.q_lora_rank or 0)
        b = (self.q_dim + self.kv_dim + self.v_dim + h) if self.bias else 0
        return w + b

    def mlp_params(self, ffn: int) -> int:
        """One MLP of inner width ``ffn``: ``2·h·f`` (+ biases), ``3·h·f`` gated."""
        h = self.hidden
        w = h * self.fc1_width(ffn) + ffn * h
        b = (self.fc1_width(ffn) + h) if self.bias else 0
        return w + b

    @property
    def dense_mlp_params(self) -> int:
        return self.mlp_params(self.ffn_hidden)

    @property
    def router_params(self) -> int:
        return self.hidden * self.moe.experts if self.moe else 0

    @property
    def expert_params_per_layer(self) -> int:
        """Routed experts of one MoE layer (sharded over expert-parallel ranks)."""
        return self.moe.experts * self.mlp_params(self.moe.expert_ffn_hidden) if self.moe else 0

    @property
    def shared_expert_params_per_layer(self) -> int:
        m = self.moe
        return m.shared_experts * self.mlp_params(m.shared_hidden) if m else 0

    def layer_params(self, index: int) -> int:
        """All parameters of transformer layer ``index`` (two norms included)."""
        base = self.attention_params + 2 * self.norm_params
        if self.is_moe_layer(index):
            return (base + self.router_params + self.expert_params_per_layer
                    + self.shared_expert_params_per_layer)
        return base + self.dense_mlp_params

    def layer_expert_params(self, index: int) -> int:
        """The routed-expert part of layer ``index`` (0 for a dense layer)."""
        return self.expert_params_per_layer if self.is_moe_layer(index) else 0

    @property
    def embedding_params(self) -> int:
        """Token embedding ``V·h`` (+ learned positions ``s·h``)."""
        pos = self.seq_len * self.hidden if self.positions == "learned" else 0
        return self.vocab * self.hidden + pos

    @property
    def head_params(self) -> int:
        """Final norm + output projection (0 extra when tied to the token embedding)."""
        return self.norm_params + (0 if self.tied_embeddings else self.vocab * self.hidden)

    @property
    def params(self) -> int:
        """Total parameters."""
        return (sum(self.layer_params(i) for i in range(self.layers)) + self.embedding_params
                + self.head_params)

    @property
    def mtp_layer_params(self) -> int:
        """One multi-token prediction module's own weights: ``enorm``, ``hnorm``, the final norm,
        ``eh_proj`` (``2h x h``) and a transformer layer of the last layer's kind; the embedding
        and the output layer are the model's."""
        h = self.hidden
        return 3 * self.norm_params + 2 * h * h + self.layer_params(self.layers - 1)

    @property
    def active_params(self) -> int:
        """Parameters one token passes through (top-k of the routed experts)."""
        if not self.moe:
            return self.params
        m = self.moe
        inactive = (m.experts - m.top_k) * self.mlp_params(m.expert_ffn_hidden)
        return self.params - inactive * self.moe_layers


# ------------------------------------------------------------------------------------------
# FLOPs
# ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LayerFlops:
    """Forward FLOPs of one layer's operations for ``b`` sequences of ``s`` tokens (whole layer,
    no parallel split). GEMM ``m x k @ k x n`` = ``2mnk``."""

    qkv: float
    scores: float          # Q K^T
    attn_v: float          # softmax(.) V
    proj: float
    fc1: float
    fc2: float
    router: float = 0.0
    experts_fc1: float = 0.0
    experts_fc2: float = 0.0
    shared_fc1: float = 0.0
    shared_fc2: float = 0.0

    @property
    def total(self) -> float:
        return (self.qkv + self.scores + self.attn_v + self.proj + self.fc1 + self.fc2
                + self.router + self.experts_fc1 + self.experts_fc2 + self.shared_fc1
                + self.shared_fc2)

    @property
    def attention_core(self) -> float:
        return self.scores + self.attn_v


def layer_forward_flops(cfg: TransformerConfig, micro_batch: int, index: int = 0,
                        seq_len: int | None = None) -> LayerFlops:
    """Forward FLOPs of layer ``index`` for ``micro_batch`` sequences (Narayanan et al. 2021's
    per-op counting, generalised). Attention scores count the full ``s x s`` matrix (no causal
    discount), as equation (3) does; a windowed layer's ``s x w`` (each query's ``w`` keys)."""
    s = seq_len or cfg.seq_len
    t = micro_batch * s
    h = cfg.hidden
    window = cfg.attention_window(index)
    keys = s if window is None else min(window, s)
    qkv = cfg.attention_gemm_flops(t)
    scores = 2 * t * keys * cfg.q_dim       # heads x (s x d) @ (d x keys)
    attn_v = 2 * t * keys * cfg.o_dim
    proj = 2 * t * cfg.o_dim * h
    if not cfg.is_moe_layer(index):
        f = cfg.ffn_hidden
        return LayerFlops(qkv, scores, attn_v, proj, 2 * t * h * cfg.fc1_width(f), 2 * t * f * h)
    m = cfg.moe
    fe, fs = m.expert_ffn_hidden, m.shared_hidden
    routed = t * m.top_k
    return LayerFlops(
        qkv, scores, attn_v, proj, 0.0, 0.0,
        router=2 * t * h * m.experts,
        experts_fc1=2 * routed * h * cfg.fc1_width(fe), experts_fc2=2 * routed * fe * h,
        shared_fc1=2 * t * m.shared_experts * h * cfg.fc1_width(fs),
        shared_fc2=2 * t * m.shared_experts * fs * h)


def logits_forward_flops(cfg: TransformerConfig, micro_batch: int) -> float:
    """The output layer: ``2·b·s·h·V`` (Narayanan et al. 2021)."""
    return 2.0 * micro_batch * cfg.seq_len * cfg.hidden * cfg.vocab


def mtp_forward_flops(cfg: TransformerConfig, micro_batch: int) -> float:
    """The multi-token prediction modules' forward: per module ``eh_proj`` (``2·t·2h·h``), its
    transformer layer and another pass of the output layer, as Megatron-LM counts them
    (``megatron/training/training.py`` @44151194, ``num_floating_point_operations``: "MTP eh
    proj" and the logits ``* (mtp_num_layers + 1)``; the norms' few FLOPs left out)."""
    if not cfg.mtp_layers:
        return 0.0
    t = micro_batch * cfg.seq_len
    one = (2.0 * t * 2 * cfg.hidden * cfg.hidden
           + layer_forward_flops(cfg, micro_batch, cfg.layers - 1).total
           + logits_forward_flops(cfg, micro_batch))
    return cfg.mtp_layers * one


def forward_flops(cfg: TransformerConfig, batch: int) -> float:
    """One forward of every layer, the multi-token prediction modules and the logits for
    ``batch`` sequences."""
    layers = sum(layer_forward_flops(cfg, batch, i).total for i in range(cfg.layers))
    return layers + logits_forward_flops(cfg, batch) + mtp_forward_flops(cfg, batch)


def _check_recompute(recompute: str) -> str:
    if recompute not in RECOMPUTE_POLICIES:
        raise ConfigError(f"recompute must be one of {', '.join(RECOMPUTE_POLICIES)}, "
                          f"not {recompute!r}")
    return recompute


def model_flops_per_step(cfg: TransformerConfig, global_batch: int,
                         recompute: str = "none") -> float:
    """FLOPs of one training step over ``global_batch`` sequences: forward + backward (2x) of
    every op, plus what recomputation adds: ``"full"`` one more forward of every transformer
    layer (not the logits: Narayanan et al. 2021, eq. 3), ``"selective"`` one more forward of the
    attention core only (Korthikanti et al. 2022, Section 5). ``"none"`` gives *model* FLOPs
    (PaLM's MFU convention); the others *hardware* FLOPs."""
    _check_recompute(recompute)
    per_layer = [layer_forward_flops(cfg, global_batch, i) for i in range(cfg.layers)]
    total = 3 * (sum(f.total for f in per_layer) + logits_forward_flops(cfg, global_batch))
    if cfg.mtp_layers:
        total += 3 * mtp_forward_flops(cfg, global_batch)
    # a prediction module's layer is recomputed as the model's layers are
    again = per_layer + [per_layer[-1]] * cfg.mtp_layers
    if recompute == "full":
        total += sum(f.total for f in again)
    elif recompute == "selective":
        total += sum(f.attention_core for f in again)
    return total


def narayanan_flops(cfg: TransformerConfig, global_batch: int, recompute: bool = True) -> float:
    """Narayanan et al. 2021, equation (3): ``96·B·s·l·h²·(1 + s/6h + V/16lh)`` with full
    recomputation; without it ``72·B·s·l·h²·(1 + s/6h + V/12lh)``. GPT shapes only (MHA, 4h
    GELU MLP, dense)."""
    big_b, s, l, h, v = global_batch, cfg.seq_len, cfg.layers, cfg.hidden, cfg.vocab
    if recompute:
        return 96.0 * big_b * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h))
    return 72.0 * big_b * s * l * h * h * (1 + s / (6 * h) + v / (12 * l * h))


# ------------------------------------------------------------------------------------------
# Activation memory
# ------------------------------------------------------------------------------------------

def activation_bytes_per_layer(cfg: TransformerConfig, micro_batch: int, *, tp: int = 1,
                               sequence_parallel: bool = False, recompute: str = "none",
                               flash: bool = False, cp: int = 1, index: int = 0,
                               modules: tuple = (), fp8: bool = False) -> float:
    """Bytes one rank keeps for the backward of one layer for one micro-batch (Korthikanti et al.
    2022, Section 4, counted tensor by tensor).

    Attention block (``11·sbh`` for MHA): the norm's output feeding QKV ``2sbh``; Q, K, V
    ``2sb(q + 2kv)``; the core's output feeding the projection ``2sbh``; the dropout mask
    ``sbh``. Core: softmax output ``2as²b``, its dropout mask ``as²b`` and output ``2as²b``
    (``5as²b``; nothing with FlashAttention, which keeps only ``O(s)`` statistics, or with
    selective recomputation). MLP (``19·sbh`` for a 4h GELU MLP): fc1 input ``2sbh``, activation
    input ``2sb·f1`` (``f1 = f``, ``2f`` gated), fc2 input ``2sbf``, dropout mask ``sbh``.
    Two norm inputs ``4sbh``. MoE layers keep the router input and, per routed token copy
    (``top_k x capacity_factor``), the expert MLP's tensors; shared experts as a dense MLP.
    Multi-latent attention keeps Q, K, V at their widths (``2sb(q + k + v)``), the core's output
    ``2sb·o``, and, outside the head split, the two latents' norm inputs and outputs and the
    shared position key (``2sb(2·(q_lora + kv_lora) + rope)``).

    Tensor parallelism splits what lies between the column- and row-parallel GEMMs (``/tp``);
    sequence parallelism splits the rest too. Context parallelism splits the sequence: each rank
    keeps ``s/cp`` tokens (and ``s/cp x s`` attention scores). Full recomputation keeps only the
    layer input ``2sbh`` (``/tp`` with sequence parallelism). Selective recomputation drops
    what its ``modules`` recompute (Megatron-Core's ``recompute_modules``; default the
    attention core): ``mla_up_proj`` Q, K and V, ``mlp`` a dense layer's MLP tensors, ``moe``
    the routed and shared experts' tensors, ``moe_act`` the experts' activation output (fc2's
    input), ``shared_experts`` the shared experts' tensors; ``layernorm`` keeps what it keeps
    (a norm's output is another tensor's saved input). Under ``fp8`` a GEMM's input is kept
    as Transformer Engine keeps it, quantized (:data:`FP8_SAVED_BYTES`): the QKV (or MLA's down
    and up projections') and fc1 inputs, fc2's, the experts' fc1 and fc2 inputs; the
    attention's output is then kept twice, 16-bit for the attention's backward and quantized
    for the output projection's.
    """
    _check_recompute(recompute)
    mods = (modules or ("core_attn",)) if recompute == "selective" else ()
    s_loc = cfg.seq_len / cp
    sb = s_loc * micro_batch
    h = cfg.hidden
    t = tp
    sp = sequence_parallel and tp > 1
    split_all = t if sp else 1            # tensors outside the TP region
    if recompute == "full":
        return ACT_BYTES * sb * h / split_all
    # Outside the tensor-parallel region (replicated without SP): norm inputs, QKV input,
    # attention dropout mask, fc1 input, MLP dropout mask.
    g = FP8_SAVED_BYTES if fp8 else ACT_BYTES   # a GEMM's saved input
    outside = (2 * ACT_BYTES + g + MASK_BYTES + g + MASK_BYTES) * sb * h
    if cfg.mla:
        # the latents' norm inputs and outputs (kept by the up projections' LayerNormLinear)
        # and the shared position key, on the rank's sequence shard
        latents = (cfg.q_lora_rank or 0) + cfg.kv_lora_rank
        outside += ((ACT_BYTES + g) * latents + ACT_BYTES * cfg.rope_head_dim) * sb
    qkv = 0 if "mla_up_proj" in mods else ACT_BYTES * sb * (cfg.q_dim + cfg.kv_dim + cfg.v_dim)
    inside = qkv + (ACT_BYTES + (FP8_SAVED_BYTES if fp8 else 0)) * sb * cfg.o_dim
    if cfg.is_moe_layer(index):
        m = cfg.moe
        copies = m.top_k * m.capacity_factor
        fe = m.expert_ffn_hidden
        # Routed copies: expert fc1 input, activation input, fc2 input (expert-parallel ranks
        # receive on average as many token copies as they send).
        if "moe" not in mods:
            fc2_in = 0 if "moe_act" in mods else g * sb * fe
            inside += copies * (g * sb * h + ACT_BYTES * sb * cfg.fc1_width(fe) + fc2_in)
        if m.shared_experts and not {"moe", "shared_experts"} & set(mods):
            fs = m.shared_hidden * m.shared_experts
            inside += ACT_BYTES * sb * cfg.fc1_width(fs) + g * sb * fs
    elif "mlp" not in mods:
        f = cfg.ffn_hidden
        inside += ACT_BYTES * sb * cfg.fc1_width(f) + g * sb * f
    core = 0.0
    if not flash and (recompute == "none" or "core_attn" not in mods):
        # softmax output (2) + dropout mask (1) + dropout output (2) per score element
        core = (2 * ACT_BYTES + MASK_BYTES) * cfg.heads * sb * cfg.seq_len
    return outside / split_all + (inside + core) / t


def korthikanti_activation_bytes(s: int, b: int, h: int, a: int, t: int = 1,
                                 sequence_parallel: bool = False,
                                 recompute: str = "none") -> float:
    """Korthikanti et al. 2022, Table 2: activation bytes per transformer layer."""
    _check_recompute(recompute)
    sbh = s * b * h
    if recompute == "full":
        return 2.0 * sbh
    core = 0.0 if recompute == "selective" else 5.0 * a * s / h
    if sequence_parallel:
        return sbh / t * (34 + core)
    return sbh * (10 + 24 / t + core / t)


def embedding_activation_bytes(cfg: TransformerConfig, micro_batch: int, *, tp: int = 1,
                               sequence_parallel: bool = False, cp: int = 1) -> float:
    """First stage extras (Korthikanti et al. 2022, Section 4.3; Megatron-LM's
    ``theoretical_memory_usage.py``): the embedding dropout mask ``sbh`` (``/tp`` with sequence
    parallelism) and the token ids ``8sb`` (int64)."""
    sb = cfg.seq_len / cp * micro_batch
    split = tp if (sequence_parallel and tp > 1) else 1
    return MASK_BYTES * sb * cfg.hidden / split + 8 * sb


def output_activation_bytes(cfg: TransformerConfig, micro_batch: int, *, tp: int = 1,
                            cp: int = 1) -> float:
    """Last stage extras: final norm, output layer and cross-entropy,
    ``4·s·b·h·(1 + V/h) / t`` (Korthikanti et al. 2022, Section 4.3: the fp32 logits dominate)."""
    sb = cfg.seq_len / cp * micro_batch
    return 4.0 * sb * cfg.hidden * (1 + cfg.vocab / cfg.hidden) / tp
