"""Data-parallel training iterations on the engine: compute, gradient buckets, aggregation.

One iteration of synchronous data parallelism on every worker: forward through all layers, then
backward from the output layer to the input. Gradients are grouped into *buckets* in the order
backward produces them (PyTorch DDP: 25 MiB; Horovod's fusion buffer: 64 MiB); a bucket's
aggregation starts as soon as its last gradient is computed and overlaps the rest of backward.
The optimizer step runs when every bucket is aggregated.

Aggregation is either

* a collective algorithm (ring, trees, halving-doubling, hierarchical, ...): one all-reduce per
  bucket, run one after another on a single communicator stream as NCCL does; or
* parameter servers: each layer's variables live on one server (placed round-robin by layer as
  TensorFlow's ``replica_device_setter`` does, or greedily by size); a worker pushes each bucket's
  gradients to the servers owning them (the server sums them: aggregation compute is charged on
  the server), and pulls the updated variables before its next forward. Consistency is bounded
  staleness: a worker may start iteration ``i`` once every worker has finished pushing iteration
  ``i - 1 - k``. ``k = 0`` is BSP (synchronous), ``k > 0`` SSP, ``k = None`` asynchronous
  (workers never wait; the gradient staleness distribution is reported).

Either can carry compressed gradients (:mod:`.compression`): smaller payloads, (de)compression
kernels on the GPUs (and servers) around each bucket's aggregation, and an all-gather in place
of the all-reduce for formats that cannot be summed in flight (top-k, 1-bit).

Compute comes from a :class:`~simulator.workload.compute.ComputeProfile`; its timeline is
analytic (compute and communication use different resources: NCCL and PS traffic run on their
own streams and links), and only communication is simulated on the flow network.

Speedup is against one GPU computing alone (no communication): ``N · t1 / tN``; efficiency is
speedup / N. Exposed communication is the part of the iteration in which the GPU does not compute.
"""

from __future__ import annotations

import collections

import math
from dataclasses import dataclass, field

import numpy as np

from ..engine.runner import Engine
from ..errors import ConfigError
from ..records import bottleneck, links_frame
from ..schedules import make_schedule
from ..schedules.base import ScheduleBuilder
from ..topology import endpoints, ps_endpoints
from .compression import Compression
from .mixed_precision import DTYPE_BYTES, PRECISION_GRADIENTS, gradient_dtype_for

DDP_BUCKET_BYTES = 25 << 20  # torch.nn.parallel.DistributedDataParallel(bucket_cap_mb=25)

#: Bytes per gradient element on the wire by training precision, when the run names no other
#: gradient dtype: mixed precision (amp) as the model cast to half, fp16 gradients
#: (:mod:`.mixed_precision`: recipes that keep fp32 variables all-reduce fp32).
GRADIENT_BYTES = {p: DTYPE_BYTES[d] for p, d in PRECISION_GRADIENTS.items()}
PRECISIONS = tuple(GRADIENT_BYTES)

TRAINING_COLUMNS = (
    "model", "aggregation", "gpus", "batch_per_gpu", "accumulation", "precision", "iteration_s",
    "throughput_samples_s", "per_gpu_samples_s", "speedup", "efficiency", "compute_s",
    "exposed_comm_s", "comm_busy_s", "overlap", "bottleneck_link", "bottleneck_utilisation",
    "ps_servers", "ps_placement", "consistency", "staleness_mean", "staleness_max",
    "topology")


@dataclass(frozen=True)
class PsConfig:
    """Parameter-server settings for training."""

    servers: int | str = 1            # a count, or "per_node": one per worker machine
    placement: str = "dedicated"      # dedicated | colocated (on the worker machines' CPUs)
    sharding: str = "round_robin"     # round_robin (TF default) | greedy | even
    staleness: int | None = 0         # 0 = BSP, k = SSP(k), None = asynchronous
    iterations: int = 4               # iterations simulated (the first is warm-up)
    local_aggregation: bool = False   # reduce inside each machine first (TF
    #                                   distributed_replicated): one push/pull per machine
    impl: str = "ideal"               # implementation (:mod:`.ps_impls`): transport, copies
    easgd_tau: int | None = None      # elastic averaging: exchange with the center every tau
    #                                   local iterations (None: gradient pushes, BSP/SSP/async)
    hierarchy: str = "none"           # aggregators: none, machine (= local_aggregation) or
    #                                   rack (one per leaf switch: its workers reduce to it)

    @property
    def consistency(self) -> str:
        if self.easgd_tau is not None:
            return f"easgd{self.easgd_tau}"
        if self.staleness is None:
            return "async"
        return "bsp" if self.staleness == 0 else f"ssp{self.staleness}"

    @property
    def aggregators(self) -> str:
        """Where pushes are reduced before the servers: ``none``, ``machine`` or ``rack``."""
        if self.hierarchy != "none":
            return self.hierarchy
        return "machine" if self.local_aggregation else "none"


@dataclass(frozen=True)
class Bucket:
    """Gradients aggregated together: layer indices, bytes, and when backward has made them."""

    layers: tuple[int, ...]
    size_bytes: int
    ready_s: float  # after the start of backward


def make_buckets(grad_bytes, backward_s, bucket_bytes: int, overlap: bool = True,
                 framework=None, negotiation_s: float = 0.0, element_bytes: int = 4):
    """Group layers into buckets in backward order (last layer first).

    Without a ``framework`` (or with a ``size`` one) a bucket closes when it reaches
    ``bucket_bytes`` (DDP-style; a framework's own ``bucket_bytes`` and smaller first bucket
    take precedence); layers without gradients join the next bucket. A ``per_layer``
    framework makes every layer with gradients its own bucket. A ``cycle`` framework (Horovod)
    fuses the gradients ready by each cycle boundary (multiples of ``cycle_s`` from the start
    of backward) into buffers of at most ``bucket_bytes``; each is ready at that boundary plus
    ``negotiation_s``. With ``overlap=False`` everything is one bucket ready when backward ends.
    ``element_bytes`` sizes a framework's buckets counted in gradient elements (Apex).
    """
    n = len(grad_bytes)
    order = list(range(n - 1, -1, -1))
    done = np.cumsum([backward_s[i] for i in order])
    if not overlap:
        return [Bucket(tuple(order), int(sum(grad_bytes)), float(done[-1]) if n else 0.0)]
    policy = framework.policy if framework is not None else "size"
    if policy == "per_layer":
        return [Bucket((i,), int(grad_bytes[i]), float(done[k]))
                for k, i in enumerate(order) if grad_bytes[i] > 0]
    if policy == "cycle":
        return _cycle_buckets(grad_bytes, order, done, framework, negotiation_s)
    caps = [bucket_bytes]
    if framework is not None:
        caps = [framework.bucket_cap_bytes(element_bytes)]
        if framework.first_bucket_bytes:
            caps = [framework.first_bucket_bytes, caps[0]]
    buckets, current, size = [], [], 0
    for k, i in enumerate(order):
        current.append(i)
        size += int(grad_bytes[i])
        cap = caps[min(len(buckets), len(caps) - 1)]
        if size >= cap or k == n - 1:
            if size > 0:
                buckets.append(Bucket(tuple(current), size, float(done[k])))
            current, size = [], 0
    return buckets


