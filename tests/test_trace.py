"""Chrome traces, link timelines and run plots: strict format checks and real invariants.

The validator below is deliberately stricter than the viewers: every event has the fields its
phase needs, times are non-negative microseconds, and the complete events of every track nest
(a track is drawn as a stack, so a partial overlap would be drawn wrongly or dropped).
"""

import json
import math
import numbers
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest

from simulator.collective import run_collective
from simulator.engine.runner import Engine
from simulator.records import (COMPUTE_COLUMNS, TIMELINE_COLUMNS, compute_frame, link_timeline,
                               links_frame, transfers_frame)
from simulator.report.plots import (RUN_PLOTS, gantt, link_heatmap, link_heatmap_data,
                                    time_vs_gpus)
from simulator.report.trace import _colour, chrome_trace, write_trace
from simulator.topology import load_topology
from simulator.workload.training import PsConfig, simulate_training

REQUIRED = {"X": ("name", "ph", "ts", "dur", "pid", "tid"),
            "C": ("name", "ph", "ts", "pid", "args"),
            "M": ("name", "ph", "pid", "args")}
METADATA = {"process_name", "process_sort_index", "thread_name", "thread_sort_index"}


def _number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def validate_trace(text: str) -> dict:
    """Check a Chrome trace JSON text strictly; return the parsed document."""
    doc = json.loads(text)
    assert isinstance(doc, dict), "a trace is a JSON object"
    assert set(doc) == {"traceEvents", "displayTimeUnit", "otherData"}
    assert doc["displayTimeUnit"] in ("ms", "ns")
    assert isinstance(doc["otherData"], dict)
    events = doc["traceEvents"]
    assert isinstance(events, list) and events
    process_names, thread_names = set(), {}
    tracks: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for e in events:
        assert isinstance(e, dict)
        ph = e.get("ph")
        assert ph in REQUIRED, f"unexpected phase {ph!r} in {e}"
        for key in REQUIRED[ph]:
            assert key in e, f"{ph} event without {key!r}: {e}"
        assert isinstance(e["name"], str) and e["name"]
        assert isinstance(e["pid"], int) and not isinstance(e["pid"], bool)
        if "tid" in e:
            assert isinstance(e["tid"], int) and not isinstance(e["tid"], bool)
        if "args" in e:
            assert isinstance(e["args"], dict)
        if ph == "M":
            assert e["name"] in METADATA, e
            if e["name"].startswith("thread_"):
                assert "tid" in e, e
            if e["name"] == "process_name":
                assert isinstance(e["args"]["name"], str)
                process_names.add(e["pid"])
            if e["name"] == "thread_name":
                assert isinstance(e["args"]["name"], str)
                assert e["tid"] not in thread_names or thread_names[e["tid"]] == e["pid"], \
                    "a tid is used by two processes"
                thread_names[e["tid"]] = e["pid"]
            continue
        assert _number(e["ts"]) and e["ts"] >= 0, e
        if ph == "X":
            assert _number(e["dur"]) and e["dur"] >= 0, e
            tracks.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["dur"]))
        else:
            assert e["args"] and all(_number(v) for v in e["args"].values()), e
            assert all(-1e-9 <= v <= 100 + 1e-6 for v in e["args"].values()), e
    for (pid, tid), spans in tracks.items():
        assert pid in process_names, f"pid {pid} has no process_name"
        assert thread_names.get(tid) == pid, f"track ({pid}, {tid}) has no thread_name"
        _check_nesting(pid, tid, spans)
    return doc


def _check_nesting(pid, tid, spans) -> None:
    """Sorted by start (longest first at equal starts), every event ends before the next
    starts or fully contains it."""
    stack: list[float] = []
    for ts, dur in sorted(spans, key=lambda s: (s[0], -s[1])):
        end = ts + dur
        while stack and stack[-1] <= ts:
            stack.pop()
        if stack:
            assert end <= stack[-1], f"partial overlap on ({pid}, {tid}) at ts={ts}"
        stack.append(end)


# --- runs --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Layer:
    name: str
    forward_s: float
    backward_s: float


@dataclass(frozen=True)
class Profile:
    layers: tuple
    optimizer_s: float


def star(hosts, **extra):
    params = {"hosts": hosts, "link_bandwidth": "10GB/s", "link_latency": "1us",
              "reduce_bandwidth": "40GB/s"}
    params.update(extra)
    return load_topology("star", params)


