"""Simulator wall time of the event engine: ring all-reduce of 256 MiB on `star`, --slices 1.

Usage: python benchmarks/bench_ring_star.py [--ranks 64 256 1024] [--engine event|fast|auto]
           [--out benchmarks/results/ring_star.csv]

Each point runs in a fresh subprocess (:func:`bench_scale.run_point`): wall time is
``run_collective`` alone, peak memory the subprocess's peak RSS. Python-level memory tracing
(tracemalloc) is deliberately not used: it slows allocation-heavy code several times over and
would report a wall time the user never sees. The simulated time is checked against the closed
form ``2(p-1)(2·latency + S/(p·B))`` so a speed-up can never silently change the answer. Not a
test: timings on shared 2-core machines are noisy.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from bench_scale import SIZE, run_point  # noqa: E402

from simulator import theory  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--engine", default="event", choices=["event", "fast", "auto"])
    parser.add_argument("--budget", type=float, default=600.0, help="seconds per point")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    rows = []
    for p in args.ranks:
        record = run_point("ring", p, args.engine, args.budget)
        if record["status"] != "ok":
            raise SystemExit(f"N={p}: {record['status']}: {record.get('reason', '')}")
        want = theory.ring_allreduce(p, SIZE, 2e-6, 1 / 12.5e9)
        err = abs(record["sim_time_s"] - want) / want
        rows.append({"ranks": p, "transfers": 2 * p * (p - 1), "engine": args.engine,
                     "wall_s": round(record["wall_s"], 3),
                     "peak_rss_mib": round(record["peak_rss_mib"], 1),
                     "sim_time_s": record["sim_time_s"], "closed_form_rel_err": err})
        print(f"N={p:>5}  transfers={2 * p * (p - 1):>9}  wall={record['wall_s']:8.2f} s  "
              f"peak RSS={record['peak_rss_mib']:8.1f} MiB  sim={record['sim_time_s']:.9g} s  "
              f"rel.err={err:.1e}", flush=True)
        assert math.isclose(record["sim_time_s"], want, rel_tol=1e-9)
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