def _cycle_buckets(grad_bytes, order, done, framework, negotiation_s: float):
    """Horovod's tensor fusion: see :func:`make_buckets`."""
    cycle = framework.cycle_s
    buckets, current, size, boundary = [], [], 0, None

    def close():
        if size > 0:
            buckets.append(Bucket(tuple(current), size, boundary + negotiation_s))

    for k, i in enumerate(order):
        ready = float(done[k])
        due = math.ceil(ready / cycle - 1e-12) * cycle if cycle > 0 else ready
        if boundary is not None and (due > boundary or size + grad_bytes[i] > framework.bucket_bytes):
            close()
            current, size = [], 0
        boundary = due if boundary is None or due > boundary else boundary
        current.append(i)
        size += int(grad_bytes[i])
    if boundary is not None:
        close()
    return buckets


def place_variables(grad_bytes, servers: int, policy: str) -> np.ndarray:
    """Server of each layer's variables (``-1`` for layers without any)."""
    owner = np.full(len(grad_bytes), -1, dtype=np.int64)
    load = np.zeros(servers)
    k = 0
    for i, b in enumerate(grad_bytes):
        if b <= 0:
            continue
        if policy == "round_robin":
            owner[i] = k % servers
            k += 1
        elif policy == "greedy":
            owner[i] = int(np.argmin(load))
        else:
            raise ConfigError(f"unknown PS sharding {policy!r}; valid: round_robin, greedy, even")
        load[owner[i]] += b
    return owner


@dataclass
class TrainingResult:
    row: dict
    engine: Engine
    staleness: list = field(default_factory=list)
    iterations: int = 1        # iterations the engine simulated (per worker)


def _placement_nodes(graph, gpus: int) -> list[str]:
    eps = endpoints(graph)
    if gpus > len(eps):
        raise ConfigError(f"{gpus} GPUs requested, topology {graph.graph.get('name', '')!r} has "
                          f"{len(eps)}")
    return list(eps[:gpus])


def _machines(graph, workers: list[str]) -> list[str]:
    """The CPU node of every machine hosting a worker (the worker itself on star/fat_tree)."""
    machines = []
    for w in workers:
        cpu = f"n{graph.nodes[w].get('node_index', 0)}.cpu"
        node = cpu if cpu in graph else w
        if node not in machines:
            machines.append(node)
    return machines


def server_count(graph, workers: list[str], ps: PsConfig) -> int:
    """Resolve ``servers: per_node`` to the number of worker machines."""
    if ps.servers == "per_node":
        return len(_machines(graph, workers))
    return int(ps.servers)


def _server_nodes(graph, workers: list[str], ps: PsConfig, servers: int) -> list[str]:
    if ps.placement == "dedicated":
        hosts = ps_endpoints(graph) or endpoints(graph)[len(workers):]
        if servers > len(hosts):
            raise ConfigError(f"{servers} dedicated PS need {servers} free hosts; topology "
                              f"{graph.graph.get('name', '')!r} has {len(hosts)} (gpu_cluster: "
                              f"set ps_hosts; star: hosts >= gpus + servers)")
        return list(hosts[:servers])
    if ps.placement == "colocated":
        from ..guard import check_servers

        check_servers(graph, servers, what="PS servers")   # before a list of that many
        # servers on the worker machines' CPUs, round-robin (TF: local_parameter_device=cpu)
        machines = _machines(graph, workers)
        return [machines[k % len(machines)] for k in range(servers)]
    raise ConfigError(f"unknown PS placement {ps.placement!r}; valid: dedicated, colocated")


#: Parameter servers run on the compiled flow network from this many (client, server) pairs
#: (a client: a GPU, or a machine or rack with local aggregation): every client pushes to
#: every server, so their flows form one component that the Python network re-solves whole at
#: each change (quadratic in the pairs; 64 clients x 16 servers: ~1.8 ms a solve). Below, the
#: Python network is as fast and needs no compilation (~25 s the first time numba builds the
#: kernel on a machine; cached after).
COMPILED_PS_PAIRS = 64


def _network_for(graph, workers: list[str], aggregation: str, ps: PsConfig | None) -> str:
    """The flow network a training run uses (see :data:`COMPILED_PS_PAIRS`)."""
    if aggregation != "ps":
        return "python"
    ps = ps or PsConfig()
    pairs = len(_groups(graph, workers, ps.aggregators)) * server_count(graph, workers, ps)
    return "compiled" if pairs >= COMPILED_PS_PAIRS else "python"


