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

from .config import Where, as_list, check_keys, read_yaml
from .errors import ClusterSimError, ConfigError
from .schedules import COLLECTIVES, get_algorithm
from .units import parse_size

TOP_KEYS = ("name", "description", "seed", "topology", "collective", "training", "report")
TOPOLOGY_KEYS = ("name", "params")
COLLECTIVE_KEYS = ("collective", "algorithms", "sizes", "gpus", "slices", "ps", "free_reduce")
PS_KEYS = ("servers", "placement", "shards", "overlap")
REPORT_KEYS = ("plots",)
TRAINING_KEYS = ("models", "batch_per_gpu", "gpus", "aggregations", "precision", "device",
                 "bucket", "overlap", "slices", "ps", "compute", "stragglers", "failure",
                 "compression")
COMPRESSION_KEYS = ("kind", "fraction", "error_feedback", "chunk_elements", "selection_passes")
STRAGGLER_KEYS = ("count", "factors")
FAILURE_KEYS = ("at", "horizon", "checkpoint_interval", "checkpoint_cost", "restart", "reform",
                "policies")
TRAINING_PS_KEYS = ("servers", "placement", "sharding", "consistency", "staleness", "iterations",
                    "local_aggregation")


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
    description: str = ""
    seed: int = 0
    plots: tuple[str, ...] = ()
    origin: str = ""
    resolved: dict = field(default_factory=dict, compare=False)


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
    if value not in choices:
        raise where.error(path, f"expected one of {', '.join(choices)}, got {value!r}")
    return value


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
    gpus = tuple(_int(v, where, path + ("gpus", i), 1)
                 for i, v in enumerate(as_list(data["gpus"]))) if "gpus" in data else (None,)
    return CollectiveSweep(
        collective=collective, algorithms=tuple(str(a) for a in algorithms), sizes_bytes=sizes,
        gpus=gpus, slices=_int(data.get("slices", 1), where, path + ("slices",), 1),
        ps=_ps(data.get("ps", {}), where),
        free_reduce=_bool(data.get("free_reduce", False), where, path + ("free_reduce",)))


def _training_ps(data, where: Where):
    from .workload.training import PsConfig

    path = ("training", "ps")
    check_keys(data, where, path, TRAINING_PS_KEYS)
    consistency = _choice(data.get("consistency", "bsp"), where, path + ("consistency",),
                          ("bsp", "ssp", "async"))
    staleness = 0
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
                                path + ("local_aggregation",)))


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
    gpus = tuple(_int(v, where, path + ("gpus", i), 1)
                 for i, v in enumerate(as_list(data["gpus"])))
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
        compression=_compression(data["compression"], where) if "compression" in data else None,
        **_straggler_fields(data, where), **_failure_fields(data, where))


def _compression(data, where: Where):
    """``compression: fp16`` (a registered format with its defaults) or a mapping
    ``{kind: topk, fraction: 0.01, error_feedback: true}``."""
    from .workload.compression import COMPRESSIONS, Compression, get_compression

    path = ("training", "compression")
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


def read_scenario(text: str, origin: str = "<string>", base_dir: Path | None = None) -> Scenario:
    """Parse and validate scenario YAML ``text`` (``origin`` names it in errors)."""
    from .report.plots import PLOTS, TRAINING_PLOTS

    data, where = read_yaml(text, origin)
    check_keys(data, where, (), TOP_KEYS, required=("topology",))
    if ("collective" in data) == ("training" in data):
        raise where.error((), "a scenario has exactly one workload: 'collective' or 'training'")
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
    plots = as_list(report.get("plots", []))
    valid_plots = tuple(PLOTS) if "collective" in data else tuple(TRAINING_PLOTS)
    for i, plot in enumerate(plots):
        _choice(plot, where, ("report", "plots", i), valid_plots)
    seed = _int(data.get("seed", 0), where, ("seed",), 0)
    name = data.get("name", Path(origin).stem)
    if not isinstance(name, str):
        raise where.error(("name",), f"expected a string, got {name!r}")
    return Scenario(name=name, description=str(data.get("description", "")),
                    topology=topo_name, topology_params=dict(params),
                    collective=_collective(data["collective"], where)
                    if "collective" in data else None,
                    training=_training(data["training"], where, base_dir, seed)
                    if "training" in data else None, seed=seed,
                    plots=tuple(plots), origin=origin, resolved=data)


def load_scenario(path: str) -> Scenario:
    """Read and validate the scenario file at ``path``."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"scenario file {path!r} not found")
    return read_scenario(file.read_text(encoding="utf-8"), str(file), file.parent)


def scenario_points(scenario: Scenario) -> list[tuple]:
    """The points of the scenario's cartesian product, in a fixed order.

    Collective sweeps: ``(gpus, size_bytes, algorithm)``; training: ``(model, aggregation,
    gpus)``. A point plus the scenario identifies one result row (sweeps resume by it).
    """
    if scenario.training is not None:
        from .workload.sweep import training_points

        return training_points(scenario.training)
    return list(scenario.collective.points())


def point_key(scenario: Scenario, row: dict) -> tuple:
    """The point a result row belongs to (inverse of :func:`scenario_points` on rows)."""
    if scenario.training is not None:
        return (row["model"], row["aggregation"], int(row["gpus"]),
                float(row["straggler_factor"]), row["failure_policy"])
    gpus = None if scenario.collective.gpus == (None,) else int(row["gpus"])
    return (gpus, int(row["size_bytes"]), row["algorithm"])


def result_columns(scenario: Scenario) -> list[str]:
    from .collective import RESULT_COLUMNS
    from .workload.sweep import EXTRA_COLUMNS
    from .workload.training import TRAINING_COLUMNS

    body = list(TRAINING_COLUMNS) + list(EXTRA_COLUMNS) if scenario.training is not None \
        else list(RESULT_COLUMNS)
    return ["scenario"] + body + ["seed", "clustersim_version"]


def simulate_point(scenario: Scenario, point: tuple, graph=None, record_rates: bool = False):
    """Simulate one point of ``scenario``; return ``(row, engine)``.

    The row carries the scenario name and seed; the engine holds the records (transfers,
    compute, and with ``record_rates`` the per-link rate timeline for traces and heatmaps).
    """
    from .collective import run_collective
    from .topology import load_topology

    graph = graph if graph is not None else load_topology(scenario.topology,
                                                           scenario.topology_params)
    if scenario.training is not None:
        from .workload.sweep import run_training_point

        result = run_training_point(graph, scenario.training, *point,
                                    record_rates=record_rates)
    else:
        sweep = scenario.collective
        gpus, size, algorithm = point
        opts = sweep.ps.as_options() if algorithm == "ps" else {}
        result = run_collective(graph, sweep.collective, algorithm, size, gpus=gpus,
                                slices=sweep.slices, reduce_compute=not sweep.free_reduce,
                                record_rates=record_rates, **opts)
    from . import __version__

    return ({"scenario": scenario.name, **result.row, "seed": scenario.seed,
             "clustersim_version": __version__}, result.engine)


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

    graph = load_topology(scenario.topology, scenario.topology_params)
    rows = []
    for point in scenario_points(scenario):
        rows.append(run_point(scenario, point, graph))
        if progress:
            progress(rows[-1])
    return pd.DataFrame(rows, columns=result_columns(scenario))
