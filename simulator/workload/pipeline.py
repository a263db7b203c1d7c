"""Pipeline parallelism (GPipe, 1F1B), with data parallelism across pipeline replicas.

A model too large for one GPU (or too slow on one) is cut into ``p`` *stages*, contiguous runs of
layers on ``p`` GPUs, and each mini-batch into ``m`` *micro-batches* that flow through the stages
like work on an assembly line. A stage can only work on micro-batch ``i`` once the previous stage
has sent it the activations (forward) or the next stage the gradients (backward), so the line
fills and drains: the *bubble*, idle time that for ``p`` equal stages and free communication is

    bubble = (p - 1) / (m + p - 1)

of every stage's time (Huang et al. 2019, "GPipe: Efficient Training of Giant Neural Networks
using Pipeline Parallelism", NeurIPS; Narayanan et al. 2021, "Efficient Large-Scale Language
Model Training on GPU Clusters Using Megatron-LM", SC, Section 2.2).

Schedules are data
------------------
A pipeline schedule is, per stage, the order in which that stage runs its ops: tuples
``Op(stage, micro_batch, kind)`` with ``kind`` ``"F"`` (forward) or ``"B"`` (backward).

* **GPipe**: every forward, then every backward (in reverse micro-batch order, the last forward
  first). A stage holds the activations of all ``m`` micro-batches at the turn.
* **1F1B** (PipeDream-Flush; Narayanan et al. 2021, "Memory-Efficient Pipeline-Parallel DNN
  Training", ICML; Megatron-LM's non-interleaved schedule): stage ``s`` runs ``p - s - 1``
  warm-up forwards, then alternates one forward and one backward, then drains the remaining
  backwards. Same bubble, but stage ``s`` never holds more than ``p - s`` micro-batches.

:data:`PIPELINE_SCHEDULES` is the registry. The engine knows nothing of them: it only executes.

Execution on the engine
-----------------------
Stage ``s`` of replica ``r`` runs on GPU ``r·p + s`` of the topology's endpoints (consecutive
stages on neighbouring GPUs; the ``placement`` argument overrides it). Ops run in their stage's
order on the GPU's FIFO compute queue; an op is queued once the previous op of its stage is
queued and its input has arrived:

* forward of micro-batch ``i`` on stage ``s > 0`` waits for the activations of ``i`` from
  ``s - 1``: the output of stage ``s - 1``'s last layer times the micro-batch, sent as one
  point-to-point transfer on the flow network when the forward ends;
* backward of ``i`` on stage ``s < p - 1`` waits for the gradient of that activation from
  ``s + 1`` (the same size), sent when that backward ends.

With ``replicas`` > 1, each stage all-reduces its gradients (its layers' parameters x 2 bytes in
fp16) with the same stage of the other replicas once they have all finished their last backward
(not overlapped with that backward), then runs its optimizer step; the iteration ends when the
last stage has stepped. Tensor parallelism is not modelled.

Layers are partitioned so that the most expensive stage (forward + backward time) is as cheap as
possible (:func:`partition_layers`, exact for contiguous partitions), cutting only between the
model's blocks (``h.6``, ``encoder.3``, ``layer1.0``: :func:`partition_blocks`).

Unequal stages add to the bubble: the slowest stage paces the line (:func:`imbalance_bubble` is
the first-order estimate that the rows report next to the measurement). Measured from the
simulated timeline: the bubble fraction is the idle share of the stage GPUs between the first
op's start and the last op's end (forwards and backwards only), ``1 - busy / (GPUs x span)``;
the peak in-flight micro-batches of a stage is the most whose forward has run there and whose
backward has not (the activations it must hold).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import pandas as pd

from ..engine.runner import Engine
from ..errors import ConfigError, unknown_name
from ..records import bottleneck, links_frame
from ..schedules import make_schedule
from ..schedules.base import Schedule, ScheduleBuilder
from ..topology import endpoints
from ..topology.devices import get_device
from .compute import adam_profile
from .models import FP32_BYTES, get_model

__all__ = [
    "PIPELINE_COLUMNS", "PIPELINE_SCHEDULES", "Op", "PipelineResult", "bubble_fraction",
    "gpipe", "imbalance_bubble", "module_of", "one_f_one_b", "partition_blocks",
    "partition_layers", "peak_in_flight", "pipeline_schedule", "point_to_point",
    "simulate_pipeline", "theoretical_bubble",
]

PIPELINE_COLUMNS = (
    "model", "schedule", "stages", "micro_batches", "micro_batch", "replicas", "gpus",
    "precision", "iteration_s", "pipeline_s", "bubble_fraction", "theoretical_bubble",
    "imbalance_bubble",
    "peak_in_flight", "peak_activation_bytes", "stage_compute_s", "dp_allreduce_s",
    "throughput_samples_s", "bottleneck_link", "bottleneck_utilisation", "topology")

_ACTIVATION_BYTES = {"fp16": 2, "amp": 2, "bf16": 2, "fp32": 4}


class Op(NamedTuple):
    """One pipeline op: ``kind`` ``"F"`` or ``"B"`` of ``micro_batch`` on ``stage``."""

    stage: int
    micro_batch: int
    kind: str


def _check(p, m) -> tuple[int, int]:
    for value, what in ((p, "stages"), (m, "micro_batches")):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{what} must be a positive integer, not {value!r}")
    return p, m


def gpipe(stages: int, micro_batches: int) -> tuple[tuple[Op, ...], ...]:
    """GPipe: on every stage all forwards ``0 .. m-1``, then all backwards ``m-1 .. 0``."""
    p, m = _check(stages, micro_batches)
    return tuple(tuple([Op(s, i, "F") for i in range(m)]
                       + [Op(s, i, "B") for i in range(m - 1, -1, -1)]) for s in range(p))


def one_f_one_b(stages: int, micro_batches: int) -> tuple[tuple[Op, ...], ...]:
    """1F1B (PipeDream-Flush): ``min(p-s-1, m)`` warm-up forwards, then one forward and one
    backward alternately, then the remaining backwards; backwards in micro-batch order."""
    p, m = _check(stages, micro_batches)
    out = []
    for s in range(p):
        warm = min(p - s - 1, m)
        ops = [Op(s, i, "F") for i in range(warm)]
        for j in range(m - warm):
            ops += [Op(s, warm + j, "F"), Op(s, j, "B")]
        ops += [Op(s, i, "B") for i in range(m - warm, m)]
        out.append(tuple(ops))
    return tuple(out)


#: Registry of pipeline schedules: name -> (stages, micro_batches) -> ops per stage.
PIPELINE_SCHEDULES: dict[str, Callable[[int, int], tuple]] = {"gpipe": gpipe, "1f1b": one_f_one_b}


def pipeline_schedule(name: str, stages: int, micro_batches: int) -> tuple[tuple[Op, ...], ...]:
    """The registered schedule ``name``; an unknown name lists the valid ones."""
    if name not in PIPELINE_SCHEDULES:
        raise unknown_name("pipeline schedule", name, PIPELINE_SCHEDULES)
    return PIPELINE_SCHEDULES[name](stages, micro_batches)


def peak_in_flight(stage_ops) -> int:
    """Most micro-batches forwarded but not yet backwarded at any point of one stage's order."""
    live = peak = 0
    for op in stage_ops:
        live += 1 if op.kind == "F" else -1
        peak = max(peak, live)
    return peak