def simulate_training(graph, profile, *, gpus: int, batch_per_gpu: int, aggregation: str,
                      model_name: str, gradient_bytes, precision: str = "fp32",
                      bucket_bytes: int = DDP_BUCKET_BYTES, overlap: bool = True,
                      slices: int = 1, ps: PsConfig | None = None,
                      options: dict | None = None, record_rates: bool = False,
                      slowdown=None, compression: Compression | None = None,
                      collective_engine: str = "event", library=None,
                      framework=None, overlap_slowdown: float | None = None,
                      overheads=None, accumulation: int = 1,
                      gradient_dtype: str | None = None) -> TrainingResult:
    """Simulate data-parallel training on ``gpus`` workers; return one result row.

    Parameters
    ----------
    profile : ComputeProfile
        Per-layer forward/backward seconds and the optimizer step for one worker's batch.
    gradient_bytes : sequence of int
        Gradient bytes of each layer (same order as ``profile.layers``).
    aggregation : str
        A registered collective algorithm, or ``"ps"``.
    slowdown : sequence of float, optional
        Per-worker compute time multipliers (stragglers; 1.0 = nominal). Synchronous
        aggregation waits for the slowest worker's bucket; PS clients each run at their own
        pace, limited only by the staleness bound.
    collective_engine : {"event", "fast", "auto"} or a fast method's name
        How each bucket's collective is timed (see :func:`_run_collective`): the event engine,
        or the exact fast path of :mod:`simulator.engine.dispatch` (``fast`` raises where it does
        not apply, ``auto`` falls back to the event engine). PS aggregation is always evented.
    library : library object or None
        The collective library every bucket's all-reduce goes through
        (:mod:`simulator.library`; ``None`` or ``ideal``: bare wires). With ``nccl`` each
        bucket is planned alone (protocol, channels, costed links, base latency, launch) and
        timed by the fast path on its plan, so its cost is what the library says a call of that
        size costs; this needs the fast path (numba) and no compression kernels.
    framework : Framework or None
        How gradients become calls (:mod:`simulator.workload.frameworks`): bucket policy,
        Horovod's fusion cycle and negotiation, and how the library is launched (unless the
        library names its launch mode). ``None``: size buckets of ``bucket_bytes``.
    overlap_slowdown : float or None
        With a collective library, how much slower backward computes while a bucket's
        collective runs beside it (None: :data:`OVERLAP_SLOWDOWN`; 0: no interference).
    overheads : TrainingOverheads or None
        Time outside communication (:mod:`simulator.workload.overheads`): per-step jitter of a
        synchronous step (the slowest of N workers), the input pipeline on each machine's
        CPU cores, the framework's fixed cost per iteration. They multiply ``slowdown``;
        None: none (earlier behaviour).
    accumulation : int
        Gradient accumulation: micro-batches of ``batch_per_gpu`` per optimizer step, whose
        gradients are aggregated once, from the last micro-batch's backward on
        (:meth:`~simulator.workload.compute.ComputeProfile.accumulated`); ``profile`` is one
        micro-batch's. The row's ``batch_per_gpu`` stays the micro-batch; throughput counts
        every micro-batch's samples.
    gradient_dtype : {"fp16", "bf16", "fp32"} or None
        The dtype gradients cross the wire in (:mod:`.mixed_precision`); None: the
        precision's own (``amp``: fp16). It sizes Apex's element-counted buckets and the
        compression kernels; ``gradient_bytes`` must already be in it.
    """
    wire_dtype = gradient_dtype_for(precision, gradient_dtype)
    if not (isinstance(accumulation, int) and not isinstance(accumulation, bool)
            and accumulation >= 1):
        raise ConfigError(f"accumulation must be an integer >= 1 (micro-batches per optimizer "
                          f"step), got {accumulation!r}")
    if accumulation > 1:
        profile = profile.accumulated(accumulation)
    samples = batch_per_gpu * accumulation     # per worker and optimizer step
    workers = _placement_nodes(graph, gpus)    # the count checked before it sizes anything
    grad = [int(b) for b in gradient_bytes]
    slow = [1.0] * gpus if slowdown is None else [float(x) for x in slowdown]
    if len(slow) != gpus or min(slow) <= 0:
        raise ConfigError(f"slowdown needs {gpus} positive factors, got {slowdown!r}")
    if overheads is not None and overheads.active:
        import dataclasses

        from .overheads import worker_factors

        ps_cfg = ps or PsConfig()
        synchronous = aggregation != "ps" or (ps_cfg.staleness == 0
                                              and ps_cfg.easgd_tau is None)
        factors = worker_factors(graph, workers, samples,
                                 sum(float(l.forward_s + l.backward_s) for l in profile.layers)
                                 + float(profile.optimizer_s),
                                 overheads, synchronous)
        slow = [x * f for x, f in zip(slow, factors)]
        if overheads.step_overhead_s:
            profile = dataclasses.replace(
                profile, optimizer_s=float(profile.optimizer_s) + overheads.step_overhead_s)
    fwd = float(sum(l.forward_s for l in profile.layers))
    bwd = [float(l.backward_s) for l in profile.layers]
    compute_s = fwd + sum(bwd) + float(profile.optimizer_s)
    buckets = make_buckets(grad, bwd, bucket_bytes, overlap, framework,
                           negotiation_s(graph, workers, framework), DTYPE_BYTES[wire_dtype])
    library = _launched(library, framework, graph, workers)
    if aggregation == "ps":
        from .ps_impls import get_ps_impl, wire_graph

        graph = wire_graph(graph, get_ps_impl((ps or PsConfig()).impl))
    engine = Engine(graph, record_rates=record_rates,
                    network=_network_for(graph, workers, aggregation, ps))
    staleness: list[int] = []
    codec = _Codec(graph, compression or Compression(), wire_dtype)
    if aggregation == "ps":
        ps = ps or PsConfig()
        iterations = max(2, ps.iterations)
        if ps.easgd_tau is not None:
            iteration_s, comm_busy, rate, iterations = _run_easgd(
                engine, graph, workers, grad, profile, ps, slow, codec)
        else:
            iteration_s, comm_busy, rate = _run_ps(engine, graph, workers, grad, buckets, fwd,
                                                   profile, ps, staleness, slow, codec)
    else:
        ps = None
        iterations = 1
        iteration_s, comm_busy, fast_wire = _run_collective(
            engine, workers, buckets, fwd, sum(bwd), profile.optimizer_s, aggregation, slices,
            dict(options or {}), graph, max(slow), codec,
            collective_engine=collective_engine if not record_rates else "event",
            library=library,
            overlap_slowdown=OVERLAP_SLOWDOWN if overlap_slowdown is None else overlap_slowdown)
        rate = gpus / iteration_s
    wire = sum(int(run.schedule.transfer_bytes.sum()) for run in engine.runs) / iterations
    if aggregation != "ps":
        wire += fast_wire
    links = links_frame(engine, engine.env.now)
    link, util = bottleneck(links)
    throughput = rate * samples                # samples/s over all workers
    speedup = throughput * compute_s / samples
    exposed = max(0.0, iteration_s - compute_s * max(slow))
    row = {
        "model": model_name, "aggregation": aggregation, "gpus": gpus,
        "batch_per_gpu": batch_per_gpu, "accumulation": accumulation,
        "precision": precision, "iteration_s": iteration_s,
        "throughput_samples_s": throughput, "per_gpu_samples_s": throughput / gpus,
        "speedup": speedup, "efficiency": speedup / gpus, "compute_s": compute_s,
        "exposed_comm_s": exposed, "comm_busy_s": comm_busy,
        "overlap": min(1.0, max(0.0, 1.0 - exposed / comm_busy)) if comm_busy > 0 else 1.0,
        "bottleneck_link": link, "bottleneck_utilisation": util,
        "ps_servers": server_count(graph, workers, ps) if ps else 0, "ps_placement": ps.placement if ps else "",
        "consistency": ps.consistency if ps else "bsp",
        "staleness_mean": float(np.mean(staleness)) if staleness else 0.0,
        "staleness_max": int(max(staleness)) if staleness else 0,
        "topology": graph.graph.get("name", ""),
        "compression": codec.format.label, "wire_bytes_per_iteration": wire,
        "gradient_dtype": wire_dtype,
    }
    return TrainingResult(row=row, engine=engine, staleness=staleness, iterations=iterations)


@dataclass(frozen=True)
class IterationPlan:
    """One synchronous data-parallel iteration with collective aggregation, built once and
    started on any engine as often as wanted (:func:`start_iteration`): the workers (topology
    nodes), the gradient buckets, the compute of one worker and every bucket's schedule."""

    workers: tuple
    buckets: tuple
    forward_s: float
    backward_s: float
    optimizer_s: float
    codec: "_Codec"
    schedules: tuple

    @property
    def gradient_bytes(self) -> int:
        """Bytes of gradients aggregated per iteration (before compression)."""
        return sum(b.size_bytes for b in self.buckets)

    @property
    def compute_s(self) -> float:
        return self.forward_s + self.backward_s + self.optimizer_s


def plan_iteration(graph, profile, workers, gradient_bytes, *, aggregation: str,
                   precision: str = "fp32", bucket_bytes: int = DDP_BUCKET_BYTES,
                   overlap: bool = True, slices: int = 1, options: dict | None = None,
                   compression: Compression | None = None, framework=None,
                   gradient_dtype: str | None = None) -> IterationPlan:
    """The iteration :func:`simulate_training` simulates for ``aggregation`` (an all-reduce
    algorithm) on bare wires with the event engine, on the given ``workers`` instead of the
    topology's first endpoints; see :func:`start_iteration`."""
    if aggregation == "ps" or str(aggregation).startswith("ps-"):
        raise ConfigError("a training iteration started on a shared engine aggregates with a "
                          "collective algorithm (ring, halving_doubling, ...), not parameter "
                          "servers")
    workers = tuple(workers)
    grad = [int(b) for b in gradient_bytes]
    fwd = float(sum(l.forward_s for l in profile.layers))
    bwd = [float(l.backward_s) for l in profile.layers]
    wire_dtype = gradient_dtype_for(precision, gradient_dtype)
    buckets = make_buckets(grad, bwd, bucket_bytes, overlap, framework,
                           negotiation_s(graph, list(workers), framework),
                           DTYPE_BYTES[wire_dtype])
    codec = _Codec(graph, compression or Compression(), wire_dtype)
    n = len(workers)
    schedules = tuple(_collective_schedule(graph, aggregation, n, codec, b.size_bytes, slices,
                                           dict(options or {}))
                      for b in buckets) if n > 1 else ()
    return IterationPlan(workers, tuple(buckets), fwd, sum(bwd), float(profile.optimizer_s),
                         codec, schedules)


