"""The command-line contract: output columns, closed-form agreement, one-line errors."""

import json
import math
import subprocess
import sys

import pytest

from simulator.cli import main


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_json_rows_match_ring_closed_form(capsys):
    code, out, _ = run_cli(capsys, "collective", "--topology", "star", "--param", "hosts=64",
                           "--param", "link_bandwidth=12.5GB/s", "--param", "link_latency=1us",
                           "--collective", "allreduce", "--algorithm", "ring", "--size",
                           "256MiB", "--size", "1KiB", "--slices", "1", "--format", "json")
    assert code == 0
    rows = json.loads(out)
    assert [r["size_bytes"] for r in rows] == [256 << 20, 1024]
    for r in rows:
        for key in ("collective", "algorithm", "gpus", "size_bytes", "time_s", "algbw_GBps",
                    "busbw_GBps", "bottleneck_link"):
            assert key in r
        c = math.ceil(r["size_bytes"] / 64)
        assert math.isclose(r["time_s"], 2 * 63 * (2e-6 + c / 12.5e9), rel_tol=1e-6)
        algbw = r["size_bytes"] / r["time_s"] / 1e9
        assert math.isclose(r["algbw_GBps"], algbw, rel_tol=1e-12)
        assert math.isclose(r["busbw_GBps"], algbw * 2 * 63 / 64, rel_tol=1e-12)


def test_without_algorithm_a_collective_runs_the_ring_or_else_the_librarys_choice(capsys):
    """--algorithm defaults to the ring; an all-to-all, which the ring does not do, takes the
    library's choice (it failed naming the ring before)."""
    base = ("collective", "--topology", "star", "--param", "hosts=8", "--param",
            "link_bandwidth=12.5GB/s", "--param", "link_latency=1us", "--size", "8MiB",
            "--format", "json")
    code, out, _ = run_cli(capsys, *base, "--collective", "allreduce")
    assert code == 0 and json.loads(out)[0]["algorithm"] == "ring"
    code, out, err = run_cli(capsys, *base, "--collective", "alltoall")
    assert code == 0, err
    (row,) = json.loads(out)
    assert row["algorithm"] == "auto:direct"
    # every host sends 7/8 of its 8 MiB over its link at once, through the switch (two links
    # of 1 us): 2 us + 7/8 x 8 MiB / 12.5 GB/s
    assert math.isclose(row["time_s"], 2e-6 + 7 / 8 * (8 << 20) / 12.5e9, rel_tol=1e-9)


def test_a_size_range_gives_one_row_per_size_in_order(capsys):
    code, out, _ = run_cli(capsys, "collective", "--topology", "star", "--param", "hosts=8",
                           "--size", "1KiB:16KiB:x4", "--size", "3MiB,1MiB", "--format", "json")
    assert code == 0
    rows = json.loads(out)
    assert [r["size_bytes"] for r in rows] == [1024, 4096, 16384, 3 << 20, 1 << 20]
    times = [r["time_s"] for r in rows]
    assert times[0] < times[1] < times[2] < times[4] < times[3]


def test_gpus_selects_first_n(capsys):
    code, out, _ = run_cli(capsys, "collective", "--topology", "star", "--param", "hosts=16",
                           "--gpus", "4", "--size", "1MiB", "--format", "csv")
    assert code == 0
    lines = out.strip().splitlines()
    assert lines[0].startswith("collective,algorithm,gpus,size_bytes")
    assert lines[1].split(",")[2] == "4"


@pytest.mark.parametrize("argv, fragment", [
    (["--size", "1XB"], "'1XB'"),
    (["--size", "1MiB", "--param", "bogus=3"], "bogus"),
    (["--size", "1MiB", "--param", "hosts"], "KEY=VALUE"),
    (["--size", "1MiB", "--param", "link_bandwidth=fast"], "link_bandwidth"),
    (["--size", "1MiB", "--algorithm", "nope"], "valid:"),
    (["--size", "1MiB", "--collective", "scan"], "valid:"),
    (["--size", "1MiB", "--gpus", "99"], "99"),
    (["--size", "1MiB", "--slices", "0"], "slices"),
    (["--size", "8GiB:8B"], "starts above its end"),
    (["--size", "8B:8GiB:x1"], "whole number >= 2"),
])
def test_user_mistakes_exit_2_with_one_line(capsys, argv, fragment):
    code, out, err = run_cli(capsys, "collective", "--topology", "star", *argv)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and fragment in err and "Traceback" not in err


