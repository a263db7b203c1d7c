"""The measuring harness: what an nccl-tests log states about how it ran (nThread/nGpus and
Rank lines, iters, -z, -G) becomes the launch each point is charged, and the timing loop of
nccl-tests (iters calls back to back, one synchronisation) is applied to the library's time."""

from pathlib import Path

import pytest

from simulator.comparison.collective import compare
from simulator.library.launch import (GROUP_SKEW_FRACTION, LAUNCH_COSTS, Launch,
                                      launch_from_harness, launch_from_notes, loop_time_s,
                                      parse_launch)
from simulator.measure.nccl_tests import parse_nccl_tests_log, read_nccl_tests
from simulator.measure.schema import read_measurements
from simulator.topology.presets import load_topology

LOGS = Path(__file__).parent / "data" / "nccl_logs"
MPI_HOST_US = (LAUNCH_COSTS["call_overhead_s"] + LAUNCH_COSTS["kernel_launch_s"]) * 1e6
GROUP8_HOST_US = (LAUNCH_COSTS["call_overhead_s"] + 8 * LAUNCH_COSTS["kernel_launch_s"]) * 1e6
GROUP8_SKEW_US = GROUP_SKEW_FRACTION * 7 * LAUNCH_COSTS["kernel_launch_s"] * 1e6


@pytest.mark.parametrize("name, launch, processes", [
    ("all_reduce_perf_1node_mpi.log", "mpi", "8 process(es) for 8 rank(s)"),
    ("all_reduce_perf_2node.log", "mpi", "16 process(es) for 16 rank(s)"),
    ("all_reduce_perf_old.log", "group:8", "1 process(es) for 8 rank(s)"),
    ("broadcast_perf_new.log", "group:8", "1 process(es) for 8 rank(s)"),
    ("all_gather_perf_old.log", "group:12", "1 process(es) for 12 rank(s)"),
    ("all_reduce_perf.json", "group:8", "1 process(es) for 8 rank(s)"),
])
def test_harness_lines_become_the_launch_column(name, launch, processes):
    frame = read_nccl_tests(LOGS / name)
    assert set(frame["launch"]) == {launch}
    assert processes in frame["notes"].iloc[0]
    assert f"-> launch {launch}" in frame["notes"].iloc[0]


def test_blocking_and_cuda_graph_headers(tmp_path):
    text = (LOGS / "all_reduce_perf_1node_mpi.log").read_text()
    blocking = tmp_path / "all_reduce_blocking.log"
    blocking.write_text(text.replace(
        "# Using devices", "# Blocking Enabled: wait and barrier after each inner iteration "
                           "(-m) \n# Using devices"))
    assert set(parse_nccl_tests_log(blocking)["launch"]) == {"mpi+blocking"}
    graph = tmp_path / "all_reduce_graph.log"
    graph.write_text(text.replace("graph: 0", "graph: 10"))
    assert set(parse_nccl_tests_log(graph)["launch"]) == {"none"}


def test_launch_from_harness_and_notes():
    assert launch_from_harness(1, 1) == Launch("mpi")
    assert launch_from_harness(1, 8) == Launch("group", 8)
    assert launch_from_harness(2, 4) == Launch("group", 4)       # each thread drives 4 GPUs
    assert launch_from_harness(1, 1, blocking=1) == Launch("mpi", 1, True)
    assert launch_from_harness(1, 8, cuda_graph=5) == Launch("none")
    assert parse_launch("group:8+blocking") == Launch("group", 8, True)
    assert str(Launch("group", 8, True)) == "group:8+blocking"
    # an MPI launch of one process per GPU in a file's notes
    assert launch_from_notes("mpirun -np 8 all_reduce_perf -b 8", gpus=8, nodes=1) == \
        Launch("mpi")
    assert launch_from_notes("srun --ntasks-per-node 8 ...", gpus=16, nodes=2) == Launch("mpi")
    assert launch_from_notes("iters -n 8", gpus=8, nodes=1) == Launch("group", 8)  # -n: iters


def test_the_timing_loop_by_hand():
    # 20 calls back to back, one sync: max(d, h) + min(d, h) / 20
    assert loop_time_s(10e-6, 5e-6, 20) == pytest.approx(10.25e-6)
    assert loop_time_s(2e-6, 5e-6, 20) == pytest.approx(5.1e-6)
    assert loop_time_s(2e-6, 5e-6) == pytest.approx(5e-6)                 # steady state
    assert loop_time_s(2e-6, 5e-6, 20, blocking=True) == pytest.approx(7e-6)


def test_the_launch_charged_follows_the_harness():
    """The same one-process-per-GPU log of one 8-GPU machine: charged one launch per call
    (mpi, from its Rank lines) it is far faster at small sizes than under the one-thread -g 8
    launch compare used to assume; each time is the library's device time through the loop."""
    graph = load_topology("dgx-a100")
    measured = read_nccl_tests(LOGS / "all_reduce_perf_1node_mpi.log")
    auto = compare(measured, graph)
    group = compare(measured, graph, launch="group:8")
    device = compare(measured, graph, launch="none")
    assert set(auto["launch_mode"]) == {"mpi"} and set(group["launch_mode"]) == {"group:8"}
    for a, g, d in zip(auto.itertuples(), group.itertuples(), device.itertuples()):
        dev = d.simulated_time_us          # 'none' with iters 20: d + 0/20 = d
        assert a.simulated_time_us == pytest.approx(max(dev, MPI_HOST_US)
                                                    + min(dev, MPI_HOST_US) / 20)
        skewed = dev + GROUP8_SKEW_US      # the one thread's launch offsets (launch.py)
        assert g.simulated_time_us == pytest.approx(max(skewed, GROUP8_HOST_US)
                                                    + min(skewed, GROUP8_HOST_US) / 20)
    small = auto["size_bytes"] <= 512
    assert (group["simulated_time_us"][small] > auto["simulated_time_us"][small] + 15).all()


def test_one_thread_driving_eight_gpus_is_slower_than_one_process_each():
    """The same 8 x A100 machine measured both ways (the file GROUP_SKEW_FRACTION is fitted on):
    the -g 8 rows are slower than the mpirun rows from 64 B to 512 MiB, and so is the
    simulation, by the launch offsets it charges; a -g 1 launch charges none."""
    frame = read_measurements(Path(__file__).parent / "data" / "measurements"
                              / "nccl_thanos_a100sxm80_1node.csv")
    graph = load_topology("dgx-a100", {"gpu": "a100-sxm4-80gb"})
    points = compare(frame, graph)
    g8 = points[points["launch_mode"] == "group:8"].set_index("size_bytes")
    mpi = points[points["launch_mode"] == "mpi"].set_index("size_bytes")
    mid = [s for s in g8.index if 64 <= s <= 512 << 20]
    assert (g8.loc[mid, "measured_time_us"] > mpi.loc[mid, "measured_time_us"]).all()
    assert (g8.loc[mid, "simulated_time_us"] > mpi.loc[mid, "simulated_time_us"]).all()
    assert Launch("mpi").skew_s() == 0.0 and Launch("group", 1).skew_s() == 0.0
    assert Launch("group", 8).skew_s() == pytest.approx(GROUP_SKEW_FRACTION * 7 * 3.96e-6)
