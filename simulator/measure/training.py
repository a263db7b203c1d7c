"""Real data-parallel training steps with torch, timed: the training rows ``compare`` reads.

:func:`measure_training` trains a small model on synthetic data (seeded ``torch.Generator``,
cross-entropy loss, plain SGD) on CPUs, one process per rank, on loopback or on a
:class:`~simulator.measure.network.ShapedNetwork`, for every (aggregation, rank count). The
processes are started, watched and killed by the helpers of
:mod:`simulator.measure.collectives` (rendezvous over TCP at rank 0's address, a wall-clock
deadline, on any failure the other ranks are killed and the failing rank's last output line is
the error).

Models: ``small_cnn`` (the model registry's layer table, built in torch by
:func:`build_small_cnn`: two 3x3 convolutions and two fully connected layers on 32x32x3 images,
1.07 M parameters, 4.3 MB of fp32 gradient: enough that communication matters at 200 Mbit/s)
and ``mlp`` (:func:`build_mlp`, 1.71 M parameters, torch only: ``compare`` skips it).

``ddp``
    ``torch.nn.parallel.DistributedDataParallel`` over gloo (buckets of ``bucket_bytes``,
    25 MiB by default, first 1 MiB), the gradient all-reduce overlapping backward.
``ps``
    A parameter server over ``torch.distributed``: one more process, the server (the last rank
    of the process group), holds the parameters. Every step each worker sends its flattened
    gradient to the server (one tensor), the server sums the workers' gradients, takes the SGD
    step with their mean and sends the parameters back, and the workers copy them in (BSP).
    With one worker the server is still there: a one-rank ``ps`` row pays the push and the
    pull.

One rank of ``ddp`` is plain single-process training, the baseline of every ``ddp`` row's
speedup; ``ps`` rows are measured against the one-worker ``ps`` row, as a training table's
speedups are against its own 1-GPU row (and as ``compare`` anchors them). The plain one-rank
step is ``compute_1rank_s`` in every row, so a speedup against plain training is
``throughput / (batch / compute_1rank_s)``.

Compute under contention: each run first times as many compute-only steps (forward, backward,
optimizer step, no communication; after as many warm-up steps) as it then trains, with all ranks
running them at once, in the processes that then train, and restores the initial parameters. So each row says what the ranks' compute costs *while they
share this machine's cores*: on 2 cores, 4 single-threaded ranks get about half a core each and
compute about twice as long as one rank alone. That is real (compute contention), reported as
``compute_s`` (median over the ranks) against ``compute_1rank_s``, with the ``cores`` and
``threads_per_rank`` it came from, and modelled by ``clustersim compare --shared-cores`` (every
rank's compute is slowed by ``max(1, ranks x threads / cores)``); ``comm_s = iteration_s -
compute_s`` estimates what communication (and the server) add to a step.

Timing: an iteration is the slowest worker's step (workers are in lock step: DDP's all-reduce
and the server's BSP round synchronise them); ``iteration_s`` is the median over ``iterations``
timed steps after ``warmup`` untimed ones, pooled over ``repeats`` runs with fresh processes,
and ``iteration_std_s`` their standard deviation. Throughput is ``ranks x batch /
iteration_s``, speedup the throughput over the 1-rank row's, efficiency speedup / ranks.

Correctness: after training, every DDP rank's parameters equal rank 0's, and every PS worker's
equal the server's, bit for bit (``correct``); a mismatch is an error.

Rows are in the public training-table layout (:data:`TRAINING_TABLE_COLUMNS`, as
``/work/shared/measurements/train_*.csv``) plus what the run measured (:data:`EXTRA_COLUMNS`).
"""

from __future__ import annotations

import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

from simulator.errors import ConfigError, unknown_name

from . import MeasurementError, available_cpus, require_torch

