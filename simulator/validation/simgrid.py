"""SimGrid as a second opinion: replay concurrent collectives on it, compare flow by flow.

SimGrid's network model, like our :mod:`~simulator.engine.network`, shares every link's
bandwidth max-min fairly among the flows crossing it. Run with the right settings it must
therefore give the same time as our engine, not just for a whole collective but for every
transfer of every job, even when two jobs meet on a link. This module checks that.

What is compared
    :func:`run_engine` runs the jobs on our :class:`~simulator.engine.runner.Engine` (every job
    starts at ``t = 0`` and runs its schedule ``iterations`` times back to back, as
    :func:`~simulator.workload.jobs.run_jobs` does). :func:`run_simgrid` builds the same fabric
    in SimGrid (one host per endpoint, one SimGrid link per resource our engine used: each
    directed link, each capped node, each spread stage, with its capacity; one route per host
    pair, the very path our engine took) and replays the same dependency rules there: a
    transfer is ready when its data-flow predecessors are complete and its epoch is open; only
    the head of a ``(src, dst, channel)`` connection is on the wire, the next starts when the
    head has drained; a drained transfer is delivered one path latency later; a reducing
    transfer then queues its summation on the receiving device (FIFO); completing a transfer
    releases its dependents. SimGrid moves the bytes (``Comm.sendto_async`` between the two
    hosts); the rules above are bookkeeping in one SimGrid actor. :func:`compare` gives, per
    job, both times and their relative difference, and the worst relative difference over
    every timestamp and every flow duration.

Settings (each read in SimGrid 3.32's source, github.com/simgrid/simgrid tag ``v3.32``)
    See :data:`SIMGRID_CONFIG`. The one that needs care is latency. In CM02 a comm's *sharing
    penalty* is its route latency (plus ``weight-S`` over each link's bandwidth, 0 here): two
    flows on a link share it in inverse proportion to their route latencies, the TCP
    RTT-unfairness model (``NetworkCm02Model::communicate`` in ``src/surf/network_cm02.cpp``).
    And a comm first waits out its latency with a zero weight, taking no bandwidth, and only
    then moves bytes, whereas our engine puts bytes on the wire at once and adds the latency
    at the end. With zero-latency links every comm gets penalty 1.0 (``variable_new(action,
    1.0, ...)`` in ``comm_action_set_variable``): pure max-min. So by default the SimGrid links
    carry no latency and the replay adds each path's latency after the comm drains, which is
    our engine's rule. ``latency_on_links=True`` puts the latencies on SimGrid's links instead
    (SimGrid's own semantics, a comm then ends at delivery and the connection is busy until
    then); it is there to measure what that difference amounts to, not to agree exactly.

Agreement
    Exact to floating-point rounding up to one deliberate tolerance of ours: the engine drains
    at a wake-up every flow due within ``1e-12 * max(1, t)`` s of it
    (``simulator/engine/network.py``, ``_EPS``), so timestamps may differ by a few 1e-12 s
    where completions nearly coincide. That is about 1e-10 relative on a timestamp, and up to
    about 1e-8 on the wire time of a sub-millisecond flow late in a long run
    (``benchmarks/bench_simgrid.py``); with that tolerance at 1e-14 the same runs agree to
    about 1e-14.

SimGrid's engine is a process-wide singleton, so every replay runs in a child process
(``fork``); its wall time is measured there.
"""

from __future__ import annotations

import heapq
import importlib.machinery
import importlib.util
import itertools
import math
import multiprocessing
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..engine.runner import Engine
from ..errors import ConfigError, SimulationError
from ..schedules import make_schedule
from ..schedules.base import Schedule
from ..topology import endpoints

__all__ = ["Comparison", "ReplayJob", "SIMGRID_CONFIG", "Timeline", "TRANSFER_COLUMNS",
           "compare", "load_simgrid", "replay_jobs", "run_engine", "run_simgrid"]

#: Where Debian's ``python3-simgrid`` installs its extension module for the system CPython; it
#: is loaded from there by file name, without adding the folder to ``sys.path``.
SYSTEM_SITE_DIRS = ("/usr/lib/python3/dist-packages",)

