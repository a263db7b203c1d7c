"""ZeRO-powered data parallelism (stages 0-3, FSDP): per-GPU memory, traffic, and a simulated step.

ZeRO (Rajbhandari, Rasley, Ruwase and He, "ZeRO: Memory Optimizations Toward Training Trillion
Parameter Models", SC 2020) removes the redundancy of data parallelism by partitioning the model
states over the ``N`` data-parallel GPUs instead of replicating them. PyTorch's Fully Sharded Data
Parallel (FSDP, ``FULL_SHARD``) is stage 3; ``SHARD_GRAD_OP`` is stage 2.

Memory (the paper's Figure 1)
-----------------------------
Mixed-precision training with Adam keeps, per parameter, 2 bytes of fp16 parameters, 2 bytes of
fp16 gradients and ``K = 12`` bytes of optimizer states (an fp32 copy of the parameters, the
momentum and the variance). With ``Ψ`` parameters:

========  ==========================  ============================
stage     partitioned                 bytes per GPU
========  ==========================  ============================
0         nothing (plain DP)          ``(2 + 2 + K)·Ψ``
1 (Pos)   optimizer states            ``(2 + 2)·Ψ + K·Ψ/N``
2 (Pos+g) + gradients                 ``2·Ψ + (2 + K)·Ψ/N``
3 (Pos+g+p) + parameters              ``(2 + 2 + K)·Ψ/N``
========  ==========================  ============================

Ψ/N is an exact division, as in the paper (a real shard is rounded up to whole elements).
:data:`STATE_BYTES_PER_PARAM` also lets fp32 training (4 + 4 + 8: no master copy) use the same
table. Activations come on top: the layer table's output bytes per sample (fp32, scaled to the
training precision) times the micro-batch, or, with activation checkpointing, the inputs of every
layer group plus the whole activations of the largest group while it is recomputed (Chen et al.
2016, "Training Deep Nets with Sublinear Memory Cost"). ZeRO-R's partitioned activations,
temporary buffers and fragmentation are left out. A configuration whose total exceeds the GPU's
memory is refused with a :class:`~simulator.errors.ConfigError` that lists every term.

Traffic (the paper's Section 7)
-------------------------------
Stage 0 all-reduces the fp16 gradients: ``2Ψ`` bytes, ``2·(N-1)/N·2Ψ`` sent per GPU by a ring.
Stages 1 and 2 reduce-scatter the gradients (each GPU needs only the sum of the shard whose
optimizer states it owns) and all-gather the updated fp16 parameters: the same volume. Stage 3
also all-gathers the parameters before the forward *and again* before the backward of each layer
group, since it frees them in between: ``3·(N-1)/N·2Ψ``, 1.5 times stage 0.

(Stage 1 could all-reduce the gradients, as DeepSpeed's first implementation did, but each GPU
would then still need the all-gather of the parameters it does not own after the step: 1.5 times
the volume for nothing. The paper counts stage 1 like stage 2, and so does this module.)

The simulated step
------------------
Layers are grouped in forward order into groups of about ``group_bytes`` of fp16 parameters (the
unit of gathering, bucketing and prefetching; DeepSpeed's buckets, FSDP's wrapped modules). One
training step on every GPU, driven by callbacks on the :class:`~simulator.engine.runner.Engine`:

* compute ops ``F0 .. F(G-1), B(G-1) .. B0`` run in that order on each GPU's compute stream (the
  engine device ``"<gpu>/compute"``, so that NCCL's reductions, charged on the GPU itself, are
  not serialised behind layer kernels), one group's forward or backward at a time; with
  activation checkpointing each backward first recomputes its group's forward;
* an op that needs parameters (every forward for stages 1-3, every backward for stage 3) waits
  for the all-gather of its group. With ``prefetch`` the gather for op ``k+1`` is issued when op
  ``k`` starts (one group ahead, overlapping op ``k``); without, when op ``k`` ends;
* when ``B(g)`` ends, its gradients are all-reduced (stage 0) or reduce-scattered (stages 1-3);
* all collectives run one at a time, in the order issued, on one communicator stream (as NCCL
  serialises a communicator's kernels), as ring schedules on the real topology;
* the optimizer (Adam, memory-bound; over ``Ψ/N`` parameters for stages 1-3) runs when every
  gradient collective is done; that ends the step.

For stages 1 and 2 the forward all-gathers stand for the previous step's parameter all-gather,
which in steady state overlaps the forward exactly as here.

The row reports the memory terms, the iteration time, the bytes each GPU sent in the step (from
the engine's schedules) next to the formula above, and how much communication was exposed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

import pandas as pd

from ..engine.runner import Engine
from ..errors import ConfigError
from ..records import bottleneck, links_frame
from ..schedules import make_schedule
from ..topology import endpoints
from ..topology.devices import Device, get_device
from .compute import adam_profile
from .models import (FP32_BYTES, Model, embedding, get_model, layernorm, linear,
                     transformer_block)

__all__ = [
    "DEFAULT_GROUP_BYTES", "STATE_BYTES_PER_PARAM", "ZERO_COLUMNS", "ZERO_STAGES", "CommStream",
    "ZeroMemory", "ZeroResult", "activation_memory", "check_fits", "gpt3_6_7b", "layer_groups",
    "simulate_zero", "zero_memory", "zero_memory_table", "zero_traffic_bytes",
]

ZERO_STAGES = (0, 1, 2, 3)

#: (parameter, gradient, optimizer-state) bytes per parameter, by training precision. Mixed
#: precision with Adam is the paper's 2 + 2 + K with K = 12 (fp32 parameters, momentum,
#: variance); fp32 Adam keeps no master copy: 4 + 4 + 8.
STATE_BYTES_PER_PARAM: dict[str, tuple[int, int, int]] = {
    "fp16": (2, 2, 12), "amp": (2, 2, 12), "bf16": (2, 2, 12), "fp32": (4, 4, 8),
}

#: Bytes per activation element, by training precision.
_ACTIVATION_BYTES = {"fp16": 2, "amp": 2, "bf16": 2, "fp32": 4}

#: Layer-group size (parameter bytes) that sets the granularity of gathering, bucketing and
#: prefetching: DeepSpeed's default ``reduce_bucket_size`` and ``allgather_bucket_size`` of 5e8
#: elements, 1 GB in fp16 (about five transformer blocks of a 7B model).
DEFAULT_GROUP_BYTES = 1_000_000_000

ZERO_COLUMNS = (
    "model", "device", "stage", "gpus", "micro_batch", "precision", "prefetch", "checkpointing",
    "params", "param_bytes", "gradient_bytes", "optimizer_bytes", "model_state_bytes",
    "activation_bytes", "total_bytes", "device_memory_bytes", "fits", "groups", "iteration_s",
    "compute_s", "exposed_comm_s", "comm_busy_s", "throughput_samples_s",
    "bytes_per_gpu_per_step", "predicted_bytes_per_gpu_per_step", "bytes_sent_total",
    "bottleneck_link",
    "bottleneck_utilisation", "topology")


# --------------------------------------------------------------------------------------------
# A 7B model
# --------------------------------------------------------------------------------------------

_GPT3_VOCAB = 50_257


@cache
def gpt3_6_7b(seq_len: int = 2048) -> Model:
    """GPT-3 6.7B (Brown et al. 2020, "Language Models are Few-Shot Learners", Table 2.1:
    32 layers, d_model 4096, 32 heads of 128, 2048-token context), built like GPT-2: learned
    positions, pre-norm blocks, output projection tied to the token embedding.

    6,658,404,352 parameters counted; the paper rounds to 6.7B. (Not in the model registry of
    :mod:`simulator.workload.models`; pass the object.)
    """
    if not isinstance(seq_len, int) or not 1 <= seq_len <= 2048:
        raise ConfigError(f"seq_len must be an integer in 1..2048, not {seq_len!r}")
    d = 4096
    layers = [embedding("wte", _GPT3_VOCAB, d, seq_len), embedding("wpe", 2048, d, seq_len)]
    for i in range(32):
        layers += transformer_block(f"h.{i}", d, 32, 4 * d, seq_len, pre_norm=True)
    layers += [layernorm("ln_f", d, seq_len),
               linear("lm_head", d, _GPT3_VOCAB, bias=False, tokens=seq_len, tied=True)]
    return Model("gpt3_6.7b", tuple(layers), f"sequence of {seq_len} tokens", "sequences",
                 6_700_000_000, "Brown et al. 2020, Table 2.1: GPT-3 6.7B (n_params 6.7B)")


# --------------------------------------------------------------------------------------------
# Memory
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ZeroMemory:
    """Per-GPU memory of one ZeRO configuration, bytes (decimal counts, no GiB rounding)."""

    stage: int
    gpus: int
    params: int
    param_bytes: float
    gradient_bytes: float
    optimizer_bytes: float
    activation_bytes: float = 0.0

    @property
    def model_state_bytes(self) -> float:
        """Parameters + gradients + optimizer states: the paper's Figure 1 number."""
        return self.param_bytes + self.gradient_bytes + self.optimizer_bytes

    @property
    def total_bytes(self) -> float:
        return self.model_state_bytes + self.activation_bytes

    def terms(self) -> dict:
        return {"param_bytes": self.param_bytes, "gradient_bytes": self.gradient_bytes,
                "optimizer_bytes": self.optimizer_bytes,
                "model_state_bytes": self.model_state_bytes,
                "activation_bytes": self.activation_bytes, "total_bytes": self.total_bytes}


