"""The scenario and topology-file grammar as typed models (pydantic), for editors and checks.

Each model names every key a section accepts, its type and, where the grammar fixes one, its
range or its choices. :mod:`simulator.scenario` takes its key lists from these models (one
grammar, two readers), and ``clustersim schema scenario|topology`` prints their JSON Schema, so
an editor with a YAML language server completes and checks a scenario as it is typed (point
``# yaml-language-server: $schema=scenario.schema.json`` at the printed file).

Values that carry units (``64MiB``, ``100 Gbps``, ``2 us``, ``134 img/s``) are strings or
numbers here; the loader parses them with :mod:`simulator.units`. Names from registries
(algorithms, models, devices, presets) are checked by the loader against the registry, which
the messages list; the schema lists the registries' current names where they are fixed sets.
"""

from __future__ import annotations

import json
from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field

Quantity = Union[int, float, str]
Counts = Union[int, list[int]]
Names = Union[str, list[str]]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TopologyRef(_Section):
    name: str = Field(description="preset name, builder name or YAML file")
    params: dict[str, Any] = Field(default_factory=dict,
                                   description="builder parameters overriding the preset's")


class LibrarySection(_Section):
    name: Literal["ideal", "nccl"]
    protocol: str | None = Field(None, description="LL, LL128, Simple or auto (collective "
                                                   "sweeps only)")
    launch: str | None = Field(None, description="mpi, group[:G], torch or none")
    nccl_version: str | None = Field(None, description="e.g. 2.18 (default: the newest)")


class CollectivePs(_Section):
    servers: int = Field(1, ge=1)
    placement: Literal["dedicated", "colocated"] = "dedicated"
    shards: list[float] | None = None
    overlap: bool = False


class CollectiveSection(_Section):
    collective: str = Field(description="allreduce, reduce_scatter, allgather, broadcast, "
                                        "reduce, alltoall")
    algorithms: Names
    sizes: Union[Quantity, list[Quantity]] = Field(description="bytes, e.g. [64KiB, 1GiB]")
    gpus: Counts
    slices: int = Field(1, ge=1)
    ps: CollectivePs | None = None
    free_reduce: bool = False


class TrainingPs(_Section):
    servers: Union[int, Literal["per_node"]] = 1
    placement: Literal["dedicated", "colocated"] = "dedicated"
    sharding: Literal["round_robin", "greedy", "even"] = "round_robin"
    consistency: Literal["bsp", "ssp", "async", "easgd"] = "bsp"
    staleness: int | None = Field(None, ge=1, description="ssp only")
    iterations: int = Field(4, ge=2)
    local_aggregation: bool = False
    impl: Literal["ideal", "tf-grpc", "mxnet-kvstore", "torch-gloo", "byteps"] = "ideal"
    tau: int | None = Field(None, ge=1, description="easgd only: local iterations per exchange")
    hierarchy: Literal["none", "machine", "rack"] = "none"


class ComputeSection(_Section):
    measured: str = Field(description="per-layer CSV of clustersim measure kernels")


class CompressionSection(_Section):
    kind: str
    fraction: float | None = Field(None, gt=0, le=1)
    error_feedback: bool | None = None
    chunk_elements: int | None = Field(None, ge=1)
    selection_passes: float | None = Field(None, gt=0)


class StragglerSection(_Section):
    count: int = Field(1, ge=0)
    factors: list[float]


class FailureSection(_Section):
    at: Quantity
    horizon: Quantity
    checkpoint_interval: Quantity
    checkpoint_cost: Quantity
    restart: Quantity
    reform: Quantity | None = None
    policies: Names


class TrainingSection(_Section):
    models: Names
    batch_per_gpu: int = Field(32, ge=1)
    gpus: Counts
    aggregations: Names
    precision: Literal["fp32", "fp16", "amp", "bf16"] = "fp32"
    device: str | None = None
    bucket: Quantity = "25MiB"
    overlap: bool = True
    slices: int = Field(1, ge=1)
    ps: TrainingPs | None = None
    compute: ComputeSection | None = None
    stragglers: StragglerSection | None = None
    failure: FailureSection | None = None
    compression: Union[str, CompressionSection, list[Union[str, CompressionSection]], None] = None
    framework: str | None = Field(None, description="ddp, apex-ddp, horovod, horovod-0.21, "
                                                    "tf-per-variable, single-bucket, per_layer, "
                                                    "size:BYTES or cycle:BYTES:TIME")
    single_gpu_throughput: Quantity | None = Field(None, description="e.g. 134 img/s")