__all__ = ["AGGREGATIONS", "DEFAULT_BUCKET_BYTES", "EXTRA_COLUMNS", "MODELS",
           "TRAINING_TABLE_COLUMNS", "build_mlp", "build_small_cnn", "measure_training",
           "write_training_csv"]

AGGREGATIONS = ("ddp", "ps")
MODELS = ("mlp", "small_cnn")
NETWORKS = ("loopback", "shaped")
#: DistributedDataParallel's default ``bucket_cap_mb`` (25 MiB).
DEFAULT_BUCKET_BYTES = 25 << 20
TRAINING_TABLE_COLUMNS = ("source_id", "model", "dataset", "hardware", "framework", "arch",
                          "gpus", "nodes", "gpus_per_node", "precision", "batch_per_gpu",
                          "throughput_img_s", "throughput_unit", "speedup", "efficiency",
                          "derived_fields", "notes")
EXTRA_COLUMNS = ("iteration_s", "iteration_std_s", "compute_s", "compute_1rank_s", "comm_s",
                 "threads_per_rank", "cores", "network", "bandwidth_bytes_per_s",
                 "bucket_bytes", "parameters", "gradient_bytes", "iterations", "repeats",
                 "correct")
SOURCE = "clustersim measure training"
_MODULE = "simulator.measure.training"   # what every rank process runs (python -m)
_MASTER_PORT_SHAPED = 29511
_LEARNING_RATE = 0.01
_FLOAT32_BYTES = 4


def build_small_cnn(torch):
    """``small_cnn`` of :func:`simulator.workload.models.small_cnn`, in torch."""
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 8 * 8, 256), nn.ReLU(), nn.Linear(256, 10))


def build_mlp(torch):
    """A three-layer perceptron on the same 32x32x3 inputs (1,707,274 parameters)."""
    nn = torch.nn
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 512), nn.ReLU(),
                         nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))


_BUILDERS = {"mlp": build_mlp, "small_cnn": build_small_cnn}


# ---------------------------------------------------------------------------------------------
# Rank side: runs in its own process, one per rank (workers, then the PS server).
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
    times_s = []
    for _ in range(count):
        start = time.perf_counter()
        fn()
        times_s.append(time.perf_counter() - start)
    return times_s


def _barrier(dist) -> None:
    if dist is not None:
        dist.barrier()


def _flat(torch, params):
    return torch.cat([p.detach().reshape(-1) for p in params])


def _unflatten(flat, params) -> None:
    offset = 0
    for p in params:
        n = p.numel()
        p.data.copy_(flat[offset:offset + n].view_as(p))
        offset += n


def _compute_phase(torch, dist, model, step, config: dict, server: bool) -> list[float]:
    """Time ``step`` (no communication) on every worker at once; the parameters are restored
    afterwards, so training starts from the same point on every rank."""
    initial = _flat(torch, model.parameters()).clone()
    times_s = []
    if not server:
        for _ in range(config["warmup"]):
            step()
    _barrier(dist)
    if not server:
        times_s = _timed(step, config["iterations"])
    _barrier(dist)
    _unflatten(initial, list(model.parameters()))
    return times_s


def _ps_step(torch, dist, model, images, labels, rank: int, workers: int):
    """One BSP parameter-server step, as a worker or (rank == workers) as the server."""
    params = list(model.parameters())
    flat = _flat(torch, params)
    if rank == workers:
        received = [torch.empty_like(flat) for _ in range(workers)]

        def serve():
            for handle in [dist.irecv(buf, src=w) for w, buf in enumerate(received)]:
                handle.wait()
            total = torch.stack(received).sum(dim=0)
            flat.sub_(_LEARNING_RATE / workers * total)   # SGD on the workers' mean gradient
            for handle in [dist.isend(flat, dst=w) for w in range(workers)]:
                handle.wait()
            _unflatten(flat, params)
        return serve

    def work():
        for p in params:
            p.grad = None
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        dist.send(torch.cat([p.grad.reshape(-1) for p in params]), dst=workers)
        dist.recv(flat, src=workers)
        _unflatten(flat, params)
    return work


