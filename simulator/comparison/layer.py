"""Timed layers against simulated ones.

Each row of a layer table (:mod:`simulator.measure.layer_table`) is one layer, or one block of
it, timed on its own by a framework's benchmark. It is simulated by
:func:`simulator.workload.llm.layer.simulate_layer` on the preset's machine, as many as the
row's GPUs need, with the layout the row states (``pp`` 1, ``dp = gpus / (tp x cp)``, one
micro-batch per rank). Each measured pass (forward, backward) becomes one compared point:
``error_pct = simulated / measured - 1`` in per cent, so a negative error means the simulator
is faster than the machine, as for collectives.

What a row leaves blank takes a stated default, listed in its ``assumed`` column:

* ``cp``, ``ep``: 1; ``expert_tp``: ``tp``; ``precision``: ``bf16``; ``dispatcher``:
  ``alltoall`` (Megatron-Core's default); ``fp8_recipe`` under fp8: ``delayed`` (the same);
* a shape without ``ffn_kind``: ``gelu``, Megatron-Core's ``TransformerConfig`` default
  (``gated_linear_unit = False``, ``activation_func = F.gelu``; NVIDIA/Megatron-LM
  ``megatron/core/transformer/transformer_config.py``), which a benchmark that builds the
  config itself inherits; ``heads`` (needed by the shape, not by an MLP part): 8, Megatron's
  MoE benchmark's ``num_attention_heads``; ``ffn_hidden`` of an MoE shape: ``moe_ffn_hidden``;
  ``vocab``: 32,000 (the layer's ops do not depend on it);
* ``sequence_parallel`` (``true``/``false``) with ``tp > 1``: on for a mixture of experts
  (Megatron-Core refuses it without), off for a dense layer.

A row the model cannot run (a dispatcher it does not model, a layout its GPUs do not divide)
is kept with ``skipped`` saying why.
"""

from __future__ import annotations

import dataclasses

import pandas as pd

from ..errors import ClusterSimError, ConfigError
from .llm import (BOOLEANS, TRUE_WORDS, _cell, _choice, _device_of, _graph_for, _precision,
                  _preset_shape, error_tables, format_llm_summary, fp8_recipe, located_rows)

__all__ = ["LAYER_POINT_COLUMNS", "compare_layers", "format_layer_points",
           "format_layer_summary", "layer_layout", "layer_model", "summarise_layers"]

#: Columns of a compared layer table (``compare.csv``): one row per measured pass.
LAYER_POINT_COLUMNS = ("source_id", "model", "part", "layer", "pass", "gpus", "tp", "cp", "ep",
                       "expert_tp", "dispatcher", "precision", "fp8_recipe", "seq_len",
                       "micro_batch",
                       "measured_ms", "simulated_ms", "error_pct", "compute_ms", "comm_ms",
                       "topology", "assumed", "skipped")

#: The passes a row may time: (pass, measured column, LayerTime total, LayerTime compute).
_PASSES = (("forward", "measured_forward_ms", "forward_s", "forward_compute_s"),
           ("backward", "measured_backward_ms", "backward_s", "backward_compute_s"))

#: Defaults of a shape's blank columns (see the module docstring).
SHAPE_DEFAULTS = {"ffn_kind": "gelu", "heads": 8, "vocab": 32_000}


def layer_model(row, assumed: list):
    """The row's model: its shape columns when ``hidden`` is filled (``layer + 1`` layers of
    that shape), else the registered model named in ``model``; with the row's ``seq_len``."""
    from ..workload.llm.model import MoEConfig, TransformerConfig
    from ..workload.llm.registry import get_llm_model

    seq_len = int(row["seq_len"])
    index = int(_cell(row, "layer") or 0)
    if _cell(row, "hidden") is None:
        return dataclasses.replace(get_llm_model(str(row["model"]).strip()), seq_len=seq_len)

    def value(column):
        found = _cell(row, column)
        if found is None and column in SHAPE_DEFAULTS:
            assumed.append(f"{column}={SHAPE_DEFAULTS[column]}")
            return SHAPE_DEFAULTS[column]
        return found

    moe_columns = ("experts", "top_k", "moe_ffn_hidden")
    given = [c for c in moe_columns if _cell(row, c) is not None]
    moe = None
    if given:
        if len(given) < len(moe_columns):
            raise ConfigError(f"an MoE shape needs {', '.join(moe_columns)}; the row gives "
                              f"{', '.join(given)} only")
        shared = _cell(row, "shared_ffn_hidden")
        moe = MoEConfig(experts=int(row["experts"]), top_k=int(row["top_k"]),
                        expert_ffn_hidden=int(row["moe_ffn_hidden"]),
                        shared_experts=1 if shared is not None else 0,
                        shared_ffn_hidden=None if shared is None else int(shared))
    ffn = _cell(row, "ffn_hidden")
    if ffn is None:
        if moe is None:
            raise ConfigError("ffn_hidden is blank: a dense shape needs its MLP width")
        ffn = moe.expert_ffn_hidden
    kv_heads = _cell(row, "kv_heads")
    return TransformerConfig(
        name=str(row["model"]).strip(), layers=index + 1, hidden=int(row["hidden"]),
        heads=int(value("heads")), kv_heads=None if kv_heads is None else int(kv_heads),
        ffn_hidden=int(ffn), vocab=int(value("vocab")), seq_len=seq_len,
        ffn_kind=str(value("ffn_kind")).strip().lower(), tied_embeddings=False,
        positions="rope", norm="rmsnorm", bias=False, moe=moe,
        source=str(_cell(row, "source") or "layer table row"))


