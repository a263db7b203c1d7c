"""Hybrid-parallel transformer training (tensor, context, expert, pipeline, data parallel).

Pure cost side: :mod:`.model`, :mod:`.registry`, :mod:`.layout`, :mod:`.compute`,
:mod:`.memory`, :mod:`.costs` (architecture and layout -> :class:`~.work.StepWork`). Step side:
:mod:`.placement` (ranks and groups on a topology), :mod:`.schedule` (pipeline orders, with
Megatron's interleaved 1F1B), :mod:`.groups` (collectives costed by the library, run as flows)
and :mod:`.step` (:func:`~.step.simulate_step`: one step on one flow network).

Submodules are imported lazily, so this package imports whatever parts exist.
"""

from __future__ import annotations

import importlib

_LAZY = {
    "Layout": ".layout", "StepWork": ".work", "ChunkWork": ".work", "Op": ".work",
    "Comm": ".work", "Placement": ".placement", "place": ".placement",
    "simulate_step": ".step", "StepResult": ".step", "stage_orders": ".schedule",
}

__all__ = sorted(_LAZY)


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
