"""A cap on each connection between machines (schedules.base.NETWORK_FLOW_CAP_NOTE): every
algorithm takes it, every engine that times it agrees with the event engine, the step methods
decline it, and a ring between two machines meets its closed form."""

import math

import numpy as np
import pytest

from simulator.collective import placement, run_collective
from simulator.engine.compiled import compiled_time
from simulator.engine.runner import simulate
from simulator.engine.tree_pipeline import numba_available, tree_pipeline_time
from simulator.errors import ConfigError
from simulator.schedules import make_schedule
from simulator.schedules.base import NETWORK_FLOW_CAP_NOTE, connection_caps
from simulator.topology import load_topology


def star(p, bandwidth="12.5GB/s"):
    return load_topology("star", {"hosts": str(p), "link_bandwidth": bandwidth,
                                  "link_latency": "1us"})


def test_caps_fall_on_connections_between_machines_only():
    sched = make_schedule("ring", "allreduce", 8, 1 << 20, channels=2,
                          network_flow_cap=(3e9, 4))
    assert sched.notes[NETWORK_FLOW_CAP_NOTE] == (3e9, 4)
    caps = connection_caps(sched.notes, [0, 3, 4, 7, 2], [1, 4, 5, 0, 2])
    assert caps.tolist() == [math.inf, 3e9, math.inf, 3e9, math.inf]
    # the local and the network cap together: each connection gets the one of its kind
    both = connection_caps({**sched.notes, "local_flow_cap": (9e9, 4)}, [0, 3], [1, 4])
    assert both.tolist() == [9e9, 3e9]


@pytest.mark.parametrize("bad", [(0, 2), (-1.0, 2), ("3GB/s", 2), (True, 2), (3e9, 0),
                                 (3e9, 1.5), 3e9, (3e9, 2, 0), (3e9, 2, 1, 1), None])
def test_bad_caps_are_one_clear_error(bad):
    if bad is None:
        assert NETWORK_FLOW_CAP_NOTE not in make_schedule(
            "ring", "allreduce", 4, 1 << 20, network_flow_cap=None).notes
        return
    with pytest.raises(ConfigError, match="network_flow_cap"):
        make_schedule("ring", "allreduce", 4, 1 << 20, network_flow_cap=bad)


@pytest.mark.parametrize("cap,rate", [(2e9, 2e9), (50e9, 12.5e9)])
def test_a_ring_between_two_machines_is_a_closed_form(cap, rate):
    """Two ranks on two machines, one channel: each of the two steps sends half the message
    over one connection, so the call takes 2 x (size / 2 / min(cap, link) + path latency)
    (the star's two links of 1 us each); the event engine and auto agree."""
    size = 8 << 20
    for engine in ("event", "auto"):
        row = run_collective(star(2), "allreduce", "ring", size, gpus=2, engine=engine,
                             network_flow_cap=(cap, 1)).row
        assert math.isclose(row["time_s"], 2 * (size / 2 / rate + 2e-6), rel_tol=1e-12)


def test_a_capped_ring_runs_on_the_event_engine_or_the_compiled_events():
    """The ring shortcut and the step methods decline a capped call; the compiled events
    time it exactly as the event engine, the private caps stay out of the link table, and the
    cap slows the call only where it binds."""
    graph = load_topology("dgx-a100", {"nodes": "2"})
    nodes = placement(graph, 16)
    free = make_schedule("ring", "allreduce", 16, 32 << 20, channels=4)
    capped = make_schedule("ring", "allreduce", 16, 32 << 20, channels=4,
                           network_flow_cap=(2e9, 8))
    run, engine = simulate(capped, graph, nodes)
    assert all(key[0] != "cap" for key, *_ in engine.network.link_table())
    free_run, _ = simulate(free, graph, nodes)
    assert run.time_s > 2 * free_run.time_s
    loose = make_schedule("ring", "allreduce", 16, 32 << 20, channels=4,
                          network_flow_cap=(1e15, 8))
    assert math.isclose(simulate(loose, graph, nodes)[0].time_s, free_run.time_s,
                        rel_tol=1e-12)
    fast = compiled_time(capped, graph, nodes)
    if fast.applicable:
        assert math.isclose(fast.time_s, run.time_s, rel_tol=1e-12)
        assert all(key[0] != "cap" for key, _cap, _b in fast.links)
    row = run_collective(graph, "allreduce", "ring", 32 << 20, gpus=16, channels=4,
                         network_flow_cap=(2e9, 8)).row
    assert row["engine"] != "ring" and math.isclose(row["time_s"], run.time_s, rel_tol=1e-9)


