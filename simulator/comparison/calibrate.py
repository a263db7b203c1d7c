"""Calibrate a topology preset to measured collective points.

A preset's numbers come from datasheets; a real machine reaches a fraction of its link rates
and adds software latency per step. :func:`calibrate` fits, per *link class*

=========  ====================  ===============================================================
class      edge kinds            builder parameters it adjusts
=========  ====================  ===============================================================
nvlink     nvlink, nvswitch      ``nvlink_bandwidth``, ``nvlink_latency``
pcie       pcie (+ host-bridge   ``pcie_bandwidth``, ``host_bridge_bandwidth``, ``pcie_latency``
           throughput cap)
network    ib, ethernet          ``nic_bandwidth``, ``uplink_bandwidth``, ``ps_bandwidth``,
                                 ``nic_latency``, ``uplink_latency`` (gpu_cluster);
                                 ``link_bandwidth``, ``link_latency`` (star); ``host_*`` and
                                 ``uplink_*`` (fat_tree)
reduce     (device)              ``reduce_bandwidth``
=========  ====================  ===============================================================

an *effective-bandwidth factor* (multiplies every bandwidth parameter of the class; parameters
left ``None`` because they derive from another one, such as a non-blocking fat tree's uplinks,
follow it), a *latency offset* (added to every latency parameter of the class: per link for PCIe
and network links, per GPU-to-GPU hop for NVLink, which the builder splits over the two
NVSwitch links), and a reduction-rate factor.

Only what the points can see is fitted. At the preset's values the simulator is run with each
candidate moved a step (bandwidth halved, latency +1 us, reduction rate halved). A candidate
whose effect on the fit points is negligible (mean change of ln time < 0.01) stays at the
preset's value; one whose effect is nearly collinear with a stronger candidate of the same kind
(the latencies of PCIe and network links along the same path; a PCIe and a network bandwidth
that bind the same points, where raising one only exposes the other) is tied to it: the two
share one value. The fitted values (log2 factors and offsets in us)
minimise the mean absolute log error ``mean |ln(simulated / measured)|`` (symmetric in over- and
under-prediction, robust to the odd noisy point) plus a small ridge term that settles directions
the data cannot tell apart, by Nelder-Mead (Lagarias et al. 1998 coefficients; a few dozen to a
few hundred simulations of <= 30 points).

The points are split into a fit set and a held-out set, deterministically from ``seed`` and
stratified by size band (:data:`~simulator.comparison.collective.SIZE_BANDS`), and the report gives the MAPE
on the held-out points before and after. The result is a preset YAML (same format as
``topologies/*.yaml``) with the adjusted parameters and the fit recorded in ``sources``.
``auto`` points are resolved once with the tuner on the preset and keep that algorithm while
fitting.
"""

from __future__ import annotations

import importlib.resources
import inspect
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from .. import __version__
from ..config import read_text_file
from .collective import SIZE_BANDS, compare, size_band, summarise
from ..errors import ConfigError, unknown_name
from ..measure.schema import COLLECTIVE_COLUMNS, check_frame

__all__ = ["Calibration", "FitParameter", "LINK_CLASSES", "calibrate", "calibrated_overrides",
           "nelder_mead", "split_points"]

#: Link class -> edge kinds of the topology graph.
LINK_CLASSES = {"nvlink": ("nvlink", "nvswitch"), "pcie": ("pcie", "smp"),
                "network": ("ib", "ethernet")}

#: builder -> class -> (bandwidth parameters, latency parameters); "reduce" -> rate parameters.
_BUILDER_PARAMS = {
    "gpu_cluster": {
        "nvlink": (("nvlink_bandwidth",), ("nvlink_latency",)),
        "pcie": (("pcie_bandwidth", "host_bridge_bandwidth", "socket_link_bandwidth"),
                 ("pcie_latency",)),
        "network": (("nic_bandwidth", "uplink_bandwidth", "ps_bandwidth"),
                    ("nic_latency", "uplink_latency")),
        "reduce": ("reduce_bandwidth",),
    },
    "star": {"network": (("link_bandwidth",), ("link_latency",)),
             "reduce": ("reduce_bandwidth",)},
    "fat_tree": {"network": (("host_bandwidth", "uplink_bandwidth"),
                             ("host_latency", "uplink_latency")),
                 "reduce": ("reduce_bandwidth",)},
}