def test_unknown_topology_lists_presets(capsys):
    code, _, err = run_cli(capsys, "collective", "--topology", "nope", "--size", "1MiB")
    assert code == 2 and "dgx-a100" in err and "tianhe-k80" in err


def test_argparse_errors_are_one_line_exit_2():
    proc = subprocess.run([sys.executable, "-m", "simulator", "collective", "--size", "1MiB"],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "--topology" in proc.stderr


@pytest.mark.parametrize("name", ["star", "fat_tree", "gpu_cluster", "dgx-a100", "hgx-h100",
                                  "dgx1-v100", "pcie-4x-consumer", "tianhe-k80"])
def test_topology_show(capsys, name):
    code, out, _ = run_cli(capsys, "topology", "show", name)
    assert code == 0 and "endpoints:" in out and "per direction" in out


def test_dgx_a100_ring_busbw_near_nvswitch_bandwidth(capsys):
    """8 GPUs, 1 GiB: pipelined ring busbw within 1 % of the 300 GB/s per-GPU NVSwitch rate."""
    code, out, _ = run_cli(capsys, "collective", "--topology", "dgx-a100", "--gpus", "8",
                           "--size", "1GiB", "--slices", "8", "--format", "json",
                           "--library", "ideal")
    row = json.loads(out)[0]
    assert 297 < row["busbw_GBps"] <= 300.0


def test_algorithm_all_lists_every_algorithm_and_auto_picks_the_fastest(capsys):
    code, out, err = run_cli(capsys, "collective", "--topology", "star", "--param", "hosts=8",
                             "--algorithm", "all", "--size", "4KiB", "--size", "64MiB",
                             "--format", "json")
    assert code == 0
    rows = json.loads(out)
    names = {r["algorithm"] for r in rows}
    assert {"ring", "tree", "double_binary_tree", "halving_doubling", "direct", "ps",
            "binomial_tree"} <= names and "two_tree" not in names
    assert "colocated" in err  # no free host on an 8-host star: PS rows fall back
    for size in (4096, 64 << 20):
        candidates = [r for r in rows if r["size_bytes"] == size
                      and r["algorithm"] not in ("ps", "collnet")]   # need extra hardware
        best = min(candidates, key=lambda r: r["time_s"])
        code, out, err = run_cli(capsys, "collective", "--topology", "star", "--param",
                                 "hosts=8", "--algorithm", "auto", "--size", str(size),
                                 "--format", "json")
        row = json.loads(out)[0]
        assert row["algorithm"].startswith("auto:")
        assert math.isclose(row["time_s"], best["time_s"], rel_tol=1e-12)
        assert "auto: chose" in err


def test_algorithm_all_runs_what_the_library_can_and_names_the_rest(capsys):
    """On one DGX A100 NCCL has no CollNet (no SHARP fabric) and no NVLS tree (one Ampere
    machine): "all" runs the others and says why those two were skipped."""
    code, out, err = run_cli(capsys, "collective", "--topology", "dgx-a100", "--algorithm",
                             "all", "--size", "64KiB", "--format", "json")
    assert code == 0, err
    names = {r["algorithm"] for r in json.loads(out)}
    assert {"ring", "tree", "direct", "ps"} <= names
    assert not names & {"collnet", "nvls_tree"}
    skipped = [line for line in err.splitlines() if line.startswith("all: skipped")]
    assert len(skipped) == 1 and "collnet (CollNet needs" in skipped[0]
    assert "nvls_tree (NVLS tree needs" in skipped[0]


def test_algorithm_all_with_nothing_runnable_is_one_line(capsys):
    code, out, err = run_cli(capsys, "collective", "--topology", "pcie-4x-consumer",
                             "--algorithm", "all", "--protocol", "LL128", "--size", "1MiB")
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert "--algorithm all: no algorithm can run allreduce" in err
    assert "ring, tree, double_binary_tree (LL128 is enabled on NVLink machines" in err


def test_ps_rows_name_the_server_link_as_bottleneck(capsys):
    code, out, _ = run_cli(capsys, "collective", "--topology", "star", "--param", "hosts=65",
                           "--gpus", "64", "--algorithm", "ring,ps", "--size", "256MiB")
    assert code == 0
    ps_line = [l for l in out.splitlines() if " ps " in l][0]
    assert "host64" in ps_line and "x" in ps_line.split()[-1]


def test_algorithm_options_reach_the_algorithm(capsys):
    def time_with(*opts):
        code, out, _ = run_cli(capsys, "collective", "--topology", "star", "--param", "hosts=16",
                               "--algorithm", "double_binary_tree", "--size", "64MiB",
                               "--format", "json", *opts)
        assert code == 0
        return json.loads(out)[0]["time_s"]

    assert time_with("--option", "segment_bytes=1MiB") < time_with("--option", "segments=2")
    code, _, err = run_cli(capsys, "collective", "--topology", "star", "--algorithm", "ring",
                           "--option", "segments=3", "--size", "1MiB")
    assert code == 2 and "segments" in err


def test_rate_options_take_units(capsys):
    """``--option KEY_bytes_per_s=...`` reads a bandwidth with its unit: 16 Gbps is 2 GB/s is
    2e9; a cap on every transfer inside the machine slows the call; a bad rate is one line."""
    def time_with(*opts):
        code, out, err = run_cli(capsys, "collective", "--topology", "dgx-a100", "--library",
                                 "ideal", "--algorithm", "double_binary_tree", "--size",
                                 "64MiB", "--format", "json", *opts)
        assert code == 0, err
        return json.loads(out)[0]["time_s"]

    capped = {time_with("--option", f"local_flow_cap_bytes_per_s={v}")
              for v in ("16 Gbps", "2 GB/s", "2e9")}
    assert len(capped) == 1 and capped.pop() > 1.2 * time_with()
    code, out, err = run_cli(capsys, "collective", "--topology", "star", "--algorithm",
                             "double_binary_tree", "--size", "1MiB", "--option",
                             "local_flow_cap_bytes_per_s=fast")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "--option local_flow_cap_bytes_per_s" in err and "GB/s" in err


def test_an_option_the_library_sets_is_an_error_not_dropped(capsys):
    """NCCL's plan sets a tree's segments (its chunks): a user's different value used to be
    dropped silently; it is one line naming both values. The same option with library ideal
    reaches the algorithm."""
    args = ("collective", "--topology", "dgx-a100", "--algorithm", "double_binary_tree",
            "--size", "4MiB", "--option", "segments=3")
    code, out, err = run_cli(capsys, *args)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "segments=3" in err and "nccl library" in err and "ideal" in err
    code, out, err = run_cli(capsys, *args, "--library", "ideal")
    assert code == 0, err


def test_time_budget_stops_a_long_run_with_one_line(capsys):
    code, out, err = run_cli(capsys, "--time-budget", "0", "collective", "--topology", "star",
                             "--param", "hosts=64", "--algorithm", "double_binary_tree",
                             "--size", "256MiB", "--engine", "event")
    assert code == 2 and out == ""
    assert "wall-clock budget exceeded" in err and err.count("\n") == 1


def test_engine_choices_are_the_engines_and_methods():
    from simulator.cli.args import ENGINE_CHOICES
    from simulator.collective import ENGINES
    from simulator.engine.dispatch import METHOD_NAMES

    assert ENGINE_CHOICES == ENGINES
    assert set(METHOD_NAMES) <= set(ENGINE_CHOICES)


@pytest.mark.parametrize("method, algorithm, extra, answered", [
    ("ring", "ring", [], "ring-symmetric"), ("aligned-steps", "ring", [], "aligned-steps"),
    ("compiled", "ring", ["--slices", "4"], "compiled-events"),
    ("step-sync", "halving_doubling", [], "step-synchronous"),
    ("tree-pipeline", "double_binary_tree", [], "tree-pipeline"),
    ("compiled", "double_binary_tree", [], "compiled-events"),
])
def test_engine_forces_one_method_equal_to_the_event_engine(capsys, method, algorithm, extra,
                                                           answered):
    """``--engine METHOD`` answers with that method alone, and its time is the event
    engine's."""
    base = ["collective", "--topology", "star", "--param", "hosts=8", "--size", "3MiB",
            "--algorithm", algorithm, "--format", "json", *extra]
    code, out, err = run_cli(capsys, *base, "--engine", method, "-v")
    assert code == 0, err
    forced = json.loads(out)[0]
    assert f"{answered} answered" in err, err
    code, out, _err = run_cli(capsys, *base, "--engine", "event")
    assert math.isclose(forced["time_s"], json.loads(out)[0]["time_s"], rel_tol=1e-9)


def test_forced_method_that_does_not_apply_says_why(capsys):
    code, _out, err = run_cli(capsys, "collective", "--topology", "star", "--param", "hosts=8",
                              "--size", "1MiB", "--algorithm", "ring", "--slices", "2",
                              "--engine", "aligned-steps")
    assert code == 2
    assert "method 'aligned-steps' does not apply" in err and "slices=2" in err, err