@pytest.mark.skipif(not numba_available(), reason="numba is not installed")
def test_the_tree_pipeline_takes_the_network_cap_as_the_event_engine_does():
    graph = load_topology("dgx-a100", {"nodes": "2"})
    opts = {"channels": 2, "local_ranks": 8, "segments": 4, "network_flow_cap": (3e9, 8)}
    sched = make_schedule("double_binary_tree", "allreduce", 16, 16 << 20, **opts)
    run, _ = simulate(sched, graph, placement(graph, 16))
    fast = tree_pipeline_time(graph, placement(graph, 16), "allreduce", "double_binary_tree",
                              16 << 20, 16, opts)
    assert fast.applicable, fast.reason
    assert math.isclose(fast.time_s, run.time_s, rel_tol=1e-9)
    free = dict(opts)
    del free["network_flow_cap"]
    assert fast.time_s > 1.5 * tree_pipeline_time(
        graph, placement(graph, 16), "allreduce", "double_binary_tree", 16 << 20, 16,
        free).time_s


def test_every_algorithm_takes_the_option():
    from simulator.schedules import ALGORITHMS

    for name, algo in sorted(ALGORITHMS.items()):
        collective = algo.collectives[0]
        extra = {"local_ranks": 2} if name == "hierarchical" else {}
        sched = make_schedule(name, collective, 4, 1 << 16, network_flow_cap=(1e9, 2), **extra)
        assert sched.notes[NETWORK_FLOW_CAP_NOTE] == (1e9, 2), name
        assert np.isfinite(connection_caps(sched.notes, sched.src, sched.dst)).any() or \
            not ((sched.src // 2) != (sched.dst // 2)).any(), name


def test_the_calls_channels_share_out_over_the_schedules_own():
    """``(cap, local_ranks, channels)``: the call's ``channels`` connections between two
    machines carry ``cap`` each; a schedule of k channels gives each of its connections
    ``cap x channels / k``, so the total does not depend on how the schedule splits it."""
    for k in (1, 2, 4):
        sched = make_schedule("ring", "allreduce", 4, 1 << 20, channels=k,
                              network_flow_cap=(1e9, 2, 8))
        assert sched.notes[NETWORK_FLOW_CAP_NOTE] == (8e9 / k, 2)
    times = {k: run_collective(star(2, "100GB/s"), "allreduce", "ring", 64 << 20, gpus=2,
                               channels=k, engine="event",
                               network_flow_cap=(1e9, 1, 4)).row["time_s"] for k in (1, 2, 4)}
    # each direction carries the whole message over 4 channels of 1 GB/s
    for t in times.values():
        assert math.isclose(t, (64 << 20) / 4e9, rel_tol=1e-3)


def test_the_cli_says_when_nccl_stages_network_bytes(capsys):
    """``clustersim collective --algorithm auto`` names the staged rate when NCCL runs without
    GPUDirect RDMA (sockets here), and nothing of it with GPUDirect; the staged call is
    slower."""
    from simulator.cli import main

    def run(*extra):
        code = main(["collective", "--topology", "l40s-pcie", "--param", "nodes=2", "--param",
                     "gpus_per_node=1", "--algorithm", "auto", "--size", "64MiB", "--gpus", "2",
                     "--format", "csv", *extra])
        out, err = capsys.readouterr()
        assert code == 0, err
        return float(out.splitlines()[1].split(",")[out.splitlines()[0].split(",").index(
            "time_s")]), err

    staged_s, err = run("--param", "transport=socket")
    assert "staged through host memory, 4.75 GB/s a channel" in err
    direct_s, err = run()
    assert "staged" not in err and staged_s > 1.5 * direct_s
