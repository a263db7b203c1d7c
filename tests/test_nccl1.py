"""NCCL 1.x (simulator.library.nccl1): one ring in device order on one block per GPU, inside
one machine, as NVIDIA/nccl v1.3.4-1 runs it."""

from __future__ import annotations

import networkx as nx
import pytest

from simulator.collective import run_collective
from simulator.errors import ConfigError
from simulator.library import get_library
from simulator.library.nccl import NcclLibrary
from simulator.library.nccl1 import Nccl1Library, is_nccl1
from simulator.library.nccl_constants import PCIE_EFFICIENCY
from simulator.schedules import make_schedule
from simulator.schedules.execute import verify
from simulator.topology import load_topology

DGX1 = load_topology("dgx1-p100", {})


def test_version_one_selects_nccl1_and_two_keeps_nccl2():
    assert is_nccl1("1.3") and is_nccl1("1.3.4") and not is_nccl1("2.18") and not is_nccl1(None)
    assert isinstance(get_library("nccl", version="1.3.4"), Nccl1Library)
    assert isinstance(get_library("nccl", version="2.18"), NcclLibrary)
    assert isinstance(get_library("nccl"), NcclLibrary)


def test_dgx1_ring_in_device_order_crosses_qpi_where_neighbours_have_no_nvlink():
    """GPUs 3 -> 4 and 7 -> 0 of a DGX-1 have no NVLink and sit under different CPU sockets:
    NCCL 1 sends those hops through PCIe, the host and QPI (it never forwards over a third
    GPU), so its one ring runs at NCCL's Broadwell QPI rate, 6 GB/s (``QPI_BW``); under one
    socket it would run at NCCL's PCIe rate, 12 GB/s; NCCL 2's eight NVLink rings reach
    several times either."""
    lib = get_library("nccl", version="1.3")
    plan = lib.plan(DGX1, "allreduce", "auto", 64 << 20, 8)
    assert (plan.algorithm, plan.channels, plan.protocol) == ("ring", 1, "Simple")
    assert plan.notes["ring"].startswith("n0.gpu0 -> n0.gpu1 -> n0.gpu2 -> n0.gpu3 -> n0.gpu4")
    path = nx.shortest_path(plan.graph, "n0.gpu3", "n0.gpu4")
    assert not any(node.startswith("n0.gpu") for node in path[1:-1])
    assert "n0.bridge" in path and "n0.bridge1" in path
    assert plan.graph.has_edge("n0.gpu0", "n0.gpu1") and not plan.graph.has_edge("n0.gpu0",
                                                                                   "n0.gpu4")
    size = 256 << 20
    old = run_collective(DGX1, "allreduce", "ring", size, library=lib, launch="none")
    busbw = 2 * 7 / 8 * size / old.row["time_s"]
    assert busbw == pytest.approx(6e9, rel=0.02) and busbw <= 6e9
    one_socket = load_topology("dgx1-p100", {"sockets": 1})
    flat = run_collective(one_socket, "allreduce", "ring", size, library=lib, launch="none")
    pcie = 15.75e9 * PCIE_EFFICIENCY                # the preset's Gen3 x16 at NCCL's 12 GB/s
    assert pcie == pytest.approx(12e9, rel=1e-3)
    busbw = 2 * 7 / 8 * size / flat.row["time_s"]
    assert busbw == pytest.approx(pcie, rel=0.02) and busbw <= pcie
    new = run_collective(DGX1, "allreduce", "auto", size, library="nccl", launch="none")
    assert new.row["time_s"] < flat.row["time_s"] / 3


def test_the_plans_schedule_leaves_every_rank_with_the_sum():
    plan = get_library("nccl", version="1.3").plan(DGX1, "allreduce", "ring", 1 << 20, 8)
    schedule = make_schedule(plan.algorithm, "allreduce", 8, 1 << 20, **plan.options)
    assert verify(schedule) == []
    assert schedule.ranks == 8


@pytest.mark.parametrize("collective, algorithm, protocol, gpus, graph, words", [
    ("allreduce", "tree", None, 8, DGX1, "one ring"),
    ("allreduce", "ring", "LL", 8, DGX1, "LL and LL128 came with NCCL 2"),
    ("alltoall", "auto", None, 8, DGX1, "no alltoall"),
    ("allreduce", "ring", None, 16, load_topology("dgx1-p100", {"nodes": 2}),
     "inside one machine"),
])
def test_what_nccl1_cannot_do_says_why(collective, algorithm, protocol, gpus, graph, words):
    lib = get_library("nccl", version="1.3")
    assert words in lib.unavailable(graph, collective, algorithm, gpus, protocol=protocol)
    with pytest.raises(ConfigError, match=words):
        lib.plan(graph, collective, algorithm, 1 << 20, gpus, protocol=protocol)


def test_tensorflow_2017_replicated_vgg16_runs_slower_on_nccl1():
    """tf_cnn_benchmarks' replicated mode with NCCL on one DGX-1 (TensorFlow of May 2017,
    whose contrib NCCL ops ran NCCL 1.3): NCCL 1's single device-order ring takes longer
    than NCCL 2's NVLink rings, so the simulated 8-GPU speedup falls towards the measured one
    (7.02x; NCCL 2.30 gives 7.84x, NCCL 1.3 7.65x when this test was written)."""
    from pathlib import Path

    from simulator.comparison.training import compare_training, select
    from simulator.library import training_library
    from simulator.measure.schema import read_training

    data = Path(__file__).parent / "data" / "training" / \
        "train_tf_benchmarks_2017_ps_vs_replicated.csv"
    frame = select(read_training(data), ["hardware=DGX-1", "framework=replicated (with NCCL)",
                                         "model=VGG16"])
    frame = frame[~frame["hardware"].str.contains("same") & frame["gpus"].isin([1, 8])
                  ].reset_index(drop=True)         # the table's first setup, batch 64
    assert len(frame) == 2
    speedups = {}
    for version in ("2.30", "1.3"):
        lib = training_library(DGX1, "nccl", version=version)
        result = compare_training(frame, DGX1, library=lib)
        speedups[version] = float(result.loc[result["gpus"] == 8, "simulated_speedup"].iloc[0])
    measured = float(frame.loc[frame["gpus"] == 8, "speedup"].iloc[0])
    assert measured < speedups["1.3"] < speedups["2.30"]


