"""Wall time and peak memory of simulating one hybrid-parallel LLM training step at scale.

The issue's targets: GPT-3 175B on 1,024 A100 (tp 8, pp 8, dp 16, 96 micro-batches) in under
10 s; Llama 3 405B on 16,384 H100 (tp 8, pp 16, dp 128) in under 60 s; peak memory under 4 GiB.
Each shape runs in a fresh subprocess through the whole path a user takes (registry model ->
cost model -> memory check -> placement -> the step on the flow engine), timed from the
topology build to the result; the peak RSS is the subprocess's (``RUSAGE_CHILDREN``). A machine
reference (a fixed workload that uses no project code) is printed first and last: compare runs
of different hours through it, and read ratios within one run.

    python benchmarks/bench_llm_step.py [gpt3|llama|all]
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time

SHAPES = {
    "gpt3": dict(model="gpt3-175b", topology="dgx-a100-2node",
                 params={"nodes": "128", "gpu": "a100-sxm4-80gb"},
                 layout=dict(tp=8, pp=8, dp=16, micro_batch=1, global_batch=1536,
                             sequence_parallel=True, recompute="selective",
                             distributed_optimizer=True)),
    "llama": dict(model="llama3-405b", topology="hgx-h100", params={"nodes": "2048"},
                  layout=dict(tp=8, pp=16, dp=128, micro_batch=1, global_batch=2048,
                              sequence_parallel=True, recompute="full",
                              distributed_optimizer=True)),
}

_CHILD = """
import json, sys, time
spec = json.loads(sys.argv[1])
t0 = time.perf_counter()
from simulator.topology import load_topology
from simulator.workload.llm.layout import Layout
from simulator.workload.llm.step import simulate_step
t1 = time.perf_counter()
graph = load_topology(spec["topology"], spec["params"])
t2 = time.perf_counter()
result = simulate_step(graph, spec["model"], Layout(**spec["layout"]))
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "topology_s": t2 - t1, "step_s": t3 - t2,
                  "simulated_ranks": result.simulated_ranks,
                  "step_time_s": result.row["step_time_s"],
                  "tflops": result.row["hardware_tflops_per_gpu"],
                  "mfu_pct": result.row["mfu_pct"], "memory_gib": result.row["memory_gib"]}))
"""


def machine_reference() -> float:
    """Seconds of a fixed dict-and-heap workload that uses no project code."""
    import heapq

    t = time.perf_counter()
    heap, table = [], {}
    for i in range(400_000):
        heapq.heappush(heap, (i * 7919) % 1_000_003)
        table[i % 50_000] = table.get(i % 50_000, 0) + i
    while heap:
        heapq.heappop(heap)
    return time.perf_counter() - t


def run(name: str) -> dict:
    spec = SHAPES[name]
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(spec)], check=True,
                         capture_output=True, text=True)
    wall = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result.update(name=name, process_wall_s=wall,
                  peak_rss_gib=max(peak, before) / 2**20 if peak > before else float("nan"))
    return result


def main(argv) -> None:
    which = argv[1] if len(argv) > 1 else "all"
    names = list(SHAPES) if which == "all" else [which]
    print(f"machine reference: {machine_reference():.2f} s")
    for name in names:
        r = run(name)
        spec = SHAPES[name]
        lay = spec["layout"]
        print(f"{spec['model']} on {lay['tp'] * lay['pp'] * lay['dp']} GPUs "
              f"(tp {lay['tp']}, pp {lay['pp']}, dp {lay['dp']}): step simulated in "
              f"{r['step_s']:.1f} s (topology {r['topology_s']:.1f} s, imports "
              f"{r['import_s']:.1f} s, whole process {r['process_wall_s']:.1f} s), peak RSS "
              f"{r['peak_rss_gib']:.2f} GiB, {r['simulated_ranks']} ranks simulated; simulated "
              f"step {r['step_time_s']:.2f} s, {r['tflops']:.0f} TFLOP/s per GPU, MFU "
              f"{r['mfu_pct']:.1f} %, {r['memory_gib']:.1f} GiB per GPU")
    print(f"machine reference: {machine_reference():.2f} s")


if __name__ == "__main__":
    main(sys.argv)
