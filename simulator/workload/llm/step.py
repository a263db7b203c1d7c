"""One training step of a hybrid-parallel transformer on one flow network.

:func:`simulate_step` runs every (simulated) rank's compute stream through its pipeline
schedule (:mod:`.schedule`) on one :class:`~simulator.engine.runner.Engine`; every group's
communication that crosses links runs as flows on the same max-min fair network at the same
time, so a data-parallel bucket and a pipeline activation sharing a NIC slow each other.

Streams of a rank
-----------------
* compute: the chunk ops of :class:`~.work.ChunkWork` in schedule order. Consecutive compute
  kernels are one timed segment. A forward of micro-batch ``i`` on model chunk ``c > 0`` waits
  for the activation from chunk ``c - 1`` (a point-to-point flow of ``activation_bytes``
  between the two stages' ranks of the same tp/cp/dp indices), a backward for the gradient from
  ``c + 1``. Waiting while the producer still computes counts as bubble, waiting for the bytes
  on the wire as exposed pipeline communication.
* collectives of the rank's tp/cp/ep groups: bulk-synchronous, issued when every rank of the
  group has reached it; the compute stream waits for it unless it is ``overlapped`` (then only
  the end of the chunk op waits).
* data parallel (Megatron's ``overlap_grad_reduce``): each chunk's gradients in buckets of
  ``bucket_bytes_of(layout)`` (Megatron-Core's default size unless set), ready in proportion to the chunk's last backward, reduced over the
  data-parallel group (``dp x cp`` ranks) one after another on the group's stream:
  reduce-scatter with the distributed optimizer or ZeRO >= 1, all-reduce otherwise. After the
  optimizer (``StepWork.optimizer_s``) ZeRO-1/2 and the distributed optimizer all-gather the
  parameters in the same buckets; ZeRO-3/FSDP all-gathers each chunk's ``param_bytes`` before
  each of its forwards and backwards, prefetched one op ahead on a gather stream.

How collectives become flows (:mod:`.groups`): each distinct collective (kind, group shape,
size) is timed ALONE through the collective library (:func:`simulator.collective.run_collective`,
cached), then runs in the step as a bundle of flows on the group's real paths (ring edges;
all pairs for all-to-all), each capped by a private resource so that alone the bundle takes
exactly the library's time. One collective in a step therefore equals ``clustersim
collective``; concurrent groups on shared links share them max-min fairly.

Tensor-parallel groups inside one machine are timed as their alone-time durations on the
compute stream (``tp_mode="duration"``, the default when every TP group is inside a machine):
NVLink carries no other group's traffic when pipeline and data-parallel traffic leave through
PCIe and NICs. ``tp_mode="flows"`` runs them as bundles instead; ``tests/test_llm_step.py``
proves the two equal on such a layout.

Symmetry: with TP as durations, the ``tp`` ranks of a group do the same thing at the same
times; where the network resources used by tp index ``t``'s other traffic are disjoint from
those of every other index (a rail-wise machine: GPU ``j`` uses NIC ``j``), simulating the
ranks of tp index 0 alone gives every rank's times. ``representative="auto"`` checks that
disjointness and uses it; the test suite proves the result equal to simulating every rank.
The data-parallel replicas are symmetric too: where every path the step uses looks the same
from each replica (:class:`~.groups.ReplicaFold` checks it path by path; machines on a star
fabric, whole leaves of a fat tree), only the first replicas are simulated and each link they
use stands for its copies in the others; a data-parallel collective keeps the flows leaving the
simulated ranks. The rows are those of simulating every replica (``tests/test_llm_step.py``),
the cost is that of one replica: a 1,024-GPU step with 256 replicas of 4 GPUs simulates 4
ranks.

Approximations, said where they matter: a bundle ends with its slowest flow (a real ring would
slow all its edges and release bandwidth); overlapped TP communication in duration mode is
hidden entirely; expert gradients reduce over the same group as dense ones; MFU is against the
device's dense FP16/BF16 peak.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass

import networkx as nx
import pandas as pd

from ...engine.network import is_private
from ...engine.runner import Engine, paused_gc
from ...records import describe_resource
from ...errors import ConfigError, SimulationError
from ...topology import endpoints
from ...topology.devices import get_device
from .groups import Bundle, FlowLauncher, FoldMiss, GroupCoster, ReplicaFold
from .layout import Layout, bucket_bytes_of
from .placement import Placement, place
from .schedule import stage_orders
from .steady import TOLERANCE, Unsteady, Window, check_tolerance, drift, extend, windows
from .work import StepWork, stream_of

__all__ = ["StepResult", "simulate_step", "STEP_COLUMNS", "BREAKDOWN_COLUMNS"]

STEP_COLUMNS = (
    "model", "gpus", "tp", "cp", "ep", "pp", "dp", "virtual_stages", "micro_batch",
    "global_batch", "micro_batches", "step_time_s", "tokens_per_s", "model_tflops_per_gpu",
    "hardware_tflops_per_gpu", "mfu_pct", "compute_s", "exposed_tp_s", "exposed_cp_s",
    "exposed_ep_s", "exposed_pp_s", "exposed_dp_s", "bubble_s", "optimizer_s", "busiest_link",
    "busiest_link_utilisation", "topology", "memory_gib")

#: Per simulated rank: where its step went (seconds); ``idle_s`` is waiting at the end for
#: the slowest rank.
BREAKDOWN_COLUMNS = ("rank", "stage", "node", "compute_s", "exposed_tp_s", "exposed_cp_s",
                     "exposed_ep_s", "exposed_pp_s", "exposed_dp_s", "bubble_s", "optimizer_s",
                     "idle_s", "end_s")

_PARTS = ("compute_s", "exposed_tp_s", "exposed_cp_s", "exposed_ep_s", "exposed_pp_s",
          "exposed_dp_s", "bubble_s", "optimizer_s")


@dataclass
class StepResult:
    row: dict
    breakdown: pd.DataFrame          # per simulated rank
    traffic: pd.DataFrame            # bytes on the wire per group kind
    links: pd.DataFrame              # busiest links, most utilised first
    trace: dict | None = None
    engine: Engine | None = None
    notes: tuple = ()
    simulated_ranks: int = 0
    wall_s: float = 0.0
    steady: Window | None = None     # the window extrapolated from (engine: its last step's)
    steady_drift_s: float = 0.0      # how far the extended step time may be off (steady.drift)

    def summary(self) -> pd.DataFrame:
        """The critical rank's breakdown as (part, seconds, percent of the step)."""
        t = self.row["step_time_s"]
        rows = [(p[:-2], self.row[p], 100.0 * self.row[p] / t if t > 0 else 0.0)
                for p in _PARTS]
        other = t - sum(self.row[p] for p in _PARTS)
        rows.append(("other", other, 100.0 * other / t if t > 0 else 0.0))
        return pd.DataFrame(rows, columns=["part", "seconds", "percent"])


