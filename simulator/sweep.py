"""Sweeps: every point of a scenario, in parallel, resumable, into one tidy CSV.

``clustersim sweep SCENARIO.yaml -o results.csv`` runs the scenario's cartesian product:

* locally in worker processes (default; ``--workers N``, 1 runs in-process), or on a Dask
  distributed cluster (``--scheduler tcp://HOST:PORT``, or ``--scheduler local`` to start a
  ``LocalCluster``; needs the ``[dist]`` extra);
* with a progress bar and an ETA (tqdm) on stderr;
* resumably: rows already in the output file (same scenario, same point) are kept and their
  points skipped; the file is rewritten atomically as points complete, so an interrupted sweep
  loses at most the points in flight.

Each point is simulated independently from the scenario text, so the result of a point does not
depend on where or in which order it ran: local and Dask runs give identical rows.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pandas as pd

from .config import read_text_file
from .errors import ConfigError
from .parallel import progress_bar as _progress_bar, run_calls
from .report.output import write_csv
from .scenario import (Scenario, load_scenario, point_key, read_scenario, result_columns,
                       run_point, scenario_points)

_GRAPHS: dict = {}


def _graph(scenario: Scenario):
    """The scenario's topology, built once per process (its counts checked against it)."""
    key = (scenario.topology, tuple(sorted(scenario.topology_params.items())))
    graph = _GRAPHS.get(key)
    if graph is None:
        graph = _GRAPHS[key] = scenario.graph()
    else:
        scenario.check_counts(graph)       # this scenario's counts, on the cached topology
    return graph


def _run_one(text: str, origin: str, base_dir: str, point: tuple) -> dict:
    """Worker entry: rebuild the scenario from its text (picklable), run one point."""
    scenario = read_scenario(text, origin, Path(base_dir))
    return run_point(scenario, point, _graph(scenario))


def _existing(out: Path, scenario: Scenario) -> pd.DataFrame:
    if not out.exists():
        return pd.DataFrame(columns=result_columns(scenario))
    try:
        frame = pd.read_csv(out)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{out}: cannot resume from this file: {exc}") from None
    missing = set(result_columns(scenario)) - set(frame.columns)
    if missing:
        raise ConfigError(f"{out}: not a results file of this kind of scenario (missing columns "
                          f"{', '.join(sorted(missing))}); choose another -o")
    return frame[frame["scenario"] == scenario.name]


def _ordered(rows: list[dict], scenario: Scenario, order: dict) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=result_columns(scenario))
    if frame.empty:
        return frame
    rank = [order.get(point_key(scenario, r), len(order)) for r in frame.to_dict("records")]
    return frame.assign(_order=rank).sort_values("_order", kind="stable").drop(columns="_order")


def run_sweep(path: str, out: str, *, workers: int | None = None, scheduler: str | None = None,
              progress: bool = True) -> pd.DataFrame:
    """Run the scenario at ``path`` into the CSV ``out``; return the full results table."""
    scenario = load_scenario(path)
    text = read_text_file(path)
    out_path = Path(out)
    points = scenario_points(scenario)
    order = {p: i for i, p in enumerate(points)}
    done_frame = _existing(out_path, scenario)
    rows = done_frame.to_dict("records")
    done = {point_key(scenario, r) for r in rows}
    todo = [p for p in points if p not in done]
    if todo:
        _graph(scenario)      # the topology and the counts checked here, before any worker
    args = (text, str(path), str(Path(path).parent))
    bar = _progress_bar(len(points), len(points) - len(todo), progress, scenario.name)
    last_write = time.monotonic()

    def collect(row):
        nonlocal last_write
        rows.append(row)
        bar.update(1)
        if time.monotonic() - last_write > 2.0:
            write_csv(out_path, _ordered(rows, scenario, order))
            last_write = time.monotonic()

    try:
        if scheduler:
            _run_dask(scheduler, args, todo, collect)
        elif (workers or os.cpu_count() or 1) <= 1 or len(todo) <= 1:
            for p in todo:
                collect(_run_one(*args, p))
        else:
            _run_processes(workers or os.cpu_count() or 1, args, todo, collect)
    finally:
        bar.close()
        if rows:
            write_csv(out_path, _ordered(rows, scenario, order))
    return _ordered(rows, scenario, order)


def _run_processes(workers: int, args, todo, collect) -> None:
    run_calls(_run_one, ((*args, p) for p in todo), collect, workers=workers)


def _run_dask(scheduler: str, args, todo, collect) -> None:
    run_calls(_run_one, ((*args, p) for p in todo), collect, scheduler=scheduler)