def theoretical_bubble(stages: int, micro_batches: int) -> float:
    """``(p - 1) / (m + p - 1)``: the bubble of equal stages with free communication."""
    p, m = _check(stages, micro_batches)
    return (p - 1) / (m + p - 1)


def imbalance_bubble(stage_costs, micro_batches: int) -> float:
    """The bubble of unequal stages (per-micro-batch forward + backward times ``t``) with free
    communication, to first order: the first micro-batch crosses every stage, then the slowest
    paces the other ``m - 1``, ``T ≈ sum(t) + (m - 1) max(t)``, while the GPUs are busy
    ``m sum(t)`` in all: ``1 - m sum(t) / (p T)``. Equal stages give ``(p-1)/(m+p-1)``.

    Exact for GPipe when one stage is the slowest both forward and backward (each phase is a
    flow shop of identical jobs, whose makespan is ``sum + (m - 1) max``); 1F1B, interleaving,
    can do better."""
    t = np.asarray(stage_costs, dtype=float)
    p, m = len(t), micro_batches
    total = float(t.sum())
    span = total + (m - 1) * float(t.max())
    return 1.0 - m * total / (p * span) if span > 0 else 0.0


def partition_layers(costs, stages: int) -> list[tuple[int, int]]:
    """Contiguous ``[start, end)`` layer ranges for ``stages`` stages minimising the largest
    stage cost (exact dynamic programme over prefix sums; ties go to the earliest cut)."""
    costs = np.asarray(costs, dtype=float)
    n = len(costs)
    if stages > n:
        raise ConfigError(f"{stages} pipeline stages need at least {stages} layers; the model "
                          f"has {n}")
    prefix = np.concatenate(([0.0], np.cumsum(costs)))
    # best[j]: min over partitions of layers [0, j) into k stages of the largest stage cost
    best = np.full(n + 1, math.inf)
    best[1:] = prefix[1:]          # k = 1
    cuts = [np.zeros(n + 1, dtype=np.int64)]
    for _ in range(1, stages):
        new = np.full(n + 1, math.inf)
        arg = np.zeros(n + 1, dtype=np.int64)
        for j in range(1, n + 1):
            i = np.arange(1, j)    # last stage is [i, j); earlier stages hold [0, i)
            if not len(i):
                continue
            cand = np.maximum(best[i], prefix[j] - prefix[i])
            k = int(np.argmin(cand))
            new[j], arg[j] = cand[k], i[k]
        best = new
        cuts.append(arg)
    bounds, end = [], n
    for k in range(stages - 1, 0, -1):
        start = int(cuts[k][end])
        bounds.append((start, end))
        end = start
    bounds.append((0, end))
    return bounds[::-1]


