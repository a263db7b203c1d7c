"""Compute model: per-layer forward and backward times of a model on a device.

A :class:`ComputeProfile` is what the training layer consumes: one :class:`LayerTime` per layer
(in forward order) plus the optimizer step. Profiles come from one of two sources:

* :func:`roofline_profile`, an analytic model built from a layer table
  (:mod:`simulator.workload.models`) and a device preset (:mod:`simulator.topology.devices`); or
* :func:`measured_profile`, a per-layer CSV written by a profiler (schema below).

:func:`compute_profile` resolves registry names and picks one of them.

The roofline model
------------------
Every layer runs as one kernel forward and, backward, as two when it has parameters (an input
gradient and a weight gradient; the first layer has no input gradient) or one otherwise. Its time
is the roofline of Williams, Waterman & Patterson (CACM 2009) with achieved, not peak, rates,
plus a fixed per-kernel overhead (launch and framework dispatch)::

    t = max(FLOPs / (peak * efficiency * q),  bytes / (bandwidth * memory_efficiency))
        + kernels * kernel_overhead_s

* **FLOPs**: the layer's forward FLOPs times the batch (backward: twice that, weight and input
  gradients; once for the first layer). On a GPU's CUDA cores, a convolution whose counts imply
  a 3x3 or 5x5 kernel at stride 1 runs a Winograd algorithm (Lavin & Gray 2016, "Fast Algorithms
  for Convolutional Neural Networks", CVPR; cuDNN 5.1's ``WINOGRAD_NONFUSED``), doing the same
  work with :data:`FAST_CONV_SPEEDUP` times fewer multiplies. Tensor-core (fp16/amp on Volta and
  later) convolutions are implicit GEMMs and get no such factor. The kernel is inferred from
  the counts (see :func:`_kernel_area`), since a layer row does not carry it.
* **q, GEMM quantization** (GPUs only): a convolution or linear layer is a GEMM of
  ``M = batch x output positions`` rows by ``N = output channels`` columns, cut into
  :data:`GEMM_TILE` tiles. Columns are whole tiles, so a partly filled last column tile wastes
  the rest (*tile quantization*: Inception's 80, 160 or 192 channels pay for it, ResNet's powers
  of two do not), and a GEMM with fewer tiles than the device holds at once leaves
  multiprocessors idle: occupancy ``min(1, tiles / (SMs x 2))``, where a GEMM whose reduction
  ``K`` exceeds ``M`` is split along ``K`` into ``K / M`` pieces first (split-K, as cuBLAS does
  for skinny products such as a classifier at a small batch). Both follow NVIDIA's "Matrix
  Multiplication Background User's Guide" (Deep Learning Performance documentation). Its *wave*
  quantization (a last, partial wave of tiles) is left out: it would make throughput fall at
  some batch increments, and libraries pick tile shapes to avoid it. With a fixed per-sample
  cost and these terms, per-sample throughput never falls as the batch grows.
* **bytes**: input activations (the previous layer's output) + output activations, times the
  batch, plus the parameters; backward moves about twice that (it reads the output gradient, the
  saved input and the weights, and writes the input and weight gradients). The attention core
  makes :data:`MEMORY_PASSES` passes (``Q K^T``, softmax, dropout and ``P V`` each touch the
  score matrix). Embeddings move only the rows they gather. Precision ``"fp16"``/``"amp"``
  halves activation, parameter and gradient bytes and uses the device's fp16 peak with
  ``tensor_efficiency``.
* **optimizer**: memory-bound, ``params * OPTIMIZER_BYTES_PER_PARAM[optimizer] / (bandwidth *
  memory_efficiency)``. SGD with momentum reads the parameter, the gradient and the momentum and
  writes the momentum and the parameter: 5 x 4 = 20 bytes per parameter; Adam reads the parameter,
  the gradient and two moments and writes three: 7 x 4 = 28; plain SGD 12. Mixed precision reads
  an fp16 gradient (2 bytes fewer) but writes an fp16 copy of the weights (2 more): the same.

Achieved efficiencies are per device, never per model: :data:`DEVICE_EFFICIENCY` holds one
:class:`DeviceEfficiency` per preset, fitted once per device to every published single-GPU
throughput we have for it (``tests/data/single_gpu_throughput.csv``), or, for devices without
measurements, assumed from documented typical fractions. Each entry's ``source`` says which.

What the model does not see: the sample read by the first layer, concatenations (free in the
layer tables), dropout outside attention, heads missing from a layer table (BERT pre-training's
masked-LM head adds about 4 % to BERT-base at 128 tokens), host-side input pipelines, and
framework overheads beyond one per kernel; a framework that fuses kernels beats it and one that
runs many small kernels per layer loses to it.

Measured profiles
-----------------
A CSV with columns ``layer, forward_s, backward_s`` and optionally ``model, device, batch,
threads, forward_std_s, backward_std_s, iterations`` (what :mod:`simulator.measure` writes).
Validation is strict: a missing or unknown column, an empty or non-numeric cell, or a negative time
raises :class:`~simulator.errors.ConfigError` naming the file, the row and the column.

With a ``model``, the rows are mapped onto its layer table so that the profile's layers line up
with ``model.layers`` (the training layer attaches each layer's gradient to the layer's backward
time). A row's ``layer`` must name a model layer or a dotted prefix of some (``layer1.0`` covers
``layer1.0.conv1.conv`` ... ``layer1.0.add``: a coarser profiler granularity); a block row's times
are spread over the layers it covers in proportion to their forward FLOPs (equally if they have
none). Rows must follow the model's forward order; model layers no row covers get zero time (their
work is taken as fused into a measured neighbour). Without a model the rows are used as they are.
"""

