"""Wall time of one parameter-server training point on the Python flow network against the
compiled one (:class:`simulator.engine.compiled_network.CompiledFlowNetwork`).

Usage: python benchmarks/bench_ps_network.py [--nodes 8] [--model inception_v3]

The point is the Horovod README's TensorFlow parameter-server setup (``H64`` in
``docs/validation/sources.md``: 4 Pascal GPUs per server over one 40 Gb/s Ethernet port) with
one gRPC server task per machine, variables placed greedily by bytes and pushed one by one
(``tf-per-variable``), as ``clustersim compare`` runs that table's rows, at ``--nodes`` machines.
Both runs happen in this process one after the other (the compiled kernel is built first,
outside the timing), so the ratio is measured within one run. The iteration times must agree
to 1e-6 (checked): the two networks compute the same rates up to rounding, and where symmetric
workers' flows tie to the last bit in one network, rounding can order them the other way in
the other (64 GPUs: 2e-7 relative).
"""

from __future__ import annotations

import argparse
import math
import time

from simulator.engine import runner
from simulator.topology import load_topology
from simulator.workload.frameworks import get_framework
from simulator.workload.sweep import TrainingSpec, run_training_point
from simulator.workload.training import PsConfig


def _point(graph, spec, model: str, gpus: int, compiled: bool) -> tuple[float, float]:
    real = runner.numba_available
    if not compiled:
        runner.numba_available = lambda: False
    try:
        begin = time.perf_counter()
        row = run_training_point(graph, spec, model, "ps", gpus).row
        return time.perf_counter() - begin, float(row["iteration_s"])
    finally:
        runner.numba_available = real


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--model", default="inception_v3")
    args = parser.parse_args(argv)
    graph = load_topology("dgx1-p100", {
        "nodes": args.nodes, "gpus_per_node": 4, "intra": "pcie", "nvlink_pairs": None,
        "nics_per_node": 1, "nic_bandwidth": "40Gbps", "network": "ethernet",
        "transport": "tcp"})
    gpus = 4 * args.nodes
    spec = TrainingSpec(models=(args.model,), gpus=(gpus,), aggregations=("ps",),
                        device="p100-sxm2-16gb", batch_per_gpu=64,
                        framework=get_framework("tf-per-variable"),
                        ps=PsConfig(servers="per_node", placement="colocated", impl="tf-grpc",
                                    sharding="greedy"))
    _point(graph, spec, args.model, 16, compiled=True)       # builds the kernel (cached)
    t_python, it_python = _point(graph, spec, args.model, gpus, compiled=False)
    t_compiled, it_compiled = _point(graph, spec, args.model, gpus, compiled=True)
    assert math.isclose(it_python, it_compiled, rel_tol=1e-6), (it_python, it_compiled)
    print(f"{args.model}, {gpus} GPUs on {args.nodes} machines, parameter servers: Python "
          f"network {t_python:.1f} s, compiled {t_compiled:.1f} s, ratio "
          f"{t_python / t_compiled:.2f}x (iteration {it_python * 1e3:.4f} / "
          f"{it_compiled * 1e3:.4f} ms)")


if __name__ == "__main__":
    main()
