"""Chrome trace of a simulation: every transfer, every piece of compute, every link's load.

The output is a Trace Event Format JSON object (the format of ``chrome://tracing``, which
Perfetto's UI at https://ui.perfetto.dev also opens)::

    {"traceEvents": [...], "displayTimeUnit": "ns", "otherData": {...}}

Layout
------
* One *process* (``pid`` 1, 2, ...) per device that sends, receives or computes: a GPU, a host,
  a parameter-server host. Devices are numbered in natural name order (``host2`` before
  ``host10``); the process name says the device's topology kind, and ``PS server`` where it
  serves a parameter-server rank.
* *Threads* (``tid``) are tracks inside a device, in three kinds: ``send``, ``recv`` and
  ``compute``. One complete event (``ph: "X"``) per transfer on the sender's send track and one
  on the receiver's recv track, both spanning ``[t_start, t_delivered]`` (on the wire, then the
  path latency); one per compute record (reductions, PS aggregation).
* Tracks nest properly: events on one track never partially overlap. A device that has several
  transfers in flight at once (a tree parent feeding two children, a PS server receiving from
  every worker, pipelined slices whose latency overlaps the next slice) gets several tracks of
  that kind, ``send 1``, ``send 2``, ...: events are sorted by (start, end, run, transfer) and
  each goes on the first track whose last event has ended (greedy interval colouring, which
  uses as few tracks as the maximum number of overlapping events). Track ``tid`` values are
  unique across the whole trace (``pid x stride + k``), since some viewers key threads by tid.
* One extra process, ``links``, holds a counter track (``ph: "C"``) per link that carried
  traffic: its utilisation in percent, stepping at every rate change (needs an engine built with
  ``record_rates=True``; without it the process is left out).

Timestamps ``ts`` and durations ``dur`` are microseconds (floats) of simulated time, as the
format requires; ``displayTimeUnit`` only sets how the viewer prints them. The output depends
only on the engine's records: events are sorted, never emitted in dict or set order.
"""

from __future__ import annotations

import heapq
import json
import math
from pathlib import Path

from .. import __version__
from ..records import link_timeline, natural_key
from .output import write_text

US_PER_S = 1e6
TRACK_KINDS = ("send", "recv", "compute")


def _colour(events: list[tuple]) -> list[int]:
    """Track index of each ``(start, end, key)`` interval: first track whose last event ended.

    Intervals are visited sorted by (start, end, key); free tracks are kept in a heap so the
    lowest-numbered free one is taken. An interval may start exactly when another ends.
    """
    order = sorted(range(len(events)), key=lambda i: events[i])
    track = [0] * len(events)
    busy: list[tuple[float, int]] = []   # (end, track) of the last event on each busy track
    free: list[int] = []
    n_tracks = 0
    for i in order:
        start, end, _key = events[i]
        while busy and busy[0][0] <= start:
            heapq.heappush(free, heapq.heappop(busy)[1])
        if free:
            k = heapq.heappop(free)
        else:
            k = n_tracks
            n_tracks += 1
        track[i] = k
        heapq.heappush(busy, (end, k))
    return track


def _span_us(start_s: float, end_s: float) -> tuple[float, float, float]:
    """``(ts, dur, end)`` in microseconds, with ``end`` exactly ``ts + dur`` as a viewer adds."""
    ts = float(start_s) * US_PER_S
    dur = max(0.0, float(end_s) * US_PER_S - ts)
    return ts, dur, ts + dur


def _meta(name: str, pid: int, args: dict, tid: int | None = None) -> dict:
    """A metadata event; ``ts`` 0 is not required by the format but some importers expect it."""
    event = {"name": name, "ph": "M", "ts": 0, "pid": pid}
    if tid is not None:
        event["tid"] = tid
    event["args"] = args
    return event


def _device_roles(engine) -> dict[str, str]:
    """Device -> role label: ``PS server`` for nodes hosting a helper (server) rank."""
    roles: dict[str, str] = {}
    for run in engine.runs:
        s = run.schedule
        for rank in range(s.ranks, s.total_ranks):
            roles[run.placement[rank]] = "PS server"
    return roles


def _transfer_events(engine) -> list[dict]:
    """Raw send/recv items: device, kind, (ts, dur, end), sort key, name, args."""
    items = []
    for k, run in enumerate(engine.runs):
        s = run.schedule
        n = len(s)
        if not n:
            continue
        names = s.phase_names or ("",)
        nbytes = s.transfer_bytes.tolist()
        src, dst = s.src.tolist(), s.dst.tolist()
        step, phase, chunk = s.step.tolist(), s.phase.tolist(), s.src_chunk.tolist()
        channel = s.channel.tolist()
        t0, t1 = run.t_start.tolist(), run.t_delivered.tolist()
        drained = run.t_drained.tolist()
        paths = ["->".join(p.nodes) for p in run.path_of]
        conn = run.conn_of.tolist()
        label = run.label or str(k)
        for i in range(n):
            if math.isnan(t0[i]) or math.isnan(t1[i]):
                continue  # never ran (a stuck schedule): nothing to draw
            a, b = run.placement[src[i]], run.placement[dst[i]]
            span = _span_us(t0[i], t1[i])
            args = {"run": label, "algorithm": s.algorithm, "collective": s.collective,
                    "transfer": i, "step": step[i], "phase": names[phase[i]],
                    "chunk": chunk[i], "bytes": nbytes[i], "channel": channel[i],
                    "src_rank": src[i], "dst_rank": dst[i], "path": paths[conn[i]],
                    "drained_us": drained[i] * US_PER_S}
            key = (k, i)
            items.append((a, "send", span, key, f"send c{chunk[i]} -> {b}", args))
            items.append((b, "recv", span, key, f"recv c{chunk[i]} <- {a}", args))
    return items


