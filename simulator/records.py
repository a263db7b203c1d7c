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
"""

from __future__ import annotations

import numpy as np
import pandas as pd

TRANSFER_COLUMNS = ("run", "algorithm", "collective", "transfer", "step", "phase", "src_rank",
                    "dst_rank", "src", "dst", "size_bytes", "start_s", "drained_s",
                    "delivered_s", "done_s", "path")
LINK_COLUMNS = ("link", "src", "dst", "kind", "capacity_bytes_per_s", "bytes_carried", "busy_s",
                "utilisation")


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


def _describe_resource(graph, key):
    if isinstance(key, tuple) and len(key) == 2 and key[0] != "node":
        u, v = key
        return f"{u}->{v}", u, v, graph.edges[u, v].get("kind", "")
    node = key[1]
    return f"{node} (device)", node, node, graph.nodes[node].get("kind", "")


def links_frame(engine, span_s: float) -> pd.DataFrame:
    """Per-resource records of an engine, with average utilisation over ``span_s``."""
    rows = []
    for key, cap, carried, busy in engine.network.link_table():
        name, u, v, kind = _describe_resource(engine.graph, key)
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
