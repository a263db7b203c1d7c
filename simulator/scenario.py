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

Every key is checked by the typed grammar (:mod:`simulator.grammar`, the one validator):
unknown keys are rejected with the valid ones, values are parsed with their units, names are
checked against their registries, and errors name the file, the line and the key path. This
module assembles the run's objects from the validated sections: :func:`load_scenario` returns a
frozen :class:`Scenario`; :func:`run_scenario` runs it and returns the results table.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from . import grammar
from .config import read_text_file, read_yaml, validate
from .errors import ConfigError

#: The workload sections; a scenario has exactly one.
WORKLOADS = grammar.WORKLOADS


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
    lines: dict = field(default_factory=dict, compare=False)   # key path -> line in the file

    def graph(self):
        """The scenario's topology, built; a build error names the file, the line and the
        ``topology`` key it comes from."""
        from .errors import ClusterSimError
        from .topology import load_topology

        try:
            graph = load_topology(self.topology, self.topology_params)
        except ClusterSimError as exc:
            message = str(exc)
            named = [k for k in self.topology_params if k in message]
            path = ("topology", "params", named[0]) if named else ("topology",)
            line = self.lines.get(path) or self.lines.get(("topology",))
            where = f"{self.origin}:{line}" if line else self.origin
            raise type(exc)(f"{where}: {'.'.join(path)}: {message}") from None
        self.check_counts(graph)
        return graph

    def check_counts(self, graph) -> None:
        """The workload's GPU counts against the built topology, before any is run: one
        larger than the topology names the file, the line and how to get more GPUs."""
        from .errors import ConfigError
        from .guard import check_gpus

        spec = self.collective or self.training or self.study
        places = [((self.workload,), spec)]           # (key path, object with gpus)
        places += [((self.workload, "studies", j), study)
                   for j, study in enumerate(getattr(spec, "studies", None) or ())]
        for path, holder in places:
            counts = getattr(holder, "gpus", None)
            listed = isinstance(counts, (tuple, list))
            for i, count in enumerate(counts if listed else (counts,)):
                if count is None:
                    continue
                try:
                    check_gpus(graph, count, what=".".join(map(str, path + ("gpus",))),
                               scenario=True)
                except ConfigError as exc:
                    line = (self.lines.get(path + ("gpus", i)) if listed else None) \
                        or self.lines.get(path + ("gpus",)) or self.lines.get(path)
                    where = f"{self.origin}:{line}" if line else self.origin
                    raise ConfigError(f"{where}: {exc}") from None

    @property
    def workload(self) -> str:
        """The name of the scenario's workload section."""
        if self.resolved:
            return next(k for k in WORKLOADS if self.resolved.get(k) is not None)
        return "training" if self.training is not None else "collective"


def _collective(section: grammar.CollectiveSection) -> CollectiveSweep:
    ps = section.ps
    return CollectiveSweep(
        collective=section.collective, algorithms=tuple(section.algorithms),
        sizes_bytes=tuple(section.sizes),
        gpus=tuple(section.gpus) if section.gpus is not None else (None,),
        slices=section.slices,
        ps=PsOptions(servers=ps.servers, placement=ps.placement,
                     shards=tuple(ps.shards) if ps.shards is not None else None,
                     overlap=ps.overlap),
        free_reduce=section.free_reduce)


def _training(section: grammar.TrainingSection, seed: int):
    """The :class:`~simulator.workload.sweep.TrainingSpec` of a validated ``training:``
    section."""
    from .workload.frameworks import parse_framework
    from .workload.sweep import TrainingSpec

    extra = {}
    if section.compression is not None:
        formats = tuple(c.build() for c in section.formats())
        extra.update({"compressions": formats} if isinstance(section.compression, list)
                     else {"compression": formats[0]})
    if section.stragglers is not None:
        extra.update(stragglers=section.stragglers.count,
                     straggler_factors=tuple(section.stragglers.factors))
    if section.failure is not None:
        extra.update(failure=section.failure.build(),
                     failure_policies=("none",) + tuple(section.failure.policies))
    return TrainingSpec(
        models=tuple(section.models), batch_per_gpu=section.batch_per_gpu,
        accumulation=section.accumulation,
        gpus=tuple(section.gpus), aggregations=tuple(section.aggregations),
        precision=section.precision, device=section.device, bucket_bytes=section.bucket,
        overlap=section.overlap, slices=section.slices, ps=section.ps.build(),
        measured_csv=section.compute.measured if section.compute else None, seed=seed,
        framework=parse_framework(section.framework) if section.framework else None,
        single_gpu_throughput=section.single_gpu_throughput,
        gradient_dtype=section.gradient_dtype, **extra)


