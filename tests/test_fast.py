"""The fast path (simulator.engine: ring, aligned, step_sync) against the event engine and the closed forms.

Parity is asserted where the fast path applies. Where no step-level shortcut can prove itself
exact (pipelined slices, steps that overlap on shared links), ``engine="auto"`` runs the
compiled event simulation (simulator.engine.compiled, with numba) and gets the event engine's
answer; without numba it runs the event engine itself.
"""

import json
import math

import numpy as np
import pytest

from simulator import theory
from simulator.cli import main
from simulator.collective import default_options, placement, run_collective
from simulator.engine.dispatch import fast_collective
from simulator.engine.aligned import aligned_time
from simulator.engine.ring import ring_time
from simulator.engine.step_sync import _epoch_dependencies, fast_time
from simulator.engine.waves import max_min_weighted
from simulator.engine.network import max_min_rates
from simulator.engine.tree_pipeline import numba_available
from simulator.errors import ConfigError, SimulationError
from simulator.schedules import make_schedule
from simulator.schedules.deps import dependencies, epochs
from simulator.topology import load_topology

BW = 12.5e9
LAT = 1e-6
SIZES = [1 << 10, 1 << 20, 256 << 20]
HAVE_NUMBA = numba_available()


def star(hosts, **extra):
    params = {"hosts": str(hosts), "link_bandwidth": "12.5GB/s", "link_latency": "1us"}
    params.update(extra)
    return load_topology("star", params)


def both(graph, algorithm, size, gpus, collective="allreduce", **opts):
    """(event row, auto row) of one collective."""
    event = run_collective(graph, collective, algorithm, size, gpus=gpus, **opts).row
    auto = run_collective(graph, collective, algorithm, size, gpus=gpus, engine="auto",
                          **opts).row
    return event, auto


def assert_parity(event, auto, must_apply=True):
    if must_apply:
        assert auto["engine"] == "fast"
    if auto["engine"] == "fast":
        assert math.isclose(auto["time_s"], event["time_s"], rel_tol=1e-6, abs_tol=1e-15)
        assert auto["bottleneck_link"] == event["bottleneck_link"]
        assert math.isclose(auto["bottleneck_utilisation"], event["bottleneck_utilisation"],
                            rel_tol=1e-6, abs_tol=1e-12)
    else:
        assert auto["time_s"] == event["time_s"]


def assert_compiled(event, graph, algorithm, size, gpus, collective="allreduce", **opts):
    """No step-level shortcut applies: auto runs the compiled event simulation (the event
    engine's answer, to floating-point identity) where numba is installed, else the engine."""
    run = run_collective(graph, collective, algorithm, size, gpus=gpus, engine="auto", **opts)
    if not HAVE_NUMBA:
        assert run.row["engine"] == "event" and run.row["time_s"] == event["time_s"]
        return
    assert run.row["engine"] == "fast" and run.fast.method == "compiled-events"
    assert math.isclose(run.row["time_s"], event["time_s"], rel_tol=1e-12)
    assert run.row["bottleneck_link"] == event["bottleneck_link"]
    assert math.isclose(run.row["bottleneck_utilisation"], event["bottleneck_utilisation"],
                        rel_tol=1e-9)


def assert_steps_decline(graph, algorithm, size, gpus, why, **opts):
    """The step-level analyses (aligned steps, then step-synchronous) cannot prove this case."""
    sched = make_schedule(algorithm, "allreduce", gpus, size, **opts)
    result = fast_time(sched, graph, placement(graph, gpus))
    assert not result.applicable and why in result.reason


# -- parity on star ---------------------------------------------------------------------------
@pytest.mark.parametrize("p", [2, 3, 5, 8, 16, 64])
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("algorithm", ["ring", "halving_doubling", "binomial_tree", "direct",
                                       "ps"])
def test_parity_on_star(algorithm, p, size):
    if algorithm == "ps":
        event, auto = both(star(p + 1), "ps", size, p)
    else:
        event, auto = both(star(p), algorithm, size, p)
    # direct with chunks of unequal size: a rank's short flows end first and its next step
    # starts while its long ones still share its links; the step analyses must decline that
    uneven_direct = algorithm == "direct" and size % p != 0 and p > 2
    if uneven_direct:
        assert_steps_decline(star(p), "direct", size, p, "overlap")
        assert_compiled(event, star(p), "direct", size, p)
    else:
        assert_parity(event, auto)


@pytest.mark.parametrize("algorithm", ["ring", "halving_doubling", "binomial_tree", "direct",
                                       "tree"])
@pytest.mark.parametrize("p", [4, 9, 16])
def test_parity_with_reduction_compute(algorithm, p):
    g = star(p, reduce_bandwidth="40GB/s")
    event, auto = both(g, algorithm, 48 << 20, p)
    assert_parity(event, auto, must_apply=algorithm != "direct" or (48 << 20) % p == 0)


