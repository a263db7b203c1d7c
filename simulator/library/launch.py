"""How a measurement issues its calls: the host side of a collective.

A benchmark loop (nccl-tests' timing loop, a training step's bucket after bucket) enqueues calls
back to back, so the GPU work of one call overlaps the host's launch of the next. What the loop
measures per call is therefore ``max(device time, host time per call)``; the host time dominates
small messages and vanishes for large ones. It depends on how the measurement was taken:

``mpi``
    One process per GPU (nccl-tests ``-g 1`` under MPI, one rank per GPU; torchrun without the
    Python overhead): each process launches one kernel per call.
``group``
    One thread drives all ``G`` GPUs of its process (nccl-tests ``-g G``): inside
    ``ncclGroupStart/End`` the launches are serialised, ``G`` per call.
``torch``
    ``torch.distributed`` calls from Python, one process per GPU: one launch plus the Python
    and c10d dispatch of the call.
``none``
    The device time alone (the library's own cost model; CUDA graphs).

The per-launch and per-call costs are constants with sources (see :data:`LAUNCH_COSTS`);
``calibrate`` may fit them for a user's machine.

The timing loop of nccl-tests (NVIDIA/nccl-tests ``src/common.cu``, ``BenchTime``, at
a0b82b2260cf5152b9f8c061bbf7eaf0ba096432 and the same in v2.13.8): the timer starts, ``iters``
calls are enqueued back to back on one stream per GPU (``startColl``: no synchronisation unless
``-z``), then ``completeColl`` synchronises the streams once and the time is divided by
``iters x agg_iters`` (then averaged over ranks). The host enqueues call ``k+1`` while the GPU
runs call ``k``, so the loop takes ``iters x max(device, host) + min(device, host)`` and
each call reports ``max(device, host) + min(device, host) / iters``
(:func:`loop_time_s`); ``-z`` 1, 2 or 3 (``# Blocking Enabled: wait ...`` in the header,
``src/util.cu``) synchronises after every call, which then costs ``device + host``. A
run with ``-G N`` (CUDA graphs) captures the calls and replays the graph: no per-call launch
(mode ``none``).

The harness is stated in the first lines of an nccl-tests log: ``# nThread T nGpus G ...`` and
one ``#  Rank r Group g Pid p on host device d ...`` line per rank; :func:`launch_from_harness`
turns them into the launch mode (one process per GPU: ``mpi``; one thread driving ``G > 1``
GPUs: ``group:G``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import ConfigError

#: Launch modes users may name.
MODES = ("mpi", "group", "torch", "none")

#: Host costs, seconds.
#:
#: ``kernel_launch_s``, the host time of one GPU's NCCL launch inside a call, and
#: ``call_overhead_s``, the call's own host time: a maintainers' thread measures nccl-tests on a
#: DGX A100 with one thread driving ``-g G`` GPUs (``NCCL_ALGO=Ring NCCL_MAX_NCHANNELS=1
#: all_reduce_perf -b 8 -e 128 -g G``; NVIDIA/nccl-tests issue #123, 2022): 10.0, 13.76, 16.88,
#: 20.8, 25.2, 29.5 and 33.7 us for G = 2..8, far above NCCL's own ring latency (7.8 to 15 us
#: by tuning.cc) and growing by a constant per GPU: the host, launching one GPU after another,
#: paces the loop. The least-squares line is 1.60 us + 3.96 us per GPU.
#:
#: ``python_call_s``: torch.distributed's dispatch of one call from Python (the c10d work
#: object, stream bookkeeping), about 10 us: of the order of the Python-to-kernel-launch path
#: PyTorch's CUDA graphs documentation sets out to remove.
LAUNCH_COSTS = {"kernel_launch_s": 3.96e-6, "call_overhead_s": 1.60e-6,
                "python_call_s": 10.0e-6}

#: One thread driving ``G`` GPUs (``-g G``) launches their kernels one after another, so the
#: call starts on the last GPU ``(G - 1) x kernel_launch_s`` after the first, and the ring
#: cannot finish before that GPU has joined. The loop does not hide all of that offset: on one
#: machine measured both ways (``tests/data/measurements/nccl_thanos_a100sxm80_1node.csv``, 8 x
#: A100-SXM, the same NCCL, ``-g 8`` vs ``mpirun -np 8 -g 1``) the ``-g 8`` run is 10-20 us
#: slower per call from 64 B to 2 MiB and still 8-25 % slower from 4 to 512 MiB. Charging this
#: fraction of the offset on top of the device time (half: the mean offset of the G kernels)
#: is fitted on that file; checked on the other ``-g 8`` files (OCI A100, the 19.3 A100 run,
#: the two 8 x RTX 4090 runs, B200), whose MAPE it lowers (docs/validation/sources.md,
#: "Harness").
GROUP_SKEW_FRACTION = 0.5


@dataclass(frozen=True)
class Launch:
    """How calls are issued: a :data:`MODES` name, for ``group`` the GPUs per thread, and
    whether the loop synchronises after every call (nccl-tests ``-z 1``)."""

    mode: str = "mpi"
    gpus_per_thread: int = 1
    blocking: bool = False

    def host_time_s(self, costs: dict | None = None) -> float:
        """Host time per call (``max(device, host)`` paces a back-to-back loop)."""
        costs = {**LAUNCH_COSTS, **(costs or {})}
        if self.mode == "none":
            return 0.0
        launches = self.gpus_per_thread if self.mode == "group" else 1
        extra = costs["python_call_s"] if self.mode == "torch" else 0.0
        return costs["call_overhead_s"] + launches * costs["kernel_launch_s"] + extra

    def skew_s(self, costs: dict | None = None) -> float:
        """Device-side delay per call of a ``group`` launch (:data:`GROUP_SKEW_FRACTION`)."""
        if self.mode != "group" or self.gpus_per_thread < 2:
            return 0.0
        costs = {**LAUNCH_COSTS, **(costs or {})}
        return GROUP_SKEW_FRACTION * (self.gpus_per_thread - 1) * costs["kernel_launch_s"]

    def loop_time_s(self, device_s: float, costs: dict | None = None,
                    iters: int | None = None) -> float:
        """What an nccl-tests loop of ``iters`` calls reports per call (:func:`loop_time_s`)."""
        return loop_time_s(device_s + self.skew_s(costs), self.host_time_s(costs), iters,
                           self.blocking)

    def __str__(self) -> str:
        base = f"group:{self.gpus_per_thread}" if self.mode == "group" else self.mode
        return base + ("+blocking" if self.blocking else "")


def loop_time_s(device_s: float, host_s: float, iters: int | None = None,
                blocking: bool = False) -> float:
    """Per-call time an nccl-tests timing loop reports (see the module docstring).

    ``iters`` calls enqueued back to back and one synchronisation at the end:
    ``max(device, host) + min(device, host) / iters`` (``iters`` None or 0: the steady state,
    ``max(device, host)``); ``blocking`` (``-z 1``): ``device + host``.
    """
    if blocking:
        return device_s + host_s
    tail = min(device_s, host_s) / iters if iters else 0.0
    return max(device_s, host_s) + tail


def launch_from_harness(threads: int | None, gpus_per_thread: int | None,
                        processes: int | None = None, *, cuda_graph: int = 0,
                        blocking: int = 0) -> Launch:
    """The launch mode of an nccl-tests run from its ``# nThread T nGpus G`` line.

    Each of the ``processes x T`` threads drives ``G`` GPUs inside one ``ncclGroupStart/End``
    (``startColl`` in ``src/common.cu``): ``G > 1`` is ``group:G``, ``G = 1`` one launch per
    call per thread (``mpi``). ``cuda_graph > 0`` (``-G``, "graph: N" in the header) replays
    captured calls: ``none``. ``blocking`` (``-z`` 1, 2 or 3; "# Blocking Enabled" in the
    header) synchronises after every call.
    """
    sync = int(blocking or 0) in (1, 2, 3)
    if cuda_graph and int(cuda_graph) > 0:
        return Launch("none", 1, False)
    g = int(gpus_per_thread or 1)
    if g > 1:
        return Launch("group", g, sync)
    return Launch("mpi", 1, sync)


def parse_launch(text, *, gpus_per_node: int = 1, what: str = "--launch") -> Launch:
    """A :class:`Launch` from ``mpi``, ``group``, ``group:G``, ``torch`` or ``none``, each
    optionally with ``+blocking`` (nccl-tests ``-z 1``: a synchronisation after every call).

    ``group`` alone drives every GPU of a machine from one thread (``gpus_per_node``).
    """
    if isinstance(text, Launch):
        return text
    value = str(text).strip().lower()
    value, plus, suffix = value.partition("+")
    if plus and suffix != "blocking":
        raise ConfigError(f"{what}: unknown launch suffix {'+' + suffix!r} in {text!r}; "
                          f"accepted: +blocking (nccl-tests -z 1)")
    blocking = bool(plus)
    mode, _, count = value.partition(":")
    if mode not in MODES or (count and mode != "group"):
        raise ConfigError(f"{what}: unknown launch mode {text!r}; accepted: mpi, group, "
                          f"group:G (G GPUs per thread, nccl-tests -g G), torch, none, each "
                          f"optionally +blocking (nccl-tests -z 1)")
    if mode != "group":
        return Launch(mode, 1, blocking)
    if not count:
        return Launch("group", max(1, int(gpus_per_node)), blocking)
    if not count.isdigit() or int(count) < 1:
        raise ConfigError(f"{what}: group:G needs a positive integer G, got {text!r}")
    return Launch("group", int(count), blocking)


_G_FLAG = re.compile(r"(?:^|[\s;,(])-g\s*(\d+)")
# (not -n or -N: nccl-tests' own iteration and cycle flags)
_NP_FLAG = re.compile(r"(?:^|[\s;,(])(?:-np|--np|--ntasks)[\s=]+(\d+)")
_PER_NODE = re.compile(r"(?:-npernode|--ntasks-per-node|--nproc[-_]per[-_]node)[\s=]+(\d+)")


def launch_from_notes(notes: str, *, gpus: int, nodes: int) -> Launch:
    """The launch mode a measured file's notes imply, else the nccl-tests convention.

    ``-g G`` in the notes (nccl-tests' GPUs-per-thread flag) gives ``group:G`` for ``G > 1`` and
    ``mpi`` for ``G = 1``; ``torch`` or ``torch.distributed`` gives ``torch``; an MPI or Slurm
    launch of one process per rank (``-np N`` / ``--ntasks N`` with ``N`` the rank count, or
    ``-npernode`` / ``--ntasks-per-node`` times the machines) gives ``mpi``. Without any,
    a single machine is taken as nccl-tests' single-process example (``-g`` all GPUs, the
    nccl-tests README's first command) and several machines as one MPI rank per GPU (the
    README's multi-node example).
    """
    text = str(notes or "")
    match = _G_FLAG.search(text)
    if match:
        g = int(match.group(1))
        return Launch("group", g) if g > 1 else Launch("mpi")
    if "torch" in text.lower():
        return Launch("torch")
    # an MPI / Slurm launch of one process per GPU: -np N (or --ntasks N) = the rank count, or
    # as many tasks per node as the machine has GPUs
    match = _NP_FLAG.search(text)
    if match and int(match.group(1)) == gpus:
        return Launch("mpi")
    match = _PER_NODE.search(text)
    if match and nodes and int(match.group(1)) * nodes == gpus:
        return Launch("mpi")
    if nodes <= 1:
        return Launch("group", max(1, gpus))
    return Launch("mpi")
