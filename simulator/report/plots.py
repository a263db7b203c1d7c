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
    """One line per (model, aggregation), and per compression format when a sweep compares
    several, in a stable order."""
    keys = ["model", "aggregation"]
    if "compression" in frame and frame["compression"].nunique() > 1:
        keys.append("compression")
    for values, group in frame.groupby(keys, sort=True):
        parts = dict(zip(keys, values))
        label = ", ".join(str(parts[k]) for k in keys
                          if k != "model" or frame["model"].nunique() > 1)
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


# --- plots of the workloads beyond plain data parallelism ---------------------------------------
#
# Each takes the results table, the output stem and the run's ``extras`` (what the table cannot
# hold: op timelines, link timelines; see simulator.scenario.StudyResult).

def compression_bytes(frame: pd.DataFrame, stem: Path, title: str = "") -> list[Path]:
    """Per gradient format: bytes each iteration puts on the wire (log scale) and the bytes into
    and out of the parameter servers (the PS hotspot), one bar per aggregation; and the
    iteration time split into compute and exposed communication."""
    top = frame[frame["gpus"] == frame["gpus"].max()]
    formats = list(dict.fromkeys(top["compression"]))
    aggregations = list(dict.fromkeys(top["aggregation"]))
    fig, (wire_ax, time_ax) = plt.subplots(1, 2, figsize=(13, 4.8))
    width = 0.8 / len(aggregations)
    x = np.arange(len(formats))
    for k, aggregation in enumerate(aggregations):
        rows = top[top["aggregation"] == aggregation].set_index("compression").loc[formats]
        offset = x + (k - (len(aggregations) - 1) / 2) * width
        bars = wire_ax.bar(offset, rows["wire_bytes_per_iteration"] / 1e6, width,
                           label=f"{aggregation}: all bytes sent")
        if rows["ps_in_bytes_per_iteration"].gt(0).any():
            wire_ax.scatter(offset, rows["ps_in_bytes_per_iteration"] / 1e6, marker="v",
                            color="black", zorder=3, label=f"{aggregation}: into the servers")
            wire_ax.scatter(offset, rows["ps_out_bytes_per_iteration"] / 1e6, marker="^",
                            color="tab:red", zorder=3, label=f"{aggregation}: out of the servers")
        for bar, value in zip(bars, rows["wire_bytes_per_iteration"]):
            wire_ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height(),
                         f"{value / 1e6:,.0f}", ha="center", va="bottom", fontsize=7)
        time_ax.bar(offset, rows["compute_s"] * 1e3, width, color="0.6",
                    label="compute" if k == 0 else None)
        time_ax.bar(offset, rows["exposed_comm_s"] * 1e3, width, bottom=rows["compute_s"] * 1e3,
                    label=f"{aggregation}: exposed communication")
    for ax in (wire_ax, time_ax):
        ax.set_xticks(x, formats)
        ax.set_xlabel("gradient format on the wire")
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=7)
    wire_ax.set_yscale("log")
    wire_ax.set_ylabel("bytes per iteration (MB = 1e6 bytes)")
    wire_ax.set_title("bytes on the wire per iteration")
    time_ax.set_ylabel("iteration time (ms)")
    time_ax.set_title("iteration time")
    where = f"{top['model'].iloc[0]}, {int(top['gpus'].iloc[0])} GPUs, {top['topology'].iloc[0]}"
    fig.suptitle(title or f"gradient compression ({where})")
    fig.tight_layout()
    return _save(fig, stem)


TRAINING_PLOTS["compression_bytes"] = compression_bytes


