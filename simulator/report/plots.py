"""Plots of result tables (matplotlib, Agg backend), each saved as PNG and SVG.

Every plot reads a DataFrame with the documented result columns, labels its axes with units,
and has a title and a legend. :data:`PLOTS` is the registry scenarios refer to by name.
:data:`RUN_PLOTS` holds the plots of one run's records (:mod:`simulator.records`: the link
timeline, transfers and compute) and the collective time against GPU count.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402

from ..records import natural_key  # noqa: E402
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


# --- plots of one run's records ----------------------------------------------------------------

def _time_unit(span_s: float) -> tuple[float, str]:
    """Scale and name of the time unit that suits a span: s, ms or us."""
    if span_s >= 1.0:
        return 1.0, "s"
    if span_s >= 1e-3:
        return 1e3, "ms"
    return 1e6, "us"


def link_heatmap_data(timeline: pd.DataFrame, top: int = 40, bins: int = 400):
    """Binned utilisation of the most utilised links, the data :func:`link_heatmap` draws.

    Parameters
    ----------
    timeline : DataFrame
        A link timeline (:func:`simulator.records.link_timeline`).
    top : int
        Keep the ``top`` links with the highest mean utilisation over the run.
    bins : int
        Time bins between 0 and the end of the last interval.

    Returns
    -------
    links : list of str
        Link names, most utilised first (ties in natural name order).
    edges_s : ndarray, shape (bins + 1,)
        Bin edges in seconds.
    util_pct : ndarray, shape (len(links), bins)
        Mean utilisation of each link in each bin, in percent (exact: the piecewise-constant
        rate is integrated over the bin).
    mean_pct : ndarray, shape (len(links),)
        Mean utilisation of each link over the whole span, in percent.
    """
    if timeline.empty:
        return [], np.zeros(1), np.zeros((0, 0)), np.zeros(0)
    end = float(timeline["end_s"].max())
    edges = np.linspace(0.0, end, bins + 1)
    dur = (timeline["end_s"] - timeline["start_s"]).to_numpy()
    work = pd.DataFrame({"link": timeline["link"].to_numpy(),
                         "area": timeline["utilisation"].to_numpy() * dur})
    mean = work.groupby("link", sort=False)["area"].sum() / end
    ranked = sorted(mean.index, key=lambda name: (-mean[name], natural_key(name)))[:top]
    rows = []
    for name in ranked:
        part = timeline[timeline["link"] == name].sort_values("start_s")
        start = part["start_s"].to_numpy()
        stop = part["end_s"].to_numpy()
        area = part["utilisation"].to_numpy() * (stop - start)
        before = np.concatenate(([0.0], np.cumsum(area)[:-1]))
        xs = np.column_stack((start, stop)).ravel()
        ys = np.column_stack((before, before + area)).ravel()
        cumulative = np.interp(edges, xs, ys, left=0.0, right=float(area.sum()))
        rows.append(np.diff(cumulative) / np.diff(edges) * 100.0)
    util = np.vstack(rows) if rows else np.zeros((0, bins))
    return ranked, edges, util, np.array([mean[n] * 100.0 for n in ranked])


def link_heatmap(timeline: pd.DataFrame, stem: Path, top: int = 40, title: str = "",
                 bins: int = 400) -> list[Path]:
    """Utilisation of the ``top`` most utilised links over time, one row per link.

    A hotspot (a parameter server's link) is a bright row at the top; idle links are dark.
    """
    links, edges, util, mean = link_heatmap_data(timeline, top, bins)
    total = timeline["link"].nunique()
    scale, unit = _time_unit(float(edges[-1]))
    height = min(14.0, max(3.0, 0.24 * len(links) + 1.6))
    fig, ax = plt.subplots(figsize=(9, height))
    image = ax.imshow(util, aspect="auto", interpolation="nearest", cmap="inferno", vmin=0,
                      vmax=100, extent=(0.0, edges[-1] * scale, len(links) - 0.5, -0.5))
    ax.set_yticks(range(len(links)))
    ax.set_yticklabels([f"{name}  ({m:.0f} %)" for name, m in zip(links, mean)],
                       fontsize=8 if len(links) <= 40 else 6)
    ax.set_xlabel(f"time ({unit})")
    ax.set_ylabel("link (mean utilisation)")
    shown = f"top {len(links)} of {total} links" if total > len(links) else f"{total} links"
    ax.set_title(title or f"link utilisation over time ({shown}, most utilised first)")
    bar = fig.colorbar(image, ax=ax, pad=0.02)
    bar.set_label("utilisation (%)")
    return _save(fig, stem)


def gantt(transfers: pd.DataFrame, compute: pd.DataFrame, stem: Path, max_rows: int = 32,
          title: str = "") -> list[Path]:
    """Per-device timeline: sends (start to delivery, coloured by phase) and compute below them.

    With more than ``max_rows`` devices the busiest ones (most send plus compute time) are
    shown, in natural name order.
    """
    sends = transfers.dropna(subset=["start_s", "delivered_s"])
    busy: dict[str, float] = {}
    for device, span in zip(sends["src"], sends["delivered_s"] - sends["start_s"]):
        busy[device] = busy.get(device, 0.0) + float(span)
    for device in sends["dst"]:
        busy.setdefault(device, 0.0)
    for device, span in zip(compute["device"], compute["end_s"] - compute["start_s"]):
        busy[device] = busy.get(device, 0.0) + float(span)
    devices = sorted(busy, key=natural_key)
    if len(devices) > max_rows:
        keep = sorted(devices, key=lambda d: (-busy[d], natural_key(d)))[:max_rows]
        devices = sorted(keep, key=natural_key)
    row = {d: k for k, d in enumerate(devices)}
    end = max([float(sends["delivered_s"].max()) if len(sends) else 0.0,
               float(compute["end_s"].max()) if len(compute) else 0.0])
    scale, unit = _time_unit(end)
    phases = list(dict.fromkeys(sends["phase"].astype(str)))
    palette = plt.get_cmap("tab10")
    colour = {p: palette(k % 10) for k, p in enumerate(phases)}
    height = min(14.0, max(2.8, 0.3 * len(devices) + 1.6))
    fig, ax = plt.subplots(figsize=(10, height))
    # Each row: one lane per phase (phases may run at once, e.g. a pipelined tree reducing on
    # one tree while broadcasting on the other), then a thinner compute lane.
    lane = 0.56 / max(1, len(phases))
    shown = sends[sends["src"].isin(row)]
    for (device, phase), group in shown.groupby(["src", "phase"], sort=True):
        spans = list(zip(group["start_s"] * scale,
                         (group["delivered_s"] - group["start_s"]) * scale))
        top = row[device] - 0.42 + phases.index(str(phase)) * lane
        ax.broken_barh(spans, (top, lane * 0.9), facecolors=colour[str(phase)], alpha=0.75,
                       linewidth=0)
    work = compute[compute["device"].isin(row)]
    for device, group in work.groupby("device", sort=True):
        spans = list(zip(group["start_s"] * scale, (group["end_s"] - group["start_s"]) * scale))
        ax.broken_barh(spans, (row[device] + 0.18, 0.22), facecolors="0.25", linewidth=0)
    ax.set_yticks(range(len(devices)))
    ax.set_yticklabels(devices, fontsize=8 if len(devices) <= 32 else 6)
    ax.set_ylim(len(devices) - 0.5, -0.5)
    ax.set_xlim(0, end * scale * 1.01 if end > 0 else 1)
    ax.set_xlabel(f"time ({unit})")
    ax.set_ylabel("device")
    ax.grid(True, axis="x", alpha=0.3)
    handles = [Patch(color=colour[p], alpha=0.75, label=f"send: {p}") for p in phases]
    if len(work):
        handles.append(Patch(color="0.25", label="compute (" + ", ".join(
            sorted(work["label"].astype(str).unique())) + ")"))
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0),
              borderaxespad=0)
    algorithms = ", ".join(sorted(transfers["algorithm"].astype(str).unique()))
    rows_note = f"{len(devices)} of {len(busy)} devices" if len(busy) > len(devices) else \
        f"{len(devices)} devices"
    ax.set_title(title or f"sends and compute per device ({algorithms}; {rows_note})")
    return _save(fig, stem)


def time_vs_gpus(frame: pd.DataFrame, stem: Path, title: str = "") -> list[Path]:
    """Collective time (us) against GPU count, log-log, one line per algorithm (and size).

    At small messages the ring's 2(p-1) latency steps grow linearly with p while trees grow
    with lg p, which is the crossover this plot shows.
    """
    fig, ax = plt.subplots(figsize=(7, 4.5))
    sizes = sorted(frame["size_bytes"].unique())
    for (algorithm, size), group in frame.groupby(["algorithm", "size_bytes"], sort=True):
        label = algorithm if len(sizes) == 1 else f"{algorithm}, {format_size(int(size))}"
        group = group.sort_values("gpus")
        ax.plot(group["gpus"], group["time_us"], marker="o", label=label)
    _gpu_axis(ax, frame["gpus"])
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _pos: f"{value:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_ylabel("time (us)")
    size_text = format_size(int(sizes[0])) if len(sizes) == 1 else "several sizes"
    ax.set_title(title or f"{frame['collective'].iloc[0]} time against GPUs ({size_text}, "
                          f"{frame['topology'].iloc[0]})")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, stem)


#: Plots of one run's records (link timeline; transfers and compute) and of GPU-count sweeps.
RUN_PLOTS = {"link_heatmap": link_heatmap, "gantt": gantt, "time_vs_gpus": time_vs_gpus}
