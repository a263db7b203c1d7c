"""Time of one kernel on one GPU: a roofline with sourced achievable fractions, or a measured table.

A :class:`Kernel` is one operation of a rank (a GEMM, an attention forward or backward, a
memory-bound element-wise pass, the optimizer), with its FLOPs, its HBM bytes, and a shape key.
:func:`kernel_time` gives its seconds on a :class:`~simulator.topology.devices.Device`::

    t = max(flops / (peak(precision) x fraction(op class, device) x shape factor
                     [x TRAINING_GEMM_EFFICIENCY for GEMMs]),
            bytes / (HBM bandwidth x memory fraction)) + launch overhead

or, with a :class:`KernelTable`, the measured time of that op and shape (a missing entry is an
error unless the table was built with ``fallback=True``).

Peaks (dense, no sparsity): fp16/bf16 from :mod:`simulator.topology.devices`; fp8 and tf32 from
:data:`EXTRA_PEAKS` (vendor datasheets; A100 and V100 have no fp8: asking for it is refused).

Achievable fractions, by op class (:data:`GPU_RATES`; each row says where its numbers come from):

* **GEMM**: the best large bf16 (and fp8) ``matmul`` a GPU reaches over a brute-force shape
  search, divided by the dense peak: the "Maximum Achievable Matmul FLOPS" (MAMF) table of
  S. Bekman, *Machine Learning Engineering*, ``compute/accelerator/README.md``
  (github.com/stas00/ml-engineering; A100 SXM 86.9 %, H100 SXM 80.3 %, H200 "the same", GH200
  83.8 %, B200 77.6 %; fp8: H100 70.9 %, H200 73.4 %, GH200 77.6 %, B200 76.3 %). A real shape
  gets less: tile and wave quantization (NVIDIA, *Matrix Multiplication Background User's
  Guide*, Deep Learning Performance documentation) with 128 x 128 output tiles, one wave =
  one tile per SM, and split-K for skinny products (the reduction is split when the output
  has fewer tiles than SMs, as cuBLAS does). GPUs without a MAMF row use a named assumption.
  Inside a training step GEMMs sustain less than that best case (the exact shape's kernel, not
  the search's best; clocks held at the power limit with every GPU of the node busy; SMs
  shared with the NCCL kernels of overlapped communication): :data:`TRAINING_GEMM_EFFICIENCY`
  = 0.785 of the MAMF rate, the one FITTED constant here, fitted to the per-layer forward and
  backward times of Korthikanti et al. 2022 (arXiv 2205.05198, Table 4: a 22B GPT on 8 A100s,
  Megatron-LM) and checked on their end-to-end Table 5, on FlashAttention-2's end-to-end GPT
  training table (Dao 2023, Table 1) and on NVIDIA's published H100 throughputs
  (``tests/test_llm_accuracy.py``, ``docs/validation/sources.md``). For scale, an isolated
  8192^3 fp16 ``a @ b`` in PyTorch 1.13 / CUDA 11.7 reaches 230 TFLOP/s on an A100 80GB (M. Li,
  github.com/mli/transformers-benchmarks): 0.85 of the A100 MAMF, before any training effect.
  The datasheet peaks are at the tensor-core boost clock (A100 1410 MHz; H100 SXM 1830 MHz, not
  its 1980 MHz maximum: 132 SMs x 4096 FLOP/clock x 1.83 GHz = 989.4 TFLOP/s).
* **Attention** (fused, causal): FlashAttention-2 (Dao 2023, arXiv 2307.08691: "50-73 % of the
  theoretical maximum FLOPs/s on A100"; FA2 requires Ampere or newer) and FlashAttention-3 (Shah
  et al. 2024, arXiv 2407.08608: "FP16 reaching up to 740 TFLOPs/s (75 % utilization)" on H100,
  FP8 "close to 1.2 PFLOPs/s"); on Blackwell the forward takes FlashAttention-4's "up to 1613
  TFLOPs/s (71% utilization)" on B200 (Zadouri et al. 2026, arXiv 2603.05451), an upper bound
  for the cuDNN kernels Transformer Engine runs, which FA4 beats by "up to 1.3x". FLOPs follow
  the FlashAttention benchmarks' convention (``benchmarks/benchmark_flash_attention.py``):
  forward ``4·b·s_q·s_kv·heads·d``, halved for the causal mask, backward 2.5x that (five matrix
  products against two), so the published fractions apply directly. Forward takes the top of
  the FA2 range, backward its bottom (the slower pass); Hopper's and Blackwell's backward
  fractions are assumptions (see the rows). Attention stays in bf16 under fp8 recipes
  (Transformer Engine keeps dot-product attention in bf16 by default). V100 (and older) run
  unfused attention: two batched GEMMs and memory-bound softmax/dropout passes over the
  ``s x s`` scores.
* **Element-wise** (norms, activations, dropout + residual, softmax, cross-entropy, embedding
  gather, optimizer): memory-bound at the device's achieved HBM fraction
  (:data:`simulator.workload.compute.DEVICE_EFFICIENCY`, with its source), bytes from shapes.
* **Launch overhead** per kernel: ``kernel_overhead_s`` of the same table (a device without an
  entry there uses the entry of the same silicon, :data:`EFFICIENCY_ALIASES`).
* **Optimizer**: Megatron-LM's mixed-precision step, memory-bound,
  :data:`ADAM_BYTES_PER_PARAM` per parameter of the rank's shard (+ fp16's unscale).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

from simulator.errors import ConfigError
from simulator.topology.devices import Device, get_device
from simulator.workload.compute import device_efficiency

__all__ = [
    "EXTRA_PEAKS", "GPU_RATES", "GpuRates", "Kernel", "KernelTable", "GEMM_TILE",
    "peak_flops", "check_precision", "gpu_rates", "resolve_device", "gemm", "attention",
    "window_keys",
    "roofline_time",
    "elementwise", "adam", "kernel_time", "gemm_shape_factor", "ADAM_BYTES_PER_PARAM",
    "ADAM_UNSCALE_BYTES_PER_PARAM", "TRAINING_GEMM_EFFICIENCY", "EFFICIENCY_ALIASES",
    "KERNEL_COLUMNS",
]

#: Dense fp8 and tf32 tensor-core peaks, FLOP/s, by device preset: (fp8 or None, tf32 or None,
#: source). Datasheets quote "with sparsity" figures; dense = half.
EXTRA_PEAKS: dict[str, tuple[float | None, float | None, str]] = {
    "v100-sxm2-16gb": (None, None, "NVIDIA V100 datasheet: no TF32 or FP8 tensor cores."),
    "v100-sxm2-32gb": (None, None, "NVIDIA V100 datasheet: no TF32 or FP8 tensor cores."),
    "v100-sxm3-32gb": (None, None, "NVIDIA V100 datasheet: no TF32 or FP8 tensor cores."),
    "a100-sxm4-40gb": (None, 156e12, "NVIDIA A100 datasheet: TF32 156 TFLOPS dense (312 "
                       "sparse); no FP8."),
    "a100-sxm4-80gb": (None, 156e12, "NVIDIA A100 datasheet: TF32 156 TFLOPS dense (312 "
                       "sparse); no FP8."),
    "h100-sxm5-80gb": (1979e12, 494.7e12, "NVIDIA H100 datasheet (SXM): FP8 3,958 TFLOPS and "
                       "TF32 989 TFLOPS with sparsity; dense = half."),
    "h200-sxm-141gb": (1979e12, 494.7e12, "NVIDIA H200 datasheet (SXM): FP8 3,958 and TF32 989 "
                       "TFLOPS with sparsity; dense = half."),
    "gh200-96gb": (1979e12, 494.7e12, "NVIDIA GH200 datasheet: FP8 3,958 and TF32 989 TFLOPS "
                   "with sparsity; dense = half."),
    "b200-sxm-180gb": (4.5e15, 1.125e15, "NVIDIA HGX B200 datasheet (8 GPUs): FP8 72 PFLOPS and "
                       "TF32 18 PFLOPS with sparsity; per GPU / 8, dense = half."),
    "gb200-186gb": (5e15, 1.25e15, "NVIDIA GB200 NVL72 specifications (72 GPUs): FP8 720 "
                    "PFLOPS and TF32 180 PFLOPS with sparsity; per GPU / 72, dense = half."),
    "b300-sxm-270gb": (4.5e15, 1.125e15, "Bekman @744d01e1, B300 SXM: FP8 4,500 and TF32 1,125 "
                       "TFLOPS dense (the DGX B300 datasheet's 72 PFLOPS FP8 for 8 GPUs, "
                       "with sparsity)."),
    "gb300-288gb": (5e15, 1.25e15, "Bekman @744d01e1, GB300 SXM: FP8 5,000 and TF32 1,250 "
                    "TFLOPS dense, as GB200."),
    "l40s-48gb": (733e12, 183e12, "NVIDIA L40S datasheet: FP8 1,466 and TF32 366 TFLOPS with "
                  "sparsity; dense = half."),
}

#: Output tile of the GEMM model (rows x columns), as in :mod:`simulator.workload.compute`.
GEMM_TILE = (128, 128)

#: HBM bytes per parameter of the rank's shard of Megatron-LM's mixed-precision optimizer step
#: (``megatron/core/optimizer/optimizer.py``, ``MixedPrecisionOptimizer.step``: prepare_grads,
#: clip_grad_norm, the inner Adam step, ``_copy_main_params_to_model_params``; and the main-grad
#: buffer zeroed before the next step's backward): gradient norm, read the fp32 main gradient (4);
#: fused Adam, read main parameter, gradient and both moments (16) and write parameter and
#: moments (12); copy to the 16-bit model weights, read 4 and write 2; zero the fp32 gradient
#: buffer (4) = 42. fp16 adds the loss-scale unscale and inf/nan check
#: (``torch._amp_foreach_non_finite_check_and_unscale_``: read + write the fp32 gradient, 8).
ADAM_BYTES_PER_PARAM = 42
ADAM_UNSCALE_BYTES_PER_PARAM = 8


@dataclass(frozen=True)
class GpuRates:
    """Achievable fractions of one GPU's peaks by op class (see the module notes)."""

    gemm_fraction: float                 # bf16/fp16 large GEMM, of the dense peak
    gemm_fraction_fp8: float | None      # fp8 large GEMM, of the fp8 peak
    attention: str                       # "flash2", "flash3" or "unfused"
    attention_fwd_fraction: float
    attention_bwd_fraction: float
    source: str