def _model_name(model) -> str:
    if isinstance(model, str):
        return model
    return str(getattr(model, "name", "") or type(model).__name__)


def _gpu_device(graph: nx.DiGraph, device):
    if device is not None:
        return get_device(device) if isinstance(device, str) else device
    name = graph.nodes[endpoints(graph)[0]].get("device")
    return get_device(name) if name else None


def _resolve_model(model):
    """A registered model's configuration by name; a configuration as it is."""
    if isinstance(model, str):
        from .registry import get_llm_model

        return get_llm_model(model)
    return model


def _check_work(work: StepWork, layout: Layout) -> None:
    for s in range(layout.pp):
        for v in range(layout.virtual_stages):
            if (s, v) not in work.chunks:
                raise ConfigError(f"the step's work has no chunk (stage {s}, virtual {v}) for "
                                  f"pp {layout.pp} x virtual stages {layout.virtual_stages}")
    if work.pp != layout.pp or work.virtual_stages != layout.virtual_stages:
        raise ConfigError(f"the step's work is for pp {work.pp} x {work.virtual_stages} "
                          f"virtual stages, the layout has pp {layout.pp} x "
                          f"{layout.virtual_stages}")


#: Stream kinds whose overlapped collectives a rank runs one at a time, in issue order (the
#: expert all-to-alls of Megatron-Core's ``overlap_moe_expert_parallel_comm``, on one
#: communication stream); other overlapped collectives start as soon as their group has arrived.
SERIAL_STREAMS = ("ep",)


def _part(group: str) -> str:
    return f"exposed_{stream_of(group)}_s"


