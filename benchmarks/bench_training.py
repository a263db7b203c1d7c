"""Simulator wall time of a ResNet-50 training sweep: 6 GPU counts up to 1,024, 4 aggregations.

Usage: python benchmarks/bench_training.py [--gpus 8 32 64 128 512 1024]
           [--aggregations ring double_binary_tree hierarchical ps] [--engines event auto]
           [--out DIR]

Topology ``gpu_cluster``: 128 machines of 8 A100s (NVSwitch inside, one 200 Gb/s NIC each, one
non-blocking switch) plus one dedicated parameter-server host; ResNet-50, batch 32 per GPU,
fp32 gradients in 25 MiB DDP buckets overlapping backward.

Engines:

* ``event``: :func:`simulator.workload.sweep.run_training` as ``clustersim train`` runs it
  (every bucket's collective on the event engine); per-point times from its progress callback.
* ``auto``: the same points through :func:`simulator.workload.training.simulate_training` with
  ``collective_engine="auto"``: each bucket's collective is timed by the exact fast path where
  it applies (``simulator.engine.dispatch``), else by the event engine. PS aggregation is always
  evented.

The iteration times of the two must agree (checked, 1e-9 relative). Writes ``training.csv`` and
prints a markdown table with the wall time of every point and the totals.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import time
from pathlib import Path

import pandas as pd
from bench_scale import machine_reference_s

from simulator.topology import load_topology
from simulator.workload.models import get_model
from simulator.workload.sweep import (
    GRADIENT_BYTES,
    TrainingSpec,
    _profile,
    resolve_aggregation,
    run_training,
    topology_device,
)
from simulator.workload.training import simulate_training

GPUS = [8, 32, 64, 128, 512, 1024]
AGGREGATIONS = ["ring", "double_binary_tree", "hierarchical", "ps"]


def cluster():
    return load_topology("gpu_cluster", {"nodes": "128", "gpus_per_node": "8",
                                         "ps_hosts": "1"})


def event_sweep(graph, spec) -> list[dict]:
    """The official sweep; wall time per point from the progress callback."""
    rows, last = [], [time.perf_counter()]

    def progress(row):
        now = time.perf_counter()
        rows.append({"aggregation": row["aggregation"], "gpus": row["gpus"],
                     "iteration_s": row["iteration_s"], "wall_s": now - last[0]})
        last[0] = now
        print(f"  event {row['aggregation']:>18} {row['gpus']:>5} GPUs: "
              f"{rows[-1]['wall_s']:7.2f} s", flush=True)

    run_training(graph, spec, progress=progress)
    return rows


def auto_sweep(graph, spec) -> list[dict]:
    """The same points with ``collective_engine="auto"`` (inputs as run_training_point's)."""
    rows = []
    model_name = spec.models[0]
    device = spec.device or topology_device(graph)
    profile = _profile(model_name, device, spec.batch_per_gpu, spec.precision, None)
    grads = [layer.params * GRADIENT_BYTES[spec.precision]
             for layer in get_model(model_name).layers]
    for aggregation in spec.aggregations:
        kind, ps = resolve_aggregation(aggregation, spec.ps)
        for n in spec.gpus:
            t0 = time.perf_counter()
            row = simulate_training(graph, profile, gpus=n, batch_per_gpu=spec.batch_per_gpu,
                                    aggregation=kind, model_name=model_name,
                                    gradient_bytes=grads, precision=spec.precision,
                                    bucket_bytes=spec.bucket_bytes, overlap=spec.overlap,
                                    slices=spec.slices, ps=ps, collective_engine="auto").row
            rows.append({"aggregation": aggregation, "gpus": n,
                         "iteration_s": row["iteration_s"], "wall_s": time.perf_counter() - t0})
            print(f"  auto  {aggregation:>18} {n:>5} GPUs: {rows[-1]['wall_s']:7.2f} s",
                  flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, nargs="+", default=GPUS)
    parser.add_argument("--aggregations", nargs="+", default=AGGREGATIONS)
    parser.add_argument("--engines", nargs="+", default=["event", "auto"],
                        choices=["event", "auto"])
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = parser.parse_args()
    machine_s = [machine_reference_s()]
    graph = cluster()
    spec = TrainingSpec(models=("resnet50",), batch_per_gpu=32, gpus=tuple(args.gpus),
                        aggregations=tuple(args.aggregations))
    frames, totals = [], {}
    for engine in args.engines:
        t0 = time.perf_counter()
        rows = event_sweep(graph, spec) if engine == "event" else auto_sweep(graph, spec)
        totals[engine] = time.perf_counter() - t0
        frames.append(pd.DataFrame(rows).assign(engine=engine))
    machine_s.append(machine_reference_s())
    frame = pd.concat(frames, ignore_index=True)
    wide = frame.pivot_table(index=["aggregation", "gpus"], columns="engine",
                             values=["wall_s", "iteration_s"], sort=False)
    if {"event", "auto"} <= set(args.engines):
        ev, au = wide[("iteration_s", "event")], wide[("iteration_s", "auto")]
        rel = ((au - ev).abs() / ev).max()
        print(f"largest auto-vs-event difference of iteration_s: {rel:.1e}")
        assert rel <= 1e-9, "auto and event disagree"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out / "training.csv", index=False)
    head = "| aggregation | GPUs | iteration (ms) | " + " | ".join(
        f"{e} wall (s)" for e in args.engines) + " |"
    lines = [head, "|---|---:|---:|" + "---:|" * len(args.engines)]
    for (aggregation, n), row in wide.iterrows():
        iteration = row[("iteration_s", args.engines[0])] * 1e3
        walls = " | ".join(f"{row[('wall_s', e)]:.2f}" for e in args.engines)
        lines.append(f"| {aggregation} | {n} | {iteration:.2f} | {walls} |")
    lines.append("| **total** | | | " + " | ".join(f"**{totals[e]:.1f}**"
                                                    for e in args.engines) + " |")
    print()
    print("\n".join(lines))
    print()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}")
    print(f"machine reference (bench_scale.machine_reference, no project code): "
          f"{machine_s[0]:.2f} s at the start, {machine_s[1]:.2f} s at the end")
    if math.isfinite(totals.get("auto", math.nan)):
        print(f"auto total: {totals['auto']:.1f} s (target 10 s)")


if __name__ == "__main__":
    main()
