"""Layout search: the fastest hybrid-parallel layouts of a model on a cluster, by branch and bound.

:func:`search_layouts` enumerates the layouts of ``model`` on the topology's GPUs (or on several
cluster sizes, ``gpus=[256, 512, 1024]``):

* ``tp``: powers of two up to the GPUs per machine (heads, key/value heads and FFN divisible:
  :func:`~.layout.check_layout`'s rules, GQA included); sequence parallelism on when ``tp > 1``;
* ``cp``: 1, 2, 4 where the sequence allows (``seq_len % 2cp``);
* ``ep``: 1 for dense models; for MoE models the divisors of the expert count up to ``dp x cp``;
* ``pp``: up to 32 (or the layer count), dividing the GPUs left by ``tp x cp``; layer counts
  that do not divide are allowed up to 2 short (:func:`~.memory.chunk_sizes` shortens the ends);
* ``virtual_stages``: 1 (1F1B), or 2, 4 with the interleaved schedule when ``pp > 1``;
* ``dp`` = GPUs / (tp x cp x pp); micro-batch 1, 2, 4 dividing ``global / dp``;
* the optimizer-state sharding (:data:`OPTIMIZERS`: none, Megatron's distributed optimizer,
  ZeRO-1/2/3) and activation recomputation (none, selective, full).

Each candidate passes :func:`~.layout.check_layout` ("refused by rules") and
:func:`~.memory.check_memory` ("refused by memory"), gets a lower bound from compute alone
(:func:`compute_lower_bound`) and is simulated by :func:`~.step.simulate_step` in ascending order
of its bound, on local worker processes or Dask (:func:`simulator.parallel.run_calls`). A candidate
whose bound exceeds the K-th best step time simulated so far for its GPU count is pruned: its
step cannot be faster, so the top K per GPU count are exact.

The bound: a rank's compute kernels run one after another on its compute stream, every
micro-batch costs the same, and the first forward of pipeline stage ``s`` needs the forwards of
model chunks ``0 .. s-1`` (stages ``0 .. s-1``, virtual chunk 0) of some micro-batch, while the
last backward of stage ``s`` is followed by the backwards of those chunks for the same
micro-batch. So the step lasts at least, for every stage ``s``::

    sum_{s' < s} F(s', 0)  +  M x sum_v (F(s, v) + B(s, v))  +  sum_{s' < s} B(s', 0)

(``F``/``B``: a chunk's forward/backward compute per micro-batch, recompute included; ``M``
micro-batches). For 1F1B with equal stages that is ``(M + pp - 1)(F + B)``, the compute-only
pipeline time; it is never below the busiest stage's ``M x (F + B)``. Communication, waiting and
the optimizer only add to it. ``tests/test_llm_search.py`` checks it against
:func:`~.step.simulate_step` on several layouts.

Results: one row per simulated layout (the step's row plus the layout's settings, ``bound_s``
and ``label``), written to ``DIR/search.csv`` as each finishes; ``resume=True`` keeps the rows
already there and simulates only the rest (they count in the pruning too).

Cost: a 1,024-GPU step simulates one data-parallel replica where the fabric is symmetric
(:mod:`.step`), so what remains dear is the alone-time of a large group's collective (tens of
seconds for a 1,024-rank reduce-scatter, :class:`~.groups.GroupCoster`). Each is computed once
per search: a worker keeps its own for its life and hands the new ones back with its row; the
search forwards all it has with every call, and holds a layout back while another of its family
(same GPUs, tp, cp, ep, pp and virtual stages: the same groups, mostly the same sizes) is still
running, so that two workers do not time the same collective at once. The alone-times are
deterministic, so none of this changes a row.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ...errors import ClusterSimError, ConfigError
from .layout import RECOMPUTE, Layout, check_layout, short_last_chunk

__all__ = ["SearchSpace", "SearchResult", "OPTIMIZERS", "SEARCH_COLUMNS", "compute_lower_bound",
           "stage_bounds", "enumerate_layouts", "feasible_layouts", "search_layouts", "layout_label", "pareto_front",
           "format_search", "plot_search"]

#: Optimizer-state sharding choices -> Layout fields.
OPTIMIZERS = {
    "none": {},
    "distopt": {"distributed_optimizer": True},
    "zero1": {"zero_stage": 1},
    "zero2": {"zero_stage": 2},
    "zero3": {"zero_stage": 3},
}

#: Layout fields that identify a row (with ``model`` and ``gpus``).
_KEY_FIELDS = ("tp", "cp", "ep", "pp", "dp", "virtual_stages", "micro_batch", "global_batch",
               "pipeline", "sequence_parallel", "zero_stage", "fsdp", "distributed_optimizer",
               "recompute", "precision")


def _columns():
    from .step import STEP_COLUMNS

    extra = ("pipeline", "sequence_parallel", "zero_stage", "fsdp", "distributed_optimizer",
             "recompute", "precision", "optimizer", "label", "bound_s", "refused")
    return tuple(STEP_COLUMNS) + tuple(c for c in extra if c not in STEP_COLUMNS)


class _Columns:
    def __iter__(self):
        return iter(_columns())


SEARCH_COLUMNS = _Columns()


@dataclass(frozen=True)
class SearchSpace:
    """The values tried per dimension (each list filtered by the model's and cluster's rules)."""

    tp: tuple | None = None                     # None: powers of two up to GPUs per machine
    cp: tuple = (1, 2, 4)
    pp: tuple | None = None                     # None: 1 .. min(32, layers) dividing the GPUs
    virtual_stages: tuple = (1, 2, 4)
    micro_batch: tuple = (1, 2, 4)
    optimizers: tuple = ("none", "distopt", "zero3")
    recompute: tuple = RECOMPUTE
    precision: str = "bf16"
    max_pp: int = 32

    def __post_init__(self):
        bad = [o for o in self.optimizers if o not in OPTIMIZERS]
        if bad or not self.optimizers:
            raise ConfigError(f"optimizers: expected some of {', '.join(OPTIMIZERS)}, "
                              f"not {', '.join(map(str, bad)) or 'nothing'}")
        bad = [r for r in self.recompute if r not in RECOMPUTE]
        if bad or not self.recompute:
            raise ConfigError(f"recompute: expected some of {', '.join(RECOMPUTE)}, "
                              f"not {', '.join(map(str, bad)) or 'nothing'}")
        for name in ("tp", "cp", "pp", "virtual_stages", "micro_batch"):
            values = getattr(self, name)
            if values is None:
                continue
            if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < 1
                                 for v in values):
                raise ConfigError(f"search {name}: expected positive integers, not "
                                  f"{list(values)!r}")


def _optimizer_name(layout: Layout) -> str:
    if layout.fsdp:
        return "zero3"
    if layout.distributed_optimizer:
        return "distopt"
    return f"zero{layout.zero_stage}" if layout.zero_stage else "none"


def layout_label(layout: Layout) -> str:
    """A short name: ``tp8 pp4 v2 cp1 ep1 dp32 mb1 distopt rc=sel`` (``+ last N`` when the
    layers are split with a short last chunk, :func:`with_split`)."""
    rc = {"none": "rc=none", "selective": "rc=sel", "full": "rc=full"}[layout.recompute]
    split = layout.pipeline_layout
    return (f"tp{layout.tp} pp{layout.pp} v{layout.virtual_stages} cp{layout.cp} ep{layout.ep} "
            f"dp{layout.dp} mb{layout.micro_batch} {_optimizer_name(layout)} {rc}"
            + (f" last{split[-1]}" if split else ""))


def with_split(model, layout: Layout) -> Layout:
    """``layout`` with an explicit split of the layers (:func:`.layout.short_last_chunk`) where
    they do not split evenly, or nearly (at most two short), over its chunks; the search tries
    such layouts as Megatron-Bridge writes them for DeepSeek-V3."""
    chunks = layout.pp * layout.virtual_stages
    short = -(-model.layers // chunks) * chunks - model.layers
    if layout.pipeline_layout is not None or short <= 2:
        return layout
    split = short_last_chunk(model.layers, chunks)
    return layout if split is None else dataclasses.replace(layout, pipeline_layout=split)


def _powers_of_two(limit: int) -> list[int]:
    out, v = [], 1
    while v <= limit:
        out.append(v)
        v *= 2
    return out


def enumerate_layouts(model, gpus: int, gpus_per_machine: int, global_batch: int,
                      space: SearchSpace = SearchSpace()):
    """Every candidate layout of ``model`` on ``gpus`` GPUs (not yet checked by the rules)."""
    tps = space.tp if space.tp is not None else _powers_of_two(gpus_per_machine)
    for tp in tps:
        for cp in space.cp:
            if gpus % (tp * cp):
                continue
            rest = gpus // (tp * cp)
            pps = space.pp if space.pp is not None else \
                [p for p in range(1, min(space.max_pp, model.layers) + 1)]
            for pp in pps:
                if rest % pp:
                    continue
                dp = rest // pp
                eps = [1]
                if model.moe is not None:
                    eps = [e for e in range(1, model.moe.experts + 1)
                           if model.moe.experts % e == 0 and e <= dp * cp]
                vs = [v for v in space.virtual_stages if v == 1 or pp > 1]
                for ep in eps:
                    for v in vs:
                        for mb in space.micro_batch:
                            for opt in space.optimizers:
                                for rc in space.recompute:
                                    yield with_split(model, Layout(
                                        tp=tp, cp=cp, ep=ep, pp=pp, dp=dp, virtual_stages=v,
                                        micro_batch=mb, global_batch=global_batch,
                                        pipeline="interleaved" if v > 1 else "1f1b",
                                        sequence_parallel=tp > 1, recompute=rc,
                                        precision=space.precision, **OPTIMIZERS[opt]))


def stage_bounds(work) -> list[float]:
    """Per pipeline stage, the compute-only lower bound of the step (see the module docstring)."""
    pp, vs, m = work.pp, work.virtual_stages, work.micro_batches
    f0 = [work.chunks[(s, 0)].forward_compute_s for s in range(pp)]
    b0 = [work.chunks[(s, 0)].backward_compute_s for s in range(pp)]
    out = []
    for s in range(pp):
        busy = sum(work.chunks[(s, v)].forward_compute_s + work.chunks[(s, v)].backward_compute_s
                   for v in range(vs))
        out.append(sum(f0[:s]) + m * busy + sum(b0[:s]))
    return out


def compute_lower_bound(model, layout: Layout, device, *, kernels=None) -> float:
    """A step time :func:`~.step.simulate_step` can never beat: compute alone (see the module
    docstring), from :func:`~.costs.step_work`'s per-chunk compute."""
    from .costs import step_work
    from .registry import get_llm_model

    if isinstance(model, str):
        model = get_llm_model(model)
    return max(stage_bounds(step_work(model, layout, device, kernels=kernels)))