_BW_STEP = -1.0        # screening step of a log2 factor (halve)
_LAT_STEP_US = 1.0     # screening step of a latency offset
_RIDGE = 1e-4          # weight of sum(x^2) in the objective
_COLLINEAR = 0.98      # |cosine| above which a candidate adds nothing new
_NEGLIGIBLE = 0.01     # mean |d ln t| (a step halving or doubling) below which: invisible


@dataclass(frozen=True)
class FitParameter:
    """One fitted quantity and the builder parameters it moves.

    ``kind`` is ``"bandwidth"`` or ``"reduce"`` (``value`` is a log2 factor) or ``"latency"``
    (``value`` is an offset in microseconds). ``link_classes`` has several classes when the
    points cannot tell them apart: they then share the one value.
    """

    link_classes: tuple[str, ...]
    kind: str
    builder_params: tuple[str, ...]
    value: float = 0.0

    @property
    def name(self) -> str:
        return "reduction rate" if self.kind == "reduce" else \
            f"{'+'.join(self.link_classes)} {self.kind}"

    def describe(self) -> str:
        params = ", ".join(self.builder_params)
        if self.kind == "latency":
            return f"{self.name} {self.value:+.3f} us per link ({params})"
        return f"{self.name} x{2.0 ** self.value:.4g} ({params})"

    def merged(self, other: "FitParameter") -> "FitParameter":
        """One parameter moving both (same kind)."""
        return FitParameter(self.link_classes + other.link_classes, self.kind,
                            self.builder_params + other.builder_params, self.value)


# --- the preset being calibrated ----------------------------------------------------------------

def _preset(topology: str) -> tuple[dict, str, str, tuple, dict]:
    """(raw params, builder, description, sources, per-GPU counts) of a preset name, builder
    name or file."""
    from ..topology.builders import BUILDERS
    from ..topology.presets import preset_names, read_preset

    if topology in BUILDERS:
        return {}, topology, f"the {topology} builder's defaults", (), {}
    if topology in preset_names():
        text = (importlib.resources.files("topologies") / f"{topology}.yaml").read_text(
            encoding="utf-8")
        origin = f"topologies/{topology}.yaml"
    elif Path(topology).is_file():
        text, origin = read_text_file(topology), topology
    else:
        from ..topology import list_topologies

        raise unknown_name("topology (or path to a YAML file)", topology, list_topologies())
    spec = read_preset(text, origin)
    return dict(spec.params), spec.builder, spec.description, spec.sources, dict(spec.per_gpu)


def per_gpu_section(per_gpu: dict, params: dict) -> dict:
    """A calibrated preset's ``per_gpu:`` section: the base preset's per-GPU counts that the
    written ``params`` do not set themselves (empty when none are left)."""
    left = {k: v for k, v in (per_gpu or {}).items() if k not in params}
    return {"per_gpu": left} if left else {}


def _raw_value(builder: str, raw_params: dict, name: str):
    from ..topology.builders import BUILDERS

    if name in raw_params:
        return raw_params[name]
    return inspect.signature(BUILDERS[builder]).parameters[name].default


def _candidates(graph, builder: str, raw_params: dict) -> list[FitParameter]:
    """Parameters that exist in this topology and can move (class links present, value set)."""
    table = _BUILDER_PARAMS.get(builder)
    if table is None:
        raise ConfigError(f"calibrate knows the builders {', '.join(_BUILDER_PARAMS)}, not "
                          f"{builder!r}")
    kinds = {kind for _, _, kind in graph.edges(data="kind")}
    capped = any(data.get("throughput_bytes_per_s") for _, data in graph.nodes(data=True))
    resolved = graph.graph["params"]
    out = []
    for link_class, edge_kinds in LINK_CLASSES.items():
        if link_class not in table:
            continue
        present = bool(kinds & set(edge_kinds)) or (link_class == "pcie" and capped)
        if not present:
            continue
        bandwidth, latency = table[link_class]
        bw = tuple(p for p in bandwidth if _raw_value(builder, raw_params, p) is not None
                   and resolved.get(p) is not None)
        if bw:
            out.append(FitParameter((link_class,), "bandwidth", bw))
        out.append(FitParameter((link_class,), "latency", latency))
    reduce = [p for p in table["reduce"] if math.isfinite(resolved.get(p) or math.inf)]
    if reduce:
        out.append(FitParameter(("reduce",), "reduce", tuple(reduce)))
    return out


