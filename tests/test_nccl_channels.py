"""A run's channel bounds: ``NCCL_MIN_NCHANNELS`` / ``NCCL_MIN_CTAS`` and ``NCCL_MAX_NCHANNELS``
/ ``NCCL_MAX_CTAS``, read as NCCL combines them (``src/graph/connect.cc``: the search's channels
doubled, at most the least of the maxima, then copied up to the greatest of the minima), set on
the library or stated in a measured file's environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.collective import run_collective
from simulator.comparison.collective import compare
from simulator.errors import ConfigError
from simulator.library import get_library
from simulator.library.nccl_env import bounded_channels, channel_bounds
from simulator.measure.schema import read_measurements
from simulator.topology import load_topology

H100_2 = load_topology("hgx-h100", {"nodes": 2})
RING = Path(__file__).parent / "data" / "measurements" / \
    "nccl_nccltests309_gjaion_h100_2node_ib_ring.csv"


@pytest.mark.parametrize("text, bounds", [
    ("NCCL_ALGO=Ring NCCL_MIN_CTAS=24 NCCL_IB_QPS_PER_CONNECTION=2", (24, None)),
    ("NCCL_MIN_NCHANNELS=8 NCCL_MAX_NCHANNELS=8", (8, 8)),
    ("NCCL_MIN_NCHANNELS=12 NCCL_MIN_CTAS=16", (16, None)),       # the greater minimum
    ("NCCL_MAX_CTAS=4 NCCL_MAX_NCHANNELS=16", (0, 4)),             # the lesser maximum
    ("NCCL_MIN_NRINGS=4 NCCL_MIN_NCHANNELS=2", (2, None)),         # NCHANNELS over NRINGS
    ("NCCL_MAX_NCHANNELS=0", (0, 1)),                              # NCCL: at least one
    ("NCCL_BUFFSIZE=8388608 NCCL_PROTO=Simple", None),
    ("", None),
])
def test_bounds_as_nccl_combines_them(text, bounds):
    assert channel_bounds(text) == bounds


@pytest.mark.parametrize("channels, bounds, expected", [
    (16, None, 16), (16, (24, None), 24), (16, (0, 8), 8), (16, (8, 8), 8),
    (16, (40, None), 32),                   # never above MAXCHANNELS
    (16, (24, 8), 24),                      # the minimum is applied last, as copyChannels
])
def test_the_communicators_channels_within_bounds(channels, bounds, expected):
    assert bounded_channels(channels, bounds, 32) == expected


def _ring(bounds, size=1 << 20):
    lib = get_library("nccl", channels=bounds, launch="none")
    return run_collective(H100_2, "allreduce", "ring", size, gpus=16, library=lib,
                          protocol="LL128", engine="event")


def test_a_ring_runs_the_channels_its_bounds_allow():
    """Two HGX H100: NCCL's 16 ring channels; NCCL_MIN_CTAS=24 copies them up to 24 (three
    sends a round for each proxy: 3 us on Intel hosts), NCCL_MAX_NCHANNELS=8 keeps 8 (one)."""
    free, more, fewer = _ring(None), _ring((24, None)), _ring((0, 8))
    assert [r.plan.notes["dp_channels"] for r in (free, more, fewer)] == [16, 24, 8]
    assert [r.plan.notes["proxy_floor_us"] for r in (free, more, fewer)] == [2.0, 3.0, 1.0]
    assert more.plan.notes["channel_bounds"] == (24, None)
    # latency-bound at 1 MiB: the third send a round costs each of the 30 steps 1 us more
    assert more.row["time_s"] - free.row["time_s"] > 30 * 0.5e-6
    # bandwidth-bound at 1 GiB: fewer channels, a lower cap on every GPU's links
    assert _ring((0, 2), 1 << 30).row["time_s"] > _ring(None, 1 << 30).row["time_s"]


def test_compare_runs_the_channels_a_file_states():
    """The IB cluster's forced ring ran NCCL_MIN_CTAS=24 (its notes say so): compare runs 24
    channels there, 16 without the notes."""
    points = read_measurements(RING)
    stated = compare(points, H100_2)
    assert set(stated["channels"]) == {24}
    unstated = compare(points.assign(notes=""), H100_2)
    assert set(unstated["channels"]) == {16}
    small = stated["size_bytes"] == 1 << 20
    assert (stated.loc[small, "simulated_time_us"].iloc[0]
            > unstated.loc[small, "simulated_time_us"].iloc[0])


@pytest.mark.parametrize("bad", [[-1, None], [0, 0], ["8", None], [1, 2, 3], {"least": 4},
                                 True])
def test_a_bad_channels_setting_is_a_clear_error(bad):
    with pytest.raises(ConfigError, match="library setting channels"):
        get_library("nccl", channels=bad)


_SCENARIO = """
name: channels
topology: {name: hgx-h100, params: {nodes: 2}}
collective: {collective: allreduce, algorithms: [ring], sizes: [1MiB], gpus: 16}
"""


def test_a_scenarios_library_sets_the_channels():
    from simulator.scenario import read_scenario, run_point

    free = run_point(read_scenario(_SCENARIO + "library: {name: nccl, protocol: LL128}\n"),
                     (16, 1 << 20, "ring"))
    more = run_point(read_scenario(_SCENARIO + "library: {name: nccl, protocol: LL128, "
                                               "channels: {min: 24}}\n"),
                     (16, 1 << 20, "ring"))
    assert (free["channels"], more["channels"]) == (16, 24)
    assert more["time_s"] > free["time_s"]


@pytest.mark.parametrize("extra, needle", [
    ("library: {name: nccl, channels: 24}\n", "library.channels: expected a mapping"),
    ("library: {name: nccl, channels: {min: -1}}\n", "library.channels: the least channel"),
    ("library: {name: nccl, channels: {lo: 4}}\n", "unknown key"),
    ("library: {name: ideal, channels: {min: 4}}\n", "needs library name nccl"),
])
def test_a_scenarios_bad_channels_name_the_key(extra, needle):
    from simulator.scenario import read_scenario

    with pytest.raises(ConfigError, match=needle):
        read_scenario(_SCENARIO + extra, "s.yaml")


def test_cli_collective_takes_nccl_channels(capsys):
    from simulator.cli import main

    args = ["collective", "--topology", "hgx-h100", "--param", "nodes=2", "--gpus", "16",
            "--algorithm", "ring", "--protocol", "LL128", "--size", "1MiB", "--format", "csv"]
    assert main(args) == 0
    free = capsys.readouterr().out
    assert main(args + ["--nccl-channels", "24"]) == 0
    more = capsys.readouterr().out
    column = free.splitlines()[0].split(",").index("channels")
    assert free.splitlines()[1].split(",")[column] == "16"
    assert more.splitlines()[1].split(",")[column] == "24"


@pytest.mark.parametrize("extra, needle", [
    (["--nccl-channels", "8:x"], "--nccl-channels: expected LEAST, LEAST:MOST or :MOST"),
    (["--nccl-channels", ":0"], "the most channels must be >= 1"),
    (["--nccl-channels", "8", "--library", "ideal"], "needs --library nccl"),
])
def test_cli_bad_nccl_channels_are_clear_errors(extra, needle, capsys):
    from simulator.cli import main

    assert main(["collective", "--topology", "hgx-h100", "--gpus", "8", "--size", "1MiB",
                 *extra]) == 2
    assert needle in capsys.readouterr().err


def test_cli_compare_takes_nccl_channels_for_every_point(tmp_path, capsys):
    from simulator.cli import main

    out = tmp_path / "out"
    assert main(["compare", str(RING), "--topology", "hgx-h100", "--param", "nodes=2",
                 "--nccl-channels", ":8", "-o", str(out)]) == 0
    import pandas as pd

    assert set(pd.read_csv(out / "compare.csv")["channels"]) == {8}   # not the notes' 24
    training = Path(__file__).parent / "data" / "training" / \
        "train_horovod_readme_2017_ps_vs_allreduce.csv"
    assert main(["compare", str(training), "--topology", "dgx1-p100",
                 "--nccl-channels", "4"]) == 2
    assert "--nccl-channels does not apply to a training file" in capsys.readouterr().err


H100_2X4 = load_topology("hgx-h100", {"nodes": "2", "gpus_per_node": "4"})
_LOG = """\
# nccl-tests version 2.17.6 nccl-headers=21803 nccl-library=21803
# Collective test starting: all_reduce_perf
# nThread 1 nGpus 1 minBytes 65536 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
""" + "".join(f"#  Rank {r:2d} Group  0 Pid  {11111 + r:5d} on {'node-a' if r < 4 else 'node-b':>10} "
              f"device {r % 4:2d} [0000:18:00] NVIDIA H100 80GB HBM3\n" for r in range(8)) + """\
{env}#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
       65536         16384     float     sum      -1    40.10    1.63    2.86      0    40.00    1.64    2.87      0
     1048576        262144     float     sum      -1    70.00   14.98   26.21      0    70.10   14.96   26.18      0
   134217728      33554432     float     sum      -1   1500.0   89.48  156.58      0   1499.0   89.54  156.69      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 61.9