def layer_layout(row, model, assumed: list):
    """The row's layout: one pipeline stage, ``dp = gpus / (tp x cp)``, one micro-batch per
    rank (see the module docstring for the defaults)."""
    from ..workload.llm.layout import DISPATCHERS, Layout

    def value(column, default):
        found = _cell(row, column)
        if found is None:
            assumed.append(f"{column}={default}")
            return default
        return int(found)

    gpus, tp = int(row["gpus"]), int(row["tp"])
    cp, ep = value("cp", 1), value("ep", 1)
    if gpus % (tp * cp):
        raise ConfigError(f"gpus {gpus} is not a multiple of tp {tp} x cp {cp}")
    dp = gpus // (tp * cp)
    precision = _cell(row, "precision")
    if precision is None:
        assumed.append("precision=bf16")
    dispatcher = _choice(_cell(row, "dispatcher"), "dispatcher", DISPATCHERS, "alltoall")
    if _cell(row, "dispatcher") is None and model.moe is not None:
        assumed.append("dispatcher=alltoall")
    expert_tp = _cell(row, "expert_tp")
    stated = _cell(row, "sequence_parallel")
    if stated is None:
        # Megatron-Core refuses MoE with tensor parallelism but no sequence parallelism
        sequence_parallel = model.moe is not None and tp > 1
        if tp > 1:
            assumed.append(f"sequence_parallel={str(sequence_parallel).lower()}")
    else:
        sequence_parallel = _choice(stated, "sequence_parallel", BOOLEANS, "false") in TRUE_WORDS
    micro = int(row["micro_batch"])
    precision = "bf16" if precision is None else _precision(precision)
    return Layout(tp=tp, cp=cp, ep=ep, pp=1, dp=dp, micro_batch=micro, global_batch=dp * micro,
                  sequence_parallel=sequence_parallel, precision=precision,
                  expert_tp=None if expert_tp is None else int(expert_tp),
                  dispatcher=dispatcher, fp8_recipe=fp8_recipe(row, precision, assumed))


def compare_layers(measured: pd.DataFrame, topology: str, params: dict | None = None, *,
                   library: str = "default") -> pd.DataFrame:
    """Simulate every row of a layer table on ``topology``; one output row per measured pass
    (a row that cannot be simulated is kept, once per measured pass, with ``skipped`` saying
    why)."""
    from ..workload.llm.layer import simulate_layer

    params = dict(params or {})
    cache: dict = {}
    out = []
    for row, where in located_rows(measured):
        passes = [p for p in _PASSES if _cell(row, p[1]) is not None]
        base = {"source_id": _cell(row, "source_id") or "", "model": row["model"],
                "part": row["part"], "layer": int(_cell(row, "layer") or 0),
                "gpus": int(row["gpus"]), "tp": int(row["tp"]), "seq_len": int(row["seq_len"]),
                "micro_batch": int(row["micro_batch"]), "skipped": ""}
        assumed: list = []
        try:
            model = layer_model(row, assumed)
            layout = layer_layout(row, model, assumed)
            base.update(cp=layout.cp, ep=layout.ep, expert_tp=layout.etp,
                        dispatcher=layout.dispatcher, precision=layout.precision,
                        fp8_recipe=layout.fp8_recipe if layout.precision == "fp8" else "")
            device, note = _device_of(row, _preset_shape(topology, params, cache)[1])
            assumed += [note] if note and "gpu" not in params else []
            graph = _graph_for(topology, params, layout.gpus, device, cache)
            timed = simulate_layer(graph, model, layout, layer=base["layer"], part=row["part"],
                                   library=library)
        except ClusterSimError as exc:
            for name, column, _, _ in passes:
                out.append({**base, "pass": name, "measured_ms": float(row[column]),
                            "assumed": " ".join(assumed), "skipped": f"{where}: {exc}"})
            continue
        for name, column, total, compute in passes:
            simulated = getattr(timed, total) * 1e3
            measured_ms = float(row[column])
            out.append({**base, "pass": name, "measured_ms": measured_ms,
                        "simulated_ms": simulated,
                        "error_pct": (simulated / measured_ms - 1) * 100,
                        "compute_ms": getattr(timed, compute) * 1e3,
                        "comm_ms": (getattr(timed, total) - getattr(timed, compute)) * 1e3,
                        "topology": topology, "assumed": " ".join(assumed)})
    frame = pd.DataFrame(out, columns=list(LAYER_POINT_COLUMNS))
    frame.attrs["skipped"] = list(dict.fromkeys(r["skipped"] for r in out if r["skipped"]))
    return frame


def summarise_layers(points: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """MAPE and signed bias (< 0: the simulator is faster) by pass, precision, dispatcher
    and overall, over the rows that were simulated."""
    return error_tables(points, ("pass", "precision", "dispatcher"))


#: The per-pass table's numeric columns and their formats.
_SHOWN = (("measured_ms", ".3f"), ("simulated_ms", ".3f"), ("error_pct", "+.1f"),
          ("compute_ms", ".3f"), ("comm_ms", ".3f"))


def format_layer_points(points: pd.DataFrame) -> str:
    """The per-pass table for the terminal."""
    done = points[points["skipped"].fillna("") == ""]
    if done.empty:
        return "(no rows)"
    shown = done[["model", "part", "pass", "precision", "dispatcher"]].copy()
    shown.insert(3, "layout", [f"tp{int(r.tp)} cp{int(r.cp)} ep{int(r.ep)} gpus{int(r.gpus)}"
                               for r in done.itertuples()])
    for column, spec in _SHOWN:
        shown[column] = [format(v, spec) for v in done[column]]
    return shown.to_string(index=False)


def format_layer_summary(summary: dict[str, pd.DataFrame]) -> str:
    """The MAPE tables for the terminal."""
    return ("layer time MAPE / bias in % (bias < 0: the simulator is faster)\n\n"
            + format_llm_summary(summary))