def start_iteration(engine, plan: IterationPlan, then=None) -> dict:
    """Start one iteration of ``plan`` on ``engine`` now, beside whatever else runs there
    (other jobs' traffic shares the links max-min fairly); ``then()`` is called when it ends.
    Alone on a fresh engine it takes exactly :func:`simulate_training`'s ``iteration_s``.
    Returns its state (``start``, ``end`` once ended, ``runs``: the buckets' schedule runs)."""
    return _start_buckets(engine, list(plan.workers), list(plan.buckets), plan.forward_s,
                          plan.backward_s, plan.optimizer_s, plan.codec, list(plan.schedules),
                          then=then)


def negotiation_s(graph, workers: list[str], framework) -> float:
    """One negotiation of a ``cycle`` framework: its hops, each the network latency from the
    coordinator (the first worker) to the farthest worker."""
    if framework is None or framework.policy != "cycle" or len(workers) < 2:
        return 0.0
    from ..topology.routing import Router

    router = Router(graph)
    worst = max(router.path(workers[0], w).latency_s for w in workers[1:])
    return framework.negotiation_hops * worst


def _launched(library, framework, graph, workers):
    """``library`` driven as ``framework`` drives it, unless the library names its launch
    mode (``group`` launches one process per machine's GPUs)."""
    if library is None or framework is None or getattr(library, "launch", "") is not None:
        return library
    import copy

    launch = framework.launch
    if launch == "group":
        per_machine = collections.Counter(graph.nodes[w].get("node_index", 0) for w in workers)
        launch = f"group:{max(per_machine.values())}"
    library = copy.copy(library)
    library.launch = launch
    return library


def _run_collective(engine, workers, buckets, fwd, bwd_total, optimizer_s, algorithm, slices,
                    options, graph, slowest: float = 1.0, codec: "_Codec | None" = None,
                    collective_engine: str = "event", library=None,
                    overlap_slowdown: float = 0.0):
    """BSP with one all-reduce per bucket, serialised on one communicator stream.

    A bucket's all-reduce starts when the slowest worker (compute scaled by ``slowest``) has
    produced it: a synchronous collective cannot run ahead of its last participant. With
    compression, every worker first compresses the bucket (its aggregation starts when the last
    one has), and after the collective decompresses it (the communicator stream is free by then;
    the bucket counts as aggregated when the last worker has decompressed). Formats that cannot
    be summed in flight are all-gathered (:func:`_collective_schedule`).

    ``collective_engine`` ``"fast"``/``"auto"``: when no (de)compression kernel takes time, each
    bucket's collective runs alone on the network and on its devices' compute queues, so its
    duration is what :func:`~simulator.engine.dispatch.fast_collective` computes (exactly, where it
    applies); the bucket is then timed without events, its bytes are added to the engine's link
    counters and its reductions to the compute log as one aggregated entry per device (busy
    time and energy stay exact; the entries are not a timeline). Returns ``(iteration_s,
    comm_busy_s, wire_bytes)``, the last counting the fast-timed buckets only.
    """
    n = len(workers)
    codec = codec or _Codec(graph, Compression(), "fp32")
    fwd, bwd_total, optimizer_s = fwd * slowest, bwd_total * slowest, optimizer_s * slowest
    if n == 1 or not buckets:
        return fwd + bwd_total + optimizer_s, 0.0, 0.0
    if library is not None and getattr(library, "name", library) != "ideal":
        fast = _library_buckets(graph, algorithm, workers, codec, buckets, slices, options,
                                library)
        if overlap_slowdown > 0:
            return _overlapped(engine, fast, buckets, fwd, bwd_total, optimizer_s, slowest,
                               overlap_slowdown)
    else:
        fast = _fast_buckets(graph, algorithm, workers, codec, buckets, slices, options,
                             collective_engine)
    schedules = None if fast else [
        _collective_schedule(graph, algorithm, n, codec, b.size_bytes, slices, options)
        for b in buckets]
    state = _start_buckets(engine, workers, buckets, fwd, bwd_total, optimizer_s, codec,
                           schedules, fast, slowest)
    engine.run()
    comm_end = max(state["ends"])
    wire = sum(f.bytes_sent for f in fast) if fast else 0.0
    return max(fwd + bwd_total, comm_end) + optimizer_s, state["busy_s"], wire


def _start_buckets(engine, workers, buckets, fwd, bwd_total, optimizer_s, codec, schedules,
                   fast=None, slowest: float = 1.0, then=None) -> dict:
    """Start one BSP iteration's bucket aggregation on ``engine`` now (``t0``): bucket ``k``
    is (compressed and) queued at ``t0 + fwd + ready_s x slowest`` (``fwd``, ``bwd_total`` and
    ``optimizer_s`` already scaled by ``slowest``), run on the communicator stream one after
    another (``schedules[k]`` on the flow network, or ``fast[k]`` timed without events), then
    decompressed. Nothing runs until the caller runs the engine.

    Returns the iteration's state: ``start`` (``t0``), ``ends`` (when each bucket was
    aggregated), ``busy_s`` (communicator busy time), ``runs`` (the launched schedules) and
    ``end``, set at the iteration's end (``t0 + max(fwd + bwd_total, last bucket - t0) +
    optimizer_s``); ``then()``, if given, is called at that time.
    """
    n = len(workers)
    t0 = engine.env.now
    state = {"busy": False, "queue": [], "ends": [], "busy_s": 0.0, "runs": [], "start": t0,
             "end": None}

    def iteration_done():
        state["end"] = max(t0 + (fwd + bwd_total), engine.env.now) + optimizer_s
        if then is not None:          # no event otherwise: the engine's clock stops at the
            engine.call_at(state["end"], then)    # last bucket, as callers' link spans expect

    def on_all_workers(kernel, k, then):
        """Run bucket ``k``'s (de)compression kernel on every worker; ``then()`` after the last."""
        left = {"n": n}

        def one_done():
            left["n"] -= 1
            if left["n"] == 0:
                then()

        for w in workers:
            engine.compute(w, codec.seconds(w, kernel(buckets[k].size_bytes, n)) * slowest,
                           f"{kernel.__name__} b{k}", one_done)

    def start_next():
        if state["busy"] or not state["queue"]:
            return
        k = state["queue"].pop(0)
        state["busy"] = True
        begin = engine.env.now
        if fast:
            _account_fast(engine, fast[k], begin)
            engine.call_at(begin + fast[k].time_s, lambda begin=begin, k=k: finished(begin, k))
            return
        run = engine.launch(schedules[k], workers, label=f"bucket{k}")
        state["runs"].append(run)
        run.done_event.callbacks.append(lambda _e, begin=begin, k=k: finished(begin, k))

    def aggregated():
        state["ends"].append(engine.env.now)
        if len(state["ends"]) == len(buckets):
            iteration_done()

    def finished(begin, k):
        state["busy"] = False
        state["busy_s"] += engine.env.now - begin
        on_all_workers(codec.decompress, k, aggregated)
        start_next()

    def ready(k):
        state["queue"].append(k)
        start_next()

    if n == 1 or not buckets:
        iteration_done()
        return state
    for k, b in enumerate(buckets):
        engine.call_at(t0 + (fwd + b.ready_s * slowest),
                       lambda k=k: on_all_workers(codec.compress, k, lambda k=k: ready(k)))
    return state


