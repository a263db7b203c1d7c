"""Published LLM training runs against simulated steps.

Each row of an LLM table (:mod:`simulator.measure.llm_table`) names a model, a GPU count and a
layout; it is simulated as one step (:func:`simulator.workload.llm.step.simulate_step`) on the
given preset's machine, the cluster sized to the row's GPU count (``nodes = gpus / GPUs per
machine``; a row's ``gpu_model`` naming a device preset or its family replaces the preset's
GPU, see :func:`_device_of`). What the row states is used as it is; what it leaves blank takes
the defaults below, and every default taken is listed in the row's ``assumed`` column so the
comparison says what it guessed:

* ``pp``, ``cp``, ``ep``, ``virtual_stages``: 1; ``dp``: gpus / (tp x cp x pp);
  ``main_grads`` (gradients accumulated and reduced in fp32, bf16 or fp16: Megatron's
  ``grad_reduce_in_fp32``): ``auto``, Megatron-LM's default for the precision;
  ``dispatcher`` (the MoE token dispatcher, ``alltoall``, ``hybridep`` or ``deepep``):
  ``alltoall``,
  Megatron-Core's default; ``moe_a2a_overlap`` (``true``/``false``: Megatron-Core's 1F1B
  all-to-all overlap, the layout's ``ep_overlap``): false; ``fp8_recipe`` of an fp8 row
  (``delayed``, ``tensorwise``, ``blockwise``, ``mxfp8``): ``delayed``, Megatron-Core's default;
  ``expert_tp``: ``tp`` (Megatron's default); ``pp_layout`` (Megatron-Core's
  ``pipeline_model_parallel_layout``, e.g. ``Et*4|(t*4|)*14tmL``): even chunks;
  ``recompute_modules`` of a ``selective`` row (Megatron-Core's names, a comma list):
  ``core_attn``, Megatron's default; an MoE row with ``tp > 1`` runs with sequence
  parallelism (Megatron-Core refuses MoE with tensor parallelism without it), listed in
  ``assumed``;
  ``zero_stage``: 0; ``micro_batch``: without a pipeline the largest that divides the batch of
  a replica (global / dp) and fits in memory (at best one micro-batch, no gradient accumulation,
  as Megatron-LM 2020 ran), with a pipeline 1;
* ``activation_recompute``: ``full`` (Megatron-LM's training scripts of 2019-2021 passed
  ``--checkpoint-activations``; Narayanan et al. 2021 count the recomputed forward in their
  TFLOP/s, equation 3); ``precision``: ``fp16`` for ``mixed16``/``mixed``/``amp``;
* ``global_batch``: required (a step without it has no size);
* ``attention``: ``unfused`` for a run whose source is dated before FlashAttention (2022), else
  by GPU (FlashAttention where the GPU runs it).

The compared metric is the first measured column the row fills, in the order of
:data:`~simulator.measure.llm_table.LLM_MEASURED`. TFLOP/s per GPU are compared with the
simulated *hardware* TFLOP/s (counting recomputation, as Megatron-LM reports them), MFU with the
simulated model-FLOPs utilisation, step time and tokens/s directly. ``error_pct`` > 0 means the
simulator is optimistic (more TFLOP/s, MFU or tokens/s, or a shorter step, than measured).
"""

from __future__ import annotations

import dataclasses
import math
import re

import pandas as pd

from ..errors import ClusterSimError, ConfigError

__all__ = ["LLM_POINT_COLUMNS", "compare_llm", "error_tables", "format_llm_points",
           "format_llm_summary", "fp8_recipe", "located_rows", "pipeline_layout_of", "row_layout",
           "summarise_llm"]

#: Columns of a compared LLM table (``compare.csv``).
LLM_POINT_COLUMNS = ("source_id", "model", "gpus", "tp", "cp", "ep", "expert_tp",
                     "dispatcher", "ep_overlap", "pp", "dp", "virtual_stages", "micro_batch",
                     "global_batch", "recompute", "precision", "fp8_recipe", "metric", "measured", "simulated",
                     "error_pct", "step_time_s", "hardware_tflops_per_gpu", "mfu_pct",
                     "compute_s", "exposed_tp_s", "exposed_pp_s", "exposed_dp_s", "bubble_s",
                     "topology", "steady_drift_s", "assumed", "skipped")