@pytest.mark.parametrize("collective,algorithm", [
    ("reduce_scatter", "ring"), ("allgather", "ring"), ("reduce_scatter", "halving_doubling"),
    ("allgather", "halving_doubling"), ("reduce_scatter", "direct"), ("allgather", "direct"),
    ("broadcast", "ring"), ("reduce", "tree"), ("broadcast", "binomial_tree"),
    ("alltoall", "direct")])
def test_parity_other_collectives(collective, algorithm):
    event, auto = both(star(8, reduce_bandwidth="30GB/s"), algorithm, 8 << 20, 8, collective)
    assert_parity(event, auto)


@pytest.mark.parametrize("opts", [{"servers": 3}, {"servers": 2, "shards": [0.7, 0.3]},
                                  {"servers": 2, "phased": False},
                                  {"servers": 4, "placement": "colocated"}])
def test_parity_parameter_server_variants(opts):
    event, auto = both(star(12, reduce_bandwidth="30GB/s"), "ps", 64 << 20, 8, **opts)
    assert_parity(event, auto)


# -- parity on a non-blocking fat tree and a DGX A100 ------------------------------------------
FAT_TREE = {"hosts_per_leaf": "4", "leaves": "4", "spines": "2"}


@pytest.mark.parametrize("algorithm", ["ring", "binomial_tree", "direct", "tree"])
@pytest.mark.parametrize("size", SIZES)
def test_parity_on_fat_tree(algorithm, size):
    event, auto = both(load_topology("fat_tree", FAT_TREE), algorithm, size, 16)
    assert_parity(event, auto)


def test_parity_halving_doubling_on_fat_tree_8():
    event, auto = both(load_topology("fat_tree", FAT_TREE), "halving_doubling", 64 << 20, 8)
    assert_parity(event, auto)


def test_parity_ps_on_fat_tree():
    g = load_topology("fat_tree", dict(FAT_TREE, leaves="5"))
    event, auto = both(g, "ps", 64 << 20, 16, servers=4)
    assert_parity(event, auto)


@pytest.mark.parametrize("algorithm", ["ring", "halving_doubling", "binomial_tree", "direct",
                                       "tree"])
@pytest.mark.parametrize("size", SIZES)
def test_parity_on_dgx_a100(algorithm, size):
    event, auto = both(load_topology("dgx-a100"), algorithm, size, 8)
    assert_parity(event, auto)


def test_parity_hierarchical_on_two_dgx():
    event, auto = both(load_topology("dgx-a100", {"nodes": "2"}), "hierarchical", 64 << 20, 16)
    assert_parity(event, auto)


# -- where the step analyses decline, auto runs the compiled event simulation ---------------
@pytest.mark.parametrize("algorithm,slices", [("ring", 4), ("halving_doubling", 2),
                                              ("binomial_tree", 3)])
def test_pipelined_slices_go_to_the_compiled_event_simulation(algorithm, slices):
    event, _auto = both(star(8), algorithm, 16 << 20, 8, slices=slices)
    assert_steps_decline(star(8), algorithm, 16 << 20, 8, "FIFO connection", slices=slices)
    assert_compiled(event, star(8), algorithm, 16 << 20, 8, slices=slices)


def test_pipelined_double_binary_tree_goes_to_the_compiled_tree_path():
    """Its segments overlap across steps (no step-level shortcut); the compiled event
    simulation of simulator.engine.tree_pipeline times it, equal to the event engine."""
    pytest.importorskip("numba")
    event, auto = both(star(16), "double_binary_tree", 16 << 20, 16)
    assert auto["engine"] == "fast"
    assert math.isclose(auto["time_s"], event["time_s"], rel_tol=1e-12)
    fast = run_collective(star(16), "allreduce", "double_binary_tree", 16 << 20, engine="fast")
    assert fast.fast.method == "tree-pipeline"


def test_contended_halving_doubling_on_fat_tree_goes_to_the_compiled_event_simulation():
    """16 hosts on 4 leaves, ECMP over 2 spines: some steps put 3 flows on one uplink, those
    flows end late and the next step starts unevenly on shared links; the step analyses cannot
    prove that, the compiled event simulation times it."""
    g = load_topology("fat_tree", FAT_TREE)
    event, _auto = both(g, "halving_doubling", 64 << 20, 16)
    assert_steps_decline(g, "halving_doubling", 64 << 20, 16, "overlap")
    assert_compiled(event, g, "halving_doubling", 64 << 20, 16)


def test_contended_but_even_steps_are_exact():
    """An oversubscribed fat tree (4:1) slows every cross-leaf flow of a step alike: the steps
    stay apart and the fast path applies, exactly."""
    g = load_topology("fat_tree", {"hosts_per_leaf": "4", "leaves": "4", "spines": "1",
                                   "uplink_bandwidth": "100Gbps"})
    for algorithm in ("halving_doubling", "ring", "direct"):
        event, auto = both(g, algorithm, 64 << 20, 16)
        assert_parity(event, auto)


