"""A parallel layout: how a transformer's training step is cut over GPUs.

Degrees (Megatron-LM's names; Shoeybi et al. 2019, Narayanan et al. SC 2021, Korthikanti et al.
2022): ``tp`` tensor, ``cp`` context (sequence split across ranks, ring attention), ``ep`` expert
(MoE layers' experts spread over ranks; carved out of the data-parallel ranks as Megatron does),
``pp`` pipeline stages, ``dp`` data-parallel replicas. ``tp x cp x pp x dp`` is the GPU count.
``expert_tp`` is the tensor parallelism of the expert layers (Megatron-Core's
``expert_tensor_parallel_size``; None: ``tp``, Megatron's default). Below ``tp`` the MoE layers
are "folded" (Liu et al. 2025, "MoE Parallel Folding", arXiv 2504.14960; Megatron-Core's
expert rank generator): their ``tp x cp x dp`` ranks are regrouped as ``expert_tp x ep x
expert data parallel``, so an expert group may span tensor-parallel ranks (``tp 2, ep 32,
expert_tp 1`` on 16 data-parallel replicas). ``dispatcher`` is how MoE layers move tokens to
their experts (:data:`DISPATCHERS`): Megatron-Core's ``alltoall`` token dispatcher (an NCCL
all-to-all of every token-expert copy) or its ``flex`` dispatcher with the ``hybridep`` backend
(DeepEP's Hybrid-EP: a token crosses to another machine once, to the GPU of its own rail, and
is forwarded over NVLink to each GPU holding one of its experts, once per GPU), or the same
dispatcher with the ``deepep`` backend (DeepEP's normal kernels: the same hierarchy, without
Hybrid-EP's buffer copy). ``ep_overlap``
is Megatron-Core's ``overlap_moe_expert_parallel_comm`` (Megatron-Bridge's ``moe_a2a_overlap``:
the 1F1B all-to-all overlap, which runs one micro-batch's forward against another's backward so
that each one's expert all-to-alls hide behind the other's compute); the model marks the expert
exchanges overlapped within their chunk, run one at a time on the rank's communication stream
(:mod:`.costs`).

The rest says how the step runs: micro-batch and global batch (micro-batches per pipeline =
global / (dp x micro)), the pipeline schedule (``gpipe``, ``1f1b``, ``interleaved`` with
``virtual_stages`` chunks per stage), sequence parallelism (tensor-parallel all-reduces become
reduce-scatter + all-gather), ZeRO stage 0-3 or FSDP, Megatron's distributed optimizer,
activation recompute (``none``, ``selective``, ``full``), the gradient bucket size, the
precision of the matrix products (``bf16``, ``fp16``, ``fp8``) and, under ``fp8``, the recipe
that scales it (:data:`FP8_RECIPES`, Megatron-Core's ``fp8_recipe``: ``delayed``, its default;
``tensorwise``, per-tensor current scaling; ``blockwise``; ``mxfp8``, Blackwell only), whose
costs :mod:`.costs` charges.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from simulator.errors import ConfigError

__all__ = ["Layout", "PIPELINE_KINDS", "RECOMPUTE", "PRECISIONS", "ATTENTION_KINDS",
           "MAIN_GRADS", "DISPATCHERS", "FP8_RECIPES", "RECOMPUTE_MODULES", "check_layout",
           "main_grad_bytes", "parse_pipeline_layout", "parse_recompute_modules",
           "short_last_chunk"]

PIPELINE_KINDS = ("gpipe", "1f1b", "interleaved")
RECOMPUTE = ("none", "selective", "full")
PRECISIONS = ("bf16", "fp16", "fp8")
#: Attention kernel: ``auto`` picks FlashAttention on Ampere and newer, unfused before.
ATTENTION_KINDS = ("auto", "flash", "unfused")
#: Precision of the main gradients that are accumulated and reduced over data parallelism:
#: ``auto`` is Megatron-LM's default, fp32 for bf16 training (``--accumulate-allreduce-grads-in-
#: fp32`` is forced on for bf16 in ``megatron/training/arguments.py``) and the 16-bit model dtype
#: for fp16 training.
MAIN_GRADS = ("auto", "fp32", "bf16", "fp16")
#: MoE token dispatchers (Megatron-Core ``moe_token_dispatcher_type`` ``alltoall``, or ``flex``
#: with ``moe_flex_dispatcher_backend`` ``hybridep`` or ``deepep``); see :mod:`.costs`.
DISPATCHERS = ("alltoall", "hybridep", "deepep")
#: FP8 recipes (Megatron-Core ``fp8_recipe``, NVIDIA/Megatron-LM
#: ``megatron/core/transformer/transformer_config.py``: "'tensorwise' uses per tensor current
#: scaling recipe", "'delayed' uses delayed scaling recipe" (the default), "'mxfp8' for Blackwell
#: architecture only", "'blockwise' for blockwise scaling recipe"); see :mod:`.costs`.
FP8_RECIPES = ("delayed", "tensorwise", "blockwise", "mxfp8")
#: What selective recomputation recomputes (Megatron-Core ``recompute_modules``, NVIDIA/
#: Megatron-LM @44151194 ``megatron/core/transformer/transformer_config.py`` lines 500-513;
#: default ``core_attn``): the attention core; MLA's up projections with their norms and the
#: rotary assembly (``mla_up_proj``); the MLP of dense layers (``mlp``); the routed experts'
#: activation (``moe_act``); the standalone norms (``layernorm``: MLA's input norm and an MoE
#: layer's pre-MLP norm; the others are fused into their GEMMs); the shared experts
#: (``shared_experts``); the whole MoE layer, all-to-alls included (``moe``).
RECOMPUTE_MODULES = ("core_attn", "mla_up_proj", "mlp", "moe_act", "layernorm",
                     "shared_experts", "moe")


@dataclass(frozen=True)
class Layout:
    tp: int = 1
    cp: int = 1
    ep: int = 1
    pp: int = 1
    dp: int = 1
    virtual_stages: int = 1
    micro_batch: int = 1
    global_batch: int = 1
    pipeline: str = "1f1b"
    sequence_parallel: bool = False
    zero_stage: int = 0
    fsdp: bool = False
    distributed_optimizer: bool = False
    recompute: str = "none"
    bucket_bytes: int | None = None  # None: Megatron-Core's default (bucket_bytes_of)
    precision: str = "bf16"
    tp_overlap: bool = False          # TP communication overlapped with GEMMs (userbuffers)
    order: str = "tp-cp-ep-dp-pp"     # rank order, fastest-varying first (Megatron's default)
    attention: str = "auto"           # see ATTENTION_KINDS
    main_grads: str = "auto"          # see MAIN_GRADS
    expert_tp: int | None = None      # expert tensor parallelism (None: tp, Megatron's default)
    dispatcher: str = "alltoall"      # MoE token dispatcher, see DISPATCHERS
    ep_overlap: bool = False          # expert all-to-alls hidden behind other compute (below)
    fp8_recipe: str = "delayed"       # how fp8 operands are scaled, see FP8_RECIPES
    # decoder layers of each model chunk in model order (chunk k on stage k % pp, virtual stage
    # k // pp), from Megatron-Core's pipeline_model_parallel_layout (parse_pipeline_layout);
    # None: even chunks (.memory.chunk_sizes)
    pipeline_layout: tuple | None = None
    # what recompute "selective" recomputes (RECOMPUTE_MODULES); () is Megatron's default
    recompute_modules: tuple = ()

    @property
    def gpus(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    @property
    def etp(self) -> int:
        """Tensor parallelism of the expert layers: ``expert_tp``, else ``tp``."""
        return self.tp if self.expert_tp is None else self.expert_tp

    @property
    def edp(self) -> int:
        """Expert-data-parallel replicas: the ``tp x cp x dp`` ranks of a stage over
        ``etp x ep`` (``cp x dp / ep`` when ``etp == tp``)."""
        return self.tp * self.cp * self.dp // (self.etp * self.ep)

    @property
    def selective_modules(self) -> tuple:
        """The modules recomputed in backward: none unless ``recompute`` is ``selective``,
        then ``recompute_modules`` or Megatron-Core's default, the attention core."""
        if self.recompute != "selective":
            return ()
        return self.recompute_modules or ("core_attn",)

    @property
    def micro_batches(self) -> int:
        """Micro-batches per pipeline per step: global / (dp x micro)."""
        return self.global_batch // (self.dp * self.micro_batch)


