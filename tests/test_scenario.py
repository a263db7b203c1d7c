"""Scenario files: strict validation with file:line messages, and runs that write outputs."""

from pathlib import Path

import pandas as pd
import pytest

from simulator.cli import main
from simulator.errors import ConfigError
from simulator.scenario import read_scenario, run_scenario

GOOD = """\
name: tiny
seed: 3
topology:
  name: star
  params: {hosts: 9, link_bandwidth: 10GB/s}
collective:
  collective: allreduce
  algorithms: [ring, ps]
  sizes: [1MiB, 8MiB]
  gpus: [4, 8]
"""


def test_good_scenario_runs_and_answers_change_with_inputs():
    scenario = read_scenario(GOOD, "tiny.yaml")
    frame = run_scenario(scenario)
    assert len(frame) == 2 * 2 * 2
    assert set(frame["algorithm"]) == {"ring", "ps"}
    faster = read_scenario(GOOD.replace("10GB/s", "20GB/s"), "tiny.yaml")
    frame2 = run_scenario(faster)
    assert (frame2["time_s"] < frame["time_s"]).all()


@pytest.mark.parametrize("mutation, fragment", [
    (("  sizes: [1MiB, 8MiB]", "  sizes: [1MiB, 8XB]"), "tiny.yaml:9: collective.sizes.1"),
    (("  gpus: [4, 8]", "  gpu: [4, 8]"), "tiny.yaml:10: collective.gpu: unknown key 'gpu'"),
    (("seed: 3", "seed: -1"), "tiny.yaml:2: seed: must be >= 0"),
    (("  algorithms: [ring, ps]", "  algorithms: [ring, bogus]"), "collective.algorithms.1"),
    (("  name: star", "  name: nowhere"), "nowhere"),
    (("collective:\n  collective: allreduce", "collective:\n  collective: scan"),
     "collective.collective: expected one of"),
    (("name: tiny", "name: tiny\nname: again"), "duplicate key 'name'"),
    (("seed: 3", "seed: [3"), "invalid YAML"),
    (("  sizes: [1MiB, 8MiB]", "  sizes: [1MiB, '8MiB:1MiB']"),
     "tiny.yaml:9: collective.sizes.1: cannot read sizes '8MiB:1MiB'"),
])
def test_bad_scenarios_name_file_line_and_key(mutation, fragment):
    text = GOOD.replace(*mutation)
    assert text != GOOD
    with pytest.raises(ConfigError) as err:
        scenario = read_scenario(text, "tiny.yaml")
        run_scenario(scenario)
    assert fragment in str(err.value)


def test_sizes_take_nccl_tests_ranges():
    ranged = read_scenario(GOOD.replace("[1MiB, 8MiB]", "['1MiB:8MiB', 64KiB]"), "tiny.yaml")
    assert ranged.collective.sizes_bytes == (2**20, 2 * 2**20, 4 * 2**20, 8 * 2**20, 64 << 10)
    frame = run_scenario(ranged)
    assert len(frame) == 5 * 2 * 2
    ring = frame[(frame["algorithm"] == "ring") & (frame["gpus"] == 8)]
    assert ring.sort_values("size_bytes")["time_s"].is_monotonic_increasing


def test_run_command_writes_outputs(tmp_path, capsys):
    path = tmp_path / "tiny.yaml"
    path.write_text(GOOD)
    out = tmp_path / "out"
    assert main(["run", str(path), "-o", str(out)]) == 0
    frame = pd.read_csv(out / "results.csv")
    assert len(frame) == 8 and (frame["seed"] == 3).all()
    assert (out / "busbw_vs_size.png").stat().st_size > 1000
    assert "clustersim_version" in (out / "scenario.resolved.yaml").read_text()
    assert "ring" in capsys.readouterr().out


def test_bad_scenario_writes_nothing(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text(GOOD.replace("8MiB", "8 parsecs"))
    out = tmp_path / "out"
    assert main(["run", str(path), "-o", str(out)]) == 2
    assert not out.exists()
    assert "bad.yaml:9" in capsys.readouterr().err


def test_packaged_scenarios_validate():
    from simulator.scenario import load_scenario

    for path in sorted(Path(__file__).parent.parent.joinpath("scenarios").glob("*.yaml")):
        load_scenario(str(path))


def test_run_with_trace_writes_valid_trace_heatmap_and_gantt(tmp_path, capsys):
    import json

    path = tmp_path / "tiny.yaml"
    path.write_text(GOOD)
    out = tmp_path / "out"
    assert main(["run", str(path), "-o", str(out), "--trace"]) == 0
    traces = sorted(out.glob("trace_*.json"))
    assert [t.name for t in traces] == ["trace_8_1048576_ps.json", "trace_8_1048576_ring.json"]
    for trace in traces:
        doc = json.loads(trace.read_text())
        assert {e["ph"] for e in doc["traceEvents"]} >= {"M", "X", "C"}
    assert len(list(out.glob("heatmap_*.png"))) == 2 and len(list(out.glob("gantt_*.png"))) == 2
    assert oct((out / "results.csv").stat().st_mode & 0o777) != "0o600"


@pytest.mark.parametrize("topology, fragment", [
    ("topology: nowhere", "s.yaml:1: topology: unknown topology"),
    ("topology: {name: star, params: {hosts: 10000000000}}",
     "s.yaml:1: topology.params.hosts: builder 'star': topology star with 10,000,000,001 nodes"),
    ("topology:\n  name: star\n  params: {hosts: 4, link_bandwidth: fast}",
     "s.yaml:3: topology.params.link_bandwidth:"),
])
def test_topology_build_errors_name_the_scenario_file_line_and_key(topology, fragment):
    from simulator.errors import ClusterSimError

    scenario = read_scenario(topology + "\ncollective: {sizes: 1MiB}\n", "s.yaml")
    with pytest.raises(ClusterSimError) as err:
        run_scenario(scenario)
    assert fragment in str(err.value)