class _Bounds:
    """Bounds with the per-chunk compute cached: it does not depend on dp, the global batch or
    the optimizer-state sharding, only on the micro-batches' count."""

    def __init__(self, model, device):
        self.model, self.device, self.cache = model, device, {}

    def __call__(self, layout: Layout) -> float:
        from .costs import step_work

        key = (layout.tp, layout.cp, layout.ep, layout.pp, layout.virtual_stages,
               layout.pipeline, layout.micro_batch, layout.sequence_parallel, layout.recompute,
               layout.precision, layout.attention)
        parts = self.cache.get(key)
        if parts is None:
            base = dataclasses.replace(layout, dp=1, global_batch=layout.micro_batch * layout.pp,
                                       zero_stage=0, fsdp=False, distributed_optimizer=False,
                                       ep=layout.ep)
            if layout.ep > 1:          # keep (dp x cp) % ep valid for the cached layout
                base = dataclasses.replace(base, dp=layout.ep,
                                           global_batch=layout.ep * layout.micro_batch * layout.pp)
            work = step_work(self.model, base, self.device)
            pp, vs = work.pp, work.virtual_stages
            f0 = [work.chunks[(s, 0)].forward_compute_s for s in range(pp)]
            b0 = [work.chunks[(s, 0)].backward_compute_s for s in range(pp)]
            parts = self.cache[key] = [
                (sum(f0[:s]) + sum(b0[:s]),
                 sum(work.chunks[(s, v)].forward_compute_s +
                     work.chunks[(s, v)].backward_compute_s for v in range(vs)))
                for s in range(pp)]
        m = layout.micro_batches
        return max(edge + m * busy for edge, busy in parts)