def _overrides(parameters, values, resolved: dict) -> dict:
    """Builder parameter overrides (SI) for ``values`` of ``parameters``."""
    out = {}
    for param, x in zip(parameters, values):
        for name in param.builder_params:
            base = resolved[name]
            if param.kind == "latency":
                out[name] = max(0.0, base + x * 1e-6)
            else:
                out[name] = base * 2.0 ** x
    return out


def calibrated_overrides(topology: str, factors: dict, graph_loader=None) -> dict:
    """Apply fitted class factors to another preset (same classes, its own base values).

    Parameters
    ----------
    topology : str
        Preset name, builder name or YAML file.
    factors : dict
        As :attr:`Calibration.factors`: ``{class: {"bandwidth_factor": f, "latency_offset_us":
        d}, "reduce": {"factor": f}}``; classes the topology lacks are ignored.
    graph_loader : callable, optional
        ``(name_or_path, overrides) -> graph``; default :func:`simulator.topology.load_topology`.

    Returns
    -------
    dict
        Builder parameter overrides in SI units, for ``graph_loader(topology, overrides)``.
    """
    from ..topology import load_topology

    loader = graph_loader or load_topology
    raw, builder, _, _, _ = _preset(topology)
    graph = loader(topology, {})
    parameters, values = [], []
    for param in _candidates(graph, builder, raw):
        entry = factors.get(param.link_classes[0])
        if not entry:
            continue
        if param.kind == "latency" and "latency_offset_us" in entry:
            parameters.append(param)
            values.append(entry["latency_offset_us"])
        elif param.kind == "bandwidth" and "bandwidth_factor" in entry:
            parameters.append(param)
            values.append(math.log2(entry["bandwidth_factor"]))
        elif param.kind == "reduce" and "factor" in entry:
            parameters.append(param)
            values.append(math.log2(entry["factor"]))
    return _overrides(parameters, values, graph.graph["params"])


# --- splitting ----------------------------------------------------------------------------------

def split_points(measured: pd.DataFrame, fit_fraction: float = 0.5, seed: int = 0,
                 max_fit_points: int = 30) -> tuple[np.ndarray, np.ndarray]:
    """Row positions of the fit and held-out points, stratified by size band.

    In every band a ``fit_fraction`` of the points (rounded, at least one, and at least one
    left out when the band has two or more) goes to the fit set, chosen by a
    ``numpy.random.default_rng(seed)`` permutation; if that is more than ``max_fit_points``,
    each band's share is cut in proportion. Same inputs, same split.
    """
    if not 0 < fit_fraction <= 1:
        raise ConfigError(f"fit_fraction must be in (0, 1], got {fit_fraction}")
    if max_fit_points < 1:
        raise ConfigError(f"max_fit_points must be >= 1, got {max_fit_points}")
    rng = np.random.default_rng(seed)
    bands = np.array([size_band(int(s)) for s in measured["size_bytes"]])
    chosen = {}
    for label, _, _ in SIZE_BANDS:
        members = np.flatnonzero(bands == label)
        if not len(members):
            continue
        order = members[rng.permutation(len(members))]
        m = len(members)
        n = int(round(fit_fraction * m))
        if m == 1:
            n = 1 if fit_fraction >= 0.5 else 0
        elif fit_fraction < 1:
            n = min(max(n, 1), m - 1)
        chosen[label] = order[:n]
    total = sum(len(v) for v in chosen.values())
    if total > max_fit_points:
        scale = max_fit_points / total
        chosen = {k: v[:max(1, int(math.floor(len(v) * scale)))] for k, v in chosen.items()}
        while sum(len(v) for v in chosen.values()) > max_fit_points:
            biggest = max(chosen, key=lambda k: len(chosen[k]))
            chosen[biggest] = chosen[biggest][:-1]
    fit = np.sort(np.concatenate([v for v in chosen.values()] or [np.array([], int)]))
    held = np.setdiff1d(np.arange(len(measured)), fit)
    return fit.astype(int), held.astype(int)