def _zero(section: grammar.ZeroSection):
    """The ``zero:`` section: a :class:`~simulator.workload.zero.ZeroStudy`."""
    from .workload.zero import DEFAULT_GROUP_BYTES, ZeroStudy

    return ZeroStudy(
        model=section.model, device=section.device, gpus=section.gpus,
        micro_batch=section.micro_batch, precision=section.precision,
        stages=tuple(section.stages), prefetch=tuple(section.prefetch),
        checkpointing=section.checkpointing,
        group_bytes=section.group if section.group is not None else DEFAULT_GROUP_BYTES,
        algorithm=section.algorithm)


def _pipeline(section: grammar.PipelineSection):
    """The ``pipeline:`` section: a :class:`~simulator.workload.pipeline.PipelineStudy`."""
    from .workload.pipeline import PIPELINE_SCHEDULES, PipelineStudy

    return PipelineStudy(
        model=section.model, device=section.device, stages=section.stages,
        replicas=section.replicas, micro_batch=section.micro_batch,
        micro_batches=tuple(section.micro_batches),
        schedules=tuple(section.schedules or PIPELINE_SCHEDULES),
        precision=section.precision, algorithm=section.algorithm,
        equal_stages=section.equal_stages,
        timeline_micro_batches=section.timeline_micro_batches)


def _hybrid(section: grammar.HybridSection):
    """The ``hybrid:`` section: a :class:`~simulator.workload.hybrid.HybridStudy` (defaults:
    MLPerf's DLRM, :class:`~simulator.workload.hybrid.HybridSpec`)."""
    from .workload.hybrid import HybridStudy

    return HybridStudy(spec=section.build(),
                       shardings=tuple(section.shardings), gpus=section.gpus)


def _time_to_train(section: grammar.TimeToTrainSection):
    """The ``time_to_train:`` section: a
    :class:`~simulator.workload.time_to_train.TimeToTrainSpec`."""
    from .workload.time_to_train import FORMS, TimeToTrainSpec, TimeToTrainStudy

    return TimeToTrainSpec(
        studies=tuple(TimeToTrainStudy(model=s.model, batch_per_gpu=s.batch_per_gpu,
                                       gpus=tuple(s.gpus), optimizers=tuple(s.optimizers))
                      for s in section.studies),
        forms=tuple(section.forms or FORMS), aggregation=section.aggregation,
        precision=section.precision, device=section.device, bucket_bytes=section.bucket)


def _llm(section: grammar.LlmSection):
    """The ``llm:`` section: a :class:`~simulator.workload.llm.study.LlmStudy`, or with
    ``search:`` an :class:`~simulator.workload.llm.study.LlmSearch`."""
    from .workload.llm.study import SWEPT, LlmSearch, LlmStudy

    if section.search is not None:
        from .workload.llm.search import SearchSpace

        search = section.search
        space = {key: tuple(getattr(search, key)) for key in
                 ("tp", "cp", "pp", "virtual_stages", "micro_batch", "optimizers", "recompute")
                 if getattr(search, key) is not None}
        return LlmSearch(model=section.model, global_batch=section.global_batch[0],
                         space=SearchSpace(**space, precision=section.precision[0],
                                           max_pp=search.max_pp),
                         cluster_gpus=tuple(search.gpus) if search.gpus else None,
                         top=search.top, prune=search.prune, time_limit_s=search.time_limit,
                         workers=search.workers)

    values = {key: tuple(getattr(section, "bucket" if key == "bucket_bytes" else key) or (None,))
              for key in SWEPT}
    fixed = {key: getattr(section, key) for key in ("distributed_optimizer", "fsdp",
                                                    "tp_overlap", "order")}
    if section.pp_layout is not None:
        fixed["pp_layout"] = section.pp_layout
    if section.recompute_modules:
        fixed["recompute_modules"] = tuple(section.recompute_modules)
    for key in ("expert_tp", "dispatcher", "ep_overlap", "fp8_recipe", "main_grads"):
        if section.given(key):
            fixed[key] = getattr(section, key)
    return LlmStudy(model=section.model, values=values, fixed=fixed, device=section.device,
                    steady_tolerance=section.steady_tolerance)


