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


@dataclass(frozen=True)
class Launch:
    """How calls are issued: a :data:`MODES` name and, for ``group``, GPUs per thread."""

    mode: str = "mpi"
    gpus_per_thread: int = 1

    def host_time_s(self, costs: dict | None = None) -> float:
        """Host time per call (``max(device, host)`` paces a back-to-back loop)."""
        costs = {**LAUNCH_COSTS, **(costs or {})}
        if self.mode == "none":
            return 0.0
        launches = self.gpus_per_thread if self.mode == "group" else 1
        extra = costs["python_call_s"] if self.mode == "torch" else 0.0
        return costs["call_overhead_s"] + launches * costs["kernel_launch_s"] + extra

    def __str__(self) -> str:
        return f"group:{self.gpus_per_thread}" if self.mode == "group" else self.mode


def parse_launch(text, *, gpus_per_node: int = 1, what: str = "--launch") -> Launch:
    """A :class:`Launch` from ``mpi``, ``group``, ``group:G``, ``torch`` or ``none``.

    ``group`` alone drives every GPU of a machine from one thread (``gpus_per_node``).
    """
    if isinstance(text, Launch):
        return text
    value = str(text).strip().lower()
    mode, _, count = value.partition(":")
    if mode not in MODES or (count and mode != "group"):
        raise ConfigError(f"{what}: unknown launch mode {text!r}; accepted: mpi, group, "
                          f"group:G (G GPUs per thread, nccl-tests -g G), torch, none")
    if mode != "group":
        return Launch(mode)
    if not count:
        return Launch("group", max(1, int(gpus_per_node)))
    if not count.isdigit() or int(count) < 1:
        raise ConfigError(f"{what}: group:G needs a positive integer G, got {text!r}")
    return Launch("group", int(count))


_G_FLAG = re.compile(r"(?:^|[\s;,(])-g\s*(\d+)")


def launch_from_notes(notes: str, *, gpus: int, nodes: int) -> Launch:
    """The launch mode a measured file's notes imply, else the nccl-tests convention.

    ``-g G`` in the notes (nccl-tests' GPUs-per-thread flag) gives ``group:G`` for ``G > 1`` and
    ``mpi`` for ``G = 1``; ``torch`` or ``torch.distributed`` gives ``torch``. Without either,
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
    if nodes <= 1:
        return Launch("group", max(1, gpus))
    return Launch("mpi")