# --- optimiser ----------------------------------------------------------------------------------

def nelder_mead(f, x0, steps, *, max_evaluations: int = 200, tolerance: float = 1e-4):
    """Minimise ``f`` from ``x0`` by the Nelder-Mead simplex method of
    :func:`scipy.optimize.minimize` (standard coefficients, Lagarias et al., SIAM J. Optim.
    9(1), 1998), from the simplex ``x0`` and ``x0 + steps[i] e_i``. Stops when the spread of the
    simplex values falls below ``tolerance`` or after ``max_evaluations`` calls of ``f``.
    Returns ``(x, f(x), evaluations)``. Deterministic (no randomness in the method)."""
    from scipy.optimize import minimize

    x0 = np.asarray(x0, dtype=float)
    n = len(x0)
    if n == 0:
        return x0, float(f(x0)), 1
    simplex = np.vstack([x0] + [x0 + np.eye(n)[i] * steps[i] for i in range(n)])
    result = minimize(lambda x: float(f(x)), x0, method="Nelder-Mead",
                      options={"initial_simplex": simplex, "maxfev": max_evaluations,
                               "fatol": tolerance, "xatol": np.inf})
    return np.asarray(result.x), float(result.fun), int(result.nfev)


# --- calibration --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Calibration:
    """What :func:`calibrate` fitted, how well, and the preset it makes."""

    topology: str
    builder: str
    parameters: tuple[FitParameter, ...]
    screened_out: tuple[str, ...]
    overrides: dict
    factors: dict
    preset: dict
    fit_points: pd.DataFrame
    held_out_before: pd.DataFrame
    held_out_after: pd.DataFrame
    before: dict
    after: dict
    objective_before: float
    objective_after: float
    evaluations: int
    seed: int
    fit_fraction: float
    sources: tuple = field(default=())

    def mape_table(self) -> pd.DataFrame:
        """Held-out MAPE by size band and overall, before and after, side by side."""
        rows = []
        for label in [b for b, _, _ in SIZE_BANDS] + ["all"]:
            table_b = self.before["overall"] if label == "all" else self.before["size_band"]
            table_a = self.after["overall"] if label == "all" else self.after["size_band"]
            key = "group" if label == "all" else "size_band"
            b = table_b[table_b[key] == label]
            a = table_a[table_a[key] == label]
            if b.empty:
                continue
            rows.append({"size_band": label, "points": int(b["points"].iloc[0]),
                         "mape_before_pct": float(b["mape_pct"].iloc[0]),
                         "mape_after_pct": float(a["mape_pct"].iloc[0])})
        return pd.DataFrame(rows, columns=["size_band", "points", "mape_before_pct",
                                           "mape_after_pct"])

    def preset_yaml(self) -> str:
        """The calibrated preset as YAML text (loadable by ``load_topology``)."""
        return yaml.safe_dump(self.preset, sort_keys=False, width=100, allow_unicode=True)

    def write(self, path) -> Path:
        """Write :meth:`preset_yaml` to ``path`` atomically."""
        from ..report.output import write_text

        return write_text(Path(path), self.preset_yaml())


def _bandwidth_text(value: float) -> str:
    return f"{value / 1e9:.6g} GB/s"


def _latency_text(value: float) -> str:
    return f"{value * 1e6:.6g} us"


def _resolve_auto(points: pd.DataFrame, graph) -> pd.DataFrame:
    from ..collective import run_collective
    from ..tuner import choose_algorithm

    points = points.copy()
    chosen = {}
    algorithms = []
    for row in points.itertuples(index=False):
        if row.algorithm != "auto":
            algorithms.append(row.algorithm)
            continue
        key = (row.collective, int(row.size_bytes), int(row.gpus))
        if key not in chosen:
            chosen[key] = choose_algorithm(graph, row.collective, key[1], gpus=key[2],
                                           simulate=run_collective)
        algorithms.append(chosen[key])
    points["algorithm"] = algorithms
    return points


