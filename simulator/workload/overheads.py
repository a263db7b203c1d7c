"""Training time outside communication: the slowest of N workers, the input pipeline, and the
framework's fixed cost per iteration.

A synchronous data-parallel step ends when its *slowest* worker does, and a machine's GPUs
share its CPU cores for the input pipeline. Neither shows on one GPU, so a simulator anchored
on one measured GPU loses none of them unless it models them. Three effects, each a pure
function of its inputs (no engine), applied by :func:`~simulator.workload.training.
simulate_training` as compute multipliers (per worker) and an additive per-iteration time:

**Per-step compute jitter** (``jitter_cv``). Per-worker step times are i.i.d. with mean ``mu``
and coefficient of variation ``cv``; a synchronous step waits for the maximum of ``N`` of them.
For normal step times its expectation is ``mu (1 + cv E[max of N standard normals])``
(:func:`expected_max_normal`: the exact integral ``E = int x n phi(x) Phi(x)^(n-1) dx``;
:func:`blom_max_normal` is Blom's approximation ``Phi^-1((n - 0.375)/(n + 0.25))``, within
5 % of it at n = 2 and 0.5 % from n = 8). ``mode="sampled"`` draws the step times instead, from a seeded
:class:`numpy.random.Generator` passed down (same seed, same result). This is *not* the
``stragglers`` of :mod:`.sweep` (a fixed set of workers that are always slower): both apply.
Asynchronous parameter servers do not wait for the slowest, so jitter leaves them alone.

**Input pipeline on the host CPU** (``decode_cpu_s_per_sample``, ``host_cores``). Each sample
costs that many CPU-seconds to read, decode and augment; the GPUs of one machine share its
cores. Prefetching overlaps the pipeline with GPU compute, so a step takes the longer of the
two (the data-stall model of Mohan et al., "Analyzing and Mitigating Data Stalls in DNN
Training", VLDB 2021: training runs at min(GPU rate, preparation rate)). Synthetic data: 0. No
published source gives the cost for a pipeline and a host; ``clustersim measure input``
(:mod:`simulator.measure.input_pipeline`) measures it on the user's own images and CPUs.

**Framework overhead per iteration** (``step_overhead_s``): Python, session or optimizer
launch, paid once per step whatever N (Horovod's fusion cycle and negotiation are modelled by
the ``horovod`` framework itself, :mod:`.frameworks`).

Defaults are zero (the behaviour of earlier releases); :data:`SOURCED` holds the sourced values
a user may choose, and ``clustersim compare`` uses them per measured row.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError

JITTER_MODES = ("expected", "sampled")

#: Per-step coefficient of variation of one GPU's iteration time. Horovod's
#: ``tensorflow2_synthetic_benchmark.py`` prints ``Img/sec per GPU: mean +-1.96 std`` over
#: 10 timed chunks of 10 steps. A published run on 8 GPUs of one node (Oracle Cloud HPC
#: cluster blog, Horovod Docker image, ResNet-50 batch 32, synthetic data: chunk rates 598.3
#: 598.7 597.6 600.6 599.3 599.5 598.4 601.3 603.7 602.8, "600.0 +-3.8") has a chunk std of
#: 0.32 % of the mean, i.e. 1.0 % per step for independent steps (x sqrt(10)). That spread is
#: of the synchronous step (the max over 8 workers, whose std is 0.59 sigma for normals), so
#: 1.0 % bounds the per-worker cv from below. A 4-node x 2 P100 run of the same benchmark over
#: a cluster network (NAIST blog, "174.9 +-3.7") gives 3.4 %: multi-node runs vary more
#: (network), which the flow model already simulates, so the in-node value is the default.
#: Not fitted to any file this project compares with.
JITTER_CV_HOROVOD = 0.010

#: CPU-seconds per ImageNet training image of TensorFlow's 2017 ``tf_cnn_benchmarks``
#: real-data pipeline, as the data-stall (max) model needs it to explain the one pair it was
#: fitted on: tf_benchmarks_2017 DGX-1 ResNet-50 batch 64, real vs synthetic data at 8 GPUs
#: (1630 vs 1734 img/s: ``8 x 64 x c / 40 cores = 0.314 s``). CALIBRATED, and it FAILS its
#: check: the same pipeline fed AlexNet at 7105 img/s on 4 GPUs (real data, same table), which
#: bounds ``c <= 40 / 7105 = 5.6 ms``. The loss real data causes on that machine is contention
#: below saturation, not a stall, so :func:`for_measured_row` does not use this value (kept
#: for the ledger and for users who want the stall model with their own number).
DECODE_CPU_S_TF_CNN_2017 = 0.0245

#: Host cores of the machines in the measured tables: DGX-1 (2 x Xeon E5-2698 v4, 20 cores
#: each, NVIDIA DGX-1 data sheet); DLPerf nodes (2 x Xeon Gold 5118, 12 cores each, DLPerf
#: report v1 hardware section); p2.8xlarge (32 vCPUs = 16 cores, AWS instance table).
DGX1_HOST_CORES = 40
DLPERF_HOST_CORES = 24
P2_8XLARGE_HOST_CORES = 16

def for_measured_row(record: dict, jitter_cv: float = JITTER_CV_HOROVOD,
                     decode_cpu_s_per_sample: float | None = None) -> TrainingOverheads:
    """The overheads of a measured table's row, from what its text says: the sourced jitter,
    and the machine's host cores (DGX-1, DLPerf's nodes, p2.8xlarge). The input pipeline's
    per-sample cost has no source that survives a check (:data:`DECODE_CPU_S_TF_CNN_2017`),
    so it is 0 unless ``decode_cpu_s_per_sample`` is given, and then only for rows whose
    dataset is real data."""
    hardware = str(record.get("hardware", "")).lower()
    dataset = str(record.get("dataset", "")).lower()
    cores = (DGX1_HOST_CORES if "dgx-1" in hardware else
             P2_8XLARGE_HOST_CORES if "p2.8xlarge" in hardware else
             DLPERF_HOST_CORES if "gold 5118" in hardware else None)
    decode = 0.0
    if decode_cpu_s_per_sample and "real" in dataset and "synthetic" not in dataset:
        decode = float(decode_cpu_s_per_sample)
    return TrainingOverheads(jitter_cv=jitter_cv, decode_cpu_s_per_sample=decode,
                             host_cores=cores)


SOURCED = {
    "jitter_cv": JITTER_CV_HOROVOD,
    "decode_cpu_s_per_sample.tf_cnn_benchmarks_2017": DECODE_CPU_S_TF_CNN_2017,
}


@dataclass(frozen=True)
class TrainingOverheads:
    """Time a training iteration spends outside communication (see the module docstring).

    Attributes
    ----------
    jitter_cv : float
        Coefficient of variation of one worker's step time (0: none).
    jitter_mode : str
        ``expected`` (the expected max, analytic) or ``sampled`` (``jitter_steps`` steps drawn
        from ``numpy.random.default_rng(seed)``, the mean of their maxima).
    jitter_steps : int
        Steps drawn in ``sampled`` mode.
    decode_cpu_s_per_sample : float
        Host CPU-seconds per sample of the input pipeline (0: synthetic data).
    host_cores : int or None
        Cores per machine for the input pipeline (None: the topology's ``cpu_cores`` node
        attribute of the machine's CPU, else no limit).
    step_overhead_s : float
        Framework time per iteration, outside the GPU's compute.
    seed : int
        Seed of the generator of ``sampled`` mode.
    """

    jitter_cv: float = 0.0
    jitter_mode: str = "expected"
    jitter_steps: int = 1000
    decode_cpu_s_per_sample: float = 0.0
    host_cores: int | None = None
    step_overhead_s: float = 0.0
    seed: int = 0

    def __post_init__(self):
        if not (0.0 <= self.jitter_cv < 1.0):
            raise ConfigError(f"jitter_cv must be in [0, 1), got {self.jitter_cv!r}")
        if self.jitter_mode not in JITTER_MODES:
            raise ConfigError(f"jitter_mode must be one of {', '.join(JITTER_MODES)}, got "
                              f"{self.jitter_mode!r}")
        if self.jitter_steps < 1:
            raise ConfigError(f"jitter_steps must be >= 1, got {self.jitter_steps!r}")
        if self.decode_cpu_s_per_sample < 0 or self.step_overhead_s < 0:
            raise ConfigError("decode_cpu_s_per_sample and step_overhead_s must be >= 0")
        if self.host_cores is not None and self.host_cores < 1:
            raise ConfigError(f"host_cores must be >= 1, got {self.host_cores!r}")

    @property
    def active(self) -> bool:
        return bool(self.jitter_cv or self.decode_cpu_s_per_sample or self.step_overhead_s)


@functools.lru_cache(maxsize=4096)
def expected_max_normal(n: int) -> float:
    """E[max of ``n`` i.i.d. standard normals], by the exact integral
    ``int x n phi(x) Phi(x)^(n-1) dx`` (trapezoid on [-12, 12], 24,001 points: error < 1e-9)."""
    if n < 1:
        raise ConfigError(f"n must be >= 1, got {n}")
    if n == 1:
        return 0.0
    x = np.linspace(-12.0, 12.0, 24001)
    phi = np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    cdf = 0.5 * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))
    f = x * n * phi * cdf ** (n - 1)
    return float(np.sum((f[1:] + f[:-1]) * 0.5 * np.diff(x)))


def blom_max_normal(n: int) -> float:
    """Blom's approximation of :func:`expected_max_normal`: ``Phi^-1((n - a)/(n + 1 - 2a))``
    with ``a = 0.375`` (Blom 1958; Royston 1982, Applied Statistics 31(2), algorithm AS 177)."""
    if n < 1:
        raise ConfigError(f"n must be >= 1, got {n}")
    if n == 1:
        return 0.0
    return _norm_ppf((n - 0.375) / (n + 0.25))


def _norm_ppf(p: float) -> float:
    """Inverse standard normal CDF by bisection on erf (exact to 1e-12; no scipy needed)."""
    lo, hi = -12.0, 12.0
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        if 0.5 * (1 + math.erf(mid / math.sqrt(2))) < p:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def jitter_factor(n: int, cv: float, mode: str = "expected", rng=None, steps: int = 1000) -> float:
    """Mean synchronous step time of ``n`` workers over one worker's mean step time.

    ``expected``: ``1 + cv E[max of n standard normals]``. ``sampled``: step times
    ``1 + cv z`` (``z`` standard normal, clipped at -1/cv: no negative time) drawn from ``rng``
    (a :class:`numpy.random.Generator`), ``steps`` steps of ``n`` workers; the mean of the
    steps' maxima."""
    if n <= 1 or cv <= 0:
        return 1.0
    if mode == "expected":
        return 1.0 + cv * expected_max_normal(n)
    if mode != "sampled":
        raise ConfigError(f"jitter mode must be one of {', '.join(JITTER_MODES)}, got {mode!r}")
    if rng is None:
        raise ConfigError("sampled jitter needs a numpy Generator (pass the seed's rng)")
    draws = 1.0 + cv * rng.standard_normal((steps, n))
    return float(np.maximum(draws, 0.0).max(axis=1).mean())


def pipeline_factor(compute_s: float, samples_per_machine: int, cpu_s_per_sample: float,
                    cores: float | None) -> float:
    """How much longer a step takes when the machine's input pipeline, ``samples_per_machine``
    samples at ``cpu_s_per_sample`` CPU-seconds each on ``cores`` cores, overlaps a GPU step of
    ``compute_s``: ``max(1, pipeline / compute)`` (1 without a cost or a core limit)."""
    if cpu_s_per_sample <= 0 or not cores or compute_s <= 0:
        return 1.0
    pipeline_s = samples_per_machine * cpu_s_per_sample / float(cores)
    return max(1.0, pipeline_s / compute_s)


def worker_factors(graph, workers: list[str], batch_per_gpu: int, compute_s: float,
                   overheads: TrainingOverheads, synchronous: bool) -> list[float]:
    """Per-worker compute multipliers of ``overheads`` on ``workers``: the later of the input
    pipeline of each worker's machine (its GPUs among ``workers`` share its cores) and the
    slowest worker of a synchronous step (jitter; 1 for asynchronous ones): a step waits for
    its data and for its last worker, whichever comes later, so the two do not multiply."""
    per_machine: dict = {}
    for w in workers:
        per_machine.setdefault(graph.nodes[w].get("node_index", w), []).append(w)
    factors = []
    for w in workers:
        machine = graph.nodes[w].get("node_index", w)
        cores = overheads.host_cores or _topology_cores(graph, w)
        factors.append(pipeline_factor(compute_s, len(per_machine[machine]) * batch_per_gpu,
                                       overheads.decode_cpu_s_per_sample, cores))
    if synchronous and overheads.jitter_cv > 0:
        rng = np.random.default_rng(overheads.seed) if overheads.jitter_mode == "sampled" \
            else None
        j = jitter_factor(len(workers), overheads.jitter_cv, overheads.jitter_mode, rng,
                          overheads.jitter_steps)
        factors = [max(f, j) for f in factors]
    return factors


def _topology_cores(graph, worker: str) -> int | None:
    """``cpu_cores`` of the worker's machine CPU node, if the topology gives one."""
    cpu = f"n{graph.nodes[worker].get('node_index', -1)}.cpu"
    if cpu in graph:
        cores = graph.nodes[cpu].get("cpu_cores")
        return int(cores) if cores else None
    return None
