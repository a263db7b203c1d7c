"""All-reduce timings with ``torch.distributed``: the library's, and ring, tree and PS by hand.

:func:`measure_collectives` starts one process per rank (``python -m
simulator.measure.collectives``), on loopback or inside the namespaces of a
:class:`~simulator.measure.network.ShapedNetwork` (rendezvous over TCP at rank 0's address,
10.77.0.1), and times an all-reduce of float32 tensors with each algorithm:

``library``
    ``dist.all_reduce``: gloo on a CPU, NCCL on a GPU, the same code. Gloo's CPU all-reduce is a
    ring (reduce-scatter then all-gather between neighbours), so compare it with the simulator's
    ``ring``; NCCL picks ring or tree itself.
``ring``
    Hand-written ring all-reduce (Patarasuk & Yuan 2009): the tensor is cut into ``n`` chunks;
    ``n - 1`` reduce-scatter steps, in which every rank sends one chunk to its right neighbour
    and adds the chunk arriving from its left (``isend``/``irecv``), then ``n - 1`` all-gather
    steps that pass the reduced chunks on. Every rank sends ``2 (n - 1) / n * S`` bytes.
``tree``
    NCCL's binary tree, the very tree of the simulator's ``tree`` algorithm (the parent array
    comes from :func:`simulator.schedules.tree.btree`, whole message, no segments): the tensor
    is reduced up to rank 0 (each rank receives its children's tensors concurrently, adds them,
    sends the sum to its parent), then broadcast down the same edges (``send``/``recv``).
``ps``
    Parameter server: ranks ``0 .. n-1`` are workers and rank ``n`` is a *dedicated* server, so
    PS runs ``n + 1`` processes (and a shaped network gets ``n + 1`` hosts). Every worker pushes
    its tensor to the server, the server sums them, every worker pulls the sum. The server's
    link carries ``n * S`` each way: ``2 n S / B`` in all, ``n`` times a ring's.

Each measured iteration starts with the participants in a barrier (untimed), then every rank
times its own part with :class:`~simulator.measure.timing.Timer`; the iteration's time is the
maximum over the ranks (the collective ends when its last rank is done), and a row reports the
median over ``iterations`` after ``warmup`` untimed ones. Inputs are small integers (rank ``r``
holds ``r + 1 + (i mod 5)`` at index ``i``), so the float32 sum is exact and every rank checks
its result in every iteration; ``correct`` is True only if all did.

Result rows (:data:`MEASURED_COLUMNS`) follow the nccl-tests conventions of
:mod:`simulator.collective`: ``algbw_GBps = size / time / 1e9`` and ``busbw_GBps = algbw x
2 (n - 1) / n`` for all-reduce.

``topology`` holds the path of the topology YAML written for a shaped network
(``topology_out``), else it is empty (a comparison then names the topology itself).
``algorithm`` is ``library`` for the library's own all-reduce; the measurement schema of
:mod:`simulator.measure.schema` accepts only algorithms the simulator has, so
:func:`for_comparison` renames it to what it is (gloo: ``ring``; NCCL: ``auto``, its tuner's
choice) before ``clustersim compare`` reads the rows.

Measured on a 2-core machine (2 workers, 200 Mbit/s links, 1 MiB): library 1.05-1.10x the
bandwidth bound ``2 (n-1)/n S / B``, ring 1.06x, ps 1.035x ``2 n S / B``, run-to-run spread
0.1-3 %; most of the excess is TCP/IP/Ethernet headers (payload is ~95.6 % of the shaped frame
rate). 3 workers, 1 and 4 MiB, against ``clustersim compare`` on the emitted topology: every
algorithm 2-7 % slower than simulated, MAPE 5.1 %. At 1 Gbit/s the same box is CPU-bound (the kernel's veth and tbf work): gloo's ring
reached ~0.73 of the bound for 16 MiB; shape below what the host can push.

Every process runs under a deadline (process-group timeout and a wall-clock limit in the
parent); on any failure the other ranks are killed, and the shaped network is torn down.
"""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from simulator.errors import ConfigError, unknown_name

