"""Human tables of the study workloads (zero, pipeline, hybrid, time_to_train, llm) for the terminal.

The CSV keeps every column in SI units; these tables pick the columns that answer each study's
question and print them in readable units (GB = 1e9 bytes, ms, minutes), units in the headers.
"""

from __future__ import annotations

import pandas as pd


def _fmt(values, pattern: str, scale: float = 1.0) -> list[str]:
    """Format numbers with ``pattern`` after dividing by ``scale``; missing values as ``-``."""
    return ["-" if pd.isna(v) else format(v / scale, pattern) for v in values]


def zero_table(frame: pd.DataFrame) -> str:
    """Per stage: memory per GPU by term against the GPU's, and the simulated step."""
    return pd.DataFrame({
        "stage": frame["stage"], "prefetch": frame["prefetch"],
        "params_GB": _fmt(frame["param_bytes"], ".2f", 1e9),
        "grads_GB": _fmt(frame["gradient_bytes"], ".2f", 1e9),
        "optim_GB": _fmt(frame["optimizer_bytes"], ".2f", 1e9),
        "activ_GB": _fmt(frame["activation_bytes"], ".2f", 1e9),
        "total_GB": _fmt(frame["total_bytes"], ".2f", 1e9),
        "gpu_GB": _fmt(frame["device_memory_bytes"], ".1f", 1e9),
        "iter_s": _fmt(frame["iteration_s"], ".3f"),
        "exposed_s": _fmt(frame["exposed_comm_s"], ".3f"),
        "sent_GB/gpu": _fmt(frame["bytes_per_gpu_per_step"], ".2f", 1e9),
        "formula_GB/gpu": _fmt(frame["predicted_bytes_per_gpu_per_step"], ".2f", 1e9),
        "J/sample": _fmt(frame["joules_per_sample"], ".0f"),
        "status": frame["status"],
    }).to_string(index=False)


def pipeline_table(frame: pd.DataFrame) -> str:
    """Per schedule and micro-batch count: the simulated bubble next to (p-1)/(m+p-1)."""
    return pd.DataFrame({
        "schedule": frame["schedule"], "stages": frame["stages"],
        "m": frame["micro_batches"], "replicas": frame["replicas"],
        "iter_ms": _fmt(frame["iteration_s"], ".1f", 1e-3),
        "bubble": _fmt(frame["bubble_fraction"], ".4f"),
        "(p-1)/(m+p-1)": _fmt(frame["theoretical_bubble"], ".4f"),
        "unequal_est": _fmt(frame["imbalance_bubble"], ".4f"),
        "in_flight": frame["peak_in_flight"],
        "activ_GB": _fmt(frame["peak_activation_bytes"], ".2f", 1e9),
        "dp_ar_ms": _fmt(frame["dp_allreduce_s"], ".1f", 1e-3),
        "samples/s": _fmt(frame["throughput_samples_s"], ".1f"),
    }).to_string(index=False)


def hybrid_table(frame: pd.DataFrame) -> str:
    """Per sharding: iteration, embedding and dense traffic, the hot server, energy."""
    return pd.DataFrame({
        "sharding": frame["sharding"], "gpus": frame["gpus"], "servers": frame["servers"],
        "iter_ms": _fmt(frame["iteration_s"], ".2f", 1e-3),
        "samples/s": _fmt(frame["throughput_samples_s"], ".0f"),
        "rows/worker": frame["distinct_rows_per_worker"],
        "embedding_MB/it": _fmt(frame["embedding_bytes_per_iteration"], ".1f", 1e6),
        "dense_MB/it": _fmt(frame["dense_bytes_per_iteration"], ".1f", 1e6),
        "hot_server": _fmt(frame["hot_server_share"], ".0%"),
        "ps_link_MB/it": _fmt(frame["ps_link_bytes_per_iteration"], ".1f", 1e6),
        "gpu_link_MB/it": _fmt(frame["max_gpu_link_bytes_per_iteration"], ".1f", 1e6),
        "mJ/sample": _fmt(frame["joules_per_sample"], ".2f", 1e-3),
        "bottleneck": frame["bottleneck_link"],
    }).to_string(index=False)