#: How much slower a GPU computes while a collective library's kernels run beside its compute
#: (they take SMs and memory bandwidth): 18.9 %, the average over GPT and LLaMA training on
#: 4 A100, H100, MI250 and MI210 measured by Arfeen et al., "Characterizing Compute-
#: Communication Overlap in GPU-Accelerated Distributed Deep Learning: Performance and Power
#: Implications", arXiv:2507.03114 (2025) (maximum 40.0 %). Applied to the library's buckets
#: (NCCL kernels on the GPU); parameter-server traffic moves by copy engines and NICs.
OVERLAP_SLOWDOWN = 0.189


def _overlapped(engine, fast, buckets, fwd, bwd_total, optimizer_s, slowest, slowdown):
    """The iteration with backward slowed by ``1 + slowdown`` while a bucket's collective is
    in flight: buckets become ready as backward progresses (``ready_s`` in undisturbed
    seconds), run one after another on the communicator stream, and each takes its library
    time; returns ``(iteration_s, comm_busy_s, wire_bytes)`` as :func:`_run_collective`."""
    ready = [b.ready_s * slowest for b in buckets]
    t, done, k, queue = fwd, 0.0, 0, []
    busy_until, busy_s, backward_end = -math.inf, 0.0, None
    while True:
        comm = t < busy_until
        if not comm and queue:
            j = queue.pop(0)
            _account_fast(engine, fast[j], t)
            busy_until, busy_s = t + fast[j].time_s, busy_s + fast[j].time_s
            continue
        if k == len(buckets) and not comm:
            break
        rate = 1.0 / (1.0 + slowdown) if comm else 1.0
        to_ready = (ready[k] - done) / rate if k < len(buckets) else math.inf
        step = min(to_ready, busy_until - t if comm else math.inf)
        if backward_end is None and done + step * rate >= bwd_total:
            backward_end = t + (bwd_total - done) / rate
        done = min(bwd_total, done + step * rate)
        t += step
        if step == to_ready:
            queue.append(k)
            k += 1
    if backward_end is None:      # compute left after the last collective, undisturbed
        backward_end = t + (bwd_total - done)
    wire = sum(f.bytes_sent for f in fast)
    return max(backward_end, t) + optimizer_s, busy_s, wire


def _fast_buckets(graph, algorithm, workers, codec, buckets, slices, options, collective_engine):
    """Fast-path result of every bucket's collective, or None to run them on the engine."""
    from ..collective import ENGINES
    from ..engine.common import NotApplicable
    from ..engine.dispatch import fast_collective

    if collective_engine not in ENGINES:
        raise ConfigError(f"unknown collective engine {collective_engine!r}; valid: "
                          f"{', '.join(ENGINES)}")
    if collective_engine == "event":
        return None
    n = len(workers)
    if _codec_kernels(codec, buckets, workers):
        if collective_engine != "auto":
            raise NotApplicable("compression kernels share the devices' compute queues with the "
                                "collectives' reductions: use the event engine")
        return None
    results = []
    for (algo, collective, size, _opts), result in _per_bucket(
            graph, algorithm, n, codec, buckets, options,
            lambda algo, collective, size, opts: fast_collective(
                graph, collective, algo, size, n, workers, slices=slices, options=opts,
                only=None if collective_engine in ("fast", "auto") else collective_engine)[0]):
        if not result.applicable:
            if collective_engine != "auto":
                what = ("the fast engine" if collective_engine == "fast"
                        else f"method {collective_engine!r}")
                raise NotApplicable(f"{what} does not apply to {algo} {collective} of "
                                    f"{size} bytes on {n} ranks: {result.reason}")
            return None
        results.append(result)
    return results


def _per_bucket(graph, algorithm, n, codec, buckets, options, time_one):
    """``(spec, time_one(*spec))`` of every bucket in order, ``spec`` being its
    :func:`_collective_spec`; buckets of the same spec are timed once."""
    cache = {}
    for b in buckets:
        spec = _collective_spec(graph, algorithm, n, codec, b.size_bytes, options)
        key = spec[:3]
        if key not in cache:
            cache[key] = time_one(*spec)
        yield spec, cache[key]


def _codec_kernels(codec, buckets, workers) -> bool:
    """Whether any bucket's (de)compression takes device time on any worker."""
    n = len(workers)
    return any(codec.seconds(w, kernel(b.size_bytes, n)) > 0 for b in buckets for w in workers
               for kernel in (codec.compress, codec.decompress))


def _library_buckets(graph, algorithm, workers, codec, buckets, slices, options, library):
    """Every bucket's collective planned by ``library`` and timed alone by the fast path on
    its plan (the plan's costed links, schedule and fixed and host times)."""
    import dataclasses

    from ..collective import default_options, helper_ranks
    from ..engine.dispatch import fast_collective

    n = len(workers)
    if _codec_kernels(codec, buckets, workers):
        raise ConfigError(f"the {library.name} library in training times each bucket alone: "
                          f"compression kernels need the ideal library (--library ideal)")

    def time_one(algo, collective, size, opts):
        plan = library.plan(graph, collective, algo, size, n)
        plan_opts = default_options(plan.graph, plan.algorithm, n,
                                    {**{k: v for k, v in opts.items()
                                        if k not in ("channels", "orders")},
                                     **plan.options})
        result = fast_collective(plan.graph, collective, plan.algorithm, size, n,
                                 list(workers) + helper_ranks(graph, plan, plan.algorithm, n),
                                 slices=plan.slices or slices,
                                 reduce_compute=plan.reduce_compute is not False,
                                 options=plan_opts)[0]
        if not result.applicable:
            raise ConfigError(f"the {library.name} library in training needs the fast path "
                              f"for {algo} {collective} of {size} bytes on {n} ranks: "
                              f"{result.reason}")
        return dataclasses.replace(result, time_s=plan.total_time_s(result.time_s))

    return [result for _spec, result in _per_bucket(graph, algorithm, n, codec, buckets,
                                                     options, time_one)]


def _account_fast(engine, result, begin: float) -> None:
    """Add a fast-timed collective's link bytes and (aggregated) reductions to the engine's
    records, as if it had run there from ``begin``."""
    net = engine.network
    for key, capacity, carried in result.links:
        net.bytes_carried[net.resource(key, capacity)] += carried
    for device, seconds in result.reduce_s:
        engine.compute_log.append((device, "reduce", begin, begin + seconds))


