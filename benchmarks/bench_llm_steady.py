"""Wall time of one LLM training step simulated micro-batch by micro-batch against the same step
extended from its proven steady state (simulator/workload/llm/steady.py), in one run.

Each shape is simulated both ways in this process, one after the other; the ratio of the two
wall times is the speed-up, and the largest relative difference between the two rows' numbers
shows they agree. Read ratios, not absolute times (the machines are noisy).

    python benchmarks/bench_llm_steady.py [quick|all|overlap]
        # quick: ~1 min; all: ~35 min; overlap: ~50 min

``overlap`` is the DGX-H100 Qwen3-235B-A22B recipe with its overlapped expert all-to-alls,
which has no exact period: extended at ``--steady-tolerance 1e-4`` (the largest relative
difference is then the extension's, next to the drift its note states).
"""

from __future__ import annotations

import math
import sys
import time

SHAPES = {
    "qwen3-30b-h100": dict(model="qwen3-30b-a3b", topology="hgx-h100", params={"nodes": "2"},
                           layout=dict(ep=16, dp=16, micro_batch=1, global_batch=1024,
                                       precision="fp8", distributed_optimizer=True,
                                       main_grads="bf16")),
    "gpt-oss-h100": dict(model="gpt-oss-120b", topology="hgx-h100", params={"nodes": "8"},
                         layout=dict(pp=4, ep=8, dp=16, micro_batch=1, global_batch=1280,
                                     distributed_optimizer=True, main_grads="bf16")),
    "llama3-70b-pp4": dict(model="llama3-70b", topology="hgx-h100", params={"nodes": "32"},
                           layout=dict(tp=4, pp=4, dp=16, micro_batch=1, global_batch=2048,
                                       sequence_parallel=True, distributed_optimizer=True)),
}
LONG = {
    # NVIDIA's DGX-H100 Qwen3-235B-A22B recipe (train_llm_nvidia_dgxh100_moe.csv), 512
    # micro-batches: every one of 256 ranks simulated, 32-rank all-to-alls in every layer
    "qwen3-235b-h100": dict(model="qwen3-235b-a22b", topology="hgx-h100",
                            params={"nodes": "32"},
                            layout=dict(tp=2, pp=8, virtual_stages=4, pipeline="interleaved",
                                        ep=32, expert_tp=1, dp=16, micro_batch=1,
                                        global_batch=8192, precision="fp8",
                                        sequence_parallel=True, distributed_optimizer=True,
                                        main_grads="bf16")),
}


OVERLAP = {
    # the same recipe exactly as `compare` builds its row (train_llm_nvidia_dgxh100_moe.csv):
    # moe_a2a_overlap on, FP8 current scaling; periodic only to ~1e-5
    "qwen3-235b-h100-overlap": dict(
        model="qwen3-235b-a22b", topology="hgx-h100", params={"nodes": "32"},
        layout=dict(tp=2, pp=8, virtual_stages=4, pipeline="interleaved", ep=32, expert_tp=1,
                    ep_overlap=True, dp=16, micro_batch=1, global_batch=8192, precision="fp8",
                    fp8_recipe="tensorwise", sequence_parallel=True, zero_stage=1,
                    main_grads="bf16"),
        steady_tolerance=1e-4),
}


def run(spec: dict) -> dict:
    from simulator.topology import load_topology
    from simulator.workload.llm.layout import Layout
    from simulator.workload.llm.steady import TOLERANCE
    from simulator.workload.llm.step import simulate_step

    graph = load_topology(spec["topology"], spec["params"])
    layout = Layout(**spec["layout"])
    tolerance = spec.get("steady_tolerance", TOLERANCE)
    out = {}
    for extrapolate in (True, False):
        t = time.perf_counter()
        r = simulate_step(graph, spec["model"], layout, extrapolate=extrapolate,
                          steady_tolerance=tolerance)
        out[extrapolate] = (time.perf_counter() - t, r)
    (fast_s, fast), (full_s, full) = out[True], out[False]
    diff = max((abs(fast.row[k] - v) / abs(v) for k, v in full.row.items()
                if isinstance(v, float) and v and not math.isnan(v)), default=0.0)
    return {"micro_batches": full.row["micro_batches"], "window": str(fast.steady),
            "fast_s": fast_s, "full_s": full_s, "ratio": full_s / fast_s, "diff": diff,
            "step_time_s": full.row["step_time_s"], "drift_s": fast.steady_drift_s,
            "step_error_s": fast.row["step_time_s"] - full.row["step_time_s"]}


def main(argv) -> None:
    which = argv[1] if len(argv) > 1 else "quick"
    shapes = {"quick": SHAPES, "all": dict(SHAPES, **LONG), "overlap": OVERLAP}.get(which)
    if shapes is None:
        raise SystemExit(f"unknown set {which!r}; valid: quick, all, overlap")
    for name, spec in shapes.items():
        r = run(spec)
        print(f"{name}: {r['micro_batches']} micro-batches, simulated step "
              f"{r['step_time_s']:.4f} s; every micro-batch {r['full_s']:.1f} s, extended from "
              f"{r['window']} {r['fast_s']:.1f} s: {r['ratio']:.1f}x; largest relative "
              f"difference of the row {r['diff']:.1e} (step time off by "
              f"{r['step_error_s']:.2g} s, stated drift {r['drift_s']:.2g} s)", flush=True)


if __name__ == "__main__":
    main(sys.argv)