#: Symbols of Megatron-Core's ``pipeline_model_parallel_layout`` (NVIDIA/Megatron-LM
#: @44151194 ``megatron/core/transformer/pipeline_parallel_layer_layout.py``, lines 283-321):
#: the embedding, a decoder layer, a multi-token prediction module, the loss.
LAYOUT_SYMBOLS = {"E": "embedding", "t": "decoder layer", "m": "multi-token prediction",
                  "L": "loss"}


def parse_pipeline_layout(text: str, pp: int, virtual_stages: int, layers: int,
                          mtp_layers: int = 0) -> tuple:
    """Megatron-Core's ``pipeline_model_parallel_layout`` string as the decoder layers of each
    model chunk, in model order.

    The grammar is Megatron-Core's (``PipelineParallelLayerLayout.parse_str_to_list``): commas
    and spaces are ignored, ``(X)*N`` repeats a group and ``c*N`` a symbol, ``|`` ends a chunk;
    symbols ``E`` (embedding), ``t`` (decoder layer), ``m`` (multi-token prediction), ``L``
    (loss). Chunk ``k`` runs on pipeline stage ``k % pp`` as virtual stage ``k // pp`` (lines
    40-54). Its checks (lines 85-150): ``E`` first and ``L`` last, once each; as many ``t`` as
    the model's layers and ``m`` as its prediction modules; no ``t`` after an ``m``. This
    simulator also needs the ``m`` in the last chunk (the head's), as every published layout
    has them. Example: DeepSeek-V3 on ``pp`` 8, ``virtual_stages`` 2, ``"Et*4|(t*4|)*14tmL"``:
    4 layers with the embedding, 14 chunks of 4, then 1 with the prediction module and loss."""
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"pipeline layout must be a non-empty string like "
                          f"'Et*4|(t*4|)*14tmL', not {text!r}")
    flat = re.sub(r"[,\s]", "", text)
    group = re.compile(r"\(([^()]+)\)\*(\d+)")
    while group.search(flat):
        flat = group.sub(lambda g: g.group(1) * int(g.group(2)), flat)
    flat = re.sub(r"([^|()*])\*(\d+)", lambda g: g.group(1) * int(g.group(2)), flat)
    bad = sorted(set(flat) - set(LAYOUT_SYMBOLS) - {"|"})
    if bad:
        accepted = ", ".join(f"{k} ({v})" for k, v in LAYOUT_SYMBOLS.items())
        raise ConfigError(f"pipeline layout {text!r}: unknown symbol(s) {' '.join(bad)}; "
                          f"accepted: {accepted}, '|' between chunks, '(X)*N' and 'c*N' "
                          f"repeats")
    chunks = flat.split("|")
    where = f"pipeline layout {text!r}"
    if len(chunks) != pp * virtual_stages:
        raise ConfigError(f"{where} has {len(chunks)} chunks; pp x virtual_stages = {pp} x "
                          f"{virtual_stages} = {pp * virtual_stages} are needed")
    symbols = flat.replace("|", "")
    if symbols.count("E") != 1 or symbols.count("L") != 1 or not chunks[0].startswith("E") \
            or not chunks[-1].endswith("L"):
        raise ConfigError(f"{where}: the embedding E must open the first chunk and the loss L "
                          f"close the last, once each")
    if symbols.count("t") != layers:
        raise ConfigError(f"{where} places {symbols.count('t')} decoder layers (t); the model "
                          f"has {layers}")
    if symbols.count("m") != mtp_layers:
        raise ConfigError(f"{where} places {symbols.count('m')} multi-token prediction modules "
                          f"(m); the model has {mtp_layers}")
    if "m" in symbols and "t" in symbols[symbols.index("m"):]:
        raise ConfigError(f"{where}: a decoder layer (t) follows a multi-token prediction "
                          f"module (m)")
    if any("m" in c for c in chunks[:-1]):
        raise ConfigError(f"{where}: multi-token prediction modules (m) must be in the last "
                          f"chunk, with the loss")
    return tuple(c.count("t") for c in chunks)


