"""Our engine against SimGrid on two concurrent collective jobs: agreement and wall time.

Usage: python benchmarks/bench_simgrid.py [--ranks 64] [--size 256MiB] [--quick]

The fabric is a fat tree of 8 leaves x 16 hosts (100 Gb/s host links, 1 us per hop) with 4
spines of 200 Gb/s uplinks (2:1 oversubscribed). Job a runs on the first 8 hosts of every
leaf, job b on the other 8, each with its ranks dealt round-robin over the leaves, so every
ring hop crosses the spine layer and both jobs share every leaf uplink they hash onto. The
rows:

* ``exact``: :data:`~simulator.validation.simgrid.SIMGRID_CONFIG` (CM02, factors 1, no cross
  traffic, tight precision; latency added after the drain as our engine does);
* ``stock precision``: the same, with SimGrid's default ``maxmin/precision`` 1e-5 and
  ``surf/precision`` 1e-9 s;
* ``latency on links``: SimGrid's own latency semantics (paid before the bytes; shares
  weighted by route latency);
* ``LV08``: SimGrid's default model (bandwidth x 0.97, latency x 13.01, weight-S 20537).

Columns: simulated time of each job on both, the worst relative difference of a job time, of
any flow timestamp, and of any flow's time on the wire, the worst absolute difference of a
timestamp (NaN if a flow is missing on one side); wall times (ours: engine build and run;
SimGrid: platform build and run in its child process, Python actor included). Not a test:
timings on a shared machine are noisy.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simulator.topology import load_topology  # noqa: E402
from simulator.units import parse_size  # noqa: E402
from simulator.validation.simgrid import SIMGRID_CONFIG, compare  # noqa: E402
from simulator.workload.jobs import CollectiveJob  # noqa: E402

LEAVES, HOSTS_PER_LEAF = 8, 16
STOCK_PRECISION = tuple(c for c in SIMGRID_CONFIG if "precision" not in c)


def jobs_for(ranks: int, size_bytes: int, algorithm_b: str) -> list[CollectiveJob]:
    """Jobs a and b, ``ranks`` each, dealt round-robin over the leaves (a: first half of each
    leaf, b: second half)."""
    per_leaf = ranks // LEAVES
    if per_leaf * LEAVES != ranks or per_leaf > HOSTS_PER_LEAF // 2:
        raise SystemExit(f"--ranks must be a multiple of {LEAVES} up to "
                         f"{LEAVES * HOSTS_PER_LEAF // 2}")

    def placement(offset: int) -> tuple[int, ...]:
        return tuple((r % LEAVES) * HOSTS_PER_LEAF + offset + r // LEAVES for r in range(ranks))

    return [CollectiveJob("a", "allreduce", "ring", size_bytes, placement(0)),
            CollectiveJob("b", "allreduce", algorithm_b, size_bytes // 4,
                          placement(HOSTS_PER_LEAF // 2), iterations=2)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=64, help="ranks per job (default 64)")
    parser.add_argument("--size", default="256MiB", help="job a's all-reduce size; b: a quarter")
    parser.add_argument("--quick", action="store_true", help="only the exact rows")
    args = parser.parse_args()
    graph = load_topology("fat_tree", {"hosts_per_leaf": HOSTS_PER_LEAF, "leaves": LEAVES,
                                       "spines": 4, "uplink_bandwidth": "200 Gbps"})
    size = int(parse_size(args.size))
    cases = [("ring + ring", "ring", {}, "exact"),
             ("ring + halving_doubling", "halving_doubling", {}, "exact")]
    if not args.quick:
        cases += [("ring + ring", "ring", {"config": STOCK_PRECISION}, "stock precision"),
                  ("ring + ring", "ring", {"latency_on_links": True}, "latency on links"),
                  ("ring + ring", "ring", {"config": ("network/model:LV08",)}, "LV08")]
    header = (f"{'jobs':<24} {'SimGrid settings':<17} {'flows':>6} {'a ours s':>11} "
              f"{'a SimGrid s':>11} {'b ours s':>11} {'b SimGrid s':>11} {'job rel':>8} "
              f"{'flow rel':>8} {'wire rel':>8} {'max |dt| s':>10} {'ours wall':>9} {'SG wall':>8}")
    print(f"two {args.ranks}-rank jobs on a fat tree of {LEAVES}x{HOSTS_PER_LEAF} hosts, "
          f"a: ring {args.size}, b: a quarter of it, twice")
    print(header)
    for label, algorithm_b, options, settings in cases:
        jobs = jobs_for(args.ranks, size, algorithm_b)
        wall = time.perf_counter()
        result = compare(graph, jobs, **options)
        wall = time.perf_counter() - wall
        rows = result.jobs.set_index("job")
        print(f"{label:<24} {settings:<17} {len(result.flows):>6} "
              f"{rows.loc['a', 'ours_s']:>11.6g} {rows.loc['a', 'simgrid_s']:>11.6g} "
              f"{rows.loc['b', 'ours_s']:>11.6g} {rows.loc['b', 'simgrid_s']:>11.6g} "
              f"{rows['rel_diff'].max():>8.1e} {result.worst_rel_diff:>8.1e} "
              f"{result.worst_duration_rel_diff:>8.1e} {result.worst_abs_diff_s:>10.1e} "
              f"{result.ours.wall_s:>8.2f}s "
              f"{result.simgrid.wall_s:>7.2f}s", flush=True)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}")


if __name__ == "__main__":
    main()
