"""Ring vs binary tree vs double binary tree vs halving-doubling on `star`, N = 8..1024.

Usage: python benchmarks/algorithm_sweep.py [--ranks 8 64 256 1024] [--out FILE.csv]

Link 12.5 GB/s, 1 us per link (2 us host to host), reduction free, --slices 1. Small messages
(8 KiB) expose the latency term: ring grows linearly with N, the trees with log2 N. Large
messages (1 GiB) expose the bandwidth term: ring, halving-doubling and the pipelined double
binary tree reach the link bandwidth, the single binary tree does not.
"""

from __future__ import annotations

import argparse
import time

import pandas as pd

from simulator.collective import run_collective
from simulator.topology import load_topology


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[8, 64, 256, 1024])
    parser.add_argument("--sizes", nargs="+", default=["8KiB", "1GiB"])
    parser.add_argument("--algorithms", nargs="+",
                        default=["ring", "tree", "double_binary_tree", "halving_doubling"])
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    from simulator.units import parse_size

    rows = []
    for n in args.ranks:
        graph = load_topology("star", {"hosts": n, "link_bandwidth": "12.5GB/s",
                                       "link_latency": "1us"})
        for size in (parse_size(s) for s in args.sizes):
            for algorithm in args.algorithms:
                t0 = time.perf_counter()
                row = run_collective(graph, "allreduce", algorithm, size).row
                row["wall_s"] = time.perf_counter() - t0
                rows.append(row)
                print(f"N={n:5d} size={size:>11d} {algorithm:20s} time={row['time_us']:14.3f} us "
                      f"busbw={row['busbw_GBps']:7.3f} GB/s  wall={row['wall_s']:.1f} s",
                      flush=True)
    frame = pd.DataFrame(rows)
    if args.out:
        frame.to_csv(args.out, index=False)


if __name__ == "__main__":
    main()