def _training_step(torch, dist, model, images, labels, config: dict, rank: int):
    """The step this rank trains with: DDP, PS worker or server, or plain (one rank)."""
    kind, workers = config["aggregation"], config["workers"]
    if kind == "ps":
        return _ps_step(torch, dist, model, images, labels, rank, workers)
    if dist is None:
        optimizer = torch.optim.SGD(model.parameters(), lr=_LEARNING_RATE)
        return lambda: _step(torch, model, optimizer, images, labels)
    net = torch.nn.parallel.DistributedDataParallel(
        model, bucket_cap_mb=config["bucket_bytes"] / (1 << 20))
    optimizer = torch.optim.SGD(net.parameters(), lr=_LEARNING_RATE)
    return lambda: _step(torch, net, optimizer, images, labels)


def _same_parameters(torch, dist, model, config: dict) -> bool:
    """Whether this rank's parameters equal the reference rank's (PS: the server's)."""
    if dist is None:
        return True
    flat = _flat(torch, model.parameters())
    reference = flat.clone()
    dist.broadcast(reference, src=config["workers"] if config["aggregation"] == "ps" else 0)
    return bool(torch.equal(flat, reference))


def _rank(config: dict, rank: int) -> dict:
    """One rank of one run: compute-only steps, then training steps; return the timings."""
    from datetime import timedelta

    torch = require_torch()
    torch.set_num_threads(config["threads"])
    torch.manual_seed(0)   # the same initial parameters on every rank
    model = _BUILDERS[config["model"]](torch)
    images, labels = _batch(torch, config["batch"], seed=rank)
    server = config["aggregation"] == "ps" and rank == config["workers"]
    dist = None
    if config["world"] > 1:
        import torch.distributed as dist

        dist.init_process_group("gloo", init_method=f"tcp://{config['master_addr']}:"
                                f"{config['port']}", rank=rank, world_size=config["world"],
                                timeout=timedelta(seconds=config["timeout_s"]))
    try:
        plain = torch.optim.SGD(model.parameters(), lr=_LEARNING_RATE)
        compute_s = _compute_phase(
            torch, dist, model, lambda: _step(torch, model, plain, images, labels), config,
            server)
        step = _training_step(torch, dist, model, images, labels, config, rank)
        for _ in range(config["warmup"]):
            step()
        _barrier(dist)
        times_s = _timed(step, config["iterations"])
        correct = _same_parameters(torch, dist, model, config)
        _barrier(dist)
    finally:
        if dist is not None:
            dist.destroy_process_group()
    return {"rank": rank, "server": server, "times_s": times_s, "compute_s": compute_s,
            "correct": correct, "parameters": sum(p.numel() for p in model.parameters())}


def _rank_main(argv: Sequence[str]) -> int:
    from .collectives import _worker_main

    return _worker_main(argv, _rank)


# ---------------------------------------------------------------------------------------------
# Parent side.
# ---------------------------------------------------------------------------------------------

def _positive_int(value, what: str, minimum: int = 1) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ConfigError(f"{what} must be an integer >= {minimum}, got {value!r}")


def _check(ranks, aggregations, model, batch, iterations, warmup, threads, repeats, network,
           bandwidth, bucket_bytes) -> list[int]:
    """Validate the arguments; the sorted rank counts to run (1, the baseline, always)."""
    ranks = list(ranks)
    if not ranks:
        raise ConfigError("ranks must not be empty")
    for count in ranks:
        _positive_int(count, "every rank count")
    if not list(aggregations):
        raise ConfigError("aggregations must not be empty")
    for kind in aggregations:
        if kind not in AGGREGATIONS:
            raise unknown_name("measured aggregation", kind, AGGREGATIONS)
    if model not in MODELS:
        raise unknown_name("measured model", model, MODELS)
    for what, value in (("batch", batch), ("iterations", iterations), ("threads", threads),
                        ("repeats", repeats), ("bucket_bytes", bucket_bytes)):
        _positive_int(value, what)
    _positive_int(warmup, "warmup", minimum=0)
    if network not in NETWORKS:
        raise unknown_name("network", network, NETWORKS)
    if network == "loopback" and bandwidth is not None:
        raise ConfigError("bandwidth applies to network 'shaped' only (loopback is not shaped)")
    return sorted(set(ranks) | {1})