def module_of(layer_name: str) -> str:
    """The block a layer belongs to, from its dotted name: ``h.6.attn.qkv`` -> ``h.6``,
    ``layer1.0.conv1.conv`` -> ``layer1.0``, ``embeddings.word`` -> ``embeddings``,
    ``features.12`` -> ``features.12``, ``fc`` -> ``fc``."""
    parts = layer_name.split(".")
    if len(parts) >= 2 and parts[1].isdigit():
        return ".".join(parts[:2])
    return parts[0]


def partition_blocks(names, costs, stages: int) -> list[tuple[int, int]]:
    """:func:`partition_layers` cutting only between blocks (:func:`module_of`), since a cut
    inside a block would have to ship its internal tensors (and a transformer's residual
    stream); per layer when the model has fewer blocks than stages."""
    modules = [module_of(n) for n in names]
    starts = [i for i in range(len(modules)) if i == 0 or modules[i] != modules[i - 1]]
    if len(starts) < stages:
        return partition_layers(costs, stages)
    ends = starts[1:] + [len(modules)]
    unit_cost = [math.fsum(costs[a:b]) for a, b in zip(starts, ends)]
    return [(starts[a], ends[b - 1]) for a, b in partition_layers(unit_cost, stages)]


def point_to_point(size_bytes: int, label: str = "activation") -> Schedule:
    """A schedule of one copy from rank 0 to rank 1 (a pipeline send)."""
    b = ScheduleBuilder("broadcast", "p2p", 2, [max(0, int(size_bytes))], root=0)
    b.send(0, 1, 0, reduce=False, step=0, phase=label)
    return b.build()


def bubble_fraction(ops: pd.DataFrame) -> float:
    """Idle share of the GPUs in ``ops`` (columns ``device, start_s, end_s``) between the first
    start and the last end: ``1 - busy / (devices x span)``."""
    span = float(ops["end_s"].max() - ops["start_s"].min())
    if span <= 0:
        return 0.0
    busy = math.fsum((ops["end_s"] - ops["start_s"]).tolist())
    return 1.0 - busy / (ops["device"].nunique() * span)


