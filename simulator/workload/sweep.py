"""Training sweeps: every (model, aggregation, GPU count, straggler factor, failure policy) of a
spec, one result row each.

This is what ``clustersim train`` and the ``training:`` section of a scenario run. Each row has
the columns of :data:`~simulator.workload.training.TRAINING_COLUMNS` plus :data:`EXTRA_COLUMNS`.

Aggregations are collective algorithm names or ``ps``; ``ps-bsp``, ``ps-sspK`` and ``ps-async``
pick the parameter servers' consistency per row, so one sweep can compare them.
Stragglers: ``stragglers`` workers, chosen with the spec's seed, compute ``factor`` times slower.
Failures: with a :class:`~.faults.FailurePlan`, each policy gives a goodput row.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import pandas as pd

from ..errors import ConfigError
from ..topology import endpoints
import dataclasses
import re

import numpy as np

from .compression import Compression
from .energy import ENERGY_COLUMNS, energy_columns
from .faults import FailurePlan, goodput
from .mixed_precision import gradient_element_bytes
from .training import (DDP_BUCKET_BYTES, GRADIENT_BYTES, PRECISIONS, TRAINING_COLUMNS,  # noqa: F401
                       PsConfig, simulate_training)

EXTRA_COLUMNS = ("device", "straggler_factor", "stragglers", "failure_policy", "recovery",
                 "goodput_samples_s", "lost_s", "stalled_s", "compression",
                 "gradient_dtype", "wire_bytes_per_iteration", "ps_in_bytes_per_iteration",
                 "ps_out_bytes_per_iteration") + ENERGY_COLUMNS



@dataclass(frozen=True)
class TrainingSpec:
    """What to train and how to aggregate; validated by the CLI or the scenario loader."""

    models: tuple[str, ...]
    batch_per_gpu: int
    gpus: tuple[int, ...]
    aggregations: tuple[str, ...]
    precision: str = "fp32"
    device: str | None = None          # default: the topology's GPU preset
    bucket_bytes: int = DDP_BUCKET_BYTES
    overlap: bool = True
    slices: int = 1
    ps: PsConfig = field(default_factory=PsConfig)
    measured_csv: str | None = None    # per-layer measured times instead of the roofline model
    straggler_factors: tuple[float, ...] = (1.0,)
    stragglers: int = 1                # how many workers are slowed by each factor
    failure: FailurePlan | None = None
    failure_policies: tuple[str, ...] = ("none",)
    seed: int = 0
    compression: Compression | None = None   # gradient format on the wire (None: dense)
    compressions: tuple[Compression, ...] = ()   # several formats, one row each (a sweep)
    library: object = None             # collective library of the buckets (None: ideal wires)
    framework: object = None           # Framework: bucket policy and launch (None: bucket_bytes)
    single_gpu_throughput: float | None = None   # measured samples/s of one GPU: anchors compute
    shared_cores: int | None = None    # the workers share this many CPU cores (compute contention)
    threads_per_worker: int = 1        # compute threads of each worker (with shared_cores)
    overlap_slowdown: float | None = None   # compute slowdown beside the library's kernels
    overheads: object = None           # TrainingOverheads: jitter, input pipeline, step cost
    #                                    (None: none); sampled jitter draws with ``seed``
    accumulation: int = 1              # micro-batches per optimizer step (gradient accumulation)
    gradient_dtype: str | None = None  # gradients' dtype on the wire (None: the precision's;
    #                                    mixed_precision: amp recipes that keep fp32 variables)

    def formats(self) -> tuple[Compression, ...]:
        """The gradient formats the sweep runs: ``compressions``, else ``compression``."""
        return self.compressions or (self.compression or Compression(),)

    def format_named(self, label: str) -> Compression:
        """The format of :meth:`formats` whose label is ``label``."""
        for fmt in self.formats():
            if fmt.label == label:
                return fmt
        raise ConfigError(f"compression {label!r} is not in this sweep; it has "
                          f"{', '.join(f.label for f in self.formats())}")


def resolve_aggregation(name: str, ps: PsConfig) -> tuple[str, PsConfig]:
    """``ps-async`` / ``ps-sspK`` / ``ps-bsp`` / ``ps-easgdT`` -> (``ps``, config with that
    consistency)."""
    match = re.fullmatch(r"ps-(bsp|async|ssp(\d+)|easgd(\d+))", name)
    if name == "ps" or not match:
        return name, ps
    if match.group(3):
        return "ps", dataclasses.replace(ps, staleness=None, easgd_tau=int(match.group(3)))
    staleness = 0 if match.group(1) == "bsp" else None if match.group(1) == "async" \
        else int(match.group(2))
    return "ps", dataclasses.replace(ps, staleness=staleness, easgd_tau=None)


def is_aggregation(name: str) -> bool:
    """A valid aggregation name: ``ps``, ``ps-bsp``, ``ps-async``, ``ps-sspK`` (K >= 1),
    ``ps-easgdT`` (T >= 1), or an all-reduce algorithm (checked by the caller)."""
    return name == "ps" or re.fullmatch(r"ps-(bsp|async|ssp[1-9]\d*|easgd[1-9]\d*)",
                                        name) is not None


def slowdown_vector(gpus: int, factor: float, count: int, seed: int) -> list[float]:
    """Per-worker compute multipliers: ``count`` workers, chosen with ``seed``, slowed."""
    slow = np.ones(gpus)
    if factor != 1.0 and count > 0:
        chosen = np.random.default_rng(seed).choice(gpus, size=min(count, gpus), replace=False)
        slow[chosen] = factor
    return slow.tolist()

def contention(spec: TrainingSpec, workers: int) -> float:
    """How much slower each worker computes when ``workers`` of them, each running
    ``threads_per_worker`` threads, share ``shared_cores`` cores: ``max(1, workers x threads /
    cores)`` (CPU-bound work time-shares the cores); 1 without ``shared_cores``."""
    if not spec.shared_cores:
        return 1.0
    return max(1.0, workers * spec.threads_per_worker / spec.shared_cores)


def topology_device(graph) -> str:
    """The device preset of the topology's first endpoint."""
    eps = endpoints(graph)
    device = graph.nodes[eps[0]].get("device") if eps else None
    if not device:
        raise ConfigError(f"topology {graph.graph.get('name', '')!r} names no GPU device preset; "
                          f"pass --device (training needs a compute model)")
    return device