#: SimGrid configuration of the replay, each item checked in SimGrid 3.32's source
#: (github.com/simgrid/simgrid, tag v3.32).
SIMGRID_CONFIG = (
    # CM02, the max-min model without corrections: surf_network_model_init_CM02 sets the
    # latency and bandwidth factors to 1 and weight-S to 0 (src/surf/network_cm02.cpp).
    "network/model:CM02",
    # The same three set explicitly: sg_config.cpp's own defaults are LV08's 13.01, 0.97 and
    # 20537 (src/simgrid/sg_config.cpp); with weight-S 0 a comm's sharing penalty is its route
    # latency alone (NetworkCm02Model::communicate).
    "network/latency-factor:1",
    "network/bandwidth-factor:1",
    "network/weight-S:0",
    # Cross traffic ("yes" by default, src/kernel/resource/NetworkModel.cpp) also puts every
    # comm on its back route's links with weight 0.05, the TCP acknowledgements
    # (NetworkCm02Model::comm_action_expand_constraints). Our flows load their own path only.
    "network/crosstraffic:0",
    # TCP-gamma bounds a comm with route latency L to gamma / (2 L) (comm_action_set_variable);
    # with 0 that bound is 0, which the solver reads as no bound (it only applies bounds > 0,
    # src/kernel/lmm/maxmin.cpp). Without link latencies the bound is never set anyway.
    "network/TCP-gamma:0",
    # Precision. maxmin/precision (default 1e-5) is relative to a link's capacity: a link with
    # less than that fraction left counts as saturated (maxmin.cpp). surf/precision (default
    # 1e-9 s) is absolute: every comm due within it of "now" finishes now
    # (NetworkCm02Model::update_actions_state_lazy), which would be a 1e-6 relative error on a
    # millisecond transfer. Both tightened to a few units of double rounding.
    "maxmin/precision:1e-12",
    "surf/precision:1e-15",
)

#: Per-transfer columns of :attr:`Timeline.transfers`.
TRANSFER_COLUMNS = ("job", "iteration", "transfer", "src", "dst", "bytes", "start_s",
                    "drained_s", "delivered_s", "done_s")
_STAMPS = ("start_s", "drained_s", "delivered_s", "done_s")


# -- inputs -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class ReplayJob:
    """A schedule on its endpoints (``placement[r]`` runs rank ``r``), run ``iterations``
    times back to back from ``t = 0``."""

    name: str
    schedule: Schedule
    placement: tuple[str, ...]
    iterations: int = 1


def replay_jobs(graph, jobs) -> list[ReplayJob]:
    """:class:`ReplayJob` for each :class:`~simulator.workload.jobs.CollectiveJob`: the schedule
    and placement :func:`~simulator.workload.jobs.run_jobs` builds (registry algorithm, ideal
    library, ranks as endpoint indices). ReplayJobs pass through unchanged."""
    eps = endpoints(graph)
    out = []
    for job in jobs:
        if isinstance(job, ReplayJob):
            out.append(job)
            continue
        kind = getattr(job, "kind", "collective")
        if kind != "collective" or not hasattr(job, "algorithm"):
            raise ConfigError(f"jobs.{getattr(job, 'name', job)!r}: the SimGrid comparison "
                              f"replays collective jobs (or ReplayJob schedules), not "
                              f"{kind!r} jobs")
        bad = [r for r in job.ranks if not 0 <= r < len(eps)]
        if bad:
            raise ConfigError(f"jobs.{job.name}.ranks: index {bad[0]} is outside the "
                              f"topology's {len(eps)} endpoints (0-{len(eps) - 1})")
        schedule = make_schedule(job.algorithm, job.collective, len(job.ranks), job.size_bytes)
        out.append(ReplayJob(job.name, schedule, tuple(eps[r] for r in job.ranks),
                             job.iterations))
    if not out:
        raise ConfigError("jobs: at least one job")
    names = [j.name for j in out]
    if len(set(names)) != len(names):
        raise ConfigError(f"jobs: two jobs are called "
                          f"{sorted(n for n in names if names.count(n) > 1)[0]!r}")
    for job in out:
        if job.iterations < 1:
            raise ConfigError(f"jobs.{job.name}.iterations must be >= 1, got {job.iterations}")
    return out