_MAMF = ("MAMF table, S. Bekman, Machine Learning Engineering, compute/accelerator/README.md "
         "(github.com/stas00/ml-engineering)")
_FA2 = ("FlashAttention-2 (Dao 2023, arXiv 2307.08691), abstract: 50-73 % of peak on A100; "
        "forward 0.73 (top), backward 0.50 (bottom)")
_FA3 = ("FlashAttention-3 (Shah et al. 2024, arXiv 2407.08608): forward up to 740 TFLOP/s bf16 "
        "= 0.75 of 989.5; backward 0.50 ASSUMED (FA2's A100 bottom; the FA3 paper's backward "
        "figures were not copied)")

_FA4 = ("0.71: FlashAttention-4 (Zadouri et al. 2026, arXiv 2603.05451), abstract: 'up to 1613 "
        "TFLOPs/s (71% utilization)' on B200 with BF16, the best published B200 attention "
        "kernel and 'up to 1.3x' faster than cuDNN 9.13, which Transformer Engine runs there: "
        "an upper bound on the rate a training step's attention gets")

GPU_RATES: dict[str, GpuRates] = {
    "a100-sxm4-40gb": GpuRates(0.869, None, "flash2", 0.73, 0.50,
                               f"GEMM: {_MAMF}, A100 SXM 271.2 / 312. Attention: {_FA2}."),
    "a100-sxm4-80gb": GpuRates(0.869, None, "flash2", 0.73, 0.50,
                               f"GEMM: {_MAMF}, A100 SXM 271.2 / 312. Attention: {_FA2}."),
    "h100-sxm5-80gb": GpuRates(0.803, 0.709, "flash3", 0.75, 0.50,
                               f"GEMM: {_MAMF}, H100 SXM bf16 794.5 / 989, fp8 1402.6 / 1979. "
                               f"Attention: {_FA3}."),
    "h200-sxm-141gb": GpuRates(0.803, 0.734, "flash3", 0.75, 0.50,
                               f"GEMM: {_MAMF}, bf16 'H200 is the same' as H100 SXM (80.3 %), "
                               f"fp8 H200 1453.4 / 1979. Attention: {_FA3}."),
    "gh200-96gb": GpuRates(0.838, 0.776, "flash3", 0.75, 0.50,
                           f"GEMM: {_MAMF}, GH200 bf16 828.6 / 989, fp8 1535 / 1979 (the 141 GB "
                           f"version). Attention: {_FA3}."),
    "b200-sxm-180gb": GpuRates(0.776, 0.763, "flash3", 0.71, 0.50,
                               f"GEMM: {_MAMF}, B200 bf16 1745 / 2250, fp8 3432.5 / 4500. "
                               f"Attention: forward {_FA4}; backward 0.50 ASSUMED (FA2's A100 "
                               f"bottom, as Hopper's)."),
    "gb200-186gb": GpuRates(0.729, 0.723, "flash3", 0.71, 0.50,
                            f"GEMM: {_MAMF} @744d01e1, GB200 SXM bf16 1822 / 2500, fp8 3615.6 "
                            f"/ 5000. Attention: B200's row (the same Blackwell silicon; no "
                            f"GB200 attention rate published): forward {_FA4}; backward 0.50 "
                            f"ASSUMED."),
    "b300-sxm-270gb": GpuRates(0.786, 0.745, "flash3", 0.71, 0.50,
                               f"GEMM: {_MAMF} @744d01e1, B300 SXM bf16 1769 / 2250, fp8 3353.3 "
                               f"/ 4500. Attention: B200's row (the one Blackwell attention rate "
                               f"published): forward {_FA4}; backward 0.50 ASSUMED."),
    "gb300-288gb": GpuRates(0.729, 0.723, "flash3", 0.71, 0.50,
                            "GEMM: ASSUMED GB200's MAMF fractions (no GB300 row in "
                            f"{_MAMF} @744d01e1; GB300's peaks are GB200's, its GPU the "
                            f"Blackwell Ultra that B300 shows within 1.4 % of B200 in bf16). "
                            f"Attention: B200's row: forward {_FA4}; backward 0.50 ASSUMED."),
    "l40s-48gb": GpuRates(0.803, 0.709, "flash2", 0.73, 0.50,
                          f"GEMM: ASSUMED the H100 SXM MAMF fractions (no L40S row in {_MAMF}). "
                          f"Attention: {_FA2} (Ada runs FA2)."),
    "v100-sxm2-16gb": GpuRates(0.80, None, "unfused", 0.80, 0.80,
                               "GEMM: ASSUMED 0.80 of the 125 TFLOPS tensor peak (no V100 row in "
                               f"{_MAMF}). Attention: unfused (FlashAttention-2 needs Ampere or "
                               "newer): batched GEMMs at the GEMM fraction + memory-bound passes."),
    "v100-sxm2-32gb": GpuRates(0.80, None, "unfused", 0.80, 0.80,
                               "Same silicon as v100-sxm2-16gb: its row."),
    "v100-sxm3-32gb": GpuRates(0.80, None, "unfused", 0.80, 0.80,
                               "DGX-2's SXM3 module, the same GV100 silicon as v100-sxm2-16gb: "
                               "its row."),
}

