"""Calls run in parallel: in this process, local worker processes or Dask, with a progress bar.

:func:`run_calls` is what scenario sweeps (:mod:`simulator.sweep`) and the layout search
(:mod:`simulator.workload.llm.search`) hand their independent simulations to. It knows nothing
of scenarios, so any layer may use it without importing the scenario machinery.
"""

from __future__ import annotations

import os
import sys
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

from .errors import ConfigError

__all__ = ["run_calls", "progress_bar"]


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


def progress_bar(total: int, initial: int, enabled: bool, name: str):
    """A tqdm bar on stderr counting points, or one that shows nothing."""
    if not enabled:
        return _NoBar()
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, desc=name, unit="point", file=sys.stderr,
                dynamic_ncols=True, smoothing=0.1)
