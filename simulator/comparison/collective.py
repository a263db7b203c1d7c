"""Measured against simulated: every measured point simulated, errors per point and per band.

:func:`compare` takes collective points in the measurement schema
(:mod:`simulator.measure.schema`: from a CSV, an nccl-tests log, or made in code) and a topology,
simulates each point alone on the topology with the same collective, rank count, size and
algorithm (``auto``, the library's own choice, becomes the simulator's tuner choice,
:func:`simulator.tuner.choose_algorithm`), and returns one row per point with

``measured_time_us``, ``simulated_time_us``
    the measured out-of-place time and the simulated time;
``error_pct`` = (simulated - measured) / measured x 100, ``abs_error_pct``
    positive when the simulator is slower (pessimistic) than the machine;
``measured_busbw_GBps``, ``simulated_busbw_GBps``, ``simulated_algorithm``, ``bottleneck_link``,
``size_band``
    for plots and reading.

:func:`summarise` turns the points into mean absolute percentage error (MAPE) tables: by size
band (:data:`SIZE_BANDS`: latency-bound ``<64KiB``, mixed ``64KiB-1MiB``, bandwidth-bound
``>=1MiB``), by GPU count, by algorithm, and overall. Identical points (the same collective,
algorithm, rank count and size, e.g. repeated runs) are simulated once.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..errors import ClusterSimError, ConfigError
from ..library.nccl_env import channel_bounds, selected
from ..measure.schema import COLLECTIVE_COLUMNS, COLLECTIVE_OPTIONAL, check_frame, complete_timing

__all__ = ["POINT_COLUMNS", "SIZE_BANDS", "compare", "mape_failures", "size_band", "summarise"]

#: Size bands, (label, lower bound inclusive, upper bound exclusive) in bytes.
SIZE_BANDS = (("<64KiB", 0, 64 * 2**10), ("64KiB-1MiB", 64 * 2**10, 2**20),
              (">=1MiB", 2**20, math.inf))

_KEYS = ("source", "topology", "collective", "algorithm", "gpus", "size_bytes")
#: Columns of :func:`compare`'s result, in order (the measured file's optional columns follow).
POINT_COLUMNS = _KEYS + ("simulated_algorithm", "size_band", "measured_time_us",
                         "simulated_time_us", "error_pct", "abs_error_pct",
                         "measured_busbw_GBps", "simulated_busbw_GBps", "bottleneck_link",
                         "library", "simulated_protocol", "channels", "launch_mode",
                         "simulated_nccl")
_SUMMARY_COLUMNS = ("points", "mape_pct", "median_ape_pct", "max_ape_pct", "bias_pct")


def size_band(size_bytes: int) -> str:
    """The :data:`SIZE_BANDS` label of a message size in bytes."""
    for label, low, high in SIZE_BANDS:
        if low <= size_bytes < high:
            return label
    raise ConfigError(f"size_bytes must be >= 0, got {size_bytes}")


def _float(value) -> float:
    """A measured number as float; absent (None, NaN, "") as NaN."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return math.nan
    return float(value)


def _iterations(point, columns) -> int | None:
    """The point's timed iterations (nccl-tests ``iters``), or None (steady state)."""
    if "iterations" not in columns:
        return None
    value = getattr(point, "iterations", None)
    try:
        value = int(value)
    except (TypeError, ValueError):
        return None
    return value if value > 0 else None


def _where(measured: pd.DataFrame, i: int) -> str:
    origin = measured.attrs.get("origin", "measured points")
    lines = measured.attrs.get("lines")
    if lines is not None and len(lines) == len(measured) and lines[i] is not None:
        return f"{origin}:{lines[i]}"
    return f"{origin}, row {i + 1}"


def _layout_hint(point, graph, gpus: int) -> str:
    """When the topology has too few GPUs for a point whose file states its machines: the
    ``--param`` values that build that layout (empty otherwise)."""
    from ..topology.graph import endpoints

    nodes, per_node = (getattr(point, key, None) for key in ("nodes", "gpus_per_node"))
    try:
        nodes, per_node = int(float(nodes)), int(float(per_node))
    except (TypeError, ValueError):
        return ""
    if gpus <= len(endpoints(graph)) or nodes < 1 or per_node < 1:
        return ""
    return (f" (the file states {nodes} machine{'s' * (nodes != 1)} x {per_node} GPU"
            f"{'s' * (per_node != 1)}: --param nodes={nodes} --param gpus_per_node={per_node})")