class ZeroSection(_Section):
    model: str
    device: str | None = None
    gpus: int = Field(ge=1)
    micro_batch: int = Field(1, ge=1)
    precision: str = "fp16"
    stages: Counts = [0, 1, 2, 3]
    prefetch: Union[bool, list[bool]] = True
    checkpointing: bool = False
    group: Quantity | None = None
    algorithm: str = "ring"


class PipelineSection(_Section):
    model: str
    device: str | None = None
    stages: int = Field(ge=1)
    replicas: int = Field(1, ge=1)
    micro_batch: int = Field(1, ge=1)
    micro_batches: Counts
    schedules: Names = ["gpipe", "1f1b"]
    precision: str = "fp16"
    algorithm: str = "ring"
    equal_stages: bool = False
    timeline_micro_batches: int | None = Field(None, ge=1)


class HybridSection(_Section):
    gpus: int = Field(ge=1)
    servers: int = Field(1, ge=1)
    shardings: Names = ["hash"]
    alpha: float = Field(0.0, ge=0)
    batch_per_gpu: int = Field(ge=1)
    tables: int = Field(ge=1)
    rows: Counts
    dim: int = Field(ge=1)
    bytes_per_element: int = Field(4, ge=1)
    lookups_per_sample: int = Field(1, ge=1)
    bottom_mlp: list[int]
    top_mlp: list[int]
    aggregation: str = "ring"
    bucket: Quantity = "25MiB"
    precision: str = "fp32"
    device: str | None = None
    iterations: int = Field(3, ge=1)


class TimeToTrainStudy(_Section):
    model: str
    batch_per_gpu: int = Field(ge=1)
    gpus: Counts
    optimizers: Names


class TimeToTrainSection(_Section):
    studies: list[TimeToTrainStudy]
    forms: Names | None = None
    aggregation: str = "ring"
    precision: str = "fp32"
    device: str | None = None
    bucket: Quantity = "25MiB"


class ReportSection(_Section):
    plots: Names = []


class Scenario(_Section):
    """A scenario file: a topology, exactly one workload section, and what to report."""

    name: str
    description: str | None = None
    seed: int = Field(0, ge=0)
    topology: Union[str, TopologyRef]
    library: Union[Literal["ideal", "nccl"], LibrarySection, None] = None
    collective: CollectiveSection | None = None
    training: TrainingSection | None = None
    zero: ZeroSection | None = None
    pipeline: PipelineSection | None = None
    hybrid: HybridSection | None = None
    time_to_train: TimeToTrainSection | None = None
    report: ReportSection | None = None


class LibrarySettings(_Section):
    """A calibrated preset's ``library:`` section (written by ``clustersim calibrate``)."""

    name: Literal["ideal", "nccl"] = "nccl"
    version: str | None = None
    scale: dict[Literal["latency", "bandwidth"], float] | None = None
    costs: dict[Literal["kernel_launch_s", "call_overhead_s", "python_call_s"], float] | None \
        = None


class TopologyFile(_Section):
    """A topology preset file: a builder and its parameters, with the sources of the numbers."""

    name: str
    description: str | None = None
    builder: str = Field(description="star, fat_tree or gpu_cluster")
    params: dict[str, Any] = Field(default_factory=dict)
    sources: list[str] = Field(default_factory=list)
    library: LibrarySettings | None = None


#: ``clustersim schema NAME`` -> model.
SCHEMAS = {"scenario": Scenario, "topology": TopologyFile}


def keys(model: type[BaseModel]) -> tuple[str, ...]:
    """The keys a section accepts, in the model's order."""
    return tuple(model.model_fields)


def json_schema(name: str) -> str:
    """The JSON Schema of ``scenario`` or ``topology`` files, as text."""
    from .errors import unknown_name

    if name not in SCHEMAS:
        raise unknown_name("schema", name, SCHEMAS)
    schema = SCHEMAS[name].model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = f"clustersim {name} file"
    return json.dumps(schema, indent=2, sort_keys=False)