@dataclass
class Timeline:
    """One simulator's answer: per job its time (first start to last completion), per transfer
    and iteration its timestamps (:data:`TRANSFER_COLUMNS`), and the wall time it took."""

    simulator: str
    job_s: dict
    transfers: pd.DataFrame
    wall_s: float


def _transfer_frame(jobs: list[ReplayJob], stamps: dict) -> pd.DataFrame:
    """Rows of every transfer of every iteration; ``stamps[name][k]`` is iteration ``k``'s
    four arrays (start, drained, delivered, done)."""
    parts = []
    for job in jobs:
        s = job.schedule
        n = len(s)
        for k, arrays in enumerate(stamps[job.name]):
            part = {"job": [job.name] * n, "iteration": np.full(n, k, dtype=np.int64),
                    "transfer": np.arange(n), "src": s.src, "dst": s.dst,
                    "bytes": s.transfer_bytes}
            for name, values in zip(_STAMPS, arrays):
                part[name] = np.asarray(values, dtype=np.float64)
            parts.append(pd.DataFrame(part))
    if not parts:
        return pd.DataFrame(columns=list(TRANSFER_COLUMNS))
    return pd.concat(parts, ignore_index=True)[list(TRANSFER_COLUMNS)]


# -- our engine -------------------------------------------------------------------------------

def run_engine(graph, jobs, *, reduce_compute: bool = True) -> tuple[Timeline, Engine]:
    """Run the jobs together on one :class:`~simulator.engine.runner.Engine`; returns the
    :class:`Timeline` and the engine (whose runs hold the paths SimGrid must reuse)."""
    jobs = replay_jobs(graph, jobs)
    wall = time.perf_counter()
    engine = Engine(graph, reduce_compute=reduce_compute)
    states = {}
    for job in jobs:
        states[job.name] = _loop(engine, job)
    engine.run()
    wall = time.perf_counter() - wall
    stamps = {name: [[run.t_start, run.t_drained, run.t_delivered, run.t_done]
                     for run in state["runs"]] for name, state in states.items()}
    job_s = {name: state["end"] - state["start"] for name, state in states.items()}
    return Timeline("clustersim", job_s, _transfer_frame(jobs, stamps), wall), engine


def _loop(engine: Engine, job: ReplayJob) -> dict:
    """Launch the job's schedule now, and again each time it ends, ``iterations`` times."""
    state = {"start": engine.env.now, "end": math.nan, "runs": []}

    def one(left: int) -> None:
        run = engine.launch(job.schedule, job.placement, label=job.name)
        state["runs"].append(run)

        def done(_event):
            if left > 1:
                one(left - 1)
            else:
                state["end"] = engine.env.now

        run.done_event.callbacks.append(done)

    one(job.iterations)
    return state


# -- the plan SimGrid replays -----------------------------------------------------------------

def _plan(graph, jobs: list[ReplayJob], engine: Engine, latency_on_links: bool) -> dict:
    """Platform and jobs as plain data for the child process: SimGrid links (one per resource
    our engine used, with its capacity), one route per endpoint pair (the engine's path), and
    per job the engine's own launch data (dependencies, epochs, FIFO connections)."""
    net = engine.network
    links: dict = {}          # resource key -> (SimGrid link name, capacity, latency)
    routes: dict = {}         # (src node, dst node) -> link names
    hosts: list = []
    plan_jobs = []
    for job in jobs:
        runs = [r for r in engine.runs if r.label == job.name]
        if not runs:
            raise SimulationError(f"job {job.name!r} was never launched")
        paths = runs[0].path_of
        prep = engine._prepared(job.schedule)     # the launch data the engine used
        conn_route, conn_latency, receiver, reduce_rate = [], [], [], []
        for c, path in enumerate(paths):
            src, dst = job.placement[prep.head_src[c]], job.placement[prep.head_dst[c]]
            for node in (src, dst):
                if node not in hosts:
                    hosts.append(node)
            names = []
            for key in path.resources:
                if key not in links:
                    links[key] = (f"r{len(links)}", net.capacity[net.index[key]],
                                  _resource_latency(graph, key) if latency_on_links else 0.0)
                names.append(links[key][0])
            names = tuple(names)
            if routes.setdefault((src, dst), names) != names:
                raise ConfigError(
                    f"simgrid comparison: two different paths from {src} to {dst}; SimGrid "
                    f"routes one path per host pair (accepted: routing modes that give one "
                    f"path per endpoint pair, e.g. the default or 'ecmp')")
            if latency_on_links and names and not math.isclose(
                    sum(links[k][2] for k in path.resources), path.latency_s,
                    rel_tol=1e-12, abs_tol=1e-18):
                raise ConfigError(f"simgrid comparison: latency_on_links cannot express the "
                                  f"path {src}->{dst} (spread stages); use the default")
            conn_route.append((src, dst, bool(names)))
            conn_latency.append(0.0 if latency_on_links else path.latency_s)
            receiver.append(dst)
            reduce_rate.append(engine.reduce_rate(dst))
        plan_jobs.append({"name": job.name, "iterations": job.iterations, "prep": prep,
                          "route": conn_route, "latency": conn_latency,
                          "route_latency": [p.latency_s for p in paths],
                          "receiver": receiver, "reduce_rate": reduce_rate})
    return {"hosts": hosts, "links": list(links.values()), "routes": routes, "jobs": plan_jobs,
            "latency_on_links": latency_on_links}


