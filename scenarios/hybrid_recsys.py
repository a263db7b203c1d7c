"""Hybrid recommendation training: embeddings on parameter servers, MLPs all-reduced.

Usage: python scenarios/hybrid_recsys.py [--nodes 2] [--gpus-per-node 8] [--servers 2]
                                         [--alpha 1.05] [--out out/hybrid_recsys]

A DLRM (MLPerf sizes, 26 tables of 10 M rows x 128 fp32) trains on ``gpu_cluster`` machines of
A100s on NVSwitch with one 200 Gb/s InfiniBand NIC each, and ``--servers`` dedicated parameter
servers on the same switch (:mod:`simulator.workload.hybrid`). For hash and range sharding it
prints one row each and writes ``results.csv`` and a link heatmap per sharding
(``heatmap_hash.png``, ``heatmap_range.png``): the parameter servers' links carry the embedding
pulls and pushes, the NVSwitch and NIC links the dense all-reduce, at the same time. With range
sharding and a skewed popularity the first server holds the hot rows and its link is the
bottleneck.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from simulator.records import link_timeline
from simulator.report.plots import link_heatmap
from simulator.topology import load_topology
from simulator.workload.hybrid import HYBRID_COLUMNS, HybridSpec, simulate_hybrid


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--servers", type=int, default=2)
    parser.add_argument("--alpha", type=float, default=1.05)
    parser.add_argument("--batch-per-gpu", type=int, default=2048)
    parser.add_argument("--out", default="out/hybrid_recsys")
    args = parser.parse_args()

    graph = load_topology("gpu_cluster", {"nodes": args.nodes,
                                          "gpus_per_node": args.gpus_per_node,
                                          "ps_hosts": args.servers})
    gpus = args.nodes * args.gpus_per_node
    out = Path(args.out)
    rows = []
    for sharding in ("hash", "range"):
        spec = HybridSpec(sharding=sharding, servers=args.servers, alpha=args.alpha,
                          batch_per_gpu=args.batch_per_gpu)
        result = simulate_hybrid(graph, spec, gpus, record_rates=True)
        rows.append(result.row)
        link_heatmap(link_timeline(result.engine), out / f"heatmap_{sharding}", top=30,
                     title=f"DLRM, {gpus} GPUs + {args.servers} PS, {sharding} sharding, "
                           f"Zipf {args.alpha:g}: link utilisation")
    frame = pd.DataFrame(rows, columns=list(HYBRID_COLUMNS))
    out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out / "results.csv", index=False)
    shown = frame[["sharding", "iteration_s", "throughput_samples_s", "compute_s",
                   "distinct_rows_per_worker", "embedding_bytes_per_iteration",
                   "dense_bytes_per_iteration", "hot_server_share", "bottleneck_link"]]
    print(shown.to_string(index=False))
    print(f"wrote {out / 'results.csv'}, {out / 'heatmap_hash.png'}, "
          f"{out / 'heatmap_range.png'}")


if __name__ == "__main__":
    main()