_DEFAULT_RATES = GpuRates(0.80, None, "unfused", 0.80, 0.80,
                          "ASSUMED: no sourced row for this device; GEMMs at 0.80 of the fp16 "
                          "peak, unfused attention.")


#: Fraction of the MAMF rate (the best large GEMM over a shape search, on an idle GPU) that the
#: GEMMs of a training step sustain: the exact shape's cuBLAS kernel rather than the search's
#: best, clocks held under the power limit while every GPU of the node computes, SMs shared with
#: NCCL kernels of overlapped communication. FITTED, the one fitted constant of the LLM cost
#: model (docs/validation/sources.md): least squares over the ten per-layer forward and backward
#: times of the 22B GPT on 8 A100s in Korthikanti et al. 2022 (arXiv 2205.05198), Table 4
#: (``tests/test_llm_accuracy.py`` refits it). Not applied to attention: the FlashAttention
#: fractions are already the papers' measured rates at training shapes, not a best-case envelope.
TRAINING_GEMM_EFFICIENCY = 0.785

#: Devices without an entry in :data:`simulator.workload.compute.DEVICE_EFFICIENCY` that are the
#: same silicon as one with an entry (HBM fraction, launch overhead and SM count are the chip's).
EFFICIENCY_ALIASES = {
    "v100-sxm3-32gb": "v100-sxm2-32gb",   # DGX-2's SXM3 module: the same GV100 die, 80 SMs
}


