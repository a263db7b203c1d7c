"""The kernels of a hybrid-parallel transformer step, timed with PyTorch: a kernel table.

The LLM cost model (:mod:`simulator.workload.llm.compute`) times every kernel of a step from a
roofline; a measured table replaces those times (``clustersim llm --kernels FILE``). This
module writes such a table for one model and layout: it asks the cost model which kernels the
step uses (:func:`~simulator.workload.llm.compute.kernels_of`: GEMMs of each shape, fused
attention forward and backward, memory-bound passes, the optimizer) and times each one on the
device, as the step would run it:

* ``gemm``: ``a @ b`` of the shape, in bf16/fp16 on a GPU (fp8 GEMMs as bf16: PyTorch has no
  portable fp8 matmul; say so in the file), in float32 on a CPU (CPUs have no fast 16-bit
  matmul in every build);
* ``attention_fwd`` / ``attention_bwd``: ``torch.nn.functional.scaled_dot_product_attention``
  (FlashAttention or the memory-efficient kernel where the GPU has them), causal, grouped query
  heads expanded to the query heads; the backward is the autograd backward of one call;
* ``elementwise`` and ``adam``: a copy that moves the kernel's bytes (half read, half written),
  the memory-bound cost the roofline charges.

Each kernel gets ``warmup`` untimed runs, then the median of ``iterations`` (CUDA events on a
GPU, :mod:`simulator.measure.timing`). Output: ``op, shape, time_s`` (the table's key and
value) plus ``device`` and ``iterations``.
"""

from __future__ import annotations

import re

import pandas as pd

from ..errors import ConfigError
from . import require_torch, resolve_device
from .timing import fixed_threads, measure

__all__ = ["LLM_KERNEL_COLUMNS", "measure_llm_kernels"]

LLM_KERNEL_COLUMNS = ("op", "shape", "time_s", "device", "iterations")


def _dims(shape: str) -> dict:
    return {k: v for k, v in re.findall(r"(\w+)=([\w.]+)", shape)}


def _runner(torch, kernel, device, dtype):
    """A zero-argument callable that runs ``kernel`` once on ``device``."""
    if kernel.op == "gemm":
        m, n, k = kernel.dims
        a = torch.randn(m, k, device=device, dtype=dtype)
        b = torch.randn(k, n, device=device, dtype=dtype)
        return lambda: a @ b
    if kernel.op in ("attention_fwd", "attention_bwd"):
        d = _dims(kernel.shape)
        b, heads, sq, skv, hd = (int(d[x]) for x in ("b", "heads", "sq", "skv", "d"))
        causal = d.get("causal", "1") == "1"
        grad = kernel.op == "attention_bwd"
        q = torch.randn(b, heads, sq, hd, device=device, dtype=dtype, requires_grad=grad)
        k = torch.randn(b, heads, skv, hd, device=device, dtype=dtype, requires_grad=grad)
        v = torch.randn(b, heads, skv, hd, device=device, dtype=dtype, requires_grad=grad)
        sdpa = torch.nn.functional.scaled_dot_product_attention
        if not grad:
            return lambda: sdpa(q, k, v, is_causal=causal)
        out = sdpa(q, k, v, is_causal=causal)
        g = torch.randn_like(out)
        return lambda: torch.autograd.grad(out, (q, k, v), g, retain_graph=True)
    # memory-bound: move the kernel's bytes, half read and half written
    elements = max(1, int(kernel.bytes // 2 // torch.tensor([], dtype=dtype).element_size()))
    src = torch.empty(elements, device=device, dtype=dtype).uniform_()
    dst = torch.empty_like(src)
    return lambda: dst.copy_(src)


def measure_llm_kernels(step_work_fn, *, device="cpu", iterations: int = 10, warmup: int = 2,
                        threads: int | None = None, limit: int | None = None) -> pd.DataFrame:
    """Time every distinct kernel that ``step_work_fn(kernels=...)`` asks for (see the module
    notes); ``limit`` keeps the first ``limit`` kernels only (a quick look)."""
    from ..workload.llm.compute import kernels_of

    torch = require_torch()
    dev = resolve_device(device)
    kernels = kernels_of(step_work_fn)
    if limit is not None:
        if limit < 1:
            raise ConfigError(f"--limit must be >= 1, got {limit}")
        kernels = kernels[:limit]
    dtype = torch.float32 if dev.type == "cpu" else torch.bfloat16
    rows = []
    with fixed_threads(threads):
        for kernel in kernels:
            run = _runner(torch, kernel, dev, dtype)
            stats = measure(run, dev, iterations=iterations, warmup=warmup)
            rows.append({"op": kernel.op, "shape": kernel.shape, "time_s": stats.median_s,
                         "device": str(dev), "iterations": iterations})
    return pd.DataFrame(rows, columns=list(LLM_KERNEL_COLUMNS))

