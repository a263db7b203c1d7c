"""Several jobs on one fabric: what each costs the others.

A cluster is rarely one job's. Two training jobs whose collectives cross the same leaf uplinks
slow each other, and by how much depends on the max-min share of every link they meet on, which
is what the flow engine computes exactly. A *job* runs on its own ranks (a list of topology
endpoints), ``iterations`` times back to back, and is one of three kinds:

* :class:`CollectiveJob`: a collective of a size, the communication of a data-parallel job's
  gradient buckets or of a benchmark running beside production traffic;
* :class:`TrainingJob`: data-parallel training iterations of a registered model, as
  ``clustersim train`` simulates them (:mod:`.training`: forward, backward with the gradient
  buckets' all-reduces overlapped, one after another on the communicator stream, optimizer);
* :class:`LlmJob`: hybrid-parallel LLM training steps (:mod:`.llm.step`) of a layout whose
  ``tp x cp x pp x dp`` GPUs are the job's ranks, in order.

:func:`run_jobs` simulates every job alone on the topology, then all of them together on one
:class:`~simulator.engine.runner.Engine` (all start at ``t = 0``), and reports per job its time
alone, its time together and the slowdown (together / alone), and the links two or more jobs
use, with the bytes each job put on them.

Collective and training schedules run on bare wires (the ``ideal`` library; a collective
library's per-call costs are timed alone and cannot be shared), so every number there is the
exact max-min answer a hand derivation gives (``tests/test_jobs.py`` checks several). An LLM
job's collectives are bundles of flows calibrated to the library's alone time, as in
``clustersim llm``; in a shared run every rank is simulated and tensor-parallel groups run as
flows (not as durations), so that traffic of another job on the same NVLink or NIC meets it.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field

import pandas as pd

from ..engine.network import is_private
from ..engine.runner import Engine
from ..errors import ConfigError, SimulationError
from ..schedules import make_schedule
from ..topology import endpoints

__all__ = ["JOB_COLUMNS", "SHARED_LINK_COLUMNS", "JOB_KINDS", "CollectiveJob", "TrainingJob",
           "LlmJob", "JobsResult", "parse_ranks", "run_jobs"]

JOB_KINDS = ("collective", "training", "llm")

JOB_COLUMNS = ("job", "kind", "model", "collective", "algorithm", "size_bytes", "iterations",
               "ranks", "first_rank", "alone_s", "together_s", "slowdown", "shared_links",
               "topology")
SHARED_LINK_COLUMNS = ("link", "jobs", "bytes_by_job", "bytes")


def parse_ranks(text, total: int, what: str = "ranks") -> tuple[int, ...]:
    """Endpoint indices from ``"0-15"``, ``"0-7,16-23"``, ``[0, 2, 4]`` or an int count (the
    first N); each at most once, each below ``total``."""
    if isinstance(text, bool):
        raise ConfigError(f"{what}: expected indices like '0-15' or a list, got {text!r}")
    if isinstance(text, int):
        ranks = list(range(text))
    elif isinstance(text, (list, tuple)):
        ranks = [int(r) for r in text]
    else:
        ranks = []
        for part in str(text).split(","):
            part = part.strip()
            m = re.fullmatch(r"(\d+)(?:\s*-\s*(\d+))?", part)
            if not m:
                raise ConfigError(f"{what}: {part!r} is not an index or a range like 0-15")
            first, last = int(m.group(1)), int(m.group(2) or m.group(1))
            if last < first:
                raise ConfigError(f"{what}: range {part!r} runs backwards")
            ranks += range(first, last + 1)
    if len(ranks) < 1:
        raise ConfigError(f"{what}: no ranks")
    if len(set(ranks)) != len(ranks):
        raise ConfigError(f"{what}: a rank appears twice")
    bad = [r for r in ranks if not 0 <= r < total]
    if bad:
        raise ConfigError(f"{what}: index {bad[0]} is outside the topology's {total} "
                          f"endpoints (0-{total - 1})")
    return tuple(ranks)


# -- the job kinds ------------------------------------------------------------------------------

@dataclass(frozen=True)
class CollectiveJob:
    """A collective loop on its own ranks: ``ranks`` are endpoint indices of the topology."""

    name: str
    collective: str
    algorithm: str
    size_bytes: int
    ranks: tuple[int, ...]
    iterations: int = 1

    kind = "collective"

    def prepare(self, graph) -> "_Prepared":
        nodes = _nodes(graph, self.ranks)
        schedule = make_schedule(self.algorithm, self.collective, len(self.ranks),
                                 self.size_bytes)

        def launch(engine, then):
            run = engine.launch(schedule, nodes, label=self.name)
            run.done_event.callbacks.append(lambda _e: then())
            return {"runs": [run]}

        return _Prepared(self, launch, {"collective": self.collective,
                                        "algorithm": self.algorithm,
                                        "size_bytes": self.size_bytes})


@dataclass(frozen=True)
class TrainingJob:
    """Data-parallel training of a registered model (:data:`~.models.MODELS`) on ``ranks``:
    one iteration is :func:`~.training.simulate_training`'s with a collective ``aggregation``
    on bare wires; ``device`` None takes the first rank's GPU."""

    name: str
    model: str
    ranks: tuple[int, ...]
    aggregation: str = "ring"
    batch_per_gpu: int = 32
    precision: str = "fp32"
    gradient_dtype: str | None = None  # on the wire (None: the precision's; mixed_precision)
    device: str | None = None
    bucket_bytes: int = 25 << 20      # torch DistributedDataParallel(bucket_cap_mb=25)
    overlap: bool = True
    slices: int = 1
    framework: object = None          # a frameworks.Framework (bucket policy), or None
    iterations: int = 1

    kind = "training"

    def plan(self, graph):
        """The :class:`~.training.IterationPlan` of one iteration on the job's ranks."""
        from .compute import compute_profile
        from .models import get_model
        from .mixed_precision import gradient_element_bytes
        from .training import plan_iteration

        nodes = _nodes(graph, self.ranks)
        device = self.device or graph.nodes[nodes[0]].get("device")
        if not device:
            raise ConfigError(f"endpoint {nodes[0]!r} names no GPU device preset; set the "
                              f"job's device")
        profile = compute_profile(self.model, device, self.batch_per_gpu, self.precision)
        element = gradient_element_bytes(self.precision, self.gradient_dtype)
        grads = [layer.params * element for layer in get_model(self.model).layers]
        return plan_iteration(graph, profile, nodes, grads, aggregation=self.aggregation,
                              precision=self.precision, bucket_bytes=self.bucket_bytes,
                              overlap=self.overlap, slices=self.slices,
                              framework=self.framework, gradient_dtype=self.gradient_dtype)

    def prepare(self, graph) -> "_Prepared":
        from .training import start_iteration

        plan = self.plan(graph)

        def launch(engine, then):
            return start_iteration(engine, plan, then=then)

        return _Prepared(self, launch, {"model": self.model, "collective": "allreduce",
                                        "algorithm": self.aggregation,
                                        "size_bytes": plan.gradient_bytes})