def training_points(spec: TrainingSpec) -> list[tuple]:
    """Every (model, aggregation, gpus, straggler factor, failure policy, compression label),
    in a fixed order."""
    return [(m, a, n, f, p, c.label) for c in spec.formats() for m in spec.models
            for a in spec.aggregations for n in spec.gpus
            for f in spec.straggler_factors for p in failure_policies(spec, a)]


def failure_policies(spec: TrainingSpec, aggregation: str) -> tuple[str, ...]:
    """The failure policies simulated for ``aggregation``. Asynchronous parameter-server
    workers never wait for each other, so a failure needs no recovery whatever policy the user
    listed: every recovering policy collapses into one ``async_ps`` row (one row per policy
    would repeat the same numbers under different names)."""
    kind, ps = resolve_aggregation(aggregation, spec.ps)
    if kind != "ps" or ps.staleness is not None:
        return spec.failure_policies
    keep = tuple(p for p in spec.failure_policies if p == "none")
    return keep + (("async_ps",) if len(keep) < len(spec.failure_policies) else ())


def server_link_bytes(result, graph, gpus: int, ps: PsConfig) -> tuple[float, float]:
    """Bytes per iteration on the links into and out of the parameter servers (summed over
    servers): the PS hotspot's load. ``(0, 0)`` without parameter servers."""
    from ..records import links_frame
    from .training import _placement_nodes, _server_nodes, server_count

    workers = _placement_nodes(graph, gpus)
    servers = set(_server_nodes(graph, workers, ps, server_count(graph, workers, ps)))
    links = links_frame(result.engine, result.engine.env.now)
    wires = links[links["link"].str.contains("->")]
    into = wires.loc[wires["dst"].isin(servers) & ~wires["src"].isin(servers), "bytes_carried"]
    out = wires.loc[wires["src"].isin(servers) & ~wires["dst"].isin(servers), "bytes_carried"]
    return float(into.sum()) / result.iterations, float(out.sum()) / result.iterations