def test_multichannel_ring_with_reductions_declines():
    """Two channels' chunks reduce on one device per step: the queue order decides which
    channel moves on first, so the step analyses decline (the compiled event simulation times
    it); with free reductions they apply."""
    g = star(8, reduce_bandwidth="30GB/s")
    event, _auto = both(g, "ring", 8 << 20, 8, channels=2)
    assert_compiled(event, g, "ring", 8 << 20, 8, channels=2)
    event, auto = both(g, "ring", 8 << 20, 8, channels=2, reduce_compute=False)
    assert_parity(event, auto)


# -- scale and closed forms ---------------------------------------------------------------------
def test_ring_16384_equals_closed_form():
    g = star(16384)
    row = run_collective(g, "allreduce", "ring", 256 << 20, engine="fast").row
    assert row["engine"] == "fast"
    want = theory.ring_allreduce(16384, 256 << 20, 2 * LAT, 1 / BW)
    assert math.isclose(row["time_s"], want, rel_tol=1e-9)
    assert row["bottleneck_link"] == "host0->switch"


@pytest.mark.parametrize("p", [2, 7, 64])
def test_ring_symmetric_matches_step_synchronous(p):
    g = star(p, reduce_bandwidth="50GB/s")
    nodes = placement(g, p)
    size = 96 * p << 10
    ring = ring_time(g, nodes, "allreduce", size)
    assert ring.applicable and ring.method == "ring-symmetric"
    schedule = make_schedule("ring", "allreduce", p, size)
    from simulator.engine.step_sync import _step_synchronous
    full = _step_synchronous(schedule, g, tuple(nodes), True)
    assert math.isclose(ring.time_s, full.time_s, rel_tol=1e-12)
    assert ring.bytes_sent == full.bytes_sent == schedule.transfer_bytes.sum()
    assert dict(ring.reduce_s) == pytest.approx(dict(full.reduce_s), rel=1e-12)
    assert math.isclose(ring.time_s, theory.ring_allreduce(p, size, 2 * LAT, 1 / BW, 1 / 50e9),
                        rel_tol=1e-9)


def test_uneven_ring_uses_the_recurrence():
    """Chunks of 76 and 77 bytes: the symmetric ring declines, the ring recurrence times it
    without the schedule (the same time as the closed form with the largest chunk)."""
    g = star(13)
    result, schedule = fast_collective(g, "allreduce", "ring", 1000, 13, placement(g, 13))
    assert result.applicable and schedule is None and result.method == "ring-recurrence"
    assert math.isclose(result.time_s, theory.ring_allreduce(13, 1000, 2 * LAT, 1 / BW),
                        rel_tol=1e-9)
    assert result.bytes_sent == 2 * 12 * 1000
    event, fast = event_and_fast(g, "allreduce", 1000, 13)
    assert_exact(event, fast)


@pytest.mark.parametrize("algorithm,formula", [
    ("halving_doubling", lambda p, n: theory.halving_doubling_allreduce(p, n, 2 * LAT, 1 / BW)),
    ("binomial_tree", lambda p, n: theory.binomial_allreduce(p, n, 2 * LAT, 1 / BW)),
])
def test_4096_ranks_equal_closed_forms(algorithm, formula):
    g = star(4096)
    row = run_collective(g, "allreduce", algorithm, 256 << 20, engine="fast").row
    assert math.isclose(row["time_s"], formula(4096, 256 << 20), rel_tol=1e-9)


def test_ps_4096_workers_equals_closed_form():
    g = star(4097)
    row = run_collective(g, "allreduce", "ps", 64 << 20, gpus=4096, engine="fast").row
    want = theory.ps_allreduce(4096, 64 << 20, 2 * LAT, 1 / BW, 1 / BW)
    assert math.isclose(row["time_s"], want, rel_tol=1e-9)


def test_too_large_schedule_is_refused_before_it_is_built():
    """Two lockstep channels reducing on every rank: the ring shortcuts decline (also with
    chunks of unequal sizes), and the 1.07 G-transfer schedule is not built."""
    g = star(16384, reduce_bandwidth="50GB/s")
    for size in (256 << 20, (256 << 20) + 1):
        with pytest.raises(SimulationError, match="too many to build.*methods that need none declined .ring-"):
            run_collective(g, "allreduce", "ring", size, engine="auto", channels=2)