def measure_training(ranks: Sequence[int] = (1, 2, 4), aggregations: Sequence[str] = AGGREGATIONS,
                     model: str = "small_cnn", batch: int = 32, iterations: int = 10,
                     warmup: int = 2, threads: int = 1, network: str = "loopback",
                     bandwidth: float | None = None, timeout_s: float = 600.0,
                     topology_out=None, bucket_bytes: int = DEFAULT_BUCKET_BYTES,
                     repeats: int = 1):
    """Train ``model`` with every aggregation on every rank count; one row each.

    Parameters
    ----------
    ranks : sequence of int
        Worker counts (>= 1); 1, the speedup baseline, is always measured.
    aggregations : sequence of str
        Any of :data:`AGGREGATIONS` (``ps`` adds a server process).
    model : str
        One of :data:`MODELS`.
    batch, iterations, warmup, threads : int
        Samples per rank per step, timed and untimed steps per run, torch threads per rank.
    network : {"loopback", "shaped"}
        ``shaped`` builds a :class:`~simulator.measure.network.ShapedNetwork` (root) with one
        host per process of the largest run.
    bandwidth : float, optional
        Shaped link rate, bytes/s per direction (default 125e6 = 1 Gbit/s); shaped only.
    timeout_s : float
        Wall-clock limit of the whole measurement; the ranks are killed when it passes.
    topology_out : path, optional
        Shaped only: the built network as a topology YAML (workers and the server are hosts).
    bucket_bytes : int
        DDP's bucket cap (``bucket_cap_mb``), bytes.
    repeats : int
        Runs of every (aggregation, ranks) with fresh processes; their timings are pooled.

    Returns
    -------
    pandas.DataFrame
        :data:`TRAINING_TABLE_COLUMNS` + :data:`EXTRA_COLUMNS`, one row per (aggregation,
        ranks).

    Raises
    ------
    ConfigError
        A bad argument, no PyTorch, a shaped network without root or iproute2.
    MeasurementError
        A rank failed, the deadline passed, or the ranks ended with different parameters.
    """
    counts = _check(ranks, aggregations, model, batch, iterations, warmup, threads, repeats,
                    network, bandwidth, bucket_bytes)
    if not isinstance(timeout_s, (int, float)) or not timeout_s > 0:
        raise ConfigError(f"timeout_s must be a number of seconds > 0, got {timeout_s!r}")
    if topology_out is not None and network != "shaped":
        raise ConfigError("topology_out needs network 'shaped' (loopback has no topology)")
    require_torch()
    aggregations = list(dict.fromkeys(aggregations))
    if network == "shaped":
        from .network import DEFAULT_BANDWIDTH_BYTES_PER_S

        bandwidth = DEFAULT_BANDWIDTH_BYTES_PER_S if bandwidth is None else float(bandwidth)
    base = {"model": model, "batch": batch, "iterations": iterations, "warmup": warmup,
            "threads": threads, "bucket_bytes": bucket_bytes}
    runs = [(kind, n) for kind in aggregations for n in counts]
    deadline = time.monotonic() + timeout_s
    if network == "shaped":
        results = _run_shaped(base, runs, repeats, deadline, bandwidth, topology_out)
    else:
        results = _run_all(base, runs, repeats, deadline, None)
    meta = _meta(model, batch, threads, network, bandwidth, bucket_bytes, iterations, warmup,
                 repeats)
    import pandas as pd

    frame = pd.DataFrame(_rows(results, counts, aggregations, meta),
                         columns=list(TRAINING_TABLE_COLUMNS + EXTRA_COLUMNS))
    if not frame["correct"].all():
        bad = frame.loc[~frame["correct"], ["arch", "gpus"]].to_dict("records")
        raise MeasurementError(f"ranks ended with different parameters in {bad}")
    return frame