def feasible_layouts(model, gpus: int, gpus_per_machine: int, global_batch: int, device,
                     space: SearchSpace = SearchSpace(), counts: dict | None = None):
    """``(bound_s, layout)`` for every enumerated layout that passes the rules
    (:func:`~.layout.check_layout`) and fits memory (:func:`~.memory.check_memory`); ``counts``
    (optional) gets ``enumerated``, ``refused_rules`` and ``refused_memory`` added, and
    ``reasons``: how many layouts each refusal message refused."""
    from .compute import resolve_device
    from .memory import check_memory
    from .registry import get_llm_model

    if isinstance(model, str):
        model = get_llm_model(model)
    device = resolve_device(device)
    counts = {} if counts is None else counts
    for k in ("enumerated", "refused_rules", "refused_memory"):
        counts.setdefault(k, 0)
    reasons = counts.setdefault("reasons", {})
    bounds = _Bounds(model, device)
    for layout in enumerate_layouts(model, gpus, gpus_per_machine, global_batch, space):
        counts["enumerated"] += 1
        try:
            check_layout(model, layout, gpus, device=device)
        except ConfigError as exc:
            counts["refused_rules"] += 1
            reasons[str(exc)] = reasons.get(str(exc), 0) + 1
            continue
        try:
            check_memory(model, layout, device)
        except ConfigError:
            counts["refused_memory"] += 1
            continue
        yield bounds(layout), layout


