"""Architecture x layout x GPU -> :class:`~.work.StepWork`: what every rank computes and sends.

:func:`step_work` builds, for each pipeline chunk ``(stage, virtual)``, the ordered forward and
backward :class:`~.work.Op` lists of one micro-batch on one rank, with kernel times from
:mod:`.compute` (roofline or a measured :class:`~.compute.KernelTable`) and communication where
Megatron-LM issues it.

Per transformer layer, forward (``T = b·s/cp`` tokens on a rank; ``B`` = bytes per 16-bit
element, 2):

* attention: norm; [SP: ``tp`` all-gather of ``T·h·B``]; QKV GEMM (``T x h`` by
  ``h x (q + 2kv)/tp``); [CP: ``cp`` all-gather of the local heads' K and V over the whole
  sequence, ``b·s·2kv/tp·B`` bytes output]; attention core (queries ``s/cp`` x keys ``s``, causal);
  output projection (``T x q/tp`` by ``q/tp x h``); ``tp`` all-reduce of ``T·h·B`` (without SP)
  or reduce-scatter of ``T·h·B`` input (with SP); dropout + residual.
* MLP (dense): norm; [SP all-gather]; fc1 (``h x f1/tp``, ``f1 = f`` or ``2f`` gated);
  activation; fc2 (``f/tp x h``); ``tp`` all-reduce / reduce-scatter; dropout + residual.
* MLP (MoE; ``tp > 1`` needs sequence parallelism): norm; router GEMM on the rank's ``T/tp``
  tokens; ``ep`` all-to-all *dispatch* of its ``R = T/tp·top_k·capacity`` token copies
  (``R·h·B`` send buffer); [``e > 1``: all-gather of ``R·e·h·B`` over the expert-tensor group
  of ``e = expert_tp`` ranks (the tp group at Megatron's default ``e = tp``), as Megatron's
  all-to-all dispatcher does]; [more than one expert a rank: the received rows sorted by
  expert, :func:`_local_sort`]; expert fc1, activation, fc2 on ``R·e`` tokens with ``/e``
  widths; [unsorted; reduce-scatter over the same group]; ``ep`` all-to-all *combine*; shared
  experts as a dense TP MLP. With ``expert_tp = 1`` and ``tp > 1`` (MoE parallel folding) the expert
  group spans tensor-parallel ranks and no collective runs inside the experts. The
  ``hybridep`` dispatcher replaces each all-to-all by a rail all-to-all across machines, an
  NVLink all-to-all inside them and a device copy, ``deepep`` the same without the copy
  (:func:`_ep_exchange`).

Tensor-parallel placement follows Shoeybi et al. 2019 (the ``f``/``g`` operators: 2 all-reduces
per layer forward, 2 backward) and Korthikanti et al. 2022 (sequence parallelism: all-gather
before and reduce-scatter after each of attention and MLP, their conjugates backward, and a
second all-gather of the sharded input in backward for the weight gradient, overlapped with
the input-gradient GEMM). The input-gradient all-reduce (reduce-scatter with SP) is overlapped
with the weight-gradient GEMM, as Megatron's ``LinearWithGradAccumulationAndAsyncCommunication``
does. With ``layout.tp_overlap`` every TP collective is marked overlapped (userbuffers). With
``layout.ep_overlap`` (Megatron-Core's 1F1B all-to-all overlap) every expert exchange is marked
overlapped: the chunk goes on computing and ends when its exchanges have ended too, so a chunk
takes about the longer of its compute and its all-to-alls. A rank runs its exchanges one at a
time, in order, as Megatron-Core puts every dispatch and combine on one communication stream
(Megatron-LM @d98e8a64 ``megatron/core/models/common/model_chunk_schedule_plan.py``: their nodes
on ``get_comm_stream()``, one stream per process, ``pipeline_parallel/utils.py``
``set_streams``; :data:`.step.SERIAL_STREAMS`). Megatron pairs one micro-batch's
forward with another's backward layer by layer instead; the two agree when either side
dominates, and the model does not slow compute for the SMs the exchanges occupy.

Context parallelism is modelled as the *all-gather* variant (Llama 3 paper, Section 3.3.2; Megatron
``--cp-comm-type a2a``/``allgather`` options): one all-gather of K and V per layer forward and one
reduce-scatter of their gradients backward, the same bytes a ring moves in ``cp - 1`` steps.
Megatron's default ring (``p2p``) overlaps those steps with the attention blocks; this model
exposes them unless the step runner overlaps them.

Backward: every GEMM ``(M, N, K)`` becomes an input-gradient GEMM ``(M, K, N)`` and a weight-
gradient GEMM ``(K, N, M)``; attention its backward kernel; memory-bound ops twice their forward
bytes. Recomputation: ``full`` puts the layer's whole forward (comms included) before its backward
(kind ``"recompute"`` for the compute ops), ``selective`` the attention core's forward (Korthikanti
et al. 2022). The first chunk starts with the embedding (vocabulary-parallel lookup, then a ``tp``
all-reduce, or reduce-scatter with SP), the last ends with final norm, logits GEMM and the
vocabulary-parallel cross-entropy (three small ``tp`` all-reduces: max, target logit, sum of
exponentials, as Megatron's ``_VocabParallelCrossEntropy``).

fp8 (Transformer Engine on Hopper): GEMM operands are cast to fp8 with a transposed copy for
the backward product (cuBLASLt fp8 GEMMs are "TN" only). Norms and activations fuse the cast of
the QKV, fc1 and fc2 inputs (``LayerNormLinear``, ``LayerNormMLP``), and the activation backward
that of fc1's output gradient; the other operands get a separate cast-transpose: the attention
output (proj input) forward, and the output gradients of fc2, proj and QKV backward. The output
layer (logits) is not a Transformer Engine module in Megatron-Core and stays in bf16
(:data:`FP8_HEAD_PRECISION`). Routed experts run Transformer Engine's ``GroupedLinear``, which
quantizes its own input in forward and its output gradient in backward
(``tex.split_quantize``, ``transformer_engine/pytorch/module/grouped_linear.py`` v2.12), with
Megatron-Core's activation between them in 16-bit (``TEGroupedMLP``): a cast-transpose of the
dispatched tokens before expert fc1, of the activation before expert fc2, and of the output
gradients of both experts' GEMMs backward. A shared expert is a ``Linear`` MLP after the MoE
layer's own norm, so its fc1 input gets a cast too.

That is the ``delayed`` recipe, Megatron-Core's default. The other FP8 recipes
(``layout.fp8_recipe``, :data:`FP8_RECIPES`) change three things, each read from Transformer
Engine's code or measured by NVIDIA: a cast of tensor-wise current scaling reads its input
twice (an amax pass, then the cast); a norm or an activation writes the fp8 operand itself only
where Transformer Engine has a fully fused kernel for the recipe (otherwise it writes 16 bits
and a quantize pass follows); and block-scaled GEMMs run slower than per-tensor ones.

``Op.flops`` is the FLOPs the op executes on the rank (attention counted without the causal
discount, Narayanan et al. 2021's convention); summed over the ops whose kind is not
``"recompute"`` it is model FLOPs, over all ops hardware FLOPs. Memory-bound ops carry 0.

Per chunk: ``grad_bytes`` = the chunk's parameters on a rank x the main-gradient bytes (fp32 for
bf16, Megatron's default; :func:`.layout.main_grad_bytes`), ``param_bytes`` = its 16-bit weights,
``activation_bytes`` = ``b·s/cp·h·B`` (``/tp`` with SP; 0 on the last chunk).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ...errors import ConfigError
from ...library.machine import compute_capability, generation
from .compute import (Kernel, KernelTable, adam, attention, elementwise, gemm, kernel_time,
                      resolve_device)
from .layout import Layout, check_layout, main_grad_bytes
from .memory import chunk_layers, chunk_params, uses_flash
from .model import TransformerConfig, model_flops_per_step
from .work import ChunkWork, Comm, Op, StepWork, stream_of

__all__ = ["step_work", "UNFUSED_SCORE_BYTES", "UNFUSED_SCORE_BYTES_BWD",
           "FP8_CAST_TRANSPOSE_BYTES", "FP8_HEAD_PRECISION", "FP8_RECIPES", "Fp8Recipe",
           "QUANTIZE_AFTER_PRODUCER_BYTES"]

_B = 2   # bytes per 16-bit activation element

#: HBM bytes per attention-score element of unfused attention moved by the memory-bound kernels
#: between the two batched GEMMs (whose own bytes, writing Q K^T and reading P for P V, are
#: counted by the GEMM kernels): forward, Megatron's fused scale-mask-softmax read + write (4),
#: dropout read + write + 1-byte mask (5) = 9; backward, dropout backward read dP + mask, write
#: (5), softmax backward read dY and Y, write dS (6) = 11.
UNFUSED_SCORE_BYTES = 9
UNFUSED_SCORE_BYTES_BWD = 11


@dataclass
class _Ctx:
    model: TransformerConfig
    layout: Layout
    device: object
    kernels: KernelTable | None
    flash: bool
    ep_machines: int = 1        # machines an expert group spans (the hybridep dispatcher's)

    def __post_init__(self):
        lay, m = self.layout, self.model
        self.b = lay.micro_batch
        self.s = m.seq_len
        self.tp, self.cp, self.ep, self.etp = lay.tp, lay.cp, lay.ep, lay.etp
        # the expert layers' tensor-parallel group: the tp group itself at Megatron's default
        self.etp_group = "tp" if self.etp == self.tp else "etp"
        self.sp = lay.sequence_parallel and lay.tp > 1
        self.T = self.b * self.s // self.cp                # tokens of a rank's sequence slice
        self.Tsp = self.T // self.tp if self.sp else self.T  # tokens outside the TP region
        self.h = m.hidden
        self.precision = lay.precision
        self.recipe = FP8_RECIPES[lay.fp8_recipe]
        self.fp8_gemm_factor = self.recipe.factor(
            generation(compute_capability(getattr(self.device, "name", ""))))
        self._times: dict = {}      # every layer of a chunk asks for the same kernels
        self.layer_ops: dict = {}   # (F/B, MoE layer, window) -> (layer, its ops): _layer_ops

    # ---------------------------------------------------------------- op builders
    def time(self, kernel: Kernel) -> float:
        key = (kernel, kernel.dims)             # dims are not part of a Kernel's equality
        t = self._times.get(key)
        if t is None:
            t = self._times[key] = kernel_time(self.device, kernel, self.kernels)
        return t

    def gemm(self, name: str, m: int, n: int, k: int, kind: str = "gemm",
             flops: float | None = None, precision: str | None = None) -> Op:
        kern = gemm(m, n, k, precision or self.precision)
        seconds = self.time(kern)
        if kern.precision == "fp8" and (self.kernels is None
                                        or self.kernels.get(kern.op, kern.shape) is None):
            seconds *= self.fp8_gemm_factor     # a measured kernel already ran the recipe
        return Op(name, kind, seconds, None, kern.flops if flops is None else flops)

    def ew(self, name: str, nbytes: float, kind: str = "elementwise") -> Op:
        return Op(name, kind, self.time(elementwise(name.split(".")[-1], nbytes)))

    @property
    def local_experts(self) -> int:
        """Routed experts this rank holds (the expert group splits them evenly)."""
        return max(1, self.model.moe.experts // self.ep) if self.model.moe else 1

    def launch_s(self) -> float:
        """The device's per-kernel launch cost (its efficiency table's ``kernel_overhead_s``:
        the time of a kernel that moves nothing), never looked up in a measured kernel table,
        whose entries time single kernels."""
        return kernel_time(self.device, elementwise("launch", 0))

    def launched(self, op: Op, launches: int) -> Op:
        """``op`` with ``launches`` more kernel launches (:meth:`launch_s` each): one op that
        stands for several kernels of the same bytes."""
        return dataclasses.replace(op, compute_s=op.compute_s + launches * self.launch_s())

    def expert_gemm(self, name: str, m: int, n: int, k: int, kind: str = "gemm",
                    flops: float | None = None, split: str = "m") -> Op:
        """The GEMM ``(m, n, k)`` of this rank's experts as Transformer Engine's
        ``GroupedLinear`` runs it (:data:`GROUPED_GEMM_STREAMS`): one GEMM per local expert,
        the rows split evenly among them (balanced routing, as the published runs force it)
        along ``split`` (``"m"``: forward and input-gradient GEMMs, whose rows are tokens;
        ``"k"``: weight-gradient GEMMs, which reduce over the tokens), launched round-robin on
        the streams: each round's concurrent GEMMs share the SMs (their tiles fill one set of
        waves), and every GEMM is a launch of its own."""
        experts = self.local_experts
        if experts <= 1:
            return self.gemm(name, m, n, k, kind, flops)
        streams = GROUPED_GEMM_STREAMS
        rounds = -(-experts // streams)
        seconds = 0.0
        for r in range(rounds):
            together = min(streams, experts - r * streams)
            if split == "m":
                op = self.gemm(name, max(1, round(m * together / experts)), n, k, kind)
            else:
                # concurrent weight gradients: ``together`` outputs of (m, n), each reducing
                # its own expert's rows; as tiles and work, one GEMM ``together`` times taller
                op = self.gemm(name, m * together, n, max(1, round(k / experts)), kind)
            seconds += op.compute_s
        whole = 2.0 * m * n * k
        return self.launched(Op(name, kind, seconds, None, whole if flops is None else flops),
                             experts - rounds)

    def expert_bias(self, name: str, rows: float, kind: str, backward: bool) -> list[Op]:
        """The experts' fc2 bias as Megatron-Core adds it, for a model with biases
        (:data:`EXPERT_BIAS_PASSES`): one elementwise op of the passes' bytes, carrying the
        launches of its per-expert kernels beyond the first."""
        if not self.model.bias:
            return []
        experts = self.local_experts
        passes = EXPERT_BIAS_PASSES[1 if backward else 0]
        kernels = 4 * experts + 1 if backward else 2 * experts + 1
        return [self.launched(self.ew(name, passes * rows * self.h * _B, kind), kernels - 1)]

    def expert_cast(self, name: str, elements: float, kind: str) -> list[Op]:
        """The fp8 quantization of the experts' operand: one kernel per local expert
        (Transformer Engine's ``nvte_multi_tensor_quantize``, one quantize per tensor on its
        streams), the same bytes as one cast of the whole."""
        return [self.launched(op, self.local_experts - 1)
                for op in _fp8_cast(self, name, elements, kind)]

    def comm(self, name: str, group: str, collective: str, size: float,
             overlapped: bool = False) -> list[Op]:
        degree = {"tp": self.tp, "cp": self.cp, "ep": self.ep, "etp": self.etp}.get(group, 2)
        if degree <= 1:
            return []
        if group == "tp" and self.layout.tp_overlap:
            overlapped = True
        if stream_of(group) == "ep" and self.layout.ep_overlap:
            overlapped = True
        return [Op(name, group, 0.0, Comm(group, collective, int(size), overlapped))]


#: Streams Transformer Engine's grouped GEMM (``GroupedLinear``, the expert layers of
#: Megatron-Core's ``TEGroupedMLP``) launches its per-expert GEMMs on, round-robin:
#: ``multi_stream_cublas_gemm`` issues one cuBLAS GEMM per expert on
#: ``get_compute_stream(i % num_streams)`` with ``num_compute_streams = 4``
#: (NVIDIA/TransformerEngine @d0067d0d ``transformer_engine/common/gemm/cublaslt_gemm.cu``,
#: ``common/util/multi_stream.cpp``); the same streams quantize the per-expert inputs
#: (``nvte_multi_tensor_quantize``, ``common/cast/cast.cu``). The single grouped kernel of
#: ``general_grouped_gemm_for_grouped_tensor`` came later (f8bda5d0, 2026-05-30).
GROUPED_GEMM_STREAMS = 4


#: Passes over the ``rows x h`` output of the experts' fc2 that Megatron-Core's eager bias add
#: makes, forward and backward, for a model whose linear layers have biases (GPT-OSS).
#: ``TEGroupedMLP`` builds fc2 with ``skip_bias_add=True`` and adds the bias itself,
#: ``_apply_bias``: ``torch.cat([t + b * p for t, b, p in zip(torch.split(out, tokens_per_expert),
#: biases, torch.split(probs, tokens_per_expert))])`` (NVIDIA/Megatron-LM @44151194, the
#: submodule NVIDIA-NeMo/Megatron-Bridge @21d102f5 pins for its 26.04.01 runs,
#: ``megatron/core/transformer/moe/experts.py`` lines 295-312; fc1 adds its bias inside
#: Transformer Engine, ``skip_bias_add=False``). Forward, per local expert: ``b * p`` writes a
#: chunk (1), ``t + b * p`` reads two and writes one (3), then ``cat`` reads and writes the
#: whole (2): 6 passes, ``2 E + 1`` kernels. Backward (autograd): the gradients of ``b`` and
#: ``p`` are each a product with the output gradient (read, write) and its reduction (read),
#: per expert (6 passes, ``4 E`` kernels), and ``split``'s backward concatenates the chunks'
#: gradients (2 passes, 1 kernel): 8 passes, ``4 E + 1`` kernels. The probabilities are
#: 16-bit (the recipe leaves ``moe_router_dtype`` unset).
EXPERT_BIAS_PASSES = (6, 8)

#: HBM bytes per element of an fp8 cast-transpose (Transformer Engine): read the 16-bit tensor
#: (2), write its fp8 copy (1) and the fp8 transpose (1), which Hopper's fp8 GEMMs need for the
#: other product of the backward pass (cuBLASLt runs fp8 GEMMs only in the "TN" layout).
FP8_CAST_TRANSPOSE_BYTES = 4


#: HBM bytes per element of quantizing a 16-bit tensor that a norm or an activation has just
#: written, where the recipe has no fused kernel for it: read it (2), write the row-wise and
#: the column-wise fp8 copies (1 + 1). Current scaling takes its amax from the producing kernel
#: (``FUSED_NORM_AMAX_FP8``, ``FUSED_ACTIVATION_AMAX_FP8``: ``quantize_with_amax``), the block
#: recipes compute their scales in the quantize kernel, so no amax pass is added.
QUANTIZE_AFTER_PRODUCER_BYTES = 4


@dataclass(frozen=True)
class Fp8Recipe:
    """The costs of one FP8 recipe as Transformer Engine runs it.

    ``cast_bytes``: HBM bytes per element of quantizing a GEMM operand that no kernel produced
    in fp8. ``norm_fused`` / ``act_fused``: whether a norm / an activation (and its backward)
    writes the fp8 operand itself; where not, it writes 16 bits and a quantize pass of
    :data:`QUANTIZE_AFTER_PRODUCER_BYTES` follows. ``gemm_factor``: an fp8 GEMM's time against
    the per-tensor-scaled fp8 kernel of the roofline, by GPU generation (absent: 1).
    """

    name: str
    cast_bytes: int
    norm_fused: bool
    act_fused: bool
    gemm_factor: tuple = ()

    def factor(self, generation: str) -> float:
        return dict(self.gemm_factor).get(generation, 1.0)


#: Block-scaled fp8 GEMMs on Blackwell: Transformer Engine runs the MXFP8 kernels (for the
#: ``blockwise`` recipe "This PR emulates only the GEMMs with MXFP8", NVIDIA/TransformerEngine
#: #2157), measured 1.051x the per-tensor fp8 kernels: 7.161 against 6.812 ms per layer of
#: GEMMs, inputs pre-quantized, on a B300 (``docs/examples/gemm_profiling/gemm_profiling.rst``
#: @d0067d0d, "Autocast vs Pre-quantized": MXFP8 against FP8 CurrentScaling).
MXFP8_GEMM_FACTOR = 7.161 / 6.812

#: Block-scaled fp8 GEMMs on Hopper (1x128 activation, 128x128 weight blocks; the scales are
#: applied in the main loop, NVIDIA/cutlass #1932), against the per-tensor fp8 kernel. Derived
#: from the same guide's H200 table ("Worked Example: 5B Model on H200", per-layer GEMM time,
#: autocast, quantization included): block scaling 22.882 ms, delayed scaling 18.978, and the
#: per-tensor kernels alone (current scaling, pre-quantized) 16.785. Delayed scaling runs the
#: same per-tensor kernel, so its quantization took 18.978 - 16.785 = 2.193 ms; block scaling
#: quantizes the same bytes (row-wise and column-wise fp8 copies), so its GEMMs took
#: 22.882 - 2.193 = 20.689 ms: 1.233x. The one assumption is that equal bytes take equal time.
BLOCKWISE_HOPPER_GEMM_FACTOR = (22.882 - (18.978 - 16.785)) / 16.785

#: Megatron-Core's FP8 recipes (:data:`.layout.FP8_RECIPES`) as Transformer Engine runs them
#: (NVIDIA/TransformerEngine @d0067d0d):
#:
#: * ``cast_bytes``: delayed scaling, one cast-transpose (:data:`FP8_CAST_TRANSPOSE_BYTES`);
#:   tensor-wise current scaling, an amax pass over the input first
#:   (``Float8CurrentScalingQuantizer::quantize_impl``: ``nvte_compute_amax`` then
#:   ``nvte_quantize_v2``, ``pytorch/csrc/quantizer.cpp``), 2 + 4; the block recipes, one
#:   quantize kernel writing both copies with their scales, 4.
#: * fused producers (``pytorch/csrc/extensions/normalization.cpp`` and ``activation.cpp``,
#:   their ``Impl`` choice): a norm writes fp8 itself for delayed scaling only (``FULLY_FUSED``;
#:   current scaling ``FUSED_NORM_AMAX_FP8``, MXFP8 and blocks ``UNFUSED``); an activation and
#:   its backward for delayed scaling and MXFP8 (current scaling
#:   ``FUSED_ACTIVATION_AMAX_FP8``, blocks ``UNFUSED``).
#: * GEMMs: per-tensor kernels for delayed and tensor-wise scaling;
#:   :data:`BLOCKWISE_HOPPER_GEMM_FACTOR` and :data:`MXFP8_GEMM_FACTOR` for the block recipes.
FP8_RECIPES = {
    "delayed": Fp8Recipe("delayed", FP8_CAST_TRANSPOSE_BYTES, norm_fused=True, act_fused=True),
    "tensorwise": Fp8Recipe("tensorwise", FP8_CAST_TRANSPOSE_BYTES + _B, norm_fused=False,
                            act_fused=False),
    "blockwise": Fp8Recipe("blockwise", FP8_CAST_TRANSPOSE_BYTES, norm_fused=False,
                           act_fused=False,
                           gemm_factor=(("hopper", BLOCKWISE_HOPPER_GEMM_FACTOR),
                                        ("blackwell", MXFP8_GEMM_FACTOR))),
    "mxfp8": Fp8Recipe("mxfp8", FP8_CAST_TRANSPOSE_BYTES, norm_fused=False, act_fused=True,
                       gemm_factor=(("blackwell", MXFP8_GEMM_FACTOR),)),
}


def _fp8_cast(ctx: _Ctx, name: str, elements: float, kind: str) -> list[Op]:
    """The quantization of a GEMM operand that no fused kernel produced in fp8 (fp8 only): a
    cast-transpose, with an amax pass before it under current scaling."""
    if ctx.precision != "fp8":
        return []
    return [ctx.ew(name + ".fp8cast", elements * ctx.recipe.cast_bytes, kind)]


def _fp8_after(ctx: _Ctx, name: str, elements: float, kind: str, producer: str) -> list[Op]:
    """The quantize pass after a norm (``producer`` ``"norm"``) or an activation (``"act"``)
    whose output feeds an fp8 GEMM, where the recipe has no kernel that writes fp8 itself."""
    if ctx.precision != "fp8":
        return []
    fused = ctx.recipe.norm_fused if producer == "norm" else ctx.recipe.act_fused
    if fused:
        return []
    return [ctx.ew(name + ".fp8quant", elements * QUANTIZE_AFTER_PRODUCER_BYTES, kind)]


def _input_grad(ctx, prefix: str, gemm: str, T: int, n: int, h: int) -> list:
    """The backward of a column-parallel GEMM ``(T, n, h)`` whose input (``h`` wide) came
    through the tensor-parallel group: the input-gradient GEMM, its reduction over the group
    (reduce-scatter with sequence parallelism, all-reduce without; overlapped with the
    weight-gradient GEMM, as Megatron-LM's ``LinearWithGradAccumulationAndAsyncCommunication``
    does), then the weight-gradient GEMM."""
    dgrad, wgrad = _bwd_gemm(ctx, prefix + gemm, T, n, h)
    kind = "reducescatter" if ctx.sp else "allreduce"
    return [dgrad, *ctx.comm(f"{prefix}.tp.{kind}.grad", "tp", kind, T * h * _B,
                             overlapped=True), wgrad]


def _bwd_gemm(ctx: _Ctx, name: str, m: int, n: int, k: int, kind: str = "gemm",
              flops: float | None = None, precision: str | None = None) -> tuple[Op, Op]:
    """Input-gradient and weight-gradient GEMMs of forward GEMM ``(m, n, k)``."""
    half = None if flops is None else flops
    return (ctx.gemm(name + ".dgrad", m, k, n, kind, half, precision),
            ctx.gemm(name + ".wgrad", k, n, m, kind, half, precision))


def _bwd_expert_gemm(ctx: _Ctx, name: str, m: int, n: int, k: int,
                     flops: float | None = None) -> tuple[Op, Op]:
    """:func:`_bwd_gemm` of the experts' grouped GEMM (:meth:`_Ctx.expert_gemm`): the input
    gradients split by tokens, the weight gradients reduce over each expert's tokens."""
    return (ctx.expert_gemm(name + ".dgrad", m, k, n, flops=flops),
            ctx.expert_gemm(name + ".wgrad", k, n, m, flops=flops, split="k"))


