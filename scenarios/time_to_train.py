"""Time to train ResNet-50 and BERT-large as GPUs are added: where large batches stop paying.

Run ``python scenarios/time_to_train.py [--out DIR]``: simulates data-parallel training
(hierarchical all-reduce, mixed precision) on DGX A100-80GB nodes with eight 200 Gb/s NICs,
for ResNet-50 at 32 images per GPU (8 to 1,024 GPUs) and BERT-large at 64 sequences of 512
tokens per GPU (16 to 512 GPUs), then turns the iteration times into time to the published target
with the convergence models of :mod:`simulator.workload.time_to_train`: momentum SGD and LARS for
ResNet-50, LAMB for BERT-large, each in the piecewise and the McCandlish form. Prints the table
and the GPU count that minimises time to train, and writes ``time_to_train.png``/``.svg``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd

from simulator.report.plots import _save, plt
from simulator.topology import load_topology
from simulator.workload.sweep import TrainingSpec, run_training
from simulator.workload.time_to_train import (CONVERGENCE, FORMS, best_gpu_count,
                                              steps_to_target, time_to_train)

DEVICE = "a100-sxm4-80gb"
#: (model, batch per GPU, GPU counts, convergence models)
STUDIES = (("resnet50", 32, (8, 16, 32, 64, 128, 256, 512, 1024), ("sgd", "lars")),
           ("bert_large", 64, (16, 32, 64, 128, 256, 512), ("lamb",)))


def topology(gpus: int):
    """DGX A100-80GB nodes (8 GPUs, NVSwitch, 8 x 200 Gb/s HDR NICs) for ``gpus`` GPUs."""
    return load_topology("dgx-a100-2node", {"nodes": str(max(1, gpus // 8)), "gpu": DEVICE})


def run(studies=STUDIES, aggregation: str = "hierarchical") -> pd.DataFrame:
    """Simulated training rows with time to train, one per (study, GPUs, optimizer, form)."""
    frames = []
    for model, batch, gpus, optimizers in studies:
        graph = topology(max(gpus))
        spec = TrainingSpec(models=(model,), batch_per_gpu=batch, gpus=tuple(gpus),
                            aggregations=(aggregation,), precision="fp16")
        results = run_training(graph, spec)
        for optimizer in optimizers:
            for form in FORMS:
                frames.append(time_to_train(results, optimizer, form))
    return pd.concat(frames, ignore_index=True)


def plot(frame: pd.DataFrame, stem: Path) -> list[Path]:
    """Left: time to train against GPUs, one colour per optimizer, solid piecewise and dashed
    McCandlish, the minimum ringed. Right: the convergence models, steps against global batch."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    colours = {"sgd": "tab:blue", "lars": "tab:orange", "lamb": "tab:green"}
    styles = {"piecewise": "-", "mccandlish": "--"}
    for (conv, form), rows in frame.groupby(["convergence", "form"], sort=False):
        rows = rows.sort_values("gpus")
        model = rows["model"].iloc[0]
        left.plot(rows["gpus"], rows["time_to_train_s"] / 60, styles[form], marker="o",
                  markersize=3, color=colours[conv], label=f"{model}, {conv}, {form}")
        best = best_gpu_count(rows).iloc[0]
        left.plot(best["gpus"], best["time_to_train_s"] / 60, "o", markersize=11,
                  markerfacecolor="none", markeredgecolor=colours[conv])
    left.set_xscale("log", base=2)
    left.set_yscale("log")
    ticks = sorted(frame["gpus"].unique())
    left.set_xticks(ticks, [str(t) for t in ticks])
    left.minorticks_off()
    left.set_xlabel("GPUs (A100-80GB, fixed batch per GPU)")
    left.set_ylabel("time to train (minutes)")
    left.set_title("time to target accuracy (circles: the minimum)")
    left.grid(True, which="both", alpha=0.3)
    left.legend(fontsize=7)

    batches = np.logspace(np.log2(256), np.log2(262144), 60, base=2)
    for conv in dict.fromkeys(frame["convergence"]):
        model = CONVERGENCE[conv]
        for form in FORMS:
            steps = [steps_to_target(b, model, form) for b in batches]
            right.plot(batches, steps, styles[form], color=colours[conv],
                       label=f"{conv} ({model.model}, B_crit {model.critical_batch:,}), {form}")
        right.axvline(model.critical_batch, color=colours[conv], linewidth=0.8, alpha=0.6)
    right.set_xscale("log", base=2)
    right.set_yscale("log")
    right.set_xlabel("global batch (samples per step); vertical lines: critical batch")
    right.set_ylabel("optimizer steps to target")
    right.set_title("steps against batch: perfect scaling, then none")
    right.grid(True, which="both", alpha=0.3)
    right.legend(fontsize=7)
    fig.suptitle("Time to train = steps(global batch) x simulated iteration time "
                 "(Goyal et al. 2017; You et al. 2018, 2020; McCandlish et al. 2018)")
    fig.tight_layout()
    return _save(fig, stem)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="out/time_to_train", help="output folder")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    pd.set_option("display.width", 160)
    frame = run()
    view = frame.assign(time_to_train_min=frame["time_to_train_s"] / 60)
    print(view[["model", "convergence", "form", "gpus", "global_batch", "iteration_s",
                "efficiency", "steps", "epochs", "time_to_train_min"]]
          .round(4).to_string(index=False))
    best = best_gpu_count(view, by=["model", "convergence", "form"])
    print("\nGPU count with the shortest time to train (beyond it, more GPUs do not help):")
    print(best[["model", "convergence", "form", "gpus", "global_batch", "time_to_train_min"]]
          .round(2).to_string(index=False))
    paths = plot(frame, Path(args.out) / "time_to_train")
    print(f"\nwrote {', '.join(map(str, paths))} in {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
