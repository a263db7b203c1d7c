"""A sweep of hybrid-parallel layouts, or a layout search: the ``llm:`` scenario section.

Every key of the section that takes a list sweeps (the cartesian product of the lists, in the
order of :data:`SWEPT`); a scalar stands for a one-item list. Each point is one
:class:`~.layout.Layout`, simulated by :func:`~.step.simulate_step` on the scenario's topology.
A point whose layout cannot run (what does not divide what, memory missing) is kept as a row
with ``refused`` saying why, so a sweep shows where the feasible region ends instead of stopping
at its edge.

With a ``search:`` key the section is an :class:`LlmSearch` instead: the branch-and-bound
search of :func:`~.search.search_layouts` (``clustersim llm --search``) chooses the layouts, and
the table is its top K per GPU count, fastest first.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass

from ...errors import ClusterSimError, ConfigError
from .layout import Layout
from .steady import TOLERANCE

__all__ = ["LLM_STUDY_COLUMNS", "LlmSearch", "LlmStudy", "SWEPT", "run_llm_point"]

#: Layout fields a scenario may sweep, in the order of the product.
SWEPT = ("tp", "cp", "ep", "pp", "dp", "virtual_stages", "micro_batch", "global_batch",
         "pipeline", "sequence_parallel", "zero_stage", "recompute", "precision",
         "bucket_bytes")


def _columns():
    from .step import STEP_COLUMNS

    extra = ("pipeline", "sequence_parallel", "zero_stage", "recompute", "precision",
             "bucket_bytes", "memory_gib", "refused")
    return tuple(STEP_COLUMNS) + tuple(c for c in extra if c not in STEP_COLUMNS)


class _Columns:
    """The study's columns, read when first used (the step module imports the engine)."""

    def __iter__(self):
        return iter(_columns())

    def __add__(self, other):
        return tuple(self) + tuple(other)


LLM_STUDY_COLUMNS = _Columns()


@dataclass(frozen=True)
class LlmStudy:
    """The ``llm:`` section: a model, lists of layout values, and the fixed settings."""

    model: str
    values: dict                     # SWEPT field -> tuple of values
    fixed: dict                      # other Layout fields (order, tp_overlap, ...)
    device: str | None = None
    library: str = "default"
    steady_tolerance: float = TOLERANCE     # simulate_step's (exact by default)

    def points(self):
        """Each swept combination as a tuple in :data:`SWEPT` order."""
        return itertools.product(*(self.values[k] for k in SWEPT))

    def layout(self, point, gpus: int | None = None) -> Layout:
        """The point's layout; ``dp`` None fills ``gpus`` (the topology's GPUs)."""
        values = dict(zip(SWEPT, point))
        if values["dp"] is None:
            others = values["tp"] * values["cp"] * values["pp"]
            if not gpus or gpus % others:
                raise ConfigError(f"dp: the topology's {gpus} GPUs are not a multiple of tp "
                                  f"{values['tp']} x cp {values['cp']} x pp {values['pp']} "
                                  f"= {others}; set dp or change the topology")
            values["dp"] = gpus // others
        if values.get("pipeline") is None:
            values["pipeline"] = "interleaved" if values["virtual_stages"] > 1 else "1f1b"
        fixed = dict(self.fixed)
        text = fixed.pop("pp_layout", None)
        if text is not None:
            from .layout import parse_pipeline_layout
            from .registry import get_llm_model

            model = get_llm_model(self.model)
            fixed["pipeline_layout"] = parse_pipeline_layout(
                text, values["pp"], values["virtual_stages"], model.layers, model.mtp_layers)
        if values.get("recompute") != "selective":
            fixed.pop("recompute_modules", None)       # what selective recomputes
        if values.get("precision") != "fp8":
            fixed.pop("fp8_recipe", None)              # how the fp8 points scale
        return Layout(**fixed, **values)


def run_llm_point(graph, study: LlmStudy, point) -> dict:
    """One layout of the study: the step's row, or a row saying why the layout was refused."""
    from .step import simulate_step

    from ...topology import endpoints

    base = {**dict(zip(SWEPT, point)), "model": study.model, "refused": ""}
    try:
        layout = study.layout(point, len(endpoints(graph)))
        base = {**base, **{k: v for k, v in dataclasses.asdict(layout).items() if k in SWEPT},
                "gpus": layout.gpus}
        result = simulate_step(graph, study.model, layout, device=study.device,
                               library=study.library, steady_tolerance=study.steady_tolerance)
    except ClusterSimError as exc:
        return {**base, "refused": str(exc)}
    return {**base, **result.row, "refused": ""}


@dataclass(frozen=True)
class LlmSearch:
    """The ``llm:`` section with ``search:``: a model, one global batch, the search space and
    how to search (see :func:`~.search.search_layouts`)."""

    model: str
    global_batch: int
    space: object                            # a search.SearchSpace
    cluster_gpus: tuple | None = None        # cluster sizes; None: the topology's GPUs
    top: int = 10
    prune: bool = True
    time_limit_s: float | None = None
    workers: int | None = None
    library: str = "default"

    def run(self, topology: str, params: dict):
        """The :class:`~.search.SearchResult` on ``topology`` with ``params``."""
        from .search import search_layouts

        return search_layouts(self.model, topology, params, global_batch=self.global_batch,
                              gpus=list(self.cluster_gpus) if self.cluster_gpus else None,
                              space=self.space, top=self.top, workers=self.workers,
                              progress=False, library=self.library, prune=self.prune,
                              time_limit=self.time_limit_s)
