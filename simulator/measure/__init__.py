"""Measure the real thing: per-layer compute times and collective times on this machine.

The simulator predicts; this package measures, so that predictions can be checked against
numbers taken under known conditions. It is an optional extra (``pip install
'clustersim[measure]'`` installs ``torch==2.13.0``) and imports PyTorch lazily: ``import
simulator.measure`` works without it, and every entry point calls :func:`require_torch` first.

Modules
-------
timing       a device-agnostic timer (CUDA events on a GPU, ``time.perf_counter`` on a CPU: one
             code path), warm-ups, repeated runs, medians and spreads
kernels      per-layer forward and backward times of the registry's models (torch builders whose
             leaf modules carry the layer names of :mod:`simulator.workload.models`)
network      a real small cluster on one Linux machine: a network namespace per rank on a bridge,
             every link rate-limited with ``tc`` in both directions, and its topology YAML
collectives  ``torch.distributed`` all-reduce timings: the library's own, and hand-written ring,
             binary tree and parameter server, on loopback or on the shaped network
training     real data-parallel training steps (DDP, a parameter server), timed
input_pipeline  the host's input pipeline (decode, crop, flip, normalise): CPU-seconds per
             sample, with Pillow and numpy only (no PyTorch)

Why a shaped network (DESIGN.md section 9): a plain loopback is CPU-bound and noisy (~45 %); a
namespace cluster rate-limited with ``tc tbf`` matched the bandwidth model within 3-7 % for
messages >= 1 MiB, with 0.4-2 % run-to-run drift. Only bandwidth can be shaped on a kernel
without ``netem``; latency is measured and reported, not set.
"""

from __future__ import annotations

import platform

from simulator.errors import ClusterSimError, ConfigError

__all__ = ["MeasurementError", "TORCH_REQUIREMENT", "available_cpus", "cpu_name",
           "device_info", "require_torch", "resolve_device"]

#: The PyTorch release the measurements are written and tested against (setup.cfg ``measure``).
TORCH_REQUIREMENT = "torch==2.13.0"


class MeasurementError(ClusterSimError):
    """A measurement could not be taken (a worker failed or timed out, a result was wrong)."""


def require_torch():
    """Import and return ``torch``, or raise ConfigError saying how to install it."""
    try:
        import torch
    except ImportError:
        raise ConfigError("clustersim measure needs PyTorch: pip install 'clustersim[measure]' "
                          f"({TORCH_REQUIREMENT})") from None
    return torch


def resolve_device(device="cpu"):
    """``"cpu"``, ``"cuda"``, ``"cuda:1"`` or a ``torch.device`` -> a checked ``torch.device``.

    Raises
    ------
    ConfigError
        For an unknown device kind, or a CUDA device on a machine without one (one line).
    """
    torch = require_torch()
    try:
        dev = device if isinstance(device, torch.device) else torch.device(str(device))
    except (RuntimeError, TypeError):
        raise ConfigError(f"unknown device {device!r}; valid: cpu, cuda, cuda:N") from None
    if dev.type == "cpu":
        return dev
    if dev.type != "cuda":
        raise ConfigError(f"unsupported device {device!r}; valid: cpu, cuda, cuda:N")
    if not torch.cuda.is_available():
        raise ConfigError(f"no CUDA device available: --device {device} needs an NVIDIA GPU "
                          f"and a CUDA build of PyTorch (this one is {torch.__version__})")
    count = torch.cuda.device_count()
    if dev.index is not None and dev.index >= count:
        raise ConfigError(f"no CUDA device available: {device!r} asked, this machine has "
                          f"{count} (cuda:0..cuda:{count - 1})")
    return dev


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask; ``os.cpu_count()`` elsewhere)."""
    import os

    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:   # not Linux
        return os.cpu_count() or 1


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else the platform's processor)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def device_info(device="cpu") -> tuple[str, str]:
    """``(kind, name)`` of a device: ``("cpu", "<cpu model>")`` or ``("cuda", "<GPU name>")``.

    Raises ConfigError (``no CUDA device available: ...``) for a GPU request without a GPU.
    """
    dev = resolve_device(device)
    if dev.type == "cuda":
        torch = require_torch()
        return "cuda", torch.cuda.get_device_name(dev)
    return "cpu", cpu_name()