# -- building blocks ----------------------------------------------------------------------------
def test_weighted_max_min_equals_expanded_flows():
    rng = np.random.default_rng(7)
    for _ in range(40):
        n_res = int(rng.integers(2, 8))
        caps = rng.uniform(1, 10, n_res)
        paths = [tuple(sorted(rng.choice(n_res, size=int(rng.integers(1, min(4, n_res) + 1)),
                                         replace=False)))
                 for _ in range(int(rng.integers(1, 6)))]
        weight = rng.integers(1, 4, len(paths))
        expanded = [p for p, w in zip(paths, weight) for _ in range(w)]
        want = max_min_rates([tuple(int(r) for r in p) for p in expanded],
                             {r: float(c) for r, c in enumerate(caps)})
        inc_flow = np.repeat(np.arange(len(paths)), [len(p) for p in paths])
        inc_res = np.concatenate([np.asarray(p) for p in paths]).astype(np.int64)
        got = max_min_weighted(inc_flow, inc_res, weight, caps, len(paths))
        got_expanded = np.repeat(got, weight)
        assert np.allclose(got_expanded, want, rtol=1e-12)


@pytest.mark.parametrize("algorithm,collective,p,opts", [
    ("halving_doubling", "allreduce", 13, {}), ("halving_doubling", "allgather", 6, {}),
    ("ps", "allreduce", 5, {"servers": 2}), ("binomial_tree", "allreduce", 9, {}),
    ("ps", "allreduce", 6, {"servers": 3, "placement": "colocated"})])
def test_epoch_dependencies_are_the_same_epoch_pairs(algorithm, collective, p, opts):
    s = make_schedule(algorithm, collective, p, 3 << 20, **opts)
    epoch = epochs(s)
    ptr, idx = dependencies(s)
    owner = np.repeat(np.arange(len(s)), np.diff(ptr))
    keep = epoch[owner] == epoch[idx]
    want = sorted(zip(owner[keep].tolist(), idx[keep].tolist()))
    ptr2, idx2 = _epoch_dependencies(s, epoch)
    owner2 = np.repeat(np.arange(len(s)), np.diff(ptr2))
    assert sorted(zip(owner2.tolist(), idx2.tolist())) == want


def test_aligned_and_step_synchronous_agree():
    g = star(16, reduce_bandwidth="40GB/s")
    nodes = placement(g, 16)
    for algorithm in ("halving_doubling", "binomial_tree", "ring"):
        s = make_schedule(algorithm, "allreduce", 16, 32 << 20)
        a = aligned_time(s, g, nodes)
        from simulator.engine.step_sync import _step_synchronous
        b = _step_synchronous(s, g, tuple(nodes), True)
        assert a.applicable and a.method == "aligned-steps"
        assert math.isclose(a.time_s, b.time_s, rel_tol=1e-12)
        assert a.links == b.links and a.bytes_sent == b.bytes_sent


def test_fast_time_reports_why_not():
    g = star(8)
    s = make_schedule("ring", "allreduce", 8, 8 << 20, slices=4)
    result = fast_time(s, g, placement(g, 8))
    assert not result.applicable and math.isnan(result.time_s)
    assert "FIFO connection" in result.reason


# -- API and CLI -----------------------------------------------------------------------------------
def test_unknown_engine_and_fast_with_shared_engine_are_rejected():
    with pytest.raises(ConfigError, match="unknown engine"):
        run_collective(star(4), "allreduce", "ring", 1 << 20, engine="quick")
    with pytest.raises(ConfigError, match="timelines"):
        run_collective(star(4), "allreduce", "ring", 1 << 20, engine="fast", record_rates=True)
    row = run_collective(star(4), "allreduce", "ring", 1 << 20, engine="auto",
                         record_rates=True).row
    assert row["engine"] == "event"


def test_fast_ring_validates_options():
    with pytest.raises(ConfigError, match="does not take option"):
        run_collective(star(4), "allreduce", "ring", 1 << 20, engine="fast", bogus=1)