def time_to_train_table(frame: pd.DataFrame) -> str:
    """Per model, optimizer, form and GPU count: time and energy to train; then the fastest
    GPU count of each (beyond it adding GPUs no longer helps)."""
    shown = pd.DataFrame({
        "model": frame["model"], "optimizer": frame["convergence"], "form": frame["form"],
        "gpus": frame["gpus"], "global_batch": frame["global_batch"],
        "iter_ms": _fmt(frame["iteration_s"], ".1f", 1e-3),
        "efficiency": _fmt(frame["efficiency"], ".1%"),
        "steps": _fmt(frame["steps"], ".0f"), "epochs": _fmt(frame["epochs"], ".1f"),
        "ttt_min": _fmt(frame["time_to_train_s"], ".1f", 60),
        "energy_kWh": _fmt(frame["joules_to_train"], ".1f", 3.6e6),
        "": ["<- fastest" if f else "" for f in frame["fastest"]],
    })
    best = frame[frame["fastest"].astype(bool)]
    lines = [f"  {r.model}, {r.convergence}, {r.form}: {r.gpus} GPUs (global batch "
             f"{r.global_batch}), {r.time_to_train_s / 60:.1f} min"
             for r in best.itertuples(index=False)]
    return (shown.to_string(index=False) + "\n\nfastest GPU count (beyond it adding GPUs no "
            "longer shortens training):\n" + "\n".join(lines))


def llm_table(frame: pd.DataFrame) -> str:
    """Per layout: step time, throughput, TFLOP/s per GPU and MFU, and where the step went
    (seconds of the critical rank); a refused layout shows why instead."""
    def n(value):
        """A degree as written: an integer, or ``?`` where the layout was refused before
        it had one (a blank dp)."""
        return "?" if pd.isna(value) else f"{int(value)}"

    def layout(r):
        return (f"tp{n(r.tp)} cp{n(r.cp)} ep{n(r.ep)} pp{n(r.pp)} dp{n(r.dp)} "
                f"v{n(r.virtual_stages)} mb{n(r.micro_batch)}/{n(r.global_batch)} "
                f"{r.recompute} z{n(r.zero_stage)}")

    table = pd.DataFrame({
        "layout": [layout(r) for r in frame.itertuples()],
        "step_s": _fmt(frame["step_time_s"], ".3f"),
        "tokens/s": _fmt(frame["tokens_per_s"], ".0f"),
        "TFLOP/s/GPU": _fmt(frame["hardware_tflops_per_gpu"], ".1f"),
        "MFU_%": _fmt(frame["mfu_pct"], ".1f"),
        "compute": _fmt(frame["compute_s"], ".3f"),
        "tp": _fmt(frame["exposed_tp_s"], ".3f"),
        "cp": _fmt(frame["exposed_cp_s"], ".3f"),
        "ep": _fmt(frame["exposed_ep_s"], ".3f"),
        "pp": _fmt(frame["exposed_pp_s"], ".3f"),
        "dp": _fmt(frame["exposed_dp_s"], ".3f"),
        "bubble": _fmt(frame["bubble_s"], ".3f"),
        "optim": _fmt(frame["optimizer_s"], ".3f"),
    })
    refused = frame["refused"].fillna("") if "refused" in frame else pd.Series([""] * len(frame))
    text = table.to_string(index=False)
    notes = [f"refused: {layout(r)}: {why}" for r, why in zip(frame.itertuples(), refused) if why]
    return "\n".join([text] + notes)


def jobs_table(frame: pd.DataFrame) -> str:
    """Per job: its time alone and with the others, the slowdown, the links it shares."""
    kind = frame["kind"] if "kind" in frame else pd.Series(["collective"] * len(frame))
    return pd.DataFrame({
        "job": frame["job"], "kind": kind, "collective": frame["collective"],
        "algorithm": frame["algorithm"], "ranks": frame["ranks"],
        "size_MB": _fmt(frame["size_bytes"], ".1f", 1e6), "iters": frame["iterations"],
        "alone_ms": _fmt(frame["alone_s"], ".3f", 1e-3),
        "together_ms": _fmt(frame["together_s"], ".3f", 1e-3),
        "slowdown": _fmt(frame["slowdown"], ".3f"), "shared_links": frame["shared_links"],
    }).to_string(index=False)


#: The table of each study workload.
STUDY_TABLES = {"zero": zero_table, "pipeline": pipeline_table, "hybrid": hybrid_table,
                "time_to_train": time_to_train_table, "llm": llm_table, "jobs": jobs_table}
