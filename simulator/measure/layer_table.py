"""Tables of timed layers: one transformer layer (or its attention or MLP block) on its own.

A row names the layer (a registered model, or its shape in columns), the GPUs and layout it ran
on, and what was timed: the mean forward and backward milliseconds of a layer benchmark such as
Megatron-LM's MoE performance test. ``clustersim compare`` recognises the table by a
``measured_forward_ms`` or ``measured_backward_ms`` column and simulates each row with
:func:`simulator.workload.llm.layer.simulate_layer` (:mod:`simulator.comparison.layer`).

Columns (``*``: required):

* ``model``\\*: a label, or a registered model name when the shape columns are blank;
* ``gpus``\\*, ``tp``\\*, ``seq_len``\\*, ``micro_batch``\\*: the ranks the layer ran on (the
  layout's ``tp x cp x dp``), its tensor-parallel degree, and the tokens of one micro-batch;
* ``measured_forward_ms`` / ``measured_backward_ms``: at least one, per row;
* shape (all blank for a registered model): ``hidden``, ``heads``, ``kv_heads``,
  ``ffn_hidden``, ``ffn_kind`` (``gelu``, ``swiglu``), ``vocab``; for a mixture of experts
  ``experts``, ``top_k``, ``moe_ffn_hidden`` and optionally ``shared_ffn_hidden``;
* layout: ``cp``, ``ep``, ``expert_tp``, ``sequence_parallel``, ``precision``,
  ``fp8_recipe``, ``dispatcher``, ``gpu_model``, ``gpus_per_node``;
* ``part``: ``layer``, ``attention`` or ``mlp`` (:data:`~simulator.workload.llm.layer.LAYER_PARTS`;
  blank: ``layer``); ``layer``: the layer's index in the model (blank: 0);
* free text kept as it is: ``source_id``, ``source``, ``notes``.
"""

from __future__ import annotations

import pandas as pd

__all__ = ["LAYER_MEASURED", "LAYER_INTEGER_COLUMNS", "is_layer_table", "read_layer_table"]

#: Measured columns: the mean milliseconds of one forward and of one backward pass.
LAYER_MEASURED = ("measured_forward_ms", "measured_backward_ms")

#: Integer columns (blank: not stated).
LAYER_INTEGER_COLUMNS = ("gpus", "gpus_per_node", "tp", "cp", "ep", "expert_tp", "seq_len",
                         "micro_batch", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab",
                         "experts", "top_k", "moe_ffn_hidden", "shared_ffn_hidden", "layer")
_REQUIRED = ("model", "gpus", "tp", "seq_len", "micro_batch")


def is_layer_table(header) -> bool:
    """Whether a CSV header is a table of timed layers (a measured forward or backward)."""
    return bool({c.strip() for c in header} & set(LAYER_MEASURED))


def read_layer_table(path) -> pd.DataFrame:
    """The rows of a layer table (integers as ``Int64`` with ``<NA>`` for blanks, measured
    values as floats with NaN, ``part`` filled); ``attrs['lines']`` holds each row's line,
    ``attrs['origin']`` the file name. Errors name the file, the line and the column."""
    from ..workload.llm.layer import LAYER_PARTS
    from .llm_table import read_rows

    def check(cells, row):
        part = row.get("part", "") or "layer"
        if part not in LAYER_PARTS:
            raise cells.error("part", f"{part!r}: expected one of {', '.join(LAYER_PARTS)}")
        row["part"] = part

    return read_rows(path, "a layer table", _REQUIRED, LAYER_MEASURED, LAYER_INTEGER_COLUMNS,
                     LAYER_MEASURED, zero_columns=("layer",), check=check)