@dataclass(frozen=True)
class LlmJob:
    """Hybrid-parallel training steps of an LLM (a registered name or a configuration) cut by
    ``layout``; rank ``r`` of the layout runs on endpoint ``ranks[r]``, so ``ranks`` holds
    exactly ``layout.gpus`` endpoints."""

    name: str
    model: object
    layout: object                    # a llm.layout.Layout
    ranks: tuple[int, ...]
    device: str | None = None
    library: str = "default"
    iterations: int = 1

    kind = "llm"

    def prepare(self, graph) -> "_Prepared":
        import dataclasses

        from .llm.costs import step_work
        from .llm.groups import GroupCoster
        from .llm.memory import check_memory
        from .llm.placement import place
        from .llm.step import _check_work, _gpu_device, _resolve_model, _Step

        layout = self.layout
        if layout.gpus != len(self.ranks):
            raise ConfigError(f"the layout tp {layout.tp} x cp {layout.cp} x pp {layout.pp} x "
                              f"dp {layout.dp} needs {layout.gpus} GPUs, the job has "
                              f"{len(self.ranks)} ranks")
        # rank r on the job's r-th endpoint (place() checks the degrees and the GPU count)
        pl = dataclasses.replace(place(graph, layout), node=_nodes(graph, self.ranks))
        config = _resolve_model(self.model)
        dev = _gpu_device(graph, self.device or graph.nodes[pl.node[0]].get("device"))
        work = step_work(config, layout, dev)
        check_memory(config, layout, dev)
        _check_work(work, layout)
        if work.micro_batches < 1:
            raise ConfigError(f"global batch {layout.global_batch} < dp {layout.dp} x micro "
                              f"batch {layout.micro_batch}: no micro-batch per pipeline")
        coster = GroupCoster(graph, self.library)

        class JobStep(_Step):
            """A step that calls ``then()`` when its last rank has finished."""

            def finish(self, r: int) -> None:
                super().finish(r)
                if len(self.end) == len(self.ranks):
                    self.then()

        def launch(engine, then):
            # every rank simulated, tensor parallelism as flows: another job's traffic on
            # the same links meets all of this job's
            step = JobStep(graph, layout, work, pl, self.library, "flows", False, False,
                           engine=engine)
            step.coster, step.flows, step.then = coster, _recording_launcher(engine), then
            step.start()
            return {"link_bytes": step.flows.link_bytes, "flows": step.flows}

        name = self.model if isinstance(self.model, str) else getattr(config, "name", "")
        return _Prepared(self, launch, {"model": name, "collective": "step",
                                        "algorithm": _layout_label(layout)})