def zero_memory_time(frame: pd.DataFrame, stem: Path, extras=None,
                     title: str = "") -> list[Path]:
    """Left: per-GPU memory of every ZeRO stage, stacked by term, against the GPU's memory
    (configurations over it are marked as refused). Right: the simulated step of each stage
    that fits, compute plus exposed communication, with the bytes each GPU sent."""
    memory = frame.drop_duplicates("stage").sort_values("stage")
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    stages = memory["stage"].to_numpy()
    bottom = np.zeros(len(memory))
    for column, label in (("param_bytes", "parameters"), ("gradient_bytes", "gradients"),
                          ("optimizer_bytes", "optimizer states"),
                          ("activation_bytes", "activations")):
        values = memory[column].to_numpy(dtype=float)
        left.bar(stages, values / 1e9, bottom=bottom / 1e9, label=label)
        bottom = bottom + values
    capacity = float(memory["device_memory_bytes"].iloc[0]) / 1e9
    left.axhline(capacity, color="black", linestyle="--", linewidth=1,
                 label=f"{memory['device'].iloc[0]}: {capacity:.1f} GB "
                       f"({capacity * 1e9 / 2**30:.0f} GiB)")
    for stage, total, fits in zip(stages, bottom, memory["fits"]):
        left.text(stage, total / 1e9 * 1.01, f"{total / 1e9:.1f} GB" +
                  ("" if fits else "\ndoes not fit"), ha="center", va="bottom", fontsize=8)
    left.set_xticks(stages, [f"stage {s}" for s in stages])
    left.set_ylabel("memory per GPU (GB = 1e9 bytes)")
    left.set_ylim(0, max(bottom.max() / 1e9, capacity) * 1.2)
    left.set_title(f"{memory['model'].iloc[0]} ({memory['params'].iloc[0] / 1e9:.2f}B "
                   f"parameters) on {int(memory['gpus'].iloc[0])} GPUs")
    left.legend(fontsize=8, loc="upper right")

    steps = frame[frame["fits"].astype(bool)]
    labels = [f"stage {s}\n" + ("prefetch" if p and s else "no prefetch" if s else "") +
              f"\n{b / 1e9:.1f} GB sent\nper GPU" for s, p, b in
              zip(steps["stage"], steps["prefetch"], steps["bytes_per_gpu_per_step"])]
    x = np.arange(len(steps))
    right.bar(x, steps["compute_s"], color="0.6", label="compute")
    right.bar(x, steps["exposed_comm_s"], bottom=steps["compute_s"], color="tab:red",
              label="exposed communication")
    right.set_xticks(x, labels, fontsize=8)
    right.set_ylabel("iteration time (s)")
    if len(steps):
        right.set_ylim(0, float(steps["iteration_s"].max()) * 1.3)
    refused = ", ".join(f"stage {s}" for s in memory.loc[~memory["fits"].astype(bool), "stage"])
    right.set_title(f"one simulated step, micro-batch {int(memory['micro_batch'].iloc[0])}"
                    + (f" ({refused}: not run)" if refused else ""))
    right.legend(fontsize=8, loc="upper left")
    right.grid(True, axis="y", alpha=0.3)
    fig.suptitle(title or f"ZeRO: memory per GPU and step time per stage "
                          f"({frame['topology'].iloc[0]})")
    fig.tight_layout()
    return _save(fig, stem)