from __future__ import annotations

import csv
import math
import numbers
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from simulator.errors import ConfigError, unknown_name
from simulator.topology.devices import Device, get_device
from simulator.workload.models import FP32_BYTES, Layer, Model, get_model

__all__ = [
    "DEVICE_EFFICIENCY", "FAST_CONV_SPEEDUP", "GEMM_TILE", "MEASURED_COLUMNS",
    "MEMORY_PASSES", "OPTIMIZER_BYTES_PER_PARAM", "PRECISIONS", "ComputeProfile",
    "DeviceEfficiency", "LayerTime", "compute_profile", "device_efficiency", "gradient_bytes",
    "measured_profile", "optimizer_time", "roofline_profile",
]


# --------------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LayerTime:
    """Forward and backward time of one layer for a whole batch, seconds."""

    name: str
    forward_s: float
    backward_s: float


@dataclass(frozen=True)
class ComputeProfile:
    """Per-layer compute times of one training iteration on one device.

    Attributes
    ----------
    layers : tuple of LayerTime
        In forward order (backward runs them in reverse).
    optimizer_s : float
        The optimizer step after all gradients are aggregated, seconds.
    """

    layers: tuple[LayerTime, ...]
    optimizer_s: float = 0.0

    def __post_init__(self):
        object.__setattr__(self, "layers", tuple(self.layers))
        if not self.layers:
            raise ValueError("a compute profile needs at least one layer")
        if not (math.isfinite(self.optimizer_s) and self.optimizer_s >= 0):
            raise ValueError(f"optimizer_s must be finite and >= 0, not {self.optimizer_s!r}")

    def scaled(self, factor: float) -> "ComputeProfile":
        """Every time multiplied by ``factor`` (per-layer shares kept)."""
        if not (math.isfinite(factor) and factor > 0):
            raise ValueError(f"a compute scale must be finite and > 0, not {factor!r}")
        return ComputeProfile(tuple(LayerTime(l.name, l.forward_s * factor,
                                              l.backward_s * factor) for l in self.layers),
                              self.optimizer_s * factor)

    def accumulated(self, steps: int) -> "ComputeProfile":
        """The compute of one optimizer step that accumulates the gradients of ``steps``
        micro-batches (gradient accumulation; PyTorch DDP's ``no_sync`` on all but the last,
        Horovod's ``backward_passes_per_step``): the first ``steps - 1`` micro-batches'
        forward and backward run before the last one's forward, as compute that no gradient
        aggregation overlaps, so they are added to the first layer's forward. The last
        micro-batch's backward, and the buckets it makes ready, are this profile's own."""
        if not (isinstance(steps, int) and steps >= 1):
            raise ValueError(f"accumulation steps must be an integer >= 1, not {steps!r}")
        if steps == 1:
            return self
        extra = (steps - 1) * (self.forward_s + self.backward_s)
        first = self.layers[0]
        return ComputeProfile((LayerTime(first.name, first.forward_s + extra, first.backward_s),)
                              + self.layers[1:], self.optimizer_s)

    def anchored(self, samples_per_s: float, batch: int) -> "ComputeProfile":
        """This profile scaled so one device runs ``samples_per_s`` at ``batch`` per
        iteration: a measured single-GPU throughput fixes the total, the model keeps the
        split over layers (which decides how much communication backward can hide)."""
        if not (math.isfinite(samples_per_s) and samples_per_s > 0):
            raise ValueError(f"a single-GPU throughput must be finite and > 0, not "
                             f"{samples_per_s!r}")
        return self.scaled(batch / samples_per_s / self.iteration_s)

    @property
    def forward_s(self) -> float:
        """Forward pass, seconds."""
        return math.fsum(layer.forward_s for layer in self.layers)

    @property
    def backward_s(self) -> float:
        """Backward pass, seconds."""
        return math.fsum(layer.backward_s for layer in self.layers)

    @property
    def iteration_s(self) -> float:
        """forward + backward + optimizer on one device with no communication, seconds."""
        return self.forward_s + self.backward_s + self.optimizer_s

    def throughput(self, batch: int) -> float:
        """Samples per second of one device computing alone with this profile at ``batch``."""
        return batch / self.iteration_s