def short_last_chunk(layers: int, chunks: int) -> tuple | None:
    """Decoder layers per chunk when ``layers`` do not split evenly over ``chunks``: every chunk
    ``ceil(layers / chunks)``, the last one what is left (it also holds the loss and any
    prediction modules), as Megatron-Bridge lays DeepSeek-V3's 61 layers out on 4, 8 and 16
    chunks (``set_deepseek_v3_pipeline_model_parallel_layout``,
    ``src/megatron/bridge/recipes/deepseek/deepseek_v3.py`` @21d102f5 lines 29-49: 16 + 16 + 16
    + 13, 8 x 7 + 5, 4 x 15 + 1). None when even, or when no such split exists."""
    per = -(-layers // chunks)
    last = layers - per * (chunks - 1)
    if layers % chunks == 0 or last < 0:
        return None
    return (per,) * (chunks - 1) + (last,)


def parse_recompute_modules(text) -> tuple:
    """A comma list (or a list) of :data:`RECOMPUTE_MODULES` as a tuple; an unknown name is
    refused listing the accepted ones."""
    items = text.split(",") if isinstance(text, str) else list(text or ())
    names = tuple(str(t).strip() for t in items if str(t).strip())
    bad = [n for n in names if n not in RECOMPUTE_MODULES]
    if bad or not names:
        raise ConfigError(f"recompute modules {text!r}: expected a comma list of "
                          f"{', '.join(RECOMPUTE_MODULES)}")
    return names


def main_grad_bytes(layout: Layout) -> int:
    """Bytes per parameter of the gradients reduced over data parallelism (see
    :data:`MAIN_GRADS`)."""
    kind = layout.main_grads
    if kind == "auto":
        kind = "fp16" if layout.precision == "fp16" else "fp32"
    return 4 if kind == "fp32" else 2


def bucket_bytes_of(layout: Layout) -> int:
    """Bytes of one data-parallel gradient bucket: ``layout.bucket_bytes``, else Megatron-Core's
    default of ``max(40,000,000, 1,000,000 x dp_cp)`` parameters (``DistributedDataParallelConfig.
    bucket_size``: "larger DP sizes need larger buckets to ensure collectives do not become
    latency-bound") of :func:`main_grad_bytes` each."""
    if layout.bucket_bytes is not None:
        return int(layout.bucket_bytes)
    return max(40_000_000, 1_000_000 * layout.dp * layout.cp) * main_grad_bytes(layout)


def _positive(layout: Layout, name: str) -> int:
    value = getattr(layout, name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"layout {name} must be a positive integer, not {value!r}")
    return value


def check_layout(model, layout: Layout, gpus: int | None = None, device=None) -> Layout:
    """Refuse a layout that cannot run ``model``, in one line saying what does not divide what.

    The rules are Megatron-LM's (``megatron/training/arguments.py``,
    ``megatron/core/transformer/transformer_config.py``,
    ``megatron/core/model_parallel_config.py``, ``megatron/core/pipeline_parallel/
    schedules.py``, ``megatron/core/utils.py: get_batch_on_this_cp_rank``):

    * ``heads % tp == 0``; query groups: ``kv_heads % tp == 0`` or ``tp % kv_heads == 0``
      ("num_query_groups must be a multiple or divisor of tensor_model_parallel_size");
    * ``ffn_hidden % tp == 0`` (column-parallel split; the vocabulary is padded, never refused);
    * ``layers % (pp x virtual_stages) == 0`` (Megatron requires it for interleaving and, unless
      first/last stages are given explicitly, for plain pipelines);
    * ``global_batch % (dp x micro_batch) == 0``;
    * interleaved: ``virtual_stages >= 2``, ``pp >= 2`` and ``micro_batches % pp == 0`` (the
      schedule's default micro-batch group is ``pp``; a last group smaller than ``pp`` is
      refused); ``virtual_stages > 1`` needs the interleaved schedule;
    * context parallelism: ``seq_len % (2 x cp) == 0`` (each rank gets two of ``2·cp`` chunks,
      for causal load balance); with sequence parallelism ``(seq_len / cp) % tp == 0``;
    * experts: ``ep > 1`` needs an MoE model, ``experts % ep == 0``, and ``(tp x cp x dp) %
      (expert_tp x ep) == 0`` (expert parallelism is carved out of a stage's ranks: Megatron
      requires ``expert_tensor x expert x pipeline`` to divide the world size; with expert
      tensor parallelism ``tp``, its default, that is ``(dp x cp) % ep == 0``); ``expert_tp``
      must divide ``tp`` (this model's restriction: a rank's sequence-parallel tokens are
      gathered over an expert-tensor group inside its tensor-parallel group) and the expert
      ``ffn_hidden``; an MoE model with ``tp > 1`` is modelled with sequence parallelism only
      (Megatron-Core refuses MoE with tensor parallelism and without it);
    * ``tp x cp x pp x dp == gpus`` when ``gpus`` is given;
    * ZeRO stage 0..3 (FSDP is stage 3); Megatron's distributed optimizer is ZeRO-1 style and
      does not combine with a ZeRO stage > 0;
    * fp8 needs a GPU with FP8 tensor cores (and bf16 an Ampere or newer GPU) when ``device``
      is given; ``fp8_recipe`` other than ``delayed`` needs precision fp8, and ``mxfp8`` a
      Blackwell GPU.

    Returns the layout unchanged.
    """

    for name in ("tp", "cp", "ep", "pp", "dp", "virtual_stages", "micro_batch", "global_batch"):
        _positive(layout, name)
    for name, valid in (("pipeline", PIPELINE_KINDS), ("recompute", RECOMPUTE),
                        ("precision", PRECISIONS), ("attention", ATTENTION_KINDS),
                        ("main_grads", MAIN_GRADS)):
        value = getattr(layout, name)
        if value not in valid:
            raise ConfigError(f"{name} must be one of {', '.join(valid)}, not {value!r}")
    if isinstance(layout.zero_stage, bool) or layout.zero_stage not in (0, 1, 2, 3):
        raise ConfigError(f"ZeRO stage must be one of 0, 1, 2, 3, not {layout.zero_stage!r}")
    if layout.distributed_optimizer and (layout.zero_stage > 0 or layout.fsdp):
        raise ConfigError("the distributed optimizer already shards optimizer states (ZeRO-1 "
                          "style); use it or a ZeRO stage / FSDP, not both")
    if layout.bucket_bytes is not None and (not isinstance(layout.bucket_bytes, int)
                                            or layout.bucket_bytes < 1):
        raise ConfigError(f"bucket_bytes must be a positive integer, not {layout.bucket_bytes!r}")

    tp, cp, ep, pp, dp, v = (layout.tp, layout.cp, layout.ep, layout.pp, layout.dp,
                             layout.virtual_stages)
    if gpus is not None and layout.gpus != gpus:
        raise ConfigError(f"tp x cp x pp x dp = {tp} x {cp} x {pp} x {dp} = {layout.gpus} "
                          f"GPUs, not the {gpus} given")
    if model.heads % tp:
        raise ConfigError(f"{model.name}: {model.heads} attention heads are not divisible by "
                          f"tp = {tp}")
    if model.kv_heads % tp and tp % model.kv_heads:
        raise ConfigError(f"{model.name}: {model.kv_heads} key/value heads must be a multiple "
                          f"or a divisor of tp = {tp} (Megatron's rule for query groups)")
    if model.ffn_hidden % tp:
        raise ConfigError(f"{model.name}: ffn_hidden {model.ffn_hidden} is not divisible by "
                          f"tp = {tp}")
    if layout.ep_overlap:
        # Megatron-Core's checks for overlap_moe_expert_parallel_comm (as Megatron-Bridge's
        # skills/perf-expert-parallel-overlap/SKILL.md @21d102f5 lists them)
        if layout.ep < 2:
            raise ConfigError("ep_overlap (moe_a2a_overlap) needs expert parallelism: ep > 1")
        if layout.pp > 1 and layout.virtual_stages < 2:
            raise ConfigError("ep_overlap (moe_a2a_overlap) with pp > 1 needs virtual stages "
                              "(the interleaved schedule), as Megatron-Core requires")
        if layout.recompute == "full":
            raise ConfigError("ep_overlap (moe_a2a_overlap) does not run with full recompute "
                              "(Megatron-Core refuses it)")
    if layout.fp8_recipe not in FP8_RECIPES:
        raise ConfigError(f"layout fp8_recipe {layout.fp8_recipe!r}: expected one of "
                          f"{', '.join(FP8_RECIPES)}")
    if layout.fp8_recipe != "delayed" and layout.precision != "fp8":
        raise ConfigError(f"fp8_recipe {layout.fp8_recipe} applies to precision fp8, not "
                          f"{layout.precision}")
    if layout.dispatcher not in DISPATCHERS:
        raise ConfigError(f"layout dispatcher {layout.dispatcher!r}: expected one of "
                          f"{', '.join(DISPATCHERS)}")
    etp = layout.etp
    if isinstance(etp, bool) or not isinstance(etp, int) or etp < 1:
        raise ConfigError(f"layout expert_tp must be a positive integer, not {etp!r}")
    if tp % etp:
        raise ConfigError(f"expert_tp = {etp} must divide tp = {tp}")
    if model.moe is not None and model.moe.expert_ffn_hidden % etp:
        raise ConfigError(f"{model.name}: expert ffn_hidden {model.moe.expert_ffn_hidden} is "
                          f"not divisible by expert_tp = {etp}"
                          + (" (expert tensor parallelism = tp)" if layout.expert_tp is None
                             else ""))
    if v > 1 and layout.pipeline != "interleaved":
        raise ConfigError(f"virtual_stages = {v} needs pipeline 'interleaved', "
                          f"not {layout.pipeline!r}")
    if layout.pipeline == "interleaved":
        if v < 2:
            raise ConfigError("the interleaved schedule needs virtual_stages >= 2")
        if pp < 2:
            raise ConfigError("the interleaved schedule needs pp >= 2")
    mods = layout.recompute_modules
    if mods:
        parse_recompute_modules(mods)
        if layout.recompute != "selective":
            raise ConfigError(f"recompute modules {', '.join(mods)} go with recompute "
                              f"'selective', not {layout.recompute!r}")
        if "mla_up_proj" in mods and not model.mla:
            raise ConfigError(f"recompute module mla_up_proj needs multi-latent attention; "
                              f"{model.name} has none")
        needs_moe = [m for m in ("moe", "moe_act", "shared_experts") if m in mods]
        if needs_moe and model.moe is None:
            raise ConfigError(f"recompute module(s) {', '.join(needs_moe)} need an MoE model; "
                              f"{model.name} has no experts")
    split = layout.pipeline_layout
    if split is not None:
        if (not isinstance(split, tuple) or len(split) != pp * v or sum(split) != model.layers
                or any(isinstance(n, bool) or not isinstance(n, int) or n < 0 for n in split)):
            raise ConfigError(f"pipeline_layout {split!r}: expected {pp * v} chunks (pp x "
                              f"virtual_stages) of decoder layers adding up to the model's "
                              f"{model.layers}")
    elif model.layers % (pp * v) and -(-model.layers // (pp * v)) * pp * v - model.layers > 2:
        raise ConfigError(f"{model.name}: {model.layers} layers do not split over pp x "
                          f"virtual_stages = {pp} x {v} = {pp * v} chunks: they must divide "
                          f"evenly, or be at most 2 short of a multiple (the first and last "
                          f"chunks then hold one layer fewer, as Llama 3 405B's 126 on 16 "
                          f"stages, or none beside the embedding and the loss, as its 126 on "
                          f"128 chunks); otherwise give the chunks' layers (--pp-layout)")
    if layout.global_batch % (dp * layout.micro_batch):
        raise ConfigError(f"global_batch {layout.global_batch} is not divisible by dp x "
                          f"micro_batch = {dp} x {layout.micro_batch} = "
                          f"{dp * layout.micro_batch}")
    m = layout.micro_batches
    if layout.pipeline == "interleaved" and m % pp:
        raise ConfigError(f"the interleaved schedule needs micro-batches ({m} = global_batch / "
                          f"(dp x micro_batch)) divisible by pp = {pp}")
    if cp > 1 and model.seq_len % (2 * cp):
        raise ConfigError(f"{model.name}: seq_len {model.seq_len} is not divisible by 2 x cp = "
                          f"{2 * cp} (context parallelism splits the sequence into 2·cp chunks)")
    if layout.sequence_parallel and tp > 1 and (model.seq_len // cp) % tp:
        raise ConfigError(f"{model.name}: sequence parallelism splits seq_len / cp = "
                          f"{model.seq_len // cp} over tp = {tp}, which does not divide it")
    if ep > 1:
        if model.moe is None:
            raise ConfigError(f"{model.name} has no experts; ep = {ep} needs an MoE model")
        if model.moe.experts % ep:
            raise ConfigError(f"{model.name}: {model.moe.experts} experts are not divisible by "
                              f"ep = {ep}")
        if (tp * cp * dp) % (etp * ep):
            if etp == tp:
                raise ConfigError(f"ep = {ep} must divide dp x cp = {dp} x {cp} = {dp * cp} "
                                  f"(expert parallelism is carved out of the data-parallel "
                                  f"ranks)")
            raise ConfigError(f"expert_tp x ep = {etp} x {ep} must divide tp x cp x dp = "
                              f"{tp} x {cp} x {dp} = {tp * cp * dp} (the expert layers regroup "
                              f"a stage's ranks)")
    if model.moe is not None and tp > 1 and not layout.sequence_parallel:
        raise ConfigError(f"{model.name}: an MoE model with tp = {tp} is modelled with "
                          f"sequence parallelism only (set sequence_parallel)")
    if device is not None:
        from .compute import check_precision, resolve_device
        check_precision(device, layout.precision)
        if layout.fp8_recipe == "mxfp8":
            from ...library.machine import compute_capability, generation

            name = resolve_device(device).name
            gen = generation(compute_capability(name))
            if gen != "blackwell":
                raise ConfigError(f"fp8_recipe mxfp8 runs on Blackwell GPUs only (Megatron-Core: "
                                  f"\"'mxfp8' for Blackwell architecture only\"); {name} is {gen}")
    return layout