from . import MeasurementError, require_torch, resolve_device
from .timing import check_counts, summarize

if TYPE_CHECKING:
    import pandas as pd

# pandas and simulator.collective are imported inside the parent-side functions: the worker
# processes import this module too, and each start-up second is paid once per rank.

__all__ = ["ALGORITHMS", "LIBRARY_ALGORITHM", "MEASURED_COLUMNS", "NETWORKS", "expected_time_s",
           "for_comparison", "measure_collectives", "write_measured_csv"]

#: Algorithms :func:`measure_collectives` can time.
ALGORITHMS = ("library", "ring", "tree", "ps")
#: Where the ranks run.
NETWORKS = ("loopback", "shaped")
#: Columns of the measurement rows, in order.
MEASURED_COLUMNS = ("source", "topology", "collective", "algorithm", "gpus", "size_bytes",
                    "time_us", "algbw_GBps", "busbw_GBps", "time_std_us", "iterations",
                    "backend", "device", "network", "bandwidth_bytes_per_s", "correct", "launch")
SOURCE = "clustersim measure"
#: How these measurements issue their calls (:mod:`simulator.library.launch`):
#: ``torch.distributed`` from Python, one process per rank.
LAUNCH = "torch"
_FLOAT32_BYTES = 4
_MASTER_PORT_SHAPED = 29500


def expected_time_s(algorithm: str, ranks: int, size_bytes: int,
                    bandwidth_bytes_per_s: float) -> float:
    """Bandwidth-only time (s) of an all-reduce on a star of full-duplex links, no latency.

    ring and library (gloo's ring): ``2 (n-1)/n * S / B``; ps: ``2 n S / B`` (the server's
    link carries n tensors in, then n out). The tree depends on how many children each level
    has, so it has no single closed form here.
    """
    if algorithm in ("ring", "library"):
        return 2 * (ranks - 1) / ranks * size_bytes / bandwidth_bytes_per_s
    if algorithm == "ps":
        return 2 * ranks * size_bytes / bandwidth_bytes_per_s
    raise ConfigError(f"no closed form for {algorithm!r}; known: ring, library, ps")


# ---------------------------------------------------------------------------------------------
# Worker side: runs in its own process, one per rank.
# ---------------------------------------------------------------------------------------------

def _inputs(torch, numel: int, rank: int, workers: int, device):
    """This rank's input (zeros on the PS server) and the expected sum, both exact in fp32."""
    pattern = (torch.arange(numel, dtype=torch.int64) % 5).to(torch.float32)
    data = pattern + (rank + 1) if rank < workers else torch.zeros(numel)
    expected = pattern * workers + workers * (workers + 1) / 2
    return data.to(device), expected.to(device)


def _ring(dist, buf, rank, n, group, tmp):
    # The receive is posted before the send. Gloo's TCP transport sends a payload only after
    # the peer has announced a matching receive, and announcements share the socket with
    # payloads; with 2 ranks (left == right) a send posted first can put our announcement
    # behind our own payload and serialise the two directions (measured: 2x the ring time).
    chunks = list(buf.tensor_split(n))
    right, left = (rank + 1) % n, (rank - 1) % n
    for step in range(n - 1):  # reduce-scatter: afterwards chunk (rank + 1) % n is complete
        send, recv = chunks[(rank - step) % n], chunks[(rank - step - 1) % n]
        scratch = tmp[:recv.numel()]
        reqs = [dist.irecv(scratch, left, group=group), dist.isend(send, right, group=group)]
        for req in reqs:
            req.wait()
        recv.add_(scratch)
    for step in range(n - 1):  # all-gather: pass the complete chunks around
        send, recv = chunks[(rank + 1 - step) % n], chunks[(rank - step) % n]
        reqs = [dist.irecv(recv, left, group=group), dist.isend(send, right, group=group)]
        for req in reqs:
            req.wait()


