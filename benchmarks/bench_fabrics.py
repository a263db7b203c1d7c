"""One ring all-reduce on the fabrics of the largest clusters, under each routing mode.

For every fabric and routing mode (``ideal``: even spread over the equal-cost paths; ``ecmp``:
static per-hop flow hash; ``adaptive``: least-loaded path pinned per connection) it prints the
simulated time, the busiest resource and its utilisation, and the busiest *fabric* link
(switch to switch) and how many fabric links carried anything; then an ECMP seed sweep
(min / median / max time over ``--seeds`` seeds). Results also go to
``benchmarks/results/fabrics.csv``.

    python benchmarks/bench_fabrics.py                 # 512 H100 GPUs, 1 GiB, 20 seeds
    python benchmarks/bench_fabrics.py --nodes 32 --seeds 5 --procs 2

Fabrics (topology presets, see docs/validation/sources_fabrics.md):

* ``rail``: ``superpod-h100-rail`` (DGX SuperPOD, rail-optimised, 32 machines per SU), with the
  ring's default channel orders and with rail-aligned orders (channel ``c`` crosses between
  machines from GPU ``c`` or ``c-1`` to the same GPU, so NIC to NIC on one rail);
* ``3tier-tor``: ``meta-roce-3tier`` (two zones of top-of-rack leaves, 2 machines each, 16
  spines per zone, zones joined 4:1);
* ``3tier-rail``: ``superpod-h100-3tier`` with four 16-machine pods, 16 spines per pod, 2 cores
  per spine plane at 4:1, and rail-aligned rings.

At 64 machines every fabric link is 400 Gb/s (50 GB/s), as the NICs: the oversubscription
ratios come from fewer uplinks, as in real fabrics. (``three_tier`` derives its uplink speeds
from the ratios and the counts; with fewer machines per pod the links get thinner.)
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from simulator.collective import run_collective  # noqa: E402
from simulator.topology import load_topology  # noqa: E402

MODES = ("ideal", "ecmp", "adaptive")


def rail_aligned_orders(machines: int, gpus: int) -> list[list[int]]:
    """One ring order per channel ``c``: machine ``i`` is entered at GPU ``c`` and left from
    GPU ``c-1`` (even ``i``), or entered at ``c-1`` and left from ``c`` (odd ``i``), so every
    hop between machines joins two GPUs of the same index (the same rail)."""
    orders = []
    for c in range(gpus):
        local = [(c + j) % gpus for j in range(gpus)]
        order = []
        for i in range(machines):
            seq = local if i % 2 == 0 else local[::-1]
            order += [i * gpus + g for g in seq]
        orders.append(order)
    return orders


def fabric(name: str, nodes: int, mode: str, seed: int):
    if name.startswith("rail"):
        g = load_topology("superpod-h100-rail", {"nodes": nodes, "routing": mode,
                                                 "routing_seed": seed})
    elif name == "3tier-tor":
        g = load_topology("meta-roce-3tier", {"nodes": nodes, "nodes_per_pod": nodes // 2,
                                              "routing": mode, "routing_seed": seed})
    else:
        # 4 pods of 8 rail leaves; 16 spines per pod (leaf uplinks of 400G when the pod has
        # 16 machines) and 2 cores per spine plane at 4:1 (spine uplinks of 400G)
        g = load_topology("superpod-h100-3tier", {"nodes": nodes, "nodes_per_pod": nodes // 4,
                                                  "spines_per_pod": 16, "cores_per_plane": 2,
                                                  "spine_oversubscription": 4,
                                                  "routing": mode, "routing_seed": seed})
    return g


def fabric_links(graph, keys_carried, time_s):
    """(busiest fabric link, its utilisation, fabric links used, fabric links in all)."""
    nodes = graph.nodes
    total = sum(1 for u, v in graph.edges
                if nodes[u]["kind"] == "switch" and nodes[v]["kind"] == "switch")
    used, best = set(), ("", 0.0)
    for key, cap, carried in keys_carried:
        if key[0] == "spread":
            links = key[2]
        elif key[0] != "node" and nodes[key[0]]["kind"] == "switch" \
                and nodes[key[1]]["kind"] == "switch":
            links = (key,)
        else:
            continue
        if carried > 0:
            used.update(links)
            util = carried / (cap * time_s)
            if util > best[1]:
                best = (key[1] if key[0] == "spread" else f"{key[0]}->{key[1]}", util)
    return best[0], best[1], len(used), total


def one(args):
    name, nodes, mode, seed, size = args
    g = fabric(name, nodes, mode, seed)
    gpus_per = g.graph["params"]["gpus_per_node"]
    options = {}
    if name.endswith("aligned") or name == "3tier-rail":
        options = {"orders": rail_aligned_orders(nodes, gpus_per), "channels": gpus_per}
    t0 = time.perf_counter()
    r = run_collective(g, "allreduce", "ring", size, engine="auto", **options)
    wall = time.perf_counter() - t0
    t = r.row["time_s"]
    if r.fast is not None and r.fast.applicable:
        carried = [(k, c, b) for k, c, b in r.fast.links]
    else:
        net = r.engine.network
        carried = [(k, c, b) for k, c, b, _busy in net.link_table()]
    flink, futil, used, total = fabric_links(g, carried, t)
    return {"fabric": name, "gpus": nodes * gpus_per, "routing": mode, "seed": seed,
            "size_bytes": size, "time_ms": t * 1e3, "busbw_GBps": r.row["busbw_GBps"],
            "bottleneck": r.row["bottleneck_link"],
            "bottleneck_util": r.row["bottleneck_utilisation"], "fabric_busiest": flink,
            "fabric_busiest_util": futil, "fabric_links_used": used,
            "fabric_links": total, "method": r.method, "wall_s": wall}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=64, help="machines (8 H100 each)")
    ap.add_argument("--size", type=int, default=1 << 30, help="bytes (default 1 GiB)")
    ap.add_argument("--seeds", type=int, default=20, help="ECMP seeds in the sweep")
    ap.add_argument("--fabrics", default="rail,rail-aligned,3tier-tor,3tier-rail")
    ap.add_argument("--sweep", default="3tier-tor,3tier-rail",
                    help="fabrics of the ECMP seed sweep")
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "fabrics.csv"))
    a = ap.parse_args(argv)
    jobs = [(f, a.nodes, m, 0, a.size) for f in a.fabrics.split(",") if f for m in MODES]
    sweep = [(f, a.nodes, "ecmp", s, a.size) for f in a.sweep.split(",") if f
             for s in range(1, a.seeds)]
    with ProcessPoolExecutor(a.procs) as pool:
        rows = list(pool.map(one, jobs + sweep))
    fmt = ("{fabric:13} {routing:8} {time_ms:9.3f} ms {busbw_GBps:7.1f} GB/s  busiest "
           "{bottleneck} {bottleneck_util:.3f}; fabric {fabric_busiest} "
           "{fabric_busiest_util:.3f}, used {fabric_links_used}/{fabric_links}  [{method}]")
    for row in rows[:len(jobs)]:
        print(fmt.format(**row))
    for f in a.sweep.split(","):
        times = [r["time_ms"] for r in rows if r["fabric"] == f and r["routing"] == "ecmp"]
        if times:
            ideal = next(r["time_ms"] for r in rows if r["fabric"] == f
                         and r["routing"] == "ideal")
            print(f"{f}: ECMP over {len(times)} seeds: min {min(times):.3f} median "
                  f"{statistics.median(times):.3f} max {max(times):.3f} ms "
                  f"(ideal {ideal:.3f} ms; max/ideal {max(times) / ideal:.2f})")
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    with open(a.out, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
