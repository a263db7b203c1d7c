"""Timing that means the same thing on a CPU and on a GPU.

A GPU runs kernels asynchronously: a host clock read right after a launch measures the launch,
not the work. :class:`Timer` therefore records a CUDA event before and after the timed region and
waits for the second one (``Event.synchronize``), reading the device's own clock; on a CPU the
work is synchronous and ``time.perf_counter`` brackets it. Callers see one interface,
``start()`` / ``stop() -> seconds``, so the CPU path runs exactly the code the GPU path runs.

:func:`measure` adds what makes a number repeatable: warm-up runs first (allocator, caches,
cuDNN/oneDNN algorithm selection, lazy initialisation), then ``iterations`` timed runs summarised
by their median (robust to the odd descheduled run) and spread (standard deviation and
inter-quartile range). :func:`fixed_threads` pins the intra-op thread count, without which CPU
timings drift with whatever else the machine runs.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from simulator.errors import ConfigError

from . import require_torch, resolve_device

__all__ = ["Stats", "Timer", "fixed_threads", "measure", "summarize"]


class Timer:
    """Wall time of a region on ``device``: CUDA events on a GPU, ``perf_counter`` on a CPU.

    >>> timer = Timer("cpu")
    >>> timer.start(); _ = sum(range(1000)); seconds = timer.stop()
    """

    def __init__(self, device="cpu"):
        self.device = resolve_device(device)
        self._cuda = self.device.type == "cuda"
        if self._cuda:
            torch = require_torch()
            self._begin = torch.cuda.Event(enable_timing=True)
            self._end = torch.cuda.Event(enable_timing=True)
        self._started: float | None = None

    def sync(self) -> None:
        """Wait until the device has finished all queued work (no-op on a CPU)."""
        if self._cuda:
            require_torch().cuda.synchronize(self.device)

    def start(self) -> None:
        """Mark the beginning of the timed region (queued work before it is waited for)."""
        self.sync()
        if self._cuda:
            self._begin.record()
            self._started = 0.0
        else:
            self._started = time.perf_counter()

    def stop(self) -> float:
        """End the timed region; returns its duration in seconds."""
        if self._started is None:
            raise RuntimeError("Timer.stop() called before start()")
        if self._cuda:
            self._end.record()
            self._end.synchronize()
            seconds = self._begin.elapsed_time(self._end) / 1e3  # elapsed_time is in ms
        else:
            seconds = time.perf_counter() - self._started
        self._started = None
        return seconds


@dataclass(frozen=True)
class Stats:
    """Summary of repeated timings, seconds."""

    median_s: float
    mean_s: float
    std_s: float      # sample standard deviation (0 for one sample)
    iqr_s: float      # 75th minus 25th percentile
    min_s: float
    max_s: float
    iterations: int

    @property
    def relative_spread(self) -> float:
        """Standard deviation over median (0 when the median is 0)."""
        return self.std_s / self.median_s if self.median_s > 0 else 0.0


def _iqr(values: Sequence[float]) -> float:
    """Interquartile range by linear interpolation (numpy's default: ``statistics``'
    inclusive method)."""
    if len(values) < 2:
        return 0.0
    low, _, high = statistics.quantiles(values, n=4, method="inclusive")
    return high - low


def summarize(samples_s: Sequence[float]) -> Stats:
    """Median, mean, std, IQR, min and max of timings in seconds."""
    values = sorted(float(s) for s in samples_s)
    if not values:
        raise ValueError("no samples to summarize")
    return Stats(median_s=statistics.median(values), mean_s=statistics.fmean(values),
                 std_s=statistics.stdev(values) if len(values) > 1 else 0.0,
                 iqr_s=_iqr(values),
                 min_s=values[0], max_s=values[-1], iterations=len(values))


def check_counts(iterations: int, warmup: int) -> None:
    """Raise ConfigError unless ``iterations >= 1`` and ``warmup >= 0`` are integers."""
    if not isinstance(iterations, int) or isinstance(iterations, bool) or iterations < 1:
        raise ConfigError(f"iterations must be an integer >= 1, got {iterations!r}")
    if not isinstance(warmup, int) or isinstance(warmup, bool) or warmup < 0:
        raise ConfigError(f"warmup must be an integer >= 0, got {warmup!r}")


def measure(fn: Callable[[], object], device="cpu", iterations: int = 20, warmup: int = 3,
            setup: Callable[[], object] | None = None) -> Stats:
    """Time ``fn()`` ``iterations`` times after ``warmup`` untimed runs.

    ``setup()``, when given, runs untimed before every run (warm-up and timed) and its result
    is passed to ``fn``: it prepares inputs that the timed region consumes (a fresh autograd
    graph for a backward pass, say).
    """
    check_counts(iterations, warmup)
    timer = Timer(device)
    samples = []
    for i in range(warmup + iterations):
        if setup is not None:
            arg = setup()
            timer.start()
            fn(arg)
        else:
            timer.start()
            fn()
        seconds = timer.stop()
        if i >= warmup:
            samples.append(seconds)
    return summarize(samples)


@contextlib.contextmanager
def fixed_threads(threads: int | None):
    """Run the body with ``torch.set_num_threads(threads)``; restore the old count after.

    ``None`` keeps the current count (yields it). The count matters on a CPU: oneDNN and
    OpenMP spread one operator over the intra-op threads.
    """
    torch = require_torch()
    old = torch.get_num_threads()
    if threads is None:
        yield old
        return
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise ConfigError(f"threads must be an integer >= 1, got {threads!r}")
    torch.set_num_threads(threads)
    try:
        yield threads
    finally:
        torch.set_num_threads(old)