def _run_all(base: dict, runs, repeats: int, deadline: float, net) -> dict:
    """{(aggregation, workers): [per-rank results of each repeat]}; repeats outermost, so
    slow drift of the machine spreads over every configuration alike."""
    results: dict = {run: [] for run in runs}
    for _ in range(repeats):
        for kind, n in runs:
            results[kind, n].append(_run(base, kind, n, deadline, net))
    return results


def _run_shaped(base: dict, runs, repeats: int, deadline: float, bandwidth: float,
                topology_out) -> dict:
    """Every run inside one shaped network with a host per process of the largest run."""
    from .network import ShapedNetwork, measure_rtt, write_text_atomic

    hosts = max(n + (1 if kind == "ps" else 0) for kind, n in runs)
    with ShapedNetwork(hosts, bandwidth) as net:
        rtt_s = measure_rtt(net, 0, 1) if hosts > 1 else None
        text = net.topology_yaml(rtt_s=rtt_s)
        results = _run_all(base, runs, repeats, deadline, net)
    if topology_out is not None:
        write_text_atomic(topology_out, text)
    return results


def _run(base: dict, kind: str, workers: int, deadline: float, net) -> list[dict]:
    """Start the processes of one run (workers, plus the server for ps) and collect them."""
    from .collectives import _argv, _env, _free_port, _launch, _read_results, _write_config

    world = workers + (1 if kind == "ps" else 0)
    left_s = deadline - time.monotonic()
    if left_s <= 0:
        raise MeasurementError("the training measurement ran out of time (--timeout); "
                               "measure fewer ranks or iterations, or allow more time")
    with tempfile.TemporaryDirectory(prefix="csim-train-") as tmp:
        config = {**base, "aggregation": kind, "workers": workers, "world": world,
                  "timeout_s": max(30.0, left_s), "result_dir": tmp}
        if net is None:
            config.update(master_addr="127.0.0.1", port=_free_port())
            env = _env("lo")
        else:
            from .network import RANK_IFNAME

            config.update(master_addr=net.address(0), port=_MASTER_PORT_SHAPED)
            env = _env(RANK_IFNAME)
        path = _write_config(config, tmp)

        def start(rank, log):
            argv = _argv(path, rank, module=_MODULE)
            if net is None:
                return subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
            return net.run_in_namespace(rank, argv, env=env, stdout=log,
                                        stderr=subprocess.STDOUT)

        _launch(world, left_s, tmp, start, what="the training measurement")
        return _read_results(tmp, world)


def _meta(model, batch, threads, network, bandwidth, bucket_bytes, iterations, warmup,
          repeats) -> dict:
    """What every row of one measurement shares."""
    from . import device_info

    torch = require_torch()
    cores = available_cpus()
    where = ("loopback" if network == "loopback" else
             f"shaped star, {bandwidth * 8 / 1e6:g} Mbit/s per link each way (tc tbf), one "
             f"network namespace per process")
    return {
        "model": model, "batch": batch, "threads": threads, "cores": cores, "network": network,
        "bandwidth": math.nan if bandwidth is None else bandwidth, "bucket_bytes": bucket_bytes,
        "iterations": iterations, "repeats": repeats,
        "hardware": f"this machine: {cores} CPU core(s) ({device_info('cpu')[1]}), one process "
                    f"per rank ({threads} thread(s) each), {where}",
        "framework": {
            "ddp": f"PyTorch {torch.__version__} DistributedDataParallel (gloo)",
            "ps": f"PyTorch {torch.__version__} torch.distributed parameter server "
                  f"(one dedicated server process, BSP)"},
        "notes": f"{iterations} timed steps after {warmup} warm-up, x {repeats} run(s); "
                 f"iteration = median of the slowest worker's step; compute_s = median "
                 f"compute-only step while all ranks compute at once"}


