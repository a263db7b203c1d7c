"""Real data-parallel training steps with torch, timed: the training rows ``compare`` reads.

:func:`measure_training` trains a small model (``small_cnn``: the model registry's layer table,
built in torch by :func:`build_small_cnn`) on synthetic data, on CPUs, with one process per rank
on loopback or on a :class:`~simulator.measure.network.ShapedNetwork`, for every (aggregation,
rank count):

``ddp``
    ``torch.nn.parallel.DistributedDataParallel`` over gloo (its buckets: 25 MiB, first 1 MiB),
    the gradient all-reduce overlapping backward.
``ps``
    A parameter server over ``torch.distributed``: one more process, the server, holds the
    parameters. Every step each worker sends its flattened gradient to the server, the server
    sums the workers' gradients, takes the SGD step and sends the parameters back (BSP). With
    one worker the server is still there: a one-rank ``ps`` row pays the push and the pull.

One rank of ``ddp`` is plain single-process training, the baseline every ``ddp`` row's speedup
is measured against; ``ps`` rows are measured against the one-worker ``ps`` row, as a training
table's speedups are against its own 1-GPU row.

Each run first times ``compute`` steps (forward, backward, optimizer step, no communication)
with all ranks running them at once, then the training steps. So each row says what the ranks'
compute costs *while they share this machine's cores*: on 2 cores, 4 single-threaded ranks get
about half a core each, and their compute takes about twice as long as one rank's. That is a
real effect (compute contention), reported in ``compute_s`` against ``compute_1rank_s`` and
modelled by ``clustersim compare --shared-cores`` (every rank's compute is slowed by
``max(1, ranks x threads / cores)``), not hidden.

Correctness: after training, every DDP rank's parameters equal rank 0's, and every PS worker's
equal the server's (``correct``); a mismatch is an error.

Rows are in the public training-table layout (``train_*.csv``: ``source_id, model, framework,
arch, gpus, throughput_img_s, speedup, ...``) plus what the run measured
(:data:`EXTRA_COLUMNS`).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

from simulator.errors import ConfigError, unknown_name

from . import MeasurementError, require_torch

__all__ = ["AGGREGATIONS", "MODELS", "TRAINING_TABLE_COLUMNS", "EXTRA_COLUMNS",
           "build_small_cnn", "measure_training", "write_training_csv"]

AGGREGATIONS = ("ddp", "ps")
MODELS = ("small_cnn",)
TRAINING_TABLE_COLUMNS = ("source_id", "model", "dataset", "hardware", "framework", "arch",
                          "gpus", "nodes", "gpus_per_node", "precision", "batch_per_gpu",
                          "throughput_img_s", "throughput_unit", "speedup", "efficiency",
                          "derived_fields", "notes")
EXTRA_COLUMNS = ("iteration_s", "iteration_std_s", "compute_s", "compute_1rank_s",
                 "threads_per_rank", "cores", "network", "bandwidth_bytes_per_s",
                 "bucket_bytes", "parameters", "gradient_bytes", "iterations", "correct")
SOURCE = "clustersim measure training"
_MASTER_PORT_SHAPED = 29511
_LEARNING_RATE = 0.01


def build_small_cnn(torch):
    """``small_cnn`` of :func:`simulator.workload.models.small_cnn`, in torch."""
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 8 * 8, 256), nn.ReLU(), nn.Linear(256, 10))


# ---------------------------------------------------------------------------------------------
# Rank side.
# ---------------------------------------------------------------------------------------------

def _batch(torch, batch: int, seed: int):
    generator = torch.Generator().manual_seed(seed)
    images = torch.randn(batch, 3, 32, 32, generator=generator)
    labels = torch.randint(0, 10, (batch,), generator=generator)
    return images, labels


def _step(torch, model, optimizer, images, labels) -> None:
    optimizer.zero_grad(set_to_none=False)
    loss = torch.nn.functional.cross_entropy(model(images), labels)
    loss.backward()
    optimizer.step()


def _timed(fn, count: int) -> list[float]:
    times = []
    for _ in range(count):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def _rank(config: dict, rank: int) -> dict:
    """One rank of one run: compute-only steps, then training steps; return the timings."""
    from datetime import timedelta

    torch = require_torch()
    torch.set_num_threads(config["threads"])
    torch.manual_seed(0)
    workers, world, kind = config["workers"], config["world"], config["aggregation"]
    model = build_small_cnn(torch)
    images, labels = _batch(torch, config["batch"], seed=rank)
    distributed = world > 1
    if distributed:
        import torch.distributed as dist

        dist.init_process_group("gloo", init_method=f"tcp://{config['master_addr']}:"
                                f"{config['port']}", rank=rank, world_size=world,
                                timeout=timedelta(seconds=config["timeout_s"]))
    server = kind == "ps" and rank == workers
    optimizer = torch.optim.SGD(model.parameters(), lr=_LEARNING_RATE)
    local = lambda: _step(torch, model, optimizer, images, labels)  # noqa: E731
    compute = []
    if not server:
        for _ in range(config["warmup"]):
            local()
    if distributed:
        dist.barrier()
    if not server:
        compute = _timed(local, config["compute_iterations"])
    if distributed:
        dist.barrier()
    if kind == "ddp" and distributed:
        net = torch.nn.parallel.DistributedDataParallel(model)
        optimizer = torch.optim.SGD(net.parameters(), lr=_LEARNING_RATE)
        step = lambda: _step(torch, net, optimizer, images, labels)  # noqa: E731
    elif kind == "ps":
        step = _ps_step(torch, dist, model, images, labels, rank, workers)
    else:
        step = local
    for _ in range(config["warmup"]):
        step()
    if distributed:
        dist.barrier()
    start = time.perf_counter()
    times = _timed(step, config["iterations"])
    total = time.perf_counter() - start
    correct = True
    if distributed:
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        reference = flat.clone()
        dist.broadcast(reference, src=workers if kind == "ps" else 0)
        correct = bool(torch.equal(flat, reference))
        dist.barrier()
        dist.destroy_process_group()
    return {"rank": rank, "server": server, "times_s": times, "total_s": total,
            "compute_s": compute, "correct": correct,
            "parameters": sum(p.numel() for p in model.parameters())}


def _ps_step(torch, dist, model, images, labels, rank: int, workers: int):
    """One BSP parameter-server step, as the worker or (rank == workers) the server."""
    params = list(model.parameters())
    flat = torch.cat([p.detach().reshape(-1) for p in params])
    if rank == workers:
        received = [torch.empty_like(flat) for _ in range(workers)]

        def serve():
            for handle in [dist.irecv(buf, src=w) for w, buf in enumerate(received)]:
                handle.wait()
            total = torch.stack(received).sum(dim=0)
            flat.sub_(_LEARNING_RATE / workers * total)
            for handle in [dist.isend(flat, dst=w) for w in range(workers)]:
                handle.wait()
            _unflatten(flat, params)
        return serve

    def work():
        for p in params:
            p.grad = None
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        grads = torch.cat([p.grad.reshape(-1) for p in params])
        dist.send(grads, dst=workers)
        dist.recv(flat, src=workers)
        _unflatten(flat, params)
    return work


def _unflatten(flat, params) -> None:
    offset = 0
    for p in params:
        n = p.numel()
        p.data.copy_(flat[offset:offset + n].view_as(p))
        offset += n


def _rank_main(argv: Sequence[str]) -> int:
    config_path, rank = argv[0], int(argv[1])
    config = json.loads(Path(config_path).read_text(encoding="utf-8"))
    result = _rank(config, rank)
    out = Path(config["result_dir"]) / f"rank{rank}.json"
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(result), encoding="utf-8")
    os.replace(tmp, out)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


# ---------------------------------------------------------------------------------------------
# Parent side.
# ---------------------------------------------------------------------------------------------

def _check(ranks, aggregations, model, batch, iterations, warmup, threads, network, bandwidth):
    ranks = [int(r) for r in ranks]
    if not ranks or min(ranks) < 1:
        raise ConfigError(f"ranks must be integers >= 1, got {ranks}")
    for kind in aggregations:
        if kind not in AGGREGATIONS:
            raise unknown_name("measured aggregation", kind, AGGREGATIONS)
    if model not in MODELS:
        raise unknown_name("measured model", model, MODELS)
    for what, value in (("batch", batch), ("iterations", iterations), ("threads", threads)):
        if not isinstance(value, int) or value < 1:
            raise ConfigError(f"{what} must be an integer >= 1, got {value!r}")
    if not isinstance(warmup, int) or warmup < 0:
        raise ConfigError(f"warmup must be an integer >= 0, got {warmup!r}")
    if network not in ("loopback", "shaped"):
        raise unknown_name("network", network, ("loopback", "shaped"))
    if network == "loopback" and bandwidth is not None:
        raise ConfigError("bandwidth applies to network 'shaped' only (loopback is not shaped)")
    baseline = {"ddp": 1, "ps": 1}
    return sorted(set(ranks) | {baseline[k] for k in aggregations})


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:   # not Linux
        return os.cpu_count() or 1


def measure_training(ranks: Sequence[int] = (1, 2, 4), aggregations: Sequence[str] = AGGREGATIONS,
                     model: str = "small_cnn", batch: int = 32, iterations: int = 10,
                     warmup: int = 2, threads: int = 1, network: str = "loopback",
                     bandwidth: float | None = None, timeout_s: float = 600.0,
                     topology_out=None):
    """Train ``model`` with every aggregation on every rank count; one row each.

    Returns a pandas DataFrame with :data:`TRAINING_TABLE_COLUMNS` + :data:`EXTRA_COLUMNS`.
    ``topology_out`` (shaped only) receives the built network as a topology YAML with one
    host per process of the largest run (workers, then the server).
    """
    import pandas as pd

    counts = _check(ranks, aggregations, model, batch, iterations, warmup, threads, network,
                    bandwidth)
    if topology_out is not None and network != "shaped":
        raise ConfigError("topology_out needs network 'shaped' (loopback has no topology)")
    largest = max(counts) + (1 if "ps" in aggregations else 0)
    runs = [(kind, n) for kind in aggregations for n in counts]
    if network == "shaped":
        from .network import DEFAULT_BANDWIDTH_BYTES_PER_S

        bandwidth = DEFAULT_BANDWIDTH_BYTES_PER_S if bandwidth is None else float(bandwidth)
    deadline = time.monotonic() + timeout_s
    base = {"batch": batch, "iterations": iterations, "warmup": warmup, "threads": threads,
            "compute_iterations": max(3, iterations // 2)}
    results = {}
    if network == "shaped":
        from .network import ShapedNetwork, measure_rtt, write_text_atomic

        with ShapedNetwork(largest, bandwidth) as net:
            text = net.topology_yaml(rtt_s=measure_rtt(net, 0, 1)) if largest > 1 else None
            for kind, n in runs:
                results[kind, n] = _run(base, kind, n, deadline, net)
        if topology_out is not None and text is not None:
            write_text_atomic(topology_out, text)
    else:
        for kind, n in runs:
            results[kind, n] = _run(base, kind, n, deadline, None)
    rows = _rows(results, counts, aggregations, model, batch, threads, network, bandwidth)
    frame = pd.DataFrame(rows, columns=list(TRAINING_TABLE_COLUMNS + EXTRA_COLUMNS))
    if not frame["correct"].all():
        bad = frame.loc[~frame["correct"], ["arch", "gpus"]].to_dict("records")
        raise MeasurementError(f"ranks ended with different parameters in {bad}")
    return frame


def _run(base: dict, kind: str, workers: int, deadline: float, net) -> list[dict]:
    """Start the processes of one run (workers, plus the server for ps) and collect them."""
    from .collectives import _collect, _env, _free_port, _read_results, _write_config

    world = workers + (1 if kind == "ps" else 0)
    left = deadline - time.monotonic()
    if left <= 0:
        raise MeasurementError("the training measurement ran out of time (--timeout)")
    with tempfile.TemporaryDirectory(prefix="csim-train-") as tmp:
        config = {**base, "aggregation": kind, "workers": workers, "world": world,
                  "timeout_s": max(30.0, left), "result_dir": tmp}
        if net is not None:
            from .network import RANK_IFNAME

            config.update(master_addr=net.address(0), port=_MASTER_PORT_SHAPED)
            env = _env(RANK_IFNAME)
        else:
            config.update(master_addr="127.0.0.1", port=_free_port())
            env = _env("lo")
        path = _write_config(config, tmp)
        argv = lambda r: [sys.executable, "-m", "simulator.measure.training", path, str(r)]  # noqa: E731
        procs, logs, files = [], [], []
        try:
            import subprocess

            for rank in range(world):
                log = Path(tmp) / f"rank{rank}.log"
                files.append(open(log, "w"))
                logs.append(log)
                if net is not None:
                    procs.append(net.run_in_namespace(rank, argv(rank), env=env,
                                                      stdout=files[-1], stderr=subprocess.STDOUT))
                else:
                    procs.append(subprocess.Popen(argv(rank), env=env, stdout=files[-1],
                                                  stderr=subprocess.STDOUT))
            _collect(procs, logs, left)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait(timeout=10)
            for f in files:
                f.close()
        return _read_results(tmp, world)


def _rows(results, counts, aggregations, model, batch, threads, network, bandwidth):
    import torch

    cores = _cores()
    hardware = (f"this machine: {cores} CPU core(s), one process per rank ({threads} thread(s) "
                f"each), " + ("loopback" if network == "loopback" else
                              f"shaped star, {bandwidth * 8 / 1e6:g} Mbit/s per link (tc tbf)"))
    framework = {"ddp": f"PyTorch {torch.__version__} DistributedDataParallel (gloo)",
                 "ps": f"PyTorch {torch.__version__} torch.distributed parameter server "
                       f"(one dedicated server process, BSP)"}
    one_rank = statistics.median(next(r for r in results[aggregations[0], 1] if not r["server"])
                       ["compute_s"])
    rows = []
    for kind in aggregations:
        base_rate = None
        for n in counts:
            ranks = [r for r in results[kind, n] if not r["server"]]
            per_iteration = [max(ts) for ts in zip(*(r["times_s"] for r in ranks))]
            iteration = max(r["total_s"] for r in ranks) / len(per_iteration)
            std = statistics.pstdev(per_iteration)
            rate = n * batch / iteration
            base_rate = rate if n == 1 else base_rate
            speedup = rate / base_rate
            params = ranks[0]["parameters"]
            rows.append({
                "source_id": SOURCE, "model": model, "dataset": "synthetic 32x32x3, 10 classes",
                "hardware": hardware, "framework": framework[kind],
                "arch": "allreduce" if kind == "ddp" else "ps", "gpus": n, "nodes": n,
                "gpus_per_node": 1, "precision": "FP32", "batch_per_gpu": batch,
                "throughput_img_s": rate, "throughput_unit": "samples/s", "speedup": speedup,
                "efficiency": speedup / n,
                "derived_fields": "speedup,efficiency (from throughputs in same table)",
                "notes": f"{len(per_iteration)} timed iterations after warm-up; iteration = "
                         f"wall time of the timed iterations / count",
                "iteration_s": iteration, "iteration_std_s": std,
                "compute_s": statistics.median([statistics.median(r["compute_s"]) for r in ranks]),
                "compute_1rank_s": one_rank, "threads_per_rank": threads, "cores": cores,
                "network": network,
                "bandwidth_bytes_per_s": math.nan if bandwidth is None else bandwidth,
                "bucket_bytes": 25 << 20 if kind == "ddp" else 0, "parameters": params,
                "gradient_bytes": 4 * params, "iterations": len(per_iteration),
                "correct": all(r["correct"] for r in results[kind, n])})
    return rows


def write_training_csv(frame, path) -> Path:
    """Write measured training rows to ``path`` atomically."""
    from ..report.output import write_text

    return write_text(Path(path), frame.to_csv(index=False, float_format="%.6g",
                                               lineterminator="\n"))


if __name__ == "__main__":
    sys.exit(_rank_main(sys.argv[1:]))