def _stated_layout(point, gpus: int) -> tuple[int, int] | None:
    """(machines, GPUs per machine) a point states, when it gives both and they make its GPUs."""
    try:
        nodes, per = (int(float(getattr(point, key, None)))
                      for key in ("nodes", "gpus_per_node"))
    except (TypeError, ValueError):
        return None
    if nodes < 1 or per < 1 or nodes * per != gpus:
        return None
    return nodes, per


def _placed(graph, layout: tuple[int, int] | None, views: dict):
    """The topology a point runs on. A point runs on the first GPUs of ``graph``; when those
    are not laid out as the point states (four GPUs of each of two machines, one GPU on each
    of two) it runs on the first GPUs of each machine that the layout takes
    (:func:`~simulator.topology.place_ranks`: the same machines, the other GPUs idle). A
    layout ``graph`` cannot hold leaves ``graph`` as it is."""
    from ..library.machine import machine_facts
    from ..topology import place_ranks

    if layout is None:
        return graph
    machines, per = layout
    facts = machine_facts(graph, machines * per)
    if (facts.nodes, facts.ranks_per_node) == (machines, per):
        return graph
    if layout not in views:
        views[layout] = place_ranks(graph, machines, per)
    return views[layout] if views[layout] is not None else graph


def compare(measured: pd.DataFrame, graph, *, slices: int = 1,
            algorithm_override: str | None = None, options: dict | None = None,
            reduce_compute: bool = True, cache: dict | None = None, library=None,
            protocol: str | None = None, launch=None, version: str | None = None,
            engine: str = "auto", library_settings: dict | None = None,
            channels=None) -> pd.DataFrame:
    """Simulate every measured point on ``graph`` and return measured vs simulated per point.

    Parameters
    ----------
    measured : pandas.DataFrame
        Collective points with :data:`~simulator.measure.schema.COLLECTIVE_COLUMNS`.
    graph : networkx.DiGraph
        The topology to simulate on (every point runs alone, on its first ``gpus`` endpoints;
        a point whose ``nodes`` and ``gpus_per_node`` state another layout of those GPUs runs
        on the first GPUs of each machine it takes, see :func:`_placed`).
    slices : int
        Pipelining slices per transfer (1: step-synchronous, the simulator's default).
    algorithm_override : str, optional
        Simulate this algorithm (or ``auto``) for every point instead of each point's own.
    options : dict, optional
        Algorithm options by algorithm name, e.g. ``{"ring": {"channels": 8}}``; passed to the
        points that run that algorithm.
    reduce_compute : bool
        Charge reduction compute on the receiving device (default, as the CLI does).
    cache : dict, optional
        Simulations by point, shared between calls on the same graph (a fresh dict by default).
    library : str, optional
        ``ideal`` or ``nccl`` (:mod:`simulator.library`); default by topology (``nccl`` on GPU
        clusters).
    protocol, launch, version : str, optional
        Force the library's protocol, launch mode and version for every point; by default each
        point's own ``protocol``, ``launch`` and ``library_version`` columns, and the launch
        mode its ``notes`` imply (:func:`~simulator.library.launch.launch_from_notes`). An
        nccl-tests log states its harness (``nThread``/``nGpus`` and ``Rank`` lines), which the
        reader turns into the ``launch`` column. Each point is charged its harness: the
        library's device time, then the launches and the timing loop of
        :func:`~simulator.library.launch.loop_time_s` over the point's ``iterations``
        (``max(device, host)`` when the file does not say). A point whose ``notes`` state
        ``NCCL_MIN_NCHANNELS``, ``NCCL_MAX_NCHANNELS``, ``NCCL_MIN_CTAS`` or ``NCCL_MAX_CTAS``
        runs on the channels they bound (:func:`~simulator.library.nccl_env.channel_bounds`);
        ``channels`` (least, most) bounds every point's instead.
    engine : str
        Engine method (``auto``: the fast path where it applies, the same times).
    library_settings : dict, optional
        Extra settings of the library object (calibrated ``scale`` and launch ``costs``).

    Returns
    -------
    pandas.DataFrame
        :data:`POINT_COLUMNS`, then the measured file's optional columns that hold a value.

    Raises
    ------
    ConfigError
        For a point the topology cannot run (more GPUs than endpoints, an algorithm without the
        collective), naming the file and line of the point.
    """
    from ..collective import run_collective
    from ..library import default_library, get_library, graph_settings
    from ..library.launch import launch_from_notes, parse_launch
    from ..library.machine import machine_facts

    check_frame(measured, COLLECTIVE_COLUMNS)
    if slices < 1:
        raise ConfigError(f"slices must be >= 1, got {slices}")
    options = options or {}
    cache = {} if cache is None else cache
    library_name = library or default_library(graph)
    libraries: dict = {}
    rows = []
    columns = set(measured.columns)

    def cell(point, name):
        value = getattr(point, name, "") if name in columns else ""
        return "" if value is None or (isinstance(value, float) and math.isnan(value)) \
            else str(value).strip()

    views: dict = {}
    for i, point in enumerate(measured.itertuples(index=False)):
        algorithm = algorithm_override or point.algorithm
        collective, gpus, size = point.collective, int(point.gpus), int(point.size_bytes)
        try:   # a frame built in code may give one of time, algbw and busbw only
            meas_us, _algbw, meas_busbw = complete_timing(
                collective, gpus, size, *(_float(v) for v in (point.time_us, point.algbw_GBps,
                                                              point.busbw_GBps)))
        except ConfigError as exc:
            raise ConfigError(f"{_where(measured, i)}: {exc}") from None
        try:
            layout = _stated_layout(point, gpus)
            where = _placed(graph, layout, views)
            settings = {}
            proto = None
            launch_mode = ""
            mode = None
            if library_name == "nccl":
                facts = machine_facts(where, gpus)
                mode = launch or cell(point, "launch") or launch_from_notes(
                    cell(point, "notes"), gpus=gpus, nodes=facts.nodes)
                mode = parse_launch(mode, gpus_per_node=int(facts.ranks_per_node))
                launch_mode = str(mode)
                ver = version or cell(point, "library_version") or None
                proto = protocol or cell(point, "protocol") or None
                # the channel bounds the run's stated environment sets (NCCL_MIN_NCHANNELS ...)
                bounds = channels if channels is not None else channel_bounds(
                    cell(point, "notes"))
                # the library times the device alone; the harness's loop is applied below
                key = (ver, bounds)
                if key not in libraries:
                    libraries[key] = get_library("nccl", **graph_settings(graph, "nccl", {
                        **(library_settings or {}), "version": ver, "launch": "none",
                        "channels": bounds}))
                lib = libraries[key]
            else:
                lib = library_name
            run_algorithm, exclude = selected(algorithm, collective)
            key = (collective, algorithm, gpus, size, slices, reduce_compute, library_name,
                   proto, id(lib) if library_name == "nccl" else 0,
                   None if where is graph else layout)
            if key not in cache:
                opts = options.get(run_algorithm, {})
                if exclude:
                    settings["exclude"] = exclude
                cache[key] = run_collective(where, collective, run_algorithm, size, gpus=gpus,
                                            slices=slices, reduce_compute=reduce_compute,
                                            engine=engine, library=lib, protocol=proto,
                                            **settings, **opts).row
            sim = cache[key]
        except ClusterSimError as exc:
            raise type(exc)(f"{_where(measured, i)}: {collective} {algorithm} on {gpus} GPUs, "
                            f"{size} bytes: {exc}{_layout_hint(point, graph, gpus)}") from None
        sim_us = float(sim["time_us"])
        sim_busbw = float(sim["busbw_GBps"])
        if mode is not None:
            # the measurement's harness: its launches and its timing loop (iters calls back to
            # back, one synchronisation; launch.loop_time_s)
            iters = _iterations(point, columns)
            device_us = sim_us
            sim_us = mode.loop_time_s(device_us * 1e-6, lib.costs, iters) * 1e6
            sim_busbw *= device_us / sim_us
        error = (sim_us - meas_us) / meas_us * 100.0
        rows.append({
            "source": point.source, "topology": point.topology or sim["topology"],
            "collective": collective, "algorithm": point.algorithm, "gpus": gpus,
            "size_bytes": size, "simulated_algorithm": sim["algorithm"],
            "size_band": size_band(size), "measured_time_us": meas_us,
            "simulated_time_us": sim_us, "error_pct": error, "abs_error_pct": abs(error),
            "measured_busbw_GBps": meas_busbw,
            "simulated_busbw_GBps": sim_busbw,
            "bottleneck_link": sim["bottleneck_link"], "library": sim["library"],
            "simulated_protocol": sim["protocol"], "channels": sim["channels"],
            "launch_mode": launch_mode,
            "simulated_nccl": nccl_release_name(lib) if library_name == "nccl" else "",
        })
    frame = pd.DataFrame(rows, columns=list(POINT_COLUMNS))
    extra = [c for c in COLLECTIVE_OPTIONAL if c in measured.columns
             and measured[c].replace("", np.nan).notna().any()]
    for column in extra:
        frame[column] = measured[column].to_numpy()
    frame.attrs.update(origin=measured.attrs.get("origin", ""),
                       topology=graph.graph.get("name", ""))
    return frame