def _efficiency(dev: Device):
    """``device_efficiency`` of the device, or of the device it is the same silicon as."""
    try:
        return device_efficiency(dev)
    except ConfigError:
        alias = EFFICIENCY_ALIASES.get(dev.name)
        if alias is None:
            raise
        return device_efficiency(alias)


def resolve_device(device) -> Device:
    """A :class:`Device` from a preset or its name."""
    if isinstance(device, Device):
        return device
    return get_device(device)


def gpu_rates(device) -> GpuRates:
    dev = resolve_device(device)
    return GPU_RATES.get(dev.name, _DEFAULT_RATES)


def check_precision(device, precision: str) -> None:
    """Refuse a precision the device cannot run (fp8 without fp8 tensor cores), in one line."""
    dev = resolve_device(device)
    if precision not in ("bf16", "fp16", "fp8", "tf32", "fp32"):
        raise ConfigError(f"precision must be one of bf16, fp16, fp8, tf32, fp32, "
                          f"not {precision!r}")
    if precision == "fp8" and EXTRA_PEAKS.get(dev.name, (None,))[0] is None:
        have = ", ".join(n for n, row in EXTRA_PEAKS.items() if row[0])
        raise ConfigError(f"precision fp8 needs FP8 tensor cores; {dev.name} has none "
                          f"(fp8 devices: {have})")
    if precision == "bf16" and dev.name.startswith(("v100", "p100", "k80", "rtx-2080")):
        raise ConfigError(f"precision bf16 needs Ampere or newer; {dev.name} has no bf16 "
                          f"tensor cores (use fp16)")


