"""Several jobs on one fabric: what each costs the others.

A cluster is rarely one job's. Two training jobs whose collectives cross the same leaf uplinks
slow each other, and by how much depends on the max-min share of every link they meet on, which
is what the flow engine computes exactly. A *job* here is a collective loop: a collective of a
size, run ``iterations`` times back to back on its own ranks (a list of topology endpoints);
that is the communication of a data-parallel job's gradient buckets, or of a benchmark running
beside production traffic.

:func:`run_jobs` simulates every job alone on the topology, then all of them together on one
:class:`~simulator.engine.runner.Engine` (all start at ``t = 0``), and reports per job its time
alone, its time together and the slowdown (together / alone), and the links two or more jobs
use, with the bytes each job put on them. Schedules come from the algorithm registry with the
``ideal`` library (bare wires), so every number is the exact max-min answer that a hand
derivation gives (``tests/test_jobs.py`` checks two).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pandas as pd

from ..engine.runner import Engine
from ..errors import ConfigError
from ..schedules import make_schedule
from ..topology import endpoints

__all__ = ["JOB_COLUMNS", "SHARED_LINK_COLUMNS", "CollectiveJob", "JobsResult", "parse_ranks",
           "run_jobs"]

JOB_COLUMNS = ("job", "collective", "algorithm", "size_bytes", "iterations", "ranks",
               "first_rank", "alone_s", "together_s", "slowdown", "shared_links", "topology")
SHARED_LINK_COLUMNS = ("link", "jobs", "bytes_by_job", "bytes")


@dataclass(frozen=True)
class CollectiveJob:
    """A collective loop on its own ranks: ``ranks`` are endpoint indices of the topology."""

    name: str
    collective: str
    algorithm: str
    size_bytes: int
    ranks: tuple[int, ...]
    iterations: int = 1


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


@dataclass
class JobsResult:
    """Per-job rows and the links the jobs meet on."""

    jobs: pd.DataFrame
    shared_links: pd.DataFrame


def _launch_loop(engine: Engine, schedule, placement, iterations: int, label: str) -> dict:
    """Launch ``schedule`` now and again each time it ends, ``iterations`` times; the dict
    gets ``start``, ``end`` and ``runs``."""
    state = {"start": engine.env.now, "end": None, "runs": []}

    def one(left: int) -> None:
        run = engine.launch(schedule, placement, label=label)
        state["runs"].append(run)

        def done(_event, left=left):
            if left > 1:
                one(left - 1)
            else:
                state["end"] = engine.env.now

        run.done_event.callbacks.append(done)

    one(iterations)
    return state


def _link_bytes(state) -> dict:
    """Bytes the job's runs put on each directed link."""
    out: dict = {}
    for run in state["runs"]:
        nbytes = run.schedule.transfer_bytes
        for i, c in enumerate(run.conn_of.tolist()):
            for link in run.path_of[c].links:
                out[link] = out.get(link, 0.0) + float(nbytes[i])
    return out


def run_jobs(graph, jobs: list[CollectiveJob]) -> JobsResult:
    """Each job alone, then all together on one engine; see the module notes."""
    if not jobs:
        raise ConfigError("jobs: at least one job")
    names = [j.name for j in jobs]
    if len(set(names)) != len(names):
        raise ConfigError(f"jobs: two jobs are called {sorted(n for n in names if names.count(n) > 1)[0]!r}")
    eps = endpoints(graph)
    placements, schedules = [], []
    for job in jobs:
        if job.iterations < 1:
            raise ConfigError(f"jobs.{job.name}.iterations must be >= 1, got {job.iterations}")
        placements.append(tuple(eps[r] for r in job.ranks))
        schedules.append(make_schedule(job.algorithm, job.collective, len(job.ranks),
                                       job.size_bytes))
    alone = []
    for job, schedule, placement in zip(jobs, schedules, placements):
        engine = Engine(graph)
        state = _launch_loop(engine, schedule, placement, job.iterations, job.name)
        engine.run()
        alone.append(state["end"] - state["start"])
    engine = Engine(graph)
    states = [_launch_loop(engine, s, p, j.iterations, j.name)
              for j, s, p in zip(jobs, schedules, placements)]
    engine.run()
    usage = [_link_bytes(state) for state in states]
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
    for job, state, t_alone, u in zip(jobs, states, alone, usage):
        together = state["end"] - state["start"]
        met = sum(1 for s in shared if job.name in s["jobs"].split(","))
        rows.append({"job": job.name, "collective": job.collective, "algorithm": job.algorithm,
                     "size_bytes": job.size_bytes, "iterations": job.iterations,
                     "ranks": len(job.ranks), "first_rank": job.ranks[0], "alone_s": t_alone,
                     "together_s": together,
                     "slowdown": together / t_alone if t_alone > 0 else 1.0,
                     "shared_links": met, "topology": graph.graph.get("name", "")})
    return JobsResult(pd.DataFrame(rows, columns=list(JOB_COLUMNS)), shared_frame)