def _ring():
    return run_collective(star(8), "allreduce", "ring", 8 << 20, slices=4,
                          record_rates=True).engine


def _double_tree():
    return run_collective(star(8), "allreduce", "double_binary_tree", 8 << 20,
                          record_rates=True).engine


def _ps():
    return run_collective(star(17), "allreduce", "ps", 4 << 20, gpus=16,
                          record_rates=True).engine


def _training(aggregation="ps"):
    prof = Profile(tuple(Layer(f"l{i}", 0.002, 0.004) for i in range(6)), 0.0005)
    kw = {"ps": PsConfig(servers=1, iterations=3)} if aggregation == "ps" else {}
    return simulate_training(star(9), prof, gpus=8, batch_per_gpu=32, aggregation=aggregation,
                             model_name="toy", gradient_bytes=[2 << 20] * 6,
                             bucket_bytes=4 << 20, record_rates=True, **kw).engine


BUILDERS = {"ring": _ring, "double_tree": _double_tree, "ps16": _ps,
            "training_ps": _training, "training_ring": lambda: _training("ring")}


@pytest.fixture(scope="module")
def engines():
    return {name: build() for name, build in BUILDERS.items()}


def _x_events(doc, cat=None):
    return [e for e in doc["traceEvents"]
            if e["ph"] == "X" and (cat is None or e.get("cat") == cat)]


def _tracks(doc, pid, kind):
    return sorted(e["tid"] for e in doc["traceEvents"] if e["ph"] == "M"
                  and e["name"] == "thread_name" and e["pid"] == pid
                  and e["args"]["name"].startswith(kind + " "))


def _pid(doc, device):
    for e in doc["traceEvents"]:
        if e["ph"] == "M" and e["name"] == "process_name" and \
                e["args"]["name"].split(" ")[0] == device:
            return e["pid"]
    raise AssertionError(f"no process for {device}")


# --- the trace ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_trace_is_valid_and_complete(engines, name, tmp_path):
    engine = engines[name]
    path = write_trace(engine, tmp_path / f"{name}.json", title=name)
    doc = validate_trace(path.read_text(encoding="utf-8"))
    transfers = sum(len(run.schedule) for run in engine.runs)
    assert len(_x_events(doc, "send")) == transfers
    assert len(_x_events(doc, "recv")) == transfers
    assert len(_x_events(doc, "compute")) == len(engine.compute_log)
    counters = {e["name"] for e in doc["traceEvents"] if e["ph"] == "C"}
    assert counters == set(link_timeline(engine)["link"])
    assert doc["otherData"]["title"] == name


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_durations_are_microseconds_of_the_engine(engines, name):
    engine = engines[name]
    doc = chrome_trace(engine)
    run = engine.runs[-1]
    i = len(run.schedule) // 2
    expected = (run.t_delivered[i] - run.t_start[i]) * 1e6
    label = run.label
    for e in _x_events(doc, "send"):
        if e["args"]["run"] == label and e["args"]["transfer"] == i:
            assert e["dur"] == pytest.approx(expected, rel=1e-9, abs=1e-9)
            assert e["ts"] == pytest.approx(run.t_start[i] * 1e6, rel=1e-12, abs=1e-12)
            assert e["name"] == (f"send c{run.schedule.src_chunk[i]} -> "
                                 f"{run.placement[run.schedule.dst[i]]}")
            assert {"step", "phase", "chunk", "bytes", "algorithm", "run", "path"} <= set(e["args"])
            break
    else:
        raise AssertionError("transfer not found in the trace")


def test_concurrent_sends_and_receives_get_their_own_tracks(engines):
    doc = chrome_trace(engines["ps16"])
    server = _pid(doc, "host16")
    assert "PS server" in next(e["args"]["name"] for e in doc["traceEvents"]
                               if e["ph"] == "M" and e["name"] == "process_name"
                               and e["pid"] == server)
    assert len(_tracks(doc, server, "recv")) == 16  # every worker pushes at once
    assert len(_tracks(doc, server, "send")) == 16  # and pulls at once
    tree = chrome_trace(engines["double_tree"])
    assert max(len(_tracks(tree, p, "send")) for p in {e["pid"] for e in _x_events(tree)}) >= 2


def test_greedy_colouring_takes_the_first_free_track():
    spans = [(0.0, 2.0, 0), (1.0, 3.0, 1), (2.0, 4.0, 2), (2.5, 2.6, 3), (5.0, 6.0, 4)]
    assert _colour(spans) == [0, 1, 0, 2, 0]