class _Step:
    """The state of one simulated step (callbacks on one engine; no SimPy processes)."""

    def __init__(self, graph, layout: Layout, work: StepWork, pl: Placement, library,
                 tp_mode: str, representative: bool, record_trace: bool, engine=None,
                 fold: bool = False):
        self.graph, self.layout, self.work, self.pl = graph, layout, work, pl
        # ``engine``: a shared one (several jobs on one fabric, :mod:`..jobs`), started with
        # :meth:`start` and run by its owner; None: a fresh one, :meth:`run` runs it
        self.engine = Engine(graph) if engine is None else engine
        self.env = self.engine.env
        self.coster = GroupCoster(graph, library)
        self.flows = FlowLauncher(self.engine)
        self.tp_mode = tp_mode
        self.trace_events = [] if record_trace else None
        lay = layout
        self.P, self.V, self.M = lay.pp, lay.virtual_stages, work.micro_batches
        self.C = self.P * self.V
        self.orders = stage_orders(lay.pipeline, self.P, self.M, self.V)
        if representative:
            self.ranks = [r for r in range(pl.gpus) if pl.coords(r)["tp"] == 0]
        else:
            self.ranks = list(range(pl.gpus))
        self.simulated = set(self.ranks)
        self.coord = {r: pl.coords(r) for r in self.ranks}
        self.node = pl.node
        self.group_cache: dict = {}
        self._plans: dict = {}
        self._segments: dict = {}
        self._tp_shapes: dict = {}
        # per rank
        self.acc = {r: dict.fromkeys(_PARTS, 0.0) for r in self.ranks}
        self.end = {}
        # pipeline deliveries: (rank, chunk c, mb, kind) -> (producer done time, arrival time)
        self.arrived: dict = {}
        self.waiting: dict = {}     # key -> (rank, since)
        # collectives: instance key -> ranks arrived
        self.arrivals: dict = {}
        self.seq: dict = {}
        self.zero3 = lay.zero_stage >= 3 or lay.fsdp
        self.sharded = lay.zero_stage >= 1 or lay.distributed_optimizer or lay.fsdp
        self._buckets = {}
        self.dp_streams: dict = {}  # (group, stream) -> {"busy": bool, "queue": []}
        # folded data-parallel replicas (groups.ReplicaFold): each simulated rank stands for
        # ``copies`` ranks, its own and its images in the replicas not simulated
        self.fold, self.copies, self.keep, self.fold_note = None, 1, None, ""
        if fold:
            self.fold_replicas()

    # -- groups -------------------------------------------------------------------------------
    def group(self, kind: str, r: int) -> tuple:
        key = (kind, r)
        g = self.group_cache.get(key)
        if g is None:
            if kind in ("ep_rail", "ep_node"):
                return self._ep_subgroup(kind, r)
            if kind == "dpcp":
                c = self.pl.coords(r)
                g = tuple(self.pl.rank(tp=c["tp"], cp=j, dp=i, pp=c["pp"])
                          for i in range(self.layout.dp) for j in range(self.layout.cp))
            else:
                g = self.pl.group_of(kind, r)
            for m in g:
                self.group_cache[(kind, m)] = g
        return g

    def _ep_subgroup(self, kind: str, r: int) -> tuple:
        """The hierarchical dispatchers' groups (``hybridep``, ``deepep``;
        :func:`.costs._ep_exchange`): ``ep_node``, the members of ``r``'s expert group on its
        machine; ``ep_rail``, one member per machine of the group, each at ``r``'s position
        among its machine's members."""
        ep = self.group("ep", r)
        on: dict = {}
        for m, machine in zip(ep, self.pl.machines(self.graph, ep)):
            on.setdefault(machine, []).append(m)
        for members in on.values():
            node = tuple(members)
            for i, m in enumerate(members):
                self.group_cache[("ep_node", m)] = node
                self.group_cache[("ep_rail", m)] = tuple(
                    others[i] for others in on.values() if i < len(others))
        return self.group_cache[(kind, r)]

    def nodes_of(self, g) -> list:
        return [self.node[m] for m in g]

    def alone_s(self, collective: str, g, size: int) -> float:
        return self.coster.time_s(collective, self.nodes_of(g), size)

    def plan(self, kind: str, collective: str, g, size: int):
        key = (kind, collective, g, size)
        found = self._plans.get(key)
        if found is None:
            t = self.alone_s(collective, g, size)
            found = self._plans[key] = self.flows.plan(collective, self.nodes_of(g), size, t,
                                                       keep=self.keep)
        return found

    # -- folded replicas ----------------------------------------------------------------------
    def fold_replicas(self) -> None:
        """Simulate only the first ``unit`` data-parallel replicas where that is exact
        (:class:`~.groups.ReplicaFold`; the module docstring says why). ``unit`` is the
        smallest multiple of the placement's :attr:`~.placement.Placement.replica_unit` that
        checks (two replicas sharing a machine fold by pairs: their data-parallel ring goes
        through NVLink, then a NIC)."""
        base, dp = self.pl.replica_unit, self.layout.dp
        why = ""
        for m in range(1, 17):
            unit = base * m
            if dp % unit or dp // unit < 2:
                continue
            why = self._fold_by(unit)
            if not why:
                return
        self.fold_note = f"{why}: every replica simulated" if why else ""

    def _fold_by(self, unit: int) -> str:
        """Fold onto the first ``unit`` replicas if every path checks; else why not."""
        pl = self.pl
        kept = [r for r in self.ranks if self.coord[r]["dp"] < unit]
        inside = set(kept)
        kinds = {(op.comm.group, op.comm.collective)
                 for chunk in self.work.chunks.values() for op in chunk.forward + chunk.backward
                 if op.comm is not None and op.comm.group != "pp"
                 and not self.duration_group(op.comm.group)}
        pairs = []
        for r in kept:
            for kind, coll in kinds:
                g = self.group(kind, r)
                if len(g) <= 1:
                    continue
                if any(m not in inside for m in g):
                    return f"a {kind} group spans replicas"
                i = g.index(r)
                pairs += [(r, m) for m in g if m != r] if coll == "alltoall" else \
                    [(r, g[(i + 1) % len(g)])]
            g = self.dp_group(r)
            if len(g) > 1:
                pairs.append((r, g[(g.index(r) + 1) % len(g)]))
            if self.P > 1:
                co = self.coord[r]
                for s in ((co["pp"] + 1) % self.P, (co["pp"] - 1) % self.P):
                    pairs.append((r, pl.rank(tp=co["tp"], cp=co["cp"], dp=co["dp"], pp=s)))
        fold = ReplicaFold(self.engine.router, pl, unit)
        why = fold.check(pairs)
        if why:
            return why
        self.fold, self.copies = fold, fold.copies
        self.flows.fold = fold
        self.ranks = kept
        self.simulated = inside
        self.keep = {self.node[r] for r in kept}
        self.acc = {r: self.acc[r] for r in kept}
        self.coord = {r: self.coord[r] for r in kept}
        self.fold_note = (f"{self.layout.dp} data-parallel replicas folded onto {unit} (every "
                          f"path the same in each; {fold.copies} copies per simulated rank)")
        return ""

    def duration_group(self, kind: str) -> bool:
        return kind == "tp" and self.tp_mode == "duration"

    # -- segments -----------------------------------------------------------------------------
    def segments(self, r: int, stage: int, v: int, kind: str):
        """The op list of chunk (stage, v) as timed segments for rank r:
        ``("c", seconds, {part: seconds}, label)`` or ``("x", Comm, label)``."""
        tpg = self.group("tp", r)
        shape = self._tp_shapes.get(tpg)
        if shape is None:
            shape = self._tp_shapes[tpg] = \
                self.coster.shape(self.nodes_of(tpg)) if len(tpg) > 1 else ()
        key = (stage, v, kind, shape)
        found = self._segments.get(key)
        if found is not None:
            return found
        chunk = self.work.chunks[(stage, v)]
        ops = chunk.forward if kind == "F" else chunk.backward
        segs, cur, parts, pieces = [], 0.0, {}, []
        for op in ops:
            comm = op.comm
            if comm is None:
                cur += op.compute_s
                parts["compute_s"] = parts.get("compute_s", 0.0) + op.compute_s
                pieces.append((op.compute_s, 0.0))
                continue
            if comm.group == "pp":
                continue                      # the runner sends activations itself
            if self.duration_group(comm.group):
                if not comm.overlapped:
                    t = self.alone_s(comm.collective, tpg, comm.size_bytes)
                    cur += t
                    part = _part(comm.group)
                    parts[part] = parts.get(part, 0.0) + t
                    pieces.append((0.0, t))
                continue
            if cur > 0 or parts:
                segs.append(("c", cur, parts, f"{kind}{v}", tuple(pieces)))
            cur, parts, pieces = 0.0, {}, []
            segs.append(("x", comm, op.name))
        if cur > 0 or parts or not segs:
            segs.append(("c", cur, parts, f"{kind}{v}", tuple(pieces)))
        found = self._segments[key] = tuple(segs)
        return found

    # -- running ------------------------------------------------------------------------------
    def run(self) -> None:
        self.start()
        with paused_gc():
            self.engine.run()
        missing = [r for r in self.ranks if r not in self.end]
        if missing:
            raise SimulationError(f"the step made no progress: ranks {missing[:10]} never "
                                  f"finished (t={self.env.now:.9g} s)")

    def start(self) -> None:
        """Issue every rank's first op now; the step runs when the engine does."""
        self.rs = {}
        for r in self.ranks:
            st = self.coord[r]["pp"]
            self.rs[r] = {"ops": self.orders[st], "i": 0, "seg": None, "j": 0, "t0": 0.0,
                          "pending": 0, "chunk_wait": None, "buckets_left": 0,
                          "gathered": {}, "gather_wait": None, "phase": "run", "queued": {}}
            if self.zero3:
                self.issue_gather(r, 0)
        for r in self.ranks:
            self.next_op(r)

    def record(self, r: int, stream: str, name: str, start: float, end: float) -> None:
        if self.trace_events is not None and end > start:
            self.trace_events.append((r, stream, name, start, end))

    def chunk_index(self, stage: int, v: int) -> int:
        return v * self.P + stage

    def peer(self, r: int, c: int) -> int:
        co = self.coord[r]
        return self.pl.rank(tp=co["tp"], cp=co["cp"], dp=co["dp"], pp=c % self.P)

    def next_op(self, r: int) -> None:
        s = self.rs[r]
        if s["i"] >= len(s["ops"]):
            self.compute_done(r)
            return
        op = s["ops"][s["i"]]
        stage = self.coord[r]["pp"]
        c = self.chunk_index(stage, op.virtual)
        need = None
        if op.kind == "F" and c > 0:
            need = (r, c, op.micro_batch, "F")
        elif op.kind == "B" and c < self.C - 1:
            need = (r, c, op.micro_batch, "B")
        if need is not None and need not in self.arrived:
            self.waiting[need] = (r, self.env.now)
            return
        if need is not None:
            self.arrived.pop(need)
        if self.zero3 and not self.gather_ready(r, s["i"]):
            return
        self.start_op(r)

    def deliver(self, key, producer_done: float) -> None:
        now = self.env.now
        w = self.waiting.pop(key, None)
        if w is None:
            self.arrived[key] = (producer_done, now)
            return
        r, since = w
        self.arrived[key] = (producer_done, now)
        acc = self.acc[r]
        bubble = max(0.0, min(producer_done, now) - since)
        acc["bubble_s"] += bubble
        acc["exposed_pp_s"] += now - since - bubble
        self.next_op(r)

    def start_op(self, r: int) -> None:
        s = self.rs[r]
        op = s["ops"][s["i"]]
        stage = self.coord[r]["pp"]
        if self.zero3 and s["i"] + 1 < len(s["ops"]):
            self.issue_gather(r, s["i"] + 1)
        s["seg"] = self.segments(r, stage, op.virtual, op.kind)
        s["j"] = 0
        s["t0"] = self.env.now
        if op.kind == "B" and self.is_last_backward(stage, op):
            self.schedule_buckets(r, stage, op.virtual)
        else:
            s["bucket_plan"] = None
        self.next_segment(r)

    def is_last_backward(self, stage: int, op) -> bool:
        return op.micro_batch == self.M - 1

    def next_segment(self, r: int) -> None:
        s = self.rs[r]
        seg = s["seg"]
        while s["j"] < len(seg):
            item = seg[s["j"]]
            s["j"] += 1
            if item[0] == "c":
                _c, dur, parts, label, pieces = item
                acc = self.acc[r]
                for p, t in parts.items():
                    acc[p] += t
                now = self.env.now
                if s.get("bucket_plan"):
                    self.buckets_in(r, s, pieces, now)
                if dur > 0:
                    self.record(r, "compute", label, now, now + dur)
                    ev = self.env.timeout(dur)
                    ev.callbacks.append(lambda _e, r=r: self.next_segment(r))
                    return
                continue
            _x, comm, name = item
            if self.issue(r, comm, name):
                return                      # waits for the collective
        self.end_op(r)

    def issue(self, r: int, comm, name: str) -> bool:
        """Rank r reaches collective ``comm``; True when its compute stream must wait.

        An overlapped collective of a group kind in :data:`SERIAL_STREAMS` goes on the rank's
        one stream of that kind: it joins its group only when the rank's previous one there
        has ended (Megatron-Core issues a rank's expert all-to-alls in order on one
        communication stream), so a rank has at most one in flight."""
        g = self.group(comm.group, r)
        if len(g) <= 1:
            return False
        k = (comm.group, r)
        n = self.seq.get(k, 0)
        self.seq[k] = n + 1
        inst = (comm.group, g[0], n)
        s = self.rs[r]
        if comm.overlapped:
            s["pending"] += 1
            stream = stream_of(comm.group)
            if stream in SERIAL_STREAMS:
                queue = s["queued"].setdefault(stream, [])
                queue.append((inst, g, comm, name))
                if len(queue) == 1:
                    self.arrive(r, inst, g, comm, name)
                return False
        self.arrive(r, inst, g, comm, name)
        return not comm.overlapped

    def arrive(self, r: int, inst: tuple, g: tuple, comm, name: str) -> None:
        """Rank r joins collective instance ``inst`` of group ``g`` now; the last to join
        starts its flows."""
        arrived = self.arrivals.setdefault(inst, [])
        arrived.append((r, self.env.now, comm.overlapped))
        if len(arrived) < len(g):
            return
        del self.arrivals[inst]
        flows = self.plan(comm.group, comm.collective, g, comm.size_bytes)

        def done(arrived=arrived, comm=comm, name=name):
            now = self.env.now
            stream = stream_of(comm.group)
            for m, since, overlapped in arrived:
                ms = self.rs[m]
                self.record(m, stream, name, since, now)
                if overlapped:
                    queue = ms["queued"].get(stream)
                    if queue:
                        queue.pop(0)
                        if queue:
                            self.arrive(m, *queue[0])
                    ms["pending"] -= 1
                    if ms["chunk_wait"] is not None and ms["pending"] == 0:
                        t0 = ms["chunk_wait"]
                        ms["chunk_wait"] = None
                        self.acc[m][_part(comm.group)] += now - t0
                        self.end_op(m)
                else:
                    self.acc[m][_part(comm.group)] += now - since
                    self.next_segment(m)

        self.flows.start(flows, _bundle(done), comm.group)

    def end_op(self, r: int) -> None:
        s = self.rs[r]
        if s["pending"]:
            s["chunk_wait"] = self.env.now
            return
        op = s["ops"][s["i"]]
        stage = self.coord[r]["pp"]
        c = self.chunk_index(stage, op.virtual)
        now = self.env.now
        chunk = self.work.chunks[(stage, op.virtual)]
        if op.kind == "F" and c < self.C - 1:
            self.send(r, self.peer(r, c + 1), (c + 1, op.micro_batch, "F"),
                      chunk.activation_bytes, now)
        elif op.kind == "B" and c > 0:
            prev = self.work.chunks[((c - 1) % self.P, (c - 1) // self.P)]
            self.send(r, self.peer(r, c - 1), (c - 1, op.micro_batch, "B"),
                      prev.activation_bytes, now)
        if op.kind == "B" and self.is_last_backward(stage, op):
            s["bucket_plan"] = None
            self.release_buckets(r, op.virtual)
        s["i"] += 1
        self.next_op(r)

    def send(self, r: int, dst: int, what, size: int, done_s: float) -> None:
        key = (dst,) + what
        if dst not in self.simulated:
            raise SimulationError(f"rank {r} sends to rank {dst}, which is not simulated")
        src_node, dst_node = self.node[r], self.node[dst]
        if src_node == dst_node:
            self.deliver(key, done_s)
            return
        self.flows.p2p(src_node, dst_node, size, lambda: self.deliver(key, done_s))

    # -- data parallel ------------------------------------------------------------------------
    def dp_group(self, r: int) -> tuple:
        return self.group("dpcp" if self.layout.cp > 1 else "dp", r)

    def buckets_of(self, stage: int, v: int) -> list:
        key = (stage, v)
        found = self._buckets.get(key)
        if found is None:
            grad = int(self.work.chunks[key].grad_bytes)
            cap = max(1, bucket_bytes_of(self.layout))
            sizes = [cap] * (grad // cap) + ([grad % cap] if grad % cap else [])
            found = self._buckets[key] = sizes
        return found

    def schedule_buckets(self, r: int, stage: int, v: int) -> None:
        """Chunk v's last backward starts: its buckets become ready as its compute progresses
        (bucket k once the backward has computed the share of its compute that the first k+1
        buckets are of the gradients); the end of the backward releases the last."""
        g = self.dp_group(r)
        s = self.rs[r]
        s["bucket_plan"] = None
        if len(g) <= 1:
            return
        sizes = self.buckets_of(stage, v)
        compute = sum(p[0] for item in s["seg"] if item[0] == "c" for p in item[4])
        total = float(sum(sizes)) or 1.0
        done, marks = 0.0, []
        for k, b in enumerate(sizes[:-1]):
            done += b
            marks.append((compute * done / total, k))
        s["bucket_plan"] = {"v": v, "marks": marks, "next": 0, "computed": 0.0}

    def buckets_in(self, r: int, s: dict, pieces, now: float) -> None:
        """Schedule the buckets whose compute mark falls inside this segment."""
        plan = s["bucket_plan"]
        marks = plan["marks"]
        c0 = plan["computed"]
        wall = 0.0
        for comp, extra in pieces:
            c1 = c0 + comp
            while plan["next"] < len(marks) and marks[plan["next"]][0] <= c1 * (1 + 1e-12):
                mark, k = marks[plan["next"]]
                plan["next"] += 1
                at = now + wall + max(0.0, mark - c0)
                self.engine.call_at(at, lambda r=r, v=plan["v"], k=k: self.bucket_ready(r, v, k))
            c0 = c1
            wall += comp + extra
        plan["computed"] = c0

    def release_buckets(self, r: int, v: int) -> None:
        g = self.dp_group(r)
        if len(g) <= 1:
            return
        stage = self.coord[r]["pp"]
        for k in range(len(self.buckets_of(stage, v))):
            self.bucket_ready(r, v, k)

    def bucket_ready(self, r: int, v: int, k: int) -> None:
        s = self.rs[r]
        rel = s.setdefault("ready", set())
        if (v, k) in rel:
            return
        rel.add((v, k))
        s["buckets_left"] += 1
        stage = self.coord[r]["pp"]
        size = self.buckets_of(stage, v)[k]
        coll = "reducescatter" if self.sharded else "allreduce"
        self.group_call(r, "reduce", coll, ("grad", v, k), size, self.bucket_done)

    def group_call(self, r: int, stream: str, coll: str, ident, size: int, then) -> None:
        """Rank r is ready for call ``ident`` on its DP group's ``stream``; calls are issued
        when every rank of the group is ready, one at a time per stream (FIFO)."""
        g = self.dp_group(r)
        inst = (stream, g[0], ident)
        arrived = self.arrivals.setdefault(inst, [])
        arrived.append((r, self.env.now))
        if len(arrived) * self.copies < len(g):     # folded: the simulated members only
            return
        del self.arrivals[inst]
        st = self.dp_streams.setdefault((g[0], stream), {"busy": False, "queue": []})
        st["queue"].append((g, coll, size, arrived, then, ident))
        self.pump(st)

    def pump(self, st) -> None:
        if st["busy"] or not st["queue"]:
            return
        g, coll, size, arrived, then, ident = st["queue"].pop(0)
        st["busy"] = True
        flows = self.plan("dp", coll, g, size)
        begin = self.env.now

        def done():
            st["busy"] = False
            now = self.env.now
            for m, _since in arrived:
                self.record(m, "dp", f"{coll} {ident}", begin, now)
            for m, _since in arrived:
                then(m, ident)
            self.pump(st)

        self.flows.start(flows, _bundle(done), "dp")

    def bucket_done(self, r: int, _ident) -> None:
        s = self.rs[r]
        s["buckets_left"] -= 1
        if s["phase"] == "drain" and s["buckets_left"] == 0:
            self.optimizer(r)

    def compute_done(self, r: int) -> None:
        s = self.rs[r]
        s["compute_end"] = self.env.now
        s["phase"] = "drain"
        if s["buckets_left"] == 0:
            self.optimizer(r)

    def optimizer(self, r: int) -> None:
        s = self.rs[r]
        now = self.env.now
        self.acc[r]["exposed_dp_s"] += now - s["compute_end"]
        s["phase"] = "optimizer"
        t = self.work.optimizer_s
        self.acc[r]["optimizer_s"] += t
        self.record(r, "compute", "optimizer", now, now + t)
        self.engine.call_at(now + t, lambda: self.after_optimizer(r))

    def after_optimizer(self, r: int) -> None:
        s = self.rs[r]
        g = self.dp_group(r)
        if not self.sharded or self.zero3 or len(g) <= 1:
            self.finish(r)
            return
        stage = self.coord[r]["pp"]
        calls = [(v, k, b) for v in range(self.V) for k, b in enumerate(self.buckets_of(stage, v))]
        s["gathers_left"] = len(calls)
        s["t_gather"] = self.env.now
        if not calls:
            self.finish(r)
            return
        for v, k, b in calls:
            self.group_call(r, "gather", "allgather", ("param", v, k), b, self.param_gathered)

    def param_gathered(self, r: int, _ident) -> None:
        s = self.rs[r]
        s["gathers_left"] -= 1
        if s["gathers_left"] == 0:
            self.acc[r]["exposed_dp_s"] += self.env.now - s["t_gather"]
            self.finish(r)

    def finish(self, r: int) -> None:
        self.end[r] = self.env.now

    # -- ZeRO-3 / FSDP gathers ----------------------------------------------------------------
    def issue_gather(self, r: int, i: int) -> None:
        s = self.rs[r]
        if i in s["gathered"]:
            return
        s["gathered"][i] = False
        g = self.dp_group(r)
        op = s["ops"][i]
        size = int(self.work.chunks[(self.coord[r]["pp"], op.virtual)].param_bytes)
        if len(g) <= 1 or size <= 0:
            s["gathered"][i] = True
            return
        self.group_call(r, "zero3", "allgather", ("z3", i), size, self.gather_done)

    def gather_done(self, r: int, ident) -> None:
        s = self.rs[r]
        i = ident[1]
        s["gathered"][i] = True
        w = s["gather_wait"]
        if w is not None and w[0] == i:
            s["gather_wait"] = None
            self.acc[r]["exposed_dp_s"] += self.env.now - w[1]
            self.start_op(r)

    def gather_ready(self, r: int, i: int) -> bool:
        s = self.rs[r]
        if i not in s["gathered"]:
            self.issue_gather(r, i)
        if s["gathered"][i]:
            return True
        s["gather_wait"] = (i, self.env.now)
        return False


def _bundle(done):
    return Bundle(done)


@dataclass
class _Outcome:
    """What one simulated step reports, as the additive quantities :mod:`.steady` extends."""

    step_s: float
    ranks: list
    stage: dict                      # rank -> pipeline stage
    end: dict                        # rank -> its end, s
    acc: dict                        # rank -> {part: s}
    traffic: dict                    # group kind -> bytes on the wire (every rank's)
    link_bytes: dict                 # (link, kind, capacity) -> bytes
    fold_note: str
    engine: Engine | None
    trace_events: list | None
    window: Window | None = None
    drift_s: float = 0.0


def _outcome(step: _Step, tp_scale: int) -> _Outcome:
    scale = tp_scale * step.copies
    return _Outcome(
        step_s=max(step.end.values()), ranks=list(step.ranks),
        stage={r: step.coord[r]["pp"] for r in step.ranks}, end=dict(step.end),
        acc={r: dict(step.acc[r]) for r in step.ranks},
        traffic={k: v * scale for k, v in step.flows.bytes_by_kind.items()},
        link_bytes=_link_bytes(step.engine), fold_note=step.fold_note, engine=step.engine,
        trace_events=step.trace_events)


def _extended(o: list, k: int, tolerance: float) -> tuple:
    """The additive quantities of the three steps ``o`` extended by ``k`` periods (raises
    :class:`~.steady.Unsteady` where they disagree by more than ``tolerance``)."""
    if len({x.fold_note for x in o}) != 1:
        raise Unsteady("the replica fold differs between the three steps")
    span = o[2].step_s
    return (extend(tuple(x.end for x in o), k, span, "end", tolerance),
            extend(tuple(x.acc for x in o), k, span, "breakdown", tolerance),
            extend(tuple(x.traffic for x in o), k, None, "traffic", tolerance),
            extend(tuple(x.link_bytes for x in o), k, None, "link bytes", tolerance))


def _parts_drift(o: list, k: int) -> float:
    """The largest :func:`~.steady.drift` of any rank's end or part of the step (compute,
    exposed communication, bubble) over the three steps ``o``."""
    worst = 0.0
    for r in o[2].end:
        worst = max(worst, drift(o[0].end[r], o[1].end[r], o[2].end[r], k))
        for part, x3 in o[2].acc[r].items():
            worst = max(worst, drift(o[0].acc[r][part], o[1].acc[r][part], x3, k))
    return worst


def _steady(run, micro_batches: int, stages: int, notes: list,
            tolerance: float = TOLERANCE) -> _Outcome | None:
    """The step extended from a window of three short steps (:mod:`.steady`: exactly, or
    else to ``tolerance``), or None when no window worth trying proves a steady state (the
    caller then simulates every micro-batch)."""
    done: dict = {}
    for win in windows(micro_batches, stages):
        for m in win.counts:
            if m not in done:
                done[m] = run(m)
        o = [done[m] for m in win.counts]
        k = win.periods_left
        exact = True
        try:
            try:
                end, acc, traffic, links = _extended(o, k, TOLERANCE)
            except Unsteady:
                if tolerance <= TOLERANCE:
                    raise
                exact = False
                end, acc, traffic, links = _extended(o, k, tolerance)
        except Unsteady:
            done.pop(win.counts[0])          # the next window starts a period later
            continue
        d = o[2].step_s - o[1].step_s
        off = 0.0 if exact else drift(o[0].step_s, o[1].step_s, o[2].step_s, k)
        parts = 0.0 if exact else _parts_drift(o, k)
        how = f"to {TOLERANCE:g}" if exact else (
            f"to {tolerance:g} relative, not exactly: the step time may be off by about "
            f"{off:.2g} s, a rank's part of it by {parts:.2g} s")
        notes.append(f"steady state: {win} micro-batches simulated, each {win.period} more "
                     f"adding the same {d:.9g} s ({how}); the step's "
                     f"{micro_batches} extended from them (--every-micro-batch simulates all)")
        return dataclasses.replace(o[2], step_s=max(end.values()), end=end, acc=acc,
                                   traffic=traffic, link_bytes=links, window=win, drift_s=off)
    return None


def representative_ok(graph: nx.DiGraph, pl: Placement, coster: GroupCoster,
                      tp_duration: bool) -> tuple[bool, str]:
    """Whether simulating tp index 0 alone is exact: TP as durations, and the network resources
    of every tp index's pipeline and data-parallel paths disjoint from the others'."""
    lay = pl.layout
    if lay.tp == 1:
        return False, "tp 1: every rank is simulated"
    if not tp_duration:
        return False, "tensor-parallel groups run as flows"
    if lay.ep > 1 and lay.etp < lay.tp:
        return False, (f"expert groups span tensor-parallel ranks (expert_tp {lay.etp} < tp "
                       f"{lay.tp}): every rank is simulated")
    from ...topology.routing import Router

    router = Router(graph)
    used: dict = {}
    for t in range(lay.tp):
        res = set()
        pairs = []
        for d in range(lay.dp):                 # dp ring of stage 0, cp index 0
            a = pl.rank(tp=t, dp=d, pp=0)
            b = pl.rank(tp=t, dp=(d + 1) % lay.dp, pp=0)
            pairs.append((a, b))
        for p in range(lay.pp - 1):             # the pipeline of replica 0, both ways
            a, b = pl.rank(tp=t, pp=p), pl.rank(tp=t, pp=p + 1)
            pairs += [(a, b), (b, a)]
        for c in range(lay.cp):
            pairs.append((pl.rank(tp=t, cp=c), pl.rank(tp=t, cp=(c + 1) % lay.cp)))
        for a, b in pairs:
            if a != b:
                res.update(router.path(pl.node[a], pl.node[b]).resources)
        for u, other in used.items():
            shared = res & other
            if shared:
                return False, (f"tp indices {u} and {t} share {sorted(map(str, shared))[0]}: "
                               f"every rank is simulated")
        used[t] = res
    return True, "ranks of tp index 0 simulated (tp ranks symmetric, their paths disjoint)"


def _link_bytes(engine: Engine) -> dict:
    """Bytes each shared link carried: ``(name, kind, capacity) -> bytes`` (private flow caps
    and idle links left out)."""
    net, graph = engine.network, engine.graph
    out = {}
    for i, key in enumerate(net.keys):
        if is_private(key):
            continue
        carried = net.bytes_carried[i]
        if carried <= 0:
            continue
        name, _u, _v, kind = describe_resource(graph, key)
        out[(name, kind, net.capacity[i])] = carried
    return out


def _links(link_bytes: dict, span_s: float, top: int = 10) -> pd.DataFrame:
    rows = [(name, kind, cap, carried, carried / (cap * span_s) if span_s > 0 else 0.0)
            for (name, kind, cap), carried in link_bytes.items()]
    df = pd.DataFrame(rows, columns=["link", "kind", "capacity_bytes_per_s", "bytes",
                                     "utilisation"])
    # ties (links loaded alike) go by name: utilisations equal but for float rounding (a step
    # extended from its steady state against one simulated whole) rank the same
    df["tie"] = df["utilisation"].round(12)
    return df.sort_values(["tie", "link"], ascending=[False, True]).head(top) \
        .drop(columns="tie").reset_index(drop=True)


def _trace(events, pl: Placement, title: str) -> dict:
    streams = ("compute", "tp", "cp", "ep", "dp")
    out = []
    ranks = sorted({e[0] for e in events})
    for r in ranks:
        out.append({"ph": "M", "name": "process_name", "pid": r + 1, "tid": 0,
                    "args": {"name": f"rank {r} ({pl.node[r]})"}})
        for k, sname in enumerate(streams):
            out.append({"ph": "M", "name": "thread_name", "pid": r + 1, "tid": k + 1,
                        "args": {"name": sname}})
    for r, stream, name, start, end in sorted(events, key=lambda e: (e[0], e[3], e[4])):
        out.append({"ph": "X", "pid": r + 1, "tid": streams.index(stream) + 1, "name": name,
                    "ts": start * 1e6, "dur": (end - start) * 1e6, "cat": stream})
    return {"traceEvents": out, "displayTimeUnit": "ns", "otherData": {"title": title}}


def expert_machines(graph: nx.DiGraph, layout: Layout, pl: Placement | None = None) -> int:
    """How many machines one expert-parallel group of ``layout`` spans on ``graph`` (1 without
    expert parallelism): what the ``hybridep`` and ``deepep`` dispatchers send across once per
    token."""
    if layout.ep <= 1:
        return 1
    pl = pl or place(graph, layout)
    return len(set(pl.machines(graph, pl.groups("ep")[0])))


def simulate_step(graph: nx.DiGraph, model, layout: Layout, *, work: StepWork | None = None,
                  device=None, library="default", record_trace: bool = False, seed: int = 0,
                  kernels=None, tp_mode: str = "auto",
                  representative: str | bool = "auto", check_fit: bool = True,
                  extrapolate: bool = True, steady_tolerance: float = TOLERANCE) -> StepResult:
    """Simulate one training step of ``model`` (a registered name or a model config) cut by
    ``layout`` on ``graph``; see the module docstring.

    ``work``: the per-chunk work (tests, or a hand-built model); None asks
    :func:`simulator.workload.llm.costs.step_work`. ``tp_mode``: ``"duration"`` (TP groups
    inside one machine timed as their alone-time), ``"flows"``, or ``"auto"`` (duration where
    every TP group is inside one machine). ``representative``: ``"auto"`` (tp index 0 only
    where :func:`representative_ok`), True (the same, but refuse when not exact) or False
    (every rank); with "auto" and True the data-parallel replicas are also folded where every
    path checks (the notes say whether). ``seed`` is accepted for interface symmetry: the step
    is deterministic. ``check_fit``: refuse, in one line, a layout whose memory per GPU exceeds
    the device's (:func:`~.memory.check_memory`; the row's ``memory_gib`` is the largest
    stage's need). ``extrapolate``: a step of many micro-batches is extended from three short
    ones once they prove a steady state (:mod:`.steady`; ``StepResult.steady`` says which, and
    ``engine`` is then the last short step's); False, or a trace, simulates every micro-batch.
    ``steady_tolerance``: how closely the window's increments must agree (relative to its
    longest step; :data:`~.steady.TOLERANCE`, exact, by default; a looser one extends steps
    without an exact period, and ``StepResult.steady_drift_s`` says how far the step time may
    then be off).
    """
    wall = time.perf_counter()
    steady_tolerance = check_tolerance(steady_tolerance)
    pl = place(graph, layout)
    memory_gib = math.nan
    if work is None:
        from .costs import step_work
        from .memory import check_memory

        config = _resolve_model(model)
        dev = _gpu_device(graph, device)
        work = step_work(config, layout, dev, kernels=kernels,
                         ep_machines=expert_machines(graph, layout, pl))
        if check_fit:
            memory_gib = check_memory(config, layout, dev).total_bytes / 2**30
    _check_work(work, layout)
    if work.micro_batches < 1:
        raise ConfigError(f"global batch {layout.global_batch} < dp {layout.dp} x micro batch "
                          f"{layout.micro_batch}: no micro-batch per pipeline")
    coster = GroupCoster(graph, library)
    if tp_mode not in ("auto", "duration", "flows"):
        raise ConfigError(f"tp_mode: expected auto, duration or flows, got {tp_mode!r}")
    if tp_mode == "auto":
        inside = all(len(set(pl.machines(graph, g))) == 1 for g in pl.groups("tp")[:64])
        tp_mode = "duration" if inside else "flows"
    notes = list(work.notes)
    rep = False
    if representative:
        rep, why = representative_ok(graph, pl, coster, tp_mode == "duration")
        if representative is True and not rep:
            raise ConfigError(f"representative ranks are not exact here: {why}")
        notes.append(why)

    def run(micro_batches: int) -> _Outcome:
        w = work if micro_batches == work.micro_batches else \
            dataclasses.replace(work, micro_batches=micro_batches)
        step = _Step(graph, layout, w, pl, library, tp_mode, rep, record_trace,
                     fold=bool(representative))
        step.coster = coster
        try:
            step.run()
        except FoldMiss as exc:         # a path the fold did not check: run every replica
            step = _Step(graph, layout, w, pl, library, tp_mode, rep, record_trace)
            step.coster = coster
            step.fold_note = f"{exc}: every replica simulated"
            step.run()
        return _outcome(step, layout.tp if rep else 1)

    out = None
    if extrapolate and not record_trace:
        out = _steady(run, work.micro_batches, layout.pp, notes, steady_tolerance)
    if out is None:
        out = run(work.micro_batches)
    if out.fold_note:
        notes.append(out.fold_note)
    t = out.step_s
    rows = []
    for r in out.ranks:
        idle = t - out.end[r]
        rows.append({"rank": r, "stage": out.stage[r], "node": pl.node[r], **out.acc[r],
                     "idle_s": idle, "end_s": out.end[r]})
    breakdown = pd.DataFrame(rows, columns=list(BREAKDOWN_COLUMNS))
    crit = breakdown.loc[breakdown["end_s"].idxmax()]
    links = _links(out.link_bytes, t)
    gpus = layout.gpus
    dev = _gpu_device(graph, device)
    peak = float(getattr(dev, "fp16_flops_per_s", 0.0) or 0.0) if dev is not None else 0.0
    mflops = float(work.model_flops_per_step)
    hflops = float(work.hardware_flops_per_step)
    traffic = pd.DataFrame(sorted(out.traffic.items()), columns=["group", "bytes"])
    row = {
        "model": _model_name(model), "gpus": gpus, "tp": layout.tp, "cp": layout.cp,
        "ep": layout.ep, "pp": layout.pp, "dp": layout.dp,
        "virtual_stages": layout.virtual_stages, "micro_batch": layout.micro_batch,
        "global_batch": layout.global_batch, "micro_batches": work.micro_batches,
        "step_time_s": t, "tokens_per_s": work.tokens_per_step / t if t > 0 else math.inf,
        "model_tflops_per_gpu": mflops / gpus / t / 1e12 if t > 0 else 0.0,
        "hardware_tflops_per_gpu": hflops / gpus / t / 1e12 if t > 0 else 0.0,
        "mfu_pct": 100.0 * mflops / (gpus * peak * t) if peak > 0 and t > 0 else float("nan"),
        **{p: float(crit[p]) for p in _PARTS},
        "busiest_link": str(links["link"].iloc[0]) if len(links) else "",
        "busiest_link_utilisation": float(links["utilisation"].iloc[0]) if len(links) else 0.0,
        "topology": graph.graph.get("name", ""),
        "memory_gib": memory_gib,
    }
    trace = _trace(out.trace_events, pl, row["model"]) if record_trace else None
    return StepResult(row=row, breakdown=breakdown, traffic=traffic, links=links, trace=trace,
                      engine=out.engine, notes=tuple(notes), simulated_ranks=len(out.ranks),
                      wall_s=time.perf_counter() - wall, steady=out.window,
                      steady_drift_s=out.drift_s)
