"""Published training-scaling measurements, simulated with the presets.

Each function takes the measured rows (the public CSV layout of ``../shared/measurements``, a
copy of which the tests keep in ``tests/data/training``), simulates every point with one preset
per hardware and no per-point tuning, and returns the rows with ``simulated_img_s`` and
``error_pct`` = (simulated - measured) / measured · 100 added.
"""

from __future__ import annotations

import pandas as pd

from .topology import load_topology
from .workload.sweep import TrainingSpec, run_training_point
from .workload.training import PsConfig

#: Model names of the public CSVs -> model registry names.
MODEL_NAMES = {"InceptionV3": "inception_v3", "ResNet-50": "resnet50",
               "ResNet-152": "resnet152", "AlexNet": "alexnet", "VGG16": "vgg16"}

#: Parameter servers per model, as the TensorFlow benchmark page states for its p2.8xlarge
#: runs: "InceptionV3: 8 instances / 6 parameter servers; ResNet-50: (batch size 32) 8
#: instances / 4 parameter servers; ResNet-152: 8 instances / 4 parameter servers".
TF_K80_SERVERS = {"inception_v3": 6, "resnet50": 4, "resnet152": 4}


def tf_benchmarks_k80(measured: pd.DataFrame) -> pd.DataFrame:
    """Simulate the TensorFlow 2017 distributed K80 runs (p2.8xlarge, parameter servers).

    Setup as the page describes it: 8 GPUs per instance, ``distributed_replicated`` variable
    update (each instance first reduces its 8 GPUs' gradients, then pushes once to the
    parameter servers and pulls once), the parameter servers running on the worker instances
    (their CPUs), variables placed on them round-robin, synchronous updates (BSP). Topology
    ``k80-cloud-8`` (p2.8xlarge: 10 Gb/s between instances), compute model ``k80-gk210``.
    """
    rows = measured[measured["hardware"].str.contains("p2.8xlarge instances")
                    & (measured["gpus"] > 1)]
    graph = load_topology("k80-cloud-8")
    out = []
    for record in rows.to_dict("records"):
        model = MODEL_NAMES[record["model"]]
        spec = TrainingSpec(models=(model,), batch_per_gpu=int(record["batch_per_gpu"]),
                            gpus=(int(record["gpus"]),), aggregations=("ps",),
                            ps=PsConfig(servers=TF_K80_SERVERS[model], placement="colocated",
                                        local_aggregation=True))
        sim = run_training_point(graph, spec, model, "ps", int(record["gpus"])).row
        simulated = sim["throughput_samples_s"]
        out.append({**record, "simulated_img_s": simulated,
                    "simulated_speedup": sim["speedup"],
                    "error_pct": (simulated - record["throughput_img_s"])
                    / record["throughput_img_s"] * 100})
    return pd.DataFrame(out)