def test_trace_is_deterministic():
    first = json.dumps(chrome_trace(_double_tree()), sort_keys=False)
    second = json.dumps(chrome_trace(_double_tree()), sort_keys=False)
    assert first == second


def test_trace_without_rates_has_no_counters():
    cr = run_collective(star(4), "allreduce", "ring", 1 << 20)
    doc = validate_trace(json.dumps(chrome_trace(cr.engine)))
    assert not [e for e in doc["traceEvents"] if e["ph"] == "C"]


# --- records -----------------------------------------------------------------------------------

def test_link_timeline_needs_recorded_rates():
    cr = run_collective(star(4), "allreduce", "ring", 1 << 20)
    with pytest.raises(ValueError, match="record_rates=True"):
        link_timeline(cr.engine)


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_timeline_integrates_to_bytes_carried(engines, name):
    engine = engines[name]
    timeline = link_timeline(engine)
    assert tuple(timeline.columns) == TIMELINE_COLUMNS
    assert (timeline["end_s"] > timeline["start_s"]).all()
    assert (timeline["utilisation"] <= 1 + 1e-9).all() and (timeline["utilisation"] > 0).all()
    carried = {}
    for link, group in timeline.groupby("link", sort=True):
        group = group.sort_values("start_s")
        assert (group["start_s"].to_numpy()[1:] >= group["end_s"].to_numpy()[:-1]).all()
        carried[link] = float((group["rate_bytes_per_s"]
                               * (group["end_s"] - group["start_s"])).sum())
    links = links_frame(engine, engine.env.now)
    links = links[links["bytes_carried"] > 0]
    expected = dict(zip(links["link"], links["bytes_carried"]))
    assert set(carried) == set(expected)
    for link, total in expected.items():
        assert carried[link] == pytest.approx(total, rel=1e-6), link


def test_compute_frame_matches_the_engine_log(engines):
    engine = engines["training_ps"]
    frame = compute_frame(engine)
    assert tuple(frame.columns) == COMPUTE_COLUMNS
    assert len(frame) == len(engine.compute_log) > 0
    assert (frame["end_s"] >= frame["start_s"]).all()
    for device, group in frame.groupby("device"):
        ends, starts = group["end_s"].to_numpy(), group["start_s"].to_numpy()
        assert (starts[1:] >= ends[:-1] - 1e-15).all(), device  # FIFO per device


def test_ps_hotspot_is_the_top_row_of_the_heatmap(engines):
    links, edges, util, mean = link_heatmap_data(link_timeline(engines["ps16"]), top=10)
    assert "host16" in links[0].split("->")
    assert mean[0] == mean.max() and mean[0] > 4 * mean[2]
    assert util.shape == (len(links), len(edges) - 1)
    assert util.max() == pytest.approx(100.0)
    # the binned data conserve the link's work
    timeline = link_timeline(engines["ps16"])
    top = timeline[timeline["link"] == links[0]]
    area = float((top["utilisation"] * (top["end_s"] - top["start_s"])).sum())
    assert float((util[0] / 100 * np.diff(edges)).sum()) == pytest.approx(area, rel=1e-9)


# --- plots -------------------------------------------------------------------------------------

def _nonempty(paths):
    assert sorted(p.suffix for p in paths) == [".png", ".svg"]
    assert all(p.stat().st_size > 1000 for p in paths)


def test_run_plots_write_png_and_svg(engines, tmp_path):
    assert set(RUN_PLOTS) == {"link_heatmap", "gantt", "time_vs_gpus"}
    for name in ("ps16", "double_tree", "training_ring"):
        engine = engines[name]
        _nonempty(link_heatmap(link_timeline(engine), tmp_path / f"{name}_heat", top=12))
        _nonempty(gantt(transfers_frame(engine.runs), compute_frame(engine),
                        tmp_path / f"{name}_gantt", max_rows=6))
    g = star(16)
    rows = [run_collective(g, "allreduce", a, 64 << 10, gpus=n).row
            for a in ("ring", "double_binary_tree") for n in (2, 4, 8, 16)]
    _nonempty(time_vs_gpus(pd.DataFrame(rows), tmp_path / "time_vs_gpus"))


def test_engine_without_runs_gives_empty_records():
    engine = Engine(star(2), record_rates=True)
    assert link_timeline(engine).empty and compute_frame(engine).empty