# ------------------------------------------------------------------------------------------
# Workers
# ------------------------------------------------------------------------------------------

_GRAPHS: dict = {}


def _graph(topology: str, params: tuple):
    from ...topology import load_topology

    key = (topology, params)
    graph = _GRAPHS.get(key)
    if graph is None:
        graph = _GRAPHS[key] = load_topology(topology, dict(params))
    return graph


def _layout_fields(layout: Layout) -> dict:
    return {k: getattr(layout, k) for k in _KEY_FIELDS}


_COSTERS: dict = {}


class _SharedCoster:
    """Stands in for :class:`~.groups.GroupCoster` in :mod:`.step` while a worker simulates: one
    coster per (topology, library) for the worker's life, so a collective's alone-time (a whole
    ``run_collective``; tens of seconds for a 1,024-rank reduce-scatter) is computed once per
    process instead of once per layout. The alone-times are deterministic, so the rows are the
    same as with a fresh coster (``tests/test_llm_search.py`` checks it)."""

    def __init__(self, original):
        self.original = original

    def __call__(self, graph, library="default"):
        return _shared_coster(graph, library, self.original)


def _shared_coster(graph, library, make):
    key = (id(graph), str(library))
    found = _COSTERS.get(key)
    if found is None or found[0] is not graph:
        found = _COSTERS[key] = (graph, make(graph, library))
    return found[1]


#: The row key under which a worker hands back the alone-times it computed (see _simulate).
_ALONE = "_alone_times"


def _simulate(topology: str, params: tuple, model, fields: dict, library: str,
              bound_s: float, known: dict | None = None) -> dict:
    """Worker entry (picklable): one layout's row, or a row saying why it could not run.

    ``known``: alone-times other workers computed (the search forwards them, so that a
    1,024-rank collective is timed once per search, not once per worker process); the row then
    carries the ones this call computed under ``_ALONE``, which the search takes out."""
    from . import step as step_module
    from .registry import get_llm_model

    layout = with_split(get_llm_model(model) if isinstance(model, str) else model,
                        Layout(**fields))
    graph = _graph(topology, params)
    base = {"model": model if isinstance(model, str) else model.name, "gpus": layout.gpus,
            **fields, "optimizer": _optimizer_name(layout), "label": layout_label(layout),
            "bound_s": bound_s, "refused": "", "topology": graph.graph.get("name", "")}
    original = step_module.GroupCoster
    coster = _shared_coster(graph, library, original)
    before = None
    if known is not None:
        coster.learn(known)
        before = set(coster.known())
    step_module.GroupCoster = _SharedCoster(original)
    try:
        result = step_module.simulate_step(graph, model, layout, library=library)
        row = {**result.row, **base}
    except ClusterSimError as exc:
        row = {**base, "step_time_s": math.nan, "refused": str(exc).splitlines()[0]}
    finally:
        step_module.GroupCoster = original
    if before is not None:
        row[_ALONE] = {k: t for k, t in coster.known().items() if k not in before}
    return row


