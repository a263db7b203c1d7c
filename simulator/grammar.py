"""The scenario grammar as typed models (pydantic): the one validator of scenario files.

Each model names every key a section accepts, its type, its range or its choices, its default,
and the checks that span keys (``tau`` only with ``consistency: easgd``, a failure inside its
horizon, an algorithm that implements the sweep's collective). :func:`validate` runs a model on
the data of :func:`simulator.config.read_yaml` and turns the first problem into the project's
one-line message, ``file:line: key.path: what was expected, got what`` (plus how many other
problems the file has); :mod:`simulator.scenario` then only assembles the run's objects from the
validated sections. ``clustersim schema scenario|topology`` prints the models as JSON Schema, so
an editor with a YAML language server completes and checks a scenario as it is typed (point
``# yaml-language-server: $schema=scenario.schema.json`` at the printed file).

Values with units (``64MiB``, ``100 Gbps``, ``2 us``, ``134 img/s``) are parsed here by
:mod:`simulator.units`: a validated section holds bytes, seconds and samples per second. Names
from registries (algorithms, models, devices, compressions, plots) are checked against the
registry when a file is validated (imported lazily: the grammar stays importable on its own),
and the message lists the valid names.

Scalars stand for one-item lists where a list is accepted (``gpus: 8`` is ``gpus: [8]``).
Types are strict: ``"8"`` is not an integer, ``1`` is not ``true``, and numbers are finite.
"""

import json
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import (AfterValidator, BaseModel, BeforeValidator, Field, PlainValidator,
                      ValidationError, ValidationInfo, model_validator)

from .config import (Invalid, Section, described, explain, listed, one_of, one_or_list,
                     quantity, registered)
from .errors import ClusterSimError, ConfigError
from .topology.presets import TopologyFile
from .workload.llm.steady import LOOSEST_TOLERANCE, TOLERANCE
from .workload.mixed_precision import GRADIENT_DTYPE_HELP


# -- value types ----------------------------------------------------------------------------------

def _algorithm_implements(*collectives, extra: str = ""):
    """An algorithm name implementing every one of ``collectives``."""
    def check(value):
        from .schedules import get_algorithm

        if not isinstance(value, str):
            raise Invalid(f"expected an algorithm name, got {value!r}")
        try:
            algo = get_algorithm(value)
        except ClusterSimError as exc:
            raise Invalid(f"{exc}{extra}") from None
        missing = [c for c in collectives if c not in algo.collectives]
        if missing:
            raise Invalid(f"{value} does not implement {', '.join(missing)}")
        return value
    return check


def _aggregation(value):
    """A training aggregation: ``ps``, ``ps-bsp``, ``ps-sspK``, ``ps-async``, ``ps-easgdT``, or
    an all-reduce algorithm."""
    from .workload.sweep import is_aggregation

    if isinstance(value, str) and is_aggregation(value):
        return value
    return _algorithm_implements("allreduce", extra=" (or ps, ps-bsp, ps-sspK, ps-async, "
                                                    "ps-easgdT)")(value)


def _models():
    from .workload.models import MODELS
    return MODELS


def _devices():
    from .topology.devices import DEVICES
    return DEVICES


def _precisions():
    from .workload.training import PRECISIONS
    return PRECISIONS


def _gradient_dtypes():
    from .workload.mixed_precision import GRADIENT_DTYPES
    return GRADIENT_DTYPES


def _state_precisions():
    from .workload.zero import STATE_BYTES_PER_PARAM
    return STATE_BYTES_PER_PARAM


def _compressions():
    from .workload.compression import COMPRESSIONS
    return COMPRESSIONS


def _size(value):
    from .units import parse_size
    return parse_size(value)


def _duration(value):
    from .units import parse_duration
    return parse_duration(value)


def _throughput(value):
    from .units import parse_throughput
    return parse_throughput(value)


def _sweep(value):
    """A ``sizes`` value: a size, or a list of them, where any string may be a comma list or
    an nccl-tests range (``8B:8GiB``, ``8B:8GiB:x4``, :func:`simulator.units.parse_sizes`)."""
    from .units import parse_sizes
    listed_value = isinstance(value, list)
    items = []
    for index, item in enumerate(value if listed_value else [value]):
        if not (isinstance(item, str) and ("," in item or ":" in item)):
            items.append(item)          # one size: its own check names its index
            continue
        try:
            items += parse_sizes(item)
        except ClusterSimError as exc:     # a UnitError: say which item
            raise Invalid(str(exc), *((index,) if listed_value else ())) from None
    return items


Count = Annotated[int, Field(ge=1)]
Size = quantity(_size, "size")
Sizes = Annotated[list[Size], Field(min_length=1),
                  BeforeValidator(_sweep, json_schema_input_type=Union[Size, list[Size]])]
Throughput = quantity(_throughput, "throughput")
Duration = quantity(_duration, "duration")
Model = one_of(_models)
Device = one_of(_devices)
Precision = one_of(_precisions)
#: The dtype gradients are all-reduced in (:mod:`simulator.workload.mixed_precision`).
GradientDtype = one_of(_gradient_dtypes)
StatePrecision = one_of(_state_precisions)
AllReduce = Annotated[str, PlainValidator(_algorithm_implements("allreduce"),
                                          json_schema_input_type=str)]