#: measured column -> (metric name, simulated row column, higher is better)
_METRICS = {
    "measured_tflops_per_gpu": ("tflops_per_gpu", "hardware_tflops_per_gpu", True),
    "measured_mfu_pct": ("mfu_pct", "mfu_pct", True),
    "measured_step_time_s": ("step_time_s", "step_time_s", False),
    "measured_tokens_per_s": ("tokens_per_s", "tokens_per_s", True),
}

_PRECISION_WORDS = {"bf16": "bf16", "bfloat16": "bf16", "fp16": "fp16", "float16": "fp16",
                    "half": "fp16", "mixed16": "fp16", "mixed": "fp16", "amp": "fp16",
                    "fp8": "fp8"}


def _cell(row, column: str):
    """The row's value in ``column``; None when the column is absent or blank."""
    if column not in row:
        return None
    value = row[column]
    if value is None or value is pd.NA:
        return None
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, str) and not value.strip():
        return None
    return value


def _precision(text) -> str:
    words = re.findall(r"[a-z0-9]+", str(text).lower())
    for word in words:
        if word in _PRECISION_WORDS:
            return _PRECISION_WORDS[word]
    raise ConfigError(f"precision {text!r}: none of the words {', '.join(words) or '(none)'} is "
                      f"understood; accepted: {', '.join(sorted(_PRECISION_WORDS))}")


def _recompute(text) -> str:
    value = str(text).strip().lower()
    for word in ("none", "selective", "full"):
        if word in value:
            return word
    if value in ("no", "false", "off"):
        return "none"
    if value in ("yes", "true", "on", "checkpoint", "checkpointing"):
        return "full"
    raise ConfigError(f"activation_recompute {text!r}: expected none, selective or full")


#: How a table writes a yes/no column (``moe_a2a_overlap``, ``sequence_parallel``), and its yes.
BOOLEANS = ("true", "false", "1", "0", "yes", "no")
TRUE_WORDS = ("true", "1", "yes")


def _choice(text, column: str, allowed, default: str) -> str:
    """A row's value of a column with named choices (``main_grads``, ``dispatcher``):
    ``default`` when blank, else one of ``allowed`` (case-insensitive), else refused naming
    them."""
    if text is None:
        return default
    value = str(text).strip().lower()
    if value not in allowed:
        raise ConfigError(f"{column} {text!r}: expected one of {', '.join(allowed)}")
    return value


#: FlashAttention's first release (Dao et al., "FlashAttention: Fast and Memory-Efficient Exact
#: Attention with IO-Awareness", arXiv 2205.14135, May 2022): a run published before it ran
#: attention unfused (softmax and masking as separate memory-bound kernels).
FLASH_ATTENTION_YEAR = 2022


def _run_year(row) -> int | None:
    """The latest year a row's ``source`` text names (``2020``, ``SC21``, ``arXiv 2104.04473``),
    or None."""
    text = " ".join(str(_cell(row, c) or "") for c in ("source", "source_id"))
    years = [int(y) for y in re.findall(r"(?<!\d)(20[1-3]\d)(?!\d)", text)]
    years += [2000 + int(y) for y in re.findall(r"\b(?:SC|ISC|NeurIPS|ICML|MLSys)'?(\d\d)\b", text)]
    years += [2000 + int(y) for y in re.findall(r"\b(\d\d)\d\d\.\d{4,5}\b", text)]
    return max(years) if years else None


def _attention(row, assumed: list) -> str:
    """The row's ``attention`` column, else ``unfused`` for runs published before
    FlashAttention, else ``auto`` (by GPU)."""
    given = _cell(row, "attention")
    if given is not None:
        return str(given).strip().lower()
    year = _run_year(row)
    if year is not None and year < FLASH_ATTENTION_YEAR:
        assumed.append(f"attention=unfused ({year} run)")
        return "unfused"
    return "auto"


