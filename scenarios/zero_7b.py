"""ZeRO stages 0-3 for a 7B model on 64 A100-80GB (8 DGX A100 nodes): memory, traffic, time.

Run ``python scenarios/zero_7b.py [--out DIR]``: prints the per-GPU memory table (the paper's
Figure 1 formulas at Ψ = 7e9, and the counted GPT-3 6.7B layer table with its activations),
simulates one training step per stage on the topology, and writes ``zero_7b.png``/``.svg``.

Stage 0 (plain data parallelism) needs 16 bytes per parameter, about 107 GB for 6.7B parameters:
it does not fit an 80 GiB GPU and is refused before any simulation. Stages 1-3 fit; stage 3 sends
1.5 times the bytes of the others. On DGX nodes with eight 200 Gb/s NICs each, prefetching hides
nearly all of it behind compute; with one 100 Gb/s Ethernet NIC per node it cannot.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd

from simulator.errors import ConfigError
from simulator.report.plots import _save, plt
from simulator.topology import load_topology
from simulator.topology.devices import get_device
from simulator.workload.zero import (ZERO_STAGES, gpt3_6_7b, simulate_zero, zero_memory,
                                     zero_memory_table)

GPUS = 64
MICRO_BATCH = 1
DEVICE = "a100-sxm4-80gb"


def networks(nodes: int = GPUS // 8) -> dict:
    """``nodes`` DGX A100 with the 80 GB GPU: as built (8 x 200 Gb/s HDR InfiniBand NICs per
    node), and with one 100 Gb/s Ethernet NIC per node instead."""
    base = {"nodes": str(nodes), "gpu": DEVICE}
    return {"8 x 200 Gb/s IB per node": load_topology("dgx-a100-2node", base),
            "1 x 100 Gb/s Ethernet per node": load_topology(
                "dgx-a100-2node", {**base, "nics_per_node": "1", "nic_bandwidth": "100 Gbps",
                                   "network": "ethernet"})}


def paper_table(params: int = 7_000_000_000, gpus: int = GPUS) -> pd.DataFrame:
    """The paper's Figure 1 model-state bytes per GPU, one row per stage."""
    rows = []
    for stage in ZERO_STAGES:
        mem = zero_memory(params, gpus, stage)
        rows.append({"stage": stage, "params": params, "gpus": gpus, **mem.terms()})
    return pd.DataFrame(rows)


