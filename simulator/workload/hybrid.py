"""Hybrid training of a recommendation model: embeddings on parameter servers, dense layers
all-reduced, both on one fabric at once.

A DLRM-style model (Naumov et al. 2019, "Deep Learning Recommendation Model for Personalization
and Recommendation Systems", arXiv:1906.00091) has two parts that want different aggregation:

* **sparse**: ``tables`` embedding tables of ``rows x dim`` elements, far too large to
  replicate, row-sharded over ``servers`` parameter servers. A sample looks up
  ``lookups_per_sample`` rows of every table, so a batch touches only some rows, and only those
  move: each worker *pulls* the distinct rows its batch needs and *pushes* their gradients back
  (the server sums them; that reduction is charged on the server). Monolith and Persia run
  recommendation training this way (Liu et al. 2022, "Monolith"; Lian et al. 2022, "Persia");
* **dense**: a bottom MLP over the dense features, the pairwise-dot interaction of the
  ``tables + 1`` feature vectors, and a top MLP, replicated and all-reduced in DDP buckets.

Distinct rows
-------------
Row popularity follows Zipf's law with exponent ``alpha`` (``alpha = 0``: uniform): the row of
popularity rank ``i`` is drawn with ``p_i = i^-alpha / H(R, alpha)``, ``H(R, alpha) = sum_{j<=R}
j^-alpha``. A worker's batch makes ``L = batch x lookups_per_sample`` independent draws per
table, and the expected number of distinct rows among them is the occupancy formula

    E[D] = sum_i (1 - (1 - p_i)^L)

(each row is missed by all ``L`` draws with probability ``(1 - p_i)^L``; Flajolet, Gardy &
Thimonier 1992, "Birthday paradox, coupon collectors, caching algorithms and self-organizing
search", Discrete Applied Mathematics 39). It is summed exactly over the first
:data:`EXACT_RANKS` ranks and by the Euler-Maclaurin formula (an integral in ``log i`` by
Simpson's rule plus end corrections) beyond, where terms vary by less than a millionth from one
rank to the next. Draws within one sample are taken as independent as well.

Sharding decides how the distinct rows spread over servers:

* ``hash``: a row's server is a hash of its id, independent of popularity, so every server
  expects ``E[D] / servers`` rows;
* ``range``: server ``s`` holds a contiguous id range. With ids in popularity order (what a
  frequency-sorted categorical encoding produces) server 0 holds the hottest rows and, under
  skew, most of the traffic: ``E[D_s]`` is the sum above over its ranks only.

Each (table, server) moves ``round(E[D_s])`` rows of ``dim x bytes_per_element`` bytes per pull
and per push; row-id requests (4-8 bytes per row) are left out.

Iteration (bulk-synchronous)
----------------------------
Every worker pulls its rows from all servers at once (incast on the servers' links), runs
forward, then backward. The embedding gradients exist once the top MLP, the interaction and the
look-ups have run backward; the worker pushes them then, while the bottom MLP finishes backward
and the dense buckets all-reduce (one collective per bucket on one communicator stream, started when the last
worker has the bucket), so push and all-reduce traffic share links at the same time. The next
iteration's pull waits for every push (the servers must have the updated rows) and for the
optimizer step. The server-side optimizer update of rows and row caches on the workers are not
modelled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..engine.runner import Engine
from ..errors import ConfigError
from ..records import bottleneck, links_frame
from ..schedules.base import split_bytes
from .compression import Compression
from .mixed_precision import gradient_dtype_for
from .models import FP32_BYTES, Layer, Model, embedding, linear
from .training import (DDP_BUCKET_BYTES, PsConfig, _Codec, _collective_schedule,
                       _placement_nodes, _server_nodes, _transfer_schedule, make_buckets)

__all__ = ["HYBRID_COLUMNS", "HybridSpec", "dlrm_dense", "expected_distinct",
           "rows_per_server", "simulate_hybrid"]

#: Popularity ranks summed term by term; beyond, the Euler-Maclaurin formula.
EXACT_RANKS = 1 << 20
_CHUNK = 1 << 18
_SIMPSON_INTERVALS = 1 << 12

HYBRID_COLUMNS = (
    "model", "aggregation", "gpus", "servers", "sharding", "alpha", "batch_per_gpu",
    "iteration_s", "throughput_samples_s", "compute_s", "exposed_comm_s",
    "distinct_rows_per_worker", "embedding_bytes_per_iteration", "dense_bytes_per_iteration",
    "hot_server_share", "bottleneck_link", "bottleneck_utilisation", "topology")


@dataclass(frozen=True)
class HybridSpec:
    """A DLRM-style job. Defaults: MLPerf Training's DLRM on Criteo Terabyte (26 tables of
    dimension 128, bottom MLP 13-512-256-128, top MLP 479-1024-1024-512-256-1), with tables
    capped at 10 million rows each and a Zipf exponent of 1.05.

    Attributes
    ----------
    tables : int
    rows : int or tuple of int
        Rows of every table, or one count per table.
    dim : int
        Embedding dimension (elements per row).
    bytes_per_element : int
        Embedding element size (4: fp32).
    lookups_per_sample : int
        Rows each sample reads from each table (1: one-hot; more: multi-hot, pooled).
    alpha : float
        Zipf exponent of row popularity, >= 0 (0: uniform).
    sharding : {"hash", "range"}
    servers : int
        Parameter servers (dedicated hosts: ``gpu_cluster`` with ``ps_hosts``).
    bottom_mlp : tuple of int
        Dense-feature input, then the bottom MLP's output sizes; the last equals ``dim``.
    top_mlp : tuple of int
        The top MLP's output sizes; its input is ``dim + F(F-1)/2``, ``F = tables + 1``.
    aggregation : str
        All-reduce algorithm of the dense gradients.
    """

    tables: int = 26
    rows: int | tuple[int, ...] = 10_000_000
    dim: int = 128
    bytes_per_element: int = FP32_BYTES
    lookups_per_sample: int = 1
    alpha: float = 1.05
    sharding: str = "hash"
    servers: int = 2
    batch_per_gpu: int = 2048
    bottom_mlp: tuple[int, ...] = (13, 512, 256, 128)
    top_mlp: tuple[int, ...] = (1024, 1024, 512, 256, 1)
    aggregation: str = "ring"
    bucket_bytes: int = DDP_BUCKET_BYTES
    precision: str = "fp32"
    device: str | None = None
    iterations: int = 3

    def __post_init__(self):
        for name in ("tables", "dim", "bytes_per_element", "lookups_per_sample", "servers",
                     "batch_per_gpu", "bucket_bytes", "iterations"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
        if len(self.table_rows) != self.tables or min(self.table_rows) < 1:
            raise ConfigError(f"rows must be a count >= 1 or one per table ({self.tables}), "
                              f"got {self.rows!r}")
        if not (math.isfinite(self.alpha) and self.alpha >= 0):
            raise ConfigError(f"alpha must be >= 0, got {self.alpha!r}")
        if self.sharding not in ("hash", "range"):
            raise ConfigError(f"sharding must be hash or range, got {self.sharding!r}")
        if len(self.bottom_mlp) < 2 or self.bottom_mlp[-1] != self.dim:
            raise ConfigError(f"bottom_mlp must run from the dense features to dim "
                              f"({self.dim}), got {self.bottom_mlp!r}")
        if not self.top_mlp:
            raise ConfigError("top_mlp needs at least one layer")

    @property
    def table_rows(self) -> tuple[int, ...]:
        rows = self.rows
        return tuple(int(r) for r in rows) if isinstance(rows, (tuple, list)) \
            else (int(rows),) * self.tables


# --------------------------------------------------------------------------------------------
# Distinct rows under Zipf popularity
# --------------------------------------------------------------------------------------------

def _rank_sum(g, first: int, stop: int) -> float:
    """``sum_{i=first}^{stop-1} g(i)`` for a smooth, vectorised ``g`` of float ranks >= 1:
    exact up to :data:`EXACT_RANKS`, Euler-Maclaurin beyond (module notes)."""
    total = 0.0
    head = min(stop, EXACT_RANKS)
    for start in range(first, head, _CHUNK):
        ranks = np.arange(start, min(head, start + _CHUNK), dtype=np.float64)
        total += float(np.sum(g(ranks)))
    lo, last = max(first, EXACT_RANKS), stop - 1
    if last < lo:
        return total
    if last - lo < _CHUNK:
        return total + float(np.sum(g(np.arange(lo, last + 1, dtype=np.float64))))
    # sum_{i=lo}^{last} g(i) = int_lo^last g + (g(lo) + g(last))/2 + (g'(last) - g'(lo))/12
    u = np.linspace(math.log(lo), math.log(last), _SIMPSON_INTERVALS + 1)
    x = np.exp(u)
    y = g(x) * x
    weights = np.ones_like(u)
    weights[1:-1:2], weights[2:-1:2] = 4.0, 2.0
    integral = float(np.dot(weights, y)) * (u[1] - u[0]) / 3.0
    ends = g(np.array([lo - 1.0, lo, lo + 1.0, last - 1.0, last, last + 1.0]))
    slope_lo, slope_last = (ends[2] - ends[0]) / 2, (ends[5] - ends[3]) / 2
    return total + integral + (ends[1] + ends[4]) / 2 + (slope_last - slope_lo) / 12


@lru_cache(maxsize=256)
def _normaliser(rows: int, alpha: float) -> float:
    """``H(rows, alpha) = sum_{i=1}^{rows} i^-alpha``."""
    return _rank_sum(lambda i: i ** -alpha, 1, rows + 1)


def _distinct_in_ranks(rows: int, draws: int, alpha: float, first: int, stop: int) -> float:
    """Expected distinct rows of popularity ranks ``first .. stop-1`` among ``draws`` draws."""
    if stop <= first or draws == 0:
        return 0.0
    c = 1.0 / _normaliser(rows, alpha)
    return _rank_sum(lambda i: -np.expm1(draws * np.log1p(-c * i ** -alpha)), first, stop)


def expected_distinct(rows: int, draws: int, alpha: float) -> float:
    """Expected number of distinct rows among ``draws`` Zipf(``alpha``) draws from ``rows``."""
    return _distinct_in_ranks(int(rows), int(draws), float(alpha), 1, int(rows) + 1)


def rows_per_server(rows: int, draws: int, alpha: float, servers: int,
                    sharding: str) -> np.ndarray:
    """Expected distinct rows each server serves (floats), hash or range sharding."""
    if sharding == "hash":
        return np.full(servers, expected_distinct(rows, draws, alpha) / servers)
    bounds = np.concatenate(([0], np.cumsum(split_bytes(rows, servers))))
    return np.array([_distinct_in_ranks(rows, draws, alpha, int(bounds[s]) + 1,
                                        int(bounds[s + 1]) + 1) for s in range(servers)])


# --------------------------------------------------------------------------------------------
# The dense model
# --------------------------------------------------------------------------------------------

def dlrm_dense(tables: int, dim: int, lookups_per_sample: int, bottom_mlp, top_mlp) -> Model:
    """The per-worker layer table of a DLRM: bottom MLP, embedding look-ups (no parameters
    here: the rows live on the servers), dot interaction, top MLP.

    Bottom MLP and look-ups are independent; listing the look-ups after the bottom MLP makes
    backward (which runs the table in reverse) produce the embedding gradients before the
    bottom MLP's, so that the push can start while the bottom MLP is still in backward. The
    interaction takes the dot product of every pair of the ``F = tables + 1`` vectors
    (``2 dim`` FLOPs each) and concatenates the ``F(F-1)/2`` results with the bottom MLP's
    output. ``sample_unit`` is ``"sequences"``: the model registry has no unit for a click-log
    record.
    """
    layers: list[Layer] = []
    sizes = list(bottom_mlp)
    for k, (a, b) in enumerate(zip(sizes, sizes[1:])):
        layers.append(linear(f"bottom{k}", a, b, act="relu"))
    layers += [embedding(f"emb{t}", 0, dim, lookups_per_sample) for t in range(tables)]
    features = tables + 1
    pairs = features * (features - 1) // 2
    layers.append(Layer("interaction", "interaction", 0, float(2 * dim * pairs),
                        (pairs + dim) * FP32_BYTES))
    sizes = [dim + pairs] + list(top_mlp)
    for k, (a, b) in enumerate(zip(sizes, sizes[1:])):
        layers.append(linear(f"top{k}", a, b, act="relu" if k < len(sizes) - 2 else None))
    return Model("dlrm", tuple(layers), "13 dense features and one id per table", "sequences",
                 sum(layer.params for layer in layers),
                 "Naumov et al. 2019 (arXiv:1906.00091); MLPerf Training DLRM layer sizes")


# --------------------------------------------------------------------------------------------
# Simulation
# --------------------------------------------------------------------------------------------

@dataclass
class HybridResult:
    row: dict
    engine: Engine
    server_bytes: np.ndarray     # embedding bytes per worker per server, one direction


def simulate_hybrid(graph, spec: HybridSpec, gpus: int, record_rates: bool = False):
    """Simulate ``spec.iterations`` iterations of ``spec`` on ``gpus`` workers of ``graph``.

    Returns a :class:`HybridResult`: the row (:data:`HYBRID_COLUMNS`), the engine (for
    ``links_frame`` / ``link_timeline``) and the per-server embedding bytes of one worker.
    """
    from .compute import roofline_profile
    from .sweep import GRADIENT_BYTES, topology_device
    from ..topology.devices import get_device

    device = get_device(spec.device or topology_device(graph))
    model = dlrm_dense(spec.tables, spec.dim, spec.lookups_per_sample, spec.bottom_mlp,
                       spec.top_mlp)
    profile = roofline_profile(model, device, spec.batch_per_gpu, spec.precision)
    workers = _placement_nodes(graph, gpus)
    servers = _server_nodes(graph, workers, PsConfig(servers=spec.servers), spec.servers)

    # sparse traffic: distinct rows per (table, server), then bytes per server
    draws = spec.batch_per_gpu * spec.lookups_per_sample
    rows = np.zeros(spec.servers, dtype=np.int64)
    for table_rows in spec.table_rows:
        rows += np.rint(rows_per_server(table_rows, draws, spec.alpha, spec.servers,
                                        spec.sharding)).astype(np.int64)
    server_bytes = rows * spec.dim * spec.bytes_per_element
    pull = _transfer_schedule("pull", server_bytes, spec.servers)
    push = _transfer_schedule("push", server_bytes, spec.servers)

    # dense traffic: DDP buckets of the MLP gradients
    grad = [layer.params * GRADIENT_BYTES[spec.precision] for layer in model.layers]
    bwd = [t.backward_s for t in profile.layers]
    fwd = profile.forward_s
    buckets = make_buckets(grad, bwd, spec.bucket_bytes)
    n_bottom = len(spec.bottom_mlp) - 1
    sparse_ready = sum(bwd[n_bottom:])     # top MLP, interaction and look-ups have run backward
    codec = _Codec(graph, Compression(), gradient_dtype_for(spec.precision))
    dense = [_collective_schedule(graph, spec.aggregation, gpus, codec, b.size_bytes, 1, {})
             for b in buckets] if gpus > 1 else []

    engine = Engine(graph, record_rates=record_rates)
    ends: list[float] = []

    def iteration(it: int) -> None:
        state = {"pending": len(workers) + len(dense), "compute_end": 0.0,
                 "have": [0] * len(buckets), "queue": [], "busy": False}

        def finish_part():
            state["pending"] -= 1
            if state["pending"] == 0:
                end = max(engine.env.now, state["compute_end"]) + profile.optimizer_s
                engine.call_at(end, lambda: done(end))

        def done(end):
            ends.append(end)
            if it + 1 < spec.iterations:
                iteration(it + 1)

        def start_next():
            if state["busy"] or not state["queue"]:
                return
            k = state["queue"].pop(0)
            state["busy"] = True
            run = engine.launch(dense[k], workers, label=f"allreduce it{it} b{k}")
            run.done_event.callbacks.append(lambda _e: dense_done())

        def dense_done():
            state["busy"] = False
            finish_part()
            start_next()

        def bucket_ready(k):
            state["have"][k] += 1
            if dense and state["have"][k] == len(workers):     # the last worker has it
                state["queue"].append(k)
                start_next()

        def pulled(w):
            t = engine.env.now + fwd
            state["compute_end"] = max(state["compute_end"], t + profile.backward_s)
            engine.call_at(t + sparse_ready, lambda: push_rows(w))
            for k, b in enumerate(buckets):
                engine.call_at(t + b.ready_s, lambda k=k: bucket_ready(k))

        def push_rows(w):
            run = engine.launch(push, [workers[w]] + servers, label=f"push w{w} it{it}")
            run.done_event.callbacks.append(lambda _e: finish_part())

        for w, node in enumerate(workers):
            run = engine.launch(pull, [node] + servers, label=f"pull w{w} it{it}")
            run.done_event.callbacks.append(lambda _e, w=w: pulled(w))

    iteration(0)
    engine.run()
    iteration_s = (ends[-1] - ends[0]) / (len(ends) - 1) if len(ends) > 1 else ends[0]
    compute_s = profile.iteration_s
    links = links_frame(engine, engine.env.now)
    link, util = bottleneck(links)
    per_worker = int(server_bytes.sum())
    dense_bytes = sum(int(s.transfer_bytes.sum()) for s in dense)
    row = {
        "model": "dlrm", "aggregation": f"ps+{spec.aggregation}", "gpus": gpus,
        "servers": spec.servers, "sharding": spec.sharding, "alpha": spec.alpha,
        "batch_per_gpu": spec.batch_per_gpu, "iteration_s": iteration_s,
        "throughput_samples_s": gpus * spec.batch_per_gpu / iteration_s,
        "compute_s": compute_s, "exposed_comm_s": max(0.0, iteration_s - compute_s),
        "distinct_rows_per_worker": int(rows.sum()),
        "embedding_bytes_per_iteration": 2 * gpus * per_worker,
        "dense_bytes_per_iteration": dense_bytes,
        "hot_server_share": float(server_bytes.max() / per_worker) if per_worker else 0.0,
        "bottleneck_link": link, "bottleneck_utilisation": util,
        "topology": graph.graph.get("name", ""),
    }
    return HybridResult(row=row, engine=engine, server_bytes=server_bytes)


# --------------------------------------------------------------------------------------------
# A scenario's study: one job under each sharding
# --------------------------------------------------------------------------------------------

#: Columns of a study row: :data:`HYBRID_COLUMNS`, the PS and all-reduce bytes on the busiest
#: links, and the energy of an iteration.
HYBRID_STUDY_COLUMNS = HYBRID_COLUMNS + (
    "ps_link_bytes_per_iteration", "max_gpu_link_bytes_per_iteration",
    "joules_per_iteration", "joules_per_sample", "gpu_joules", "network_joules")


@dataclass(frozen=True)
class HybridStudy:
    """What the ``hybrid:`` section of a scenario asks for: ``spec`` on ``gpus`` workers
    (default: every GPU endpoint), once per sharding in ``shardings``."""

    spec: HybridSpec = HybridSpec()
    gpus: int | None = None
    shardings: tuple[str, ...] = ("hash", "range")

    def points(self) -> list[tuple[str]]:
        return [(s,) for s in self.shardings]


def _link_bytes(engine, servers, iterations: int) -> tuple[float, float]:
    """Bytes per iteration on the busiest link touching a parameter server, and on the busiest
    link touching no server (the GPUs' fabric, which carries the all-reduce)."""
    links = links_frame(engine, engine.env.now)
    wires = links[links["link"].str.contains("->")]
    at_server = wires["src"].isin(servers) | wires["dst"].isin(servers)
    ps = float(wires.loc[at_server, "bytes_carried"].max()) if at_server.any() else 0.0
    gpu = float(wires.loc[~at_server, "bytes_carried"].max()) if (~at_server).any() else 0.0
    return ps / iterations, gpu / iterations


def run_hybrid_point(graph, study: HybridStudy, sharding: str, record_rates: bool = False):
    """Simulate one sharding of a study; the row gains the busiest PS and GPU-fabric link
    bytes and the energy (:mod:`.energy`). Returns ``(row, engine, server node names)``."""
    from dataclasses import replace

    from ..topology import endpoints
    from .energy import energy_columns
    from .sweep import topology_device

    spec = replace(study.spec, sharding=sharding)
    gpus = study.gpus or len(endpoints(graph))
    result = simulate_hybrid(graph, spec, gpus, record_rates=record_rates)
    servers = _server_nodes(graph, _placement_nodes(graph, gpus), PsConfig(servers=spec.servers),
                            spec.servers)
    ps_bytes, gpu_bytes = _link_bytes(result.engine, servers, spec.iterations)
    row = dict(result.row, ps_link_bytes_per_iteration=ps_bytes,
               max_gpu_link_bytes_per_iteration=gpu_bytes)
    row.update(energy_columns(row, result.engine, spec.device or topology_device(graph), gpus,
                              spec.iterations))
    return row, result.engine, servers