def _collective_schedule(graph, algorithm, n, codec, size_bytes, slices, options):
    """One bucket's aggregation: an all-reduce of the (compressed) bucket, or for formats that
    cannot be summed in flight an all-gather of ``n`` payloads with ``algorithm`` (ring when it
    has no all-gather). An all-gather of an ``M``-byte message has every rank contribute
    ``M / n``, so gathering ``n`` payloads of ``P`` bytes is an all-gather of ``M = n P``."""
    algo, collective, size, opts = _collective_spec(graph, algorithm, n, codec, size_bytes,
                                                    options)
    return make_schedule(algo, collective, n, size, slices=slices, **opts)


def _collective_spec(graph, algorithm, n, codec, size_bytes, options):
    """``(algorithm, collective, size_bytes, options)`` of one bucket's aggregation (see
    :func:`_collective_schedule`)."""
    from ..collective import default_options
    from ..schedules import get_algorithm

    payload = codec.wire(size_bytes)
    if codec.format.summable:
        if algorithm == "auto":   # the collective library's tuner chooses, with its options
            return algorithm, "allreduce", payload, dict(options)
        return algorithm, "allreduce", payload, default_options(graph, algorithm, n, options)
    gather = algorithm if "allgather" in get_algorithm(algorithm).collectives else "ring"
    opts = default_options(graph, gather, n, options if gather == algorithm else {})
    return gather, "allgather", n * payload, opts


@dataclass(frozen=True)
class _Codec:
    """A compression format bound to the gradient precision and the devices' memory bandwidth.

    Kernel durations are memory traffic over the node's ``memory_bandwidth_bytes_per_s``, or
    3 x its ``reduce_bytes_per_s`` (the engine's convention) when it has none; a node without
    either (or with free reductions) compresses for free.
    """

    graph: object
    format: Compression
    dtype: str                 # the gradients' dtype on the wire (fp16, bf16, fp32)

    @property
    def element_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    def wire(self, size_bytes: int) -> int:
        return self.format.wire_bytes(size_bytes, self.element_bytes)

    def pull(self, size_bytes: int) -> int:
        return self.format.pull_bytes(size_bytes, self.element_bytes)

    def seconds(self, node: str, traffic_bytes: float) -> float:
        if traffic_bytes <= 0:
            return 0.0
        attrs = self.graph.nodes[node]
        bandwidth = attrs.get("memory_bandwidth_bytes_per_s")
        if bandwidth is None:
            bandwidth = 3 * float(attrs.get("reduce_bytes_per_s", math.inf))
        return traffic_bytes / bandwidth if math.isfinite(bandwidth) else 0.0

    # memory traffic of the kernels, bytes (names label the compute records)
    def compress(self, size_bytes: int, _n: int = 1) -> float:
        return self.format.compress_traffic_bytes(size_bytes, self.element_bytes)

    def decompress(self, size_bytes: int, n: int) -> float:
        """After the collective: cast back an all-reduced fp16 bucket, or sum ``n`` gathered
        payloads."""
        if self.format.summable:
            return self.format.unpack_traffic_bytes(size_bytes, self.element_bytes)
        return self.format.gather_decompress_traffic_bytes(size_bytes, n, self.element_bytes)

    def accumulate(self, size_bytes: int) -> float:
        """A parameter server adding one pushed payload into its sum."""
        return self.format.accumulate_traffic_bytes(size_bytes, self.element_bytes)

    def unpack(self, size_bytes: int) -> float:
        """A worker turning pulled half-precision parameters back to full precision."""
        return self.format.unpack_traffic_bytes(size_bytes, self.element_bytes)


def _transfer_schedule(kind: str, shares: np.ndarray, servers: int, reduce: bool = True):
    """One worker (rank 0) pushing its shares to servers 1..S (``reduce``: the engine charges
    the server's summation), or pulling them back."""
    b = ScheduleBuilder("allreduce", f"ps_{kind}", 1, shares, helper_ranks=servers)
    for k in range(servers):
        if shares[k] <= 0:
            continue
        if kind == "push":
            b.send(0, 1 + k, k, reduce=reduce, step=0, phase="push")
        else:
            b.send(1 + k, 0, k, reduce=False, step=1, phase="pull")
    return b.build()


def _task_queue(host: str, task: str | None, per_task: bool) -> str:
    """The compute queue of a host copy: the machine's CPU (``host``) for memory copies,
    ``host/task`` for a task's RPC receive path."""
    return f"{host}/{task}" if per_task and task else host


def _host_cpu(graph, node: str) -> str:
    """The CPU node of ``node``'s machine (``node`` itself where there is none)."""
    cpu = f"n{graph.nodes[node].get('node_index', -1)}.cpu"
    return cpu if "node_index" in graph.nodes[node] and cpu in graph else node


def _groups(graph, workers: list[str], level) -> list[list[str]]:
    """PS clients: every GPU alone (``none``/False), the GPUs of each machine together
    (``machine``/True: local aggregation), or the workers under each leaf switch (``rack``);
    a group's first worker is its aggregator."""
    if level in (False, "none"):
        return [[w] for w in workers]
    key = (lambda w: _rack(graph, w)) if level == "rack" else \
        (lambda w: graph.nodes[w].get("node_index", 0))
    grouped: dict = {}
    for w in workers:
        grouped.setdefault(key(w), []).append(w)
    return list(grouped.values())


def _rack(graph, node: str) -> str:
    """The first switch reached from ``node`` without crossing a switch (its leaf)."""
    seen, frontier = {node}, [node]
    while frontier:
        nxt = []
        for u in frontier:
            for v in sorted(graph.successors(u)):
                if v in seen:
                    continue
                if graph.nodes[v].get("kind") == "switch":
                    return v
                seen.add(v)
                nxt.append(v)
        frontier = nxt
    raise ConfigError(f"{node!r} reaches no switch: rack aggregation needs a switched fabric")


#: Pipelining of the intra-machine reduce and broadcast of local aggregation.
LOCAL_SEGMENTS = 4