# -- running ------------------------------------------------------------------------------------

def _nodes(graph, ranks) -> tuple:
    eps = endpoints(graph)
    return tuple(eps[r] for r in ranks)


@dataclass
class _Prepared:
    """A job ready to run: ``launch(engine, then)`` starts one iteration now and returns its
    state (with ``runs``: the schedule runs it launched, for the links it used)."""

    job: object
    launch_one: object
    row: dict

    def launch(self, engine: Engine) -> dict:
        """Start the job's ``iterations`` back to back; the dict gets ``start``, ``end`` and
        ``iterations`` (each iteration's state)."""
        loop = {"start": engine.env.now, "end": None, "iterations": []}

        def one(left: int) -> None:
            def done(left=left):
                if left > 1:
                    one(left - 1)
                else:
                    loop["end"] = engine.env.now

            loop["iterations"].append(self.launch_one(engine, done))

        one(self.job.iterations)
        return loop

    def link_bytes(self, loop: dict) -> dict:
        """Bytes the job put on each directed link ``(u, v)``."""
        out: dict = {}
        for state in loop["iterations"]:
            for run in state.get("runs", ()):
                nbytes = run.schedule.transfer_bytes
                for i, c in enumerate(run.conn_of.tolist()):
                    for link in run.path_of[c].links:
                        out[link] = out.get(link, 0.0) + float(nbytes[i])
            for link, b in state.get("link_bytes", {}).items():
                out[link] = out.get(link, 0.0) + b
        return out


#: Blocks of private-cap numbers, one per launcher (see :func:`_recording_launcher`).
_CAP_BLOCKS = itertools.count(1)


def _recording_launcher(engine: Engine):
    """A :class:`~.llm.groups.FlowLauncher` that adds up the bytes its flows put on each link,
    and numbers its private rate caps apart from every other launcher's: a launcher keys its
    caps ``("cap", n)`` counting from its own zero, so two on one engine would share them."""
    from .llm.groups import FlowLauncher

    class Recording(FlowLauncher):
        def __init__(self):
            super().__init__(engine)
            self._caps = next(_CAP_BLOCKS) << 40
            self.link_bytes: dict = {}

        def _add(self, resources, nbytes: float) -> None:
            keys = self.net.keys
            for r in resources:
                key = keys[r]
                if is_private(key) or key[0] == "node":
                    continue
                link = key[2][0] if key[0] == "spread" else key
                self.link_bytes[link] = self.link_bytes.get(link, 0.0) + nbytes

        def start(self, flows, bundle, kind):
            for res, b in flows:
                self._add(res, b)
            super().start(flows, bundle, kind)

        def p2p(self, src, dst, size_bytes, then, kind="pp"):
            if size_bytes > 0:
                self._add(self.resources(src, dst)[0], size_bytes)
            super().p2p(src, dst, size_bytes, then, kind)

    return Recording()