def _tree(dist, buf, rank, parents, group, tmps):
    children = [c for c, p in enumerate(parents) if p == rank]
    reqs = [dist.irecv(tmps[i], c, group=group) for i, c in enumerate(children)]
    for req in reqs:
        req.wait()
    for i in range(len(children)):
        buf.add_(tmps[i])
    parent = parents[rank]
    if parent >= 0:
        dist.send(buf, parent, group=group)
        dist.recv(buf, parent, group=group)
    reqs = [dist.isend(buf, c, group=group) for c in children]
    for req in reqs:
        req.wait()


def _ps(dist, buf, rank, workers, tmps):
    server = workers
    if rank == server:
        reqs = [dist.irecv(tmps[w], w) for w in range(workers)]
        for req in reqs:
            req.wait()
        buf.copy_(tmps[0])
        for w in range(1, workers):
            buf.add_(tmps[w])
        reqs = [dist.isend(buf, w) for w in range(workers)]
        for req in reqs:
            req.wait()
    else:
        dist.send(buf, server)
        dist.recv(buf, server)


def _worker(config: dict, rank: int) -> dict:
    """One rank: join the process group, time every algorithm and size, return the samples."""
    from datetime import timedelta

    torch = require_torch()
    import torch.distributed as dist

    from .timing import Timer

    torch.set_num_threads(1)
    workers, world = config["workers"], config["world"]
    if config["device"] == "cuda":
        device = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group(config["backend"],
                            init_method=f"tcp://{config['master_addr']}:{config['port']}",
                            rank=rank, world_size=world,
                            timeout=timedelta(seconds=config["timeout_s"]))
    try:
        # every rank must create every group, members or not
        workers_group = dist.new_group(list(range(workers))) if world > workers else None
        timer = Timer(device)
        results: dict = {}
        for algorithm in config["algorithms"]:
            participants = world if algorithm == "ps" else workers
            group = None if algorithm == "ps" else workers_group
            if rank >= participants:
                continue
            for size in config["sizes"]:
                numel = size // _FLOAT32_BYTES
                data, expected = _inputs(torch, numel, rank, workers, device)
                buf = torch.empty_like(data)
                tmp = torch.empty(-(-numel // workers), device=device)
                children = sum(p == rank for p in config["tree_parents"])
                spares = (workers if rank == workers else 0) if algorithm == "ps" else (
                    children if algorithm == "tree" else 0)
                tmps = [torch.empty_like(data) for _ in range(spares)]
                samples, correct = [], True
                for it in range(config["warmup"] + config["iterations"]):
                    buf.copy_(data)
                    dist.barrier(group=group)
                    timer.start()
                    if algorithm == "library":
                        dist.all_reduce(buf, group=group)
                    elif algorithm == "ring":
                        _ring(dist, buf, rank, workers, group, tmp)
                    elif algorithm == "tree":
                        _tree(dist, buf, rank, config["tree_parents"], group, tmps)
                    else:
                        _ps(dist, buf, rank, workers, tmps)
                    seconds = timer.stop()
                    correct = correct and bool(torch.equal(buf, expected))
                    if it >= config["warmup"]:
                        samples.append(seconds)
                results.setdefault(algorithm, {})[str(size)] = {"times_s": samples,
                                                                "correct": correct}
        dist.barrier()
        return {"rank": rank, "backend": dist.get_backend(), "results": results}
    finally:
        dist.destroy_process_group()


def _worker_main(argv: Sequence[str], work=None) -> int:
    """A rank process: run ``work(config, rank)`` (default: this module's collectives) and
    leave its result as ``rank<r>.json`` in the config's result folder."""
    config_path, rank = argv[0], int(argv[1])
    config = json.loads(Path(config_path).read_text(encoding="utf-8"))
    result = (work or _worker)(config, rank)
    out = Path(config["result_dir"]) / f"rank{rank}.json"
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(result), encoding="utf-8")
    os.replace(tmp, out)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip interpreter teardown of torch (~0.5 s per rank); results are on disk


# ---------------------------------------------------------------------------------------------
# Parent side.
# ---------------------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _check_args(ranks, sizes, algorithms, network, bandwidth, iterations, warmup):
    if not isinstance(ranks, int) or isinstance(ranks, bool) or ranks < 2:
        raise ConfigError(f"ranks must be an integer >= 2, got {ranks!r}")
    sizes = [int(s) for s in sizes] if not isinstance(sizes, (str, bytes)) else None
    if not sizes:
        raise ConfigError("sizes must be a non-empty list of byte counts")
    for size in sizes:
        if size % _FLOAT32_BYTES or size < _FLOAT32_BYTES * ranks:
            raise ConfigError(f"size {size} B must be a multiple of 4 (float32 elements) and at "
                              f"least 4 x ranks = {4 * ranks} B")
    algorithms = list(algorithms)
    if not algorithms:
        raise ConfigError("algorithms must not be empty")
    for algorithm in algorithms:
        if algorithm not in ALGORITHMS:
            raise unknown_name("measured algorithm", algorithm, ALGORITHMS)
    if network not in NETWORKS:
        raise unknown_name("network", network, NETWORKS)
    if network == "loopback" and bandwidth is not None:
        raise ConfigError("bandwidth applies to network 'shaped' only (loopback is not shaped)")
    check_counts(iterations, warmup)
    return sizes, list(dict.fromkeys(algorithms))


def _deadline_s(world, sizes, algorithms, iterations, warmup, bandwidth) -> float:
    """A generous wall-clock limit: start-up plus 3x the bandwidth-bound time of every run."""
    rate = bandwidth or 200e6  # loopback: assume a slow 200 MB/s to stay generous
    busy = sum(2 * world * size / rate for size in sizes) * len(algorithms)
    return 60.0 + 3.0 * (iterations + warmup + 1) * busy


def _collect(procs, logs, deadline_s: float, what: str = "the collective measurement") -> None:
    """Wait for every rank; on a failure or the deadline kill the rest and raise."""
    end = time.monotonic() + deadline_s
    while True:
        codes = [p.poll() for p in procs]
        failed = [r for r, c in enumerate(codes) if c not in (None, 0)]
        if failed or time.monotonic() > end:
            for p in procs:
                if p.poll() is None:
                    p.kill()
            for p in procs:
                p.wait(timeout=10)
            if failed:
                rank = failed[0]
                lines = Path(logs[rank]).read_text(errors="replace").strip().splitlines()
                last = lines[-1].strip() if lines else "no output"
                raise MeasurementError(f"rank {rank} failed (exit {codes[rank]}): {last}")
            raise MeasurementError(f"{what} did not finish in {deadline_s:.0f} s; the ranks "
                                   f"were killed")
        if all(c == 0 for c in codes):
            return
        time.sleep(0.02)


def _rows(results, workers, sizes, algorithms, meta) -> list[dict]:
    from simulator.collective import bus_factor

    rows = []
    for algorithm in algorithms:
        for size in sizes:
            per_rank = [r["results"][algorithm][str(size)] for r in results
                        if algorithm in r["results"]]
            iteration_max = [max(ts) for ts in zip(*(p["times_s"] for p in per_rank))]
            stats = summarize(iteration_max)
            algbw = size / stats.median_s / 1e9 if stats.median_s > 0 else math.inf
            rows.append({
                "source": SOURCE, "topology": meta["topology"], "collective": "allreduce",
                "algorithm": algorithm, "gpus": workers, "size_bytes": size,
                "time_us": stats.median_s * 1e6, "algbw_GBps": algbw,
                "busbw_GBps": algbw * bus_factor("allreduce", workers),
                "time_std_us": stats.std_s * 1e6, "iterations": stats.iterations,
                "backend": meta["backend"], "device": meta["device"], "network": meta["network"],
                "bandwidth_bytes_per_s": meta["bandwidth"],
                "correct": all(p["correct"] for p in per_rank), "launch": LAUNCH})
    return rows


def measure_collectives(ranks: int, sizes: Sequence[int],
                        algorithms: Sequence[str] = ALGORITHMS, backend: str | None = None,
                        network: str = "loopback", bandwidth: float | None = None,
                        iterations: int = 10, warmup: int = 2, device="cpu",
                        timeout_s: float | None = None, topology_out=None) -> pd.DataFrame:
    """Time all-reduce algorithms over ``ranks`` processes; one row per algorithm and size.

    Parameters
    ----------
    ranks : int
        Worker ranks n >= 2 (``ps`` adds a dedicated server rank: n + 1 processes).
    sizes : sequence of int
        Message sizes in bytes (multiples of 4: float32 tensors).
    algorithms : sequence of str
        Any of :data:`ALGORITHMS`.
    backend : str, optional
        torch.distributed backend; default gloo on a CPU, nccl on a GPU.
    network : {"loopback", "shaped"}
        ``shaped`` builds a :class:`~simulator.measure.network.ShapedNetwork` (root needed)
        with one host per process.
    bandwidth : float, optional
        Shaped link rate, bytes/s per direction (default 125e6 = 1 Gbit/s); shaped only.
    iterations, warmup : int
        Timed and untimed iterations per algorithm and size.
    device : str
        ``cpu`` or ``cuda`` (one GPU per process; rank r uses ``cuda:(r mod count)``).
    timeout_s : float, optional
        Wall-clock limit for all ranks; default generous, from sizes and bandwidth.
    topology_out : path, optional
        Shaped only: write the built network as a topology preset YAML there (link latency
        from a measured round trip).

    Returns
    -------
    pandas.DataFrame
        Columns :data:`MEASURED_COLUMNS`.
    """
    from simulator.schedules.tree import btree

    sizes, algorithms = _check_args(ranks, sizes, algorithms, network, bandwidth, iterations,
                                    warmup)
    dev = resolve_device(device)
    backend = backend or ("nccl" if dev.type == "cuda" else "gloo")
    world = ranks + 1 if "ps" in algorithms else ranks
    if dev.type == "cuda":
        count = require_torch().cuda.device_count()
        if world > count and backend == "nccl":
            raise ConfigError(f"nccl needs one GPU per process: {world} processes, {count} "
                              f"GPU(s) here")
    if topology_out is not None and network != "shaped":
        raise ConfigError("topology_out needs network 'shaped' (loopback has no topology)")
    if network == "shaped":
        from .network import DEFAULT_BANDWIDTH_BYTES_PER_S

        bandwidth = DEFAULT_BANDWIDTH_BYTES_PER_S if bandwidth is None else float(bandwidth)
    deadline = timeout_s or _deadline_s(world, sizes, algorithms, iterations, warmup, bandwidth)
    with tempfile.TemporaryDirectory(prefix="csim-measure-") as tmp:
        config = {"workers": ranks, "world": world, "sizes": sizes, "algorithms": algorithms,
                  "tree_parents": btree(ranks).parent.tolist(),
                  "iterations": iterations, "warmup": warmup, "backend": backend,
                  "device": dev.type, "timeout_s": max(30.0, deadline), "result_dir": tmp}
        if network == "shaped":
            results, topology = _run_shaped(config, world, bandwidth, deadline, tmp,
                                            topology_out)
        else:
            config.update(master_addr="127.0.0.1", port=_free_port())
            results, topology = _run_loopback(config, world, deadline, tmp), ""
    import pandas as pd

    meta = {"topology": topology, "backend": results[0]["backend"], "device": dev.type,
            "network": network, "bandwidth": math.nan if bandwidth is None else bandwidth}
    return pd.DataFrame(_rows(results, ranks, sizes, algorithms, meta),
                        columns=list(MEASURED_COLUMNS))


def _env(ifname: str) -> dict:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    env.update(OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME=ifname, NCCL_SOCKET_IFNAME=ifname)
    return env


def _argv(config_path: str, rank: int, module: str = "simulator.measure.collectives") -> list[str]:
    return [sys.executable, "-m", module, config_path, str(rank)]


def _write_config(config: dict, tmp: str) -> str:
    path = Path(tmp) / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    return str(path)


def _read_results(tmp: str, world: int) -> list[dict]:
    return [json.loads((Path(tmp) / f"rank{r}.json").read_text(encoding="utf-8"))
            for r in range(world)]


def _launch(world: int, deadline_s: float, tmp: str, start,
            what: str = "the collective measurement", started=None) -> None:
    """Start ranks ``0 .. world-1`` with ``start(rank, log_file) -> Popen`` (output to
    ``rank<r>.log`` in ``tmp``), call ``started(procs, logs)`` if given (a start barrier; it
    returns the seconds left of ``deadline_s``), and :func:`_collect` them; no rank outlives
    the call."""
    procs, logs, files = [], [], []
    try:
        for rank in range(world):
            log = Path(tmp) / f"rank{rank}.log"
            files.append(open(log, "w"))
            logs.append(log)
            procs.append(start(rank, files[-1]))
        if started is not None:
            deadline_s = started(procs, logs)
        _collect(procs, logs, deadline_s, what)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
        for f in files:
            f.close()


def _run_loopback(config, world, deadline, tmp) -> list[dict]:
    path, env = _write_config(config, tmp), _env("lo")
    _launch(world, deadline, tmp, lambda rank, log: subprocess.Popen(
        _argv(path, rank), env=env, stdout=log, stderr=subprocess.STDOUT))
    return _read_results(tmp, world)


def _run_shaped(config, world, bandwidth, deadline, tmp, topology_out):
    from .network import RANK_IFNAME, ShapedNetwork, measure_rtt, write_text_atomic

    with ShapedNetwork(world, bandwidth) as net:
        rtt = measure_rtt(net, 0, 1)
        text = net.topology_yaml(rtt_s=rtt)
        config.update(master_addr=net.address(0), port=_MASTER_PORT_SHAPED)
        path, env = _write_config(config, tmp), _env(RANK_IFNAME)
        _launch(world, deadline, tmp, lambda rank, log: net.run_in_namespace(
            rank, _argv(path, rank), env=env, stdout=log, stderr=subprocess.STDOUT))
    if topology_out is None:
        return _read_results(tmp, world), ""
    write_text_atomic(topology_out, text)
    return _read_results(tmp, world), str(topology_out)


#: What the library's all-reduce is, per backend, in the simulator's algorithm names.
from .schema import LIBRARY_ALGORITHM  # noqa: E402  (one table, shared with the reader)


def for_comparison(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy of measurement rows with ``library`` renamed to the simulator's algorithm
    (:data:`LIBRARY_ALGORITHM`: gloo's all-reduce is a ring; NCCL's is whatever its tuner picks,
    ``auto``), so that :func:`simulator.measure.schema.read_measurements` accepts them."""
    out = frame.copy()
    library = out["algorithm"] == "library"
    unknown = sorted(set(out.loc[library, "backend"]) - set(LIBRARY_ALGORITHM))
    if unknown:
        raise ConfigError(f"no simulator algorithm known for the all-reduce of backend(s) "
                          f"{', '.join(unknown)}; known: {', '.join(LIBRARY_ALGORITHM)}")
    out.loc[library, "algorithm"] = out.loc[library, "backend"].map(LIBRARY_ALGORITHM)
    return out


def write_measured_csv(frame: pd.DataFrame, path) -> Path:
    """Write measurement rows to ``path`` atomically (temp file, then rename)."""
    missing = [c for c in MEASURED_COLUMNS if c not in frame.columns]
    if missing:
        raise ConfigError(f"not a measurement frame: missing columns {', '.join(missing)}")
    from ..report.output import write_text

    return write_text(Path(path), frame.to_csv(index=False, columns=list(MEASURED_COLUMNS),
                                               float_format="%.6g", lineterminator="\n"))


if __name__ == "__main__":
    sys.exit(_worker_main(sys.argv[1:]))