def _resource_latency(graph, key) -> float:
    """A resource's latency when SimGrid's links carry it: a link's own, 0 for a capped node."""
    if key[0] == "node":
        return 0.0
    if key[0] == "spread":
        return math.nan
    return float(graph.edges[key].get("latency_s", 0.0))


# -- SimGrid ----------------------------------------------------------------------------------

def load_simgrid():
    """The ``simgrid`` module: an ordinary import, else Debian's ``python3-simgrid`` loaded from
    :data:`SYSTEM_SITE_DIRS` by file (``sys.path`` untouched). Raises ConfigError saying how
    to install it when neither works."""
    tried = []
    try:
        import simgrid  # noqa: PLC0415 - optional dependency, imported only here
        return simgrid
    except ImportError as exc:
        tried.append(f"import simgrid: {exc}")
    for folder in SYSTEM_SITE_DIRS:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = Path(folder) / f"simgrid{suffix}"
            if not path.is_file():
                continue
            try:
                spec = importlib.util.spec_from_file_location("simgrid", path)
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
            except ImportError as exc:
                tried.append(f"{path}: {exc}")
                continue
            sys.modules["simgrid"] = module
            return module
        tried.append(f"no simgrid{importlib.machinery.EXTENSION_SUFFIXES[0]} in {folder}")
    raise ConfigError(
        "simgrid comparison: the SimGrid Python module is not importable by Python "
        f"{sys.version_info.major}.{sys.version_info.minor} ({'; '.join(tried)}). Expected "
        "SimGrid >= 3.32 with its Python bindings; accepted installs: 'apt-get install "
        "python3-simgrid' (Debian/Ubuntu, for the system's CPython version) or 'pip install "
        "simgrid'")


def run_simgrid(graph, jobs, *, engine: Engine | None = None, latency_on_links: bool = False,
                config=SIMGRID_CONFIG, timeout_s: float = 600.0) -> Timeline:
    """Replay the jobs on SimGrid (in a child process) along the paths ``engine`` used; without
    ``engine``, :func:`run_engine` is run first to get them. ``config``: SimGrid ``--cfg``
    items (``name:value``), :data:`SIMGRID_CONFIG` unless given."""
    jobs = replay_jobs(graph, jobs)
    load_simgrid()     # a clear ConfigError here rather than in the child
    if engine is None:
        _timeline, engine = run_engine(graph, jobs)
    plan = _plan(graph, jobs, engine, latency_on_links)
    plan["config"] = tuple(config)
    result = _in_child(plan, timeout_s)
    return Timeline("simgrid", result["job_s"], _transfer_frame(jobs, result["stamps"]),
                    result["wall_s"])


