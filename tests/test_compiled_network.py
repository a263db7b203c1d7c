"""The compiled flow network against the closed forms and against the Python flow network."""

import math
from dataclasses import dataclass

import numpy as np
import pytest
import simpy

from simulator.engine import runner
from simulator.engine.compiled_network import CompiledFlowNetwork
from simulator.engine.network import FlowNetwork
from simulator.engine.runner import Engine
from simulator.errors import SimulationError
from simulator.schedules import make_schedule
from simulator.topology import load_topology
from simulator.workload.training import COMPILED_PS_PAIRS, PsConfig, simulate_training

pytest.importorskip("numba")


def run_flows(make, capacities, flows, latencies=None, aborts=()):
    """``flows``: (start_s, size_bytes, [resource names]); ``aborts``: (time_s, flow index).
    Returns delivery times (None: never delivered) and the network."""
    env = simpy.Environment()
    net = make(env)
    idx = {name: net.resource(name, cap) for name, cap in capacities.items()}
    latencies = latencies or {}
    done = [None] * len(flows)
    started = {}

    def launch(i, size, res):
        lat = sum(latencies.get(r, 0.0) for r in res)

        def drained(_f):
            ev = env.timeout(lat)
            ev.callbacks.append(lambda _e: done.__setitem__(i, env.now))
        started[i] = net.start(tuple(idx[r] for r in res), size, drained)

    for i, (t0, size, res) in enumerate(flows):
        ev = env.timeout(t0)
        ev.callbacks.append(lambda _e, i=i, size=size, res=res: launch(i, size, res))
    for t, i in aborts:
        ev = env.timeout(t)
        ev.callbacks.append(lambda _e, i=i: i in started and net.abort(started[i]))
    env.run()
    return done, net


def close(a, b, rel=1e-9):
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-12)


@pytest.mark.parametrize("caps, flows, lat, expected", [
    ({"a": 10, "b": 5}, [(0, 100, ["a", "b"])], {"a": 1, "b": 2}, [23.0]),
    ({"l": 10}, [(0, 100, ["l"]), (0, 100, ["l"])], None, [20.0, 20.0]),
    ({"l": 10}, [(0, 100, ["l"]), (5, 100, ["l"])], None, [15.0, 20.0]),
    ({"l0": 10, "l1": 10}, [(0, 100, ["l0", "l1"]), (0, 50, ["l0"]), (0, 50, ["l1"])], None,
     [15.0, 10.0, 10.0]),
    ({"sink": 100e3, **{f"s{i}": 400e3 for i in range(16)}},
     [(0, 1e6, [f"s{i}", "sink"]) for i in range(16)], None, [160.0] * 16),
    ({"a": 100, "b": 10}, [(0, 100, ["a"]), (0, 100, ["b"])], None, [1.0, 10.0]),
], ids=["latency-once", "equal-share", "staggered", "parking-lot", "incast", "components"])
def test_closed_forms(caps, flows, lat, expected):
    done, _ = run_flows(CompiledFlowNetwork, caps, flows, lat)
    assert all(close(t, e) for t, e in zip(done, expected)), done


def _random_case(seed, n_res=150, n_flows=600):
    """Flows over random paths (many sharing a path, as lanes), staggered, some at one instant,
    some zero-sized, with a few aborted; more resources, paths and connections than the
    compiled network's first allocation, so every structure grows."""
    rng = np.random.default_rng(seed)
    caps = {f"r{i}": float(rng.choice([1e9, 2e9, 5e9, 12.5e9])) for i in range(n_res)}
    paths = [sorted(rng.choice(n_res, size=int(rng.integers(1, 7)), replace=False).tolist())
             for _ in range(120)]
    flows = []
    for _ in range(n_flows):
        t0 = float(rng.integers(0, 40)) * 1e-4          # coinciding starts are common
        size = float(rng.choice([0, 1 << 16, 1 << 20, 3 << 20]))
        flows.append((t0, size, [f"r{r}" for r in paths[int(rng.integers(len(paths)))]]))
    aborts = [(float(rng.uniform(0, 4e-3)), int(rng.integers(n_flows))) for _ in range(12)]
    return caps, flows, aborts


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_same_deliveries_bytes_and_busy_time_as_the_python_network(seed):
    caps, flows, aborts = _random_case(seed)
    ref, ref_net = run_flows(lambda env: FlowNetwork(env), caps, flows, aborts=aborts)
    got, net = run_flows(CompiledFlowNetwork, caps, flows, aborts=aborts)
    assert [t is None for t in got] == [t is None for t in ref]
    assert sum(t is None for t in ref) >= 1            # some abort hit a flow in flight
    assert all(close(a, b) for a, b in zip(got, ref) if a is not None)
    for i in range(len(ref_net.keys)):
        assert close(net.bytes_carried[i], ref_net.bytes_carried[i])
        assert close(net.busy_time[i], ref_net.busy_time[i])
    assert net.active == 0 and len(net._pending) == 0
    assert net._n_conn > 64 and net._n_path > 64     # the structures grew
    assert int(net._user_len.sum()) == 0               # every flow left its resources' lists