def run(graphs: dict | None = None, model=None, gpus: int = GPUS,
        micro_batch: int = MICRO_BATCH, checkpointing: bool = True,
        group_bytes: int = 1_000_000_000):
    """Memory table and simulated steps on every network of ``graphs`` (label -> topology):
    (memory DataFrame, step DataFrame with a ``network`` column, refusals by stage)."""
    graphs = graphs if graphs is not None else networks(max(1, gpus // 8))
    model = model or gpt3_6_7b()
    device = get_device(DEVICE)
    memory = zero_memory_table(model, device, gpus, micro_batch, checkpointing=checkpointing,
                               group_bytes=group_bytes)
    steps, refused = [], {}
    for network, graph in graphs.items():
        for stage in ZERO_STAGES:
            for prefetch in ((True, False) if stage == 3 else (True,)):
                try:
                    row = simulate_zero(graph, model, device, stage, gpus, micro_batch,
                                        prefetch=prefetch, checkpointing=checkpointing,
                                        group_bytes=group_bytes).row
                except ConfigError as err:
                    refused[stage] = str(err)
                    continue
                steps.append({"network": network, **row})
    return memory, pd.DataFrame(steps), refused


def plot(memory: pd.DataFrame, steps: pd.DataFrame, stem: Path) -> list[Path]:
    """Left: stacked per-GPU memory by stage against the GPU's capacity. Right: iteration time
    (compute and exposed communication) and bytes sent per GPU per step."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    stages = memory["stage"].to_numpy()
    bottom = pd.Series(0.0, index=memory.index)
    for column, label in (("param_bytes", "fp16 parameters"), ("gradient_bytes", "fp16 gradients"),
                          ("optimizer_bytes", "optimizer states (K=12)"),
                          ("activation_bytes", "activations")):
        left.bar(stages, memory[column] / 1e9, bottom=bottom / 1e9, label=label)
        bottom = bottom + memory[column]
    capacity = memory["device_memory_bytes"].iloc[0] / 1e9
    left.axhline(capacity, color="black", linestyle="--", linewidth=1)
    left.text(-0.45, capacity * 1.02,
              f"{memory['device'].iloc[0]}: {capacity:.1f} GB ({capacity * 1e9 / 2**30:g} GiB)",
              ha="left", va="bottom", fontsize=8,
              bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1})
    for stage, total, fits in zip(stages, bottom, memory["fits"]):
        left.text(stage, total / 1e9 * 1.01, f"{total / 1e9:.1f} GB" + ("" if fits else
                                                                       "\nrefused"),
                  ha="center", va="bottom", fontsize=8)
    left.set_xticks(stages, [f"stage {s}" for s in stages])
    left.set_ylabel("memory per GPU (GB = 1e9 bytes)")
    left.set_ylim(0, max(bottom.max() / 1e9, capacity) * 1.18)
    left.set_title(f"{memory['model'].iloc[0]} ({memory['params'].iloc[0] / 1e9:.2f}B params) "
                   f"on {memory['gpus'].iloc[0]} GPUs")
    left.legend(fontsize=8, loc="center right")

    configs = steps.drop_duplicates(["stage", "prefetch"])[["stage", "prefetch",
                                                             "bytes_per_gpu_per_step"]]
    labels = [f"stage {s}" + ("" if p else ", no prefetch") + f"\n{b / 1e9:.1f} GB sent/GPU"
              for s, p, b in configs.itertuples(index=False)]
    nets = list(dict.fromkeys(steps["network"]))
    width = 0.8 / len(nets)
    for k, network in enumerate(nets):
        rows = steps[steps["network"] == network]
        x = [i + (k - (len(nets) - 1) / 2) * width for i in range(len(rows))]
        right.bar(x, rows["compute_s"], width, color="tab:gray",
                  label="compute" if k == 0 else None)
        right.bar(x, rows["exposed_comm_s"], width, bottom=rows["compute_s"],
                  color=("tab:red", "tab:orange", "tab:purple")[k % 3],
                  label=f"exposed communication, {network}")
    right.set_xticks(range(len(configs)), labels, fontsize=8)
    right.set_ylabel("iteration time (s)")
    right.set_ylim(0, steps["iteration_s"].max() * 1.35)
    right.set_title(f"one simulated step, micro-batch {steps['micro_batch'].iloc[0]} per GPU, "
                    f"ring collectives")
    right.legend(fontsize=8, loc="upper left")
    fig.suptitle("ZeRO (Rajbhandari et al. 2020): memory per GPU and the cost of sharding")
    fig.tight_layout()
    return _save(fig, stem)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="out/zero_7b", help="output folder")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    pd.set_option("display.width", 160)
    print("Model-state bytes per GPU, the paper's formulas at psi = 7e9, N = 64 (GB = 1e9 B):")
    print((paper_table().set_index("stage")[["param_bytes", "gradient_bytes", "optimizer_bytes",
                                             "model_state_bytes"]] / 1e9).round(4).to_string())
    memory, steps, refused = run()
    print("\nGPT-3 6.7B, micro-batch 1, activation checkpointing (GB = 1e9 B):")
    table = memory.set_index("stage")
    print(pd.concat([(table[["param_bytes", "gradient_bytes", "optimizer_bytes",
                             "activation_bytes", "total_bytes"]] / 1e9).round(3),
                     table[["fits"]]], axis=1).to_string())
    for stage, message in refused.items():
        print(f"\nstage {stage} refused: {message}")
    print("\nSimulated step on 8 DGX A100-80GB nodes (ring collectives):")
    print(steps[["network", "stage", "prefetch", "groups", "iteration_s", "compute_s",
                 "exposed_comm_s",
                 "bytes_per_gpu_per_step", "predicted_bytes_per_gpu_per_step",
                 "bottleneck_link"]].round(4).to_string(index=False))
    paths = plot(memory, steps, Path(args.out) / "zero_7b")
    print(f"\nwrote {', '.join(map(str, paths))} in {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