def _check_stage(stage) -> int:
    if isinstance(stage, bool) or stage not in ZERO_STAGES:
        raise ConfigError(f"ZeRO stage must be one of 0, 1, 2, 3, not {stage!r}")
    return int(stage)


def _check_count(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{what} must be a positive integer, not {value!r}")
    return value


def _state_bytes(precision: str) -> tuple[int, int, int]:
    try:
        return STATE_BYTES_PER_PARAM[precision]
    except (KeyError, TypeError):
        raise ConfigError(f"unknown precision {precision!r}; valid: "
                          f"{', '.join(STATE_BYTES_PER_PARAM)}") from None


def zero_memory(params: int, gpus: int, stage: int, precision: str = "fp16",
                activation_bytes: float = 0.0) -> ZeroMemory:
    """Per-GPU model-state memory of ZeRO ``stage`` on ``gpus`` GPUs (the module's table).

    Parameters
    ----------
    params : int
        Ψ, the model's parameters.
    gpus : int
        N, the data-parallel degree.
    stage : {0, 1, 2, 3}
    precision : str
        Picks the bytes per parameter (:data:`STATE_BYTES_PER_PARAM`).
    activation_bytes : float
        Added as its own term (see :func:`activation_memory`).
    """
    stage, n = _check_stage(stage), _check_count(gpus, "gpus")
    p, g, k = _state_bytes(precision)
    psi = params
    param = p * psi / n if stage >= 3 else p * psi
    grad = g * psi / n if stage >= 2 else g * psi
    opt = k * psi / n if stage >= 1 else k * psi
    return ZeroMemory(stage, n, int(params), param, grad, opt, float(activation_bytes))


def layer_groups(param_bytes, group_bytes: int = DEFAULT_GROUP_BYTES) -> list[tuple[int, int]]:
    """Cut layers into contiguous ``[start, end)`` groups in forward order; a group closes once it
    holds at least ``group_bytes`` (parameter-free layers join the group they are in)."""
    if group_bytes <= 0:
        raise ConfigError(f"group_bytes must be positive, not {group_bytes!r}")
    groups, start, size = [], 0, 0
    n = len(param_bytes)
    for i, b in enumerate(param_bytes):
        size += int(b)
        if size >= group_bytes or i == n - 1:
            groups.append((start, i + 1))
            start, size = i + 1, 0
    return groups


def activation_memory(model: Model, micro_batch: int, precision: str = "fp16",
                      checkpointing: bool = False, groups=None) -> float:
    """Activation bytes one GPU keeps for the backward pass of one micro-batch.

    Without checkpointing: every layer's output. With it: the output of each group's last layer
    (the checkpoints) plus the largest group's activations, recomputed one group at a time.
    """
    scale = _ACTIVATION_BYTES.get(precision, FP32_BYTES) / FP32_BYTES
    per_sample = [layer.activation_bytes for layer in model.layers]
    if not checkpointing:
        return float(sum(per_sample)) * micro_batch * scale
    groups = groups or [(0, len(per_sample))]
    kept = sum(per_sample[end - 1] for _, end in groups)
    largest = max(sum(per_sample[a:b]) for a, b in groups)
    return float(kept + largest) * micro_batch * scale


def _gb(x: float) -> str:
    return f"{x / 1e9:.3f} GB"


def check_fits(memory: ZeroMemory, device: Device) -> None:
    """Raise ConfigError, with every term, when ``memory`` exceeds ``device.memory_bytes``."""
    if memory.total_bytes <= device.memory_bytes:
        return
    raise ConfigError(
        f"ZeRO stage {memory.stage} on {memory.gpus} GPUs needs {_gb(memory.total_bytes)} per GPU "
        f"(parameters {_gb(memory.param_bytes)} + gradients {_gb(memory.gradient_bytes)} + "
        f"optimizer states {_gb(memory.optimizer_bytes)} + activations "
        f"{_gb(memory.activation_bytes)}; {memory.params:,} parameters) but {device.name} has "
        f"{_gb(device.memory_bytes)} ({device.memory_bytes / 2**30:g} GiB); GB = 1e9 bytes")


def zero_memory_table(model: Model, device: Device, gpus: int, micro_batch: int,
                      precision: str = "fp16", checkpointing: bool = False,
                      group_bytes: int = DEFAULT_GROUP_BYTES) -> pd.DataFrame:
    """Memory terms of every stage, one row each, with a ``fits`` column (nothing raised)."""
    grads = [layer.params * _state_bytes(precision)[1] for layer in model.layers]
    acts = activation_memory(model, micro_batch, precision, checkpointing,
                             layer_groups(grads, group_bytes))
    rows = []
    for stage in ZERO_STAGES:
        mem = zero_memory(model.params, gpus, stage, precision, acts)
        rows.append({"model": model.name, "device": device.name, "stage": stage, "gpus": gpus,
                     "micro_batch": micro_batch, "params": model.params, **mem.terms(),
                     "device_memory_bytes": device.memory_bytes,
                     "fits": mem.total_bytes <= device.memory_bytes})
    return pd.DataFrame(rows)


def zero_traffic_bytes(params: int, gpus: int, stage: int, precision: str = "fp16") -> float:
    """Bytes one GPU sends per step with ring collectives (the module's traffic formulas)."""
    stage, n = _check_stage(stage), _check_count(gpus, "gpus")
    size = params * _state_bytes(precision)[1]
    collectives = 3 if stage == 3 else 2   # RS + AG (+ AG) or the all-reduce's two halves
    return collectives * (n - 1) / n * size


# --------------------------------------------------------------------------------------------
# The simulated step
# --------------------------------------------------------------------------------------------

class CommStream:
    """One communicator stream: schedules run one at a time, in the order submitted.

    ``submit(schedule, label, then)`` queues ``schedule`` on ``placement``; ``then()`` is called
    when it is done. ``intervals`` holds ``(label, start_s, end_s)`` of every finished run.
    """

    def __init__(self, engine: Engine, placement):
        self.engine = engine
        self.placement = list(placement)
        self.queue: list[tuple] = []
        self.busy = False
        self.intervals: list[tuple[str, float, float]] = []
        self.runs: list = []

    def submit(self, schedule, label: str, then=None) -> None:
        self.queue.append((schedule, label, then))
        self._next()

    def _next(self) -> None:
        if self.busy or not self.queue:
            return
        schedule, label, then = self.queue.pop(0)
        self.busy = True
        begin = self.engine.env.now
        run = self.engine.launch(schedule, self.placement, label=label)
        self.runs.append(run)

        def done(_event):
            self.busy = False
            self.intervals.append((label, begin, self.engine.env.now))
            if then is not None:
                then()
            self._next()

        run.done_event.callbacks.append(done)

    @property
    def busy_s(self) -> float:
        return math.fsum(b - a for _, a, b in self.intervals)


@dataclass
class ZeroResult:
    """One simulated ZeRO step: the result row, the engine, and the step's timeline.

    ``timeline`` rows: ``stream`` (``compute`` or ``comm``), ``label``, ``start_s``, ``end_s``
    (compute ops as seen on the first GPU).
    """

    row: dict
    engine: Engine
    timeline: pd.DataFrame


def _resolve(model, device):
    model = get_model(model) if isinstance(model, str) else model
    device = get_device(device) if isinstance(device, str) else device
    return model, device


def simulate_zero(graph, model, device, stage: int, gpus: int, micro_batch: int,
                  precision: str = "fp16", prefetch: bool = True, *,
                  checkpointing: bool = False, group_bytes: int = DEFAULT_GROUP_BYTES,
                  algorithm: str = "ring", options: dict | None = None, profile=None,
                  check_memory: bool = True) -> ZeroResult:
    """Simulate one ZeRO-``stage`` training step on the first ``gpus`` endpoints of ``graph``.

    Parameters
    ----------
    graph : networkx.DiGraph
        A validated topology.
    model : Model or str
        A layer table (or a registered model name).
    device : Device or str
        The GPU preset: its memory bounds the configuration, its rates the roofline compute.
    stage : {0, 1, 2, 3}
    gpus : int
        Data-parallel degree N.
    micro_batch : int
        Samples per GPU per step.
    precision : {"fp16", "amp", "bf16", "fp32"}
    prefetch : bool
        Issue each parameter all-gather one group ahead (see the module notes).
    checkpointing : bool
        Activation checkpointing: less activation memory, one more forward per backward.
    group_bytes : int
        Layer-group size in fp16 parameter bytes (:func:`layer_groups`).
    algorithm, options
        The collective algorithm (ring by default; it must implement all-reduce, reduce-scatter
        and all-gather) and its options; topology-derived options (``channels``,
        ``local_ranks``) are filled in as for plain collectives.
    profile : ComputeProfile, optional
        Per-layer times for one micro-batch; default: the roofline model with Adam.
    check_memory : bool
        Refuse (ConfigError) configurations that do not fit the device's memory.

    Returns
    -------
    ZeroResult
        ``row`` has the columns of :data:`ZERO_COLUMNS`.
    """
    model, device = _resolve(model, device)
    stage = _check_stage(stage)
    n = _check_count(gpus, "gpus")
    micro_batch = _check_count(micro_batch, "micro_batch")
    p_bytes, g_bytes, _ = _state_bytes(precision)
    eps = endpoints(graph)
    if n > len(eps):
        raise ConfigError(f"{n} GPUs requested, topology {graph.graph.get('name', '')!r} has "
                          f"{len(eps)}")
    workers = list(eps[:n])
    groups = layer_groups([layer.params * p_bytes for layer in model.layers], group_bytes)
    memory = zero_memory(model.params, n, stage, precision,
                         activation_memory(model, micro_batch, precision, checkpointing, groups))
    if check_memory:
        check_fits(memory, device)
    profile = adam_profile(model, device, micro_batch, precision, profile)
    fwd = [math.fsum(l.forward_s for l in profile.layers[a:b]) for a, b in groups]
    bwd = [math.fsum(l.backward_s for l in profile.layers[a:b]) for a, b in groups]
    if checkpointing:
        bwd = [b + f for b, f in zip(bwd, fwd)]
    # Adam over the parameters this GPU owns: all of them, or a 1/N shard from stage 1 on.
    optimizer_s = profile.optimizer_s / n if stage >= 1 else profile.optimizer_s
    group_param_bytes = [sum(model.layers[i].params for i in range(a, b)) * p_bytes
                         for a, b in groups]
    group_grad_bytes = [sum(model.layers[i].params for i in range(a, b)) * g_bytes
                        for a, b in groups]

    engine = Engine(graph)
    comm = CommStream(engine, workers)
    sched = _Schedules(graph, algorithm, n, options)
    timeline: list[tuple[str, str, float, float]] = []

    # The op sequence and which ops wait for a gather.
    G = len(groups)
    ops = [("F", g) for g in range(G)] + [("B", g) for g in range(G - 1, -1, -1)]
    needs_gather = [n > 1 and ((kind == "F" and stage >= 1) or (kind == "B" and stage == 3))
                    for kind, _ in ops]
    gathered = [not need for need in needs_gather]
    issued = [False] * len(ops)
    state = {"next": 0, "running": False, "grad_left": G if n > 1 else 0,
             "compute_done": False, "end": math.nan}

    def issue_gather(k: int) -> None:
        if k >= len(ops) or issued[k] or not needs_gather[k]:
            return
        issued[k] = True
        kind, g = ops[k]
        comm.submit(sched.get("allgather", group_param_bytes[g]), f"allgather {kind}{g}",
                    lambda k=k: gathered_(k))

    def gathered_(k: int) -> None:
        gathered[k] = True
        try_run()

    def try_run() -> None:
        k = state["next"]
        if state["running"] or k >= len(ops) or not gathered[k]:
            return
        state["running"] = True
        if prefetch:
            issue_gather(k + 1)
        kind, g = ops[k]
        duration = fwd[g] if kind == "F" else bwd[g]
        start = engine.env.now
        _compute_all(engine, workers, duration, f"{kind}{g}",
                     lambda: op_done(k, start))

    def op_done(k: int, start: float) -> None:
        kind, g = ops[k]
        timeline.append(("compute", f"{kind}{g}", start, engine.env.now))
        state["running"] = False
        state["next"] = k + 1
        if not prefetch:
            issue_gather(k + 1)
        if kind == "B" and n > 1:
            coll = "allreduce" if stage == 0 else "reduce_scatter"
            comm.submit(sched.get(coll, group_grad_bytes[g]), f"{coll} {g}", grad_done)
        if state["next"] == len(ops):
            state["compute_done"] = True
            maybe_step()
        else:
            try_run()

    def grad_done() -> None:
        state["grad_left"] -= 1
        maybe_step()

    def maybe_step() -> None:
        if not state["compute_done"] or state["grad_left"] > 0:
            return
        start = engine.env.now
        _compute_all(engine, workers, optimizer_s, "optimizer",
                     lambda: finish(start))

    def finish(start: float) -> None:
        timeline.append(("compute", "optimizer", start, engine.env.now))
        state["end"] = engine.env.now

    issue_gather(0)
    engine.call_at(0.0, try_run)
    engine.run()
    iteration_s = float(state["end"])
    timeline += [("comm", label, a, b) for label, a, b in comm.intervals]
    frame = pd.DataFrame(timeline, columns=["stream", "label", "start_s", "end_s"])
    frame = frame.sort_values(["start_s", "stream"], kind="stable").reset_index(drop=True)

    compute_s = math.fsum(fwd) + math.fsum(bwd) + optimizer_s
    sent = sum(int(run.schedule.bytes_sent()[: n].sum()) for run in comm.runs)
    links = links_frame(engine, engine.env.now)
    link, util = bottleneck(links)
    exposed = max(0.0, iteration_s - compute_s)
    row = {
        "model": model.name, "device": device.name, "stage": stage, "gpus": n,
        "micro_batch": micro_batch, "precision": precision, "prefetch": bool(prefetch),
        "checkpointing": bool(checkpointing), "params": model.params, **memory.terms(),
        "device_memory_bytes": device.memory_bytes,
        "fits": memory.total_bytes <= device.memory_bytes, "groups": G,
        "iteration_s": iteration_s, "compute_s": compute_s, "exposed_comm_s": exposed,
        "comm_busy_s": comm.busy_s, "throughput_samples_s": n * micro_batch / iteration_s,
        "bytes_per_gpu_per_step": sent / n,
        "predicted_bytes_per_gpu_per_step": zero_traffic_bytes(model.params, n, stage,
                                                               precision),
        "bytes_sent_total": sent, "bottleneck_link": link, "bottleneck_utilisation": util,
        "topology": graph.graph.get("name", ""),
    }
    return ZeroResult(row=row, engine=engine, timeline=frame)


class _Schedules:
    """Schedules by (collective, bytes), built once each."""

    def __init__(self, graph, algorithm: str, n: int, options: dict | None):
        from ..collective import default_options

        self.algorithm, self.n = algorithm, n
        self.options = default_options(graph, algorithm, n, dict(options or {}))
        self.cache: dict = {}

    def get(self, collective: str, size_bytes: int):
        key = (collective, int(size_bytes))
        if key not in self.cache:
            self.cache[key] = make_schedule(self.algorithm, collective, self.n, int(size_bytes),
                                            **self.options)
        return self.cache[key]


def _compute_all(engine: Engine, workers, duration_s: float, label: str, then) -> None:
    """Queue the same work on every worker's compute stream; ``then()`` once all are done."""
    left = [len(workers)]

    def one_done():
        left[0] -= 1
        if left[0] == 0:
            then()

    for w in workers:
        engine.compute(f"{w}/compute", duration_s, label, one_done)


# --------------------------------------------------------------------------------------------
# A scenario's study: every stage of one model, memory refusals reported as rows
# --------------------------------------------------------------------------------------------

#: Models a ZeRO study can name: the model registry plus GPT-3 6.7B (a 7B model).
EXTRA_MODELS = {"gpt3_6.7b": gpt3_6_7b}

#: Columns of a study row: a step's :data:`ZERO_COLUMNS`, whether it ran, and its energy.
ZERO_STUDY_COLUMNS = ZERO_COLUMNS + ("status", "joules_per_iteration", "joules_per_sample",
                                     "gpu_joules", "network_joules")


def zero_model(name: str) -> Model:
    """A model by name: the registry's, or one of :data:`EXTRA_MODELS`."""
    if name in EXTRA_MODELS:
        return EXTRA_MODELS[name]()
    return get_model(name)


def zero_model_names() -> tuple[str, ...]:
    """Every name :func:`zero_model` accepts."""
    from .models import MODELS

    return tuple(MODELS) + tuple(EXTRA_MODELS)


@dataclass(frozen=True)
class ZeroStudy:
    """What the ``zero:`` section of a scenario asks for: one model, one data-parallel degree,
    each listed ZeRO stage (stages 1-3 once per ``prefetch`` setting; stage 0 gathers nothing,
    so once)."""

    model: str = "gpt3_6.7b"
    device: str | None = None           # default: the topology's GPU preset
    gpus: int | None = None             # default: every endpoint of the topology
    micro_batch: int = 1
    precision: str = "fp16"
    stages: tuple[int, ...] = ZERO_STAGES
    prefetch: tuple[bool, ...] = (True,)
    checkpointing: bool = False
    group_bytes: int = DEFAULT_GROUP_BYTES
    algorithm: str = "ring"

    def points(self) -> list[tuple[int, bool]]:
        """``(stage, prefetch)`` in a fixed order."""
        return [(s, p) for s in self.stages for p in (self.prefetch if s else self.prefetch[:1])]


def _refused_row(model: Model, device: Device, memory: ZeroMemory, study: ZeroStudy,
                 prefetch: bool, graph) -> dict:
    """The row of a configuration that does not fit: its memory terms, no timings."""
    row = dict.fromkeys(ZERO_STUDY_COLUMNS, math.nan)
    row.update({"model": model.name, "device": device.name, "stage": memory.stage,
                "gpus": memory.gpus, "micro_batch": study.micro_batch,
                "precision": study.precision, "prefetch": bool(prefetch),
                "checkpointing": study.checkpointing, "params": model.params, **memory.terms(),
                "device_memory_bytes": device.memory_bytes, "fits": False,
                "predicted_bytes_per_gpu_per_step": zero_traffic_bytes(
                    model.params, memory.gpus, memory.stage, study.precision),
                "bottleneck_link": "", "topology": graph.graph.get("name", ""),
                "status": f"does not fit: needs {_gb(memory.total_bytes)} of "
                          f"{_gb(device.memory_bytes)}"})
    return row


def run_zero_point(graph, study: ZeroStudy, stage: int, prefetch: bool) -> dict:
    """One row of a study: the simulated step with its energy, or, when the configuration does
    not fit the GPU's memory (which :func:`simulate_zero` refuses), the memory terms alone."""
    from .energy import energy_columns
    from .sweep import topology_device

    model = zero_model(study.model)
    device = get_device(study.device or topology_device(graph))
    n = study.gpus or len(endpoints(graph))
    p_bytes = _state_bytes(study.precision)[0]
    groups = layer_groups([layer.params * p_bytes for layer in model.layers], study.group_bytes)
    memory = zero_memory(model.params, n, stage, study.precision,
                         activation_memory(model, study.micro_batch, study.precision,
                                           study.checkpointing, groups))
    if memory.total_bytes > device.memory_bytes:
        return _refused_row(model, device, memory, study, prefetch, graph)
    result = simulate_zero(graph, model, device, stage, n, study.micro_batch, study.precision,
                           prefetch, checkpointing=study.checkpointing,
                           group_bytes=study.group_bytes, algorithm=study.algorithm)
    row = dict(result.row, status="simulated")
    row.update(energy_columns(dict(row, batch_per_gpu=study.micro_batch), result.engine, device,
                              n))
    return row