def peak_flops(device, precision: str) -> float:
    """Dense tensor-core peak of ``device`` at ``precision`` (FLOP/s)."""
    dev = resolve_device(device)
    check_precision(dev, precision)
    if precision in ("bf16", "fp16"):
        return dev.fp16_flops_per_s
    if precision == "fp32":
        return dev.fp32_flops_per_s
    fp8, tf32, _ = EXTRA_PEAKS.get(dev.name, (None, None, ""))
    if precision == "fp8":
        return fp8
    return tf32 if tf32 else dev.fp32_flops_per_s


# ------------------------------------------------------------------------------------------
# Kernels
# ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Kernel:
    """One kernel: ``op`` (table key: ``gemm``, ``attention_fwd``, ``attention_bwd``,
    ``elementwise``, ``adam``), its shape key, FLOPs of work, HBM bytes, and the op class that
    picks the fraction (``gemm``, ``attention_fwd``, ``attention_bwd``, ``memory``)."""

    op: str
    shape: str
    flops: float
    bytes: float
    cls: str
    precision: str = "bf16"
    dims: tuple = field(default=(), compare=False)     # (m, n, k) for GEMMs


def gemm(m: int, n: int, k: int, precision: str = "bf16") -> Kernel:
    """``(m x k) @ (k x n)``: ``2mnk`` FLOPs; reads both inputs, writes a 16-bit output."""
    m, n, k = int(m), int(n), int(k)
    in_bytes = 1 if precision == "fp8" else (4 if precision in ("fp32", "tf32") else 2)
    nbytes = (m * k + k * n) * in_bytes + m * n * 2
    return Kernel("gemm", f"m={m},n={n},k={k},dtype={precision}", 2.0 * m * n * k, nbytes,
                  "gemm", precision, (m, n, k))


def window_keys(s_kv: int, window: int) -> float:
    """Keys per query, on average, of causal attention limited to ``window`` keys over a
    sequence of ``s_kv``: position ``p`` sees ``min(p + 1, window)`` keys."""
    w = min(window, s_kv)
    return w - w * (w - 1) / (2.0 * s_kv)