# ------------------------------------------------------------------------------------------
# The search
# ------------------------------------------------------------------------------------------

@dataclass
class SearchResult:
    rows: pd.DataFrame               # every simulated layout (resumed ones included)
    top: pd.DataFrame                # the K fastest per GPU count, fastest first
    front: pd.DataFrame              # best step time per GPU count, Pareto-optimal ones
    counts: dict
    wall_s: float = 0.0
    files: list = field(default_factory=list)


def _key(row) -> tuple:
    def flag(v):
        return str(v).strip().lower() in ("true", "1", "1.0")

    topo = row.get("topology")
    return (str(row["model"]), "" if topo is None else str(topo), int(row["gpus"]),
            *(int(row[k]) for k in ("tp", "cp", "ep", "pp", "dp", "virtual_stages",
                                    "micro_batch", "global_batch")),
            str(row["pipeline"]), flag(row["sequence_parallel"]), int(row["zero_stage"]),
            flag(row["fsdp"]), flag(row["distributed_optimizer"]), str(row["recompute"]),
            str(row["precision"]))


def _existing(path: Path) -> list[dict]:
    if not path.exists():
        return []
    try:
        frame = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot resume from this file: {exc}") from None
    missing = set(_KEY_FIELDS) | {"model", "gpus", "step_time_s"}
    missing -= set(frame.columns)
    if missing:
        raise ConfigError(f"{path}: not a search.csv (missing columns "
                          f"{', '.join(sorted(missing))}); choose another -o")
    frame = frame.astype(object).where(frame.notna(), None)
    rows = frame.to_dict("records")
    for r in rows:
        r["refused"] = r.get("refused") or ""
        if r.get("step_time_s") is None:
            r["step_time_s"] = math.nan
    return rows


def _gpus_per_machine(graph) -> int:
    from ...topology import endpoints

    eps = endpoints(graph)
    first = graph.nodes[eps[0]].get("node_index", 0)
    return sum(1 for e in eps if graph.nodes[e].get("node_index", 0) == first)


