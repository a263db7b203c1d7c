"""What a run set in NCCL's own selection variables, read as NCCL reads them and honoured.

``NCCL_ALGO`` and ``NCCL_PROTO`` share one grammar in NCCL (``parseList``, NVIDIA/nccl
v2.30.7-1 ``src/graph/tuning.cc``); its comment gives three examples, checked here first. A
raw nccl-tests log states the NCCL release in its header and, under ``NCCL_DEBUG=INFO``, each
variable the run set ("NCCL_PROTO set by environment to Simple"); ``compare`` simulates what
the log says ran.
"""

from __future__ import annotations

import json

import pytest

from simulator.comparison.collective import compare
from simulator.errors import ConfigError
from simulator.library.nccl_env import allowed_algorithms, allowed_protocols, enabled, selected
from simulator.measure.nccl_tests import parse_nccl_tests_json, parse_nccl_tests_log
from simulator.topology import load_topology


@pytest.mark.parametrize("text, kind, collective, expected", [
    # "Enable ring and collnetdirect for all functions, then select tree and collnetdirect
    # for allreduce and ring for broadcast."
    ("ring,collnetdirect;allreduce:tree,collnetdirect;broadcast:ring", "NCCL_ALGO",
     "allreduce", {"tree", "collnetdirect"}),
    ("ring,collnetdirect;allreduce:tree,collnetdirect;broadcast:ring", "NCCL_ALGO",
     "broadcast", {"ring"}),
    ("ring,collnetdirect;allreduce:tree,collnetdirect;broadcast:ring", "NCCL_ALGO",
     "allgather", {"ring", "collnetdirect"}),
    # "Enable LL and Simple for all functions, but everything except LL for allreduce."
    ("LL,Simple;allreduce:^LL", "NCCL_PROTO", "allreduce", {"ll128", "simple"}),
    ("LL,Simple;allreduce:^LL", "NCCL_PROTO", "reduce_scatter", {"ll", "simple"}),
    # "Enable everything but LL128, but only LL128 for allreduce."
    ("^LL128;allreduce:LL128", "NCCL_PROTO", "allreduce", {"ll128"}),
    ("^LL128;allreduce:LL128", "NCCL_PROTO", "broadcast", {"ll", "simple"}),
    # case does not matter; all-to-all is point-to-point work, which no list covers
    ("RING,tree", "NCCL_ALGO", "allreduce", {"ring", "tree"}),
    ("Ring", "NCCL_ALGO", "alltoall", {"tree", "ring", "collnetdirect", "collnetchain",
                                       "nvls", "nvlstree", "pat"}),
])
def test_nccl_grammar_as_its_source_documents_it(text, kind, collective, expected):
    assert enabled(text, kind, collective) == expected


def test_selections_in_this_librarys_names():
    assert allowed_algorithms("^NVLS", "allreduce") == {"tree", "ring", "collnet_direct",
                                                        "nvls_tree"}
    assert allowed_algorithms("Ring,PAT", "allgather") == {"ring"}   # PAT has no model
    assert allowed_protocols("Simple", "allreduce") == {"Simple"}
    assert selected("auto[Ring,Tree]", "allreduce") == ("auto", ("nvls", "nvls_tree",
                                                                 "collnet_direct"))
    assert selected("auto[^NVLS,NVLSTree]", "allreduce") == ("auto", ("nvls", "nvls_tree"))
    assert selected("ring", "allreduce") == ("ring", ())
    with pytest.raises(ConfigError, match="only PAT, which the simulator does not model"):
        allowed_algorithms("PAT", "allgather")
    with pytest.raises(ConfigError, match="leaves allreduce no protocol"):
        allowed_protocols("^LL,LL128,Simple", "allreduce")