def _compute_events(engine) -> list[tuple]:
    items = []
    for j, (device, label, start, end) in enumerate(engine.compute_log):
        span = _span_us(start, end)
        items.append((str(device), "compute", span, (j,), str(label),
                      {"device": str(device), "label": str(label)}))
    return items


def _counter_events(engine, pid: int) -> tuple[list[dict], list[str]]:
    """Utilisation counters (percent) of every link that carried traffic."""
    timeline = link_timeline(engine)
    events: list[dict] = []
    names = sorted(timeline["link"].unique().tolist(), key=natural_key)
    for name in names:
        rows = timeline[timeline["link"] == name].sort_values("start_s")
        starts = rows["start_s"].to_numpy()
        ends = rows["end_s"].to_numpy()
        util = rows["utilisation"].to_numpy() * 100.0
        points: list[tuple[float, float]] = []
        for a, b, u in zip(starts, ends, util):
            ts = float(a) * US_PER_S
            if points and points[-1][0] == ts:
                points[-1] = (ts, float(u))  # replaces the zero written at the previous end
            else:
                points.append((ts, float(u)))
            points.append((float(b) * US_PER_S, 0.0))  # idle after, unless the next starts here
        for ts, value in points:
            events.append({"name": name, "cat": "link", "ph": "C", "ts": ts, "pid": pid,
                           "args": {"utilisation_pct": value}})
    return events, names


def chrome_trace(engine, *, title: str = "") -> dict:
    """The trace of everything ``engine`` ran, as a Trace Event Format JSON object (a dict).

    Parameters
    ----------
    engine : simulator.engine.runner.Engine
        A finished engine. Link counters need ``record_rates=True``.
    title : str
        Stored in ``otherData`` and shown by viewers that display metadata.
    """
    items = _transfer_events(engine) + _compute_events(engine)
    roles = _device_roles(engine)
    devices = sorted({item[0] for item in items}, key=natural_key)
    pid_of = {d: p for p, d in enumerate(devices, start=1)}

    # Colour every (device, kind) group of intervals into tracks.
    groups: dict[tuple[str, str], list[int]] = {}
    for idx, item in enumerate(items):
        groups.setdefault((item[0], item[1]), []).append(idx)
    track_of = [0] * len(items)
    tracks_in: dict[tuple[str, str], int] = {}
    for group, members in groups.items():
        spans = [(items[i][2][0], items[i][2][2], items[i][3]) for i in members]
        for i, k in zip(members, _colour(spans)):
            track_of[i] = k
        tracks_in[group] = max(track_of[i] for i in members) + 1
    per_device = {d: sum(tracks_in.get((d, kind), 0) for kind in TRACK_KINDS) for d in devices}
    stride = 10 ** max(3, len(str(max(per_device.values(), default=0))))

    meta: list[dict] = []
    tid_base: dict[tuple[str, str], int] = {}
    for d in devices:
        pid = pid_of[d]
        kind = engine.graph.nodes[d].get("kind", "") if d in engine.graph else ""
        role = roles.get(d) or kind or "device"
        meta.append(_meta("process_name", pid, {"name": f"{d} ({role})"}))
        meta.append(_meta("process_sort_index", pid, {"sort_index": pid}))
        local = 0
        for track_kind in TRACK_KINDS:
            count = tracks_in.get((d, track_kind), 0)
            tid_base[(d, track_kind)] = pid * stride + local + 1
            for k in range(count):
                tid = pid * stride + local + 1
                local += 1
                meta.append(_meta("thread_name", pid, {"name": f"{track_kind} {k + 1}"}, tid))
                meta.append(_meta("thread_sort_index", pid, {"sort_index": local}, tid))

    complete: list[dict] = []
    for idx, (device, kind, (ts, dur, _end), key, name, args) in enumerate(items):
        complete.append({"name": name, "cat": kind, "ph": "X", "ts": ts, "dur": dur,
                         "pid": pid_of[device],
                         "tid": tid_base[(device, kind)] + track_of[idx], "args": args,
                         "_key": key})
    complete.sort(key=lambda e: (e["pid"], e["tid"], e["ts"], e["dur"], e["_key"]))
    for e in complete:
        del e["_key"]

    counters: list[dict] = []
    link_names: list[str] = []
    if engine.network.rate_log is not None:
        links_pid = len(devices) + 1
        counters, link_names = _counter_events(engine, links_pid)
        if counters:
            meta.append(_meta("process_name", links_pid, {"name": "links (utilisation %)"}))
            meta.append(_meta("process_sort_index", links_pid, {"sort_index": links_pid}))

    runs = [run.label or str(k) for k, run in enumerate(engine.runs)]
    other = {"title": title, "generator": f"clustersim {__version__}",
             "topology": engine.graph.graph.get("name", ""), "time_unit": "us (simulated)",
             "end_s": float(engine.env.now), "runs": len(runs),
             "algorithms": sorted({run.schedule.algorithm for run in engine.runs}),
             "devices": len(devices), "links": len(link_names),
             "transfers": int(sum(len(run.schedule) for run in engine.runs)),
             "compute_records": len(engine.compute_log)}
    return {"traceEvents": meta + complete + counters, "displayTimeUnit": "ns",
            "otherData": other}


def write_trace(engine, path, *, title: str = "") -> Path:
    """Write :func:`chrome_trace` of ``engine`` to ``path`` (atomically); return the path."""
    doc = chrome_trace(engine, title=title)
    return write_text(Path(path), json.dumps(doc, separators=(",", ":"), allow_nan=False))