def test_engine_runs_schedules_alike_on_both_networks():
    """Contended collectives (two rings and a tree sharing a switch) through the engine."""
    g = load_topology("star", {"hosts": 8, "link_bandwidth": "10GB/s", "link_latency": "2us"})
    hosts = [f"host{i}" for i in range(8)]
    ends = {}
    for kind in ("python", "compiled"):
        engine = Engine(g, network=kind)
        runs = [engine.launch(make_schedule("ring", "allreduce", 8, 16 << 20, slices=4), hosts),
                engine.launch(make_schedule("ring", "allreduce", 4, 8 << 20), hosts[::2]),
                engine.launch(make_schedule("double_binary_tree", "allreduce", 8, 4 << 20,
                                            segments=8), hosts[::-1])]
        engine.run()
        ends[kind] = [r.end_s for r in runs]
        assert isinstance(engine.network, CompiledFlowNetwork) == (kind == "compiled")
    assert all(close(a, b) for a, b in zip(ends["compiled"], ends["python"]))


def test_failure_reports_the_same_stuck_ranks():
    g = load_topology("star", {"hosts": 8, "link_bandwidth": "10GB/s"})
    texts = []
    for kind in ("python", "compiled"):
        engine = Engine(g, network=kind)
        engine.launch(make_schedule("ring", "allreduce", 8, 64 << 20),
                      [f"host{i}" for i in range(8)])
        engine.fail_node("host3", at_s=1e-3)
        with pytest.raises(SimulationError) as err:
            engine.run()
        texts.append(str(err.value))
    assert texts[0] == texts[1] and "cut off ranks [2, 3]" in texts[0]


def test_choice_of_network():
    env = simpy.Environment()
    assert type(runner.flow_network(env, "compiled", False)) is CompiledFlowNetwork
    # rate timelines are the Python network's
    assert type(runner.flow_network(env, "compiled", True)) is FlowNetwork
    with pytest.raises(ValueError, match="valid: python, compiled"):
        runner.flow_network(env, "numba", False)


@dataclass
class Layer:
    name: str
    forward_s: float
    backward_s: float


@dataclass
class Profile:
    layers: tuple
    optimizer_s: float


GRADIENTS = [4 << 20, 1 << 20, 9 << 20, 256 << 10, 2 << 20, 6 << 20]


def _ps_iteration(graph, servers: int) -> float:
    prof = Profile(tuple(Layer(f"l{i}", 1e-3, 2e-3) for i in range(len(GRADIENTS))), 1e-4)
    return simulate_training(graph, prof, gpus=16, batch_per_gpu=32, aggregation="ps",
                             model_name="toy", gradient_bytes=GRADIENTS,
                             ps=PsConfig(servers=servers, placement="colocated",
                                         sharding="greedy")).row["iteration_s"]


def test_parameter_servers_time_alike_on_both_networks(monkeypatch):
    """simulate_training runs parameter servers with many (worker, server) pairs on the
    compiled network (numba present), with the Python network's answer; few pairs stay on the
    Python network."""
    g = load_topology("star", {"hosts": 16, "link_bandwidth": "25Gbps", "link_latency": "5us"})
    made = []
    real = runner.flow_network
    monkeypatch.setattr(runner, "flow_network",
                        lambda *a: made.append(real(*a)) or made[-1])
    assert 16 * 4 >= COMPILED_PS_PAIRS > 16 * 3
    compiled = _ps_iteration(g, servers=4)
    assert type(made[-1]) is CompiledFlowNetwork
    few = _ps_iteration(g, servers=3)
    assert type(made[-1]) is FlowNetwork
    assert few > compiled                                  # fewer servers, hotter ones
    monkeypatch.setattr(runner, "numba_available", lambda: False)
    python = _ps_iteration(g, servers=4)
    assert type(made[-1]) is FlowNetwork
    assert close(compiled, python)


def test_pairs_count_clients_not_gpus():
    """With local aggregation a machine pushes once for its GPUs: 2 machines x 4 servers stay
    on the Python network, 16 GPUs x 4 servers do not."""
    from simulator.workload.training import _network_for

    g = load_topology("dgx-a100", {"nodes": 2})
    gpus = [n for n, d in g.nodes(data=True) if d.get("kind") == "gpu"]
    assert _network_for(g, gpus, "ps", PsConfig(servers=4)) == "compiled"
    assert _network_for(g, gpus, "ps", PsConfig(servers=4, local_aggregation=True)) == "python"
    assert _network_for(g, gpus, "ring", None) == "python"
