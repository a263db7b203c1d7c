"""Scenarios: what to simulate, as a thin YAML file validated strictly before anything runs.

A scenario names a topology (a preset, a builder or a file, with parameter overrides), a
workload, what to sweep, a seed, and what to report. Version 1 knows the collective sweep::

    name: quickstart
    description: ...
    seed: 0
    topology:
      name: dgx-a100          # preset, builder, or path (relative to the scenario file)
      params: {nodes: 2}      # builder parameter overrides
    collective:
      collective: allreduce
      algorithms: [ring, double_binary_tree, ps]
      sizes: [64KiB, 1MiB, 64MiB, 1GiB]
      gpus: [8, 16]           # default: every endpoint
      slices: 1
      ps: {servers: 1, placement: dedicated, shards: null, overlap: false}
    report:
      plots: [busbw_vs_size]  # see simulator.report.plots.PLOTS

Every key is checked: unknown keys are rejected with the valid ones, values are parsed with
their units, and errors name the file, the line and the key path. :func:`load_scenario` returns
a frozen :class:`Scenario`; :func:`run_scenario` runs it and returns the results table.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from . import grammar
from .config import Where, as_list, check_keys, read_text_file, read_yaml
from .errors import ClusterSimError, ConfigError
from .schedules import COLLECTIVES, get_algorithm
from .units import parse_size, parse_throughput

#: The workload sections; a scenario has exactly one.
WORKLOADS = ("collective", "training", "zero", "pipeline", "hybrid", "time_to_train")
#: The keys of every section, from the typed grammar (:mod:`simulator.grammar`).
TOP_KEYS = grammar.keys(grammar.Scenario)
LIBRARY_KEYS = grammar.keys(grammar.LibrarySection)
TOPOLOGY_KEYS = grammar.keys(grammar.TopologyRef)
COLLECTIVE_KEYS = grammar.keys(grammar.CollectiveSection)
PS_KEYS = grammar.keys(grammar.CollectivePs)
REPORT_KEYS = grammar.keys(grammar.ReportSection)
TRAINING_KEYS = grammar.keys(grammar.TrainingSection)
COMPRESSION_KEYS = grammar.keys(grammar.CompressionSection)
STRAGGLER_KEYS = grammar.keys(grammar.StragglerSection)
FAILURE_KEYS = grammar.keys(grammar.FailureSection)
TRAINING_PS_KEYS = grammar.keys(grammar.TrainingPs)
ZERO_KEYS = grammar.keys(grammar.ZeroSection)
PIPELINE_KEYS = grammar.keys(grammar.PipelineSection)
HYBRID_KEYS = grammar.keys(grammar.HybridSection)
TIME_TO_TRAIN_KEYS = grammar.keys(grammar.TimeToTrainSection)
TIME_TO_TRAIN_STUDY_KEYS = grammar.keys(grammar.TimeToTrainStudy)


@dataclass(frozen=True)
class PsOptions:
    servers: int = 1
    placement: str = "dedicated"
    shards: tuple | None = None
    overlap: bool = False

    def as_options(self) -> dict:
        opts = {"servers": self.servers, "placement": self.placement,
                "phased": not self.overlap}
        if self.shards is not None:
            opts["shards"] = list(self.shards)
        return opts


@dataclass(frozen=True)
class CollectiveSweep:
    collective: str
    algorithms: tuple[str, ...]
    sizes_bytes: tuple[int, ...]
    gpus: tuple[int | None, ...] = (None,)
    slices: int = 1
    ps: PsOptions = PsOptions()
    free_reduce: bool = False

    def points(self):
        """The cartesian product (gpus, size, algorithm), in a fixed order."""
        return itertools.product(self.gpus, self.sizes_bytes, self.algorithms)


@dataclass(frozen=True)
class Scenario:
    name: str
    topology: str
    topology_params: dict
    collective: CollectiveSweep | None = None
    training: object = None  # a workload.sweep.TrainingSpec (imported lazily)
    study: object = None     # the zero, pipeline, hybrid or time_to_train section's study
    description: str = ""
    seed: int = 0
    plots: tuple[str, ...] = ()
    origin: str = ""
    resolved: dict = field(default_factory=dict, compare=False)
    library: dict | None = None   # name, protocol, launch, nccl_version; None: by topology

    @property
    def workload(self) -> str:
        """The name of the scenario's workload section."""
        return next(k for k in WORKLOADS if k in self.resolved) if self.resolved else \
            ("training" if self.training is not None else "collective")


