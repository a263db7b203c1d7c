"""Layout search at scale: how many layouts of a 70B model on 1,024 GPUs the search considers in
a time budget, and the search's top layouts next to published Megatron layouts.

``70b``: ``clustersim llm --search`` for Llama 3 70B on 128 HGX H100 machines (1,024 GPUs),
global batch 1,024, on ``--workers`` local processes (default 2) with a time limit (default
280 s; whatever is left is reported as unresolved). Prints the counts (enumerated, refused by
rules, refused by memory, pruned by bound, simulated, unresolved), the wall time, the layouts
considered and simulated per second, and whether the top 10 is exact (no layout left whose bound
is below the 10th best). The machine may be shared: the load average is printed before and
after. What makes 1,024-GPU steps affordable: the data-parallel replicas folded onto one
(``groups.ReplicaFold``), and each collective's alone-time computed once per search (the workers
hand theirs to the search, which forwards them; ``search._Order`` holds a layout back while
another of its family, same tp/cp/ep/pp/virtual stages, is still computing them).

``published``: for GPT 39.1B on 512 A100-80GB (global batch 1,536) and GPT 145.6B on 1,536
A100-80GB (global batch 2,304), rows of ``train_llm_megatron_a100_v100.csv`` (Narayanan et al.
SC21, Table 1), the published layout (tp 8 x pp 2 and tp 8 x pp 8, interleaved, full recompute,
micro-batch 1 assumed) run through ``simulate_step``, and the search's top layouts, with
predicted TFLOP/s per GPU (hardware FLOPs, recompute counted, as the paper's equation 3).

    python benchmarks/bench_llm_search.py [70b|published|all] [--time-limit S] [--workers N]
"""

from __future__ import annotations

import argparse
import os
import time

from simulator.workload.llm.search import SearchSpace, format_search, search_layouts

PUBLISHED = {
    "megatron-gpt-39.1b": dict(gpus=512, global_batch=1536, measured_tflops=138.0,
                               layout=dict(tp=8, pp=2, dp=32)),
    "megatron-gpt-145.6b": dict(gpus=1536, global_batch=2304, measured_tflops=148.0,
                                layout=dict(tp=8, pp=8, dp=24)),
}


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def bench_70b(time_limit: float, workers: int, out: str | None) -> None:
    print(f"load average before: {_load()} ({os.cpu_count()} CPUs)")
    t = time.perf_counter()
    res = search_layouts("llama3-70b", "hgx-h100", {"nodes": "128"}, global_batch=1024,
                         top=10, workers=workers, time_limit=time_limit, out_dir=out,
                         progress=True)
    wall = time.perf_counter() - t
    print(format_search(res))
    c = res.counts
    exact = "exact" if not c["unresolved"] or c.get("exact") else "NOT proven exact"
    print(f"70B on 1,024 H100: {c['enumerated']} enumerated, {c['refused_rules']} refused by "
          f"rules, {c['refused_memory']} by memory, {c['pruned']} pruned, {c['simulated']} "
          f"simulated, {c['unresolved']} unresolved; {wall:.1f} s wall, "
          f"{c['enumerated'] / wall:.1f} layouts/s considered, "
          f"{c['simulated'] / wall:.2f} layouts/s simulated, top 10 {exact}, workers={workers}")
    print(f"load average after: {_load()}")


def bench_published(time_limit: float, workers: int, out: str | None) -> None:
    from simulator.topology import load_topology
    from simulator.workload.llm.layout import Layout
    from simulator.workload.llm.step import simulate_step

    for model, spec in PUBLISHED.items():
        params = {"nodes": str(spec["gpus"] // 8), "gpu": "a100-sxm4-80gb"}
        graph = load_topology("dgx-a100-2node", params)
        pub = Layout(**spec["layout"], virtual_stages=2, pipeline="interleaved", micro_batch=1,
                     global_batch=spec["global_batch"], sequence_parallel=False,
                     recompute="full", precision="fp16")
        t = time.perf_counter()
        row = simulate_step(graph, model, pub).row
        print(f"{model} on {spec['gpus']} A100-80GB, published tp{pub.tp} pp{pub.pp} "
              f"dp{pub.dp} v2 mb1 full recompute: step {row['step_time_s']:.3f} s, "
              f"{row['hardware_tflops_per_gpu']:.1f} TFLOP/s/GPU predicted vs "
              f"{spec['measured_tflops']:.0f} measured ({time.perf_counter() - t:.1f} s)")
        res = search_layouts(model, "dgx-a100-2node", params,
                             global_batch=spec["global_batch"], top=5, workers=workers,
                             time_limit=time_limit, progress=False,
                             space=SearchSpace(precision="fp16"),
                             out_dir=None if out is None else f"{out}/{model}")
        print(format_search(res))
        print()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("what", nargs="?", default="all", choices=("70b", "published", "all"))
    p.add_argument("--time-limit", type=float, default=280.0)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("-o", "--output", default=None)
    args = p.parse_args()
    if args.what in ("70b", "all"):
        bench_70b(args.time_limit, args.workers, args.output and f"{args.output}/llama3-70b")
    if args.what in ("published", "all"):
        bench_published(args.time_limit, args.workers, args.output)


if __name__ == "__main__":
    main()