@pytest.mark.parametrize("text, notes, expected", [
    ("TensorFlow (tf_cnn_benchmarks, TF hash b1e174e): replicated (with NCCL)",
     "Test date May 2017; ...", "1.3"),                  # TensorFlow's own NCCL ops of 2017
    ("TensorFlow: replicated (without NCCL), local_parameter_device=gpu", "May 2017", None),
    ("Horovod (Sept 2017, Tensor Fusion), NCCL 2 allreduce on GPU over RDMA", "", None),
    ("TensorFlow 2.4 MirroredStrategy, NCCL all-reduce", "measured in 2021", None),
    ("TensorFlow replicated with NCCL", "", None),            # no year: nothing to go on
    ("PyTorch DDP, NCCL 2.18.3", "", "2.18.3"),
    ("DeepSpeed, nccl-2.4.8", "2019", "2.4.8"),
    ("TensorFlow 1.2 with NCCL 2.0.5 (built against it)", "2017", "2.0.5"),  # stated wins
])
def test_a_training_rows_nccl_version_is_read_from_what_it_says(text, notes, expected):
    from simulator.comparison.training import stated_nccl_version

    assert stated_nccl_version(text, notes) == expected


def test_compare_runs_a_row_on_the_nccl_its_text_states_unless_one_is_forced(tmp_path):
    """The TF 2017 DGX-1 rows replicated with NCCL ran TensorFlow's bundled NCCL 1.3:
    ``compare`` simulates them with NCCL 1 by itself (the same speedup as forcing 1.3), and
    ``--nccl-version`` still decides for every row when given."""
    from pathlib import Path

    import pandas as pd

    from simulator.cli import main
    from simulator.comparison.training import compare_training, select
    from simulator.library import training_library
    from simulator.measure.schema import read_training

    data = Path(__file__).parent / "data" / "training" / \
        "train_tf_benchmarks_2017_ps_vs_replicated.csv"
    frame = select(read_training(data), ["hardware=DGX-1", "framework=replicated (with NCCL)",
                                         "model=VGG16"])
    frame = frame[~frame["hardware"].str.contains("same") & frame["gpus"].isin([1, 8])
                  ].reset_index(drop=True)
    default = training_library(DGX1, "nccl")
    by_text = compare_training(frame, DGX1, library=default, library_for=lambda v:
                               training_library(DGX1, "nccl", version=v))
    forced = compare_training(frame, DGX1, library=training_library(DGX1, "nccl",
                                                                    version="1.3"))
    newest = compare_training(frame, DGX1, library=default)
    assert list(by_text["library_version"]) == ["1.3", "1.3"]
    assert list(newest["library_version"]) == [default.version.name] * 2
    assert by_text["simulated_speedup"].tolist() == forced["simulated_speedup"].tolist()
    assert by_text["simulated_speedup"].iloc[1] < newest["simulated_speedup"].iloc[1]

    subset = tmp_path / "vgg16.csv"
    raw = pd.read_csv(data)
    keep = (raw["hardware"].str.startswith("NVIDIA DGX-1") & ~raw["hardware"].str.contains("same")
            & raw["framework"].str.contains("with NCCL") & (raw["model"] == "VGG16")
            & raw["gpus"].isin([1, 8]))
    raw[keep].to_csv(subset, index=False)
    for extra, version in (([], "1.3"), (["--nccl-version", "2.18"], "2.18")):
        out = tmp_path / f"out{version}"
        assert main(["compare", str(subset), "--topology", "dgx1-p100", "-o", str(out),
                     *extra]) == 0
        written = pd.read_csv(out / "compare.csv", dtype={"library_version": str})
        assert set(written["library_version"]) == {version}


def test_a_row_its_stated_nccl_cannot_run_is_skipped_and_said(tmp_path):
    """A 2017 TensorFlow row with NCCL on two machines (which NCCL 1 could not have run):
    the row is skipped with the reason, the others of the file are still compared."""
    from pathlib import Path

    import pandas as pd

    from simulator.comparison.training import compare_training
    from simulator.library import training_library
    from simulator.measure.schema import read_training

    data = Path(__file__).parent / "data" / "training" / \
        "train_tf_benchmarks_2017_ps_vs_replicated.csv"
    raw = pd.read_csv(data)
    rows = raw[raw["framework"].str.contains("with NCCL") & (raw["model"] == "VGG16")
               & raw["gpus"].isin([1, 8])].head(2).copy()
    rows.loc[rows.index[1], ["gpus", "nodes", "gpus_per_node"]] = [16, 2, 8]
    path = tmp_path / "two_machines.csv"
    rows.to_csv(path, index=False)
    graph = load_topology("dgx1-p100", {"nodes": 2})
    result = compare_training(read_training(path), graph,
                              library=training_library(graph, "nccl"),
                              library_for=lambda v: training_library(graph, "nccl", version=v))
    assert list(result["gpus"]) == [1]
    (why,) = result.attrs["skipped"]
    assert "two_machines.csv:3" in why and "NCCL 1.x runs inside one machine" in why
