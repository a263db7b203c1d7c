"""Pipeline schedules over model chunks: per stage, the order of (chunk, micro-batch, F/B).

* ``gpipe`` and ``1f1b``: :mod:`simulator.workload.pipeline`'s schedules, one chunk per stage.
* ``interleaved``: Megatron-LM's interleaved 1F1B (Narayanan et al., SC 2021, section 2.2.2;
  ``megatron/core/pipeline_parallel/schedules.py``,
  ``forward_backward_pipelining_with_interleaving``). Stage ``s`` holds ``v`` model chunks
  (chunk ``c = k * p + s`` of the model for ``k < v``); its forward micro-steps ``j`` run chunk
  ``(j // p) % v`` of micro-batch ``(j // (p v)) p + j % p``, its backward micro-steps the same
  with the chunk order reversed; ``(p - s - 1) * 2 + (v - 1) * p`` warm-up forwards, capped at
  ``m v`` (all of them when ``m == p``, as Megatron does), then one forward and one backward alternately, then the
  remaining backwards. Its bubble is ``(p - 1) / (v m)`` of the ideal time, ``v`` times smaller
  than 1F1B's ``(p - 1) / m``. Megatron requires ``m`` to be a multiple of ``p`` (>= p).
"""

from __future__ import annotations

from typing import NamedTuple

from ...errors import ConfigError
from ..pipeline import gpipe, one_f_one_b

__all__ = ["ChunkOp", "stage_orders", "interleaved"]


class ChunkOp(NamedTuple):
    """One op of a stage: forward (``"F"``) or backward (``"B"``) of ``micro_batch`` on the
    stage's model chunk ``virtual``."""

    virtual: int
    micro_batch: int
    kind: str


def interleaved(stages: int, micro_batches: int, virtual: int) -> tuple[tuple[ChunkOp, ...], ...]:
    p, m, v = stages, micro_batches, virtual
    if m % p:
        raise ConfigError(f"the interleaved schedule needs micro-batches ({m}) to be a multiple "
                          f"of the pipeline stages ({p}), as Megatron-LM does")
    total = m * v

    def chunk_op(j: int, forward: bool) -> ChunkOp:
        k = (j // p) % v
        mb = (j // (p * v)) * p + j % p
        return ChunkOp(k if forward else v - 1 - k, mb, "F" if forward else "B")

    out = []
    for s in range(p):
        if m == p:
            warm = total
        else:
            warm = min((p - s - 1) * 2 + (v - 1) * p, total)
        ops = [chunk_op(j, True) for j in range(warm)]
        f, b = warm, 0
        for _ in range(total - warm):
            ops.append(chunk_op(f, True))
            f += 1
            ops.append(chunk_op(b, False))
            b += 1
        ops += [chunk_op(j, False) for j in range(b, total)]
        out.append(tuple(ops))
    return tuple(out)


def stage_orders(pipeline: str, stages: int, micro_batches: int,
                 virtual: int = 1) -> tuple[tuple[ChunkOp, ...], ...]:
    """Per stage, its ops in order (see the module docstring)."""
    if micro_batches < 1:
        raise ConfigError(f"micro-batches per pipeline must be >= 1 (global batch / (dp x "
                          f"micro batch)), got {micro_batches}")
    if pipeline == "interleaved":
        return interleaved(stages, micro_batches, virtual)
    if virtual != 1:
        raise ConfigError(f"--virtual-stages {virtual} needs --pipeline interleaved, "
                          f"not {pipeline!r}")
    if pipeline == "gpipe":
        base = gpipe(stages, micro_batches)
    elif pipeline == "1f1b":
        base = one_f_one_b(stages, micro_batches)
    else:
        raise ConfigError(f"unknown pipeline schedule {pipeline!r}; valid: 1f1b, gpipe, "
                          f"interleaved")
    return tuple(tuple(ChunkOp(0, op.micro_batch, op.kind) for op in ops) for ops in base)
