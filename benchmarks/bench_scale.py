"""Simulator wall time and peak memory against GPU count, per algorithm and engine.

Usage: python benchmarks/bench_scale.py [--ranks 8 64 ... 65536 131072] [--budget 120]
           [--algorithms ring tree double_binary_tree halving_doubling ps] [--out DIR]

All-reduce of 256 MiB on ``star`` (12.5 GB/s, 1 us per link), ``--slices 1`` (the double binary
tree keeps its default 512 KiB segments, i.e. it is pipelined). Every point runs in a fresh
subprocess; its wall time is that of ``run_collective`` (topology building and interpreter start
excluded), its peak memory the subprocess's peak resident set size, read with ``os.wait4``
(``ru_maxrss`` of that child alone).

Engines: ``fast`` (simulator.engine.dispatch) wherever it applies; ``event`` until a point exceeds
the per-point budget (default 120 s; the larger N of that algorithm are then not tried) or
would need more than the memory guards below allow. Where both ran, the relative difference of
the simulated times is reported. Writes ``scale.csv`` and ``scale.png`` to ``--out`` (default
``benchmarks/results``) and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import threading
import time
from pathlib import Path

ALGORITHMS = ["ring", "tree", "double_binary_tree", "halving_doubling", "ps"]
#: 131,072 ranks: issue 27's scale target (the double binary tree's compiled simulation takes
#: ~40 s there on a 2-core machine, simulating one tree on the mirror quotient).
RANKS = [8, 64, 256, 1024, 4096, 16384, 65536, 131072]
SIZE = 256 << 20
#: Event engine guards (checked before a point starts): its schedule and dependency graph are
#: built in full, chunk by chunk, and the machine must keep them in memory.
#: The event engine keeps ~570 bytes per transfer (ring, N=1,024: 2.1 M transfers, 1.2 GiB
#: peak): beyond 3.5 M transfers a point would pass the 2 GiB memory target.
MAX_EVENT_TRANSFERS = 3_500_000
MAX_EVENT_ACCESSES = 60_000_000
#: The double binary tree's segments per tree at 256 MiB (NCCL's 512 KiB segments).
DBT_SEGMENTS = (SIZE // 2) // (512 << 10)


def event_transfers(algorithm: str, n: int) -> int:
    """Transfers the event engine would keep for ``algorithm`` on ``n`` ranks."""
    return {"ring": 2 * n * (n - 1), "double_binary_tree": 4 * (n - 1) * DBT_SEGMENTS,
            "tree": 2 * (n - 1), "ps": 2 * n,
            "halving_doubling": 2 * n * max(1, (n - 1).bit_length())}[algorithm]


def event_guard(algorithm: str, n: int) -> str:
    """Why the event engine is not tried at ``n`` ranks ('' when it is)."""
    transfers = event_transfers(algorithm, n)
    if transfers > MAX_EVENT_TRANSFERS:
        return (f"{transfers:,} transfers: over the 2 GiB memory target "
                f"(~570 B per transfer)")
    if algorithm == "halving_doubling" and 4 * n * n > MAX_EVENT_ACCESSES:
        return f"~{4 * n * n:,} chunk accesses in the dependency graph"
    if algorithm == "ps" and n * n > MAX_EVENT_ACCESSES:
        return f"{n * n:,} dependency edges (every pull waits for every push)"
    return ""


def point(algorithm: str, n: int, engine: str) -> dict:
    """Run one point in this process (the subprocess side) and return its record."""
    from simulator.collective import run_collective
    from simulator.errors import ClusterSimError
    from simulator.topology import load_topology

    servers = 1 if algorithm == "ps" else 0
    graph = load_topology("star", {"hosts": str(n + servers), "link_bandwidth": "12.5GB/s",
                                   "link_latency": "1us"})
    t0 = time.perf_counter()
    try:
        result = run_collective(graph, "allreduce", algorithm, SIZE, gpus=n, engine=engine)
    except ClusterSimError as exc:   # NotApplicable and the size guards: recorded, not fatal
        return {"status": "not_applicable", "reason": str(exc),
                "wall_s": time.perf_counter() - t0}
    wall = time.perf_counter() - t0
    fast = result.fast
    return {"status": "ok", "wall_s": wall, "sim_time_s": result.row["time_s"],
            "method": fast.method if fast else "event", "reason": "",
            "bottleneck": result.row["bottleneck_link"]}


def run_point(algorithm: str, n: int, engine: str, budget_s: float) -> dict:
    """Run one point in a subprocess, killed after ``budget_s``; its peak RSS comes from
    ``os.wait4`` (the rusage of that child alone)."""
    cmd = [sys.executable, __file__, "--point", algorithm, str(n), engine]
    out_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench_scale_{os.getpid()}.json"
    with open(out_path, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.DEVNULL)
        timer = threading.Timer(budget_s, proc.kill)
        timer.start()
        _pid, status, usage = os.wait4(proc.pid, 0)
        timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
    record = {"algorithm": algorithm, "gpus": n, "engine": engine,
              "peak_rss_mib": usage.ru_maxrss / 1024}
    text = out_path.read_text().strip()
    out_path.unlink()
    if proc.returncode != 0:
        killed = proc.returncode < 0
        record.update(status="timeout" if killed else "error",
                      reason=f"over the {budget_s:.0f} s budget" if killed else "failed")
        return record
    record.update(json.loads(text.splitlines()[-1]))
    return record


#: The engine reference, run at the start and the end of a sweep: the event engine on a
#: 256-rank ring. It tracks the machine's speed within a round, but moves with the engine's own
#: code (0.83 s -> 0.51 s in alternating runs when the event engine got ~2x faster), so across
#: rounds compare :func:`machine_reference` instead.
REFERENCE = ("ring", 256, "event")


def machine_reference() -> float:
    """Seconds for a fixed workload that uses no project code (a heap of 400,000 tuples
    pushed and popped, and a Python loop of dictionary and list work): these shared 2-core
    machines vary by up to 3x in speed from hour to hour, so absolute wall times are only
    comparable between runs through it."""
    import heapq
    import random

    rng = random.Random(7)
    t0 = time.perf_counter()
    heap: list = []
    for k in range(400_000):
        heapq.heappush(heap, (rng.random(), k))
    while heap:
        heapq.heappop(heap)
    table: dict = {}
    items: list = []
    for k in range(1_000_000):
        table[k % 4096] = table.get(k % 4096, 0) + k
        items.append(k)
    return time.perf_counter() - t0


def machine_reference_s() -> float:
    """:func:`machine_reference` in a subprocess: a child's peak RSS counts the memory its
    parent had when it forked, so this process must stay small for the points' memory."""
    out = subprocess.run([sys.executable, __file__, "--machine-reference"], check=True,
                         capture_output=True, text=True).stdout
    return float(out.strip().splitlines()[-1])