# -- sections -------------------------------------------------------------------------------------

def _named(value):
    """``name`` for ``{name: name}`` (``topology: star``, ``library: nccl``)."""
    if isinstance(value, str):
        return {"name": value}
    if not isinstance(value, dict):
        raise Invalid(f"expected a name or a mapping with a name, got {described(value)}")
    return value


class TopologyRef(Section):
    name: str = Field(description="preset name, builder name or YAML file (relative to the "
                                  "scenario)")
    params: dict[str, Any] = Field(default_factory=dict,
                                   description="builder parameters overriding the preset's")


def _protocol(value):
    from .library.nccl import protocol_setting

    if not isinstance(value, str):
        raise Invalid(f"expected a protocol name or an NCCL_PROTO list, got {value!r}")
    try:
        return protocol_setting(value)
    except ClusterSimError as exc:
        raise Invalid(str(exc)) from None


def _launch(value):
    from .library.launch import parse_launch

    if not isinstance(value, str):
        raise Invalid(f"expected a launch mode, got {value!r}")
    return registered(parse_launch)(value)


def _version(value):
    from .library.nccl_constants import get_version

    value = str(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else value
    if not isinstance(value, str):
        raise Invalid(f"expected a version such as 2.18, got {value!r}")
    return registered(get_version)(value)


def _channels(value):
    from .library.nccl import _channel_bounds

    if not isinstance(value, dict):
        raise Invalid(f"expected a mapping {{min: N, max: M}} (NCCL_MIN_NCHANNELS, "
                      f"NCCL_MAX_NCHANNELS; either may be left out), got {value!r}")
    try:
        return _channel_bounds(value)
    except ClusterSimError as exc:
        raise Invalid(str(exc).replace("library setting channels: ", "")) from None


class LibrarySection(Section):
    name: Literal["ideal", "nccl"]
    protocol: Annotated[str | None, PlainValidator(_protocol, json_schema_input_type=str)] = \
        Field(None, description="LL, LL128, Simple or auto (collective sweeps only)")
    launch: Annotated[str | None, PlainValidator(_launch, json_schema_input_type=str)] = \
        Field(None, description="mpi, group[:G], torch or none")
    nccl_version: Annotated[str | None, PlainValidator(
        _version, json_schema_input_type=Union[str, float])] = \
        Field(None, description="e.g. 2.18 (default: the newest)")
    channels: Annotated[Any, PlainValidator(_channels, json_schema_input_type=dict)] = \
        Field(None, description="{min: N, max: M}: the channels NCCL runs, as "
                                "NCCL_MIN_NCHANNELS / NCCL_MAX_NCHANNELS set them (collective "
                                "scenarios)")

    @model_validator(mode="after")
    def _nccl_only(self):
        for key in ("protocol", "launch", "nccl_version", "channels"):
            if self.given(key) and self.name != "nccl":
                raise Invalid(f"{key} needs library name nccl", key)
        return self


class CollectivePs(Section):
    servers: Count = 1
    placement: Literal["dedicated", "colocated"] = "dedicated"
    shards: list[Annotated[float, Field(ge=0)]] | None = Field(
        None, description="fraction of the gradient on each server")
    overlap: bool = False


def _collectives():
    from .schedules import COLLECTIVES
    return COLLECTIVES


def _algorithm_name(value):
    if not isinstance(value, str):
        raise Invalid(f"expected an algorithm name, got {value!r}")
    return value


class CollectiveSection(Section):
    collective: one_of(_collectives) = "allreduce"
    algorithms: listed(Annotated[str, PlainValidator(_algorithm_name,
                                                     json_schema_input_type=str)]) = ["ring"]
    sizes: Sizes = Field(description="bytes, e.g. [64KiB, 1GiB], or an nccl-tests range "
                                     "8B:8GiB (x2), 8B:8GiB:x4, 1MiB:8MiB:+1MiB")
    gpus: listed(Count) | None = Field(None, description="default: every endpoint")
    slices: Count = 1
    ps: CollectivePs = Field(default_factory=CollectivePs)
    free_reduce: bool = False

    @model_validator(mode="after")
    def _implemented(self):
        from .schedules import get_algorithm

        for i, name in enumerate(self.algorithms):
            try:
                algo = get_algorithm(name)
            except ClusterSimError as exc:
                raise Invalid(str(exc), "algorithms", i) from None
            if self.collective not in algo.collectives:
                raise Invalid(f"{name} does not implement {self.collective}; it implements "
                              f"{', '.join(algo.collectives)}", "algorithms", i)
        return self


def _servers(value):
    if value == "per_node":
        return value
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise Invalid(f"expected a count >= 1 or per_node, got {value!r}")
    return value


def _ps_impls():
    from .workload.ps_impls import PS_IMPLS
    return PS_IMPLS


class TrainingPs(Section):
    servers: Annotated[Union[int, str], PlainValidator(
        _servers, json_schema_input_type=Union[Count, Literal["per_node"]])] = 1
    placement: Literal["dedicated", "colocated"] = "dedicated"
    sharding: Literal["round_robin", "greedy", "even"] = "round_robin"
    consistency: Literal["bsp", "ssp", "async", "easgd"] = "bsp"
    staleness: Count | None = Field(None, description="ssp only (default 1)")
    iterations: int = Field(4, ge=2)
    local_aggregation: bool = False
    impl: one_of(_ps_impls) = "ideal"
    tau: Count | None = Field(None, description="easgd only: local iterations per exchange "
                                                "(default 1)")
    hierarchy: Literal["none", "machine", "rack"] = "none"

    @model_validator(mode="after")
    def _consistency_keys(self):
        for key, needs in (("tau", "easgd"), ("staleness", "ssp")):
            if self.given(key) and self.consistency != needs:
                raise Invalid(f"only meaningful with consistency: {needs} (here "
                              f"{self.consistency})", key)
        return self

    def build(self):
        from .workload.training import PsConfig

        staleness = {"bsp": 0, "ssp": self.staleness or 1}.get(self.consistency)
        return PsConfig(servers=self.servers, placement=self.placement, sharding=self.sharding,
                        staleness=staleness, iterations=self.iterations,
                        local_aggregation=self.local_aggregation, impl=self.impl,
                        easgd_tau=(self.tau or 1) if self.consistency == "easgd" else None,
                        hierarchy=self.hierarchy)


def _existing_file(value: str, info: ValidationInfo) -> str:
    """A file path, relative to the scenario's folder, that exists."""
    base = (info.context or {}).get("base_dir")
    file = Path(value)
    if base is not None and not file.is_absolute():
        file = Path(base) / file
    if not file.is_file():
        raise Invalid(f"file {str(file)!r} not found")
    return str(file)


class ComputeSection(Section):
    measured: Annotated[str, AfterValidator(_existing_file)] = Field(
        description="per-layer CSV of clustersim measure kernels")


def _compression_item(value):
    return {"kind": value} if isinstance(value, str) else value


class CompressionSection(Section):
    kind: one_of(_compressions)
    fraction: float | None = Field(None, description="topk only: kept fraction, in (0, 1]")
    error_feedback: bool | None = None
    chunk_elements: Annotated[int, Field(ge=0)] | None = None
    selection_passes: float | None = Field(None, ge=0)

    @model_validator(mode="after")
    def _consistent(self):
        self.build()
        return self

    def build(self):
        """The :class:`~simulator.workload.compression.Compression` (the kind's defaults for
        what the section leaves out)."""
        from .workload.compression import Compression, get_compression

        fields = dict(vars(get_compression(self.kind)))
        fields.update({k: getattr(self, k) for k in self.model_fields_set if k != "kind"})
        try:
            return Compression(**fields)
        except ClusterSimError as exc:
            bad = next((k for k in sorted(self.model_fields_set) if k in str(exc)), "kind")
            raise Invalid(str(exc), bad) from None


class StragglerSection(Section):
    count: Count = 1
    factors: listed(Annotated[float, Field(ge=1)]) = Field(
        description="slowdown factors >= 1, one row each")


def _policies():
    from .workload.faults import POLICIES
    return POLICIES[1:3]


class FailureSection(Section):
    at: Duration | None = None
    horizon: Duration | None = None
    checkpoint_interval: Duration | None = None
    checkpoint_cost: Duration | None = None
    restart: Duration | None = None
    reform: Duration | None = None
    policies: listed(one_of(_policies))

    @model_validator(mode="after")
    def _inside_horizon(self):
        plan = self.build()
        if plan.at_s >= plan.horizon_s:
            raise Invalid(f"the failure must fall inside the horizon ({plan.horizon_s:g} s), "
                          f"got {plan.at_s:g} s", "at")
        if plan.checkpoint_interval_s <= 0:
            raise Invalid("must be > 0", "checkpoint_interval")
        return self

    def build(self):
        """The :class:`~simulator.workload.faults.FailurePlan` (its defaults for what the
        section leaves out)."""
        from .workload.faults import FailurePlan

        return FailurePlan(**{f"{key}_s": getattr(self, key) for key in
                              ("at", "horizon", "checkpoint_interval", "checkpoint_cost",
                               "restart", "reform") if getattr(self, key) is not None})


class TrainingSection(Section):
    models: listed(Model)
    batch_per_gpu: Count = 32
    accumulation: Count = Field(
        1, description="micro-batches of batch_per_gpu per optimizer step (gradient "
                       "accumulation): one aggregation, from the last micro-batch's backward")
    gpus: listed(Count)
    aggregations: listed(Annotated[str, PlainValidator(_aggregation, json_schema_input_type=str)])
    precision: Precision = "fp32"
    gradient_dtype: GradientDtype | None = Field(None, description=GRADIENT_DTYPE_HELP)
    device: Device | None = None
    bucket: Size = 25 * 2**20
    overlap: bool = True
    slices: Count = 1
    ps: TrainingPs = Field(default_factory=TrainingPs)
    compute: ComputeSection | None = None
    stragglers: StragglerSection | None = None
    failure: FailureSection | None = None
    compression: Annotated[Union[CompressionSection, list[CompressionSection], None],
                           PlainValidator(lambda v, info: one_or_list(CompressionSection, v,
                                                                       info, _compression_item),
                                          json_schema_input_type=Union[
                                              str, CompressionSection,
                                              list[Union[str, CompressionSection]]])] = Field(
        None, description="one format, or a list compared side by side")
    framework: Annotated[str | None, PlainValidator(
        registered(lambda v: _framework(v)), json_schema_input_type=str)] = Field(
        None, description="ddp, apex-ddp, apex-ddp-bert, horovod, horovod-0.21, "
                          "tf-per-variable, single-bucket, per_layer, size:BYTES or "
                          "cycle:BYTES:TIME")
    single_gpu_throughput: Throughput | None = Field(
        None, description="e.g. 134 img/s")

    def formats(self) -> tuple:
        """The compression formats, one or a list."""
        value = self.compression
        return () if value is None else tuple(value) if isinstance(value, list) else (value,)

    @model_validator(mode="after")
    def _distinct_formats(self):
        labels = [c.build().label for c in self.formats()]
        for i, label in enumerate(labels):
            if label in labels[:i]:
                raise Invalid(f"format {label!r} is listed twice", "compression", i)
        return self


def _framework(value):
    from .workload.frameworks import parse_framework

    if not isinstance(value, str):
        raise ConfigError(f"expected a framework name or spec, got {value!r}")
    parse_framework(value)


def _zero_stages():
    from .workload.zero import ZERO_STAGES
    return ZERO_STAGES


def _zero_models():
    from .workload.zero import zero_model_names
    return zero_model_names()


def _zero_stage(value):
    stages = _zero_stages()
    if isinstance(value, bool) or value not in stages:
        raise Invalid(f"ZeRO stages are {', '.join(map(str, stages[:-1]))} and {stages[-1]}, "
                      f"got {value!r}")
    return value


def _positive_size(value):
    if value <= 0:
        raise Invalid(f"must be > 0 bytes, got {value}")
    return value


class ZeroSection(Section):
    model: one_of(_zero_models)
    device: Device | None = None
    gpus: Count | None = Field(None, description="default: every endpoint")
    micro_batch: Count = 1
    precision: StatePrecision = "fp16"
    stages: listed(Annotated[int, PlainValidator(_zero_stage, json_schema_input_type=int)]) = \
        [0, 1, 2, 3]
    prefetch: listed(bool) = [True]
    checkpointing: bool = False
    group: Annotated[Size, AfterValidator(_positive_size)] | None = Field(
        None, description="bucket of gathered parameters (default: DeepSpeed's)")
    algorithm: Annotated[str, PlainValidator(_algorithm_implements(
        "allreduce", "reduce_scatter", "allgather"), json_schema_input_type=str)] = "ring"


def _pipeline_schedules():
    from .workload.pipeline import PIPELINE_SCHEDULES
    return PIPELINE_SCHEDULES


class PipelineSection(Section):
    model: Model
    device: Device | None = None
    stages: Count
    replicas: Count = 1
    micro_batch: Count = 1
    micro_batches: listed(Count) = [1, 2, 4, 8, 16, 32]
    schedules: listed(one_of(_pipeline_schedules)) | None = Field(
        None, description="default: every schedule")
    precision: StatePrecision = "fp16"
    algorithm: AllReduce = "ring"
    equal_stages: bool = False
    timeline_micro_batches: Count | None = None

    @model_validator(mode="after")
    def _timeline_is_run(self):
        m = self.timeline_micro_batches
        if m is not None and m not in self.micro_batches:
            raise Invalid(f"must be one of micro_batches "
                          f"({', '.join(map(str, self.micro_batches))}), got {m}",
                          "timeline_micro_batches")
        return self


def _rows(value):
    """One row count, or one per table."""
    counts = value if isinstance(value, list) else [value]
    for i, count in enumerate(counts):
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise Invalid(f"expected a row count >= 1, got {count!r}",
                          *((i,) if isinstance(value, list) else ()))
    return value


class HybridSection(Section):
    gpus: Count | None = Field(None, description="default: every endpoint")
    servers: Count | None = None
    shardings: listed(Literal["hash", "range"]) = ["hash", "range"]
    alpha: Annotated[float, Field(ge=0)] | None = Field(
        None, description="Zipf exponent of row popularity (0: uniform)")
    batch_per_gpu: Count | None = None
    tables: Count | None = None
    rows: Annotated[Union[int, list[int], None], PlainValidator(
        _rows, json_schema_input_type=Union[Count, list[Count]])] = Field(
        None, description="rows of every table, or one count per table")
    dim: Count | None = None
    bytes_per_element: Count | None = None
    lookups_per_sample: Count | None = None
    bottom_mlp: listed(Count) | None = None
    top_mlp: listed(Count) | None = None
    aggregation: AllReduce = "ring"
    bucket: Size | None = None
    precision: Precision | None = None
    device: Device | None = None
    iterations: Count | None = None

    @model_validator(mode="after")
    def _consistent(self):
        self.build()
        return self

    def build(self):
        """The :class:`~simulator.workload.hybrid.HybridSpec` (MLPerf's DLRM for what the
        section leaves out)."""
        from .workload.hybrid import HybridSpec

        fields = {k: getattr(self, k) for k in self.model_fields_set
                  if k not in ("gpus", "shardings", "bucket")}
        for key in ("rows", "bottom_mlp", "top_mlp"):
            if isinstance(fields.get(key), list):
                fields[key] = tuple(fields[key])
        if self.given("bucket"):
            fields["bucket_bytes"] = self.bucket
        try:
            return HybridSpec(**fields)
        except ClusterSimError as exc:
            bad = next((k for k in sorted(self.model_fields_set) if str(exc).startswith(k)),
                       None)
            raise Invalid(str(exc), *((bad,) if bad else ())) from None


def _llm_models():
    from .workload.llm.registry import LLM_MODELS
    return LLM_MODELS


def _choices(name: str):
    def get():
        from .workload.llm import layout
        return {value: value for value in getattr(layout, name)}
    return get


def _positive_duration(value):
    if value <= 0:
        raise Invalid(f"must be > 0 seconds, got {value}")
    return value


def _search_optimizers():
    from .workload.llm.search import OPTIMIZERS
    return OPTIMIZERS


class LlmSearchSection(Section):
    """``llm: search:``: the branch-and-bound layout search (``clustersim llm --search``) in
    place of a sweep; each list narrows a dimension of the search space."""

    top: Count = Field(10, description="the K fastest layouts per GPU count, exact")
    gpus: listed(Count) | None = Field(
        None, description="cluster sizes to search (the topology rebuilt with nodes = GPUs / "
                          "GPUs per machine); default: the topology's GPUs")
    tp: listed(Count) | None = Field(None, description="default: powers of two up to the "
                                                       "GPUs per machine")
    cp: listed(Count) | None = Field(None, description="default: 1, 2, 4")
    pp: listed(Count) | None = Field(None, description="default: 1 .. max_pp dividing the "
                                                       "GPUs")
    virtual_stages: listed(Count) | None = Field(None, description="default: 1, 2, 4")
    micro_batch: listed(Count) | None = Field(None, description="default: 1, 2, 4")
    optimizers: listed(one_of(_search_optimizers)) | None = Field(
        None, description="default: none, distopt, zero3")
    recompute: listed(one_of(_choices("RECOMPUTE"))) | None = Field(
        None, description="default: none, selective, full")
    max_pp: Count = 32
    prune: bool = Field(True, description="false: simulate every layout that fits")
    time_limit: Annotated[Duration, AfterValidator(_positive_duration)] | None = Field(
        None, description="start no layout after this long (e.g. 10 min)")
    workers: Count | None = Field(None, description="local processes (default: one per CPU)")


def _expert_tp_field():
    return Field(None, description="tensor parallelism of the expert layers (default tp); 1 "
                                   "with tp > 1 folds the expert groups across tensor-parallel "
                                   "ranks")


def _dispatcher_field():
    return Field("alltoall", description="MoE token dispatcher: alltoall (NCCL all-to-all of "
                                         "every token-expert copy), hybridep (Hybrid-EP: once "
                                         "per machine over RDMA, then NVLink) or deepep (the "
                                         "same, DeepEP's kernels)")


def _ep_overlap_field():
    return Field(False, description="expert all-to-alls hidden behind another micro-batch's "
                                    "compute (moe_a2a_overlap)")


def _main_grads_field():
    return Field("auto", description="precision of the gradients reduced over data "
                                     "parallelism: auto (Megatron's default for the precision), "
                                     "fp32, bf16 (grad_reduce_in_fp32 = False) or fp16")


def _fp8_recipe_field():
    return Field("delayed", description="how fp8 operands are scaled (Megatron-Core's "
                                        "fp8_recipe): delayed, tensorwise (current scaling), "
                                        "blockwise, mxfp8")


#: ``llm:`` keys that a search chooses itself (everything but the model, the global batch
#: and the precision).
_SEARCHED = ("device", "tp", "cp", "ep", "pp", "dp", "virtual_stages", "micro_batch",
             "pipeline", "sequence_parallel", "zero_stage", "recompute", "bucket",
             "distributed_optimizer", "fsdp", "tp_overlap", "order", "pp_layout",
             "recompute_modules", "expert_tp", "dispatcher", "ep_overlap", "fp8_recipe",
             "main_grads")


class LlmSection(Section):
    """A hybrid-parallel training step of a transformer: every list sweeps (or, with
    ``search``, the layout search chooses the layouts)."""

    model: one_of(_llm_models)
    device: Device | None = Field(None, description="default: the topology's GPU")
    tp: listed(Count) = [1]
    cp: listed(Count) = [1]
    ep: listed(Count) = [1]
    pp: listed(Count) = [1]
    dp: listed(Count) | None = Field(
        None, description="default: the GPUs of the topology / (tp x cp x pp)")
    virtual_stages: listed(Count) = [1]
    micro_batch: listed(Count) = [1]
    global_batch: listed(Count)
    pipeline: listed(one_of(_choices("PIPELINE_KINDS"))) | None = Field(
        None, description="default: interleaved with virtual_stages > 1, else 1f1b")
    sequence_parallel: listed(bool) = [False]
    zero_stage: listed(Annotated[int, Field(ge=0, le=3)]) = [0]
    recompute: listed(one_of(_choices("RECOMPUTE"))) = ["none"]
    precision: listed(one_of(_choices("PRECISIONS"))) = ["bf16"]
    bucket: listed(Annotated[Size, AfterValidator(_positive_size)]) | None = Field(
        None, description="gradient bucket (default: Megatron-Core's max(40M, 1M x dp) "
                          "parameters of fp32 gradients)")
    distributed_optimizer: bool = False
    fsdp: bool = False
    tp_overlap: bool = False
    order: str = Field("tp-cp-ep-dp-pp", description="rank order, fastest-varying first")
    pp_layout: str | None = Field(
        None, description="decoder layers of each pipeline chunk as Megatron-Core's "
                          "pipeline_model_parallel_layout (e.g. 'Et*4|(t*4|)*14tmL'), for "
                          "every point; a point whose pp x virtual_stages differs is refused")
    expert_tp: Count | None = _expert_tp_field()
    dispatcher: one_of(_choices("DISPATCHERS")) = _dispatcher_field()
    ep_overlap: bool = _ep_overlap_field()
    fp8_recipe: one_of(_choices("FP8_RECIPES")) = _fp8_recipe_field()
    main_grads: one_of(_choices("MAIN_GRADS")) = _main_grads_field()
    recompute_modules: list[one_of(_choices("RECOMPUTE_MODULES"))] | None = Field(
        None, description="what the points with recompute selective recompute (Megatron-Core's "
                          "recompute_modules); default core_attn")
    steady_tolerance: Annotated[float, Field(ge=TOLERANCE, le=LOOSEST_TOLERANCE)] = Field(
        TOLERANCE, description=f"how closely a long step's increments per period must agree, "
                               f"relative to its span, to extend it from three short steps "
                               f"({TOLERANCE:g}: exact; up to {LOOSEST_TOLERANCE:g} for steps "
                               f"with no exact period, such as overlapped expert all-to-alls)")
    search: LlmSearchSection | None = Field(
        None, description="search the fastest layouts instead of sweeping the lists")

    @model_validator(mode="after")
    def _search_alone(self):
        if self.search is None:
            return self
        for key in _SEARCHED:
            if self.given(key):
                why = ("the search uses the topology's GPU (set topology.params.gpu)"
                       if key == "device" else
                       "the search chooses it (narrow the search space under search: tp, "
                       "cp, pp, virtual_stages, micro_batch, optimizers, recompute)")
                raise Invalid(f"not used with search: {why}", key)
        if self.given("steady_tolerance"):
            raise Invalid("not used with search: the search extends each layout's steady "
                          "state exactly", "steady_tolerance")
        for key in ("global_batch", "precision"):
            values = getattr(self, key)
            if len(values) != 1:
                raise Invalid(f"one value with search, got {len(values)} ({values})", key)
        return self


def _ranks(value):
    """Endpoint indices: ``"0-15"``, ``"0-7,16-23"``, a list of integers, or a count."""
    if isinstance(value, bool) or not isinstance(value, (str, int, list)):
        raise Invalid(f"expected indices like '0-15', a list of integers or a count, got "
                      f"{described(value)}")
    if isinstance(value, list) and not all(isinstance(v, int) and not isinstance(v, bool)
                                           for v in value):
        raise Invalid("expected a list of integer endpoint indices")
    return value


Ranks = Annotated[Any, PlainValidator(_ranks, json_schema_input_type=Union[str, int,
                                                                           list[int]])]


class JobSection(Section):
    """A collective loop of a ``jobs:`` scenario (``kind: collective``, the default), on its
    own ranks."""

    name: str
    kind: Literal["collective"] = "collective"
    collective: one_of(_collectives) = "allreduce"
    algorithm: Annotated[str, PlainValidator(_algorithm_name, json_schema_input_type=str)] = \
        "ring"
    size: Annotated[Size, AfterValidator(_positive_size)]
    ranks: Ranks
    iterations: Count = 1

    @model_validator(mode="after")
    def _implemented(self):
        from .schedules import get_algorithm

        try:
            algo = get_algorithm(self.algorithm)
        except ClusterSimError as exc:
            raise Invalid(str(exc), "algorithm") from None
        if self.collective not in algo.collectives:
            raise Invalid(f"{self.algorithm} does not implement {self.collective}; it "
                          f"implements {', '.join(algo.collectives)}", "algorithm")
        return self


def _job_aggregation(value):
    """A training job's all-reduce algorithm (parameter servers are not a job's)."""
    if isinstance(value, str) and (value == "ps" or value.startswith("ps-")):
        raise Invalid(f"a training job aggregates with an all-reduce algorithm (ring, "
                      f"halving_doubling, double_binary_tree, ...), not {value!r}: parameter "
                      f"servers are not simulated beside other jobs")
    return _algorithm_implements("allreduce")(value)


class TrainingJobSection(Section):
    """``kind: training``: data-parallel training iterations of a model, as ``clustersim
    train`` simulates them, on bare wires."""

    name: str
    kind: Literal["training"]
    model: Model
    ranks: Ranks
    iterations: Count = 1
    aggregation: Annotated[str, PlainValidator(_job_aggregation, json_schema_input_type=str)] \
        = "ring"
    batch_per_gpu: Count = 32
    precision: Precision = "fp32"
    gradient_dtype: GradientDtype | None = Field(None, description=GRADIENT_DTYPE_HELP)
    device: Device | None = Field(None, description="default: the first rank's GPU")
    bucket: Annotated[Size, AfterValidator(_positive_size)] = 25 * 2**20
    overlap: bool = True
    slices: Count = 1
    framework: Annotated[str | None, PlainValidator(
        registered(lambda v: _framework(v)), json_schema_input_type=str)] = Field(
        None, description="bucket policy: ddp, horovod, per_layer, size:BYTES, ...")


class LlmJobSection(Section):
    """``kind: llm``: hybrid-parallel LLM training steps of one layout; rank r of the layout
    on the job's r-th endpoint."""

    name: str
    kind: Literal["llm"]
    model: one_of(_llm_models)
    ranks: Ranks
    iterations: Count = 1
    device: Device | None = Field(None, description="default: the first rank's GPU")
    tp: Count = 1
    cp: Count = 1
    ep: Count = 1
    expert_tp: Count | None = _expert_tp_field()
    dispatcher: one_of(_choices("DISPATCHERS")) = _dispatcher_field()
    ep_overlap: bool = _ep_overlap_field()
    fp8_recipe: one_of(_choices("FP8_RECIPES")) = _fp8_recipe_field()
    main_grads: one_of(_choices("MAIN_GRADS")) = _main_grads_field()
    pp: Count = 1
    dp: Count | None = Field(None, description="default: the job's ranks / (tp x cp x pp)")
    virtual_stages: Count = 1
    pp_layout: str | None = Field(
        None, description="decoder layers of each pipeline chunk as Megatron-Core's "
                          "pipeline_model_parallel_layout, e.g. 'Et*4|(t*4|)*14tmL'; default: "
                          "even chunks")
    micro_batch: Count = 1
    global_batch: Count
    pipeline: one_of(_choices("PIPELINE_KINDS")) | None = Field(
        None, description="default: interleaved with virtual_stages > 1, else 1f1b")
    sequence_parallel: bool = False
    zero_stage: Annotated[int, Field(ge=0, le=3)] = 0
    recompute: one_of(_choices("RECOMPUTE")) = "none"
    recompute_modules: list[one_of(_choices("RECOMPUTE_MODULES"))] | None = Field(
        None, description="what recompute selective recomputes (Megatron-Core's "
                          "recompute_modules); default core_attn")
    precision: one_of(_choices("PRECISIONS")) = "bf16"
    bucket: Annotated[Size, AfterValidator(_positive_size)] | None = None
    distributed_optimizer: bool = False
    fsdp: bool = False
    tp_overlap: bool = False
    order: str = Field("tp-cp-ep-dp-pp", description="rank order, fastest-varying first")

    def layout(self, gpus: int):
        """The job's :class:`~simulator.workload.llm.layout.Layout` on ``gpus`` ranks."""
        from .workload.llm.layout import Layout

        others = self.tp * self.cp * self.pp
        dp = self.dp
        if dp is None:
            if gpus % others:
                raise ConfigError(f"{gpus} ranks are not a multiple of tp {self.tp} x cp "
                                  f"{self.cp} x pp {self.pp} = {others}; set dp or the ranks")
            dp = gpus // others
        if others * dp != gpus:
            raise ConfigError(f"tp {self.tp} x cp {self.cp} x pp {self.pp} x dp {dp} = "
                              f"{others * dp} GPUs, the job has {gpus} ranks")
        pipeline = self.pipeline or ("interleaved" if self.virtual_stages > 1 else "1f1b")
        extra = {"bucket_bytes": int(self.bucket)} if self.bucket is not None else {}
        if self.recompute_modules:
            if self.recompute != "selective":
                raise ConfigError("recompute_modules go with recompute: selective")
            extra["recompute_modules"] = tuple(self.recompute_modules)
        if self.pp_layout is not None:
            from .workload.llm.layout import parse_pipeline_layout
            from .workload.llm.registry import get_llm_model

            model = get_llm_model(self.model)
            extra["pipeline_layout"] = parse_pipeline_layout(
                self.pp_layout, self.pp, self.virtual_stages, model.layers, model.mtp_layers)
        return Layout(tp=self.tp, cp=self.cp, ep=self.ep, pp=self.pp, dp=dp,
                      virtual_stages=self.virtual_stages, micro_batch=self.micro_batch,
                      global_batch=self.global_batch, pipeline=pipeline,
                      sequence_parallel=self.sequence_parallel, zero_stage=self.zero_stage,
                      fsdp=self.fsdp, distributed_optimizer=self.distributed_optimizer,
                      recompute=self.recompute, precision=self.precision,
                      tp_overlap=self.tp_overlap, order=self.order,
                      expert_tp=self.expert_tp, dispatcher=self.dispatcher,
                      ep_overlap=self.ep_overlap, fp8_recipe=self.fp8_recipe,
                      main_grads=self.main_grads, **extra)


#: ``kind`` -> the section of that job kind.
JOB_SECTIONS = {"collective": JobSection, "training": TrainingJobSection, "llm": LlmJobSection}


def _job(value, info: ValidationInfo):
    """One job: the section of its ``kind`` (collective when it names none)."""
    if not isinstance(value, dict):
        raise Invalid(f"expected a mapping with a name, a kind ({', '.join(JOB_SECTIONS)}) "
                      f"and ranks, got {described(value)}")
    kind = value.get("kind", "collective")
    if kind not in JOB_SECTIONS:
        raise Invalid(f"expected one of {', '.join(JOB_SECTIONS)}, got {kind!r}", "kind")
    try:
        return JOB_SECTIONS[kind].model_validate(value, context=info.context)
    except ValidationError as exc:
        path, message = explain(exc.errors(include_url=False)[0])
        raise Invalid(message, *path) from None


Job = Annotated[Any, PlainValidator(_job, json_schema_input_type=Union[
    JobSection, TrainingJobSection, LlmJobSection])]


def _optimizers():
    from .workload.time_to_train import CONVERGENCE
    return CONVERGENCE


class TimeToTrainStudy(Section):
    model: Model
    batch_per_gpu: Count = 32
    gpus: listed(Count)
    optimizers: listed(one_of(_optimizers))

    @model_validator(mode="after")
    def _measured_on_model(self):
        from .workload.time_to_train import CONVERGENCE

        for i, name in enumerate(self.optimizers):
            if CONVERGENCE[name].model != self.model:
                raise Invalid(f"the {name} convergence model is measured on "
                              f"{CONVERGENCE[name].model}, not {self.model}", "optimizers", i)
        return self


def _forms():
    from .workload.time_to_train import FORMS
    return FORMS


class TimeToTrainSection(Section):
    studies: Annotated[list[TimeToTrainStudy], Field(min_length=1)] = Field(
        description="model, batch_per_gpu, gpus, optimizers")
    forms: listed(one_of(_forms)) | None = Field(
        None, description="default: every form")
    aggregation: Annotated[str, PlainValidator(_aggregation, json_schema_input_type=str)] = \
        "hierarchical"
    precision: Precision = "fp16"
    device: Device | None = None
    bucket: Size = 25 * 2**20


def _plots():
    from .report.plots import WORKLOAD_PLOTS
    return [name for plots in WORKLOAD_PLOTS.values() for name in plots]


class ReportSection(Section):
    plots: listed(one_of(_plots), min_length=0) = []


#: The workload sections; a scenario has exactly one.
WORKLOADS = ("collective", "training", "zero", "pipeline", "hybrid", "time_to_train", "llm",
             "jobs")


class Scenario(Section):
    """A scenario file: a topology, exactly one workload section, and what to report."""

    name: str | None = Field(None, description="default: the file's name")
    description: str | None = None
    seed: int = Field(0, ge=0)
    topology: Annotated[TopologyRef, BeforeValidator(
        _named, json_schema_input_type=Union[str, TopologyRef])]
    library: Annotated[LibrarySection, BeforeValidator(
        _named, json_schema_input_type=Union[Literal["ideal", "nccl"], LibrarySection])] | \
        None = Field(None, description="default: nccl on GPU clusters, ideal elsewhere")
    collective: CollectiveSection | None = None
    training: TrainingSection | None = None
    zero: ZeroSection | None = None
    pipeline: PipelineSection | None = None
    hybrid: HybridSection | None = None
    time_to_train: TimeToTrainSection | None = None
    llm: LlmSection | None = None
    jobs: listed(Job) | None = Field(
        None, description="collective loops, training and LLM jobs run together on one "
                          "fabric")
    report: ReportSection = Field(default_factory=ReportSection)

    @property
    def workload(self) -> str:
        return next(k for k in WORKLOADS if getattr(self, k) is not None)

    @model_validator(mode="after")
    def _fits_workload(self):
        from .report.plots import WORKLOAD_PLOTS

        present = [k for k in WORKLOADS if self.given(k)]
        if len(present) != 1:
            raise Invalid(f"a scenario has exactly one workload: one of {', '.join(WORKLOADS)} "
                          f"(here: {', '.join(present) or 'none'})")
        if getattr(self, present[0]) is None:
            raise Invalid("expected the workload's settings, got nothing", present[0])
        workload = self.workload
        valid = tuple(WORKLOAD_PLOTS[workload])
        for i, plot in enumerate(self.report.plots):
            if plot not in valid:
                raise Invalid(f"expected one of {', '.join(valid)} (the {workload} plots), got "
                              f"{plot!r}", "report", "plots", i)
        if self.library is not None:
            if workload not in ("collective", "training"):
                raise Invalid(f"the library applies to collective sweeps and training; a "
                              f"{workload} workload runs on the ideal library", "library")
            if workload == "training" and self.library.given("protocol"):
                raise Invalid("training lets the library choose each bucket's protocol",
                              "library", "protocol")
        return self


#: ``clustersim schema NAME`` -> model.
SCHEMAS = {"scenario": Scenario, "topology": TopologyFile}   # the preset grammar: topology.presets


def keys(model: type[BaseModel]) -> tuple[str, ...]:
    """The keys a section accepts, in the model's order."""
    return tuple(model.model_fields)


# -- validation and its messages ------------------------------------------------------------------

def json_schema(name: str) -> str:
    """The JSON Schema of ``scenario`` or ``topology`` files, as text."""
    from .errors import unknown_name

    if name not in SCHEMAS:
        raise unknown_name("schema", name, SCHEMAS)
    schema = SCHEMAS[name].model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = f"clustersim {name} file"
    return json.dumps(schema, indent=2, sort_keys=False)