def pipeline_bubble(frame: pd.DataFrame, stem: Path, extras=None, title: str = "") -> list[Path]:
    """Bubble fraction against micro-batches, simulated per schedule next to (p-1)/(m+p-1) and
    the unequal-stage estimate; peak activation memory per stage; the op timelines of every
    schedule at one micro-batch count (``extras["timelines"]``: schedule -> PipelineResult)."""
    from matplotlib.patches import Patch

    kept = (extras or {}).get("timelines", {})
    fig = plt.figure(figsize=(13, 4.5 + 1.9 * len(kept)))
    grid = fig.add_gridspec(2 + len(kept), 2, height_ratios=[2.2] + [1] * len(kept) + [0.15])
    bubble_ax, memory_ax = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1])
    p = int(frame["stages"].iloc[0])
    ms = sorted(int(m) for m in frame["micro_batches"].unique())
    dense = np.geomspace(ms[0], ms[-1], 200) if len(ms) > 1 else np.array(ms, dtype=float)
    bubble_ax.plot(dense, (p - 1) / (dense + p - 1), "k--", label="(p-1)/(m+p-1), equal stages")
    schedules = list(dict.fromkeys(frame["schedule"]))
    first = frame[frame["schedule"] == schedules[0]].sort_values("micro_batches")
    if (first["imbalance_bubble"] - first["theoretical_bubble"]).abs().max() > 1e-9:
        bubble_ax.plot(first["micro_batches"], first["imbalance_bubble"], "k:",
                       label="estimate for these unequal stages")
    for schedule, marker in zip(schedules, "osD^"):
        rows = frame[frame["schedule"] == schedule].sort_values("micro_batches")
        bubble_ax.plot(rows["micro_batches"], rows["bubble_fraction"], marker=marker,
                       linestyle="none", label=f"{schedule}, simulated")
    bubble_ax.set_xscale("log", base=2)
    bubble_ax.set_xticks(ms, [str(m) for m in ms])
    bubble_ax.minorticks_off()
    bubble_ax.set_ylim(0, 1)
    bubble_ax.set_xlabel("micro-batches per iteration, m")
    bubble_ax.set_ylabel("bubble (idle fraction of stage GPUs)")
    bubble_ax.set_title(f"{frame['model'].iloc[0]}, p = {p} stages x "
                        f"{int(frame['replicas'].iloc[0])} replicas")
    bubble_ax.grid(True, alpha=0.3)
    bubble_ax.legend(fontsize=8)

    width = 0.8 / max(1, len(kept))
    for k, (schedule, result) in enumerate(kept.items()):
        st = result.stages
        memory_ax.bar(st["stage"] + (k - (len(kept) - 1) / 2) * width,
                      st["peak_activation_bytes"] / 1e9, width,
                      label=f"{schedule} (m = {result.row['micro_batches']})")
    memory_ax.set_xlabel("pipeline stage")
    memory_ax.set_ylabel("peak activations held (GB = 1e9 bytes)")
    memory_ax.set_title("activations in flight: GPipe holds m, 1F1B at most p - s")
    memory_ax.set_xticks(range(p))
    memory_ax.legend(fontsize=8)

    colours = {"F": "tab:blue", "B": "tab:green"}
    end = max((r.ops["end_s"].max() for r in kept.values()), default=0.0)
    scale, unit = _time_unit(end)
    for k, (schedule, result) in enumerate(kept.items()):
        ax = fig.add_subplot(grid[1 + k, :])
        ops = result.ops[result.ops["replica"] == 0]
        for kind, group in ops.groupby("kind"):
            ax.barh(group["stage"], (group["end_s"] - group["start_s"]) * scale,
                    left=group["start_s"] * scale, color=colours[kind], edgecolor="white",
                    linewidth=0.5)
        for op in ops.itertuples(index=False):
            if op.end_s - op.start_s > end / 120:
                ax.text((op.start_s + op.end_s) / 2 * scale, op.stage, str(op.micro_batch),
                        ha="center", va="center", fontsize=6, color="white")
        ax.set_yticks(range(p), [f"stage {s}" for s in range(p)], fontsize=7)
        ax.invert_yaxis()
        ax.set_xlim(0, end * scale * 1.01)
        ax.set_title(f"{schedule}: m = {result.row['micro_batches']}, bubble "
                     f"{result.row['bubble_fraction']:.3f}, iteration "
                     f"{result.row['iteration_s'] * scale:.3g} {unit} (replica 0)", fontsize=9)
        ax.set_xlabel(f"time ({unit})" if k == len(kept) - 1 else "")
    legend_ax = fig.add_subplot(grid[-1, :])
    legend_ax.axis("off")
    legend_ax.legend([Patch(color=c) for c in colours.values()],
                     ["forward (micro-batch number)", "backward"], loc="center", ncol=2,
                     fontsize=8, frameon=False)
    fig.suptitle(title or f"pipeline parallelism: {' vs '.join(schedules)} "
                          f"({frame['topology'].iloc[0]})")
    fig.tight_layout()
    return _save(fig, stem)


def hybrid_link_heatmap(frame: pd.DataFrame, stem: Path, extras=None, title: str = "",
                        top: int = 24) -> list[Path]:
    """Link utilisation over time, one panel per sharding (``extras["timelines"]``: sharding ->
    link timeline): the links of the parameter servers (``extras["servers"]``, marked PS)
    carry the embedding pulls and pushes, the GPUs' links the dense all-reduce, at once."""
    timelines = (extras or {}).get("timelines", {})
    servers = set((extras or {}).get("servers", ()))
    panels = [(s, t) for s, t in timelines.items() if not t.empty]
    data = [(s, *link_heatmap_data(t, top)) for s, t in panels]
    heights = [max(2.0, 0.22 * len(d[1]) + 1.0) for d in data]
    fig, axes = plt.subplots(len(data), 1, figsize=(10, sum(heights) + 0.8),
                             height_ratios=heights, squeeze=False, layout="constrained")
    image = None
    for ax, (sharding, links, edges, util, mean) in zip(axes[:, 0], data):
        scale, unit = _time_unit(float(edges[-1]))
        image = ax.imshow(util, aspect="auto", interpolation="nearest", cmap="inferno", vmin=0,
                          vmax=100, extent=(0.0, edges[-1] * scale, len(links) - 0.5, -0.5))
        names = [(name, any(part in servers for part in name.split("->"))) for name in links]
        ax.set_yticks(range(len(links)))
        ax.set_yticklabels([f"{'PS' if ps else 'worker'}  {name}  ({m:.0f} %)"
                            for (name, ps), m in zip(names, mean)], fontsize=7)
        for label, (_, ps) in zip(ax.get_yticklabels(), names):
            label.set_color("tab:blue" if ps else "black")
        row = frame[frame["sharding"] == sharding].iloc[0]
        ax.set_title(f"{sharding} sharding: iteration {row['iteration_s'] * 1e3:.1f} ms, hottest "
                     f"server {row['hot_server_share']:.0%} of the embedding rows", fontsize=9)
        ax.set_xlabel(f"time ({unit})")
        ax.set_ylabel("link (mean utilisation)", fontsize=8)
    if image is not None:
        bar = fig.colorbar(image, ax=axes[:, 0].tolist(), pad=0.02)
        bar.set_label("utilisation (%)")
    first = frame.iloc[0]
    fig.suptitle(title or f"DLRM on {int(first['gpus'])} GPUs + {int(first['servers'])} PS "
                          f"({first['topology']}, Zipf {first['alpha']:g}): link utilisation\n"
                          f"PS links (blue labels): embedding pulls and pushes only; worker "
                          f"links: the dense all-reduce and the embedding rows", fontsize=10)
    return _save(fig, stem)