def sweep(algorithms, ranks, budget_s, log=print) -> list[dict]:
    records = []
    for algorithm in algorithms:
        for engine in ("fast", "event"):
            stop = ""
            for n in ranks:
                if stop:
                    records.append({"algorithm": algorithm, "gpus": n, "engine": engine,
                                    "status": "skipped", "reason": stop})
                    continue
                guard = event_guard(algorithm, n) if engine == "event" else ""
                if guard:
                    records.append({"algorithm": algorithm, "gpus": n, "engine": engine,
                                    "status": "skipped", "reason": guard})
                    continue
                rec = run_point(algorithm, n, engine, budget_s)
                records.append(rec)
                log(f"{algorithm:>18} N={n:>5} {engine:>5}: {rec['status']:<14} "
                    f"wall={rec.get('wall_s', math.nan):8.3f} s "
                    f"rss={rec.get('peak_rss_mib', math.nan):7.0f} MiB "
                    f"{rec.get('method', '')} {rec.get('reason', '')[:90]}")
                if rec["status"] == "timeout":
                    stop = f"N={n} exceeded the {budget_s:.0f} s budget"
                elif rec["status"] == "not_applicable" and engine == "fast":
                    stop = f"not applicable (as at N={n}): {rec['reason'][:200]}"
    return records


def add_parity(frame):
    """Relative difference |fast - event| / event of the simulated time, per point."""
    import numpy as np

    ok = frame[(frame["status"] == "ok") & (frame["engine"] != "reference")]
    event = ok[ok["engine"] == "event"].set_index(["algorithm", "gpus"])["sim_time_s"]
    fast = ok[ok["engine"] == "fast"].set_index(["algorithm", "gpus"])["sim_time_s"]
    both = event.index.intersection(fast.index)
    rel = (fast[both] - event[both]).abs() / event[both]
    frame["fast_vs_event_rel"] = [rel.get((a, n), np.nan)
                                  for a, n in zip(frame["algorithm"], frame["gpus"])]
    return frame


