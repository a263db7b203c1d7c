"""Calibrate the collective library, not the wires: fit NCCL's few constants to a machine.

The ``nccl`` library's constants come from NCCL's source (:mod:`simulator.library.nccl`). A
user's machine may differ from NVIDIA's reference machines in a few ways the library can
express with three numbers:

``scale.latency``
    multiplies every latency of NCCL's model (base and per-step): a slower or virtualised
    network stack, another CPU;
``scale.bandwidth``
    multiplies every link rate of the plan: a NIC or PCIe path that reaches a different share
    of its nominal rate;
``costs.kernel_launch_s``
    the host's launch time per GPU and call, which paces back-to-back calls of small messages.

:func:`calibrate_library` fits them on a share of a measured file (split stratified by size
band, :func:`simulator.comparison.calibrate.split_points`) by minimising the mean absolute log error
``mean |ln(simulated / measured)|`` with Nelder-Mead over their base-2 logarithms, and reports
the MAPE on the held-out points before and after. A parameter the fit points cannot see (its
doubling moves no fit point by 1 %) keeps its source value. The result is the topology preset
with a ``library:`` section, which ``compare``, ``collective`` and scenarios then use.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from .. import __version__
from .calibrate import _preset, nelder_mead, per_gpu_section, record_context, split_points
from .collective import SIZE_BANDS, compare, summarise
from ..errors import ConfigError
from ..library.launch import LAUNCH_COSTS
from ..measure.schema import COLLECTIVE_COLUMNS, check_frame

#: The fitted constants: (name, where in the settings, source value).
PARAMETERS = (("latency", "scale", 1.0), ("bandwidth", "scale", 1.0),
              ("kernel_launch_s", "costs", LAUNCH_COSTS["kernel_launch_s"]))


@dataclass
class LibraryCalibration:
    """What :func:`calibrate_library` fitted, how well, and the preset it makes."""

    topology: str
    settings: dict
    fitted: tuple
    unseen: tuple
    fit_points: pd.DataFrame
    before: dict
    after: dict
    evaluations: int
    preset: dict

    def mape_table(self) -> pd.DataFrame:
        """Held-out MAPE by size band and overall, before and after."""
        rows = []
        for label in [b for b, _, _ in SIZE_BANDS] + ["all"]:
            key = "group" if label == "all" else "size_band"
            table = "overall" if label == "all" else "size_band"
            b = self.before[table][self.before[table][key] == label]
            a = self.after[table][self.after[table][key] == label]
            if b.empty:
                continue
            rows.append({"size_band": label, "points": int(b["points"].iloc[0]),
                         "mape_before_pct": float(b["mape_pct"].iloc[0]),
                         "mape_after_pct": float(a["mape_pct"].iloc[0]),
                         "bias_before_pct": float(b["bias_pct"].iloc[0]),
                         "bias_after_pct": float(a["bias_pct"].iloc[0])})
        return pd.DataFrame(rows)

    def write(self, path) -> Path:
        """Write the calibrated preset YAML atomically."""
        from ..report.output import write_text

        return write_text(Path(path), yaml.safe_dump(self.preset, sort_keys=False, width=100,
                                                     allow_unicode=True))


def _settings(values) -> dict:
    scale, costs = {}, {}
    for (name, where, base), x in zip(PARAMETERS, values):
        (scale if where == "scale" else costs)[name] = float(base * 2.0 ** x)
    return {"scale": scale, "costs": costs}


def calibrate_library(measured: pd.DataFrame, topology: str, *, params: dict | None = None,
                      fit_fraction: float = 0.5, seed: int = 0, max_fit_points: int = 30,
                      max_evaluations: int = 150, launch=None, version=None,
                      progress=None) -> LibraryCalibration:
    """Fit the ``nccl`` library's latency and bandwidth scales and launch cost (see module)."""
    from ..topology import load_topology

    check_frame(measured, COLLECTIVE_COLUMNS)
    graph = load_topology(topology, dict(params or {}))
    if graph.graph.get("builder") != "gpu_cluster":
        raise ConfigError(f"calibrating the nccl library needs a GPU topology (gpu_cluster and "
                          f"its presets), not {topology!r}; use --library ideal to fit wires")
    measured = measured.reset_index(drop=True)
    fit_idx, held_idx = split_points(measured, fit_fraction, seed, max_fit_points)
    if not len(fit_idx):
        raise ConfigError("no points to fit")
    fit = measured.iloc[fit_idx].reset_index(drop=True)
    held = measured.iloc[held_idx if len(held_idx) else fit_idx].reset_index(drop=True)
    fit.attrs, held.attrs = dict(measured.attrs), dict(measured.attrs)
    measured_us = fit["time_us"].to_numpy(dtype=float)
    evaluations = [0]

    def simulate(points, values):
        return compare(points, graph, library="nccl", launch=launch, version=version,
                       library_settings=_settings(values))

    def objective(values) -> float:
        sim = simulate(fit, values)["simulated_time_us"].to_numpy(dtype=float)
        evaluations[0] += 1
        value = float(np.mean(np.abs(np.log(sim / measured_us))))
        value += 1e-4 * float(np.sum(np.square(values)))   # settles what the data cannot tell
        if progress is not None:
            progress(evaluations[0], value)
        return value

    zero = np.zeros(len(PARAMETERS))
    base_sim = simulate(fit, zero)["simulated_time_us"].to_numpy(dtype=float)
    visible, unseen = [], []
    for i, (name, _, _) in enumerate(PARAMETERS):
        moved = zero.copy()
        moved[i] = 1.0
        sim = simulate(fit, moved)["simulated_time_us"].to_numpy(dtype=float)
        if np.max(np.abs(np.log(sim / base_sim))) < 0.01:
            unseen.append(name)
        else:
            visible.append(i)

    def sub_objective(x):
        values = zero.copy()
        values[visible] = x
        return objective(values)

    x, _, used = nelder_mead(sub_objective, np.zeros(len(visible)), [0.5] * len(visible),
                             max_evaluations=max_evaluations)
    values = zero.copy()
    values[visible] = x
    settings = {"name": "nccl", **_settings(values)}
    if version:
        settings["version"] = str(version)
    before = summarise(simulate(held, zero))
    after = summarise(simulate(held, values))
    fitted = tuple(f"{PARAMETERS[i][0]} = {settings[PARAMETERS[i][1]][PARAMETERS[i][0]]:.4g}"
                   for i in visible)
    preset = _document(topology, settings, measured, fit_idx, held_idx, fit_fraction, seed,
                       fitted, unseen, before, after, params)
    return LibraryCalibration(topology=topology, settings=settings, fitted=fitted,
                              unseen=tuple(unseen), fit_points=fit, before=before, after=after,
                              evaluations=evaluations[0], preset=preset)


def _document(topology, settings, measured, fit_idx, held_idx, fit_fraction, seed, fitted,
              unseen, before, after, params) -> dict:
    raw, builder, description, sources, per_gpu = _preset(topology)
    from ..topology.presets import with_params

    raw = with_params(raw, params)
    name, origin, held_text = record_context(topology, measured, before, after)
    record = (f"clustersim {__version__} calibrate (library nccl): fitted on {len(fit_idx)} of "
              f"{len(measured)} points of {origin} (fit_fraction {fit_fraction:g}, seed {seed}, "
              f"split stratified by size band), minimising mean |ln(simulated/measured)|: "
              f"{'; '.join(fitted) or 'nothing'}"
              f"{'; not visible: ' + ', '.join(unseen) if unseen else ''}. Held-out MAPE by "
              f"size band, before -> after: {held_text}.")
    return {"name": f"{name}-calibrated",
            "description": f"{name} with its collective library calibrated by clustersim to "
                           f"{Path(str(origin)).name}. Base preset: {description or name}",
            "builder": builder, "params": dict(raw),
            **per_gpu_section(per_gpu, raw),
            "sources": list(sources) + [record], "library": settings}