def attention(batch: int, heads: int, kv_heads: int, s_q: int, s_kv: int, head_dim: int,
              backward: bool = False, causal: bool = True, window: int | None = None,
              v_head_dim: int | None = None) -> Kernel:
    """Fused attention over ``batch x heads`` of ``s_q`` queries and ``s_kv`` keys. Work FLOPs in
    the FlashAttention convention (module notes): the causal half of ``s_q x s_kv``, or with a
    sliding ``window`` (FlashAttention's ``window_size``, local attention) the keys each query
    sees (:func:`window_keys`), at the same achievable rate; bytes: Q, K, V, O (and their
    gradients). ``head_dim`` is the query and key width of a head, ``v_head_dim`` (default the
    same) its value and output width: ``Q K^T`` costs ``2·head_dim`` FLOPs per score, ``P V``
    ``2·v_head_dim`` (multi-latent attention: 192 and 128)."""
    dv = head_dim if v_head_dim is None else v_head_dim
    keys = window_keys(s_kv, window) if window is not None else s_kv / (2 if causal else 1)
    f = 2.0 * batch * s_q * keys * heads * (head_dim + dv)
    qo = batch * s_q * heads * (head_dim + dv)
    kv = batch * s_kv * kv_heads * (head_dim + dv)
    nbytes = (2 * qo + 2 * kv) * (2.5 if backward else 1.0)
    op = "attention_bwd" if backward else "attention_fwd"
    shape = (f"b={batch},heads={heads},kv_heads={kv_heads},sq={s_q},skv={s_kv},d={head_dim},"
             + (f"dv={dv}," if dv != head_dim else "")
             + f"causal={int(causal)}" + (f",window={window}" if window is not None else ""))
    return Kernel(op, shape, 2.5 * f if backward else f, nbytes, op, "bf16")


def elementwise(name: str, nbytes: float) -> Kernel:
    """A memory-bound pass that moves ``nbytes`` (reads + writes)."""
    return Kernel("elementwise", f"{name},bytes={int(nbytes)}", 0.0, float(nbytes), "memory")


def adam(params: float, precision: str = "bf16") -> Kernel:
    """One optimizer step over ``params`` parameters (:data:`ADAM_BYTES_PER_PARAM` each, plus
    :data:`ADAM_UNSCALE_BYTES_PER_PARAM` under fp16's dynamic loss scaling)."""
    per = ADAM_BYTES_PER_PARAM + (ADAM_UNSCALE_BYTES_PER_PARAM if precision == "fp16" else 0)
    return Kernel("adam", f"params={int(params)}", 0.0, params * per, "memory")