def _int(value, where: Where, path, minimum=None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise where.error(path, f"expected an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise where.error(path, f"must be >= {minimum}, got {value}")
    return value


def _bool(value, where: Where, path) -> bool:
    if not isinstance(value, bool):
        raise where.error(path, f"expected true or false, got {value!r}")
    return value


def _choice(value, where: Where, path, choices) -> str:
    if isinstance(value, (list, dict)) or value not in choices:
        raise where.error(path, f"expected one of {', '.join(map(str, choices))}, got {value!r}")
    return value


def _ints(value, where: Where, path, minimum=None) -> tuple[int, ...]:
    """A scalar or a list of integers (each >= ``minimum``), as a tuple."""
    return tuple(_int(v, where, path + (i,), minimum) for i, v in enumerate(as_list(value)))


def _choices(value, where: Where, path, choices) -> tuple:
    """A scalar or a list, each item one of ``choices``, as a tuple."""
    return tuple(_choice(v, where, path + (i,), choices) for i, v in enumerate(as_list(value)))


def _number(value, where: Where, path, minimum=None) -> float:
    """A finite number (>= ``minimum``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value \
            or value in (float("inf"), float("-inf")):
        raise where.error(path, f"expected a number, got {value!r}")
    if minimum is not None and value < minimum:
        raise where.error(path, f"must be >= {minimum}, got {value}")
    return float(value)


def _quantity(parse, value, where: Where, path):
    try:
        return parse(value)
    except ClusterSimError as exc:
        raise where.error(path, str(exc)) from None


def _ps(data, where: Where) -> PsOptions:
    path = ("collective", "ps")
    check_keys(data, where, path, PS_KEYS)
    shards = data.get("shards")
    if shards is not None:
        if not isinstance(shards, list) or not all(
                isinstance(x, (int, float)) and not isinstance(x, bool) for x in shards):
            raise where.error(path + ("shards",), f"expected a list of fractions, got {shards!r}")
        shards = tuple(float(x) for x in shards)
    return PsOptions(
        servers=_int(data.get("servers", 1), where, path + ("servers",), 1),
        placement=_choice(data.get("placement", "dedicated"), where, path + ("placement",),
                          ("dedicated", "colocated")),
        shards=shards, overlap=_bool(data.get("overlap", False), where, path + ("overlap",)))


def _collective(data, where: Where) -> CollectiveSweep:
    path = ("collective",)
    check_keys(data, where, path, COLLECTIVE_KEYS, required=("sizes",))
    collective = _choice(data.get("collective", "allreduce"), where, path + ("collective",),
                         COLLECTIVES)
    algorithms = as_list(data.get("algorithms", ["ring"]))
    for i, name in enumerate(algorithms):
        try:
            algo = get_algorithm(str(name))
        except ClusterSimError as exc:
            raise where.error(path + ("algorithms", i), str(exc)) from None
        if collective not in algo.collectives:
            raise where.error(path + ("algorithms", i),
                              f"{name} does not implement {collective}; it implements "
                              f"{', '.join(algo.collectives)}")
    sizes = tuple(_quantity(lambda v: parse_size(v, what="size"), v, where,
                            path + ("sizes", i)) for i, v in enumerate(as_list(data["sizes"])))
    gpus = _ints(data["gpus"], where, path + ("gpus",), 1) if "gpus" in data else (None,)
    return CollectiveSweep(
        collective=collective, algorithms=tuple(str(a) for a in algorithms), sizes_bytes=sizes,
        gpus=gpus, slices=_int(data.get("slices", 1), where, path + ("slices",), 1),
        ps=_ps(data.get("ps", {}), where),
        free_reduce=_bool(data.get("free_reduce", False), where, path + ("free_reduce",)))


def _training_ps(data, where: Where):
    from .workload.ps_impls import PS_IMPLS
    from .workload.training import PsConfig

    path = ("training", "ps")
    check_keys(data, where, path, TRAINING_PS_KEYS)
    consistency = _choice(data.get("consistency", "bsp"), where, path + ("consistency",),
                          ("bsp", "ssp", "async", "easgd"))
    staleness, tau = 0, None
    if consistency == "easgd":
        tau = _int(data.get("tau", 1), where, path + ("tau",), 1)
        staleness = None
    elif "tau" in data:
        raise where.error(path + ("tau",), f"only meaningful with consistency: easgd "
                                           f"(here {consistency})")
    if consistency == "ssp":
        staleness = _int(data.get("staleness", 1), where, path + ("staleness",), 1)
    elif "staleness" in data:
        raise where.error(path + ("staleness",), f"only meaningful with consistency: ssp "
                                                 f"(here {consistency})")
    if consistency == "async":
        staleness = None
    servers = data.get("servers", 1)
    if servers != "per_node":
        servers = _int(servers, where, path + ("servers",), 1)
    return PsConfig(
        servers=servers,
        placement=_choice(data.get("placement", "dedicated"), where, path + ("placement",),
                          ("dedicated", "colocated")),
        sharding=_choice(data.get("sharding", "round_robin"), where, path + ("sharding",),
                         ("round_robin", "greedy", "even")),
        staleness=staleness,
        iterations=_int(data.get("iterations", 4), where, path + ("iterations",), 2),
        local_aggregation=_bool(data.get("local_aggregation", False), where,
                                path + ("local_aggregation",)),
        impl=_choice(data.get("impl", "ideal"), where, path + ("impl",), tuple(PS_IMPLS)),
        easgd_tau=tau,
        hierarchy=_choice(data.get("hierarchy", "none"), where, path + ("hierarchy",),
                          ("none", "machine", "rack")))


def _stragglers(data, where: Where) -> tuple[int, tuple[float, ...]]:
    path = ("training", "stragglers")
    check_keys(data, where, path, STRAGGLER_KEYS, required=("factors",))
    factors = []
    for i, f in enumerate(as_list(data["factors"])):
        if isinstance(f, bool) or not isinstance(f, (int, float)) or f < 1:
            raise where.error(path + ("factors", i), f"expected a slowdown factor >= 1, got {f!r}")
        factors.append(float(f))
    return _int(data.get("count", 1), where, path + ("count",), 1), tuple(factors)


def _failure(data, where: Where):
    from .units import parse_duration
    from .workload.faults import POLICIES, FailurePlan

    path = ("training", "failure")
    check_keys(data, where, path, FAILURE_KEYS, required=("policies",))
    defaults = FailurePlan()
    fields = {"at": "at_s", "horizon": "horizon_s", "checkpoint_interval": "checkpoint_interval_s",
              "checkpoint_cost": "checkpoint_cost_s", "restart": "restart_s",
              "reform": "reform_s"}
    values = {attr: _quantity(lambda v, k=key: parse_duration(v, what=k), data[key], where,
                              path + (key,)) if key in data else getattr(defaults, attr)
              for key, attr in fields.items()}
    plan = FailurePlan(**values)
    if plan.at_s >= plan.horizon_s:
        raise where.error(path + ("at",), f"the failure must fall inside the horizon "
                                          f"({plan.horizon_s:g} s), got {plan.at_s:g} s")
    if plan.checkpoint_interval_s <= 0:
        raise where.error(path + ("checkpoint_interval",), "must be > 0")
    policies = tuple(_choice(p, where, path + ("policies", i), POLICIES[1:3])
                     for i, p in enumerate(as_list(data["policies"])))
    return plan, ("none",) + policies


def _training(data, where: Where, base_dir: Path | None, seed: int = 0):
    from .workload.frameworks import parse_framework
    from .workload.models import MODELS
    from .workload.sweep import PRECISIONS, TrainingSpec, is_aggregation

    path = ("training",)
    check_keys(data, where, path, TRAINING_KEYS, required=("models", "gpus", "aggregations"))
    models = tuple(str(m) for m in as_list(data["models"]))
    for i, m in enumerate(models):
        _choice(m, where, path + ("models", i), tuple(MODELS))
    aggregations = tuple(str(a) for a in as_list(data["aggregations"]))
    for i, name in enumerate(aggregations):
        if is_aggregation(name):
            continue
        try:
            algo = get_algorithm(name)
        except ClusterSimError as exc:
            raise where.error(path + ("aggregations", i),
                              f"{exc} (or ps, ps-bsp, ps-sspK, ps-async)") from None
        if "allreduce" not in algo.collectives:
            raise where.error(path + ("aggregations", i), f"{name} does not implement allreduce")
    gpus = _ints(data["gpus"], where, path + ("gpus",), 1)
    compute = data.get("compute") or {}
    check_keys(compute, where, path + ("compute",), ("measured",))
    measured = compute.get("measured")
    if measured is not None:
        file = Path(str(measured))
        if base_dir is not None and not file.is_absolute():
            file = base_dir / file
        if not file.is_file():
            raise where.error(path + ("compute", "measured"), f"file {str(file)!r} not found")
        measured = str(file)
    return TrainingSpec(
        models=models,
        batch_per_gpu=_int(data.get("batch_per_gpu", 32), where, path + ("batch_per_gpu",), 1),
        gpus=gpus, aggregations=aggregations,
        precision=_choice(data.get("precision", "fp32"), where, path + ("precision",), PRECISIONS),
        device=str(data["device"]) if "device" in data else None,
        bucket_bytes=_quantity(lambda v: parse_size(v, what="bucket"),
                               data.get("bucket", "25MiB"), where, path + ("bucket",)),
        overlap=_bool(data.get("overlap", True), where, path + ("overlap",)),
        slices=_int(data.get("slices", 1), where, path + ("slices",), 1),
        ps=_training_ps(data.get("ps", {}), where), measured_csv=measured, seed=seed,
        framework=_quantity(parse_framework, data.get("framework"), where,
                            path + ("framework",)) if "framework" in data else None,
        single_gpu_throughput=_quantity(parse_throughput, data["single_gpu_throughput"], where,
                                        path + ("single_gpu_throughput",))
        if "single_gpu_throughput" in data else None,
        **_compression_fields(data, where),
        **_straggler_fields(data, where), **_failure_fields(data, where))


def _compression_fields(data, where: Where) -> dict:
    """``compression:`` one format (the spec's ``compression``), or a list of formats compared
    side by side (``compressions``: one row per format and point)."""
    if "compression" not in data:
        return {}
    value, path = data["compression"], ("training", "compression")
    if not isinstance(value, list):
        return {"compression": _compression(value, where, path)}
    formats = tuple(_compression(v, where, path + (i,)) for i, v in enumerate(value))
    if not formats:
        raise where.error(path, "expected at least one format")
    labels = [f.label for f in formats]
    for i, label in enumerate(labels):
        if label in labels[:i]:
            raise where.error(path + (i,), f"format {label!r} is listed twice")
    return {"compressions": formats}


def _compression(data, where: Where, path=("training", "compression")):
    """``compression: fp16`` (a registered format with its defaults) or a mapping
    ``{kind: topk, fraction: 0.01, error_feedback: true}``."""
    from .workload.compression import COMPRESSIONS, Compression, get_compression

    if isinstance(data, str):
        _choice(data, where, path, tuple(COMPRESSIONS))
        return get_compression(data)
    check_keys(data, where, path, COMPRESSION_KEYS, required=("kind",))
    kind = _choice(data["kind"], where, path + ("kind",), tuple(COMPRESSIONS))
    fields = dict(vars(get_compression(kind)))
    if "error_feedback" in data:
        fields["error_feedback"] = _bool(data["error_feedback"], where,
                                         path + ("error_feedback",))
    if "chunk_elements" in data:
        fields["chunk_elements"] = _int(data["chunk_elements"], where,
                                        path + ("chunk_elements",), 0)
    for key in ("fraction", "selection_passes"):
        if key in data:
            value = data[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise where.error(path + (key,), f"expected a number, got {value!r}")
            fields[key] = float(value)
    try:
        return Compression(**fields)
    except ClusterSimError as exc:
        bad = next((k for k in COMPRESSION_KEYS[1:] if k in data and k in str(exc)), "kind")
        raise where.error(path + (bad,), str(exc)) from None


def _straggler_fields(data, where: Where) -> dict:
    if "stragglers" not in data:
        return {}
    count, factors = _stragglers(data["stragglers"], where)
    return {"stragglers": count, "straggler_factors": factors}


def _failure_fields(data, where: Where) -> dict:
    if "failure" not in data:
        return {}
    plan, policies = _failure(data["failure"], where)
    return {"failure": plan, "failure_policies": policies}


def _device(data, where: Where, path) -> str | None:
    """An optional GPU preset name (default: the topology's)."""
    from .topology.devices import DEVICES

    return _choice(data["device"], where, path + ("device",), tuple(DEVICES)) \
        if "device" in data else None


def _algorithm(name, where: Where, path, collectives=("allreduce",)) -> str:
    """A registered algorithm that implements every one of ``collectives``."""
    try:
        algo = get_algorithm(str(name))
    except ClusterSimError as exc:
        raise where.error(path, str(exc)) from None
    missing = [c for c in collectives if c not in algo.collectives]
    if missing:
        raise where.error(path, f"{name} does not implement {', '.join(missing)}")
    return str(name)


def _size(data, key: str, default, where: Where, path) -> int:
    """A size with its unit (``1GB``, ``25MiB``) under ``key``."""
    return _quantity(lambda v: parse_size(v, what=key), data.get(key, default), where,
                     path + (key,))


def _zero(data, where: Where):
    """The ``zero:`` section: a :class:`~simulator.workload.zero.ZeroStudy`."""
    from .workload.zero import (DEFAULT_GROUP_BYTES, STATE_BYTES_PER_PARAM, ZERO_STAGES,
                                ZeroStudy, zero_model_names)

    path = ("zero",)
    check_keys(data, where, path, ZERO_KEYS, required=("model",))
    stages = _ints(data.get("stages", list(ZERO_STAGES)), where, path + ("stages",), 0)
    for i, stage in enumerate(stages):
        if stage not in ZERO_STAGES:
            raise where.error(path + ("stages", i), f"ZeRO stages are 0, 1, 2 and 3, got {stage}")
    prefetch = tuple(_bool(v, where, path + ("prefetch", i))
                     for i, v in enumerate(as_list(data.get("prefetch", True))))
    group = _size(data, "group", DEFAULT_GROUP_BYTES, where, path)
    if group <= 0:
        raise where.error(path + ("group",), f"must be > 0 bytes, got {group}")
    return ZeroStudy(
        model=_choice(data["model"], where, path + ("model",), zero_model_names()),
        device=_device(data, where, path),
        gpus=_int(data["gpus"], where, path + ("gpus",), 1) if "gpus" in data else None,
        micro_batch=_int(data.get("micro_batch", 1), where, path + ("micro_batch",), 1),
        precision=_choice(data.get("precision", "fp16"), where, path + ("precision",),
                          tuple(STATE_BYTES_PER_PARAM)),
        stages=stages, prefetch=prefetch,
        checkpointing=_bool(data.get("checkpointing", False), where, path + ("checkpointing",)),
        group_bytes=group,
        algorithm=_algorithm(data.get("algorithm", "ring"), where, path + ("algorithm",),
                             ("allreduce", "reduce_scatter", "allgather")))


def _pipeline(data, where: Where):
    """The ``pipeline:`` section: a :class:`~simulator.workload.pipeline.PipelineStudy`."""
    from .workload.models import MODELS
    from .workload.pipeline import PIPELINE_SCHEDULES, PipelineStudy
    from .workload.zero import STATE_BYTES_PER_PARAM

    path = ("pipeline",)
    check_keys(data, where, path, PIPELINE_KEYS, required=("model", "stages"))
    micro_batches = _ints(data.get("micro_batches", [1, 2, 4, 8, 16, 32]), where,
                          path + ("micro_batches",), 1)
    timeline = None
    if "timeline_micro_batches" in data:
        timeline = _int(data["timeline_micro_batches"], where,
                        path + ("timeline_micro_batches",), 1)
        if timeline not in micro_batches:
            raise where.error(path + ("timeline_micro_batches",),
                              f"must be one of micro_batches ({', '.join(map(str, micro_batches))})"
                              f", got {timeline}")
    return PipelineStudy(
        model=_choice(data["model"], where, path + ("model",), tuple(MODELS)),
        device=_device(data, where, path),
        stages=_int(data["stages"], where, path + ("stages",), 1),
        replicas=_int(data.get("replicas", 1), where, path + ("replicas",), 1),
        micro_batch=_int(data.get("micro_batch", 1), where, path + ("micro_batch",), 1),
        micro_batches=micro_batches,
        schedules=_choices(data.get("schedules", list(PIPELINE_SCHEDULES)), where,
                           path + ("schedules",), tuple(PIPELINE_SCHEDULES)),
        precision=_choice(data.get("precision", "fp16"), where, path + ("precision",),
                          tuple(STATE_BYTES_PER_PARAM)),
        algorithm=_algorithm(data.get("algorithm", "ring"), where, path + ("algorithm",)),
        equal_stages=_bool(data.get("equal_stages", False), where, path + ("equal_stages",)),
        timeline_micro_batches=timeline)


def _hybrid(data, where: Where):
    """The ``hybrid:`` section: a :class:`~simulator.workload.hybrid.HybridStudy` (defaults:
    MLPerf's DLRM, :class:`~simulator.workload.hybrid.HybridSpec`)."""
    from .workload.hybrid import HybridSpec, HybridStudy
    from .workload.sweep import PRECISIONS

    path = ("hybrid",)
    check_keys(data, where, path, HYBRID_KEYS)
    base = HybridSpec()
    fields = {key: _int(data[key], where, path + (key,), 1)
              for key in ("servers", "batch_per_gpu", "tables", "dim", "bytes_per_element",
                          "lookups_per_sample", "iterations") if key in data}
    if "rows" in data:
        rows = _ints(data["rows"], where, path + ("rows",), 1)
        fields["rows"] = rows if isinstance(data["rows"], list) else rows[0]
    for key in ("bottom_mlp", "top_mlp"):
        if key in data:
            fields[key] = _ints(data[key], where, path + (key,), 1)
    if "alpha" in data:
        fields["alpha"] = _number(data["alpha"], where, path + ("alpha",), 0)
    if "precision" in data:
        fields["precision"] = _choice(data["precision"], where, path + ("precision",),
                                      PRECISIONS)
    fields["device"] = _device(data, where, path)
    fields["aggregation"] = _algorithm(data.get("aggregation", base.aggregation), where,
                                       path + ("aggregation",))
    fields["bucket_bytes"] = _size(data, "bucket", base.bucket_bytes, where, path)
    try:
        spec = HybridSpec(**fields)
    except ClusterSimError as exc:
        bad = next((k for k in HYBRID_KEYS if k in data and str(exc).startswith(k)), "")
        raise where.error(path + ((bad,) if bad else ()), str(exc)) from None
    shardings = _choices(data.get("shardings", ["hash", "range"]), where, path + ("shardings",),
                         ("hash", "range"))
    return HybridStudy(spec=spec, shardings=shardings,
                       gpus=_int(data["gpus"], where, path + ("gpus",), 1)
                       if "gpus" in data else None)


def _time_to_train(data, where: Where):
    """The ``time_to_train:`` section: a
    :class:`~simulator.workload.time_to_train.TimeToTrainSpec`."""
    from .workload.models import MODELS
    from .workload.sweep import PRECISIONS, is_aggregation
    from .workload.time_to_train import (CONVERGENCE, FORMS, TimeToTrainSpec,
                                         TimeToTrainStudy)

    path = ("time_to_train",)
    check_keys(data, where, path, TIME_TO_TRAIN_KEYS, required=("studies",))
    studies = []
    items = data["studies"]
    if not isinstance(items, list) or not items:
        raise where.error(path + ("studies",), "expected a list of studies (model, "
                                               "batch_per_gpu, gpus, optimizers)")
    for k, item in enumerate(items):
        at = path + ("studies", k)
        check_keys(item, where, at, TIME_TO_TRAIN_STUDY_KEYS,
                   required=("model", "gpus", "optimizers"))
        model = _choice(item["model"], where, at + ("model",), tuple(MODELS))
        optimizers = _choices(item["optimizers"], where, at + ("optimizers",),
                              tuple(CONVERGENCE))
        for i, name in enumerate(optimizers):
            if CONVERGENCE[name].model != model:
                raise where.error(at + ("optimizers", i),
                                  f"the {name} convergence model is measured on "
                                  f"{CONVERGENCE[name].model}, not {model}")
        studies.append(TimeToTrainStudy(
            model=model,
            batch_per_gpu=_int(item.get("batch_per_gpu", 32), where, at + ("batch_per_gpu",), 1),
            gpus=_ints(item["gpus"], where, at + ("gpus",), 1), optimizers=optimizers))
    aggregation = data.get("aggregation", "hierarchical")
    if not is_aggregation(str(aggregation)):
        aggregation = _algorithm(aggregation, where, path + ("aggregation",))
    return TimeToTrainSpec(
        studies=tuple(studies),
        forms=_choices(data.get("forms", list(FORMS)), where, path + ("forms",), FORMS),
        aggregation=str(aggregation),
        precision=_choice(data.get("precision", "fp16"), where, path + ("precision",),
                          PRECISIONS),
        device=_device(data, where, path),
        bucket_bytes=_size(data, "bucket", "25MiB", where, path))


#: Parsers of the study sections (collective and training have their own fields).
STUDY_PARSERS = {"zero": _zero, "pipeline": _pipeline, "hybrid": _hybrid,
                 "time_to_train": _time_to_train}


def read_scenario(text: str, origin: str = "<string>", base_dir: Path | None = None) -> Scenario:
    """Parse and validate scenario YAML ``text`` (``origin`` names it in errors)."""
    from .report.plots import WORKLOAD_PLOTS

    data, where = read_yaml(text, origin)
    check_keys(data, where, (), TOP_KEYS, required=("topology",))
    present = [k for k in WORKLOADS if k in data]
    if len(present) != 1:
        raise where.error((), f"a scenario has exactly one workload: one of "
                              f"{', '.join(WORKLOADS)} (here: {', '.join(present) or 'none'})")
    workload = present[0]
    topo = data["topology"]
    if isinstance(topo, str):
        topo = {"name": topo}
    check_keys(topo, where, ("topology",), TOPOLOGY_KEYS, required=("name",))
    params = topo.get("params") or {}
    if not isinstance(params, dict):
        raise where.error(("topology", "params"), "expected a mapping of builder parameters")
    topo_name = str(topo["name"])
    if base_dir is not None and topo_name.endswith((".yaml", ".yml")):
        candidate = base_dir / topo_name
        if candidate.exists():
            topo_name = str(candidate)
    report = data.get("report") or {}
    check_keys(report, where, ("report",), REPORT_KEYS)
    plots = _choices(report.get("plots", []), where, ("report", "plots"),
                     tuple(WORKLOAD_PLOTS[workload]))
    seed = _int(data.get("seed", 0), where, ("seed",), 0)
    library = _library(data.get("library"), where, workload)
    name = data.get("name", Path(origin).stem)
    if not isinstance(name, str):
        raise where.error(("name",), f"expected a string, got {name!r}")
    return Scenario(name=name, description=str(data.get("description", "")),
                    topology=topo_name, topology_params=dict(params),
                    collective=_collective(data["collective"], where)
                    if workload == "collective" else None,
                    training=_training(data["training"], where, base_dir, seed)
                    if workload == "training" else None,
                    study=STUDY_PARSERS[workload](data[workload], where)
                    if workload in STUDY_PARSERS else None, seed=seed,
                    plots=tuple(plots), origin=origin, resolved=data, library=library)


def _library(data, where: Where, workload: str) -> dict | None:
    """The ``library:`` section: a name (``nccl``, ``ideal``) or a mapping with ``name``,
    ``protocol``, ``launch`` and ``nccl_version``; ``None`` picks by topology."""
    from .library import LIBRARIES
    from .library.launch import parse_launch
    from .library.nccl import _protocol
    from .library.nccl_constants import get_version

    if data is None:
        return None
    if isinstance(data, str):
        data = {"name": data}
    if not isinstance(data, dict):
        raise where.error(("library",), f"expected a library name ({', '.join(LIBRARIES)}) or a "
                                        f"mapping with keys {', '.join(LIBRARY_KEYS)}, got "
                                        f"{data!r}")
    check_keys(data, where, ("library",), LIBRARY_KEYS, required=("name",))
    name = data["name"]
    if name not in LIBRARIES:
        raise where.error(("library", "name"), f"unknown library {name!r}; valid: "
                                               f"{', '.join(LIBRARIES)}")
    if workload not in ("collective", "training"):
        raise where.error(("library",), f"the library applies to collective sweeps and "
                                        f"training; a {workload} workload runs on the ideal "
                                        f"library")
    if workload == "training" and "protocol" in data:
        raise where.error(("library", "protocol"), "training lets the library choose each "
                                                   "bucket's protocol")
    out = {"name": name}
    for key in ("protocol", "launch", "nccl_version"):
        if key not in data:
            continue
        if name != "nccl":
            raise where.error(("library", key), f"{key} needs library name nccl")
        value = str(data[key])
        try:
            if key == "protocol":
                value = None if value == "auto" else _protocol(value)
            elif key == "launch":
                parse_launch(value)
            else:
                get_version(value)
        except ClusterSimError as exc:
            raise where.error(("library", key), str(exc)) from None
        out[key] = value
    return out


def load_scenario(path: str) -> Scenario:
    """Read and validate the scenario file at ``path``."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"scenario file {path!r} not found")
    return read_scenario(read_text_file(file), str(file), file.parent)


def scenario_points(scenario: Scenario) -> list[tuple]:
    """The points of the scenario's cartesian product, in a fixed order.

    Collective sweeps: ``(gpus, size_bytes, algorithm)``; training: ``(model, aggregation,
    gpus, straggler factor, failure policy, compression)``. A point plus the scenario
    identifies one result row (sweeps resume by it). Study workloads (zero, pipeline, hybrid,
    time_to_train) run whole with :func:`run_study`, not point by point.
    """
    if scenario.study is not None:
        raise ConfigError(f"{scenario.origin}: a {scenario.workload} scenario runs as a whole: "
                          f"use clustersim run (sweep and --trace take collective and training "
                          f"scenarios)")
    if scenario.training is not None:
        from .workload.sweep import training_points

        return training_points(scenario.training)
    return list(scenario.collective.points())


def point_key(scenario: Scenario, row: dict) -> tuple:
    """The point a result row belongs to (inverse of :func:`scenario_points` on rows)."""
    if scenario.training is not None:
        return (row["model"], row["aggregation"], int(row["gpus"]),
                float(row["straggler_factor"]), row["failure_policy"], row["compression"])
    gpus = None if scenario.collective.gpus == (None,) else int(row["gpus"])
    return (gpus, int(row["size_bytes"]), row["algorithm"])


def result_columns(scenario: Scenario) -> list[str]:
    """The results table's columns: the scenario's name, the workload's columns, the seed and
    the package version."""
    from .collective import RESULT_COLUMNS
    from .workload.sweep import EXTRA_COLUMNS
    from .workload.training import TRAINING_COLUMNS

    if scenario.study is not None:
        body = list(_study_columns(scenario.workload))
    elif scenario.training is not None:
        body = list(TRAINING_COLUMNS) + list(EXTRA_COLUMNS)
    else:
        body = list(RESULT_COLUMNS)
    return ["scenario"] + body + ["seed", "clustersim_version"]


def _study_columns(workload: str) -> tuple[str, ...]:
    from .workload.hybrid import HYBRID_STUDY_COLUMNS
    from .workload.pipeline import PIPELINE_COLUMNS
    from .workload.time_to_train import TIME_TO_TRAIN_COLUMNS
    from .workload.zero import ZERO_STUDY_COLUMNS

    return {"zero": ZERO_STUDY_COLUMNS, "pipeline": PIPELINE_COLUMNS + ("equal_stages",),
            "hybrid": HYBRID_STUDY_COLUMNS, "time_to_train": TIME_TO_TRAIN_COLUMNS}[workload]


@dataclass
class StudyResult:
    """What :func:`run_study` returns: the results table, and what the plots need beyond it
    (``extras``: op timelines of a pipeline, link timelines of a hybrid job)."""

    frame: pd.DataFrame
    extras: dict = field(default_factory=dict)


def _run_zero(scenario: Scenario, graph, progress) -> StudyResult:
    from .workload.zero import run_zero_point

    study = scenario.study
    return StudyResult(pd.DataFrame(_each(study.points(), lambda p: run_zero_point(
        graph, study, *p), progress)))


def _run_pipeline(scenario: Scenario, graph, progress) -> StudyResult:
    from .workload.pipeline import run_pipeline_point

    study, kept = scenario.study, {}

    def one(point):
        result = run_pipeline_point(graph, study, *point)
        if point[1] == study.timeline_m:
            kept[point[0]] = result
        return dict(result.row, equal_stages=study.equal_stages)

    rows = _each(study.points(), one, progress)
    return StudyResult(pd.DataFrame(rows), {"timelines": kept})


def _run_hybrid(scenario: Scenario, graph, progress) -> StudyResult:
    from .records import link_timeline
    from .workload.hybrid import run_hybrid_point

    study, extras = scenario.study, {"timelines": {}, "servers": []}

    def one(point):
        row, engine, servers = run_hybrid_point(graph, study, *point, record_rates=True)
        extras["timelines"][point[0]] = link_timeline(engine)
        extras["servers"] = servers
        return row

    rows = _each(study.points(), one, progress)
    return StudyResult(pd.DataFrame(rows), extras)


def _run_time_to_train(scenario: Scenario, graph, progress) -> StudyResult:
    from .workload.time_to_train import run_time_to_train

    return StudyResult(run_time_to_train(graph, scenario.study, progress))


def _each(points, simulate, progress) -> list[dict]:
    """``simulate(point)`` for every point, reporting each row to ``progress``."""
    rows = []
    for point in points:
        rows.append(simulate(point))
        if progress:
            progress(rows[-1])
    return rows


STUDY_RUNNERS = {"zero": _run_zero, "pipeline": _run_pipeline, "hybrid": _run_hybrid,
                 "time_to_train": _run_time_to_train}


def run_study(scenario: Scenario, progress=None) -> StudyResult:
    """Run a zero, pipeline, hybrid or time_to_train scenario: the table (with the scenario's
    name, seed and package version) and the plots' extras."""
    from . import __version__
    from .topology import load_topology

    graph = load_topology(scenario.topology, scenario.topology_params)
    result = STUDY_RUNNERS[scenario.workload](scenario, graph, progress)
    frame = result.frame.assign(scenario=scenario.name, seed=scenario.seed,
                                clustersim_version=__version__)
    result.frame = frame.reindex(columns=result_columns(scenario))
    return result


def simulate_point(scenario: Scenario, point: tuple, graph=None, record_rates: bool = False):
    """Simulate one point of ``scenario``; return ``(row, engine)``.

    The row carries the scenario name and seed; the engine holds the records (transfers,
    compute, and with ``record_rates`` the per-link rate timeline for traces and heatmaps).
    """
    from .collective import default_engine, run_collective
    from .topology import load_topology

    graph = graph if graph is not None else load_topology(scenario.topology,
                                                           scenario.topology_params)
    if scenario.training is not None:
        from .workload.sweep import run_training_point

        result = run_training_point(graph, scenario_training(scenario, graph), *point,
                                    record_rates=record_rates)
    else:
        sweep = scenario.collective
        gpus, size, algorithm = point
        opts = sweep.ps.as_options() if algorithm == "ps" else {}
        # the fast methods where they apply (exact; the event engine otherwise), the event
        # engine where its records are wanted (traces, heatmaps)
        result = run_collective(graph, sweep.collective, algorithm, size, gpus=gpus,
                                slices=sweep.slices, reduce_compute=not sweep.free_reduce,
                                record_rates=record_rates,
                                engine="event" if record_rates else default_engine(),
                                **scenario_library(scenario, graph), **opts)
    from . import __version__

    return ({"scenario": scenario.name, **result.row, "seed": scenario.seed,
             "clustersim_version": __version__}, result.engine)


def scenario_library(scenario: Scenario, graph) -> dict:
    """``run_collective``'s library arguments for a collective scenario: its ``library:``
    section, else the topology's default (``nccl`` on GPU clusters)."""
    from .library import default_library, get_library, graph_settings

    spec = scenario.library or {"name": default_library(graph)}
    if spec["name"] != "nccl":
        return {"library": spec["name"]}
    lib = get_library("nccl", **graph_settings(graph, "nccl", {
        "version": spec.get("nccl_version"), "launch": spec.get("launch")}))
    return {"library": lib, "protocol": spec.get("protocol")}


def scenario_training(scenario: Scenario, graph):
    """The scenario's training spec with its collective library: the ``library:`` section,
    else the topology's default (``nccl`` on GPU clusters; bare wires for compressed
    gradients)."""
    import dataclasses

    from .library import training_library

    spec = scenario.training
    if spec.library is not None:
        return spec
    named = scenario.library or {}
    compressed = any(not fmt.identity for fmt in spec.formats())
    library = training_library(graph, named.get("name"), launch=named.get("launch"),
                               version=named.get("nccl_version"), compressed=compressed)
    return dataclasses.replace(spec, library=library) if library is not None else spec


def run_point(scenario: Scenario, point: tuple, graph=None) -> dict:
    """Simulate one point of ``scenario``; return its result row (with scenario and seed)."""
    return simulate_point(scenario, point, graph)[0]


def trace_points(scenario: Scenario) -> list[tuple]:
    """The points ``clustersim run --trace`` records in detail: every algorithm (or aggregation)
    at one representative setting, so traces stay small enough to open.

    Collective sweeps: each algorithm at the median size and the largest GPU count; training:
    each (model, aggregation) at the largest GPU count.
    """
    points = scenario_points(scenario)
    if scenario.training is not None:
        top = max(p[2] for p in points)
        first = points[0]
        return [p for p in points if p[2] == top and p[3:] == first[3:]]
    sizes = sorted({p[1] for p in points})
    size = sizes[(len(sizes) - 1) // 2]
    gpus = [p[0] for p in points]
    top = None if None in gpus else max(gpus)
    return [p for p in points if p[1] == size and p[0] == top]


def run_scenario(scenario: Scenario, progress=None) -> pd.DataFrame:
    """Run every point of the scenario serially; return the results table."""
    from .topology import load_topology

    if scenario.study is not None:
        return run_study(scenario, progress).frame
    graph = load_topology(scenario.topology, scenario.topology_params)
    rows = []
    for point in scenario_points(scenario):
        rows.append(run_point(scenario, point, graph))
        if progress:
            progress(rows[-1])
    return pd.DataFrame(rows, columns=result_columns(scenario))