def row_layout(row):
    """``(Layout, assumed)``: the row's layout, and the defaults taken for its blanks."""
    from ..workload.llm.layout import DISPATCHERS, MAIN_GRADS, Layout

    assumed = []

    def value(column, default, cast=int):
        found = _cell(row, column)
        if found is None:
            if default is not None:
                assumed.append(f"{column}={default}")
            return default
        return cast(found)

    tp = value("tp", None)
    cp = value("cp", 1)
    ep = value("ep", 1)
    expert_tp = _cell(row, "expert_tp")
    pp = value("pp", 1)
    gpus = value("gpus", None)
    dp = _cell(row, "dp")
    if dp is None:
        if gpus % (tp * cp * pp):
            raise ConfigError(f"gpus {gpus} is not a multiple of tp {tp} x cp {cp} x pp {pp}")
        dp = gpus // (tp * cp * pp)
        assumed.append(f"dp={dp}")
    virtual = value("virtual_stages", 1)
    global_batch = _cell(row, "global_batch")
    if global_batch is None:
        raise ConfigError("global_batch is blank: a step needs its batch")
    per_replica = int(global_batch) // int(dp)
    micro = value("micro_batch", per_replica if pp == 1 and per_replica >= 1 else 1)
    zero = value("zero_stage", 0)
    recompute = _cell(row, "activation_recompute")
    if recompute is None:
        assumed.append("recompute=full")
        recompute = "full"
    else:
        recompute = _recompute(recompute)
    # the precision gradients are accumulated and reduced in (Megatron's grad_reduce_in_fp32)
    main_grads = _choice(_cell(row, "main_grads"), "main_grads", MAIN_GRADS, "auto")
    dispatcher = _choice(_cell(row, "dispatcher"), "dispatcher", DISPATCHERS, "alltoall")
    overlap = _choice(_cell(row, "moe_a2a_overlap"), "moe_a2a_overlap", BOOLEANS, "false")
    precision = _cell(row, "precision")
    precision = "bf16" if precision is None else _precision(precision)
    if _cell(row, "precision") is None:
        assumed.append("precision=bf16")
    recipe = fp8_recipe(row, precision, assumed)
    layout = Layout(tp=tp, cp=cp, ep=ep, pp=pp, dp=int(dp), virtual_stages=virtual,
                    micro_batch=micro, global_batch=int(global_batch),
                    pipeline="interleaved" if virtual > 1 else "1f1b",
                    sequence_parallel=False, zero_stage=zero,
                    distributed_optimizer=False, recompute=recompute, precision=precision,
                    attention=_attention(row, assumed), main_grads=main_grads,
                    expert_tp=None if expert_tp is None else int(expert_tp),
                    dispatcher=dispatcher, ep_overlap=overlap in TRUE_WORDS,
                    fp8_recipe=recipe, recompute_modules=_recompute_modules(row, recompute))
    return layout, assumed


def pipeline_layout_of(row, layout, model):
    """``layout`` with the row's ``pp_layout`` (Megatron-Core's
    ``pipeline_model_parallel_layout`` string, :func:`~simulator.workload.llm.layout.
    parse_pipeline_layout`) as its chunks' layers; unchanged when the cell is blank."""
    from ..workload.llm.layout import parse_pipeline_layout

    text = _cell(row, "pp_layout")
    if text is None:
        return layout
    split = parse_pipeline_layout(str(text), layout.pp, layout.virtual_stages, model.layers,
                                  model.mtp_layers)
    return dataclasses.replace(layout, pipeline_layout=split)


def _recompute_modules(row, recompute: str) -> tuple:
    """The row's ``recompute_modules`` (a comma list of Megatron-Core's names), for a
    ``selective`` row; blank: Megatron's default."""
    from ..workload.llm.layout import parse_recompute_modules

    text = _cell(row, "recompute_modules")
    if text is None:
        return ()
    if recompute != "selective":
        raise ConfigError(f"recompute_modules {text!r} go with activation_recompute "
                          f"'selective', not {recompute!r}")
    return parse_recompute_modules(str(text))