def time_to_train_vs_gpus(frame: pd.DataFrame, stem: Path, extras=None,
                          title: str = "") -> list[Path]:
    """Left: time to train against GPUs, a colour per optimizer (solid: piecewise, dashed:
    McCandlish form), the fastest GPU count ringed: beyond it adding GPUs no longer helps.
    Right: the convergence models, optimizer steps against global batch."""
    from ..workload.time_to_train import CONVERGENCE, steps_to_target

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    palette = plt.get_cmap("tab10")
    optimizers = list(dict.fromkeys(frame["convergence"]))
    colours = {name: palette(k % 10) for k, name in enumerate(optimizers)}
    styles = {"piecewise": "-", "mccandlish": "--"}
    for (model, conv, form), rows in frame.groupby(["model", "convergence", "form"], sort=False):
        rows = rows.sort_values("gpus")
        left.plot(rows["gpus"], rows["time_to_train_s"] / 60, styles[form], marker="o",
                  markersize=3, color=colours[conv], label=f"{model}, {conv}, {form}")
        best = rows[rows["fastest"].astype(bool)].iloc[0]
        left.plot(best["gpus"], best["time_to_train_s"] / 60, "o", markersize=11,
                  markerfacecolor="none", markeredgecolor=colours[conv])
        left.annotate(f"{int(best['gpus'])}", (best["gpus"], best["time_to_train_s"] / 60),
                      textcoords="offset points", xytext=(0, -16), ha="center", fontsize=7,
                      color=colours[conv])
    _gpu_axis(left, frame["gpus"])
    left.set_yscale("log")
    left.set_ylabel("time to train (minutes)")
    left.set_ylim(bottom=frame["time_to_train_s"].min() / 60 / 2)
    left.set_title("time to target (circled: fastest; beyond it more GPUs do not help)")
    left.grid(True, which="both", alpha=0.3)
    left.legend(fontsize=7)

    batches = np.geomspace(max(1.0, frame["global_batch"].min() / 2),
                           frame["global_batch"].max() * 2, 80)
    forms = list(dict.fromkeys(frame["form"]))
    for conv in optimizers:
        model = CONVERGENCE[conv]
        for form in forms:
            right.plot(batches, [steps_to_target(b, model, form) for b in batches], styles[form],
                       color=colours[conv], label=f"{conv} ({model.model}), {form}")
        right.axvline(model.critical_batch, color=colours[conv], linewidth=0.8, alpha=0.6)
    right.set_xscale("log", base=2)
    right.set_yscale("log")
    right.set_xlabel("global batch (samples per step); vertical lines: critical batch")
    right.set_ylabel("optimizer steps to target")
    right.set_title("steps against batch: perfect scaling, then none")
    right.grid(True, which="both", alpha=0.3)
    right.legend(fontsize=7)
    fig.suptitle(title or f"time to train = steps(global batch) x simulated iteration time "
                          f"({frame['aggregation'].iloc[0]} all-reduce, "
                          f"{frame['topology'].iloc[0]})")
    fig.tight_layout()
    return _save(fig, stem)


#: The parts of an LLM step, in the order they are stacked.
LLM_PARTS = ("compute_s", "exposed_tp_s", "exposed_cp_s", "exposed_ep_s", "exposed_pp_s",
             "exposed_dp_s", "bubble_s", "optimizer_s")