def _run_ps(engine, graph, workers, grad, buckets, fwd, profile, ps: PsConfig, staleness,
            slow=None, codec: _Codec | None = None):
    """Parameter servers with bounded staleness; returns (iteration_s, comm busy per client).

    A *client* is one GPU, or with ``local_aggregation`` one machine: its GPUs first reduce each
    bucket onto the machine's first GPU (a pipelined binary tree), which pushes it; after the
    pull, that GPU broadcasts the parameters to the others.

    With compression the pushing GPU compresses each bucket first; each server receives its
    share's payload as a copy and then decompresses it into its sum (a compute record on the
    server, FIFO with the other workers' pushes); pulls carry dense parameters (half-precision
    ones with fp16/bf16, which the worker casts back before its forward).
    """
    from .ps_impls import get_ps_impl

    codec = codec or _Codec(graph, Compression(), "fp32")
    plain = codec.format.identity
    impl = get_ps_impl(ps.impl)
    groups = _groups(graph, workers, ps.aggregators)
    n, servers = len(groups), server_count(graph, workers, ps)
    factor_of = dict(zip(workers, slow or [1.0] * len(workers)))
    pace = [max(factor_of[w] for w in g) for g in groups]   # a machine waits for its slowest
    server_nodes = _server_nodes(graph, workers, ps, servers)
    if ps.sharding == "even":
        owner = None
    else:
        owner = place_variables(grad, servers, ps.sharding)

    def shares_of(layers) -> np.ndarray:
        out = np.zeros(servers, dtype=np.int64)
        if owner is None:
            total = sum(grad[i] for i in layers)
            base, extra = divmod(total, servers)
            out[:] = base
            out[:extra] += 1
            return out
        for i in layers:
            if owner[i] >= 0:
                out[owner[i]] += grad[i]
        return out

    model_shares = shares_of(range(len(grad)))
    push_shares = [shares_of(b.layers) for b in buckets]
    if plain:
        push_schedules = [_transfer_schedule("push", shares, servers)
                          for shares in push_shares]
        pull_schedule = _transfer_schedule("pull", model_shares, servers)
    else:
        # per bucket: (server, one-transfer push of its compressed share, server memory traffic)
        push_schedules = []
        for b in buckets:
            shares = shares_of(b.layers)
            parts = []
            for k in range(servers):
                if shares[k] > 0:
                    onehot = np.zeros(servers, dtype=np.int64)
                    onehot[k] = codec.wire(int(shares[k]))
                    parts.append((k, _transfer_schedule("push", onehot, servers, reduce=False),
                                  codec.accumulate(int(shares[k]))))
            push_schedules.append(parts)
        pull_schedule = _transfer_schedule(
            "pull", np.array([codec.pull(int(x)) for x in model_shares], dtype=np.int64),
            servers)
    unpack_traffic = codec.unpack(int(model_shares.sum()))
    local_size = {len(g) for g in groups if len(g) > 1}
    local_reduce = {(L, k): make_schedule("tree", "reduce", L, b.size_bytes,
                                          segments=LOCAL_SEGMENTS)
                    for L in local_size for k, b in enumerate(buckets)}
    local_bcast = {L: make_schedule("tree", "broadcast", L, int(model_shares.sum()),
                                    segments=LOCAL_SEGMENTS) for L in local_size}

    host_of = {node: _host_cpu(graph, node) for node in server_nodes + [g[0] for g in groups]}

    def remote(leader, k) -> bool:
        return host_of[leader] != host_of[server_nodes[k]]

    def copies(jobs, label, fn, receive=False):
        """Host copies ``(node, bytes, copies)``, each on its machine's CPU queue (in
        parallel across machines); ``fn()`` after the last. ``receive``: the receiving end
        of a transfer: with an implementation's measured receive rate, that rate on the queue
        of the receiving *task* (a job's optional fourth item: ``ps3``, ``worker0<-ps1``):
        one RPC runtime per task, several tasks per machine in parallel."""
        per_task = receive and bool(impl.receive_bytes_per_s)
        jobs = [(_task_queue(host_of[job[0]], job[3] if len(job) > 3 else None, per_task),
                 impl.copy_seconds(graph, host_of[job[0]], job[1], job[2], receive=receive))
                for job in jobs]
        jobs = [(node, seconds) for node, seconds in jobs if seconds > 0]
        if not jobs:
            fn()
            return
        left = {"n": len(jobs)}

        def one_done():
            left["n"] -= 1
            if left["n"] == 0:
                fn()

        for node, seconds in jobs:
            engine.compute(node, seconds, label, one_done)

    def both(run, receive, fn):
        """A transfer whose receiver parses it while it streams in (an RPC runtime with a
        measured receive rate): ``receive(done)`` queues the parsing now, on the receiving
        task's queue behind what it already has; ``fn()`` once the wire and the parsing are
        both done (the later of the two, not their sum)."""
        left = {"n": 2}

        def one():
            left["n"] -= 1
            if left["n"] == 0:
                fn()

        run.done_event.callbacks.append(lambda _e: one())
        receive(one)

    def then(schedule, nodes, label, fn):
        """Run ``schedule`` on ``nodes`` (skipped for a single GPU), then call ``fn()``."""
        if schedule is None or len(nodes) < 2:
            fn()
            return
        run = engine.launch(schedule, nodes, label=label)
        run.done_event.callbacks.append(lambda _e: fn())
    bwd_total = sum(l.backward_s for l in profile.layers)
    iters = max(2, ps.iterations)
    k_bound = ps.staleness
    pushed = [0] * n           # iterations whose pushes are complete, per worker
    # min(pushed), kept incrementally: workers per pushed count, and the lowest count held
    # (each finish moves one worker up by one, so the minimum only ever steps up)
    holding = collections.Counter({0: n})
    slowest = [0]
    version = [0]              # updates applied at the servers (one per worker-iteration)
    pulled_version = [0] * n
    starts = [[] for _ in range(n)]
    ends = [[] for _ in range(n)]
    waiting: list[int] = []
    intervals: list[list[tuple[float, float]]] = [[] for _ in range(n)]

    def may_start(w, it):
        if k_bound is None or it == 0:
            return True
        return slowest[0] >= it - k_bound

    def start_iteration(w):
        it = len(starts[w])
        if it >= iters:
            return
        if not may_start(w, it):
            waiting.append(w)
            return
        starts[w].append(engine.env.now)
        leader = groups[w][0]
        placement = [leader] + server_nodes
        t0 = engine.env.now

        def broadcast():
            then(local_bcast.get(len(groups[w])), groups[w], f"bcast w{w} it{it}",
                 lambda: pulled(w, it, t0))

        far = [k for k in range(servers) if remote(leader, k) and model_shares[k] > 0]

        def unpack():
            engine.compute(leader, codec.seconds(leader, unpack_traffic) * pace[w], "unpack",
                           broadcast)

        def received(_e=None, done=None):
            if impl.receive_bytes_per_s:
                # one stream per server, parsed in parallel (tensorflow/tensorflow#6116: one
                # worker reached 2.6 GB/s over 8 ps tasks where one gave 0.9 GB/s)
                jobs = [(leader, int(model_shares[k]), impl.receive_copies, f"worker{w}<-ps{k}")
                        for k in far]
            else:
                jobs = [(leader, sum(int(model_shares[k]) for k in far), impl.receive_copies)]
            copies(jobs, f"pull copy w{w}", done or unpack, receive=True)

        def launch_pull():
            run = engine.launch(pull_schedule, placement, label=f"pull w{w} it{it}")
            if impl.receive_bytes_per_s:     # parsed as it streams in: done when both are
                both(run, lambda one: received(done=one), unpack)
                return
            run.done_event.callbacks.append(received)

        copies([(server_nodes[k], int(model_shares[k]), impl.send_copies) for k in far],
               f"pull send copy w{w}", launch_pull)

    def pulled(w, it, t0):
        intervals[w].append((t0, engine.env.now))
        pulled_version[w] = version[0]
        t_fwd = engine.env.now + fwd * pace[w]
        remaining = {"left": len(push_schedules)}
        for k, b in enumerate(buckets):
            engine.call_at(t_fwd + b.ready_s * pace[w], lambda k=k: push(w, it, k, remaining))
        if not push_schedules:
            engine.call_at(t_fwd + bwd_total * pace[w], lambda: iteration_done(w, it))

    def push(w, it, k, remaining):
        t0 = engine.env.now
        leader = groups[w][0]
        placement = [leader] + server_nodes

        def send():
            if plain:
                shares = push_shares[k]
                far = [s for s in range(servers) if remote(leader, s) and shares[s] > 0]

                def received(_e=None, done=None):
                    copies([(server_nodes[s], int(shares[s]), impl.receive_copies, f"ps{s}")
                            for s in far], f"push copy b{k}",
                           done or (lambda: pushed_bucket(w, it, t0, remaining)), receive=True)

                def launch_push():
                    run = engine.launch(push_schedules[k], placement,
                                        label=f"push w{w} it{it} b{k}")
                    if impl.receive_bytes_per_s:   # parsed as it streams in
                        both(run, lambda one: received(done=one),
                             lambda: pushed_bucket(w, it, t0, remaining))
                        return
                    run.done_event.callbacks.append(received)

                copies([(leader, sum(int(shares[s]) for s in far), impl.send_copies)],
                       f"push send copy b{k}", launch_push)
                return
            left = {"n": len(push_schedules[k])}

            def part_done():
                left["n"] -= 1
                if left["n"] == 0:
                    pushed_bucket(w, it, t0, remaining)

            for s, schedule, traffic in push_schedules[k]:
                node = server_nodes[s]
                run = engine.launch(schedule, placement, label=f"push w{w} it{it} b{k} s{s}")
                run.done_event.callbacks.append(
                    lambda _e, node=node, traffic=traffic: engine.compute(
                        node, codec.seconds(node, traffic), f"accumulate b{k}", part_done))

        def compress():
            seconds = codec.seconds(leader, codec.compress(buckets[k].size_bytes)) * pace[w]
            engine.compute(leader, seconds, f"compress b{k}", send)

        then(local_reduce.get((len(groups[w]), k)), groups[w], f"reduce w{w} it{it} b{k}",
             compress)

    def pushed_bucket(w, it, t0, remaining):
        intervals[w].append((t0, engine.env.now))
        remaining["left"] -= 1
        if remaining["left"] == 0:
            if k_bound == 0:
                staleness.append(0)   # BSP: the servers apply a round only when it is complete
            else:
                staleness.append(version[0] - pulled_version[w])   # updates missed
                version[0] += 1
            iteration_done(w, it)

    def iteration_done(w, it):
        t_end = (max(engine.env.now, starts[w][it] + (fwd + bwd_total) * pace[w])
                 + profile.optimizer_s * pace[w])
        engine.call_at(t_end, lambda: finish(w, it))

    def finish(w, it):
        ends[w].append(engine.env.now)
        holding[pushed[w]] -= 1
        pushed[w] = it + 1
        holding[it + 1] += 1
        lowest_before = slowest[0]
        while holding[slowest[0]] == 0:
            slowest[0] += 1
        start_iteration(w)
        if waiting and slowest[0] != lowest_before:   # nobody else can start otherwise
            pending = list(waiting)
            waiting.clear()
            for v in pending:
                start_iteration(v)

    for w in range(n):
        engine.call_at(0.0, lambda w=w: start_iteration(w))
    engine.run()
    # steady state: average iteration over the iterations after the first, across workers
    spans = [(ends[w][-1] - ends[w][0]) / (len(ends[w]) - 1) for w in range(n)
             if len(ends[w]) > 1]
    if not spans:
        raise ConfigError("PS run produced no complete iterations")
    iteration_s = float(np.mean(spans))
    # workers per second of iterations: each client contributes its GPUs at its own pace
    rate = sum(len(groups[w]) * (len(ends[w]) - 1) / (ends[w][-1] - ends[w][0])
               for w in range(n) if len(ends[w]) > 1)
    busy = [union_length(iv) / len(starts[w]) for w, iv in enumerate(intervals) if starts[w]]
    return iteration_s, float(np.mean(busy)), rate