def calibrate(measured: pd.DataFrame, graph_loader=None, topology_name: str = "",
              fit_fraction: float = 0.5, seed: int = 0, *, params: dict | None = None,
              max_fit_points: int = 30, max_evaluations: int = 150,
              slices: int = 1, progress=None) -> Calibration:
    """Fit per-link-class bandwidth factors and latency offsets to measured points.

    Parameters
    ----------
    measured : pandas.DataFrame
        Collective points (:data:`~simulator.measure.schema.COLLECTIVE_COLUMNS`).
    graph_loader : callable, optional
        ``(name_or_path, overrides) -> graph``; default :func:`simulator.topology.load_topology`.
    topology_name : str
        The preset (or builder, or YAML file) to calibrate.
    fit_fraction : float
        Share of the points (per size band) used for fitting; the rest are held out.
    seed : int
        Seed of the split.
    params : dict, optional
        Builder parameter overrides applied before calibrating (``--param``).
    max_fit_points : int
        Cap on fit points (each objective evaluation simulates all of them).
    max_evaluations : int
        Cap on objective evaluations of the optimiser.
    slices : int
        Pipelining slices of every simulation.
    progress : callable, optional
        Called with ``(evaluations, objective)`` after each evaluation.

    Returns
    -------
    Calibration
    """
    from ..topology import load_topology

    check_frame(measured, COLLECTIVE_COLUMNS)
    loader = graph_loader or load_topology
    if not topology_name:
        raise ConfigError("calibrate needs a topology (preset name, builder or YAML file)")
    raw, builder, description, sources, per_gpu = _preset(topology_name)
    base_params = dict(params or {})
    graph = loader(topology_name, base_params)
    resolved = graph.graph["params"]
    measured = measured.reset_index(drop=True)
    fit_idx, held_idx = split_points(measured, fit_fraction, seed, max_fit_points)
    if not len(fit_idx):
        raise ConfigError("no points to fit")
    fit = _resolve_auto(measured.iloc[fit_idx].reset_index(drop=True), graph)
    held = measured.iloc[held_idx].reset_index(drop=True) if len(held_idx) else \
        measured.iloc[fit_idx].reset_index(drop=True)
    measured_us = fit["time_us"].to_numpy(dtype=float)
    evaluations = [0]

    def predict(parameters, values) -> np.ndarray:
        overrides = {**base_params, **_overrides(parameters, values, resolved)}
        points = compare(fit, loader(topology_name, overrides), slices=slices)
        return points["simulated_time_us"].to_numpy(dtype=float)

    def objective(parameters, values) -> float:
        sim = predict(parameters, values)
        evaluations[0] += 1
        value = float(np.mean(np.abs(np.log(sim / measured_us)))
                      + _RIDGE * float(np.sum(np.square(values))))
        if progress:
            progress(evaluations[0], value)
        return value

    # Screening: which candidates move the fit points, and which move them the same way.
    candidates = _candidates(graph, builder, {**raw, **base_params})
    base_log = np.log(predict([], []))
    columns = []
    for param in candidates:
        step = _LAT_STEP_US if param.kind == "latency" else _BW_STEP
        columns.append(np.log(predict([param], [step])) - base_log)
    order = sorted(range(len(candidates)), key=lambda i: -np.mean(np.abs(columns[i])))
    groups, screened_out = [], []          # groups: [parameter, representative column]
    for i in order:
        col, param = columns[i], candidates[i]
        if np.mean(np.abs(col)) < _NEGLIGIBLE:
            screened_out.append(f"{param.name} (no effect on the fit points)")
            continue
        norm = np.linalg.norm(col)
        twin = next((g for g in groups if g[0].kind == param.kind
                     and abs(float(col @ g[1])) / (norm * np.linalg.norm(g[1])) > _COLLINEAR),
                    None)
        if twin is not None:
            twin[0] = twin[0].merged(param)   # the points cannot tell them apart: one value
        else:
            groups.append([param, col])
    parameters = [g[0] for g in groups]   # in order of effect: deterministic
    steps = [0.5 if p.kind != "latency" else 1.0 for p in parameters]
    before_value = objective(parameters, np.zeros(len(parameters)))
    x, after_value, _ = nelder_mead(lambda v: objective(parameters, v),
                                    np.zeros(len(parameters)), steps,
                                    max_evaluations=max_evaluations)
    # A restart from the best point escapes a collapsed simplex (cheap insurance).
    if len(parameters) and evaluations[0] < max_evaluations:
        x, after_value, _ = nelder_mead(lambda v: objective(parameters, v), x,
                                        [s / 2 for s in steps],
                                        max_evaluations=max_evaluations - evaluations[0])
    if after_value > before_value:
        x, after_value = np.zeros(len(parameters)), before_value
    for i, param in enumerate(parameters):
        if param.kind == "latency":
            floor = -min(resolved[n] for n in param.builder_params) * 1e6
            x[i] = max(x[i], floor)
    fitted = tuple(FitParameter(p.link_classes, p.kind, p.builder_params, float(v))
                   for p, v in zip(parameters, x))
    overrides = _overrides(fitted, [p.value for p in fitted], resolved)
    factors: dict = {}
    for p in fitted:
        for key in p.link_classes:
            entry = factors.setdefault(key, {})
            if p.kind == "latency":
                entry["latency_offset_us"] = p.value
            elif p.kind == "bandwidth":
                entry["bandwidth_factor"] = 2.0 ** p.value
            else:
                entry["factor"] = 2.0 ** p.value
    calibrated = loader(topology_name, {**base_params, **overrides})
    before_points = compare(held, graph, slices=slices)
    after_points = compare(held, calibrated, slices=slices)
    before, after = summarise(before_points), summarise(after_points)
    preset = _preset_document(topology_name, builder, raw, base_params, overrides, resolved,
                              description, sources, fitted, screened_out, measured, fit,
                              held_idx, fit_fraction, seed, before, after, per_gpu)
    return Calibration(
        topology=topology_name, builder=builder, parameters=fitted,
        screened_out=tuple(screened_out), overrides=overrides, factors=factors, preset=preset,
        fit_points=fit, held_out_before=before_points, held_out_after=after_points,
        before=before, after=after, objective_before=before_value,
        objective_after=after_value, evaluations=evaluations[0], seed=seed,
        fit_fraction=fit_fraction, sources=tuple(preset["sources"]))