#
"""


def test_a_log_and_a_json_document_state_their_channel_bounds(tmp_path):
    """NCCL_DEBUG=INFO prints an integer parameter the environment set as "NAME set by
    environment to N." (src/misc/param.cc); the parser keeps the channel bounds in the rows'
    notes, and compare runs them: NCCL_ALGO=Ring with NCCL_MIN_NCHANNELS=24 on two machines
    of four H100 runs 24 channels at 128 MiB, 16 without the line."""
    import json

    from simulator.measure.nccl_tests import parse_nccl_tests_json, parse_nccl_tests_log

    ring = "h:1:1 [0] NCCL INFO NCCL_ALGO set by environment to Ring\n"
    channels = "h:1:1 [0] NCCL INFO NCCL_MIN_NCHANNELS set by environment to 24.\n"
    for name, env in (("bounded.log", ring + channels), ("free.log", ring)):
        (tmp_path / name).write_text(_LOG.replace("{env}", env))
    bounded = parse_nccl_tests_log(tmp_path / "bounded.log")
    free = parse_nccl_tests_log(tmp_path / "free.log")
    assert all("NCCL_MIN_NCHANNELS=24" in n for n in bounded["notes"])
    assert not any("NCCL_MIN_NCHANNELS" in n for n in free["notes"])
    large = 128 << 20
    with_bounds = compare(bounded, H100_2X4).set_index("size_bytes")
    without = compare(free, H100_2X4).set_index("size_bytes")
    assert with_bounds.loc[large, "channels"] == 24 and without.loc[large, "channels"] == 16
    doc = {"args": ["all_reduce_perf"], "env": ["NCCL_ALGO=Ring", "NCCL_MAX_NCHANNELS=4"],
           "config": {"nthreads": 1, "ngpus": 1, "iterations": 20,
                      "devices": [{"rank": r, "hostname": f"h{r // 4}"} for r in range(8)]},
           "results": [{"size": large, "count": large // 4, "type": "float", "redop": "sum",
                        "root": -1, "out_of_place": {"time": 1500.0, "alg_bw": 89.48,
                                                     "bus_bw": 156.58}}]}
    (tmp_path / "all_reduce.json").write_text(json.dumps(doc))
    frame = parse_nccl_tests_json(tmp_path / "all_reduce.json")
    assert "NCCL_MAX_NCHANNELS=4" in frame.loc[0, "notes"]
    assert compare(frame, H100_2X4).iloc[0]["channels"] == 4