def _in_child(plan: dict, timeout_s: float) -> dict:
    """Run :func:`_simulate` in a forked child (SimGrid's engine is a process singleton)."""
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_child_main, args=(send, plan), daemon=True)
    child.start()
    send.close()
    try:
        if not receive.poll(timeout_s):
            raise SimulationError(f"simgrid comparison: SimGrid did not finish in {timeout_s} s")
        status, value = receive.recv()
    except EOFError:
        child.join(5)
        raise SimulationError(f"simgrid comparison: the SimGrid process died (exit code "
                              f"{child.exitcode}); its messages are on stderr above") from None
    finally:
        if child.is_alive():
            child.join(5)
        if child.is_alive():
            child.kill()
            child.join()
    if status != "ok":
        raise SimulationError(f"simgrid comparison: {value}")
    return value


def _child_main(send, plan: dict) -> None:
    try:
        send.send(("ok", _simulate(plan)))
    except BaseException as exc:   # noqa: BLE001 - reported to the parent
        send.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        send.close()


def _simulate(plan: dict) -> dict:
    """Build the platform, run the replay actor, return per-job times and stamps."""
    sg = load_simgrid()
    wall = time.perf_counter()
    engine = sg.Engine(["clustersim", "--log=root.thres:critical"]
                       + [f"--cfg={item}" for item in plan["config"]])
    zone = sg.NetZone.create_full_zone("clustersim")
    hosts = {name: zone.create_host(name, 1.0) for name in plan["hosts"]}
    links = []
    for name, capacity, latency in plan["links"]:
        link = zone.create_link(name, float(capacity))
        if latency > 0:
            link.set_latency(float(latency))
        links.append(link.seal())
    by_name = {link.name: link for link in links}
    for (src, dst), names in plan["routes"].items():
        if names:
            zone.add_route(hosts[src].netpoint, hosts[dst].netpoint, None, None,
                           [sg.LinkInRoute(by_name[n]) for n in names], False)
    replay = _Replay(sg, hosts, plan)
    # the actor only does bookkeeping: any host will do (a spare one if no job has a transfer)
    home = hosts[plan["hosts"][0]] if hosts else zone.create_host("clustersim-replay", 1.0)
    zone.seal()
    sg.Actor.create("replay", home, replay.main)
    engine.run()
    wall = time.perf_counter() - wall
    if replay.error is not None:
        raise replay.error
    for job in replay.jobs:
        if math.isnan(job["end"]):
            raise SimulationError(f"job {job['name']!r} did not finish on SimGrid")
    return {"wall_s": wall, "job_s": {j["name"]: j["end"] for j in replay.jobs},
            "stamps": {j["name"]: j["stamps"] for j in replay.jobs}}