def _split_k(m: int, n: int, k: int, multiprocessors: int) -> int:
    """Split-K factor: an output with fewer tiles than SMs splits its reduction so that every SM
    gets work (at most one split per 128 of ``k``), as cuBLAS does for skinny products."""
    tm, tn = GEMM_TILE
    tiles = math.ceil(m / tm) * math.ceil(n / tn)
    if tiles >= multiprocessors:
        return 1
    return max(1, min(multiprocessors // tiles, math.ceil(k / max(tm, tn))))


def gemm_shape_factor(m: int, n: int, k: int, multiprocessors: int) -> float:
    """Useful fraction of the GPU a GEMM keeps busy: tile quantization (partly filled edge
    tiles) x wave quantization (a last, partial wave of tiles), after split-K for outputs with
    fewer tiles than SMs (NVIDIA's Matrix Multiplication Background User's Guide). Split-K's
    cost, the fp32 partial sums written and read back, is memory traffic (:func:`roofline_time`)."""
    tm, tn = GEMM_TILE
    rows, cols = math.ceil(m / tm), math.ceil(n / tn)
    filled = (m * n) / (rows * tm * cols * tn)
    tiles = rows * cols * _split_k(m, n, k, multiprocessors)
    waves = math.ceil(tiles / multiprocessors)
    return filled * tiles / (waves * multiprocessors)


def _compute_rate(dev: Device, kernel: Kernel) -> float:
    rates = gpu_rates(dev)
    if kernel.cls == "gemm":
        precision = kernel.precision
        fraction = rates.gemm_fraction
        if precision == "fp8":
            fraction = rates.gemm_fraction_fp8 or rates.gemm_fraction
        sms = _efficiency(dev).multiprocessors or 1
        m, n, k = kernel.dims
        return (peak_flops(dev, precision) * fraction * TRAINING_GEMM_EFFICIENCY
                * gemm_shape_factor(m, n, k, sms))
    if kernel.cls == "attention_fwd":
        return dev.fp16_flops_per_s * rates.attention_fwd_fraction
    if kernel.cls == "attention_bwd":
        return dev.fp16_flops_per_s * rates.attention_bwd_fraction
    return math.inf


def roofline_time(device, kernel: Kernel) -> float:
    """Roofline seconds of ``kernel`` on ``device`` (module notes)."""
    dev = resolve_device(device)
    eff = _efficiency(dev)
    compute = kernel.flops / _compute_rate(dev, kernel) if kernel.flops else 0.0
    nbytes = kernel.bytes
    if kernel.cls == "gemm":
        m, n, k = kernel.dims
        split = _split_k(m, n, k, eff.multiprocessors or 1)
        nbytes += (split - 1) * m * n * 4 * 2 if split > 1 else 0
    memory = nbytes / (dev.memory_bandwidth_bytes_per_s * eff.memory_efficiency)
    return max(compute, memory) + eff.kernel_overhead_s


# ------------------------------------------------------------------------------------------
# Measured kernel tables
# ------------------------------------------------------------------------------------------

KERNEL_COLUMNS = ("op", "shape", "time_s")


class KernelTable:
    """Measured kernel times keyed by ``(op, shape)`` (the :class:`Kernel` keys), e.g. read from
    a CSV with columns ``op, shape, time_s`` (what a kernel benchmark writes). With
    ``fallback=False`` (the default) a kernel missing from the table is an error naming it;
    with ``fallback=True`` it gets the roofline time."""

    def __init__(self, entries: dict, label: str = "kernel table", fallback: bool = False):
        self.entries = {}
        for (op, shape), time_s in dict(entries).items():
            t = float(time_s)
            if not t >= 0 or math.isinf(t):
                raise ConfigError(f"{label}: time_s for ({op}, {shape}) must be a finite "
                                  f"non-negative number, not {time_s!r}")
            self.entries[(str(op), str(shape))] = t
        self.label = label
        self.fallback = fallback

    @classmethod
    def from_csv(cls, path, fallback: bool = False) -> "KernelTable":
        path = Path(path)
        try:
            with path.open(newline="") as handle:
                reader = csv.DictReader(handle)
                missing = [c for c in KERNEL_COLUMNS if c not in (reader.fieldnames or ())]
                if missing:
                    raise ConfigError(f"kernel table {path}: missing column(s) "
                                      f"{', '.join(missing)}; need {', '.join(KERNEL_COLUMNS)}")
                entries = {}
                for line, row in enumerate(reader, start=2):
                    try:
                        entries[(row["op"], row["shape"])] = float(row["time_s"])
                    except (TypeError, ValueError):
                        raise ConfigError(f"kernel table {path}, line {line}: time_s is not a "
                                          f"number: {row['time_s']!r}") from None
        except OSError as exc:
            raise ConfigError(f"cannot read kernel table {path}: {exc.strerror}") from None
        return cls(entries, label=f"kernel table {path}", fallback=fallback)

    def get(self, op: str, shape: str) -> float | None:
        return self.entries.get((op, shape))

    def asked(self, kernel: Kernel) -> None:
        """Called with every kernel looked up (a recording table keeps them: what a
        benchmark must measure, :func:`kernels_of`)."""


    def lookup(self, op: str, shape: str) -> float:
        """The measured time, or ConfigError naming the missing (op, shape)."""
        time_s = self.get(op, shape)
        if time_s is None:
            ops = sorted({o for o, _ in self.entries})
            raise ConfigError(f"{self.label} has no entry for op {op!r} shape {shape!r} "
                              f"({len(self.entries)} entries, ops: {', '.join(ops) or 'none'})")
        return time_s

    def __len__(self) -> int:
        return len(self.entries)


class _Recorder(KernelTable):
    """A table that answers nothing (the roofline answers) and keeps every kernel asked for."""

    def __init__(self):
        super().__init__({}, label="kernel recorder", fallback=True)
        self.kernels: dict = {}

    def asked(self, kernel: Kernel) -> None:
        self.kernels.setdefault((kernel.op, kernel.shape), kernel)


def kernels_of(step_work_fn) -> list[Kernel]:
    """The distinct kernels ``step_work_fn(kernels=table)`` looks up, in first-use order: the
    rows a measured kernel table needs for that model and layout
    (``clustersim measure kernels --llm``)."""
    recorder = _Recorder()
    step_work_fn(kernels=recorder)
    return list(recorder.kernels.values())


def kernel_time(device, kernel: Kernel, kernels: KernelTable | None = None) -> float:
    """Seconds of ``kernel``: the measured table's entry when a table is given, else the
    roofline (module notes)."""
    if kernels is not None:
        kernels.asked(kernel)
        measured = kernels.get(kernel.op, kernel.shape)
        if measured is not None:
            return measured
        if not kernels.fallback:
            kernels.lookup(kernel.op, kernel.shape)   # raises, naming the entry
    return roofline_time(device, kernel)
