"""Plots of result tables (matplotlib, Agg backend), each saved as PNG and SVG.

Every plot reads a DataFrame with the documented result columns, labels its axes with units,
and has a title and a legend. :data:`PLOTS` is the registry scenarios refer to by name.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from ..units import format_size  # noqa: E402


def _save(fig, stem: Path) -> list[Path]:
    """Save PNG and SVG, each to a temporary name renamed into place."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = []
    for ext in ("png", "svg"):
        path = stem.with_suffix(f".{ext}")
        tmp = path.with_name(f".{path.name}.tmp")
        fig.savefig(tmp, dpi=130, bbox_inches="tight", format=ext)
        tmp.replace(path)
        paths.append(path)
    plt.close(fig)
    return paths


def _size_axis(ax, sizes) -> None:
    ax.set_xscale("log", base=2)
    ticks = sorted(set(int(s) for s in sizes))
    if len(ticks) > 10:
        ticks = ticks[:: max(1, len(ticks) // 8)]
    ax.set_xticks(ticks)
    ax.set_xticklabels([format_size(t) for t in ticks], rotation=30, ha="right")
    ax.minorticks_off()


def _where(frame: pd.DataFrame) -> str:
    gpus = sorted(frame["gpus"].unique())
    count = f"{gpus[0]} GPUs" if len(gpus) == 1 else f"{gpus[0]}-{gpus[-1]} GPUs"
    return f"{frame['topology'].iloc[0]}, {count}"


def _series(frame: pd.DataFrame):
    """One line per (algorithm, gpus) in a stable order."""
    for (algorithm, gpus), group in frame.groupby(["algorithm", "gpus"], sort=True):
        label = algorithm if frame["gpus"].nunique() == 1 else f"{algorithm}, {gpus} GPUs"
        yield label, group.sort_values("size_bytes")


def busbw_vs_size(frame: pd.DataFrame, stem: Path, title: str = "") -> list[Path]:
    """Bus bandwidth (GB/s, nccl-tests definition) against message size, one line per algorithm."""
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for label, group in _series(frame):
        ax.plot(group["size_bytes"], group["busbw_GBps"], marker="o", label=label)
    _size_axis(ax, frame["size_bytes"])
    ax.set_xlabel("message size")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title(title or f"{frame['collective'].iloc[0]} bus bandwidth ({_where(frame)})")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, stem)


def time_vs_size(frame: pd.DataFrame, stem: Path, title: str = "") -> list[Path]:
    """Completion time (us) against message size, log-log, one line per algorithm."""
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for label, group in _series(frame):
        ax.plot(group["size_bytes"], group["time_us"], marker="o", label=label)
    _size_axis(ax, frame["size_bytes"])
    ax.set_yscale("log")
    ax.set_xlabel("message size")
    ax.set_ylabel("time (us)")
    ax.set_title(title or f"{frame['collective'].iloc[0]} time ({_where(frame)})")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, stem)


def _training_series(frame: pd.DataFrame):
    """One line per (model, aggregation) in a stable order."""
    for (model, aggregation), group in frame.groupby(["model", "aggregation"], sort=True):
        label = aggregation if frame["model"].nunique() == 1 else f"{model}, {aggregation}"
        yield label, group.sort_values("gpus")


def _gpu_axis(ax, gpus) -> None:
    ticks = sorted(set(int(g) for g in gpus))
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks)
    ax.set_xticklabels([str(t) for t in ticks])
    ax.minorticks_off()
    ax.set_xlabel("GPUs")


def speedup_vs_gpus(frame: pd.DataFrame, stem: Path, title: str = "") -> list[Path]:
    """Speedup over one GPU against GPU count, with the ideal (linear) line."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    gpus = sorted(frame["gpus"].unique())
    ax.plot(gpus, gpus, color="0.6", linestyle="--", label="ideal (linear)")
    for label, group in _training_series(frame):
        ax.plot(group["gpus"], group["speedup"], marker="o", label=label)
    _gpu_axis(ax, gpus)
    ax.set_yscale("log", base=2)
    ax.set_yticks(gpus)
    ax.set_yticklabels([str(g) for g in gpus])
    ax.set_ylabel("speedup over 1 GPU (x)")
    ax.set_title(title or f"data-parallel speedup on {frame['topology'].iloc[0]}")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, stem)


def throughput_per_gpu(frame: pd.DataFrame, stem: Path, title: str = "") -> list[Path]:
    """Samples per second per GPU against GPU count (flat = perfect scaling)."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, group in _training_series(frame):
        ax.plot(group["gpus"], group["per_gpu_samples_s"], marker="o", label=label)
    _gpu_axis(ax, frame["gpus"])
    ax.set_ylim(bottom=0)
    ax.set_ylabel("throughput per GPU (samples/s)")
    ax.set_title(title or f"per-GPU throughput on {frame['topology'].iloc[0]}")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, stem)


#: Plots of collective sweeps.
PLOTS = {"busbw_vs_size": busbw_vs_size, "time_vs_size": time_vs_size}
#: Plots of training sweeps.
TRAINING_PLOTS = {"speedup_vs_gpus": speedup_vs_gpus, "throughput_per_gpu": throughput_per_gpu}