class _Replay:
    """The engine's execution rules (:mod:`simulator.engine.runner`), with SimGrid moving the
    bytes: one actor waits for whichever comes first, a SimGrid comm completing or a timer
    (a delivery, a reduction finishing), and reacts as the engine's callbacks do."""

    def __init__(self, sg, hosts: dict, plan: dict):
        self.sg = sg
        self.hosts = hosts
        self.on_links = plan["latency_on_links"]
        self.timers: list = []             # heap of (time, sequence, callback)
        self.sequence = itertools.count()
        self.comms: list = []              # SimGrid comms on the wire
        self.comm_done: list = []          # their callbacks, same order
        self.free_at: dict = {}            # device -> end of its queued compute
        self.now = 0.0                     # time of the event being handled
        self.error: BaseException | None = None
        self.jobs = [dict(spec, end=math.nan, stamps=[]) for spec in plan["jobs"]]

    # -- primitives ---------------------------------------------------------------------------
    def at(self, t: float, callback) -> None:
        heapq.heappush(self.timers, (t, next(self.sequence), callback))

    def send(self, route: tuple, nbytes: int, callback) -> None:
        """Put ``nbytes`` on SimGrid from ``route``'s source to its destination host; without
        bytes or links the transfer drains at once (as in the engine)."""
        src, dst, has_links = route
        if nbytes <= 0 or not has_links:
            self.at(self.now, callback)
            return
        comm = self.sg.Comm.sendto_async(self.hosts[src], self.hosts[dst], int(nbytes))
        self.comms.append(comm)
        self.comm_done.append(callback)

    def compute(self, device: str, duration_s: float, callback) -> None:
        """FIFO work on ``device`` (the engine's :meth:`Engine.compute`)."""
        if duration_s <= 0:
            callback()
            return
        start = max(self.now, self.free_at.get(device, 0.0))
        self.free_at[device] = start + duration_s
        self.at(start + duration_s, callback)

    # -- the actor ----------------------------------------------------------------------------
    def main(self) -> None:
        try:
            for job in self.jobs:
                self.launch(job, job["iterations"])
            self.loop()
        except BaseException as exc:   # noqa: BLE001 - re-raised after the SimGrid run
            self.error = exc

    def loop(self) -> None:
        sg = self.sg
        while self.comms or self.timers:
            clock = sg.Engine.clock
            if self.timers and self.timers[0][0] <= max(clock, self.now):
                self.fire(self.timers[0][0])
                continue
            if self.timers:
                due = self.timers[0][0]
                if self.comms:
                    idx = sg.Comm.wait_any_for(self.comms, due - clock)
                else:
                    sg.this_actor.sleep_until(due)
                    idx = -1
                if idx < 0:
                    self.fire(due)
                    continue
            else:
                idx = sg.Comm.wait_any(self.comms)
            self.comms.pop(idx)
            callback = self.comm_done.pop(idx)
            self.now = max(self.now, sg.Engine.clock)
            callback()

    def fire(self, due: float) -> None:
        """Run the callbacks of every timer due at ``due``."""
        self.now = max(self.now, due)
        while self.timers and self.timers[0][0] <= due:
            _t, _seq, callback = heapq.heappop(self.timers)
            callback()

    # -- one launch of a job's schedule (the engine's Engine._launch) -------------------------
    def launch(self, job: dict, left: int) -> None:
        prep = job["prep"]
        n = len(prep.nbytes)
        route, latency = job["route"], job["latency"]
        receiver, reduce_rate = job["receiver"], job["reduce_rate"]
        route_latency = job["route_latency"]
        t_start, t_drained, t_delivered, t_done = stamps = [[math.nan] * n for _ in range(4)]
        job["stamps"].append(stamps)
        next_of_conn = list(prep.first_of_conn)
        busy = [False] * len(next_of_conn)
        pending = list(prep.counts)
        nbytes, reduces, conn_of = prep.nbytes, prep.reduces, prep.conn_of_l
        dep_ptr, dep_owner, next_in_conn = prep.dep_ptr, prep.dep_owner, prep.next_in_conn
        epoch_of, epoch_left = prep.epoch, list(prep.epoch_left)
        last_epoch, barriers = prep.n_epochs - 1, prep.epoch is not None
        state = {"open": 0, "remaining": n}

        def try_start(c: int) -> None:
            i = next_of_conn[c]
            if busy[c] or i < 0 or pending[i] or (barriers and epoch_of[i] > state["open"]):
                return
            next_of_conn[c] = next_in_conn[i]
            busy[c] = True
            t_start[i] = self.now
            self.send(route[c], nbytes[i], lambda i=i: drained(i))

        def drained(i: int) -> None:
            c = conn_of[i]
            busy[c] = False
            if self.on_links:       # the comm ended at delivery: SimGrid paid the latency first
                t_drained[i] = self.now - route_latency[c]
                deliver(i)
            else:
                t_drained[i] = self.now
                lat = latency[c]
                if lat > 0:
                    t = self.now + lat
                    self.at(t, lambda i=i: deliver(i))
                else:
                    deliver(i)
            j = next_of_conn[c]
            if j >= 0 and not pending[j]:
                try_start(c)

        def deliver(i: int, reduced: bool = False) -> None:
            if not reduced:
                t_delivered[i] = self.now
                if reduces[i]:
                    c = conn_of[i]
                    rate = reduce_rate[c]
                    if rate != math.inf:
                        self.compute(receiver[c], nbytes[i] / rate,
                                     lambda i=i: deliver(i, True))
                        return
            t_done[i] = self.now
            state["remaining"] -= 1
            for j in dep_owner[dep_ptr[i]:dep_ptr[i + 1]]:
                pending[j] -= 1
                if not pending[j]:
                    try_start(conn_of[j])
            if barriers:
                e = epoch_of[i]
                epoch_left[e] -= 1
                if e == state["open"] and not epoch_left[e] and e < last_epoch:
                    while state["open"] < last_epoch and not epoch_left[state["open"]]:
                        state["open"] += 1
                    for c in range(len(busy)):
                        try_start(c)
            if not state["remaining"]:
                end()

        def end() -> None:
            job["stamps"][-1] = [np.asarray(values, dtype=np.float64) for values in stamps]
            if left > 1:
                self.launch(job, left - 1)
            else:
                job["end"] = self.now

        if n == 0:
            end()
        else:
            for c in range(len(busy)):
                try_start(c)