def llm_step_breakdown(frame: pd.DataFrame, stem: Path, extras=None,
                       title: str = "") -> list[Path]:
    """One stacked bar per simulated layout: where the step time goes (compute, exposed
    communication of each group, pipeline bubble, optimizer), with the TFLOP/s per GPU above
    each bar. Refused layouts are left out (their reason is in the table)."""
    rows = frame[frame["refused"].fillna("") == ""] if "refused" in frame else frame
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(rows) + 3), 5))
    labels = [f"tp{r.tp} cp{r.cp} ep{r.ep}\npp{r.pp} dp{r.dp} v{r.virtual_stages}\n"
              f"mb{r.micro_batch} {r.recompute}" for r in rows.itertuples()]
    bottom = np.zeros(len(rows))
    palette = plt.get_cmap("tab10")
    for k, part in enumerate(LLM_PARTS):
        values = rows[part].to_numpy(dtype=float)
        ax.bar(range(len(rows)), values, bottom=bottom, color=palette(k),
               label=part[:-2].replace("_", " "))
        bottom += values
    other = rows["step_time_s"].to_numpy(dtype=float) - bottom
    ax.bar(range(len(rows)), np.clip(other, 0, None), bottom=bottom, color="lightgrey",
           label="other")
    for i, r in enumerate(rows.itertuples()):
        ax.annotate(f"{r.hardware_tflops_per_gpu:.0f} TFLOP/s", (i, r.step_time_s),
                    textcoords="offset points", xytext=(0, 3), ha="center", fontsize=7)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels(labels, fontsize=7)
    if len(rows):
        ax.set_ylim(0, float(rows["step_time_s"].max()) * 1.12)
    ax.set_ylabel("step time (s), critical rank")
    ax.legend(fontsize=7, ncol=3)
    ax.grid(True, axis="y", alpha=0.3)
    model = rows["model"].iloc[0] if len(rows) else ""
    ax.set_title(title or f"{model}: one training step by layout "
                          f"({rows['topology'].iloc[0] if len(rows) else ''})")
    fig.tight_layout()
    return _save(fig, stem)


def jobs_slowdown(frame: pd.DataFrame, stem: Path, extras=None, title: str = "") -> list[Path]:
    """Per job, its time alone and together with the others (bars), the slowdown above; and
    the links they meet on, by bytes (from ``extras['shared_links']``)."""
    shared = (extras or {}).get("shared_links")
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    x = np.arange(len(frame))
    left.bar(x - 0.2, frame["alone_s"] * 1e3, 0.4, label="alone")
    left.bar(x + 0.2, frame["together_s"] * 1e3, 0.4, label="together")
    for i, r in enumerate(frame.itertuples()):
        left.annotate(f"x{r.slowdown:.2f}", (i + 0.2, r.together_s * 1e3),
                      textcoords="offset points", xytext=(0, 3), ha="center", fontsize=8)
    left.set_xticks(x)
    left.set_xticklabels(frame["job"])
    left.set_ylabel("time (ms)")
    left.set_title("each job alone and with the others")
    left.legend(fontsize=8)
    if shared is not None and len(shared):
        top = shared.head(12)
        right.barh(range(len(top)), top["bytes"] / 1e9)
        right.set_yticks(range(len(top)))
        right.set_yticklabels([f"{l}  ({j})" for l, j in zip(top["link"], top["jobs"])],
                              fontsize=7)
        right.invert_yaxis()
        right.set_xlabel("GB carried")
        right.set_title("links the jobs meet on")
    else:
        right.text(0.5, 0.5, "the jobs share no link", ha="center", va="center")
        right.set_axis_off()
    fig.suptitle(title or f"jobs on one fabric ({frame['topology'].iloc[0]})")
    fig.tight_layout()
    return _save(fig, stem)


#: Plots of the study workloads, called as ``plot(frame, stem, extras)``.
ZERO_PLOTS = {"zero_memory_time": zero_memory_time}
PIPELINE_PLOTS = {"pipeline_bubble": pipeline_bubble}
HYBRID_PLOTS = {"hybrid_link_heatmap": hybrid_link_heatmap}
TIME_TO_TRAIN_PLOTS = {"time_to_train_vs_gpus": time_to_train_vs_gpus}
LLM_PLOTS = {"llm_step_breakdown": llm_step_breakdown}
JOBS_PLOTS = {"jobs_slowdown": jobs_slowdown}

#: Every workload's plot registry (scenario ``report.plots`` names come from its workload's).
WORKLOAD_PLOTS = {"collective": PLOTS, "training": TRAINING_PLOTS, "zero": ZERO_PLOTS,
                  "pipeline": PIPELINE_PLOTS, "hybrid": HYBRID_PLOTS,
                  "time_to_train": TIME_TO_TRAIN_PLOTS, "llm": LLM_PLOTS, "jobs": JOBS_PLOTS}