def _median(values) -> float:
    from .timing import summarize

    return summarize(values).median_s


def _row(kind: str, n: int, runs: list[list[dict]], one_rank_s: float, base_rate: float | None,
         meta: dict) -> dict:
    """The row of one (aggregation, workers) from the per-rank results of its repeats."""
    from .timing import summarize

    workers = [[r for r in ranks if not r["server"]] for ranks in runs]
    steps_s = [max(ts) for ranks in workers for ts in zip(*(r["times_s"] for r in ranks))]
    stats = summarize(steps_s)
    compute_s = _median([_median(r["compute_s"]) for ranks in workers for r in ranks])
    rate = n * meta["batch"] / stats.median_s
    speedup = rate / (base_rate or rate)
    params = workers[0][0]["parameters"]
    return {
        "source_id": SOURCE, "model": meta["model"], "dataset": "synthetic 32x32x3, 10 classes",
        "hardware": meta["hardware"], "framework": meta["framework"][kind],
        "arch": "allreduce" if kind == "ddp" else "ps", "gpus": n, "nodes": n,
        "gpus_per_node": 1, "precision": "FP32", "batch_per_gpu": meta["batch"],
        "throughput_img_s": rate, "throughput_unit": "samples/s", "speedup": speedup,
        "efficiency": speedup / n,
        "derived_fields": "speedup,efficiency (from throughputs in same table); comm_s = "
                          "iteration_s - compute_s",
        "notes": meta["notes"], "iteration_s": stats.median_s, "iteration_std_s": stats.std_s,
        "compute_s": compute_s, "compute_1rank_s": one_rank_s,
        "comm_s": stats.median_s - compute_s, "threads_per_rank": meta["threads"],
        "cores": meta["cores"], "network": meta["network"],
        "bandwidth_bytes_per_s": meta["bandwidth"],
        # ps sends the whole gradient as one flat tensor: one bucket of all of it
        "bucket_bytes": meta["bucket_bytes"] if kind == "ddp" else _FLOAT32_BYTES * params,
        "parameters": params, "gradient_bytes": _FLOAT32_BYTES * params,
        "iterations": meta["iterations"], "repeats": meta["repeats"],
        "correct": all(r["correct"] for ranks in runs for r in ranks)}


def _rows(results: dict, counts, aggregations, meta: dict) -> list[dict]:
    # plain one-rank training: ddp's 1-rank run (one process), else ps's single worker's
    # compute-only steps (its server idles in a barrier meanwhile)
    first = ("ddp" if "ddp" in aggregations else aggregations[0], 1)
    one_rank_s = _median([s for ranks in results[first] for r in ranks if not r["server"]
                          for s in r["compute_s"]])
    rows = []
    for kind in aggregations:
        base_rate = None
        for n in counts:   # sorted, 1 first: the baseline of the speedups
            row = _row(kind, n, results[kind, n], one_rank_s, base_rate, meta)
            base_rate = base_rate or row["throughput_img_s"]
            rows.append(row)
    return rows


def write_training_csv(frame, path) -> Path:
    """Write measured training rows to ``path`` atomically (temp file, then rename)."""
    columns = list(TRAINING_TABLE_COLUMNS + EXTRA_COLUMNS)
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ConfigError(f"not a measured training frame: missing columns "
                          f"{', '.join(missing)}")
    from ..report.output import write_text

    return write_text(Path(path), frame.to_csv(index=False, columns=columns,
                                               float_format="%.6g", lineterminator="\n"))


if __name__ == "__main__":
    sys.exit(_rank_main(sys.argv[1:]))