# -- the comparison ---------------------------------------------------------------------------

@dataclass
class Comparison:
    """Our engine against SimGrid on the same jobs.

    ``jobs``: per job ``ours_s``, ``simgrid_s`` and ``rel_diff``; ``flows``: per transfer and
    iteration both sets of timestamps; ``worst_rel_diff``: the largest relative difference of
    any timestamp (start, drained, delivered, done) of any flow, or of any job's time;
    ``worst_duration_rel_diff``: the largest relative difference of a flow's time on the wire
    (drained - start), the stricter measure for flows that start late; ``worst_abs_diff_s``:
    the largest absolute difference of any timestamp, seconds."""

    jobs: pd.DataFrame
    flows: pd.DataFrame
    worst_rel_diff: float
    worst_duration_rel_diff: float
    worst_abs_diff_s: float
    ours: Timeline
    simgrid: Timeline


def relative_difference(a, b) -> np.ndarray:
    """``|a - b| / max(|a|, |b|)`` elementwise; 0 where both are 0, inf where one is NaN."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    scale = np.maximum(np.abs(a), np.abs(b))
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(scale > 0, np.abs(a - b) / np.where(scale > 0, scale, 1.0), 0.0)
    return np.where(np.isnan(a) | np.isnan(b), np.inf, out)


def compare(graph, jobs, *, latency_on_links: bool = False, reduce_compute: bool = True,
            config=SIMGRID_CONFIG, timeout_s: float = 600.0) -> Comparison:
    """Run ``jobs`` (CollectiveJob or ReplayJob) together on our engine and on SimGrid along
    the same paths, and compare job by job and flow by flow (see :class:`Comparison`)."""
    jobs = replay_jobs(graph, jobs)
    load_simgrid()
    ours, engine = run_engine(graph, jobs, reduce_compute=reduce_compute)
    theirs = run_simgrid(graph, jobs, engine=engine, latency_on_links=latency_on_links,
                         config=config, timeout_s=timeout_s)
    rows = []
    for job in jobs:
        a, b = ours.job_s[job.name], theirs.job_s[job.name]
        rows.append({"job": job.name, "algorithm": job.schedule.algorithm,
                     "collective": job.schedule.collective, "ranks": len(job.placement),
                     "iterations": job.iterations, "transfers": len(job.schedule) * job.iterations,
                     "ours_s": a, "simgrid_s": b, "rel_diff": float(relative_difference(a, b))})
    job_frame = pd.DataFrame(rows)
    keys = ["job", "iteration", "transfer", "src", "dst", "bytes"]
    flows = ours.transfers.merge(theirs.transfers, on=keys, suffixes=("_ours", "_simgrid"),
                                 how="outer", validate="one_to_one")
    worst = float(job_frame["rel_diff"].max()) if len(job_frame) else 0.0
    worst_abs = 0.0
    for name in _STAMPS:
        a, b = flows[f"{name}_ours"].to_numpy(), flows[f"{name}_simgrid"].to_numpy()
        diff = relative_difference(a, b)
        flows[f"{name.removesuffix('_s')}_rel_diff"] = diff
        if len(diff):
            worst = max(worst, float(diff.max()))
            worst_abs = max(worst_abs, float(np.max(np.abs(a - b))))
    wire_ours = flows["drained_s_ours"] - flows["start_s_ours"]
    wire_simgrid = flows["drained_s_simgrid"] - flows["start_s_simgrid"]
    flows["wire_rel_diff"] = relative_difference(wire_ours, wire_simgrid)
    worst_wire = float(flows["wire_rel_diff"].max()) if len(flows) else 0.0
    return Comparison(job_frame, flows, worst, worst_wire, worst_abs, ours, theirs)
