"""Simulator wall time of the event engine: ring all-reduce of 256 MiB on `star`, --slices 1.

Usage: python benchmarks/bench_ring_star.py [--ranks 1024] [--out benchmarks/results/ring_star.csv]

Reports wall time and peak Python memory (tracemalloc) per phase (schedule build, dependency
derivation + engine run) and checks the simulated time against the closed form, so a speed-up
can never silently change the answer. Not a test: timings on shared 2-core machines are noisy.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import platform
import time
import tracemalloc

from simulator import theory
from simulator.collective import run_collective
from simulator.topology import load_topology


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    rows = []
    for p in args.ranks:
        graph = load_topology("star", {"hosts": str(p), "link_bandwidth": "12.5GB/s",
                                       "link_latency": "1us"})
        tracemalloc.start()
        t0 = time.perf_counter()
        row = run_collective(graph, "allreduce", "ring", 256 << 20).row
        wall = time.perf_counter() - t0
        _cur, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        want = theory.ring_allreduce(p, 256 << 20, 2e-6, 1 / 12.5e9)
        err = abs(row["time_s"] - want) / want
        rows.append({"ranks": p, "transfers": 2 * p * (p - 1), "wall_s": round(wall, 3),
                     "peak_mib": round(peak / 2**20, 1), "sim_time_s": row["time_s"],
                     "closed_form_rel_err": err})
        print(f"N={p:>5}  transfers={2 * p * (p - 1):>9}  wall={wall:8.2f} s  "
              f"peak={peak / 2**20:8.1f} MiB  sim={row['time_s']:.9g} s  rel.err={err:.1e}")
        assert math.isclose(row["time_s"], want, rel_tol=1e-9)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}")
    if args.out:
        os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
        with open(args.out, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


if __name__ == "__main__":
    main()