def release_text(lib) -> str:
    """The NCCL release a library object simulates (``"2.30"``, ``"1.3"``), "" for none."""
    release = getattr(lib, "release", None)
    if isinstance(release, tuple):
        return ".".join(str(part) for part in release)
    return str(release or "")


def nccl_release_name(lib) -> str:
    """The NCCL a library object simulates: its release, and the table of constants it runs
    where that is an older release's (``"NCCL 2.26 (constants of 2.25)"``, ``"NCCL 2.30"``;
    words, so that a spreadsheet does not read 2.30 as the number 2.3)."""
    release = release_text(lib)
    table = getattr(getattr(lib, "version", None), "name", None)
    name = f"NCCL {release}"
    return name if table in (None, release) else f"{name} (constants of {table})"


def _table(points: pd.DataFrame, by: str | None) -> pd.DataFrame:
    def stats(group: pd.DataFrame) -> dict:
        ape = group["abs_error_pct"]
        return {"points": len(group), "mape_pct": ape.mean(), "median_ape_pct": ape.median(),
                "max_ape_pct": ape.max(), "bias_pct": group["error_pct"].mean()}

    if by is None:
        return pd.DataFrame([{"group": "all", **stats(points)}],
                            columns=["group", *_SUMMARY_COLUMNS])
    keys = list(dict.fromkeys(points[by]))
    if by == "size_band":
        order = [label for label, _, _ in SIZE_BANDS]
        keys = [k for k in order if k in keys]
    else:
        keys = sorted(keys)
    rows = [{by: key, **stats(points[points[by] == key])} for key in keys]
    return pd.DataFrame(rows, columns=[by, *_SUMMARY_COLUMNS])


