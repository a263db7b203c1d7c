"""Plots of measured against simulated points (matplotlib, Agg), each saved as PNG and SVG.

They read the tables of :mod:`simulator.comparison.collective` (``compare`` points) and, for training, two
tables in the training schema (:data:`~simulator.measure.schema.TRAINING_COLUMNS`). Measured
values are drawn as markers, simulated ones as lines of the same colour, so agreement reads as
markers sitting on their line. :data:`COMPARE_PLOTS` lists the plots of compared points by name.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .plots import _gpu_axis, _save, _size_axis  # sets the Agg backend first

import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)


def _groups(points: pd.DataFrame, keys):
    """Stable (label, group) pairs; keys that hold one value are left out of the label."""
    varying = [k for k in keys if points[k].nunique() > 1]
    if not varying:
        yield "", points
        return
    for values, group in points.groupby(varying, sort=True):
        values = values if isinstance(values, tuple) else (values,)
        yield ", ".join(str(v) for v in values), group


def _title_where(points: pd.DataFrame) -> str:
    topology = points["topology"].iloc[0] if "topology" in points else ""
    gpus = sorted(points["gpus"].unique())
    count = f"{gpus[0]} GPUs" if len(gpus) == 1 else f"{gpus[0]}-{gpus[-1]} GPUs"
    return f"{topology}, {count}" if topology else count


def busbw_measured_vs_simulated(points: pd.DataFrame, stem: Path, title: str = ""
                                ) -> list[Path]:
    """Bus bandwidth (GB/s, nccl-tests definition) against message size (log x): measured as
    markers, simulated as lines, one colour per collective / algorithm / GPU count / source."""
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for k, (label, group) in enumerate(_groups(points, ["source", "collective",
                                                        "simulated_algorithm", "gpus"])):
        group = group.sort_values("size_bytes")
        colour = f"C{k % 10}"
        sim = group.groupby("size_bytes", sort=True)["simulated_busbw_GBps"].first()
        ax.plot(sim.index, sim.to_numpy(), color=colour, linewidth=1.6,
                label=f"simulated {label}".strip())
        ax.plot(group["size_bytes"], group["measured_busbw_GBps"], linestyle="none",
                marker="o", markersize=4.5, color=colour, markerfacecolor="none",
                label=f"measured {label}".strip())
    _size_axis(ax, points["size_bytes"])
    ax.set_xlabel("message size")
    ax.set_ylabel("bus bandwidth (GB/s)")
    collectives = ", ".join(sorted(points["collective"].unique()))
    ax.set_title(title or f"{collectives}: measured vs simulated ({_title_where(points)})")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    return _save(fig, stem)


def error_vs_size(points: pd.DataFrame, stem: Path, title: str = "") -> list[Path]:
    """Signed error of the simulated time, (sim - meas) / meas in %, against message size."""
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    ax.axhline(0.0, color="0.5", linewidth=1)
    for k, (label, group) in enumerate(_groups(points, ["source", "collective",
                                                        "simulated_algorithm", "gpus"])):
        group = group.sort_values("size_bytes")
        ax.plot(group["size_bytes"], group["error_pct"], marker="o", markersize=3.5,
                color=f"C{k % 10}", label=label or "error")
    _size_axis(ax, points["size_bytes"])
    ax.set_xlabel("message size")
    ax.set_ylabel("simulated vs measured time (%)")
    ax.set_title(title or f"simulation error ({_title_where(points)}); > 0: simulator slower")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    return _save(fig, stem)


def speedup_measured_vs_simulated(measured: pd.DataFrame, simulated: pd.DataFrame, stem: Path,
                                  title: str = "") -> list[Path]:
    """Training speedup over one GPU against GPU count: measured markers, simulated lines.

    ``measured`` and ``simulated`` have ``model``, ``aggregation``, ``gpus`` and ``speedup``
    (the training schema; the simulator's training table has them too). Series are matched by
    position in sorted (model, aggregation) order, so each measured series takes the colour of
    the simulated one with the same rank.
    """
    fig, ax = plt.subplots(figsize=(7, 4.5))
    gpus = sorted(set(measured["gpus"]) | set(simulated["gpus"]))
    ax.plot(gpus, gpus, color="0.6", linestyle="--", label="ideal (linear)")
    for k, (label, group) in enumerate(_groups(simulated, ["model", "aggregation"])):
        group = group.sort_values("gpus")
        ax.plot(group["gpus"], group["speedup"], color=f"C{k % 10}",
                label=f"simulated {label}".strip())
    for k, (label, group) in enumerate(_groups(measured, ["source", "model", "aggregation"])):
        group = group.sort_values("gpus")
        ax.plot(group["gpus"], group["speedup"], linestyle="none", marker="o",
                markerfacecolor="none", color=f"C{k % 10}", label=f"measured {label}".strip())
    _gpu_axis(ax, gpus)
    ax.set_yscale("log", base=2)
    ax.set_yticks(gpus)
    ax.set_yticklabels([str(g) for g in gpus])
    ax.set_ylabel("speedup over 1 GPU (x)")
    ax.set_title(title or "data-parallel speedup: measured vs simulated")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    return _save(fig, stem)


COMPARE_PLOTS = {"busbw_measured_vs_simulated": busbw_measured_vs_simulated,
                 "error_vs_size": error_vs_size}