def markdown(frame) -> str:
    lines = [("| algorithm | GPUs | event wall (s) | event peak RSS (MiB) | fast wall (s) | "
              "fast peak RSS (MiB) | fast method | event/fast wall | fast vs event |"),
             "|---|---:|---:|---:|---:|---:|---|---:|---:|"]

    def cell(rec, key, fmt):
        if rec is None:
            return "-"
        status, reason = rec["status"], str(rec.get("reason", ""))
        if status == "ok":
            return fmt.format(rec[key])
        if key != "wall_s":     # memory of a point that did not finish
            rss = rec.get("peak_rss_mib")
            return f">= {rss:.0f}" if status == "timeout" and not math.isnan(rss) else "-"
        if status == "timeout":
            return f"> {reason.split()[2]} s" if reason.startswith("over the") else "> budget"
        if status == "not_applicable" or reason.startswith("not applicable"):
            return "n/a"
        if status == "skipped" and "budget" in reason:
            return "not tried"
        return {"skipped": "skipped", "error": "error"}.get(status, status)

    frame = frame[frame["engine"] != "reference"]
    for (algorithm, n), group in frame.groupby(["algorithm", "gpus"], sort=False):
        recs = {r["engine"]: r for r in group.to_dict("records")}
        ev, fa = recs.get("event"), recs.get("fast")
        rel = group["fast_vs_event_rel"].dropna()
        both_ok = ev is not None and fa is not None and ev["status"] == fa["status"] == "ok"
        ratio = f"{ev['wall_s'] / fa['wall_s']:.3g}x" if both_ok and fa["wall_s"] > 0 else "-"
        lines.append(f"| {algorithm} | {n} | {cell(ev, 'wall_s', '{:.3f}')} | "
                     f"{cell(ev, 'peak_rss_mib', '{:.0f}')} | {cell(fa, 'wall_s', '{:.3f}')} | "
                     f"{cell(fa, 'peak_rss_mib', '{:.0f}')} | "
                     f"{fa.get('method', '') if fa and fa['status'] == 'ok' else '-'} | "
                     f"{ratio} | {f'{rel.iloc[0]:.1e}' if len(rel) else '-'} |")
    return "\n".join(lines)


def plot(frame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5))
    colours = dict(zip(ALGORITHMS, plt.rcParams["axes.prop_cycle"].by_key()["color"]))
    ok = frame[(frame["status"] == "ok") & (frame["engine"] != "reference")]
    for (algorithm, engine), group in ok.groupby(["algorithm", "engine"], sort=False):
        ax.plot(group["gpus"], group["wall_s"], marker="o" if engine == "fast" else "s",
                linestyle="-" if engine == "fast" else "--",
                color=colours.get(algorithm), label=f"{algorithm} ({engine})")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("GPUs (ranks)")
    ax.set_ylabel("simulator wall time (s)")
    ax.set_title("All-reduce of 256 MiB on star: simulator wall time vs GPU count\n"
                 "(event engine: dashed; exact fast path: solid)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--point", nargs=3, metavar=("ALGORITHM", "N", "ENGINE"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--ranks", type=int, nargs="+", default=RANKS)
    parser.add_argument("--algorithms", nargs="+", default=ALGORITHMS)
    parser.add_argument("--budget", type=float, default=120.0,
                        help="wall-clock budget per point, s (event engine beyond it: skipped)")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"))
    parser.add_argument("--machine-reference", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.machine_reference:
        print(machine_reference())
        return
    if args.point:
        print(json.dumps(point(args.point[0], int(args.point[1]), args.point[2])))
        return
    import pandas as pd

    started = time.perf_counter()
    machine_s = [machine_reference_s()]
    reference = [run_point(*REFERENCE, args.budget)]
    records = sweep(args.algorithms, args.ranks, args.budget)
    reference.append(run_point(*REFERENCE, args.budget))
    machine_s.append(machine_reference_s())
    ref_s = [r.get("wall_s", math.nan) for r in reference]
    records += [dict(r, engine="reference") for r in reference]
    frame = add_parity(pd.DataFrame(records))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    columns = ["algorithm", "gpus", "engine", "status", "wall_s", "peak_rss_mib", "sim_time_s",
               "method", "fast_vs_event_rel", "bottleneck", "reason"]
    frame = frame.reindex(columns=columns)
    frame.to_csv(out / "scale.csv", index=False)
    plot(frame, out / "scale.png")
    print()
    print(markdown(frame))
    print()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}; total {time.perf_counter() - started:.0f} s")
    print(f"machine reference (fixed workload, no project code): {machine_s[0]:.2f} s at the "
          f"start, {machine_s[1]:.2f} s at the end")
    print(f"engine reference ({' '.join(map(str, REFERENCE))}): {ref_s[0]:.2f} s at the start, "
          f"{ref_s[1]:.2f} s at the end")


if __name__ == "__main__":
    main()