def _clusters(topology: str, params: dict, gpus_list) -> list[tuple[int, tuple, object]]:
    """(GPUs, topology parameters, graph) per cluster size, smallest first."""
    from ...topology import endpoints

    base = _graph(topology, tuple(sorted(params.items())))
    n = len(endpoints(base))
    if not gpus_list:
        return [(n, tuple(sorted(params.items())), base)]
    per = _gpus_per_machine(base)
    out = []
    for g in sorted(set(gpus_list)):
        if isinstance(g, bool) or not isinstance(g, int) or g < 1:
            raise ConfigError(f"--gpus: expected positive integers, not {g!r}")
        if g == n:
            out.append((n, tuple(sorted(params.items())), base))
            continue
        if g % per:
            raise ConfigError(f"--gpus {g}: not a multiple of the {per} GPUs per machine of "
                              f"{topology}")
        p = tuple(sorted({**params, "nodes": str(g // per)}.items()))
        try:
            graph = _graph(topology, p)
        except ClusterSimError as exc:
            raise ConfigError(f"--gpus {g}: cannot build {topology} with nodes={g // per}: "
                              f"{str(exc).splitlines()[0]}") from None
        got = len(endpoints(graph))
        if got != g:
            raise ConfigError(f"--gpus {g}: {topology} with nodes={g // per} has {got} GPUs")
        out.append((g, p, graph))
    return out


def pareto_front(rows: pd.DataFrame) -> pd.DataFrame:
    """The best step time per GPU count, keeping a count only when its best is faster than that
    of every smaller count (the front of step time against GPUs)."""
    ok = rows[(rows["refused"].fillna("") == "") & rows["step_time_s"].notna()]
    if ok.empty:
        return ok.head(0)
    best = ok.sort_values(["gpus", "step_time_s"]).groupby("gpus", sort=True).head(1)
    keep, record = [], math.inf
    for _, r in best.iterrows():
        keep.append(r["step_time_s"] < record)
        record = min(record, r["step_time_s"])
    return best[keep].reset_index(drop=True)


def search_layouts(model, topology: str, params: dict | None = None, *, global_batch: int,
                   gpus=None, space: SearchSpace | None = None, top: int = 10,
                   out_dir=None, resume: bool = False, workers: int | None = None,
                   scheduler: str | None = None, progress: bool = True,
                   library: str = "default", prune: bool = True,
                   time_limit: float | None = None) -> SearchResult:
    """Search the layouts of ``model`` (a registered name or a configuration) on ``topology``
    (with ``params``; ``gpus``: several cluster sizes, built with ``nodes`` = GPUs / GPUs per
    machine). ``time_limit``: seconds after which no more layouts are started (those left are
    counted as ``unresolved``; the top K is still exact when every unresolved layout's bound
    exceeds the K-th best, which ``counts["exact"]`` says). See the module docstring."""
    from ...report.output import write_csv
    from ...parallel import progress_bar as _progress_bar, run_calls
    from .compute import resolve_device
    from .registry import get_llm_model
    from .step import _gpu_device

    wall = time.perf_counter()
    space = space or SearchSpace()
    if isinstance(top, bool) or not isinstance(top, int) or top < 1:
        raise ConfigError(f"--top must be a positive integer, not {top!r}")
    if isinstance(global_batch, bool) or not isinstance(global_batch, int) or global_batch < 1:
        raise ConfigError(f"--global-batch must be a positive integer, not {global_batch!r}")
    if resume and out_dir is None:
        raise ConfigError("--resume needs -o DIR (the search.csv to resume)")
    config = get_llm_model(model) if isinstance(model, str) else model
    name = model if isinstance(model, str) else config.name
    params = {k: str(v) for k, v in (params or {}).items()}
    clusters = _clusters(topology, params, gpus)

    counts = {"enumerated": 0, "refused_rules": 0, "refused_memory": 0, "pruned": 0,
              "simulated": 0, "resumed": 0, "failed": 0, "unresolved": 0}
    unresolved = []                    # (gpus, bound) of layouts left by the time limit
    candidates = []                    # (bound, order, gpus, params, layout)
    topo_name = {g: graph.graph.get("name", "") for g, _p, graph in clusters}
    for g, p, graph in clusters:
        dev = resolve_device(_gpu_device(graph, None))
        for bound, layout in feasible_layouts(config, g, _gpus_per_machine(graph), global_batch,
                                              dev, space, counts):
            candidates.append((bound, len(candidates), g, p, layout))
    candidates.sort(key=lambda c: (c[0], c[1]))

    out_path = Path(out_dir) / "search.csv" if out_dir is not None else None
    rows = _existing(out_path) if (resume and out_path is not None) else []
    done = {}
    for r in rows:
        try:
            done[_key(r)] = r
        except (KeyError, TypeError, ValueError):
            raise ConfigError(f"{out_path}: a row has blank or invalid layout columns; "
                              f"choose another -o") from None
    best: dict = {g: [] for g, _p, _gr in clusters}     # per GPU count: sorted step times

    def record(row):
        t = row.get("step_time_s")
        if not row.get("refused") and t is not None and not math.isnan(float(t)):
            lst = best.setdefault(int(row["gpus"]), [])
            lst.append(float(t))
            lst.sort()
            del lst[top:]

    todo = []
    for bound, _i, g, p, layout in candidates:
        key = _key({"model": name, "gpus": g, "topology": topo_name[g],
                    **_layout_fields(layout)})
        if key in done:
            counts["resumed"] += 1
            record(done[key])
        else:
            todo.append((bound, g, p, layout))

    bar = _progress_bar(len(candidates), counts["resumed"], progress, f"search {name}")

    def show():
        times = [v[0] for v in best.values() if v]
        if times and hasattr(bar, "set_postfix_str"):
            bar.set_postfix_str(f"best {min(times):.4g} s", refresh=False)

    def kth(g):
        lst = best.get(g, [])
        return lst[top - 1] if len(lst) >= top else math.inf

    deadline = None if time_limit is None else time.monotonic() + float(time_limit)

    def skip(call):
        bound, g = call[5], call[6]
        if prune and bound > kth(g):
            counts["pruned"] += 1
            bar.update(1)
            order.finished(_family(g, call[3]), ran=False)
            return True
        if deadline is not None and time.monotonic() > deadline:
            counts["unresolved"] += 1
            unresolved.append((g, bound))
            order.finished(_family(g, call[3]), ran=False)
            return True
        return False

    alone: dict = {}                   # per GPU count: alone-times the workers computed
    order = _Order(todo, lambda item: _family(item[1], _layout_fields(item[3])))

    def calls():
        while True:
            item = order.next()
            if item is None:
                return
            bound, g, p, layout = item
            yield (topology, p, model, _layout_fields(layout), library, bound, g,
                   dict(alone.get(g, {})))

    def flush():
        if out_path is not None:
            write_csv(out_path, _frame(rows))

    def collect(row):
        new = row.pop(_ALONE, None)
        if new:
            alone.setdefault(int(row["gpus"]), {}).update(new)
        order.finished(_family(row["gpus"], row), ran=True)
        rows.append(row)
        if row.get("refused"):
            counts["failed"] += 1
        counts["simulated"] += 1
        record(row)
        bar.update(1)
        show()
        flush()

    if out_path is not None:
        out_path.parent.mkdir(parents=True, exist_ok=True)
    window = None
    if scheduler is None:
        import os
        workers = workers or os.cpu_count() or 1
        window = workers
    else:
        window = 64 if workers is None else max(1, workers)
    try:
        if todo:
            _graph(topology, todo[0][2])           # the topology checked before any worker
        run_calls(_run_call, calls(), collect, workers=workers, scheduler=scheduler, skip=skip,
                  window=window)
    finally:
        bar.close()
        if rows:
            flush()
    counts["exact"] = all(b > kth(g) for g, b in unresolved)
    frame = _frame(rows)
    ours = frame[(frame["model"].astype(str) == name) &
                 (frame["global_batch"].astype(int) == global_batch) &
                 frame["gpus"].astype(int).isin([c[0] for c in clusters])]
    keys = {_key({"model": name, "gpus": c[2], "topology": topo_name[c[2]],
                  **_layout_fields(c[4])}) for c in candidates}
    # a boolean array, not a list: an empty list would select no columns
    ours = ours[np.array([_key(r) in keys for r in ours.to_dict("records")], dtype=bool)]
    ok = ours[(ours["refused"].fillna("") == "") & ours["step_time_s"].notna()]
    ranked = ok.sort_values(["gpus", "step_time_s", "label"])
    top_rows = ranked.groupby("gpus", sort=True).head(top).reset_index(drop=True)
    files = [str(out_path)] if out_path is not None and rows else []
    return SearchResult(rows=ours.reset_index(drop=True), top=top_rows,
                        front=pareto_front(ok), counts=counts,
                        wall_s=time.perf_counter() - wall, files=files)


def _family(gpus, fields) -> tuple:
    """Layouts of one family have the same groups and mostly the same collective sizes (they
    differ in micro-batch, recomputation and optimizer sharding)."""
    return (int(gpus), *(int(fields[k]) for k in ("tp", "cp", "ep", "pp", "virtual_stages")))


class _Order:
    """The calls in bound order, except that one whose family's first layout is still running
    waits, behind later calls, until that one is back: the alone-times it computed (a 1,024-rank
    reduce-scatter costs tens of seconds) are then forwarded to it instead of computed again in
    another worker. With nothing else left, a waiting call runs anyway."""

    def __init__(self, items, family):
        self.pending = list(reversed(items))
        self.family = family
        self.waiting: list = []
        self.running: dict = {}
        self.done: set = set()

    def _blocked(self, item) -> bool:
        f = self.family(item)
        return f not in self.done and self.running.get(f, 0) > 0

    def _start(self, item):
        f = self.family(item)
        self.running[f] = self.running.get(f, 0) + 1
        return item

    def next(self):
        """The next call to submit, or None when none is left."""
        for i, item in enumerate(self.waiting):
            if not self._blocked(item):
                return self._start(self.waiting.pop(i))
        while self.pending:
            item = self.pending.pop()
            if self._blocked(item):
                self.waiting.append(item)
                continue
            return self._start(item)
        return self._start(self.waiting.pop(0)) if self.waiting else None

    def finished(self, family, ran: bool) -> None:
        """A call of ``family`` came back (``ran``) or was skipped."""
        self.running[family] = self.running.get(family, 1) - 1
        if ran:
            self.done.add(family)


def _run_call(topology, params, model, fields, library, bound, _gpus, known=None):
    return _simulate(topology, params, model, fields, library, bound, known)


def _frame(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=list(SEARCH_COLUMNS))


# ------------------------------------------------------------------------------------------
# Output
# ------------------------------------------------------------------------------------------

_TOP_COLUMNS = (("gpus", "gpus"), ("label", "layout"), ("step_time_s", "step_s"),
                ("tokens_per_s", "tokens/s"), ("hardware_tflops_per_gpu", "TFLOP/s/GPU"),
                ("mfu_pct", "MFU %"), ("memory_gib", "mem GiB"), ("bound_s", "bound_s"),
                ("compute_s", "compute"), ("exposed_tp_s", "tp"), ("exposed_cp_s", "cp"),
                ("exposed_ep_s", "ep"), ("exposed_pp_s", "pp"), ("exposed_dp_s", "dp"),
                ("bubble_s", "bubble"), ("optimizer_s", "optim"))


def top_table(result: SearchResult) -> pd.DataFrame:
    frame = result.top
    cols = [(c, n) for c, n in _TOP_COLUMNS if c in frame.columns]
    table = frame[[c for c, _ in cols]].rename(columns=dict(cols))
    return table


def format_search(result: SearchResult) -> str:
    """The top-K table, the front (several GPU counts) and the counts, as text."""
    lines = []
    table = top_table(result)
    if table.empty:
        lines.append("no layout fits and runs")
        reasons = result.counts.get("reasons") or {}
        if reasons:
            why, n = max(reasons.items(), key=lambda kv: kv[1])
            lines.append(f"most often refused by rules ({n} of {result.counts['refused_rules']}): "
                         f"{why}")
    else:
        lines.append(table.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    if result.front is not None and result.front["gpus"].nunique() > 1:
        lines.append("")
        lines.append("front (step time vs GPUs):")
        front = result.front[["gpus", "label", "step_time_s", "mfu_pct"]]
        lines.append(front.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    c = result.counts
    considered = c["enumerated"]
    lines.append("")
    lines.append(f"layouts: {c['enumerated']} enumerated, {c['refused_rules']} refused by rules, "
                 f"{c['refused_memory']} refused by memory, {c['pruned']} pruned by bound, "
                 f"{c['simulated']} simulated"
                 + (f" ({c['failed']} failed)" if c["failed"] else "")
                 + (f", {c['resumed']} resumed from search.csv" if c["resumed"] else "")
                 + (f", {c['unresolved']} left by the time limit (top {len(table)} "
                    f"{'still exact' if c.get('exact') else 'NOT proven exact'})"
                    if c.get("unresolved") else "")
                 + f"; {result.wall_s:.1f} s, {considered / max(result.wall_s, 1e-9):.1f} "
                   f"layouts/s")
    return "\n".join(lines)


def plot_search(result: SearchResult, stem) -> list[Path]:
    """Step time of every simulated layout, fastest first, with its bound (and, with several GPU
    counts, step time against GPUs with the front); saved as ``stem``.png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = result.rows[(result.rows["refused"].fillna("") == "") &
                     result.rows["step_time_s"].notna()]
    several = ok["gpus"].nunique() > 1
    fig, axes = plt.subplots(1, 2 if several else 1, figsize=(12 if several else 7, 4.5),
                             squeeze=False)
    ax = axes[0][0]
    for g, part in ok.groupby("gpus"):
        part = part.sort_values("step_time_s")
        x = range(1, len(part) + 1)
        ax.plot(x, part["step_time_s"].astype(float), "o-", ms=3, label=f"{g} GPUs: step")
        ax.plot(x, part["bound_s"].astype(float), "x", ms=3, alpha=0.6,
                label=f"{g} GPUs: compute bound")
    ax.set_xlabel("simulated layouts, fastest first")
    ax.set_ylabel("step time (s)")
    ax.set_title("layout search")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    if several:
        ax = axes[0][1]
        ax.scatter(ok["gpus"].astype(int), ok["step_time_s"].astype(float), s=8, alpha=0.4,
                   label="layouts")
        front = result.front
        ax.plot(front["gpus"].astype(int), front["step_time_s"].astype(float), "r-o",
                label="front")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("GPUs")
        ax.set_ylabel("step time (s)")
        ax.set_title("step time vs GPUs")
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    path = Path(f"{stem}.png")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]