@dataclass
class PipelineResult:
    """One simulated pipeline iteration.

    ``ops`` has one row per executed op: ``replica, stage, micro_batch, kind, device, start_s,
    end_s``; ``stages`` one row per stage: ``stage, first_layer, last_layer, compute_s,
    params, boundary_bytes, peak_in_flight, peak_activation_bytes, dp_allreduce_s``.
    """

    row: dict
    engine: Engine
    ops: pd.DataFrame
    stages: pd.DataFrame


def simulate_pipeline(graph, model, device=None, *, stages: int, micro_batches: int,
                      micro_batch: int, schedule: str = "1f1b", replicas: int = 1,
                      precision: str = "fp16", profile=None, placement=None,
                      algorithm: str = "ring", options: dict | None = None,
                      equal_stages: bool = False) -> PipelineResult:
    """Simulate one pipeline-parallel iteration (x data-parallel replicas).

    Parameters
    ----------
    graph : networkx.DiGraph
        A validated topology with at least ``stages x replicas`` endpoints.
    model : Model or str
        A layer table: parameters (gradient bytes) and activation bytes per layer.
    device : Device or str, optional
        The GPU preset for the roofline compute model; not needed with ``profile``.
    stages, micro_batches, micro_batch : int
        ``p``, ``m`` and the samples per micro-batch.
    schedule : {"gpipe", "1f1b"}
    replicas : int
        Data-parallel pipeline replicas.
    precision : {"fp16", "amp", "bf16", "fp32"}
        Bytes per activation and gradient element.
    profile : ComputeProfile, optional
        Per-layer times for one micro-batch (default: roofline on ``device``, Adam).
    placement : sequence of str, optional
        Topology node of every (replica, stage), replica-major; default the first endpoints.
    algorithm, options
        The all-reduce between replicas.
    equal_stages : bool
        Give every stage the mean stage's forward and backward time (a perfect partition, the
        premise of ``(p-1)/(m+p-1)``); parameters and activations stay those of the real cut.

    Returns
    -------
    PipelineResult
        ``row`` has the columns of :data:`PIPELINE_COLUMNS`.
    """
    if isinstance(model, str):
        model = get_model(model)
    p, m = _check(stages, micro_batches)
    for value, what in ((micro_batch, "micro_batch"), (replicas, "replicas")):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{what} must be a positive integer, not {value!r}")
    if precision not in _ACTIVATION_BYTES:
        raise unknown_name("precision", precision, _ACTIVATION_BYTES)
    plan = pipeline_schedule(schedule, p, m)
    if profile is None:
        if device is None:
            raise ConfigError("simulate_pipeline needs a device preset or a compute profile")
        device = get_device(device) if isinstance(device, str) else device
    profile = adam_profile(model, device, micro_batch, precision, profile)
    gpus = p * replicas
    nodes = list(placement) if placement is not None else list(endpoints(graph)[:gpus])
    if len(nodes) < gpus:
        raise ConfigError(f"{p} stages x {replicas} replicas need {gpus} GPUs; topology "
                          f"{graph.graph.get('name', '')!r} has {len(nodes)}")

    layer_cost = [l.forward_s + l.backward_s for l in profile.layers]
    bounds = partition_blocks([layer.name for layer in model.layers], layer_cost, p)
    elem = _ACTIVATION_BYTES[precision]
    fwd = [math.fsum(l.forward_s for l in profile.layers[a:b]) for a, b in bounds]
    bwd = [math.fsum(l.backward_s for l in profile.layers[a:b]) for a, b in bounds]
    if equal_stages:
        fwd, bwd = [math.fsum(fwd) / p] * p, [math.fsum(bwd) / p] * p
    params = [sum(layer.params for layer in model.layers[a:b]) for a, b in bounds]
    act_per_sample = [sum(layer.activation_bytes for layer in model.layers[a:b])
                      for a, b in bounds]
    boundary = [model.layers[b - 1].activation_bytes * micro_batch * elem // FP32_BYTES
                for _, b in bounds]
    total_params = max(1, model.params)
    opt = [profile.optimizer_s * params[s] / total_params for s in range(p)]
    send = {size: point_to_point(size) for size in set(boundary)}

    engine = Engine(graph)
    records: list[tuple] = []
    # per (replica, stage): position in the order, whether a queued op is outstanding
    position = [[0] * p for _ in range(replicas)]
    arrived = [[set() for _ in range(p)] for _ in range(replicas)]   # (mb, kind) inputs
    last_b_end = [[math.nan] * p for _ in range(replicas)]
    stage_done = [0] * p
    ar_time = [0.0] * p
    end = [0.0]

    def ready(r: int, s: int, op: Op) -> bool:
        if op.kind == "F":
            return s == 0 or (op.micro_batch, "F") in arrived[r][s]
        return s == p - 1 or (op.micro_batch, "B") in arrived[r][s]

    def pump(r: int, s: int) -> None:
        """Queue as many of stage s's next ops as have their inputs."""
        ops = plan[s]
        while position[r][s] < len(ops) and ready(r, s, ops[position[r][s]]):
            op = ops[position[r][s]]
            position[r][s] += 1
            duration = fwd[s] if op.kind == "F" else bwd[s]
            device_name = nodes[r * p + s]
            engine.compute(device_name, duration, f"{op.kind}{op.micro_batch}",
                           lambda r=r, op=op: op_done(r, op))
            if duration > 0:
                _, _, a, b = engine.compute_log[-1]
            else:
                a = b = engine.env.now
            records.append((r, s, op.micro_batch, op.kind, device_name, a, b))

    def op_done(r: int, op: Op) -> None:
        s = op.stage
        if op.kind == "F" and s < p - 1:
            transfer(r, s, s + 1, op.micro_batch, "F")
        elif op.kind == "B" and s > 0:
            transfer(r, s, s - 1, op.micro_batch, "B")
        if op.kind == "B" and op == plan[s][-1]:
            last_b_end[r][s] = engine.env.now
            stage_finished(r, s)

    def transfer(r: int, src: int, dst: int, mb: int, kind: str) -> None:
        run = engine.launch(send[boundary[min(src, dst)]], (nodes[r * p + src],
                                                            nodes[r * p + dst]),
                            label=f"{'act' if kind == 'F' else 'grad'} r{r} {src}->{dst} mb{mb}")

        def delivered(_e):
            arrived[r][dst].add((mb, kind))
            pump(r, dst)

        run.done_event.callbacks.append(delivered)

    def stage_finished(r: int, s: int) -> None:
        stage_done[s] += 1
        if stage_done[s] < replicas:
            return
        peers = [nodes[q * p + s] for q in range(replicas)]
        if replicas > 1 and params[s] > 0:
            sched = make_schedule(algorithm, "allreduce", replicas, params[s] * elem,
                                  **_options(graph, algorithm, replicas, options))
            begin = engine.env.now
            run = engine.launch(sched, peers, label=f"dp allreduce stage {s}")
            run.done_event.callbacks.append(lambda _e, s=s, begin=begin:
                                            step(s, peers, engine.env.now - begin))
        else:
            step(s, peers, 0.0)

    def step(s: int, peers, allreduce_s: float) -> None:
        ar_time[s] = allreduce_s
        for dev in peers:
            engine.compute(dev, opt[s], "optimizer", lambda: None)
        end[0] = max(end[0], engine.env.now + opt[s])

    for r in range(replicas):
        for s in range(p):
            engine.call_at(0.0, lambda r=r, s=s: pump(r, s))
    engine.run()
    if any(position[r][s] < len(plan[s]) for r in range(replicas) for s in range(p)):
        raise ConfigError(f"pipeline schedule {schedule!r} deadlocked")   # a malformed plan

    ops = pd.DataFrame(records, columns=["replica", "stage", "micro_batch", "kind", "device",
                                         "start_s", "end_s"])
    pipeline_s = float(ops["end_s"].max() - ops["start_s"].min())
    bubble = bubble_fraction(ops)
    in_flight = [peak_in_flight(plan[s]) for s in range(p)]
    act_bytes = [in_flight[s] * act_per_sample[s] * micro_batch * elem / FP32_BYTES
                 for s in range(p)]
    stage_frame = pd.DataFrame({
        "stage": range(p), "first_layer": [model.layers[a].name for a, _ in bounds],
        "last_layer": [model.layers[b - 1].name for _, b in bounds],
        "compute_s": [f + b for f, b in zip(fwd, bwd)], "params": params,
        "boundary_bytes": boundary, "peak_in_flight": in_flight,
        "peak_activation_bytes": act_bytes, "dp_allreduce_s": ar_time})
    iteration_s = float(end[0])
    links = links_frame(engine, engine.env.now)
    link, util = bottleneck(links)
    row = {
        "model": model.name, "schedule": schedule, "stages": p, "micro_batches": m,
        "micro_batch": micro_batch, "replicas": replicas, "gpus": gpus, "precision": precision,
        "iteration_s": iteration_s, "pipeline_s": pipeline_s, "bubble_fraction": bubble,
        "theoretical_bubble": theoretical_bubble(p, m),
        "imbalance_bubble": imbalance_bubble([f + b for f, b in zip(fwd, bwd)], m),
        "peak_in_flight": max(in_flight),
        "peak_activation_bytes": max(act_bytes), "stage_compute_s": max(f + b for f, b in
                                                                       zip(fwd, bwd)) * m,
        "dp_allreduce_s": max(ar_time),
        "throughput_samples_s": m * micro_batch * replicas / iteration_s,
        "bottleneck_link": link, "bottleneck_utilisation": util,
        "topology": graph.graph.get("name", ""),
    }
    return PipelineResult(row=row, engine=engine, ops=ops, stages=stage_frame)


