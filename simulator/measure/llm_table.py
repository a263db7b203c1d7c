"""Published LLM training runs: a table of (model, GPUs, layout, what was measured), read as it is.

Papers and vendor pages report large-model training as one row per run: the model (by name, and
often its shape), the GPU count and kind, the parallel layout (tensor, pipeline, data, context,
expert degrees, micro and global batch), and one or more of TFLOP/s per GPU, MFU, step time and
tokens per second. :func:`read_llm_table` reads such a CSV with the columns below; a blank cell
means the source does not state it.

Columns (the layout of ``train_llm_megatron_a100_v100.csv`` in the project's validation data):
``model``, ``gpus`` and ``tp`` are required; ``source_id``, ``source``, ``params_b``, ``layers``,
``hidden``, ``heads``, ``ffn_hidden``, ``vocab``, ``seq_len``, ``gpu_model``, ``gpus_per_node``,
``inter_node``, ``pp``, ``dp``, ``cp``, ``ep``, ``expert_tp``, ``virtual_stages``, ``micro_batch``,
``global_batch``, ``precision``, ``fp8_recipe`` (``delayed``, ``tensorwise``, ``blockwise`` or
``mxfp8``), ``activation_recompute``, ``zero_stage``, ``main_grads``, ``dispatcher``
(``alltoall``, ``hybridep`` or ``deepep``), ``moe_a2a_overlap`` (``true`` or ``false``), ``pp_layout``
(Megatron-Core's ``pipeline_model_parallel_layout`` string), ``recompute_modules`` (a comma
list of Megatron-Core's ``recompute_modules``), ``framework``,
``measured_tflops_per_gpu``, ``measured_mfu_pct``, ``measured_step_time_s``,
``measured_tokens_per_s``, ``notes`` are optional, and other columns are kept as they are. A row
needs at least one measured column. Every error names the file, the line and the column.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from ..errors import ConfigError

__all__ = ["LLM_MEASURED", "LLM_INTEGER_COLUMNS", "is_llm_table", "read_llm_table",
           "read_rows", "typed_frame"]

#: Measured columns, in the order a row's compared metric is chosen.
LLM_MEASURED = ("measured_tflops_per_gpu", "measured_mfu_pct", "measured_step_time_s",
                "measured_tokens_per_s")

#: Integer columns (blank: not stated).
LLM_INTEGER_COLUMNS = ("layers", "hidden", "heads", "ffn_hidden", "vocab", "seq_len", "gpus",
                       "gpus_per_node", "tp", "pp", "dp", "cp", "ep", "expert_tp",
                       "virtual_stages", "micro_batch", "global_batch", "zero_stage", "kv_heads",
                       "experts", "top_k")
_FLOAT_COLUMNS = ("params_b",) + LLM_MEASURED
_REQUIRED = ("model", "gpus", "tp")


def is_llm_table(header) -> bool:
    """Whether a CSV header is an LLM training table: a layout (``tp``) and a measured
    LLM metric."""
    columns = {c.strip() for c in header}
    return "tp" in columns and bool(columns & set(LLM_MEASURED))


def read_llm_table(path) -> pd.DataFrame:
    """The rows of an LLM training table as a DataFrame (integers as ``Int64`` with ``<NA>`` for
    blanks, measured values as floats with NaN); ``attrs['lines']`` holds each row's line and
    ``attrs['origin']`` the file name."""
    return read_rows(path, "an LLM table", _REQUIRED, LLM_MEASURED, LLM_INTEGER_COLUMNS,
                     _FLOAT_COLUMNS, zero_columns=("zero_stage",))


def read_rows(path, what: str, required, measured, integer_columns, float_columns,
              zero_columns=(), check=None):
    """Read and check a table of measured rows: the ``required`` columns and at least one
    ``measured`` column in the header, a measured value on every row, ``integer_columns`` as
    integers (>= 1, or >= 0 for ``zero_columns``), ``float_columns`` as positive numbers,
    ``model`` non-empty; ``check(cells, row)`` may check more of a row. Errors name the file,
    the line and the column. Returns :func:`typed_frame`."""
    from .schema import _Cells, _missing, _records

    origin = str(path)
    header, records = _records(Path(path), origin)
    missing = _missing(header, required)
    if missing:
        raise ConfigError(f"{origin}:1: missing column(s) {', '.join(missing)} ({what} "
                          f"needs {', '.join(required)} and one of {', '.join(measured)})")
    if not set(header) & set(measured):
        raise ConfigError(f"{origin}:1: no measured column: expected one of "
                          f"{', '.join(measured)}")
    rows, lines = [], []
    for line, record in records:
        cells = _Cells(origin, line, record)
        row = {c: (record.get(c) or "").strip() for c in header}
        row["model"] = cells.text("model")
        for column in integer_columns:
            if column in header:
                row[column] = cells.integer(column, required=column in required, minimum=(
                    0 if column in zero_columns else 1))
        for column in float_columns:
            if column in header:
                row[column] = cells.number(column, required=False, positive=True)
        if all(math.isnan(row.get(c, math.nan)) for c in measured):
            raise ConfigError(f"{origin}:{line}: no measured value: fill one of "
                              f"{', '.join(c for c in measured if c in header)}")
        if check is not None:
            check(cells, row)
        rows.append(row)
        lines.append(line)
    columns = list(header) + [c for c in rows[0] if c not in header] if rows else header
    return typed_frame(rows, columns, integer_columns, lines, origin)


def typed_frame(rows: list, columns, integer_columns, lines: list, origin: str) -> pd.DataFrame:
    """The checked ``rows`` of a table as a DataFrame: ``integer_columns`` as ``Int64`` with
    ``<NA>`` for blanks, ``attrs['lines']`` each row's line, ``attrs['origin']`` the file."""
    frame = pd.DataFrame(rows, columns=list(columns))
    for column in integer_columns:
        if column in frame:
            # a column blank on some rows only comes out of the frame as floats with NaN
            frame[column] = pd.array([None if pd.isna(v) else int(v) for v in frame[column]],
                                     dtype="Int64")
    frame.attrs["lines"] = lines
    frame.attrs["origin"] = origin
    return frame