def fp8_recipe(row, precision: str, assumed: list) -> str:
    """The row's ``fp8_recipe`` (one of :data:`~simulator.workload.llm.layout.FP8_RECIPES`);
    blank under fp8: ``delayed``, Megatron-Core's default (said in ``assumed``); refused on a
    row that does not run fp8."""
    from ..workload.llm.layout import FP8_RECIPES

    stated = _cell(row, "fp8_recipe")
    if stated is None:
        if precision == "fp8":
            assumed.append("fp8_recipe=delayed")
        return "delayed"
    recipe = _choice(stated, "fp8_recipe", FP8_RECIPES, "delayed")
    if precision != "fp8":
        raise ConfigError(f"fp8_recipe {recipe} is given for precision {precision}: it applies "
                          f"to fp8 only")
    return recipe


def _memory_note(model, layout, graph) -> list[str]:
    """``["memory model: X GiB > Y GiB"]`` when the memory model says the published layout
    would not fit (the model is then pessimistic for that run), else ``[]``."""
    from ..topology import endpoints
    from ..topology.devices import get_device
    from ..workload.llm.memory import memory_per_gpu

    device = get_device(graph.nodes[endpoints(graph)[0]]["device"])
    mem = memory_per_gpu(model, layout, device)
    if mem.fits:
        return []
    return [f"memory-model:{mem.total_bytes / 2**30:.1f}GiB>{mem.device_bytes / 2**30:.0f}GiB"]