def _options(graph, algorithm: str, n: int, options: dict | None) -> dict:
    from ..collective import default_options

    return default_options(graph, algorithm, n, dict(options or {}))


# --------------------------------------------------------------------------------------------
# A scenario's study: schedules x micro-batch counts
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PipelineStudy:
    """What the ``pipeline:`` section of a scenario asks for: one model cut into ``stages``,
    ``replicas`` data-parallel copies, every schedule at every micro-batch count; the op
    timelines at ``timeline_micro_batches`` are kept for the plot."""

    model: str = "gpt2_xl"
    device: str | None = None            # default: the topology's GPU preset
    stages: int = 8
    replicas: int = 1
    micro_batch: int = 1
    micro_batches: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    schedules: tuple[str, ...] = tuple(PIPELINE_SCHEDULES)
    precision: str = "fp16"
    algorithm: str = "ring"
    equal_stages: bool = False
    timeline_micro_batches: int | None = None    # default: the middle micro-batch count

    @property
    def timeline_m(self) -> int:
        """The micro-batch count whose timelines the plot draws."""
        if self.timeline_micro_batches is not None:
            return self.timeline_micro_batches
        return sorted(self.micro_batches)[(len(self.micro_batches) - 1) // 2]

    def points(self) -> list[tuple[str, int]]:
        """``(schedule, micro_batches)`` in a fixed order."""
        return [(s, m) for s in self.schedules for m in self.micro_batches]


def run_pipeline_point(graph, study: PipelineStudy, schedule: str,
                       micro_batches: int) -> PipelineResult:
    """Simulate one point of a study (the device defaults to the topology's GPU preset)."""
    from .sweep import topology_device

    return simulate_pipeline(graph, study.model, study.device or topology_device(graph),
                             stages=study.stages, micro_batches=micro_batches,
                             micro_batch=study.micro_batch, schedule=schedule,
                             replicas=study.replicas, precision=study.precision,
                             algorithm=study.algorithm, equal_stages=study.equal_stages)
