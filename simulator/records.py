"""Typed records of a run, as pandas DataFrames.

The engine keeps timestamps in numpy arrays and per-resource counters; this module turns them
into the documented tables that reports, plots and users read. Nothing is parsed back from text.

Tables
------
transfers : one row per transfer of a schedule run
    ``run, algorithm, collective, transfer, step, phase, src_rank, dst_rank, src, dst,
    size_bytes, start_s, drained_s, delivered_s, done_s, path``
links : one row per resource (directed link or throughput-capped device)
    ``link, src, dst, kind, capacity_bytes_per_s, bytes_carried, busy_s, utilisation``
    where ``utilisation`` = bytes_carried / (capacity x span of the run).
link timeline : one row per interval in which a resource carried traffic at a constant rate
    ``link, src, dst, kind, capacity_bytes_per_s, start_s, end_s, rate_bytes_per_s,
    utilisation`` where ``rate_bytes_per_s`` is the aggregate rate of all flows on the resource
    over ``[start_s, end_s)`` and ``utilisation`` = rate / capacity (a fraction, 0 to 1).
    Intervals of zero rate are left out (a resource is idle between its rows); rows are ordered
    by resource (in the engine's registration order, as in ``links``), then by time; intervals
    of one resource never overlap. Integrating ``rate_bytes_per_s x (end_s - start_s)`` over a
    resource's rows gives its ``bytes_carried``. Needs an engine built with
    ``record_rates=True``.
compute : one row per piece of device work (reductions, aggregation at a PS, ...)
    ``device, label, start_s, end_s``, in the order the work was queued. A device runs its work
    FIFO, so the rows of one device never overlap.

Names: ``link`` is ``"u->v"`` for a directed link and ``"node (device)"`` for a device that caps
the traffic through it; ``src``/``dst`` are topology node ids (both the node, for a device).
Times are simulated seconds from the engine's start; rates and capacities are bytes per second.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from .engine.network import is_private

TRANSFER_COLUMNS = ("run", "algorithm", "collective", "transfer", "step", "phase", "src_rank",
                    "dst_rank", "src", "dst", "size_bytes", "start_s", "drained_s",
                    "delivered_s", "done_s", "path")
LINK_COLUMNS = ("link", "src", "dst", "kind", "capacity_bytes_per_s", "bytes_carried", "busy_s",
                "utilisation")
TIMELINE_COLUMNS = ("link", "src", "dst", "kind", "capacity_bytes_per_s", "start_s", "end_s",
                    "rate_bytes_per_s", "utilisation")
COMPUTE_COLUMNS = ("device", "label", "start_s", "end_s")


def transfers_frame(runs) -> pd.DataFrame:
    """Per-transfer records of one or more :class:`~simulator.engine.runner.ScheduleRun`."""
    frames = []
    for k, run in enumerate(runs):
        s = run.schedule
        place = np.asarray(run.placement, dtype=object)
        path_text = np.asarray(["->".join(p.nodes) for p in run.path_of], dtype=object)
        names = np.asarray(s.phase_names or ("",), dtype=object)
        frames.append(pd.DataFrame({
            "run": run.label or k, "algorithm": s.algorithm, "collective": s.collective,
            "transfer": np.arange(len(s)), "step": s.step,
            "phase": names[s.phase] if len(s) else [],
            "src_rank": s.src, "dst_rank": s.dst, "src": place[s.src], "dst": place[s.dst],
            "size_bytes": s.transfer_bytes, "start_s": run.t_start, "drained_s": run.t_drained,
            "delivered_s": run.t_delivered, "done_s": run.t_done,
            "path": path_text[run.conn_of] if len(s) else []}))
    if not frames:
        return pd.DataFrame(columns=TRANSFER_COLUMNS)
    return pd.concat(frames, ignore_index=True)[list(TRANSFER_COLUMNS)]


def describe_resource(graph, key):
    """``(name, u, v, kind)`` of a network resource key: a link ``(u, v)``, a device
    ``("node", n)``, or a spread of parallel links ``("spread", label, links)``."""
    if isinstance(key, tuple) and key[0] == "spread":    # routing="ideal": parallel links
        u, v = key[2][0]
        return f"{key[1]} (spread over {len(key[2])})", u, v, graph.edges[u, v].get("kind", "")
    if isinstance(key, tuple) and len(key) == 2 and key[0] != "node":
        u, v = key
        return f"{u}->{v}", u, v, graph.edges[u, v].get("kind", "")
    node = key[1]
    return f"{node} (device)", node, node, graph.nodes[node].get("kind", "")


def links_frame(engine, span_s: float) -> pd.DataFrame:
    """Per-resource records of an engine, with average utilisation over ``span_s``."""
    rows = []
    for key, cap, carried, busy in engine.network.link_table():
        name, u, v, kind = describe_resource(engine.graph, key)
        util = carried / (cap * span_s) if span_s > 0 else 0.0
        rows.append((name, u, v, kind, cap, carried, busy, util))
    return pd.DataFrame(rows, columns=list(LINK_COLUMNS))


def bottleneck(links: pd.DataFrame) -> tuple[str, float]:
    """The most utilised resource and its utilisation (ties broken by name, for determinism)."""
    if links.empty:
        return "", 0.0
    ordered = links.sort_values(["utilisation", "link"], ascending=[False, True])
    top = ordered.iloc[0]
    return str(top["link"]), float(top["utilisation"])


def link_timeline(engine) -> pd.DataFrame:
    """Piecewise-constant aggregate rate of every resource over time (see the module docstring).

    Raises
    ------
    ValueError
        If the engine was built without ``record_rates=True`` (no rate history was kept).
    """
    net = engine.network
    if net.rate_log is None:
        raise ValueError("link_timeline needs the per-link rate history: build the engine with "
                         "record_rates=True (Engine(graph, record_rates=True), "
                         "run_collective(..., record_rates=True) or "
                         "simulate_training(..., record_rates=True))")
    end_of_run = float(engine.env.now)
    columns: dict[str, list] = {name: [] for name in TIMELINE_COLUMNS}
    for r, key in enumerate(net.keys):
        log = net.rate_log[r]
        if not log or is_private(key):
            continue
        arr = np.asarray(log, dtype=float)
        starts = arr[:, 0]
        ends = np.append(starts[1:], max(end_of_run, starts[-1]))
        rates = arr[:, 1]
        keep = (rates > 0) & (ends > starts)
        count = int(keep.sum())
        if not count:
            continue
        name, u, v, kind = describe_resource(engine.graph, key)
        cap = net.capacity[r]
        columns["link"] += [name] * count
        columns["src"] += [u] * count
        columns["dst"] += [v] * count
        columns["kind"] += [kind] * count
        columns["capacity_bytes_per_s"] += [cap] * count
        columns["start_s"] += starts[keep].tolist()
        columns["end_s"] += ends[keep].tolist()
        columns["rate_bytes_per_s"] += rates[keep].tolist()
        columns["utilisation"] += (rates[keep] / cap).tolist()
    frame = pd.DataFrame(columns, columns=list(TIMELINE_COLUMNS))
    for name in ("capacity_bytes_per_s", "start_s", "end_s", "rate_bytes_per_s", "utilisation"):
        frame[name] = frame[name].astype(float)
    return frame


def compute_frame(engine) -> pd.DataFrame:
    """Device work of an engine (reductions and other compute), one row per piece of work."""
    rows = [(str(d), str(label), float(a), float(b)) for d, label, a, b in engine.compute_log]
    frame = pd.DataFrame(rows, columns=list(COMPUTE_COLUMNS))
    frame["start_s"] = frame["start_s"].astype(float)
    frame["end_s"] = frame["end_s"].astype(float)
    return frame


def natural_key(text) -> tuple:
    """Sort key that orders ``host2`` before ``host10`` (digit runs compare as numbers)."""
    parts = re.split(r"(\d+)", str(text))
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in parts if p)