_LOG = """\
# nccl-tests version 2.17.6 nccl-headers=21803 nccl-library=21803
# Collective test starting: all_reduce_perf
# nThread 1 nGpus 1 minBytes 65536 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid  11111 on     node-a device  0 [0000:18:00] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid  11112 on     node-a device  1 [0000:2a:00] NVIDIA H100 80GB HBM3
#  Rank  2 Group  0 Pid  11113 on     node-a device  2 [0000:3a:00] NVIDIA H100 80GB HBM3
#  Rank  3 Group  0 Pid  11114 on     node-a device  3 [0000:5d:00] NVIDIA H100 80GB HBM3
#  Rank  4 Group  0 Pid  22221 on     node-b device  0 [0000:18:00] NVIDIA H100 80GB HBM3
#  Rank  5 Group  0 Pid  22222 on     node-b device  1 [0000:2a:00] NVIDIA H100 80GB HBM3
#  Rank  6 Group  0 Pid  22223 on     node-b device  2 [0000:3a:00] NVIDIA H100 80GB HBM3
#  Rank  7 Group  0 Pid  22224 on     node-b device  3 [0000:5d:00] NVIDIA H100 80GB HBM3
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
_ENV = ("node-a:11111:11111 [0] NCCL INFO NCCL_PROTO set by environment to Simple\n"
        "node-a:11111:11111 [0] NCCL INFO NCCL_ALGO set by environment to Ring,Tree\n")


def _log(tmp_path, env: str = "", name: str = "all_reduce.log"):
    path = tmp_path / name
    path.write_text(_LOG.replace("{env}", env))
    return parse_nccl_tests_log(path)


def _graph():
    return load_topology("hgx-h100", {"nodes": "2", "gpus_per_node": "4"})


def test_a_log_states_its_nccl_release_and_selection(tmp_path):
    frame = _log(tmp_path, _ENV)
    assert set(frame["library_version"]) == {"2.18.3"}     # nccl-library=21803
    assert set(frame["protocol"]) == {"Simple"}
    assert set(frame["algorithm"]) == {"auto[Ring,Tree]"}
    plain = _log(tmp_path)
    assert set(plain["protocol"]) == {""} and set(plain["algorithm"]) == {"auto"}
    off = _log(tmp_path, "x [0] NCCL INFO NCCL_NVLS_ENABLE set by environment to 0\n")
    assert set(off["algorithm"]) == {"auto[^NVLS,NVLSTree]"}


def test_compare_runs_what_the_log_says_ran(tmp_path):
    """With NCCL_PROTO=Simple and NCCL_ALGO=Ring,Tree the tuner picks among those only; the
    same log without the two lines lets it take LL128 at 1 MiB and NVLS tree at 128 MiB."""
    graph = _graph()
    stated = compare(_log(tmp_path, _ENV), graph).set_index("size_bytes")
    free = compare(_log(tmp_path), graph).set_index("size_bytes")
    assert set(stated["simulated_protocol"]) == {"Simple"}
    assert not any("nvls" in a for a in stated["simulated_algorithm"])
    assert free.loc[1 << 20, "simulated_protocol"] == "LL128"
    assert free.loc[128 << 20, "simulated_algorithm"] == "auto:nvls_tree"
    assert stated.loc[1 << 20, "simulated_time_us"] > free.loc[1 << 20, "simulated_time_us"]


def test_compare_uses_the_release_the_log_states(tmp_path):
    """The header's nccl-library=21803 runs NCCL 2.18's constants, as --nccl-version 2.18.3
    would; NCCL 2.30's differ at 128 MiB (NVLS tree)."""
    graph = _graph()
    measured = _log(tmp_path)
    logged = compare(measured, graph)["simulated_time_us"].tolist()
    assert logged == compare(measured, graph, version="2.18.3")["simulated_time_us"].tolist()
    newest = compare(measured, graph, version="2.30")["simulated_time_us"].tolist()
    assert logged[-1] != pytest.approx(newest[-1], rel=1e-3)


def test_a_log_with_a_selection_nccl_would_refuse_names_its_line(tmp_path):
    path = tmp_path / "all_reduce.log"
    path.write_text(_LOG.replace("{env}", "x [0] NCCL INFO NCCL_PROTO set by environment to "
                                          "Simple,LL129\n"))
    with pytest.raises(ConfigError, match=r"all_reduce.log:14: NCCL_PROTO='Simple,LL129': "
                                          r"unknown element 'll129'; NCCL accepts LL, LL128"):
        parse_nccl_tests_log(path)


def test_a_json_document_states_its_selection_in_env(tmp_path):
    doc = {"args": ["all_reduce_perf"], "nccl_version": 22703,
           "env": ["NCCL_PROTO=^LL128", "NCCL_ALGO=^NVLS"],
           "config": {"nthreads": 1, "ngpus": 1, "iterations": 20,
                      "devices": [{"rank": r, "hostname": f"h{r // 4}"} for r in range(8)]},
           "results": [{"size": 1 << 20, "count": 1 << 18, "type": "float", "redop": "sum",
                        "root": -1, "out_of_place": {"time": 70.0, "alg_bw": 14.98,
                                                     "bus_bw": 26.21}}]}
    path = tmp_path / "all_reduce.json"
    path.write_text(json.dumps(doc))
    frame = parse_nccl_tests_json(path)
    assert frame.loc[0, "protocol"] == "^LL128"
    assert frame.loc[0, "algorithm"] == "auto[^NVLS]"
    assert frame.loc[0, "library_version"] == "2.27.3"
    point = compare(frame, _graph()).iloc[0]
    assert point["simulated_protocol"] != "LL128"