def summarise(points: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """MAPE tables of :func:`compare`'s points.

    Returns
    -------
    dict of str to pandas.DataFrame
        ``"size_band"``, ``"gpus"``, ``"algorithm"`` (by ``simulated_algorithm``) and
        ``"overall"``; each row has ``points``, ``mape_pct`` (mean of abs_error_pct),
        ``median_ape_pct``, ``max_ape_pct`` and ``bias_pct`` (mean signed error: > 0 means the
        simulator is slower than the machine).
    """
    check_frame(points, ("size_band", "gpus", "simulated_algorithm", "error_pct",
                         "abs_error_pct"), "compared points")
    return {"size_band": _table(points, "size_band"), "gpus": _table(points, "gpus"),
            "algorithm": _table(points, "simulated_algorithm"),
            "overall": _table(points, None)}


def mape_failures(summary: dict[str, pd.DataFrame], max_mape_pct: float,
                  by: str = "size_band", label: str = "size band",
                  metric: str = "MAPE") -> list[str]:
    """One message per group of ``summary[by]`` (and overall) whose MAPE exceeds
    ``max_mape_pct``: size bands for collective points; :mod:`simulator.comparison.training`
    passes ``by="arch"`` and ``metric="speedup MAPE"``."""
    failures = []
    for row in summary[by].itertuples(index=False):
        if row.mape_pct > max_mape_pct:
            failures.append(f"{label} {getattr(row, by)}: {metric} {row.mape_pct:.1f}% > "
                            f"{max_mape_pct:g}% ({row.points} points)")
    overall = summary["overall"]
    if len(overall) and overall.iloc[0]["mape_pct"] > max_mape_pct:
        failures.append(f"overall: {metric} {overall.iloc[0]['mape_pct']:.1f}% > "
                        f"{max_mape_pct:g}% ({overall.iloc[0]['points']} points)")
    return failures