def test_cli_engine_fast_row_says_fast(capsys):
    assert main(["collective", "--topology", "star", "--param", "hosts=64", "--size", "256MiB",
                 "--engine", "fast", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["engine"] == "fast"
    want = theory.ring_allreduce(64, 256 << 20, 2 * LAT, 1 / BW)
    assert math.isclose(rows[0]["time_s"], want, rel_tol=1e-9)


def test_cli_engine_fast_not_applicable_is_a_clean_error(capsys, monkeypatch):
    """Without numba nothing times a pipelined ring exactly but the event engine."""
    import simulator.engine.compiled as compiled

    monkeypatch.setattr(compiled, "numba_available", lambda: False)
    code = main(["collective", "--topology", "star", "--param", "hosts=8", "--size", "64MiB",
                 "--slices", "4", "--engine", "fast"])
    assert code == 2
    assert "does not apply" in capsys.readouterr().err


def test_cli_engine_auto_reports_each_engine(capsys):
    assert main(["collective", "--topology", "star", "--param", "hosts=16", "--size", "16MiB",
                 "--algorithm", "ring,double_binary_tree", "--engine", "auto",
                 "--format", "csv"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    engine = lines[0].split(",").index("engine")
    assert lines[1].split(",")[engine] == "fast" and lines[2].split(",")[engine] == "fast"
    assert main(["collective", "--topology", "star", "--param", "hosts=16", "--size", "16MiB",
                 "--algorithm", "ring", "--slices", "4", "--engine", "auto",
                 "--format", "csv"]) == 0
    want = "fast" if HAVE_NUMBA else "event"   # the compiled event simulation
    assert capsys.readouterr().out.strip().splitlines()[1].split(",")[engine] == want


# -- training with the fast collective engine ------------------------------------------------------
def test_training_fast_collectives_equal_event():
    from simulator.workload.energy import energy_columns
    from simulator.workload.models import get_model
    from simulator.workload.sweep import _profile
    from simulator.workload.training import simulate_training

    g = load_topology("gpu_cluster", {"nodes": "4", "gpus_per_node": "8"})
    prof = _profile("resnet50", "a100-sxm4-40gb", 32, "fp32", None)
    grads = [layer.params * 4 for layer in get_model("resnet50").layers]
    for algorithm in ("ring", "binomial_tree"):
        rows = []
        for engine in ("event", "fast"):
            r = simulate_training(g, prof, gpus=32, batch_per_gpu=32, aggregation=algorithm,
                                  model_name="resnet50", gradient_bytes=grads,
                                  collective_engine=engine)
            rows.append((r.row, energy_columns(r.row, r.engine, "a100-sxm4-40gb", 32)))
        (ev, ev_energy), (fa, fa_energy) = rows
        for key in ("iteration_s", "comm_busy_s", "exposed_comm_s", "bottleneck_utilisation",
                    "wire_bytes_per_iteration"):
            assert math.isclose(ev[key], fa[key], rel_tol=1e-9, abs_tol=1e-15), key
        assert ev["bottleneck_link"] == fa["bottleneck_link"]
        for key in ev_energy:
            assert math.isclose(ev_energy[key], fa_energy[key], rel_tol=1e-9), key


def test_training_fast_engine_times_pipelined_trees_exactly():
    from simulator.workload.models import get_model
    from simulator.workload.sweep import _profile
    from simulator.workload.training import simulate_training

    g = load_topology("gpu_cluster", {"nodes": "2", "gpus_per_node": "8"})
    prof = _profile("resnet50", "a100-sxm4-40gb", 32, "fp32", None)
    grads = [layer.params * 4 for layer in get_model("resnet50").layers]
    kw = {"gpus": 16, "batch_per_gpu": 32, "aggregation": "double_binary_tree",
          "model_name": "resnet50", "gradient_bytes": grads}
    pytest.importorskip("numba")
    fast = simulate_training(g, prof, collective_engine="fast", **kw).row
    event = simulate_training(g, prof, **kw).row
    assert math.isclose(fast["iteration_s"], event["iteration_s"], rel_tol=1e-12)


def test_default_options_used_by_fast_and_event_agree():
    g = load_topology("dgx-a100", {"nodes": "2"})
    opts = default_options(g, "ring", 16, {})
    assert opts["channels"] == 8
    event, auto = both(g, "ring", 64 << 20, 16, reduce_compute=False)
    assert_parity(event, auto, must_apply=False)


# -- ring recurrence (ranks finish ring steps at different instants) -------------------------------
def cluster(nodes, gpus_per_node, **extra):
    params = {"nodes": str(nodes), "gpus_per_node": str(gpus_per_node)}
    params.update({k: str(v) for k, v in extra.items()})
    return load_topology("gpu_cluster", params)


def event_and_fast(graph, collective, size, gpus, **opts):
    """(event row, fast CollectiveRun) of one ring collective."""
    event = run_collective(graph, collective, "ring", size, gpus=gpus, **opts).row
    fast = run_collective(graph, collective, "ring", size, gpus=gpus, engine="fast", **opts)
    return event, fast


def assert_exact(event, fast_run, method="ring-recurrence"):
    assert fast_run.row["engine"] == "fast" and fast_run.fast.method == method
    assert fast_run.schedule is None                       # never built
    assert math.isclose(fast_run.row["time_s"], event["time_s"], rel_tol=1e-9)
    assert fast_run.row["bottleneck_link"] == event["bottleneck_link"]
    assert math.isclose(fast_run.row["bottleneck_utilisation"], event["bottleneck_utilisation"],
                        rel_tol=1e-9)


@pytest.mark.parametrize("nodes,gpus_per_node", [(2, 4), (3, 8), (4, 4)])
@pytest.mark.parametrize("collective", ["allreduce", "reduce_scatter", "allgather"])
@pytest.mark.parametrize("chunk", [1 << 10, 3 << 16])
@pytest.mark.parametrize("reduce_compute", [True, False])
def test_ring_recurrence_equals_event_on_gpu_cluster(nodes, gpus_per_node, collective, chunk,
                                                     reduce_compute):
    """Fast NVSwitch hops and a slow NIC hop per machine: ranks finish steps at different
    instants, the symmetric ring declines, and the recurrence is exact."""
    g = cluster(nodes, gpus_per_node)
    p = nodes * gpus_per_node
    symmetric = ring_time(g, placement(g, p), collective, chunk * p)
    assert symmetric.method == "ring-recurrence"           # the symmetric ring declined
    event, fast = event_and_fast(g, collective, chunk * p, p, reduce_compute=reduce_compute)
    assert_exact(event, fast)


@pytest.mark.parametrize("collective", ["allreduce", "reduce_scatter"])
def test_ring_recurrence_with_slow_reductions_and_a_fat_tree(collective):
    """Reductions slower than the wire (the compute queues bind) on a leaf-spine fabric."""
    g = cluster(4, 4, reduce_bandwidth="4GB/s", fabric="fat_tree", nics_per_leaf=2, spines=1)
    event, fast = event_and_fast(g, collective, 16 * 40960, 16)
    assert_exact(event, fast)


@pytest.mark.parametrize("collective", ["allreduce", "allgather"])
def test_ring_recurrence_on_two_dgx_a100(collective):
    """The dgx-a100-2node preset with one channel; also dgx-a100 with nodes=2."""
    for g in (load_topology("dgx-a100-2node"), load_topology("dgx-a100", {"nodes": "2"})):
        event, fast = event_and_fast(g, collective, 16 << 20, 16, channels=1)
        assert_exact(event, fast)


def test_ring_recurrence_with_lockstep_channels():
    """Two channels in the same rank order (local_ranks=1) run in lockstep and share their
    paths: one flow of weight 2. With reductions charged each rank reduces two chunks per step
    (declined; auto equals event)."""
    g = cluster(2, 4)
    for collective, opts in (("allgather", {}), ("allreduce", {"reduce_compute": False})):
        event, fast = event_and_fast(g, collective, 8 << 20, 8, channels=2, local_ranks=1,
                                     **opts)
        assert_exact(event, fast)
    result = ring_time(g, placement(g, 8), "allreduce", 8 << 20, channels=2, local_ranks=1)
    assert not result.applicable and "several" in result.reason
    event, _auto = both(g, "ring", 8 << 20, 8, channels=2, local_ranks=1)
    assert_compiled(event, g, "ring", 8 << 20, 8, channels=2, local_ranks=1)


@pytest.mark.parametrize("graph,opts,why", [
    # every machine's host bridge (capped at 20 GB/s) carries all its ring flows
    (lambda: cluster(2, 4, intra="pcie", pcie_switches=0, host_bridge_bandwidth="20GB/s"), {},
     "oversubscribe"),
    # rotated channels cross the same NVSwitch ports at different times
    (lambda: cluster(2, 4), {"channels": 2, "reduce_compute": False}, "shares every resource"),
])
def test_ring_recurrence_declines_when_rates_depend_on_the_active_flows(graph, opts, why):
    g = graph()
    ring_opts = default_options(g, "ring", 8, {k: v for k, v in opts.items()
                                               if k != "reduce_compute"})
    result = ring_time(g, placement(g, 8), "allreduce", 8 << 20,
                       channels=ring_opts["channels"], local_ranks=ring_opts["local_ranks"],
                       reduce_compute=opts.get("reduce_compute", True))
    assert not result.applicable and result.method == "ring-recurrence"
    assert why in result.reason and "ring-symmetric: " in result.reason
    fast, _ = fast_collective(g, "allreduce", "ring", 8 << 20, 8, placement(g, 8),
                              reduce_compute=opts.get("reduce_compute", True), options=ring_opts)
    assert fast.method != "ring-recurrence"                # the schedule-based analyses ran
    event, auto = both(g, "ring", 8 << 20, 8, **opts)
    assert_parity(event, auto, must_apply=False)


def test_ring_recurrence_extras_equal_step_synchronous():
    """Links, bytes and reduction totals as the step-synchronous analysis of the schedule."""
    from simulator.engine.step_sync import _step_synchronous

    g = cluster(16, 8, ps_hosts=1)
    p, size = 128, 25 << 20
    nodes = placement(g, p)
    opts = default_options(g, "ring", p, {})
    ring, schedule = fast_collective(g, "allreduce", "ring", size, p, nodes, options=opts)
    assert ring.method == "ring-recurrence" and schedule is None
    full = _step_synchronous(make_schedule("ring", "allreduce", p, size, **opts), g,
                             tuple(nodes), True)
    assert math.isclose(ring.time_s, full.time_s, rel_tol=1e-12)
    assert ring.bytes_sent == full.bytes_sent and ring.steps == full.steps == 2 * (p - 1)
    assert dict(ring.reduce_s) == pytest.approx(dict(full.reduce_s), rel=1e-12)
    assert sorted(ring.links) == sorted(full.links)


def test_ring_recurrence_16384_ranks():
    """2,048 machines x 8 GPUs: no schedule (it would be 537 M transfers), a second or two.
    Bounds: the NIC must carry 2(p-1)/p of the message; no step can take longer than the
    slowest hop plus a reduction."""
    g = cluster(2048, 8)
    p, size = 16384, 256 << 20
    result = ring_time(g, placement(g, p), "allreduce", size, local_ranks=8)
    assert result.applicable and result.method == "ring-recurrence"
    nic_Bps, chunk = 25e9, size // p
    assert result.time_s >= 2 * (p - 1) / p * size / nic_Bps
    inter_s = chunk / nic_Bps + 3.7e-6           # GPU-PCIe-bridge-PCIe-NIC-switch-NIC-PCIe-GPU
    reduce_Bps = g.nodes["n0.gpu0"]["reduce_bytes_per_s"]
    assert result.time_s <= (2 * (p - 1) * inter_s + (p - 1) * chunk / reduce_Bps) * (1 + 1e-9)
    assert result.bytes_sent == 2 * (p - 1) * chunk * p
    # 12 bytes more: 12 chunks one byte larger. Every duration grows by at most one byte's
    # worth, and a path through the recurrence has at most 2(p-1) transfers.
    uneven = ring_time(g, placement(g, p), "allreduce", size + 12, local_ranks=8)
    assert uneven.applicable and uneven.method == "ring-recurrence"
    assert result.time_s <= uneven.time_s
    assert uneven.time_s <= result.time_s + 2 * (p - 1) * (1 / nic_Bps + 1 / reduce_Bps) * 1.01
    assert uneven.bytes_sent == 2 * (p - 1) * (size + 12)


# -- ring recurrence with chunks of different sizes ---------------------------------------------
def uneven_sizes(p):
    """Sizes not divisible by ``p``: odd, 25 MiB + 12 bytes, and below ``p`` (0-byte chunks)."""
    return [1000003, (25 << 20) + 12, p // 2 + 1]


@pytest.mark.parametrize("nodes,gpus_per_node", [(2, 4), (3, 8), (4, 4), (2, 8)])
@pytest.mark.parametrize("collective", ["allreduce", "reduce_scatter", "allgather"])
@pytest.mark.parametrize("reduce_compute", [True, False])
def test_ring_recurrence_unequal_chunks_equals_event_on_gpu_cluster(nodes, gpus_per_node,
                                                                    collective, reduce_compute):
    """Chunks of two sizes (``split_bytes``), or 0 and 1 bytes: per-step bytes rotate with the
    chunk each connection forwards; the recurrence stays exact."""
    g = cluster(nodes, gpus_per_node)
    p = nodes * gpus_per_node
    for size in uneven_sizes(p):
        assert size % p
        result = ring_time(g, placement(g, p), collective, size,
                           reduce_compute=reduce_compute)
        assert result.applicable and result.method == "ring-recurrence"
        event, fast = event_and_fast(g, collective, size, p, reduce_compute=reduce_compute)
        assert_exact(event, fast)


@pytest.mark.parametrize("collective", ["allreduce", "reduce_scatter", "allgather"])
def test_ring_recurrence_unequal_chunks_on_two_dgx_a100(collective):
    g = load_topology("dgx-a100-2node")
    for size in uneven_sizes(16):
        for reduce_compute in (True, False):
            event, fast = event_and_fast(g, collective, size, 16, channels=1,
                                         reduce_compute=reduce_compute)
            assert_exact(event, fast)


@pytest.mark.parametrize("collective", ["allreduce", "reduce_scatter"])
def test_ring_recurrence_unequal_chunks_with_slow_reductions(collective):
    """Reductions slower than the wire on a leaf-spine fabric, chunks of unequal sizes."""
    g = cluster(4, 4, reduce_bandwidth="4GB/s", fabric="fat_tree", nics_per_leaf=2, spines=1)
    for size in (16 * 40960 + 7, 1000003, 13):
        event, fast = event_and_fast(g, collective, size, 16)
        assert_exact(event, fast)


@pytest.mark.parametrize("size", [3, 43, 1000003])
@pytest.mark.parametrize("collective", ["allreduce", "reduce_scatter"])
def test_ring_recurrence_every_transfer_completes_as_in_the_engine(monkeypatch, size,
                                                                   collective):
    """Step by step, every connection's completion equals the engine's for that transfer.
    With reductions of 0.5 s a byte a 0-byte chunk overtakes the reductions queued on its
    receiver: the engine does not queue it (it completes on delivery) and the queue frees at
    the last real reduction, not at the previous completion."""
    import simulator.engine.ring as fast_module
    from simulator.schedules.ring import ring_order

    steps_done = []
    one_step = fast_module._ring_steps

    def stepwise(drain, done, start, xfer_s, latency_s, reduce_s, steps, *, first_offset=0,
                 **kw):
        for k in range(steps):
            one_step(drain, done, start, xfer_s, latency_s, reduce_s, 1,
                     first_offset=first_offset - k, **kw)
            steps_done.append(done[0].copy())

    monkeypatch.setattr(fast_module, "_ring_steps", stepwise)
    g = cluster(2, 4, reduce_bandwidth="2B/s")
    p = 8
    event = run_collective(g, collective, "ring", size, gpus=p)
    fast = run_collective(g, collective, "ring", size, gpus=p, engine="fast")
    assert fast.fast.method == "ring-recurrence"
    assert np.array_equal(ring_order(p, 0, 4), np.arange(p))   # position = rank
    s = event.schedule
    assert len(steps_done) == s.steps
    want = event.run.t_done
    got = np.array(steps_done)[s.step, s.src]
    assert np.allclose(got, want, rtol=1e-12, atol=0)
    assert math.isclose(fast.row["time_s"], event.row["time_s"], rel_tol=1e-12)


def test_ring_recurrence_unequal_chunks_lockstep_channels():
    """Two channels in one rank order with equal parts (chunks of two sizes, the same in both)
    run in lockstep: one flow of weight 2. Parts one byte apart do not: they share every
    resource, and the recurrence declines (auto equals event)."""
    g = cluster(2, 4)
    size = 2 * 1000003
    for collective, opts in (("allgather", {}), ("allreduce", {"reduce_compute": False})):
        event, fast = event_and_fast(g, collective, size, 8, channels=2, local_ranks=1, **opts)
        assert_exact(event, fast)
    result = ring_time(g, placement(g, 8), "allgather", size + 1, channels=2, local_ranks=1)
    assert not result.applicable and "shares every resource" in result.reason
    assert "chunks differ" in result.reason
    event, _auto = both(g, "ring", size + 1, 8, collective="allgather", channels=2,
                        local_ranks=1)
    assert_compiled(event, g, "ring", size + 1, 8, collective="allgather", channels=2,
                    local_ranks=1)


def test_training_ring_buckets_use_the_recurrence(monkeypatch):
    """DDP buckets of arbitrary sizes (sums of layer gradients): each bucket's ring is timed by
    the recurrence (no schedule), and the iteration equals the event engine's."""
    import simulator.engine.dispatch as fast_module
    from simulator.workload.models import get_model
    from simulator.workload.sweep import _profile
    from simulator.workload.training import simulate_training

    g = cluster(3, 8)
    prof = _profile("resnet50", "a100-sxm4-40gb", 32, "fp32", None)
    grads = [layer.params * 4 for layer in get_model("resnet50").layers]
    kw = {"gpus": 24, "batch_per_gpu": 32, "aggregation": "ring", "model_name": "resnet50",
          "gradient_bytes": grads}
    seen = []
    inner = fast_module.fast_collective

    def recording(graph, collective, algorithm, size_bytes, *args, **kwargs):
        result, schedule = inner(graph, collective, algorithm, size_bytes, *args, **kwargs)
        seen.append((size_bytes, result.method, schedule))
        return result, schedule

    monkeypatch.setattr(fast_module, "fast_collective", recording)
    auto = simulate_training(g, prof, collective_engine="auto", **kw).row
    event = simulate_training(g, prof, collective_engine="event", **kw).row
    assert seen and any(size % 24 for size, _m, _s in seen)     # unequal chunks
    assert all(method == "ring-recurrence" and sched is None for _z, method, sched in seen)
    for key in ("iteration_s", "comm_busy_s", "exposed_comm_s", "bottleneck_utilisation",
                "wire_bytes_per_iteration"):
        assert math.isclose(auto[key], event[key], rel_tol=1e-9, abs_tol=1e-15), key
    assert auto["bottleneck_link"] == event["bottleneck_link"]


def test_the_entrance_says_which_method_answered_and_why_the_others_did_not(capsys):
    from simulator.cli import main
    from simulator.collective import run_collective
    from simulator.engine.dispatch import METHODS

    graph = star(8)
    run = run_collective(graph, "allreduce", "ring", 1 << 20, slices=2, engine="auto")
    assert run.method == "compiled-events" if numba_available() else run.method == "event"
    names = [text.split(":")[0] for text in run.why_not_others()]
    assert names[:3] == [m.name for m in METHODS[:3]]
    assert "pipelined (slices=2)" in run.why_not_others()[0]
    assert main(["collective", "--topology", "star", "--param", "hosts=8", "--algorithm",
                 "double_binary_tree", "--size", "1MiB", "-v"]) == 0
    err = capsys.readouterr().err
    assert "tree-pipeline answered" in err and "ring: not a ring" in err