def record_context(topology: str, measured, before: dict, after: dict) -> tuple[str, str, str]:
    """``(preset name, measured file, "band a% -> b%, ...")`` for a calibrated preset's record."""
    name = Path(topology).stem if topology.endswith((".yaml", ".yml")) else topology
    origin = measured.attrs.get("origin") or "measured points"
    bands_b = before["size_band"].set_index("size_band")["mape_pct"]
    bands_a = after["size_band"].set_index("size_band")["mape_pct"]
    held_text = ", ".join(f"{band} {bands_b[band]:.1f}% -> {bands_a[band]:.1f}%"
                          for band in bands_b.index)
    return name, origin, held_text


def _preset_document(topology, builder, raw, base_params, overrides, resolved, description,
                     sources, fitted, screened_out, measured, fit, held_idx, fit_fraction,
                     seed, before, after, per_gpu=None) -> dict:
    from ..topology.presets import with_params

    params = with_params(raw, base_params)
    for name, value in overrides.items():
        params[name] = _latency_text(value) if name.endswith("_latency") else \
            _bandwidth_text(value)
    name, origin, held_text = record_context(topology, measured, before, after)
    what = "held-out" if len(held_idx) else "fit (nothing held out)"
    fit_text = "; ".join(p.describe() for p in fitted) or "nothing (no visible parameter)"
    record = (f"clustersim {__version__} calibrate: fitted on {len(fit)} of {len(measured)} "
              f"points of {origin} (fit_fraction {fit_fraction:g}, seed {seed}, split "
              f"stratified by size band), minimising mean |ln(simulated/measured)|: "
              f"{fit_text}. {what.capitalize()} MAPE by size band, before -> after: "
              f"{held_text}.")
    if screened_out:
        record += f" Not fitted: {'; '.join(screened_out)}."
    return {
        "name": f"{name}-calibrated",
        "description": f"{name} calibrated by clustersim to {Path(str(origin)).name}. Base "
                       f"preset: {description or name}",
        "builder": builder,
        "params": params,
        **per_gpu_section(per_gpu, params),
        "sources": list(sources) + [record],
    }
