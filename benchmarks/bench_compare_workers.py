"""Wall time of ``clustersim compare`` on a training table, rows in one process against rows in
``--workers N`` processes (:func:`simulator.comparison.training.compare_training`).

Usage: python benchmarks/bench_compare_workers.py [--workers 2] [--select hardware=DGX-1]
           [--file tests/data/training/train_tf_benchmarks_2017_ps_vs_replicated.csv]
           [--topology dgx1-p100]

Both runs happen in this process one after the other, so the ratio is measured within one run
(these machines drift by up to 3x from hour to hour; see README.md). The two result frames
must be identical (checked): the processes change the wall time, never a number.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import pandas as pd

from simulator.comparison.training import compare_training, select
from simulator.measure.schema import read_training
from simulator.topology import load_topology

ROOT = Path(__file__).resolve().parent.parent


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", default=str(
        ROOT / "tests/data/training/train_tf_benchmarks_2017_ps_vs_replicated.csv"))
    parser.add_argument("--topology", default="dgx1-p100")
    parser.add_argument("--select", action="append", default=None)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    measured = read_training(args.file)
    measured = select(measured, args.select or ["hardware=DGX-1"])
    graph = load_topology(args.topology)
    times, frames = {}, {}
    for workers in (1, args.workers):
        begin = time.perf_counter()
        frames[workers] = compare_training(measured, graph, workers=workers)
        times[workers] = time.perf_counter() - begin
    pd.testing.assert_frame_equal(frames[1], frames[args.workers])
    print(f"{len(measured)} rows, {os.cpu_count()} CPUs: 1 process {times[1]:.1f} s, "
          f"{args.workers} processes {times[args.workers]:.1f} s, ratio "
          f"{times[1] / times[args.workers]:.2f}x (results identical)")


if __name__ == "__main__":
    main()