def _jobs(section: list):
    """The ``jobs:`` section: its validated jobs (ranks are checked against the topology when
    the scenario runs)."""
    return tuple(section)


#: Builders of the study sections (collective and training have their own fields).
STUDY_PARSERS = {"zero": _zero, "pipeline": _pipeline, "hybrid": _hybrid,
                 "time_to_train": _time_to_train, "llm": _llm, "jobs": _jobs}


def read_scenario(text: str, origin: str = "<string>", base_dir: Path | None = None) -> Scenario:
    """Parse and validate scenario YAML ``text`` (``origin`` names it in errors; relative
    paths in it are relative to ``base_dir``)."""
    data, where = read_yaml(text, origin)
    if data is None:
        raise where.error((), "the file is empty; a scenario names a topology and one workload "
                              "section (see scenarios/quickstart.yaml)")
    model = validate(grammar.Scenario, data, where, {"base_dir": base_dir})
    workload = model.workload
    topo_name = model.topology.name
    if base_dir is not None and topo_name.endswith((".yaml", ".yml")):
        candidate = base_dir / topo_name
        if candidate.exists():
            topo_name = str(candidate)
    section = getattr(model, workload)
    return Scenario(
        name=model.name if model.name is not None else Path(origin).stem,
        description=model.description or "", topology=topo_name,
        topology_params=dict(model.topology.params),
        collective=_collective(section) if workload == "collective" else None,
        training=_training(section, model.seed) if workload == "training" else None,
        study=STUDY_PARSERS[workload](section) if workload in STUDY_PARSERS else None,
        seed=model.seed, plots=tuple(model.report.plots), origin=origin, resolved=data,
        library=_library(model.library), lines=where.lines)


def _library(section: grammar.LibrarySection | None) -> dict | None:
    """The ``library:`` section as ``{name, protocol, launch, nccl_version, channels}`` (the
    keys the file wrote); ``None`` picks by topology."""
    if section is None:
        return None
    return {"name": section.name, **{key: getattr(section, key) for key in
                                     ("protocol", "launch", "nccl_version", "channels")
                                     if section.given(key)}}


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
        body = list(_study_columns(scenario.workload, scenario.study))
    elif scenario.training is not None:
        body = list(TRAINING_COLUMNS) + list(EXTRA_COLUMNS)
    else:
        body = list(RESULT_COLUMNS)
    return ["scenario"] + body + ["seed", "clustersim_version"]


def _study_columns(workload: str, study=None) -> tuple[str, ...]:
    from .workload.hybrid import HYBRID_STUDY_COLUMNS
    from .workload.pipeline import PIPELINE_COLUMNS
    from .workload.time_to_train import TIME_TO_TRAIN_COLUMNS
    from .workload.zero import ZERO_STUDY_COLUMNS

    if workload == "llm":
        from .workload.llm.study import LlmSearch

        if isinstance(study, LlmSearch):
            from .workload.llm.search import SEARCH_COLUMNS

            return tuple(SEARCH_COLUMNS)
        from .workload.llm.study import LLM_STUDY_COLUMNS

        return tuple(LLM_STUDY_COLUMNS)
    if workload == "jobs":
        from .workload.jobs import JOB_COLUMNS

        return JOB_COLUMNS
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