def _layout_label(layout) -> str:
    """``tp2 cp1 ep1 pp2 dp2 mb1 1f1b``: the layout in the algorithm column."""
    text = (f"tp{layout.tp} cp{layout.cp} ep{layout.ep} pp{layout.pp} dp{layout.dp} "
            f"mb{layout.micro_batch} {layout.pipeline}")
    return text + (f" v{layout.virtual_stages}" if layout.virtual_stages > 1 else "")


@dataclass
class JobsResult:
    """Per-job rows and the links the jobs meet on."""

    jobs: pd.DataFrame
    shared_links: pd.DataFrame
    link_bytes: list = field(default_factory=list)   # per job: {(u, v): bytes} together


def _run(engine: Engine, prepared: list) -> list[dict]:
    loops = [p.launch(engine) for p in prepared]
    engine.run()
    for p, loop in zip(prepared, loops):
        if loop["end"] is None:
            raise SimulationError(f"job {p.job.name!r} never finished (t={engine.env.now:.9g} "
                                  f"s)")
    return loops


def _check_owned_gpus(jobs: list) -> None:
    """Training and LLM jobs own their GPUs (their compute is not shared): refuse another job
    on any of their ranks. Collective loops may share ranks with each other (a benchmark beside
    another loop)."""
    for i, job in enumerate(jobs):
        if job.kind == "collective":
            continue
        mine = set(job.ranks)
        for j, other in enumerate(jobs):
            common = sorted(mine & set(other.ranks)) if j != i else []
            if common:
                raise ConfigError(f"jobs.{other.name}.ranks: endpoint {common[0]} belongs to "
                                  f"{job.kind} job {job.name!r}, which computes on its GPUs "
                                  f"alone; give the jobs disjoint ranks")


def run_jobs(graph, jobs: list) -> JobsResult:
    """Each job alone, then all together on one engine; see the module notes."""
    if not jobs:
        raise ConfigError("jobs: at least one job")
    names = [j.name for j in jobs]
    if len(set(names)) != len(names):
        raise ConfigError(f"jobs: two jobs are called "
                          f"{sorted(n for n in names if names.count(n) > 1)[0]!r}")
    for job in jobs:
        if job.iterations < 1:
            raise ConfigError(f"jobs.{job.name}.iterations must be >= 1, got {job.iterations}")
    _check_owned_gpus(jobs)
    prepared = [job.prepare(graph) for job in jobs]
    alone = []
    for p in prepared:
        loop = _run(Engine(graph), [p])[0]
        alone.append(loop["end"] - loop["start"])
        if p.job.kind == "llm":       # what its flows sent per step (each byte once)
            sent = sum(sum(it["flows"].bytes_by_kind.values()) for it in loop["iterations"])
            p.row["size_bytes"] = int(round(sent / p.job.iterations))
    loops = _run(Engine(graph), prepared)
    usage = [p.link_bytes(loop) for p, loop in zip(prepared, loops)]
    links = sorted({link for u in usage for link in u})
    shared = []
    for link in links:
        users = [(job.name, u[link]) for job, u in zip(jobs, usage) if link in u]
        if len(users) > 1:
            shared.append({"link": f"{link[0]}->{link[1]}", "jobs": ",".join(n for n, _ in users),
                           "bytes_by_job": ";".join(f"{n}={b:.0f}" for n, b in users),
                           "bytes": sum(b for _, b in users)})
    shared_frame = pd.DataFrame(shared, columns=list(SHARED_LINK_COLUMNS)).sort_values(
        ["bytes", "link"], ascending=[False, True], ignore_index=True)
    rows = []
    for job, p, loop, t_alone in zip(jobs, prepared, loops, alone):
        together = loop["end"] - loop["start"]
        met = sum(1 for s in shared if job.name in s["jobs"].split(","))
        rows.append({"job": job.name, "kind": job.kind, "model": "", "collective": "",
                     "algorithm": "", **p.row, "iterations": job.iterations,
                     "ranks": len(job.ranks), "first_rank": job.ranks[0], "alone_s": t_alone,
                     "together_s": together,
                     "slowdown": together / t_alone if t_alone > 0 else 1.0,
                     "shared_links": met, "topology": graph.graph.get("name", "")})
    return JobsResult(pd.DataFrame(rows, columns=list(JOB_COLUMNS)), shared_frame, usage)