@functools.lru_cache(maxsize=64)
def _profile(model_name: str, device: str, batch: int, precision: str, measured: str | None):
    from .compute import compute_profile

    return compute_profile(model_name, device, batch, precision, measured_csv=measured)


def run_training_point(graph, spec: TrainingSpec, model_name: str, aggregation: str,
                       gpus: int, factor: float = 1.0, policy: str = "none",
                       compression: str | None = None, record_rates: bool = False):
    """Simulate one point of ``spec``; return its TrainingResult, the row extended with
    :data:`EXTRA_COLUMNS`. ``compression`` is the label of one of the spec's formats
    (default: the first)."""
    from ..guard import check_gpus
    from .models import get_model

    check_gpus(graph, gpus, what="gpus")       # before anything is sized by the count
    device = spec.device or topology_device(graph)
    model = get_model(model_name)
    profile = _profile(model_name, device, spec.batch_per_gpu, spec.precision, spec.measured_csv)
    if spec.single_gpu_throughput is not None:
        profile = profile.anchored(spec.single_gpu_throughput, spec.batch_per_gpu)
    grads = [layer.params * gradient_element_bytes(spec.precision, spec.gradient_dtype)
             for layer in model.layers]
    kind, ps = resolve_aggregation(aggregation, spec.ps)
    fmt = spec.format_named(compression) if compression is not None else spec.formats()[0]

    def simulate(n: int, record: bool):
        return simulate_training(
            graph, profile, gpus=n, batch_per_gpu=spec.batch_per_gpu, aggregation=kind,
            model_name=model_name, gradient_bytes=grads, precision=spec.precision,
            bucket_bytes=spec.bucket_bytes, overlap=spec.overlap, slices=spec.slices, ps=ps,
            record_rates=record,
            slowdown=[x * contention(spec, n)
                      for x in slowdown_vector(n, factor, spec.stragglers, spec.seed)],
            compression=fmt, library=spec.library, framework=spec.framework,
            overlap_slowdown=spec.overlap_slowdown,
            overheads=(dataclasses.replace(spec.overheads, seed=spec.seed)
                       if spec.overheads is not None else None),
            accumulation=spec.accumulation, gradient_dtype=spec.gradient_dtype)

    result = simulate(gpus, record_rates)
    row = dict(result.row, aggregation=aggregation, device=device, straggler_factor=factor,
               stragglers=spec.stragglers if factor != 1.0 else 0)
    rate = row["throughput_samples_s"]
    if spec.failure is not None and policy != "none" and gpus > 1:
        # asynchronous workers never wait for each other: no abort, no restart
        recovery = "async_ps" if kind == "ps" and ps.staleness is None else policy
        rate_n1 = simulate(gpus - 1, False).row["throughput_samples_s"]
        fate = goodput(recovery, rate, rate_n1, row["iteration_s"], spec.failure)
    else:
        fate = goodput("none", rate, rate, row["iteration_s"],
                       spec.failure or FailurePlan(checkpoint_cost_s=0.0))
    row.update(failure_policy=policy, recovery=fate["policy"],
               goodput_samples_s=fate["goodput_samples_s"],
               lost_s=fate["lost_s"], stalled_s=fate["stalled_s"])
    ps_in, ps_out = server_link_bytes(result, graph, gpus, ps) if kind == "ps" else (0.0, 0.0)
    row.update(ps_in_bytes_per_iteration=ps_in, ps_out_bytes_per_iteration=ps_out)
    row.update(energy_columns(row, result.engine, device, gpus, result.iterations))
    result.row = row
    return result


def run_training(graph, spec: TrainingSpec, progress=None) -> pd.DataFrame:
    """Simulate every point of ``spec`` on ``graph``."""
    rows = []
    for point in training_points(spec):
        row = run_training_point(graph, spec, *point).row
        rows.append(row)
        if progress:
            progress(row)
    return pd.DataFrame(rows, columns=list(TRAINING_COLUMNS) + list(EXTRA_COLUMNS))
