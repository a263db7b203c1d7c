"""Memory per GPU of a hybrid-parallel transformer layout, and the refusal of one that does not fit.

Per pipeline stage (the stage with the most memory is what must fit), bytes per GPU:

* **Model states** (weights, gradients, optimizer states) of the stage's parameters on this
  rank: dense parameters ``/tp``, routed experts ``/(ep x expert_tp)`` (expert tensor
  parallelism defaults to ``tp`` in Megatron-LM's ``model_parallel_config.py``), embeddings on
  the first stage and the output layer on the last (with tied embeddings and ``pp > 1`` the
  last stage keeps its own copy, as Megatron does). Bytes per parameter:

  - Megatron without the distributed optimizer (ZeRO stage 0): 18 for bf16 (2 bf16 weight, 4
    fp32 main gradient, 4 fp32 main weight, 4 + 4 Adam moments), 20 for fp16 (2 + 2 fp16
    gradient + 16 fp32 main weight, main gradient and moments);
  - Megatron's distributed optimizer: ``6 + 12/d`` (bf16) and ``4 + 16/d`` (fp16), ``d`` the
    data-parallel size (NVIDIA/Megatron-LM ``docs/user-guide/features/dist_optimizer.md``, the
    table also used by ``megatron/training/theoretical_memory_usage.py``);
  - ZeRO stages 1-3 / FSDP (= stage 3): ``2 + 2 + 12`` split per stage over ``d`` (Rajbhandari
    et al. SC 2020, Figure 1; :func:`simulator.workload.zero.zero_memory`).

  ``d`` is ``dp x cp`` for dense parameters (Megatron reduces gradients and shards the
  optimizer over the data- and context-parallel ranks) and ``tp x dp x cp / (expert_tp x ep)``
  for experts (the expert-data-parallel group; ``dp x cp / ep`` with ``expert_tp = tp``). fp8
  training keeps bf16 weights and fp32 optimizer states (the fp8 copies Transformer Engine
  makes are transient): counted as bf16.
* **Activations** (:func:`.model.activation_bytes_per_layer`, Korthikanti et al. 2022) times the
  micro-batches in flight on that stage: 1F1B holds ``min(pp - s, m)`` on stage ``s``;
  interleaved holds ``min(2(pp - s - 1) + (v - 1)·pp + 1, m·v)`` model chunks of ``L/(pp·v)``
  layers (Megatron's warm-up count in ``schedules.py``; on stage 0 it is ``pp·(1 + (pp-1)/(pp·v))``
  stages' worth, Korthikanti et al. 2022 Section 4.2.3 and ``theoretical_memory_usage.py``);
  GPipe all ``m``. Full recomputation keeps each layer's input and, while a layer is recomputed,
  one layer's full activations. Plus the first stage's embedding tensors and the last stage's
  logits and loss (one micro-batch at a time).
* **Communication buffers**: an ESTIMATE. NCCL keeps, per communicator, channel and connected
  peer, one receive buffer per protocol: Simple ``DEFAULT_BUFFSIZE`` = 4 MiB, LL128
  ``DEFAULT_LL128_BUFFSIZE`` = 120 x 640 x 8 x 8 = 4,915,200 B, LL ``DEFAULT_LL_BUFFSIZE`` =
  8 x 512 x 8 x 16 = 524,288 B (NVIDIA/nccl ``src/init.cc``; ``NCCL_BUFFSIZE`` etc. override
  them). With :data:`NCCL_PEERS_ASSUMED` peers (ring predecessor + a tree neighbour) and
  :data:`NCCL_CHANNELS_ASSUMED` channels that is about 310 MB per communicator, for each
  parallel group of size > 1 (tp, cp, ep, dp, pp). NVLS/CollNet buffers are not counted.
* **Workspace**: cuBLAS workspaces as Transformer Engine allocates them (``get_cublas_workspace_
  size_bytes``: 32 MiB on Hopper and newer, 4 MiB before; ``num_cublas_streams = 4``), plus a
  CUDA context (:data:`CUDA_CONTEXT_BYTES`, an ASSUMPTION) and allocator fragmentation
  (:data:`FRAGMENTATION_FRACTION` of the tensors above, an ASSUMPTION).

:func:`check_memory` refuses a layout that does not fit in one line: GiB per GPU, GiB missing,
the biggest items.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.errors import ConfigError
from simulator.workload.zero import zero_memory

from .compute import resolve_device
from .layout import Layout, check_layout, main_grad_bytes
from .model import (TransformerConfig, activation_bytes_per_layer, embedding_activation_bytes,
                    output_activation_bytes)

__all__ = [
    "MemoryBreakdown", "memory_per_gpu", "check_memory", "chunk_layers", "chunk_params",
    "stage_params", "in_flight_chunks", "uses_flash", "NCCL_BUFFSIZE_BYTES",
    "NCCL_CHANNELS_ASSUMED", "NCCL_PEERS_ASSUMED", "CUDA_CONTEXT_BYTES", "FRAGMENTATION_FRACTION",
]

_GiB = 2**30
_MiB = 2**20

#: NCCL's default receive buffers per channel and peer, Simple + LL128 + LL (NVIDIA/nccl
#: ``src/init.cc``: ``DEFAULT_BUFFSIZE (1 << 22)``, ``DEFAULT_LL128_BUFFSIZE`` = 4,915,200,
#: ``DEFAULT_LL_BUFFSIZE`` = 524,288).
NCCL_BUFFSIZE_BYTES = 4 * _MiB + 4_915_200 + 524_288
#: Channels per communicator: an ASSUMPTION (NCCL picks 2-32 by topology; 16 is typical on
#: NVLink/NVSwitch machines).
NCCL_CHANNELS_ASSUMED = 16
#: Peers with buffers per channel: an ASSUMPTION (a ring's predecessor and one tree neighbour).
NCCL_PEERS_ASSUMED = 2
#: CUDA context and loaded kernels: an ASSUMPTION (~0.5 GiB; it varies with CUDA version and
#: libraries and is outside the allocator's numbers).
CUDA_CONTEXT_BYTES = _GiB // 2
#: Caching-allocator fragmentation, as a fraction of the tensors: an ASSUMPTION.
FRAGMENTATION_FRACTION = 0.05


def uses_flash(layout: Layout, device) -> bool:
    """Whether attention runs a fused (Flash) kernel: ``layout.attention``, or by GPU for
    ``auto`` (Ampere and newer)."""
    if layout.attention != "auto":
        return layout.attention == "flash"
    from .compute import gpu_rates
    return gpu_rates(device).attention != "unfused"


def chunk_sizes(layers: int, chunks: int) -> list[int]:
    """Layers per model chunk, in model order: equal when ``chunks`` divides ``layers``; else
    ``ceil(layers / chunks)`` each, less one on the first and last chunks, then the second and
    second-to-last, and so on, until the total is right. The first and last chunks also hold the
    embedding and the output layer, so they are the ones to shorten: Llama 3 405B's 126 layers
    on 16 stages ran as 7 + 14 x 8 + 7 (Llama 3 Herd paper, Section 3.3.2: "we reduce one
    Transformer layer each from the first and the last stages"); Megatron-Core offers the same
    through ``--decoder-first/last-pipeline-num-layers``."""
    per = -(-layers // chunks)
    sizes = [per] * chunks
    deficit = per * chunks - layers
    order = [i for pair in zip(range(chunks), range(chunks - 1, -1, -1)) for i in pair]
    seen = []
    for i in order:
        if i not in seen:
            seen.append(i)
    for i in seen[:deficit]:
        sizes[i] -= 1
    return sizes


def chunk_layers(model: TransformerConfig, layout: Layout, stage: int, virtual: int) -> range:
    """Transformer layers of model chunk ``(stage, virtual)``: chunk ``virtual·pp + stage`` in
    model order (Megatron's interleaved assignment; plain pipelines have ``v = 1``), sized by
    the layout's ``pipeline_layout``, else by :func:`chunk_sizes`."""
    sizes = layout.pipeline_layout or chunk_sizes(model.layers, layout.pp * layout.virtual_stages)
    index = virtual * layout.pp + stage
    first = sum(sizes[:index])
    return range(first, first + sizes[index])


def _first(layout: Layout, stage: int, virtual: int) -> bool:
    return stage == 0 and virtual == 0


def _last(layout: Layout, stage: int, virtual: int) -> bool:
    return stage == layout.pp - 1 and virtual == layout.virtual_stages - 1


def chunk_params(model: TransformerConfig, layout: Layout, stage: int,
                 virtual: int) -> tuple[float, float]:
    """(dense, expert) parameters of chunk ``(stage, virtual)`` held by one rank. The last chunk
    also holds the multi-token prediction modules and, when it is not the first chunk too, the
    copy of the word embedding they look tokens up in (Megatron-Core builds one on the stage
    that runs them, ``gpt_model.py`` @44151194)."""
    tp, ep, etp = layout.tp, layout.ep, layout.etp
    dense = expert = 0.0
    replicated_per_layer = 2 * model.norm_params + model.attention_replicated_params

    def add(i: int, extra_dense: float = 0.0, extra_replicated: float = 0.0) -> None:
        nonlocal dense, expert
        e = model.layer_expert_params(i)
        rest = model.layer_params(i) - e + extra_dense
        router = model.router_params if model.is_moe_layer(i) else 0
        replicated = replicated_per_layer + extra_replicated
        dense += (rest - replicated - router) / tp + replicated + router
        expert += e / (ep * etp)

    for i in chunk_layers(model, layout, stage, virtual):
        add(i)
    word = model.vocab * model.hidden / tp
    first = _first(layout, stage, virtual)
    if first:
        dense += word + (model.embedding_params - model.vocab * model.hidden)
    if _last(layout, stage, virtual):
        dense += model.norm_params
        single_chunk = layout.pp == 1 and layout.virtual_stages == 1
        if not model.tied_embeddings or not single_chunk:
            dense += word
        for _ in range(model.mtp_layers):
            # enorm, hnorm and the final norm replicated; eh_proj split over the group
            add(model.layers - 1, model.mtp_layer_params - model.layer_params(model.layers - 1),
                3 * model.norm_params)
        if model.mtp_layers and not first:
            dense += word
    return dense, expert


def stage_params(model: TransformerConfig, layout: Layout, stage: int) -> tuple[float, float]:
    """(dense, expert) parameters one rank of pipeline stage ``stage`` holds (all its chunks)."""
    d = e = 0.0
    for v in range(layout.virtual_stages):
        cd, ce = chunk_params(model, layout, stage, v)
        d, e = d + cd, e + ce
    return d, e


def in_flight_chunks(layout: Layout, stage: int) -> int:
    """Model chunks x micro-batches whose activations stage ``stage`` holds at its peak."""
    m, pp, v = layout.micro_batches, layout.pp, layout.virtual_stages
    if layout.pipeline == "gpipe":
        return m * v
    if layout.pipeline == "interleaved":
        return min(2 * (pp - stage - 1) + (v - 1) * pp + 1, m * v)
    return min(pp - stage, m)


def _state_bytes(layout: Layout, params: float, shard: float) -> tuple[float, float, float]:
    """(weights, gradients, optimizer states) bytes of ``params`` sharded over ``shard`` ranks."""
    if layout.fsdp or layout.zero_stage > 0:
        stage = 3 if layout.fsdp else layout.zero_stage
        z = zero_memory(1, max(1, int(round(shard))), stage, "bf16")
        return params * z.param_bytes, params * z.gradient_bytes, params * z.optimizer_bytes
    grad = main_grad_bytes(layout)
    # fp32 main weights + two moments; with 16-bit main gradients Megatron copies them into an
    # fp32 gradient of the main weights (4 more bytes): 18 (bf16/fp32 grads) or 20 (fp16).
    optimizer = 12 + (4 if grad == 2 else 0)
    if layout.distributed_optimizer:
        optimizer /= shard
    return 2.0 * params, float(grad) * params, optimizer * params


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes per GPU on the pipeline stage that needs the most, item by item."""

    stage: int
    items: dict
    device_bytes: int
    device: str

    @property
    def total_bytes(self) -> float:
        return float(sum(self.items.values()))

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.device_bytes

    @property
    def missing_bytes(self) -> float:
        return max(0.0, self.total_bytes - self.device_bytes)


def _stage_items(model: TransformerConfig, layout: Layout, device, stage: int) -> dict:
    dev = resolve_device(device)
    tp, cp = layout.tp, layout.cp
    dense, expert = stage_params(model, layout, stage)
    shard = layout.dp * cp
    w1, g1, o1 = _state_bytes(layout, dense, shard)
    w2, g2, o2 = _state_bytes(layout, expert, max(1, layout.edp))
    flash = uses_flash(layout, dev)
    sp = layout.sequence_parallel and tp > 1
    b = layout.micro_batch
    per_chunk = 0.0
    chunks = [chunk_layers(model, layout, stage, v) for v in range(layout.virtual_stages)]
    for layers in chunks:
        for i in layers:
            per_chunk += activation_bytes_per_layer(
                model, b, tp=tp, sequence_parallel=sp, recompute=layout.recompute, flash=flash,
                cp=cp, index=i, modules=layout.recompute_modules,
                fp8=layout.precision == "fp8")
    per_chunk /= layout.virtual_stages          # average chunk of this stage
    in_flight = in_flight_chunks(layout, stage)
    activations = per_chunk * in_flight
    if layout.recompute == "full" and any(chunks):
        i0 = next(c for c in chunks if c)[0]
        activations += activation_bytes_per_layer(
            model, b, tp=tp, sequence_parallel=sp, recompute="none", flash=flash, cp=cp,
            index=i0)
    if stage == 0:
        first_in_flight = in_flight if layout.virtual_stages == 1 else \
            max(1, in_flight // layout.virtual_stages)
        activations += first_in_flight * embedding_activation_bytes(
            model, b, tp=tp, sequence_parallel=sp, cp=cp)
    if stage == layout.pp - 1:
        activations += output_activation_bytes(model, b, tp=tp, cp=cp)
        # each multi-token prediction module: its layer, its concatenated input (4sbh bytes,
        # /tp with sequence parallelism) and its own logits
        for _ in range(model.mtp_layers):
            activations += (activation_bytes_per_layer(
                model, b, tp=tp, sequence_parallel=sp, recompute=layout.recompute, flash=flash,
                cp=cp, index=model.layers - 1, modules=layout.recompute_modules,
                fp8=layout.precision == "fp8")
                + 4.0 * model.seq_len / cp * b * model.hidden / (tp if sp else 1)
                + output_activation_bytes(model, b, tp=tp, cp=cp))
    groups = sum(1 for size in (tp, cp, layout.ep, layout.dp, layout.pp) if size > 1)
    comm = groups * NCCL_PEERS_ASSUMED * NCCL_CHANNELS_ASSUMED * NCCL_BUFFSIZE_BYTES
    hopper = dev.name.startswith(("h100", "h200", "gh200", "b200", "gb200", "b300", "gb300"))
    workspace = 4 * (32 * _MiB if hopper else 4 * _MiB) + CUDA_CONTEXT_BYTES
    tensors = w1 + w2 + g1 + g2 + o1 + o2 + activations
    return {
        "weights": w1 + w2, "gradients": g1 + g2, "optimizer states": o1 + o2,
        "activations": activations, "communication buffers": float(comm),
        "workspace": float(workspace), "fragmentation": FRAGMENTATION_FRACTION * tensors,
    }


def memory_per_gpu(model: TransformerConfig, layout: Layout, device,
                   stage: int | None = None) -> MemoryBreakdown:
    """Memory per GPU of ``stage`` (default: the stage that needs the most)."""
    dev = resolve_device(device)
    check_layout(model, layout, device=dev)
    stages = range(layout.pp) if stage is None else [stage]
    best = None
    for s in stages:
        items = _stage_items(model, layout, dev, s)
        total = sum(items.values())
        if best is None or total > best[1]:
            best = (s, total, items)
    return MemoryBreakdown(best[0], best[2], dev.memory_bytes, dev.name)


def check_memory(model: TransformerConfig, layout: Layout, device) -> MemoryBreakdown:
    """The breakdown, or a one-line ConfigError when it does not fit: how many GiB per GPU are
    needed and missing, and the biggest items."""
    mem = memory_per_gpu(model, layout, device)
    if mem.fits:
        return mem
    biggest = sorted(mem.items.items(), key=lambda kv: -kv[1])[:3]
    parts = ", ".join(f"{name} {value / _GiB:.1f}" for name, value in biggest)
    raise ConfigError(
        f"{model.name} does not fit: {mem.total_bytes / _GiB:.1f} GiB per GPU on pipeline "
        f"stage {mem.stage} but {mem.device} has {mem.device_bytes / _GiB:.0f} GiB, "
        f"{mem.missing_bytes / _GiB:.1f} GiB missing; biggest (GiB): {parts}")
