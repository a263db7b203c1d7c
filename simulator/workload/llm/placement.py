"""Ranks of a hybrid-parallel layout, its groups, and where they sit on a topology.

Megatron-LM numbers the ranks of a ``tp x cp x ep x dp x pp`` job with tensor parallelism
varying fastest, then context, data, pipeline (``order="tp-cp-ep-dp-pp"``,
``megatron/core/parallel_state.py``: ``RankGenerator``). Expert parallelism is carved out of
a stage's ranks as Megatron's expert rank generator does (``RankGenerator(tp=expert_tp,
ep=ep, dp=expert data parallel, cp=1, pp=pp)`` with the same order): the stage's ranks, taken
in the order ``tp + tp x (cp + cp x dp)``, are cut into ``expert_tp`` consecutive ranks (the
expert-tensor group), ``ep`` of those (the expert group) and the expert-data-parallel
replicas. With ``expert_tp = tp`` (Megatron's default) that is the ``cp x dp`` block of a (tp
index, stage) cut into ``ep`` consecutive ranks; with ``expert_tp = 1`` an expert group runs
across tensor-parallel ranks. ``Layout.order`` overrides the order of ``tp``, ``cp``, ``dp``,
``pp`` (``ep`` marks nothing of its own: it always splits a stage's ranks as above).

Rank ``r`` runs on endpoint ``r`` of the topology (:func:`simulator.topology.endpoints`:
machine-major, GPU index within a machine), so with tp = GPUs per machine every tensor-parallel
group is one machine, as Megatron places it.

Nothing here knows SimPy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import networkx as nx

from ...errors import ConfigError
from ...topology import endpoints
from .layout import Layout

__all__ = ["Placement", "parse_order", "place", "DIMS"]

#: Dimensions of the dense rank grid (ep is carved from cp x dp).
DIMS = ("tp", "cp", "dp", "pp")


def parse_order(order: str) -> tuple[str, ...]:
    """The dense dimensions in ``order`` (fastest first), e.g. ``"tp-cp-ep-dp-pp"`` ->
    ``("tp", "cp", "dp", "pp")``; missing ones are appended in Megatron's order."""
    names = [p.strip() for p in str(order).replace(",", "-").split("-") if p.strip()]
    bad = [n for n in names if n not in DIMS + ("ep",)]
    if bad or len(set(names)) != len(names):
        raise ConfigError(f"rank order {order!r}: expected the names tp, cp, ep, dp, pp "
                          f"separated by '-', each once (e.g. tp-cp-ep-dp-pp)")
    dense = [n for n in names if n != "ep"]
    return tuple(dense + [d for d in DIMS if d not in dense])


