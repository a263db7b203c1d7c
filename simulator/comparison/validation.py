"""Published training-scaling measurements, simulated with the presets.

A use of :func:`simulator.comparison.training.compare_training` with the settings a published
benchmark states, so the same point-by-point comparison ``clustersim compare`` prints backs the
regression tests. Each function takes the measured rows (a :func:`~simulator.measure.schema.
read_training` frame of the public CSV layout of ``../shared/measurements``, a copy of which the
tests keep in ``tests/data/training``) and returns the compared points, with ``error_pct`` =
(simulated - measured) / measured · 100 of the throughput.
"""

from __future__ import annotations

import dataclasses

import pandas as pd

from .training import compare_training, default_ps, model_name, select
from ..topology import load_topology
from ..workload.frameworks import parse_framework

#: Parameter servers per model, as the TensorFlow benchmark page states for its p2.8xlarge
#: runs: "InceptionV3: 8 instances / 6 parameter servers; ResNet-50: (batch size 32) 8
#: instances / 4 parameter servers; ResNet-152: 8 instances / 4 parameter servers".
TF_K80_SERVERS = {"inception_v3": 6, "resnet50": 4, "resnet152": 4}


def tf_benchmarks_k80(measured: pd.DataFrame, *, anchor: str = "model",
                      impl: str = "ideal", bucket: str = "size:25MiB") -> pd.DataFrame:
    """Simulate the TensorFlow 2017 distributed K80 runs (p2.8xlarge, parameter servers).

    Setup as the page describes it: 8 GPUs per instance, ``distributed_replicated`` variable
    update (each instance first reduces its 8 GPUs' gradients, then pushes once to the
    parameter servers and pulls once), the parameter servers running on the worker instances
    (their CPUs), variables placed on them round-robin, synchronous updates (BSP). Topology
    ``k80-cloud-8`` (p2.8xlarge: 10 Gb/s between instances), compute model ``k80-gk210``.

    The defaults are those the regression test recorded its errors with: compute from the
    model (``anchor="model"``), bare wires (``impl="ideal"``) and 25 MiB pushes; ``clustersim
    compare`` runs the same points with the measured single-GPU anchor, TensorFlow's gRPC
    implementation and one push per variable.
    """
    rows = select(measured, ["hardware=p2.8xlarge instances"])
    rows = rows[rows["gpus"] > 1].reset_index(drop=True)
    rows.attrs.update(measured.attrs)

    def servers(record: dict):
        base = dataclasses.replace(default_ps(record),
                                   servers=TF_K80_SERVERS[model_name(record["model"])])
        return dataclasses.replace(base, impl=impl) if impl else base

    points = compare_training(rows, load_topology("k80-cloud-8"), anchor=anchor, ps=servers,
                              framework=parse_framework(bucket))
    return points.assign(error_pct=points["throughput_error_pct"])