# ------------------------------------------------------------------------------------------
# One layer
# ------------------------------------------------------------------------------------------

def _attention_core(ctx: _Ctx, p: str, backward: bool, kind: str | None = None,
                    window: int | None = None) -> list[Op]:
    """The attention core of one layer; ``window``: its sliding window (None: full causal).
    Unfused attention computes the whole score matrix and masks it, window or not."""
    m = ctx.model
    heads = m.heads // ctx.tp
    kvh = max(1, m.kv_heads // ctx.tp)
    s_q = ctx.s // ctx.cp
    keys = ctx.s if window is None else min(window, ctx.s)
    dqk, dv = m.qk_head_dim, m.value_head_dim
    model_flops = 2.0 * ctx.b * s_q * keys * heads * (dqk + dv)
    if ctx.flash:
        kern = attention(ctx.b, heads, kvh, s_q, ctx.s, dqk, backward=backward,
                         window=window, v_head_dim=None if dv == dqk else dv)
        f = model_flops * (2 if backward else 1)
        return [Op(p + (".attn.core.bwd" if backward else ".attn.core"), kind or "attention",
                   ctx.time(kern), None, f)]
    # unfused: two batched GEMMs and memory-bound passes over the scores
    rows = ctx.b * heads * s_q
    elems = rows * ctx.s
    k_op = kind or "attention"
    if not backward:
        return [ctx.gemm(p + ".attn.scores", rows, ctx.s, dqk, k_op),
                ctx.ew(p + ".attn.softmax", elems * UNFUSED_SCORE_BYTES, k_op),
                ctx.gemm(p + ".attn.attn_v", rows, dv, ctx.s, k_op)]
    return [*_bwd_gemm(ctx, p + ".attn.attn_v", rows, dv, ctx.s, k_op),
            ctx.ew(p + ".attn.softmax.bwd", elems * UNFUSED_SCORE_BYTES_BWD, k_op),
            *_bwd_gemm(ctx, p + ".attn.scores", rows, ctx.s, dqk, k_op)]


def _tp_out(ctx: _Ctx, name: str) -> list[Op]:
    """The ``g`` operator after a row-parallel GEMM: all-reduce, or reduce-scatter with SP."""
    size = ctx.T * ctx.h * _B
    if ctx.sp:
        return ctx.comm(name + ".tp.reducescatter", "tp", "reducescatter", size)
    return ctx.comm(name + ".tp.allreduce", "tp", "allreduce", size)


def _tp_in(ctx: _Ctx, name: str) -> list[Op]:
    """The ``f`` operator before a column-parallel GEMM: all-gather with SP, nothing without."""
    if ctx.sp:
        return ctx.comm(name + ".tp.allgather", "tp", "allgather", ctx.T * ctx.h * _B)
    return []


def _cp_kv_bytes(ctx: _Ctx) -> int:
    """Bytes of the keys and values of the whole sequence that one rank's heads attend to: what
    the context-parallel all-gather brings (at least one head of each)."""
    m, tp = ctx.model, ctx.tp
    return ctx.b * ctx.s * (max(m.kv_dim // tp, m.qk_head_dim)
                            + max(m.v_dim // tp, m.value_head_dim)) * _B


def _mla_parts(ctx: _Ctx) -> tuple[list, list]:
    """Multi-latent attention's projections as Megatron-Core builds them (NVIDIA/Megatron-LM
    @44151194 ``megatron/core/transformer/multi_latent_attention.py`` lines 504-613, the
    Transformer Engine layer spec of ``models/gpt/gpt_layer_specs.py`` lines 244-316):
    ``(downs, ups)``. A down projection (``linear_q_down_proj`` ``h -> q_lora``,
    ``linear_kv_down_proj`` ``h -> kv_lora + rope``) is a ``TELinear`` with
    ``parallel_mode='duplicated'``: every tensor-parallel rank holds it whole and runs it on its
    own tokens (its sequence shard under sequence parallelism). An up projection
    (``linear_q_up_proj`` ``q_lora -> heads·(head_dim + rope)``, ``linear_kv_up_proj``
    ``kv_lora -> heads·(head_dim + v_head_dim)``) is a ``TELayerNormColumnParallelLinear``: the
    latent's RMSNorm fused in front, the heads split over the group, its input all-gathered
    along the sequence under sequence parallelism. Without ``q_lora_rank`` the queries come
    from one column-parallel ``linear_q_proj`` (``h -> heads·(head_dim + rope)``), in ``ups``
    with latent 0 (its input is the layer norm's output)."""
    m = ctx.model
    ql, kvl = m.q_lora_rank, m.kv_lora_rank
    downs = ([("q_down", ql)] if ql else []) + [("kv_down", kvl + m.rope_head_dim)]
    ups = [("q_up", ql, m.q_dim) if ql else ("q", 0, m.q_dim),
           ("kv_up", kvl, m.heads * (m.head_dim + m.value_head_dim))]
    return downs, ups


def _mla_rope_bytes(ctx: _Ctx) -> float:
    """The rotary embedding of MLA's position parts and the assembly of the attention's inputs
    (``multi_latent_attention.py`` lines 837-959; one fused kernel for queries and one for keys
    and values with the recipes' ``apply_rope_fusion``): read the up projections' outputs and
    the shared position key, write the queries, keys and values the core reads."""
    m, T, tp = ctx.model, ctx.T, ctx.tp
    read = (m.q_dim + m.heads * (m.head_dim + m.value_head_dim)) // tp + m.rope_head_dim
    write = (m.q_dim + m.kv_dim + m.v_dim) // tp
    return T * (read + write) * _B


def _mla_forward(ctx: _Ctx, p: str, gk: str, ek: str) -> list[Op]:
    """Queries, keys and values of multi-latent attention (:func:`_mla_parts`), forward: the
    down projections on the rank's tokens (each ``TELinear`` quantizes its input under fp8);
    under sequence parallelism the shared position key all-gathered (``k_pos_emb``, line 745)
    and each latent all-gathered by its up projection; each latent's RMSNorm, the up
    projections, and the rotary assembly (:func:`_mla_rope_bytes`)."""
    h, Tsp = ctx.h, ctx.Tsp
    downs, _ = _mla_parts(ctx)
    ops: list[Op] = []
    for name, width in downs:
        ops += _fp8_cast(ctx, f"{p}.attn.{name}", Tsp * h, ek)
        ops.append(ctx.gemm(f"{p}.attn.{name}", Tsp, width, h, gk))
    return ops + _mla_up(ctx, p, gk, ek)


def _mla_up(ctx: _Ctx, p: str, gk: str, ek: str) -> list[Op]:
    """The part of :func:`_mla_forward` after the down projections: what the ``mla_up_proj``
    recompute module runs again in backward (``multi_latent_attention.py`` lines 961-966,
    ``qkv_up_proj_and_rope_apply``)."""
    m, h, T, Tsp, tp = ctx.model, ctx.h, ctx.T, ctx.Tsp, ctx.tp
    _, ups = _mla_parts(ctx)
    ops: list[Op] = []
    if ctx.sp:
        ops += ctx.comm(p + ".attn.kpe.tp.allgather", "tp", "allgather",
                        T * m.rope_head_dim * _B)
    for name, latent, width in ups:
        if latent:
            ops.append(ctx.ew(f"{p}.attn.{name}.norm", Tsp * latent * _B * 2, ek))
            ops += _fp8_after(ctx, f"{p}.attn.{name}.norm", Tsp * latent, ek, "norm")
            if ctx.sp:
                ops += ctx.comm(f"{p}.attn.{name}.tp.allgather", "tp", "allgather",
                                T * latent * _B)
        else:
            ops += _fp8_cast(ctx, f"{p}.attn.{name}", Tsp * h, ek)
            ops += _tp_in(ctx, p + ".attn")
        ops.append(ctx.gemm(f"{p}.attn.{name}", T, width // tp, latent or h, gk))
    ops.append(ctx.ew(p + ".attn.rope", _mla_rope_bytes(ctx), ek))
    return ops


def _mla_backward(ctx: _Ctx, p: str) -> list[Op]:
    """The backward of :func:`_mla_forward`, in reverse: the rotary assembly; per up
    projection the cast of its output gradient, its input-gradient GEMM, the reduction of that
    gradient over the tensor-parallel group (reduce-scatter with sequence parallelism,
    all-reduce without; overlapped with the weight-gradient GEMM, whose sharded input is
    all-gathered again under sequence parallelism) and the latent norm's backward; the position
    key's gradient reduce-scattered; then the down projections' GEMMs on the rank's tokens.
    The duplicated down projections' weight gradients are summed over the group once per step
    (``finalize_model_grads``), not counted here."""
    m, h, T, Tsp, tp = ctx.model, ctx.h, ctx.T, ctx.Tsp, ctx.tp
    downs, ups = _mla_parts(ctx)
    ops: list[Op] = [ctx.ew(p + ".attn.rope.bwd", _mla_rope_bytes(ctx))]
    for name, latent, width in reversed(ups):
        k = latent or h
        ops += _fp8_cast(ctx, f"{p}.attn.{name}.grad", T * width // tp, "elementwise")
        if ctx.sp:
            ops += ctx.comm(f"{p}.attn.{name}.tp.allgather.input", "tp", "allgather",
                            T * k * _B, overlapped=True)
        ops += _input_grad(ctx, f"{p}.attn.{name}", "", T, width // tp, k)
        if latent:
            ops.append(ctx.ew(f"{p}.attn.{name}.norm.bwd", 2 * Tsp * latent * _B * 2))
    if ctx.sp:
        ops += ctx.comm(p + ".attn.kpe.tp.reducescatter", "tp", "reducescatter",
                        T * m.rope_head_dim * _B)
    for name, width in reversed(downs):
        ops += _fp8_cast(ctx, f"{p}.attn.{name}.grad", Tsp * width, "elementwise")
        ops += _bwd_gemm(ctx, f"{p}.attn.{name}", Tsp, width, h)
    return ops


def _layer_forward(ctx: _Ctx, i: int, recompute: bool = False) -> list[Op]:
    m, h, T, Tsp, tp = ctx.model, ctx.h, ctx.T, ctx.Tsp, ctx.tp
    p = f"l{i}" + (".recompute" if recompute else "")
    gk = "recompute" if recompute else "gemm"
    ek = "recompute" if recompute else "elementwise"
    ops: list[Op] = [ctx.ew(p + ".attn.norm", Tsp * h * _B * 2, ek)]
    if m.mla:
        ops += _mla_forward(ctx, p, gk, ek)
    else:
        ops += _fp8_after(ctx, p + ".attn.norm", Tsp * h, ek, "norm")
        ops += _tp_in(ctx, p + ".attn")
        ops.append(ctx.gemm(p + ".attn.qkv", T, (m.q_dim + 2 * m.kv_dim) // tp, h, gk))
    ops += ctx.comm(p + ".attn.cp.allgather", "cp", "allgather", _cp_kv_bytes(ctx))
    ops += _attention_core(ctx, p, False, "recompute" if recompute else None,
                           m.attention_window(i))
    ops += _fp8_cast(ctx, p + ".attn.proj", T * m.o_dim // tp, ek)
    ops.append(ctx.gemm(p + ".attn.proj", T, h, m.o_dim // tp, gk))
    ops += _tp_out(ctx, p + ".attn")
    ops.append(ctx.ew(p + ".attn.residual", Tsp * h * (3 * _B + 1), ek))
    ops.append(ctx.ew(p + ".mlp.norm", Tsp * h * _B * 2, ek))
    if not m.is_moe_layer(i):                 # a LayerNormMLP: its norm feeds fc1
        ops += _fp8_after(ctx, p + ".mlp.norm", Tsp * h, ek, "norm")
    ops += _mlp_forward(ctx, i, p, gk, ek)
    ops.append(ctx.ew(p + ".mlp.residual", Tsp * h * (3 * _B + 1), ek))
    return ops


def _dense_mlp_forward(ctx: _Ctx, p: str, ffn: int, gk: str, ek: str) -> list[Op]:
    m, h, T, tp = ctx.model, ctx.h, ctx.T, ctx.tp
    ops = list(_tp_in(ctx, p))
    ops.append(ctx.gemm(p + ".fc1", T, m.fc1_width(ffn) // tp, h, gk))
    ops.append(ctx.ew(p + ".act", T * (m.fc1_width(ffn) + ffn) // tp * _B, ek))
    ops += _fp8_after(ctx, p + ".act", T * ffn // tp, ek, "act")
    ops.append(ctx.gemm(p + ".fc2", T, h, ffn // tp, gk))
    ops += _tp_out(ctx, p)
    return ops


def _moe_dims(ctx: _Ctx):
    moe = ctx.model.moe
    tokens = ctx.T // ctx.tp if ctx.sp else ctx.T        # tokens this rank routes
    copies = tokens * moe.top_k * moe.capacity_factor     # R
    gathered = copies * ctx.etp if ctx.sp else copies     # expert GEMM rows on this rank
    return moe, tokens, copies, gathered


def hit_probability(experts: int, top_k: int, held: float) -> float:
    """Probability that a token's ``top_k`` distinct experts, drawn uniformly from ``experts``
    (balanced routing, as the published runs force it), include one of ``held`` given experts:
    ``1 - C(E - x, k) / C(E, k)``, as a product so that ``held`` may be fractional."""
    miss = 1.0
    for j in range(top_k):
        factor = (experts - held - j) / (experts - j)
        if factor <= 0:
            return 1.0
        miss *= factor
    return 1.0 - miss


#: Dispatchers that send a token to another machine once and forward it over NVLink there.
HIERARCHICAL_DISPATCHERS = ("hybridep", "deepep")


def _ep_exchange(ctx: _Ctx, name: str, tokens: float, copies: float, outward: bool,
                 kind: str) -> list[Op]:
    """One dispatch (``outward``: tokens to their experts; also the backward of combine) or
    combine of a rank's ``tokens`` over its expert group.

    ``alltoall``: one NCCL all-to-all of the ``copies`` (token, expert) rows.

    ``hybridep`` (DeepEP's Hybrid-EP, ``docs/README_Hybrid-EP.md``; Megatron-Core's flex
    dispatcher): a token goes to another machine of the expert group at most once, over RDMA to
    the GPU of its own rail (``ep_rail``: the group's GPUs with the same position on each
    machine), and is forwarded over NVLink once to each GPU of that machine that holds one of
    its experts (``ep_node``); the expert-level copies are made on the receiving GPU. With
    ``n`` machines, per token ``p_m = hit_probability(E, k, E / n)`` of each other machine and
    ``p_r = hit_probability(E, k, E / ep)`` of each GPU: the rail all-to-all carries
    ``n x tokens x p_m`` rows, the NVLink one ``ep x tokens x p_r`` (what lands on a GPU, once
    per GPU), run one after the other (Hybrid-EP pipelines them; the model does not). Megatron
    copies the dispatch output out of, and the combine input into, Hybrid-EP's registered
    buffer: a device copy of the landed rows ("about 10%-20% of the communication time",
    NVIDIA/Megatron-LM ``docs/discussions/deepseek-v3-gb200-optimization`` @eb0783b6).

    ``deepep`` (DeepEP's normal kernels, the flex dispatcher's other backend): the same
    hierarchy, which DeepEP's kernels were built for ("kernels optimized for asymmetric-domain
    bandwidth forwarding, such as forwarding data from NVLink domain to RDMA domain",
    deepseek-ai/DeepEP ``README.md``; DeepSeek-V3's dispatch, arXiv 2412.19437 section 3.2.2:
    "first transmitted via IB to the GPUs with the same in-node index on their target nodes",
    then "forwarded via NVLink"), into buffers DeepEP allocates itself: no copy."""
    row = ctx.h * _B
    if ctx.layout.dispatcher not in HIERARCHICAL_DISPATCHERS:
        return ctx.comm(name, "ep", "alltoall", copies * row)
    moe, ep = ctx.model.moe, ctx.ep
    n = max(1, min(ctx.ep_machines, ep))
    if ep % n:
        raise ConfigError(f"the {ctx.layout.dispatcher} dispatcher needs each expert group "
                          f"spread evenly over its machines: ep {ep} over {n} machines")
    local = ep // n
    landed = ep * tokens * hit_probability(moe.experts, moe.top_k, moe.experts / ep)
    # an all-to-all's size is its send buffer, the same bytes to each member
    to_machine = round(tokens * hit_probability(moe.experts, moe.top_k, moe.experts / n) * row)
    to_gpu = round(landed * row / local)
    rail = ctx.comm(name + ".rdma", "ep_rail", "alltoall", n * to_machine) if n > 1 else []
    node = ctx.comm(name + ".nvl", "ep_node", "alltoall", local * to_gpu) if local > 1 else []
    copy = ([ctx.ew(name + ".copy", landed * row * 2, kind)]
            if ep > 1 and ctx.layout.dispatcher == "hybridep" else [])
    return rail + node + copy if outward else copy + node + rail


def _local_sort(ctx: _Ctx, name: str, rows: float, kind: str) -> list[Op]:
    """Megatron-Core's all-to-all dispatcher with more than one expert on a rank: the rows an
    all-to-all brought are grouped by the rank they came from, and the experts want them by
    expert. "Permutation 2: Sort tokens by local expert" after the dispatch (and its
    tensor-parallel gather) and "Unpermutation 2" before the combine (``sort_chunks_by_idxs``,
    ``MoEAlltoAllTokenDispatcher.dispatch_postprocess`` and ``combine_preprocess``,
    NVIDIA/Megatron-LM @d98e8a64 ``megatron/core/transformer/moe/token_dispatcher.py``), and
    their conjugates backward: one read and one write of every row. The flex dispatcher
    (``hybridep``, ``deepep``) permutes inside its own kernels; one expert a rank needs no
    sort."""
    moe = ctx.model.moe
    if ctx.layout.dispatcher != "alltoall" or moe.experts // ctx.ep <= 1:
        return []
    return [ctx.ew(name, rows * ctx.h * _B * 2, kind)]


def _mlp_forward(ctx: _Ctx, i: int, p: str, gk: str, ek: str) -> list[Op]:
    m, h, tp = ctx.model, ctx.h, ctx.tp
    if not m.is_moe_layer(i):
        return _dense_mlp_forward(ctx, p + ".mlp", m.ffn_hidden, gk, ek)
    moe, tokens, copies, rows = _moe_dims(ctx)
    fe = moe.expert_ffn_hidden
    q = p + ".moe"
    ops = [ctx.gemm(q + ".router", tokens, moe.experts, h, gk),
           ctx.ew(q + ".route", tokens * moe.experts * 4 * 2 + copies * h * _B * 2, ek)]
    ops += _ep_exchange(ctx, q + ".ep.dispatch", tokens, copies, True, ek)
    etp, eg = ctx.etp, ctx.etp_group
    if ctx.sp:
        ops += ctx.comm(q + ".tp.allgather", eg, "allgather", rows * h * _B)
    ops += _local_sort(ctx, q + ".ep.sort", rows, ek)
    rows_i = int(round(rows))
    model_rows = (ctx.T * moe.top_k)                       # without capacity padding
    ops += ctx.expert_cast(q + ".experts.fc1", rows * h, ek)
    ops.append(ctx.expert_gemm(q + ".experts.fc1", rows_i, m.fc1_width(fe) // etp, h, gk,
                               2.0 * model_rows * h * m.fc1_width(fe) / tp))
    ops.append(ctx.ew(q + ".experts.act", rows * (m.fc1_width(fe) + fe) // etp * _B, ek))
    ops += ctx.expert_cast(q + ".experts.fc2", rows * fe // etp, ek)
    ops.append(ctx.expert_gemm(q + ".experts.fc2", rows_i, h, fe // etp, gk,
                               2.0 * model_rows * fe * h / tp))
    ops += ctx.expert_bias(q + ".experts.bias", rows, ek, backward=False)
    ops += _local_sort(ctx, q + ".ep.unsort", rows, ek)
    if ctx.sp:
        ops += ctx.comm(q + ".tp.reducescatter", eg, "reducescatter", rows * h * _B)
    ops += _ep_exchange(ctx, q + ".ep.combine", tokens, copies, False, ek)
    ops.append(ctx.ew(q + ".unpermute", copies * h * _B * 2, ek))
    if moe.shared_experts:
        # a Linear after the MoE layer's own norm: it quantizes its input itself
        ops += _fp8_cast(ctx, q + ".shared.fc1", ctx.Tsp * h, ek)
        ops += _dense_mlp_forward(ctx, q + ".shared", moe.shared_hidden * moe.shared_experts,
                                  gk, ek)
    return ops


def _dense_mlp_backward(ctx: _Ctx, p: str, ffn: int) -> list[Op]:
    m, h, T, tp = ctx.model, ctx.h, ctx.T, ctx.tp
    ops: list[Op] = []
    if ctx.sp:
        ops += ctx.comm(p + ".tp.allgather.grad", "tp", "allgather", T * h * _B)
    ops += _fp8_cast(ctx, p + ".fc2.grad", T * h, "elementwise")
    ops += _bwd_gemm(ctx, p + ".fc2", T, h, ffn // tp)
    ops.append(ctx.ew(p + ".act.bwd", 2 * T * (m.fc1_width(ffn) + ffn) // tp * _B))
    ops += _fp8_after(ctx, p + ".act.bwd", T * m.fc1_width(ffn) // tp, "elementwise", "act")
    if ctx.sp:
        ops += ctx.comm(p + ".tp.allgather.input", "tp", "allgather", T * h * _B,
                        overlapped=True)
    ops += _input_grad(ctx, p, ".fc1", T, m.fc1_width(ffn) // tp, h)
    return ops


def _mlp_backward(ctx: _Ctx, i: int, p: str) -> list[Op]:
    m, h, tp = ctx.model, ctx.h, ctx.tp
    if not m.is_moe_layer(i):
        return _dense_mlp_backward(ctx, p + ".mlp", m.ffn_hidden)
    moe, tokens, copies, rows = _moe_dims(ctx)
    fe = moe.expert_ffn_hidden
    q = p + ".moe"
    rows_i = int(round(rows))
    model_rows = ctx.T * moe.top_k
    ops: list[Op] = []
    if moe.shared_experts:
        ops += _dense_mlp_backward(ctx, q + ".shared", moe.shared_hidden * moe.shared_experts)
    etp, eg = ctx.etp, ctx.etp_group
    ops.append(ctx.ew(q + ".unpermute.bwd", copies * h * _B * 2))
    ops += _ep_exchange(ctx, q + ".ep.combine.bwd", tokens, copies, True, "elementwise")
    if ctx.sp:
        ops += ctx.comm(q + ".tp.allgather.grad", eg, "allgather", rows * h * _B)
    ops += _local_sort(ctx, q + ".ep.unsort.bwd", rows, "elementwise")
    ops += ctx.expert_bias(q + ".experts.bias.bwd", rows, "elementwise", backward=True)
    ops += ctx.expert_cast(q + ".experts.fc2.grad", rows * h, "elementwise")
    ops += _bwd_expert_gemm(ctx, q + ".experts.fc2", rows_i, h, fe // etp,
                            flops=2.0 * model_rows * fe * h / tp)
    ops.append(ctx.ew(q + ".experts.act.bwd", 2 * rows * (m.fc1_width(fe) + fe) // etp * _B))
    ops += ctx.expert_cast(q + ".experts.fc1.grad", rows * m.fc1_width(fe) // etp,
                           "elementwise")
    ops += _bwd_expert_gemm(ctx, q + ".experts.fc1", rows_i, m.fc1_width(fe) // etp, h,
                            flops=2.0 * model_rows * h * m.fc1_width(fe) / tp)
    ops += _local_sort(ctx, q + ".ep.sort.bwd", rows, "elementwise")
    if ctx.sp:
        ops += ctx.comm(q + ".tp.reducescatter.grad", eg, "reducescatter", rows * h * _B)
    ops += _ep_exchange(ctx, q + ".ep.dispatch.bwd", tokens, copies, False, "elementwise")
    ops += _bwd_gemm(ctx, q + ".router", tokens, moe.experts, h)
    return ops


def _module_recompute(ctx: _Ctx, i: int, p: str) -> list[Op]:
    """The forward ops that layer ``i``'s selective ``recompute_modules`` (:data:`.layout.
    RECOMPUTE_MODULES`) run again before its MLP's backward (kind ``"recompute"``; the
    attention's modules are placed in :func:`_layer_backward`): the dense MLP (``mlp``), the
    whole MoE layer (``moe``) or its shared experts (``shared_experts``) and routed experts'
    activation (``moe_act``), and the standalone norms (``layernorm``: MLA's input norm, an MoE
    layer's pre-MLP norm; Megatron-Core fuses the others into their GEMMs,
    ``transformer_layer.py`` lines 439-500)."""
    mods = ctx.layout.selective_modules
    m, Tsp, h = ctx.model, ctx.Tsp, ctx.h
    rk = "recompute"
    q = p + ".recompute"
    ops: list[Op] = []
    if "layernorm" in mods:
        if m.mla:
            ops.append(ctx.ew(q + ".attn.norm", Tsp * h * _B * 2, rk))
        if m.is_moe_layer(i):
            ops.append(ctx.ew(q + ".mlp.norm", Tsp * h * _B * 2, rk))
    if not m.is_moe_layer(i):
        if "mlp" in mods:
            ops += _dense_mlp_forward(ctx, q + ".mlp", m.ffn_hidden, rk, rk)
        return ops
    if "moe" in mods:
        return ops + _mlp_forward(ctx, i, q, rk, rk)
    moe, _, _, rows = _moe_dims(ctx)
    if "moe_act" in mods:
        fe = moe.expert_ffn_hidden
        ops.append(ctx.ew(q + ".moe.experts.act", rows * (m.fc1_width(fe) + fe) // ctx.etp * _B,
                          rk))
    if "shared_experts" in mods and moe.shared_experts:
        ops += _fp8_cast(ctx, q + ".moe.shared.fc1", Tsp * h, rk)
        ops += _dense_mlp_forward(ctx, q + ".moe.shared", moe.shared_hidden * moe.shared_experts,
                                  rk, rk)
    return ops


def _layer_backward(ctx: _Ctx, i: int) -> list[Op]:
    m, h, T, Tsp, tp = ctx.model, ctx.h, ctx.T, ctx.Tsp, ctx.tp
    p = f"l{i}"
    ops: list[Op] = []
    if ctx.layout.recompute == "full":
        ops += _layer_forward(ctx, i, recompute=True)
    ops.append(ctx.ew(p + ".mlp.residual.bwd", 2 * Tsp * h * (3 * _B + 1)))
    ops += _module_recompute(ctx, i, p)
    ops += _mlp_backward(ctx, i, p)
    ops.append(ctx.ew(p + ".mlp.norm.bwd", 2 * Tsp * h * _B * 2))
    ops.append(ctx.ew(p + ".attn.residual.bwd", 2 * Tsp * h * (3 * _B + 1)))
    if ctx.sp:
        ops += ctx.comm(p + ".attn.tp.allgather.grad", "tp", "allgather", T * h * _B)
    ops += _fp8_cast(ctx, p + ".attn.proj.grad", T * h, "elementwise")
    ops += _bwd_gemm(ctx, p + ".attn.proj", T, h, m.o_dim // tp)
    mods = ctx.layout.selective_modules
    if "mla_up_proj" in mods:
        ops += _mla_up(ctx, p + ".recompute", "recompute", "recompute")
    if "core_attn" in mods:
        ops += _attention_core(ctx, p + ".recompute", False, "recompute",
                               m.attention_window(i))
    ops += _attention_core(ctx, p, True, window=m.attention_window(i))
    ops += ctx.comm(p + ".attn.cp.reducescatter", "cp", "reducescatter", _cp_kv_bytes(ctx))
    if m.mla:
        ops += _mla_backward(ctx, p)
    else:
        if ctx.sp:
            ops += ctx.comm(p + ".attn.tp.allgather.input", "tp", "allgather", T * h * _B,
                            overlapped=True)
        ops += _fp8_cast(ctx, p + ".attn.qkv.grad", T * (m.q_dim + 2 * m.kv_dim) // tp,
                         "elementwise")
        ops += _input_grad(ctx, p + ".attn", ".qkv", T, (m.q_dim + 2 * m.kv_dim) // tp, h)
    ops.append(ctx.ew(p + ".attn.norm.bwd", 2 * Tsp * h * _B * 2))
    return ops


# ------------------------------------------------------------------------------------------
# Embedding and head
# ------------------------------------------------------------------------------------------

def _lookup(ctx: _Ctx, p: str) -> list[Op]:
    """A vocabulary-parallel embedding lookup (named ``p``): the rows, then their reduction
    over the tensor-parallel group."""
    ops = [ctx.ew(p + ".lookup", ctx.T * ctx.h * _B * 2 + ctx.T * 8, "embedding")]
    return ops + _tp_out(ctx, p)


def _lookup_grad(ctx: _Ctx, p: str) -> list[Op]:
    """The backward of :func:`_lookup`: the gradient gathered back under sequence parallelism,
    then the scatter-add of its rows into the fp32 main gradient."""
    ops = []
    if ctx.sp:
        ops += ctx.comm(p + ".tp.allgather.grad", "tp", "allgather", ctx.T * ctx.h * _B)
    ops.append(ctx.ew(p + ".grad", ctx.T * ctx.h * (_B + 8), "embedding"))
    return ops


def _embedding_forward(ctx: _Ctx) -> list[Op]:
    return _lookup(ctx, "embed") + [
        ctx.ew("embed.dropout", ctx.Tsp * ctx.h * (2 * _B + 1), "embedding")]


def _embedding_backward(ctx: _Ctx) -> list[Op]:
    return [ctx.ew("embed.dropout.bwd", 2 * ctx.Tsp * ctx.h * (2 * _B + 1), "embedding"),
            *_lookup_grad(ctx, "embed")]


def _vocab(ctx: _Ctx) -> int:
    return -(-ctx.model.vocab // ctx.tp)       # ceil: Megatron pads the vocabulary


#: The precision the output layer's GEMMs run in when the transformer layers run in fp8.
#: Megatron-Core builds the LM head as its own ``tensor_parallel.ColumnParallelLinear``
#: (``torch.matmul`` on the 16-bit weights), not as a Transformer Engine module, so
#: ``fp8_autocast`` leaves it in 16 bits (NVIDIA/Megatron-LM ``megatron/core/models/gpt/
#: gpt_model.py`` and ``tensor_parallel/layers.py`` at core_r0.8.0 through core_v0.13.x; a 2026
#: opt-in, ``fp8_output_proj`` with the MXFP8 recipe, is the only exception, ``fp8_utils.
#: is_mxfp8_output_proj_active``). fp8 training keeps bf16 as its higher precision.
FP8_HEAD_PRECISION = "bf16"


def _head_precision(ctx: _Ctx) -> str:
    return FP8_HEAD_PRECISION if ctx.precision == "fp8" else ctx.precision


def _head_forward(ctx: _Ctx) -> list[Op]:
    h, T, Tsp, v = ctx.h, ctx.T, ctx.Tsp, _vocab(ctx)
    ops = [ctx.ew("head.norm", Tsp * h * _B * 2, "loss")]
    ops += _tp_in(ctx, "head")
    ops.append(ctx.gemm("head.logits", T, v, h, "loss", precision=_head_precision(ctx)))
    # fp32 upcast, max, exp, sum, softmax kept for backward: ~10 bytes per logit
    ops.append(ctx.ew("head.xent", T * v * 10, "loss"))
    for what in ("max", "target", "sumexp"):
        ops += ctx.comm(f"head.xent.tp.allreduce.{what}", "tp", "allreduce", T * 4)
    return ops


def _head_backward(ctx: _Ctx) -> list[Op]:
    h, T, Tsp, v = ctx.h, ctx.T, ctx.Tsp, _vocab(ctx)
    ops = [ctx.ew("head.xent.bwd", T * v * 6, "loss")]
    dgrad, wgrad = _bwd_gemm(ctx, "head.logits", T, v, h, "loss",
                             precision=_head_precision(ctx))
    if ctx.sp:
        ops += ctx.comm("head.tp.allgather.input", "tp", "allgather", T * h * _B,
                        overlapped=True)
    ops.append(dgrad)
    if ctx.sp:
        ops += ctx.comm("head.tp.reducescatter.grad", "tp", "reducescatter", T * h * _B,
                        overlapped=True)
    else:
        ops += ctx.comm("head.tp.allreduce.grad", "tp", "allreduce", T * h * _B,
                        overlapped=True)
    ops.append(wgrad)
    ops.append(ctx.ew("head.norm.bwd", 2 * Tsp * h * _B * 2, "loss"))
    return ops


def _renamed(ops: list[Op], old: str, new: str) -> list[Op]:
    """``ops`` with the ``old`` at the start of each name replaced by ``new``."""
    return [dataclasses.replace(op, name=new + op.name[len(old):]) if op.name.startswith(old)
            else dataclasses.replace(op, name=new + "." + op.name) for op in ops]


def _mtp_forward(ctx: _Ctx, k: int) -> list[Op]:
    """Multi-token prediction module ``k`` forward, as Megatron-Core runs it
    (``transformer/multi_token_prediction.py`` @44151194, lines 906-1046, and
    ``process_mtp_loss``, lines 621-719): the shifted tokens looked up in the embedding again
    (vocabulary-parallel, reduced over the tensor-parallel group), ``enorm`` and ``hnorm``,
    their concatenation, ``eh_proj`` (column parallel ``2h -> h/tp``, its output all-gathered
    along the hidden dimension), a transformer layer of the last layer's kind, and the final
    norm, output layer and cross-entropy of :func:`_head_forward`."""
    h, T, Tsp = ctx.h, ctx.T, ctx.Tsp
    p = f"mtp{k}"
    last = ctx.model.layers - 1
    ops = _lookup(ctx, p + ".embed")
    ops += [ctx.ew(p + ".enorm", Tsp * h * _B * 2), ctx.ew(p + ".hnorm", Tsp * h * _B * 2),
            ctx.ew(p + ".concat", Tsp * 2 * h * _B * 2)]
    ops += _fp8_cast(ctx, p + ".eh_proj", Tsp * 2 * h, "elementwise")
    if ctx.sp:
        ops += ctx.comm(p + ".eh_proj.tp.allgather.in", "tp", "allgather", T * 2 * h * _B)
    ops.append(ctx.gemm(p + ".eh_proj", T, h // ctx.tp, 2 * h))
    ops += ctx.comm(p + ".eh_proj.tp.allgather", "tp", "allgather", T * h * _B)
    ops += _renamed(_layer_ops(ctx, "F", last), f"l{last}", p + ".layer")
    ops += _renamed(_head_forward(ctx), "head", p + ".head")
    return ops


def _mtp_backward(ctx: _Ctx, k: int) -> list[Op]:
    """The backward of :func:`_mtp_forward`, in reverse: the head, the layer, ``eh_proj``'s
    GEMMs (the input gradient reduced over the group, overlapped with the weight gradient),
    the norms and the concatenation, and the embedding gradient's scatter-add."""
    h, T, Tsp, tp = ctx.h, ctx.T, ctx.Tsp, ctx.tp
    p = f"mtp{k}"
    last = ctx.model.layers - 1
    ops = _renamed(_head_backward(ctx), "head", p + ".head")
    ops += _renamed(_layer_ops(ctx, "B", last), f"l{last}", p + ".layer")
    ops += _fp8_cast(ctx, p + ".eh_proj.grad", T * h // tp, "elementwise")
    if ctx.sp:
        ops += ctx.comm(p + ".eh_proj.tp.allgather.input", "tp", "allgather", T * 2 * h * _B,
                        overlapped=True)
    ops += _input_grad(ctx, p + ".eh_proj", "", T, h // tp, 2 * h)
    ops += [ctx.ew(p + ".concat.bwd", 2 * Tsp * 2 * h * _B * 2),
            ctx.ew(p + ".hnorm.bwd", 2 * Tsp * h * _B * 2),
            ctx.ew(p + ".enorm.bwd", 2 * Tsp * h * _B * 2)]
    return ops + _lookup_grad(ctx, p + ".embed")


# ------------------------------------------------------------------------------------------
# The step
# ------------------------------------------------------------------------------------------

def _layer_ops(ctx: _Ctx, kind: str, i: int) -> list[Op]:
    """Layer ``i``'s forward (``"F"``) or backward ops. Layers of one kind (dense or MoE, full or
    windowed attention) have the same ops but for the ``l{i}.`` at the start of every name: the
    first one is built, the others are copies renamed (what building them would give, for a
    fraction of the time)."""
    build = _layer_forward if kind == "F" else _layer_backward
    key = (kind, ctx.model.is_moe_layer(i), ctx.model.attention_window(i))
    found = ctx.layer_ops.get(key)
    if found is None:
        ops = build(ctx, i)
        prefix = f"l{i}."
        if not all(op.name.startswith(prefix) for op in ops):
            return ops                               # a name without the prefix: no copies
        found = ctx.layer_ops[key] = (i, ops)
    i0, ops = found
    if i == i0:
        return list(ops)
    cut = len(f"l{i0}")
    head = f"l{i}"
    return [dataclasses.replace(op, name=head + op.name[cut:]) for op in ops]


def _chunk(ctx: _Ctx, stage: int, virtual: int) -> ChunkWork:
    lay = ctx.layout
    layers = chunk_layers(ctx.model, lay, stage, virtual)
    first = stage == 0 and virtual == 0
    last = stage == lay.pp - 1 and virtual == lay.virtual_stages - 1
    fwd: list[Op] = _embedding_forward(ctx) if first else []
    for i in layers:
        fwd += _layer_ops(ctx, "F", i)
    bwd: list[Op] = []
    if last:
        for k in range(ctx.model.mtp_layers):
            fwd += _mtp_forward(ctx, k)
        fwd += _head_forward(ctx)
        bwd += _head_backward(ctx)
        for k in reversed(range(ctx.model.mtp_layers)):
            bwd += _mtp_backward(ctx, k)
    for i in reversed(layers):
        bwd += _layer_ops(ctx, "B", i)
    if first:
        bwd += _embedding_backward(ctx)
    dense, expert = chunk_params(ctx.model, lay, stage, virtual)
    act = 0 if last else int(ctx.Tsp * ctx.h * _B)
    return ChunkWork(
        stage=stage, virtual=virtual, layers=len(layers), forward=tuple(fwd),
        backward=tuple(bwd), activation_bytes=act,
        grad_bytes=int(round((dense + expert) * main_grad_bytes(lay))),
        param_bytes=int(round((dense + expert) * _B)))


def _optimizer_s(ctx: _Ctx) -> float:
    lay = ctx.layout
    sharded = lay.distributed_optimizer or lay.zero_stage > 0 or lay.fsdp
    shard = lay.dp * lay.cp if sharded else 1
    worst = 0.0
    for stage in range(lay.pp):
        dense = expert = 0.0
        for v in range(lay.virtual_stages):
            d, e = chunk_params(ctx.model, lay, stage, v)
            dense, expert = dense + d, expert + e
        params = dense / shard + expert / (max(1, lay.edp) if sharded else 1)
        worst = max(worst, ctx.time(adam(params, ctx.precision)))
    return worst


def _hardware_flops(model: TransformerConfig, layout: Layout, chunks: dict) -> float:
    """FLOPs executed per step, recomputation included: the closed form
    (:func:`.model.model_flops_per_step`) for full recomputation and for the selective default
    (the attention core); with other ``recompute_modules``, model FLOPs plus the FLOPs of the
    recomputed ops every rank runs per micro-batch."""
    if layout.recompute != "selective" or layout.selective_modules == ("core_attn",):
        return model_flops_per_step(model, layout.global_batch, layout.recompute)
    again = sum(o.flops for c in chunks.values() for o in c.backward if o.kind == "recompute")
    ranks = layout.tp * layout.cp * layout.dp * layout.micro_batches
    return model_flops_per_step(model, layout.global_batch, "none") + again * ranks


def step_work(model: TransformerConfig, layout: Layout, device, *,
              kernels: KernelTable | None = None, ep_machines: int = 1) -> StepWork:
    """What one rank of each pipeline chunk does per micro-batch, and the per-step totals.

    ``device``: a :class:`simulator.topology.devices.Device` or a preset name. ``kernels``: a
    measured :class:`~.compute.KernelTable` replacing roofline times. ``ep_machines``: how many
    machines one expert group spans (the ``hybridep`` dispatcher sends across them once per
    token and machine; :func:`.step.simulate_step` counts them). The layout is checked first
    (:func:`.layout.check_layout`, device precision included); memory is not
    (:func:`.memory.check_memory`).
    """
    dev = resolve_device(device)
    check_layout(model, layout, device=dev)
    ctx = _Ctx(model, layout, dev, kernels, uses_flash(layout, dev), ep_machines)
    chunks = {(s, v): _chunk(ctx, s, v)
              for s in range(layout.pp) for v in range(layout.virtual_stages)}
    notes = [
        "context parallelism modelled as all-gather of K,V per layer (Llama 3 style); "
        "Megatron's default ring overlaps its cp-1 steps with attention",
        ("expert tensor parallelism = "
         + (f"tp = {layout.etp} (Megatron's default)" if layout.expert_tp is None
            else str(layout.etp))
         + "; grad_bytes lumps expert gradients, which reduce over the expert-data-parallel "
           f"group of {layout.edp} rank{'s' if layout.edp != 1 else ''}"),
        f"gradients reduced in {'fp32' if main_grad_bytes(layout) == 4 else '16-bit'} "
        "(Megatron's default for the precision)",
    ]
    if model.tied_embeddings and layout.pp > 1:
        notes.append("tied embeddings: the word-embedding gradient is also all-reduced between "
                     "the first and last stage once per step (not in the chunks)")
    if layout.precision == "fp8":
        notes.append("fp8: the layers' GEMMs at the fp8 peak; the output layer's GEMMs, "
                     "attention, element-wise ops and communication stay 16-bit")
    if not ctx.flash:
        notes.append("attention unfused (no FlashAttention on this GPU or by request)")
    return StepWork(
        chunks=chunks, pp=layout.pp, virtual_stages=layout.virtual_stages,
        micro_batches=layout.micro_batches, optimizer_s=_optimizer_s(ctx),
        model_flops_per_step=model_flops_per_step(model, layout.global_batch, "none"),
        hardware_flops_per_step=_hardware_flops(model, layout, chunks),
        tokens_per_step=layout.global_batch * model.seq_len, notes=tuple(notes))