def _run_easgd(engine, graph, workers, grad, profile, ps: PsConfig, slow, codec):
    """Elastic averaging SGD (Zhang, Choromanska & LeCun, NeurIPS 2015), asynchronous: every
    worker trains on its own copy and, every ``tau`` local iterations, sends its elastic
    difference (the size of the model) to the servers holding the center variable, which add
    it in, and pulls the center back; workers never wait for each other. Traffic per worker
    and iteration is ``2 x model / tau``; with nothing else on the wires an iteration costs
    ``compute + (push + pull) / tau``.

    Returns ``(iteration_s, comm_busy_s, workers_per_s, iterations)``.
    """
    if not codec.format.identity:
        raise ConfigError("EASGD exchanges parameters, not gradients: gradient compression "
                          "does not apply (drop the compression)")
    tau = int(ps.easgd_tau)
    groups = _groups(graph, workers, ps.aggregators)
    n, servers = len(groups), server_count(graph, workers, ps)
    factor_of = dict(zip(workers, slow or [1.0] * len(workers)))
    pace = [max(factor_of[w] for w in g) for g in groups]
    server_nodes = _server_nodes(graph, workers, ps, servers)
    if ps.sharding == "even":
        total = sum(grad)
        shares = np.full(servers, total // servers, dtype=np.int64)
        shares[: total % servers] += 1
    else:
        owner = place_variables(grad, servers, ps.sharding)
        shares = np.zeros(servers, dtype=np.int64)
        for i, b in enumerate(grad):
            if owner[i] >= 0:
                shares[owner[i]] += b
    push = _transfer_schedule("push", shares, servers)
    pull = _transfer_schedule("pull", shares, servers)
    model_bytes = int(shares.sum())
    local_reduce = {len(g): make_schedule("tree", "reduce", len(g), model_bytes,
                                          segments=LOCAL_SEGMENTS)
                    for g in groups if len(g) > 1}
    local_bcast = {len(g): make_schedule("tree", "broadcast", len(g), model_bytes,
                                         segments=LOCAL_SEGMENTS)
                   for g in groups if len(g) > 1}
    step_s = (sum(l.forward_s + l.backward_s for l in profile.layers) + profile.optimizer_s)
    exchanges = max(2, ps.iterations)
    total = exchanges * tau
    ends: list[list[float]] = [[] for _ in range(n)]
    busy = [0.0] * n

    def run(schedule, nodes, label, fn):
        if schedule is None or len(nodes) < 2:
            fn()
            return
        engine.launch(schedule, nodes, label=label).done_event.callbacks.append(
            lambda _e: fn())

    def iterate(w, it):
        engine.call_at(engine.env.now + step_s * pace[w], lambda: computed(w, it))

    def computed(w, it):
        if (it + 1) % tau:
            done(w, it)
            return
        t0, leader, group = engine.env.now, groups[w][0], groups[w]
        placement = [leader] + server_nodes

        def exchanged():
            busy[w] += engine.env.now - t0
            done(w, it)

        def pulled():
            run(local_bcast.get(len(group)), group, f"bcast w{w} it{it}", exchanged)

        def pushed():
            run(pull, placement, f"pull w{w} it{it}", pulled)

        run(local_reduce.get(len(group)), group, f"reduce w{w} it{it}",
            lambda: run(push, placement, f"push w{w} it{it}", pushed))

    def done(w, it):
        ends[w].append(engine.env.now)
        if it + 1 < total:
            iterate(w, it + 1)

    for w in range(n):
        engine.call_at(0.0, lambda w=w: iterate(w, 0))
    engine.run()
    # steady state: whole exchange cycles after the first
    spans = [(e[-1] - e[tau - 1]) / (len(e) - tau) for e in ends]
    rate = sum(len(groups[w]) / spans[w] for w in range(n))
    return float(np.mean(spans)), float(np.mean(busy)) / total, rate, total


def union_length(intervals) -> float:
    """Total length covered by possibly overlapping ``(start, end)`` intervals."""
    total, end = 0.0, -math.inf
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total