def _run_llm(scenario: Scenario, graph, progress) -> StudyResult:
    from .workload.llm.study import LlmSearch, run_llm_point

    study = scenario.study
    if isinstance(study, LlmSearch):
        result = study.run(scenario.topology, scenario.topology_params)
        if progress:
            for row in result.top.to_dict("records"):
                progress(row)
        return StudyResult(result.top, {"search": result})
    return StudyResult(pd.DataFrame(_each(study.points(), lambda p: run_llm_point(
        graph, study, p), progress)))


def _run_jobs(scenario: Scenario, graph, progress) -> StudyResult:
    from .errors import ClusterSimError
    from .topology import endpoints
    from .workload.jobs import parse_ranks, run_jobs

    total = len(endpoints(graph))
    jobs = []
    for i, job in enumerate(scenario.study):
        line = scenario.lines.get(("jobs", i, "ranks")) or scenario.lines.get(("jobs", i))
        where = f"{scenario.origin}:{line}" if line else scenario.origin
        try:
            ranks = parse_ranks(job.ranks, total, f"jobs.{i}.ranks")
        except ClusterSimError as exc:
            raise type(exc)(f"{where}: {exc}") from None
        line = scenario.lines.get(("jobs", i)) or line
        where = f"{scenario.origin}:{line}" if line else scenario.origin
        try:
            jobs.append(_job(job, ranks, graph))
        except ClusterSimError as exc:
            raise type(exc)(f"{where}: jobs.{i}: {exc}") from None
    try:
        result = run_jobs(graph, jobs)
    except ClusterSimError as exc:
        raise type(exc)(f"{scenario.origin}: {exc}") from None
    if progress:
        for row in result.jobs.to_dict("records"):
            progress(row)
    return StudyResult(result.jobs, {"shared_links": result.shared_links})


def _job(section, ranks: tuple, graph):
    """The :mod:`~simulator.workload.jobs` job of one validated ``jobs:`` item, checked against
    the topology (a training job's model on its GPU, an LLM job's layout on its ranks)."""
    from .workload.jobs import CollectiveJob, LlmJob, TrainingJob

    if section.kind == "collective":
        return CollectiveJob(section.name, section.collective, section.algorithm,
                             int(section.size), ranks, section.iterations)
    if section.kind == "training":
        from .workload.frameworks import parse_framework

        job = TrainingJob(section.name, section.model, ranks, aggregation=section.aggregation,
                          batch_per_gpu=section.batch_per_gpu, precision=section.precision,
                          gradient_dtype=section.gradient_dtype,
                          device=section.device, bucket_bytes=int(section.bucket),
                          overlap=section.overlap, slices=section.slices,
                          framework=parse_framework(section.framework)
                          if section.framework else None,
                          iterations=section.iterations)
        job.plan(graph)                # the model on the GPU and the buckets, before any run
        return job
    job = LlmJob(section.name, section.model, section.layout(len(ranks)), ranks,
                 device=section.device, iterations=section.iterations)
    job.prepare(graph)                 # the layout's rules and memory, before any run
    return job


def _each(points, simulate, progress) -> list[dict]:
    """``simulate(point)`` for every point, reporting each row to ``progress``."""
    rows = []
    for point in points:
        rows.append(simulate(point))
        if progress:
            progress(rows[-1])
    return rows


STUDY_RUNNERS = {"zero": _run_zero, "pipeline": _run_pipeline, "hybrid": _run_hybrid,
                 "time_to_train": _run_time_to_train, "llm": _run_llm, "jobs": _run_jobs}


def run_study(scenario: Scenario, progress=None) -> StudyResult:
    """Run a zero, pipeline, hybrid or time_to_train scenario: the table (with the scenario's
    name, seed and package version) and the plots' extras."""
    from . import __version__

    graph = scenario.graph()
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

    graph = graph if graph is not None else scenario.graph()
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
        "version": spec.get("nccl_version"), "launch": spec.get("launch"),
        "channels": spec.get("channels")}))
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

    if scenario.study is not None:
        return run_study(scenario, progress).frame
    graph = scenario.graph()
    rows = []
    for point in scenario_points(scenario):
        rows.append(run_point(scenario, point, graph))
        if progress:
            progress(rows[-1])
    return pd.DataFrame(rows, columns=result_columns(scenario))