@dataclass(frozen=True)
class DeviceEfficiency:
    """Achieved fractions of a device's peak rates, and how its kernels are scheduled.

    Attributes
    ----------
    compute_efficiency : float
        Fraction of the fp32 peak a large, well-shaped fp32 GEMM or convolution reaches.
    tensor_efficiency : float
        Fraction of the fp16 (tensor-core) peak reached in mixed precision.
    memory_efficiency : float
        Fraction of peak memory bandwidth a streaming kernel reaches.
    kernel_overhead_s : float
        Fixed time per kernel: launch plus framework dispatch, seconds.
    multiprocessors : int or None
        Streaming multiprocessors (GPU), for GEMM occupancy; None: no GEMM quantization (CPUs).
    tensor_cores : bool
        fp16 runs on tensor cores (implicit-GEMM convolutions, no Winograd); without them fp16
        runs on the CUDA cores like fp32 and keeps Winograd.
    source : str
        What the numbers were fitted to, with the fit's errors, or what they assume.
    """

    compute_efficiency: float
    tensor_efficiency: float
    memory_efficiency: float
    kernel_overhead_s: float
    multiprocessors: int | None
    tensor_cores: bool
    source: str

    def __post_init__(self):
        for name in ("compute_efficiency", "tensor_efficiency", "memory_efficiency"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise ValueError(f"{name} must be in (0, 1], not {value!r}")
        if not self.kernel_overhead_s >= 0:
            raise ValueError(f"kernel_overhead_s must be >= 0, not {self.kernel_overhead_s!r}")
        if self.multiprocessors is not None and self.multiprocessors < 1:
            raise ValueError(f"multiprocessors must be >= 1 or None, not {self.multiprocessors!r}")


@dataclass(frozen=True)
class _Precision:
    activation_bytes: int   # per element
    param_bytes: int        # per parameter read by forward/backward kernels
    gradient_bytes: int     # per parameter, as aggregated
    tensor: bool            # runs on the fp16 tensor peak


#: Numeric formats. "fp16", "amp" (mixed precision with fp32 master weights) and "bf16" (mixed
#: precision in bfloat16) are modelled alike: 2-byte activations, weights and gradients in the
#: kernels, tensor-core arithmetic (bfloat16's tensor peak is fp16's on the GPUs that have it).
PRECISIONS: dict[str, _Precision] = {
    "fp32": _Precision(4, 4, 4, tensor=False),
    "fp16": _Precision(2, 2, 2, tensor=True),
    "amp": _Precision(2, 2, 2, tensor=True),
    "bf16": _Precision(2, 2, 2, tensor=True),
}

#: Memory traffic of one optimizer step, bytes per parameter (see the module notes).
OPTIMIZER_BYTES_PER_PARAM: dict[str, int] = {"sgd": 12, "sgd_momentum": 20, "adam": 28}

#: GEMM tile (rows M, columns N) for tile quantization and occupancy: cuBLAS/cuDNN's common
#: 128x128 CTA tile, two resident per multiprocessor.
GEMM_TILE = (128, 128)
GEMM_CTAS_PER_MULTIPROCESSOR = 2

#: Multiply reduction realised by Winograd convolution, by kernel area (3x3, 5x5), fp32 on GPUs.
#: F(4x4, 3x3) needs 36 multiplies for 144 direct ones (4x) and F(2x2, 5x5) 36 for 100 (2.8x)
#: (Lavin & Gray 2016); transforms cost part of that. 3x for both fitted the K80 and P100 rows
#: better than 2.25x (F(2x2, 3x3)); without it VGG16 on the P100 would exceed the fp32 peak
#: (its published 154 img/s is 1.35x the peak in direct-convolution FLOPs).
FAST_CONV_SPEEDUP: dict[int, float] = {9: 3.0, 25: 3.0}

#: Passes over (input + output) for layer kinds that run several memory-bound kernels; other kinds
#: make one. Attention: Q K^T writes the scores, softmax reads and writes them, dropout reads
#: them and writes the result and its mask, P V reads them. How many passes a framework makes
#: over a batch norm (statistics, normalise, a separate ReLU, or one fused kernel) is left to the
#: per-device ``memory_efficiency``.
MEMORY_PASSES: dict[str, float] = {"attention": 5.0}


# --------------------------------------------------------------------------------------------
# Per-device achieved efficiencies
# --------------------------------------------------------------------------------------------

_V100 = dict(compute_efficiency=0.64, tensor_efficiency=0.43, memory_efficiency=0.90,
             kernel_overhead_s=5e-6, tensor_cores=True)

#: One entry per device preset; each ``source`` says what it was fitted to or assumes. A fit
#: minimises the largest relative error of single-GPU throughput over all the device's rows in
#: ``tests/data/single_gpu_throughput.csv`` at once (a grid over the numbers, then rounded).
#: Errors are simulated / published - 1.
DEVICE_EFFICIENCY: dict[str, DeviceEfficiency] = {
    # The TF-2017 rows run TensorFlow's unfused batch norm and a separate ReLU kernel, hence
    # memory fractions far below STREAM's; the low K80 compute fraction matches K80 autoboost
    # running well below its 875 MHz boost clock under sustained load.
    "k80-gk210": DeviceEfficiency(
        compute_efficiency=0.33, tensor_efficiency=0.33, memory_efficiency=0.25,
        kernel_overhead_s=10e-6, multiprocessors=13, tensor_cores=False,
        source="Fitted to the 5 TF-2017 tf_cnn_benchmarks single-GPU K80 rows (AWS p2.8xlarge, "
        "synthetic data, one GK210 die): InceptionV3 bs64 +13.0 %, ResNet-50 bs64 -8.0 %, "
        "ResNet-152 bs32 +3.0 %, AlexNet bs512 -12.4 %, VGG16 bs32 +0.4 %. No fp16 arithmetic. "
        "13 SMX per GK210 (2496 cores / 192 per SMX)."),
    "p100-sxm2-16gb": DeviceEfficiency(
        compute_efficiency=0.61, tensor_efficiency=0.61, memory_efficiency=0.30,
        kernel_overhead_s=10e-6, multiprocessors=56, tensor_cores=False,
        source="Fitted to the 9 TF-2017 tf_cnn_benchmarks single-GPU DGX-1 P100 rows "
        "(synthetic data): InceptionV3 bs64 +2.7 % / bs32 +0.6 %, ResNet-50 bs64 -11.3 % / bs32 "
        "-4.3 %, ResNet-152 bs64 -7.9 % / bs32 -3.5 %, AlexNet bs512 -11.5 %, VGG16 bs64 +6.9 % "
        "/ bs32 +10.2 %. fp16 (no tensor cores) assumed to reach fp32's fraction of its 2x "
        "peak. 56 SMs (Tesla P100 whitepaper)."),
    "v100-sxm2-16gb": DeviceEfficiency(
        **_V100, multiprocessors=80,
        source="Fitted to the 4 DLPerf v1 single-GPU V100-SXM2-16GB rows of OneFlow 0.2 "
        "(CUDA 10.2), the one framework with all four: ResNet-50 v1.5 FP32 bs128 -0.7 %, AMP "
        "bs256 -13.8 %, BERT-base (seq 128, Adam) FP32 bs32 -12.2 %, AMP bs64 +12.9 %. The "
        "other DLPerf frameworks run up to 45 % slower than OneFlow on the same GPU. 80 SMs "
        "(Tesla V100 whitepaper)."),
    "v100-sxm2-32gb": DeviceEfficiency(
        **_V100, multiprocessors=80, source="Same silicon as v100-sxm2-16gb: its fit."),
    "v100-sxm3-32gb": DeviceEfficiency(
        **_V100, multiprocessors=80,
        source="Same GV100 silicon as v100-sxm2-16gb (the DGX-2's SXM3 module): its fit."),
    # GPUs without measurements here: the V100 fit (frameworks of the same cuDNN 7/8 and
    # mixed-precision generation), only the SM counts differ. Its fp32 fraction is the 60-70 %
    # of peak that cuDNN convolutions typically reach.
    "a100-sxm4-40gb": DeviceEfficiency(
        **_V100, multiprocessors=108,
        source="Assumed: the V100 fit; 108 SMs (NVIDIA A100 whitepaper). fp32 is IEEE fp32, "
        "not TF32."),
    "a100-sxm4-80gb": DeviceEfficiency(
        **_V100, multiprocessors=108,
        source="Assumed: the V100 fit; 108 SMs (NVIDIA A100 whitepaper)."),
    "h100-sxm5-80gb": DeviceEfficiency(
        **_V100, multiprocessors=132,
        source="Assumed: the V100 fit; 132 SMs (NVIDIA H100 whitepaper, SXM5)."),
    "rtx-2080ti": DeviceEfficiency(
        **_V100, multiprocessors=68, source="Assumed: the V100 fit; 68 SMs (Turing whitepaper)."),
    "rtx-3090": DeviceEfficiency(
        **_V100, multiprocessors=82, source="Assumed: the V100 fit; 82 SMs (GA102 whitepaper)."),
    "rtx-4090": DeviceEfficiency(
        **_V100, multiprocessors=128,
        source="Assumed: the V100 fit; 128 SMs (Ada whitepaper)."),
    "h200-sxm-141gb": DeviceEfficiency(
        **_V100, multiprocessors=132,
        source="Assumed: the V100 fit; 132 SMs (the H100 SXM die, NVIDIA H200 datasheet)."),
    "gh200-96gb": DeviceEfficiency(
        **_V100, multiprocessors=132,
        source="Assumed: the V100 fit; 132 SMs (the H100 GPU of the GH200 datasheet)."),
    "b200-sxm-180gb": DeviceEfficiency(
        **_V100, multiprocessors=148,
        source="Assumed: the V100 fit; 148 SMs (NVIDIA Blackwell architecture technical brief, "
               "B200)."),
    "gb200-186gb": DeviceEfficiency(
        **_V100, multiprocessors=148,
        source="Assumed: the V100 fit; 148 SMs (GB200's GPUs are the B200 die)."),
    "b300-sxm-270gb": DeviceEfficiency(
        **_V100, multiprocessors=148,
        source="Assumed: the V100 fit; 148 SMs ASSUMED as B200's (NVIDIA, 'Inside NVIDIA "
               "Blackwell Ultra': 160 SMs in the full GPU; the B300 product's count is not "
               "stated there)."),
    "gb300-288gb": DeviceEfficiency(
        **_V100, multiprocessors=148,
        source="Assumed: the V100 fit; 148 SMs ASSUMED, as b300-sxm-270gb."),
    "l40s-48gb": DeviceEfficiency(
        **_V100, multiprocessors=142,
        source="Assumed: the V100 fit; 142 SMs (NVIDIA Ada / L40S datasheet)."),
    # Host CPUs: oneDNN convolutions and GEMMs typically reach about half of the FMA peak, STREAM
    # about 70 % of the channels' bandwidth, and a framework op costs ~10 us. No GEMM
    # quantization, no Winograd.
    **{name: DeviceEfficiency(
        compute_efficiency=0.50, tensor_efficiency=0.50, memory_efficiency=0.70,
        kernel_overhead_s=10e-6, multiprocessors=None, tensor_cores=False,
        source="Assumed: typical oneDNN fractions on server CPUs.")
       for name in ("cpu-host", "cpu-epyc-7742-2s", "cpu-xeon-8480c-2s", "cpu-grace-72c",
                    "cpu-xeon-8570-2s", "cpu-xeon-8168-2s")},
}


def device_efficiency(device: Device | str) -> DeviceEfficiency:
    """The achieved-efficiency entry of a device preset (or its name)."""
    name = device.name if isinstance(device, Device) else device
    try:
        return DEVICE_EFFICIENCY[name]
    except (KeyError, TypeError):
        raise unknown_name("device efficiency for device", name, DEVICE_EFFICIENCY) from None


# --------------------------------------------------------------------------------------------
# Roofline model
# --------------------------------------------------------------------------------------------

def _precision(precision: str) -> _Precision:
    try:
        return PRECISIONS[precision]
    except (KeyError, TypeError):
        raise unknown_name("precision", precision, PRECISIONS) from None


def _check_batch(batch) -> int:
    if isinstance(batch, bool) or not isinstance(batch, numbers.Integral) or batch < 1:
        raise ConfigError(f"batch must be a positive integer, not {batch!r}")
    return int(batch)


@dataclass(frozen=True)
class _Shape:
    """What the roofline needs of one layer, derived from its counts."""

    flops: float            # forward FLOPs per sample
    in_bytes: int           # fp32 input activations per sample (previous layer's output)
    out_bytes: int          # fp32 output activations per sample
    params: int
    gemm: tuple[float, int] | None  # (output positions per sample, output channels) of a GEMM
    reduction: float        # GEMM reduction length K (0 if not a GEMM)
    kernel_area: int        # 9 or 25 for a stride-1 3x3 / 5x5 convolution, else 0
    kind: str
    first: bool


def _gemm_shape(layer: Layer) -> tuple[float, int] | None:
    """(positions per sample, output channels) of a conv or linear layer, from its counts.

    With ``o`` outputs per sample, forward FLOPs are about ``2 o K`` for a reduction length ``K``
    and parameters about ``cout K``, so ``cout = params / (flops / 2o)``."""
    outputs = layer.activation_bytes / FP32_BYTES
    if layer.kind not in ("conv", "linear") or layer.params == 0 or outputs == 0:
        return None
    reduction = layer.forward_flops / (2 * outputs)
    if reduction <= 0:
        return None
    channels = max(1, round(layer.params / reduction))
    return outputs / channels, channels


def _kernel_area(layer: Layer, previous: Layer | None, gemm) -> int:
    """9 or 25 when a convolution's counts imply a 3x3 or 5x5 kernel at stride 1, else 0.

    Reading the previous layer's output as the input: ``cin = input / positions`` and the kernel
    area is ``K / cin``. A mismatch (a strided conv, or an Inception branch whose input is not
    the previous row) gives a non-square area and no fast algorithm."""
    if layer.kind != "conv" or previous is None or gemm is None:
        return 0
    positions, channels = gemm
    in_channels = previous.activation_bytes / FP32_BYTES / positions
    if in_channels <= 0:
        return 0
    area = layer.forward_flops / (2 * positions * channels) / in_channels
    for candidate in FAST_CONV_SPEEDUP:
        if abs(area - candidate) <= 0.1 * candidate:
            return candidate
    return 0


@lru_cache(maxsize=64)
def _shapes(model: Model) -> tuple[_Shape, ...]:
    shapes, previous = [], None
    for index, layer in enumerate(model.layers):
        gemm = _gemm_shape(layer)
        shapes.append(_Shape(
            layer.forward_flops, previous.activation_bytes if previous else 0,
            layer.activation_bytes, layer.params, gemm,
            layer.forward_flops / (2 * gemm[0] * gemm[1]) if gemm else 0.0,
            _kernel_area(layer, previous, gemm),
            layer.kind, index == 0))
        previous = layer
    return tuple(shapes)


def _quantization(rows: float, cols: int, reduction: float, multiprocessors: int) -> float:
    """Useful fraction of the GPU a GEMM of ``rows x cols`` with reduction length ``reduction``
    keeps busy: the filled fraction of its column tiles times its occupancy (module notes)."""
    tile_m, tile_n = GEMM_TILE
    col_tiles = math.ceil(cols / tile_n)
    filled = cols / (col_tiles * tile_n)
    split_k = max(1.0, reduction / rows)
    tiles = rows / tile_m * col_tiles * split_k
    return filled * min(1.0, tiles / (multiprocessors * GEMM_CTAS_PER_MULTIPROCESSOR))


def optimizer_time(model: Model, device: Device, optimizer: str = "sgd_momentum",
                   efficiency: DeviceEfficiency | None = None) -> float:
    """Seconds of one memory-bound optimizer step: params x bytes/param / achieved bandwidth."""
    try:
        per_param = OPTIMIZER_BYTES_PER_PARAM[optimizer]
    except (KeyError, TypeError):
        raise unknown_name("optimizer", optimizer, OPTIMIZER_BYTES_PER_PARAM) from None
    eff = efficiency or device_efficiency(device)
    return model.params * per_param / (device.memory_bandwidth_bytes_per_s
                                       * eff.memory_efficiency)


def roofline_profile(model: Model, device: Device, batch: int, precision: str = "fp32",
                     efficiency: DeviceEfficiency | None = None,
                     optimizer: str = "sgd_momentum") -> ComputeProfile:
    """Per-layer times of ``model`` on ``device`` at ``batch`` from the roofline model.

    Parameters
    ----------
    model : Model
    device : Device
    batch : int
        Samples per device per iteration.
    precision : {"fp32", "fp16", "amp"}
    efficiency : DeviceEfficiency, optional
        Overrides the device's entry in :data:`DEVICE_EFFICIENCY`.
    optimizer : {"sgd_momentum", "sgd", "adam"}

    Returns
    -------
    ComputeProfile
        One LayerTime per ``model.layers`` entry, and the optimizer step.
    """
    batch = _check_batch(batch)
    fmt = _precision(precision)
    eff = efficiency or device_efficiency(device)
    if fmt.tensor:
        rate = device.fp16_flops_per_s * eff.tensor_efficiency
    else:
        rate = device.fp32_flops_per_s * eff.compute_efficiency
    bandwidth = device.memory_bandwidth_bytes_per_s * eff.memory_efficiency
    scale = fmt.activation_bytes / FP32_BYTES
    is_gpu = device.kind == "gpu" and eff.multiprocessors is not None
    overhead = eff.kernel_overhead_s
    times = []
    for layer, shape in zip(model.layers, _shapes(model)):
        flops = shape.flops * batch
        if shape.kernel_area and is_gpu and not (fmt.tensor and eff.tensor_cores):
            flops /= FAST_CONV_SPEEDUP[shape.kernel_area]
        if shape.gemm is not None and is_gpu:
            flops /= _quantization(shape.gemm[0] * batch, shape.gemm[1], shape.reduction,
                                   eff.multiprocessors)
        if shape.kind == "embedding":  # gathers rows: reads and writes the output only
            moved = 2 * shape.out_bytes * batch * scale
        else:
            passes = MEMORY_PASSES.get(shape.kind, 1.0)
            moved = (passes * (shape.in_bytes + shape.out_bytes) * batch * scale
                     + shape.params * fmt.param_bytes)
        forward = max(flops / rate, moved / bandwidth) + overhead
        if shape.first:  # no input gradient: the weight gradient only
            backward = max(flops / rate, moved / bandwidth) + overhead
        else:
            kernels = 2 if shape.params else 1
            backward = max(2 * flops / rate, 2 * moved / bandwidth) + kernels * overhead
        times.append(LayerTime(layer.name, forward, backward))
    return ComputeProfile(tuple(times), optimizer_time(model, device, optimizer, eff))


def gradient_bytes(model: Model, precision: str = "fp32") -> int:
    """Bytes of gradients one iteration produces: 4 per parameter in fp32, 2 in fp16/amp."""
    return model.params * _precision(precision).gradient_bytes


# --------------------------------------------------------------------------------------------
# Measured profiles
# --------------------------------------------------------------------------------------------

#: Required columns, then optional ones, of a measured per-layer CSV.
MEASURED_COLUMNS = ("layer", "forward_s", "backward_s")
OPTIONAL_COLUMNS = ("model", "device", "batch", "threads", "forward_std_s", "backward_std_s",
                    "iterations")
_FLOAT_COLUMNS = ("forward_s", "backward_s", "forward_std_s", "backward_std_s")
_INT_COLUMNS = ("batch", "threads", "iterations")


def _read_rows(source) -> tuple[str, list[str], list[tuple[str, dict]]]:
    """(label, header, [(where, row)]) from a CSV path or a DataFrame; ``where`` is "row N" or
    "row N (line L)" for messages, ``row`` maps column to stripped cell text."""
    if isinstance(source, (str, Path)):
        label = str(source)
        try:
            with open(source, newline="", encoding="utf-8") as handle:
                reader = csv.reader(handle)
                header = next(reader, None)
                if header is None:
                    raise ConfigError(f"{label}: empty file; expected a header with columns "
                                      f"{', '.join(MEASURED_COLUMNS)}")
                header = [h.strip() for h in header]
                rows, number = [], 0
                for cells in reader:
                    if not cells or all(not c.strip() for c in cells):
                        continue
                    number += 1
                    where = f"row {number} (line {reader.line_num})"
                    if len(cells) != len(header):
                        raise ConfigError(f"{label}: {where} has {len(cells)} cells, the header "
                                          f"{len(header)}")
                    rows.append((where, dict(zip(header, (c.strip() for c in cells)))))
        except OSError as err:
            raise ConfigError(f"{label}: cannot read measured profile: {err.strerror}") from None
        except (UnicodeDecodeError, csv.Error) as err:
            raise ConfigError(f"{label}: not a readable CSV file: {err}") from None
        return label, header, rows
    import pandas as pd

    if isinstance(source, pd.DataFrame):
        header = [str(c) for c in source.columns]
        rows = [(f"row {number}",
                 {h: ("" if pd.isna(v) else str(v).strip()) for h, v in zip(header, values)})
                for number, values in enumerate(source.itertuples(index=False, name=None), 1)]
        return "<DataFrame>", header, rows
    raise ConfigError(f"measured profile must be a CSV path or a pandas DataFrame, not "
                      f"{type(source).__name__}")


def _cell(label: str, where: str, column: str, text: str):
    where = f"{label}: {where}, column {column!r}"
    if text == "":
        raise ConfigError(f"{where}: empty cell")
    if column in _FLOAT_COLUMNS:
        try:
            value = float(text)
        except ValueError:
            raise ConfigError(f"{where}: {text!r} is not a number (seconds)") from None
        if not math.isfinite(value) or value < 0:
            raise ConfigError(f"{where}: {text!r} must be a finite, non-negative time in s")
        return value
    if column in _INT_COLUMNS:
        try:
            value = float(text)
        except ValueError:
            raise ConfigError(f"{where}: {text!r} is not a number") from None
        if not value.is_integer() or value < 1:
            raise ConfigError(f"{where}: {text!r} must be a positive integer")
        return int(value)
    return text


def _covers(row_name: str, layer_name: str) -> bool:
    return layer_name == row_name or layer_name.startswith(row_name + ".")


def _map_onto_model(label: str, wheres: list[str], names: list[str], forward: list[float],
                    backward: list[float], model: Model) -> tuple[LayerTime, ...]:
    """Spread the CSV rows over ``model.layers`` (see the module notes)."""
    layers = model.layers
    fwd, bwd = [0.0] * len(layers), [0.0] * len(layers)
    cursor = 0  # rows must cover layers in forward order
    for where, name, f_s, b_s in zip(wheres, names, forward, backward):
        covered = [i for i, layer in enumerate(layers) if _covers(name, layer.name)]
        if not covered:
            raise ConfigError(f"{label}: {where}, column 'layer': {name!r} is neither a layer "
                              f"of model {model.name!r} nor a dotted prefix of one")
        if covered[0] < cursor:
            raise ConfigError(f"{label}: {where}, column 'layer': {name!r} is out of the "
                              f"model's forward order or overlaps an earlier row")
        cursor = covered[-1] + 1
        weights = [layers[i].forward_flops for i in covered]
        total = math.fsum(weights)
        shares = ([w / total for w in weights] if total > 0
                  else [1 / len(covered)] * len(covered))
        for i, share in zip(covered, shares):
            fwd[i] += f_s * share
            bwd[i] += b_s * share
    return tuple(LayerTime(layer.name, f, b) for layer, f, b in zip(layers, fwd, bwd))


def measured_profile(path_or_frame, model: Model | None = None,
                     optimizer_s: float = 0.0) -> ComputeProfile:
    """A profile from measured per-layer times (schema in the module notes).

    Parameters
    ----------
    path_or_frame : str, Path or pandas.DataFrame
    model : Model, optional
        Map the rows onto this model's layers and check the ``model`` column, if present.
    optimizer_s : float
        The optimizer step, which the per-layer CSV does not hold.

    Raises
    ------
    ConfigError
        On any schema or value problem, naming the file, the row and the column.
    """
    label, header, raw = _read_rows(path_or_frame)
    missing = [c for c in MEASURED_COLUMNS if c not in header]
    if missing:
        raise ConfigError(f"{label}: missing column(s) {', '.join(map(repr, missing))}; "
                          f"required: {', '.join(MEASURED_COLUMNS)}")
    allowed = MEASURED_COLUMNS + OPTIONAL_COLUMNS
    unknown = [c for c in header if c not in allowed]
    if unknown:
        raise ConfigError(f"{label}: unknown column(s) {', '.join(map(repr, unknown))}; "
                          f"allowed: {', '.join(allowed)}")
    repeated = sorted({c for c in header if header.count(c) > 1})
    if repeated:
        raise ConfigError(f"{label}: column(s) {', '.join(map(repr, repeated))} repeated")
    if not raw:
        raise ConfigError(f"{label}: no rows")
    wheres, names, forward, backward = [], [], [], []
    for where, row in raw:
        values = {c: _cell(label, where, c, row[c]) for c in header}
        if model is not None and "model" in values and values["model"] != model.name:
            raise ConfigError(f"{label}: {where}, column 'model': {values['model']!r} does not "
                              f"match model {model.name!r}")
        wheres.append(where)
        names.append(values["layer"])
        forward.append(values["forward_s"])
        backward.append(values["backward_s"])
    if model is not None:
        layers = _map_onto_model(label, wheres, names, forward, backward, model)
    else:
        seen = set()
        for where, name in zip(wheres, names):
            if name in seen:
                raise ConfigError(f"{label}: {where}, column 'layer': {name!r} repeats")
            seen.add(name)
        layers = tuple(LayerTime(n, f, b) for n, f, b in zip(names, forward, backward))
    return ComputeProfile(layers, float(optimizer_s))


def adam_profile(model: Model, device: Device, micro_batch: int, precision: str,
                 profile: "ComputeProfile | None" = None) -> "ComputeProfile":
    """The per-layer profile of large-model training (ZeRO, pipelines): the given ``profile``
    checked to have one entry per layer of ``model``, or the roofline model's with an Adam step,
    computing in fp16 under mixed precision (``amp``/``bf16``: half-width tensor-core math)."""
    if profile is None:
        profile = roofline_profile(model, device, micro_batch,
                                   "fp16" if precision in ("amp", "bf16") else precision,
                                   optimizer="adam")
    if len(profile.layers) != len(model.layers):
        raise ConfigError(f"profile has {len(profile.layers)} layers, model {model.name!r} "
                          f"{len(model.layers)}")
    return profile


# --------------------------------------------------------------------------------------------
# Boundary
# --------------------------------------------------------------------------------------------

def compute_profile(model_name: str, device_name: str, batch: int, precision: str = "fp32",
                    measured_csv=None, optimizer: str = "sgd_momentum") -> ComputeProfile:
    """The compute profile the training layer uses, from registry names.

    With ``measured_csv`` the per-layer times come from that file (mapped onto the model's
    layers) and the optimizer step from the roofline model; otherwise everything is roofline.
    """
    model, device = get_model(model_name), get_device(device_name)
    batch = _check_batch(batch)
    _precision(precision)
    if measured_csv is None:
        return roofline_profile(model, device, batch, precision, optimizer=optimizer)
    return measured_profile(measured_csv, model,
                            optimizer_s=optimizer_time(model, device, optimizer))