def _largest_micro_batch(model, layout, graph):
    """Without a stated micro-batch: the largest that divides the replica's batch and fits in
    memory (how a Megatron-LM user picks it), at most the default of :func:`row_layout`."""
    from ..topology import endpoints
    from ..topology.devices import get_device
    from ..workload.llm.memory import memory_per_gpu

    device = get_device(graph.nodes[endpoints(graph)[0]]["device"])
    for mb in range(layout.micro_batch, 0, -1):
        if (layout.global_batch // layout.dp) % mb:
            continue
        candidate = dataclasses.replace(layout, micro_batch=mb)
        if memory_per_gpu(model, candidate, device).fits:
            return candidate
    return layout


def _family(device_name: str) -> str:
    """A device's family, the token a table writes for it: ``v100`` for ``v100-sxm3-32gb``,
    ``4090`` for ``rtx-4090``."""
    tokens = device_name.split("-")
    return tokens[1] if tokens[0] == "rtx" else tokens[0]


def _device_of(row, preset_device: str | None = None):
    """``(device, note)``: the device preset that runs the row, from its ``gpu_model``.

    * The text names a preset exactly (case and separators aside): that preset.
    * It names a family (``V100 (DGX-2)``, ``A100 80GB``): the preset's own GPU when it is of
      that family (the variant the user chose); otherwise the family's preset sharing the most
      words with the text, then the largest memory (a layout that ran fitted in its GPU), noted.
    * It names no known GPU, or is blank: the preset's GPU (``None``), noted when not blank.
    """
    from ..topology.devices import DEVICES

    text = _cell(row, "gpu_model")
    if text is None:
        return None, None
    key = re.sub(r"[^a-z0-9]", "", str(text).lower())
    for name in DEVICES:
        if re.sub(r"[^a-z0-9]", "", name) == key:
            return name, None
    words = set(re.findall(r"[a-z0-9]+", str(text).lower()))
    family = [name for name, device in DEVICES.items()
              if device.kind == "gpu" and _family(name) in words]
    if not family:
        return None, f"gpu={preset_device} (the row's {str(text)!r} names no GPU preset)"
    if preset_device in family:
        return None, None
    best = max(family, key=lambda name: (len(words & set(name.split("-"))),
                                         DEVICES[name].memory_bytes))
    return best, f"gpu={best}"


def _model_of(row):
    from ..workload.llm.registry import get_llm_model, model_for_row

    if all(_cell(row, c) is not None for c in ("layers", "hidden", "heads", "vocab",
                                               "seq_len")):
        return model_for_row({k: _cell(row, k) for k in row.index})
    return get_llm_model(str(row["model"]).strip())


def _preset_shape(topology: str, params: dict, cache: dict) -> tuple[int, str | None]:
    """``(GPUs per machine, GPU device)`` of the preset as the user gave it, cached."""
    from ..topology import endpoints, load_topology

    base_key = ("shape", topology, tuple(sorted(params.items())))
    if base_key not in cache:
        one = load_topology(topology, {**params, "nodes": "1"} if "nodes" not in params
                            else params)
        ends = endpoints(one)
        cache[base_key] = (len(ends), one.nodes[ends[0]].get("device") if ends else None)
    return cache[base_key]


def _graph_for(topology: str, params: dict, gpus: int, device, cache: dict):
    """The preset's machine, as many as ``gpus`` needs (``nodes``), cached per shape."""
    from ..topology import load_topology

    per_node, _ = _preset_shape(topology, params, cache)
    nodes = max(1, math.ceil(gpus / per_node))
    overrides = {**params}
    if "nodes" not in params:
        overrides["nodes"] = str(nodes)
    if device is not None and "gpu" not in params:
        overrides["gpu"] = device
    key = ("graph", topology, tuple(sorted(overrides.items())))
    if key not in cache:
        cache[key] = load_topology(topology, overrides)
    return cache[key]


def located_rows(measured: pd.DataFrame):
    """``(row, where)`` for every row of a read table: ``where`` is ``file:line`` (the file
    alone when the table does not know its lines), for the messages of skipped rows."""
    lines = measured.attrs.get("lines") or [None] * len(measured)
    origin = measured.attrs.get("origin", "measured file")
    for (_, row), line in zip(measured.iterrows(), lines):
        yield row, (f"{origin}:{line}" if line else origin)


def compare_llm(measured: pd.DataFrame, topology: str, params: dict | None = None, *,
                library: str = "default", progress=None,
                steady_tolerance: float | None = None) -> pd.DataFrame:
    """Simulate every row of an LLM table on ``topology`` sized to the row; one output row per
    measured row (a row that cannot be simulated is kept with ``skipped`` saying why).
    ``steady_tolerance``: as :func:`~simulator.workload.llm.step.simulate_step`'s (None: exact);
    the rows then carry ``steady_drift_s``, how far each step time may be off."""
    from ..measure.llm_table import LLM_MEASURED
    from ..workload.llm.steady import TOLERANCE
    from ..workload.llm.step import simulate_step

    tolerance = TOLERANCE if steady_tolerance is None else steady_tolerance
    params = dict(params or {})
    cache: dict = {}
    out = []
    for row, where in located_rows(measured):
        column = next(c for c in LLM_MEASURED if _cell(row, c) is not None)
        metric, simulated_column, higher = _METRICS[column]
        base = {"source_id": _cell(row, "source_id") or "", "model": row["model"],
                "gpus": int(row["gpus"]), "metric": metric, "measured": float(row[column]),
                "skipped": ""}
        try:
            layout, assumed = row_layout(row)
            base.update(tp=layout.tp, cp=layout.cp, ep=layout.ep, expert_tp=layout.etp,
                        dispatcher=layout.dispatcher, ep_overlap=layout.ep_overlap, pp=layout.pp,
                        dp=layout.dp,
                        virtual_stages=layout.virtual_stages, micro_batch=layout.micro_batch,
                        global_batch=layout.global_batch, recompute=layout.recompute,
                        precision=layout.precision, assumed=" ".join(assumed),
                        fp8_recipe=layout.fp8_recipe if layout.precision == "fp8" else "")
            if layout.gpus != base["gpus"]:
                raise ConfigError(f"tp {layout.tp} x cp {layout.cp} x pp {layout.pp} x dp "
                                  f"{layout.dp} = {layout.gpus}, not the row's {base['gpus']} "
                                  f"GPUs")
            model = _model_of(row)
            layout = pipeline_layout_of(row, layout, model)
            if model.moe is not None and layout.tp > 1:
                # Megatron-Core refuses MoE with tensor parallelism but no sequence parallelism
                layout = dataclasses.replace(layout, sequence_parallel=True)
                assumed.append("sequence_parallel")
            device, note = _device_of(row, _preset_shape(topology, params, cache)[1])
            assumed += [note] if note and "gpu" not in params else []
            graph = _graph_for(topology, params, layout.gpus, device, cache)
            if _cell(row, "micro_batch") is None:
                layout = _largest_micro_batch(model, layout, graph)
                base.update(micro_batch=layout.micro_batch)
            # the run happened, so it fitted: a memory estimate over the device is noted, not
            # a reason to skip the row
            result = simulate_step(graph, model, layout, library=library, check_fit=False,
                                   steady_tolerance=tolerance)
            assumed += _memory_note(model, layout, graph)
            base["assumed"] = " ".join(assumed)
        except ClusterSimError as exc:
            out.append({**base, "skipped": f"{where}: {exc}"})
            continue
        sim = result.row
        simulated = float(sim[simulated_column])
        error = (simulated / base["measured"] - 1) * 100 if higher else \
            (base["measured"] / simulated - 1) * 100
        out.append({**base, "simulated": simulated, "error_pct": error,
                    **{c: sim[c] for c in ("step_time_s", "hardware_tflops_per_gpu", "mfu_pct",
                                           "compute_s", "exposed_tp_s", "exposed_pp_s",
                                           "exposed_dp_s", "bubble_s", "topology")},
                    "steady_drift_s": result.steady_drift_s})
        if progress:
            progress(out[-1])
    frame = pd.DataFrame(out, columns=list(LLM_POINT_COLUMNS))
    frame.attrs["skipped"] = [r["skipped"] for r in out if r["skipped"]]
    return frame


def error_tables(points: pd.DataFrame, groups) -> dict[str, pd.DataFrame]:
    """MAPE, signed bias and the largest absolute error (``error_pct``) of the points that were
    simulated (``skipped`` blank), one table per column of ``groups`` (a row per value, in the
    order they first appear) and ``overall``."""
    done = points[points["skipped"].fillna("") == ""]

    def stats(group: pd.DataFrame) -> dict:
        err = group["error_pct"].astype(float)
        return {"points": len(group), "mape_pct": err.abs().mean(),
                "bias_pct": err.mean(), "max_ape_pct": err.abs().max()}

    tables = {}
    for by in groups:
        keys = list(dict.fromkeys(done[by]))
        tables[by] = pd.DataFrame([{by: k, **stats(done[done[by] == k])} for k in keys],
                                  columns=[by, "points", "mape_pct", "bias_pct", "max_ape_pct"])
    tables["overall"] = pd.DataFrame([{"group": "all", **stats(done)}] if len(done) else [],
                                     columns=["group", "points", "mape_pct", "bias_pct",
                                              "max_ape_pct"])
    return tables


def summarise_llm(points: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """MAPE and signed bias (> 0: optimistic) by model, by GPU count, by metric and overall."""
    return error_tables(points, ("model", "gpus", "metric"))


def format_llm_points(points: pd.DataFrame) -> str:
    """The per-row table for the terminal."""
    if points.empty:
        return "(no rows)"
    done = points[points["skipped"].fillna("") == ""]
    shown = pd.DataFrame({
        "model": done["model"], "gpus": done["gpus"],
        "layout": [f"tp{r.tp} pp{r.pp} dp{r.dp} v{r.virtual_stages} mb{r.micro_batch}"
                   for r in done.itertuples()],
        "metric": done["metric"],
        "measured": [f"{v:.4g}" for v in done["measured"]],
        "simulated": [f"{v:.4g}" for v in done["simulated"]],
        "error_%": [f"{v:+.1f}" for v in done["error_pct"]],
        "bubble_s": [f"{v:.3f}" for v in done["bubble_s"]],
        "exp_tp_s": [f"{v:.3f}" for v in done["exposed_tp_s"]],
        "exp_dp_s": [f"{v:.3f}" for v in done["exposed_dp_s"]],
    })
    return shown.to_string(index=False)


def format_llm_summary(summary: dict[str, pd.DataFrame]) -> str:
    parts = []
    for by, table in summary.items():
        shown = table.copy()
        for column in ("mape_pct", "bias_pct", "max_ape_pct"):
            shown[column] = [f"{v:.1f}" for v in shown[column]]
        parts.append(f"by {by}:\n{shown.to_string(index=False)}")
    return "\n\n".join(parts)