@dataclass(frozen=True)
class Placement:
    """A layout's ranks, groups and endpoints.

    ``coords(r)`` gives ``{"tp", "cp", "dp", "pp", "etp", "ep", "edp"}`` indices of rank ``r``;
    ``groups(kind)`` lists every group of ``kind`` (``tp``, ``cp``, ``etp``, ``ep``, ``dp``,
    ``pp``) as a tuple of global ranks (ordered by the group's own index); ``group_of(kind, r)``
    the group containing ``r``; ``node[r]`` the topology endpoint of rank ``r``.
    """

    layout: Layout
    order: tuple
    node: tuple          # endpoint of every rank

    @property
    def gpus(self) -> int:
        return self.layout.gpus

    @cached_property
    def _size(self) -> dict:
        lay = self.layout
        return {"tp": lay.tp, "cp": lay.cp, "dp": lay.dp, "pp": lay.pp}

    @cached_property
    def _stride(self) -> dict:
        stride, s = {}, 1
        for d in self.order:
            stride[d] = s
            s *= self._size[d]
        return stride

    def rank(self, tp: int = 0, cp: int = 0, dp: int = 0, pp: int = 0) -> int:
        st = self._stride
        return tp * st["tp"] + cp * st["cp"] + dp * st["dp"] + pp * st["pp"]

    def coords(self, r: int) -> dict:
        st, size = self._stride, self._size
        c = {d: (r // st[d]) % size[d] for d in DIMS}
        lay = self.layout
        x = c["tp"] + lay.tp * (c["cp"] + lay.cp * c["dp"])    # the rank's place in its stage
        c["etp"] = x % lay.etp
        c["ep"] = (x // lay.etp) % lay.ep
        c["edp"] = x // (lay.etp * lay.ep)
        return c

    def _rank_expert(self, pp: int, etp: int, ep: int, edp: int) -> int:
        lay = self.layout
        x = etp + lay.etp * (ep + lay.ep * edp)
        tp, rest = x % lay.tp, x // lay.tp
        return self.rank(tp=tp, cp=rest % lay.cp, dp=rest // lay.cp, pp=pp)

    def group_of(self, kind: str, r: int) -> tuple:
        c = self.coords(r)
        if kind == "ep":
            return tuple(self._rank_expert(c["pp"], c["etp"], e, c["edp"])
                         for e in range(self.layout.ep))
        if kind == "etp":
            return tuple(self._rank_expert(c["pp"], t, c["ep"], c["edp"])
                         for t in range(self.layout.etp))
        if kind not in DIMS:
            raise ConfigError(f"unknown group kind {kind!r}; valid: tp, cp, etp, ep, dp, pp")
        return tuple(self.rank(**{**{d: c[d] for d in DIMS}, kind: i})
                     for i in range(self._size[kind]))

    def groups(self, kind: str) -> list[tuple]:
        """Every group of ``kind``, each once, in order of its lowest rank."""
        seen, out = set(), []
        for r in range(self.gpus):
            if r in seen:
                continue
            g = self.group_of(kind, r)
            seen.update(g)
            out.append(g)
        return out

    def machines(self, graph: nx.DiGraph, ranks) -> list[int]:
        """The machine (``node_index``) of each rank."""
        return [graph.nodes[self.node[r]].get("node_index", 0) for r in ranks]

    # -- data-parallel replicas ---------------------------------------------------------------
    @property
    def replica_unit(self) -> int:
        """The fewest consecutive data-parallel indices that hold whole expert groups: 1 when
        ``expert_tp x ep`` divides ``tp x cp`` (every expert group inside one replica), else
        ``expert_tp x ep / gcd(expert_tp x ep, tp x cp)`` (with ``expert_tp = tp``, an expert
        group of 4 over cp 1 spans 4 replicas)."""
        lay = self.layout
        span = lay.etp * lay.ep
        return span // math.gcd(span, lay.tp * lay.cp)

    def shifted(self, r: int, dp_steps: int) -> int:
        """Rank ``r`` moved ``dp_steps`` data-parallel indices on (cyclically): the same
        tp, cp and pp indices in another replica."""
        st, dp = self._stride, self.layout.dp
        d = (r // st["dp"]) % dp
        return r + (((d + dp_steps) % dp) - d) * st["dp"]


def _check_degrees(layout: Layout) -> None:
    for name in ("tp", "cp", "ep", "pp", "dp", "virtual_stages", "micro_batch"):
        v = getattr(layout, name)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be a positive integer, got {v!r}")
    etp = layout.etp
    if isinstance(etp, bool) or not isinstance(etp, int) or etp < 1 or layout.tp % etp:
        raise ConfigError(f"--expert-tp must be a positive divisor of tp = {layout.tp}, "
                          f"got {etp!r}")
    if (layout.tp * layout.cp * layout.dp) % (etp * layout.ep):
        if etp == layout.tp:
            raise ConfigError(f"--ep {layout.ep} must divide cp x dp = "
                              f"{layout.cp * layout.dp} (experts are spread over the data- "
                              f"and context-parallel ranks)")
        raise ConfigError(f"--expert-tp {etp} x --ep {layout.ep} must divide tp x cp x dp = "
                          f"{layout.tp * layout.cp * layout.dp} (the expert layers regroup a "
                          f"stage's ranks)")


def place(graph: nx.DiGraph, layout: Layout) -> Placement:
    """Place ``layout``'s ranks on ``graph``'s endpoints (rank r on endpoint r).

    Refuses, in one line, a topology with fewer GPUs than the layout needs, naming the
    ``--param`` that raises it (``nodes`` for the ``gpu_cluster`` builder and its presets)."""
    _check_degrees(layout)
    eps = endpoints(graph)
    need = layout.gpus
    if need > len(eps):
        name = graph.graph.get("name", "")
        params = graph.graph.get("params") or {}
        if "gpus_per_node" in params:
            per = int(params["gpus_per_node"])
            hint = f"; raise it with --param nodes={math.ceil(need / per)} ({per} GPUs per node)"
        elif "hosts" in params:
            hint = f"; raise it with --param hosts={need}"
        elif "hosts_per_leaf" in params:
            hint = (f"; raise it with --param leaves="
                    f"{math.ceil(need / int(params['hosts_per_leaf']))}")
        else:
            hint = ""
        raise ConfigError(f"layout tp {layout.tp} x cp {layout.cp} x pp {layout.pp} x dp "
                          f"{layout.dp} needs {need} GPUs; topology {name!r} has {len(eps)}"
                          f"{hint}")
    return Placement(layout=layout, order=parse_order(layout.order), node=tuple(eps[:need]))
