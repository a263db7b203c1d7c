"""GPipe and 1F1B pipelines of GPT-2 XL on two DGX A100: the bubble, and the memory it costs.

Run ``python scenarios/pipeline_gpipe_1f1b.py [--out DIR]``: simulates GPT-2 XL (1.56B
parameters, 1,024 tokens) cut into 8 pipeline stages, two data-parallel replicas over two DGX
A100 nodes (16 GPUs), for 1 to 64 micro-batches of 2 sequences with both schedules; prints the
measured bubble next to ``(p-1)/(m+p-1)``, the peak in-flight micro-batches and activation bytes
per stage, and writes ``pipeline_gpipe_1f1b.png``/``.svg`` (bubble against micro-batches, peak
activation memory per stage, and the two timelines at m = 8).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd
from matplotlib.patches import Patch

from simulator.report.plots import _save, plt
from simulator.topology import load_topology
from simulator.workload.pipeline import simulate_pipeline, theoretical_bubble

MODEL = "gpt2_xl"
DEVICE = "a100-sxm4-80gb"
STAGES = 8
REPLICAS = 2
MICRO_BATCH = 2
MICRO_BATCHES = (1, 2, 4, 8, 16, 32, 64)
SCHEDULES = ("gpipe", "1f1b")


def topology():
    """Two DGX A100 (8 x 200 Gb/s HDR NICs each) with the 80 GB GPU."""
    return load_topology("dgx-a100-2node", {"gpu": DEVICE})


def run(graph=None, stages: int = STAGES, replicas: int = REPLICAS,
        micro_batches=MICRO_BATCHES, micro_batch: int = MICRO_BATCH, model: str = MODEL,
        timeline_m: int = 8):
    """(rows DataFrame, {schedule: PipelineResult at ``timeline_m`` micro-batches})."""
    graph = graph if graph is not None else topology()
    rows, kept = [], {}
    for schedule in SCHEDULES:
        for m in micro_batches:
            result = simulate_pipeline(graph, model, DEVICE, stages=stages, micro_batches=m,
                                       micro_batch=micro_batch, schedule=schedule,
                                       replicas=replicas)
            rows.append(result.row)
            if m == timeline_m:
                kept[schedule] = result
    return pd.DataFrame(rows), kept


def plot(frame: pd.DataFrame, kept: dict, stem: Path) -> list[Path]:
    """Bubble against micro-batches (measured and (p-1)/(m+p-1)); peak activation bytes per
    stage; the op timelines of both schedules."""
    fig = plt.figure(figsize=(13, 8.5))
    grid = fig.add_gridspec(2 + len(kept), 2, height_ratios=[2.2] + [1] * len(kept) + [0.15])
    bubble_ax, memory_ax = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1])
    p = int(frame["stages"].iloc[0])
    ms = sorted(frame["micro_batches"].unique())
    theory = [theoretical_bubble(p, int(m)) for m in ms]
    bubble_ax.plot(ms, theory, "k--", label="(p-1)/(m+p-1), equal stages")
    first = frame[frame["schedule"] == SCHEDULES[0]].sort_values("micro_batches")
    bubble_ax.plot(first["micro_batches"], first["imbalance_bubble"], "k:",
                   label="1 - m Σt / (p (Σt + (m-1) max t)), these stages")
    for schedule, marker in zip(SCHEDULES, "os"):
        rows = frame[frame["schedule"] == schedule].sort_values("micro_batches")
        bubble_ax.plot(rows["micro_batches"], rows["bubble_fraction"], marker=marker,
                       linestyle="none", label=f"{schedule}, simulated")
    bubble_ax.set_xscale("log", base=2)
    bubble_ax.set_xticks(ms, [str(m) for m in ms])
    bubble_ax.set_xlabel("micro-batches per iteration, m")
    bubble_ax.set_ylabel("bubble (idle fraction of stage GPUs)")
    bubble_ax.set_title(f"{frame['model'].iloc[0]}, p = {p} stages x "
                        f"{frame['replicas'].iloc[0]} replicas")
    bubble_ax.grid(True, alpha=0.3)
    bubble_ax.legend(fontsize=8)

    width = 0.4
    for k, (schedule, result) in enumerate(kept.items()):
        st = result.stages
        memory_ax.bar(st["stage"] + (k - 0.5) * width, st["peak_activation_bytes"] / 1e9, width,
                      label=f"{schedule} (m = {result.row['micro_batches']})")
    memory_ax.set_xlabel("pipeline stage")
    memory_ax.set_ylabel("peak activations held (GB = 1e9 bytes)")
    memory_ax.set_title("activations in flight: GPipe holds m, 1F1B at most p - s")
    memory_ax.set_xticks(range(p))
    memory_ax.legend(fontsize=8)

    colours = {"F": "tab:blue", "B": "tab:green"}
    end = max(r.ops["end_s"].max() for r in kept.values())
    for k, (schedule, result) in enumerate(kept.items()):
        ax = fig.add_subplot(grid[1 + k, :])
        ops = result.ops[result.ops["replica"] == 0]
        for op in ops.itertuples(index=False):
            ax.barh(op.stage, (op.end_s - op.start_s) * 1e3, left=op.start_s * 1e3,
                    color=colours[op.kind], edgecolor="white", linewidth=0.5)
            if op.end_s - op.start_s > end / 120:
                ax.text((op.start_s + op.end_s) / 2 * 1e3, op.stage, str(op.micro_batch),
                        ha="center", va="center", fontsize=6, color="white")
        ax.set_yticks(range(p), [f"stage {s}" for s in range(p)], fontsize=7)
        ax.invert_yaxis()
        ax.set_xlim(0, end * 1e3 * 1.01)
        ax.set_title(f"{schedule}: m = {result.row['micro_batches']}, bubble "
                     f"{result.row['bubble_fraction']:.3f}, iteration "
                     f"{result.row['iteration_s'] * 1e3:.0f} ms", fontsize=9)
        if k == len(kept) - 1:
            ax.set_xlabel("time (ms)")
    legend_ax = fig.add_subplot(grid[-1, :])
    legend_ax.axis("off")
    legend_ax.legend([Patch(color=c) for c in colours.values()],
                     ["forward (micro-batch number)", "backward"], loc="center", ncol=2,
                     fontsize=8, frameon=False)
    fig.suptitle("Pipeline parallelism: GPipe (Huang et al. 2019) and 1F1B (Narayanan et al. "
                 "2021)")
    fig.tight_layout()
    return _save(fig, stem)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="out/pipeline_gpipe_1f1b", help="output folder")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    pd.set_option("display.width", 160)
    frame, kept = run()
    print(frame[["schedule", "stages", "micro_batches", "replicas", "iteration_s",
                 "bubble_fraction", "theoretical_bubble", "imbalance_bubble", "peak_in_flight",
                 "peak_activation_bytes", "dp_allreduce_s", "throughput_samples_s"]]
          .round(4).to_string(index=False))
    for schedule, result in kept.items():
        print(f"\n{schedule}, m = {result.row['micro_batches']}: stages")
        print(result.stages.round(4).to_string(index=False))
    paths = plot(frame, kept, Path(args.out) / "pipeline_gpipe_1f1b")
    print(f"\nwrote {', '.join(map(str, paths))} in {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