def test_cli_protocol_takes_nccl_proto_lists(capsys):
    """``--protocol`` takes NCCL_PROTO's grammar: ``^LL128`` lets the tuner choose among LL
    and Simple (it takes LL128 at 1 MiB on two H100 machines when free to); a name NCCL does
    not know is one line naming the accepted ones."""
    from simulator.cli import main

    base = ["collective", "--topology", "hgx-h100", "--param", "nodes=2", "--size", "1MiB",
            "--format", "csv"]
    assert main(base) == 0
    assert ",LL128," in capsys.readouterr().out
    assert main(base + ["--protocol", "^LL128"]) == 0
    out = capsys.readouterr().out
    assert ",LL128," not in out and ",LL," in out
    assert main(base + ["--protocol", "LL,Foo"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown element 'foo'; NCCL accepts LL, LL128, Simple" in err


def test_our_csv_schema_takes_a_selection_and_refuses_a_malformed_one(tmp_path):
    """``auto[^NVLS]`` in our own schema's ``algorithm`` column: the tuner without NVLS (it
    takes NVLS for 128 MiB on one H100 machine when free to)."""
    from simulator.measure.schema import read_measurements

    header = "source,topology,collective,algorithm,gpus,size_bytes,time_us,algbw_GBps,busbw_GBps\n"
    path = tmp_path / "mine.csv"
    path.write_text(header + "me,,allreduce,auto[^NVLS],8,134217728,900,,\n"
                             "me,,allreduce,auto,8,134217728,900,,\n")
    points = compare(read_measurements(path), load_topology("hgx-h100", {}))
    assert points["simulated_algorithm"].tolist() == ["auto:ring", "auto:nvls"]
    path.write_text(header + "me,,allreduce,auto[Ring;Tree],8,1048576,100,,\n")
    with pytest.raises(ConfigError, match=r"mine.csv:2: column 'algorithm': NCCL_ALGO="
                                          r"'Ring;Tree': every entry after the first needs"):
        read_measurements(path)


def test_cli_compare_algorithm_takes_an_nccl_algo_list(tmp_path, capsys):
    """``compare --algorithm ^NVLS,NVLSTree`` runs the tuner without NVLink SHARP for every
    point of the log (it takes NVLS tree at 128 MiB when free to); a malformed list is one
    line."""
    import pandas as pd

    from simulator.cli import main

    path = tmp_path / "all_reduce.log"
    path.write_text(_LOG.replace("{env}", ""))
    args = ["compare", str(path), "--topology", "hgx-h100", "--param", "nodes=2",
            "--param", "gpus_per_node=4", "--nccl-version", "2.30"]
    assert main(args + ["-o", str(tmp_path / "free")]) == 0
    assert main(args + ["--algorithm", "^NVLS,NVLSTree", "-o", str(tmp_path / "no")]) == 0
    capsys.readouterr()
    free = pd.read_csv(tmp_path / "free" / "compare.csv")["simulated_algorithm"].tolist()
    without = pd.read_csv(tmp_path / "no" / "compare.csv")["simulated_algorithm"].tolist()
    assert free[-1] == "auto:nvls_tree" and not any("nvls" in a for a in without)
    assert main(args + ["--algorithm", "Ring;Tree"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs a function prefix" in err


def test_a_scenarios_library_protocol_takes_an_nccl_proto_list():
    """``library: {protocol: ^LL128}`` in a scenario: the tuner without LL128 (it takes LL128
    for 1 MiB on two DGX A100 when free to); an unknown element names the key."""
    from simulator.scenario import read_scenario, run_point

    text = ("name: lib\ntopology: {name: dgx-a100, params: {nodes: 2}}\n"
            "collective: {collective: allreduce, algorithms: [ring], sizes: [1MiB], gpus: 16}\n")
    free = run_point(read_scenario(text), (16, 1 << 20, "ring"))
    listed = run_point(read_scenario(text + "library: {name: nccl, protocol: '^LL128'}\n"),
                       (16, 1 << 20, "ring"))
    assert free["protocol"] == "LL128" and listed["protocol"] in ("LL", "Simple")
    with pytest.raises(ConfigError, match=r"library.*unknown element 'll256'") as info:
        read_scenario(text + "library: {name: nccl, protocol: 'Simple,LL256'}\n", "s.yaml")
    assert "s.yaml" in str(info.value)
