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
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path

import pandas as pd

from .config import read_text_file
from .errors import ConfigError
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


def run_calls(fn, calls, collect, *, workers: int | None = None, scheduler: str | None = None,
              skip=None, window: int | None = None) -> None:
    """Run ``fn(*call)`` for every ``call`` of the iterable ``calls``, handing each result to
    ``collect`` (in this process) as it finishes: in this process when ``workers`` is 1, in
    ``workers`` local processes (default: one per CPU), or on Dask when ``scheduler`` is given
    (``tcp://HOST:PORT``, or ``local`` for a ``LocalCluster``). ``fn`` must be picklable (a
    module-level function).

    ``calls`` is consumed lazily: at most ``window`` calls are in flight (None: all at once), and
    ``skip(call)`` (optional) is asked just before a call would be submitted, after every result
    finished so far has been collected, so a caller can drop calls that earlier results made
    useless (a branch-and-bound search)."""
    it = iter(calls)

    def take(n):
        out = []
        while n is None or len(out) < n:
            call = next(it, None)
            if call is None:
                break
            if skip is None or not skip(call):
                out.append(call)
        return out

    if scheduler:
        _calls_dask(scheduler, fn, take, collect, window)
        return
    workers = workers or os.cpu_count() or 1
    if workers <= 1:
        while True:
            batch = take(1)
            if not batch:
                return
            collect(fn(*batch[0]))
    with ProcessPoolExecutor(max_workers=workers) as pool:
        pending = {pool.submit(fn, *c) for c in take(window)}
        try:
            while pending:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    collect(future.result())
                if window is not None:
                    pending |= {pool.submit(fn, *c) for c in take(window - len(pending))}
        except BaseException:
            for future in pending:
                future.cancel()
            raise


def _calls_dask(scheduler: str, fn, take, collect, window) -> None:
    try:
        from dask.distributed import Client, LocalCluster, as_completed
    except ImportError:
        raise ConfigError("--scheduler needs Dask: pip install 'clustersim[dist]'") from None
    cluster = None
    if scheduler == "local":
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                               dashboard_address=None)
        client = Client(cluster)
    else:
        if not scheduler.startswith("tcp://"):
            raise ConfigError(f"--scheduler expects tcp://HOST:PORT or local, got {scheduler!r}")
        try:
            client = Client(scheduler, timeout=10)
        except OSError as exc:
            raise ConfigError(f"--scheduler {scheduler}: cannot connect: {exc}") from None
    try:
        first = take(window)
        futures = as_completed([client.submit(fn, *c, pure=False) for c in first])
        in_flight = len(first)
        for future in futures:
            in_flight -= 1
            collect(future.result())
            if window is not None:
                for c in take(window - in_flight):
                    futures.add(client.submit(fn, *c, pure=False))
                    in_flight += 1
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


class _NoBar:
    def update(self, _n):
        pass

    def close(self):
        pass


def _progress_bar(total: int, initial: int, enabled: bool, name: str):
    if not enabled:
        return _NoBar()
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, desc=name, unit="point", file=sys.stderr,
                dynamic_ncols=True, smoothing=0.1)
