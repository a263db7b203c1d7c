"""Training sweeps: every (model, aggregation, GPU count) of a spec, one result row each.

This is what ``clustersim train`` and the ``training:`` section of a scenario run. Each row has
the columns of :data:`~simulator.workload.training.TRAINING_COLUMNS` plus ``device``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import pandas as pd

from ..errors import ConfigError
from ..topology import endpoints
from .training import DDP_BUCKET_BYTES, TRAINING_COLUMNS, PsConfig, simulate_training

#: Bytes per gradient element on the wire: mixed precision (amp) all-reduces fp16 gradients.
GRADIENT_BYTES = {"fp32": 4, "fp16": 2, "amp": 2, "bf16": 2}
PRECISIONS = tuple(GRADIENT_BYTES)


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


def topology_device(graph) -> str:
    """The device preset of the topology's first endpoint."""
    eps = endpoints(graph)
    device = graph.nodes[eps[0]].get("device") if eps else None
    if not device:
        raise ConfigError(f"topology {graph.graph.get('name', '')!r} names no GPU device preset; "
                          f"pass --device (training needs a compute model)")
    return device


def training_points(spec: TrainingSpec) -> list[tuple[str, str, int]]:
    """Every (model, aggregation, gpus) of the spec, in a fixed order."""
    return [(m, a, n) for m in spec.models for a in spec.aggregations for n in spec.gpus]


@functools.lru_cache(maxsize=64)
def _profile(model_name: str, device: str, batch: int, precision: str, measured: str | None):
    from .compute import compute_profile

    return compute_profile(model_name, device, batch, precision, measured_csv=measured)


def run_training_point(graph, spec: TrainingSpec, model_name: str, aggregation: str,
                       gpus: int, record_rates: bool = False):
    """Simulate one (model, aggregation, gpus) point of ``spec``; return its TrainingResult
    with ``device`` added to the row."""
    from .models import get_model

    device = spec.device or topology_device(graph)
    model = get_model(model_name)
    profile = _profile(model_name, device, spec.batch_per_gpu, spec.precision, spec.measured_csv)
    grads = [layer.params * GRADIENT_BYTES[spec.precision] for layer in model.layers]
    result = simulate_training(
        graph, profile, gpus=gpus, batch_per_gpu=spec.batch_per_gpu, aggregation=aggregation,
        model_name=model_name, gradient_bytes=grads, precision=spec.precision,
        bucket_bytes=spec.bucket_bytes, overlap=spec.overlap, slices=spec.slices, ps=spec.ps,
        record_rates=record_rates)
    result.row = dict(result.row, device=device)
    return result


def run_training(graph, spec: TrainingSpec, progress=None) -> pd.DataFrame:
    """Simulate every point of ``spec`` on ``graph``."""
    rows = []
    for point in training_points(spec):
        row = run_training_point(graph, spec, *point).row
        rows.append(row)
        if progress:
            progress(row)
    return pd.DataFrame(rows, columns=list(TRAINING_COLUMNS) + ["device"])
