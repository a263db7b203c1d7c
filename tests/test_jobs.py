"""Several collective loops on one fabric: slowdowns against hand-derived max-min answers."""

import math

import pytest

from simulator.errors import ConfigError
from simulator.scenario import read_scenario, run_study
from simulator.topology import load_topology
from simulator.workload.jobs import CollectiveJob, LlmJob, TrainingJob, parse_ranks, run_jobs

GB = 1e9


def _fat_tree():
    # hosts 0,1 on leaf 0, hosts 2,3 on leaf 1, one 10 GB/s uplink per leaf
    return load_topology("fat_tree", {"hosts_per_leaf": 2, "leaves": 2, "spines": 1,
                                      "host_bandwidth": "10GB/s",
                                      "uplink_bandwidth": "10GB/s", "host_latency": "0us",
                                      "uplink_latency": "0us"})


def test_two_rings_across_one_uplink_each_take_twice_as_long():
    n = 256 << 20
    jobs = [CollectiveJob("a", "allreduce", "ring", n, (0, 2)),
            CollectiveJob("b", "allreduce", "ring", n, (1, 3))]
    result = run_jobs(_fat_tree(), jobs)
    rows = result.jobs.set_index("job")
    alone = 2 * (n / 2) / (10 * GB)           # a 2-rank ring moves n/2 each way, twice
    assert math.isclose(rows.loc["a", "alone_s"], alone, rel_tol=1e-9)
    assert math.isclose(rows.loc["a", "together_s"], 2 * alone, rel_tol=1e-9)
    assert math.isclose(rows.loc["b", "slowdown"], 2.0, rel_tol=1e-9)
    # the leaf uplinks, both directions, are where they meet
    assert len(result.shared_links) == 4
    assert all(set(j.split(",")) == {"a", "b"} for j in result.shared_links["jobs"])


def test_jobs_inside_their_own_leaves_do_not_meet():
    n = 64 << 20
    jobs = [CollectiveJob("a", "allreduce", "ring", n, (0, 1), iterations=3),
            CollectiveJob("b", "allreduce", "ring", n, (2, 3))]
    result = run_jobs(_fat_tree(), jobs)
    assert result.shared_links.empty
    assert (result.jobs["slowdown"] == 1.0).all()
    a = result.jobs.set_index("job").loc["a"]
    assert math.isclose(a["alone_s"], 3 * 2 * (n / 2) / (10 * GB), rel_tol=1e-9)


def test_a_short_job_slows_a_long_one_only_while_it_runs():
    """b (n) and a (4n) share the uplinks: both at half rate until b ends at 2·t_b, then a
    alone: a ends at 2·t_b + (t_a - t_b) = t_a + t_b."""
    n = 64 << 20
    jobs = [CollectiveJob("a", "allreduce", "ring", 4 * n, (0, 2)),
            CollectiveJob("b", "allreduce", "ring", n, (1, 3))]
    rows = run_jobs(_fat_tree(), jobs).jobs.set_index("job")
    t_a, t_b = rows.loc["a", "alone_s"], rows.loc["b", "alone_s"]
    assert math.isclose(rows.loc["b", "together_s"], 2 * t_b, rel_tol=1e-9)
    assert math.isclose(rows.loc["a", "together_s"], t_a + t_b, rel_tol=1e-9)


@pytest.mark.parametrize("text, expected", [("0-3", (0, 1, 2, 3)), ("0-1,6-7", (0, 1, 6, 7)),
                                            ([5, 2], (5, 2)), (3, (0, 1, 2))])
def test_rank_lists(text, expected):
    assert parse_ranks(text, 8) == expected


@pytest.mark.parametrize("text, words", [("0-9", "outside the topology's 8"),
                                         ("3-1", "backwards"), ("0,0", "twice"),
                                         ("a-b", "not an index")])
def test_bad_rank_lists_are_one_line(text, words):
    with pytest.raises(ConfigError, match=words):
        parse_ranks(text, 8)


FAT_TREE = """
topology:
  name: fat_tree
  params: {hosts_per_leaf: 2, leaves: 2, spines: 1, host_bandwidth: 10GB/s,
           uplink_bandwidth: 10GB/s, host_latency: 0us, uplink_latency: 0us}
"""

SCENARIO = FAT_TREE + """jobs:
  - {name: a, collective: allreduce, algorithm: ring, size: 256MiB, ranks: "0,2"}
  - {name: b, collective: allreduce, algorithm: ring, size: 256MiB, ranks: "1,3"}
"""


def test_the_jobs_section_runs_them_together():
    frame = run_study(read_scenario(SCENARIO, "j.yaml")).frame
    assert list(frame["job"]) == ["a", "b"]
    assert frame["slowdown"].tolist() == pytest.approx([2.0, 2.0], rel=1e-9)


def test_a_job_on_missing_ranks_names_the_file_and_key():
    with pytest.raises(ConfigError, match=r"j.yaml.*jobs.*ranks"):
        run_study(read_scenario(SCENARIO.replace('"1,3"', '"1,9"'), "j.yaml"))


# -- training and LLM jobs ------------------------------------------------------------------------

V100 = "v100-sxm2-16gb"


def _training_reference(graph, model, gpus, aggregation, **kw):
    from simulator.workload.compute import compute_profile
    from simulator.workload.models import get_model
    from simulator.workload.training import simulate_training

    profile = compute_profile(model, V100, 32, "fp32")
    grads = [layer.params * 4 for layer in get_model(model).layers]
    return simulate_training(graph, profile, gpus=gpus, batch_per_gpu=32,
                             aggregation=aggregation, model_name=model, gradient_bytes=grads,
                             **kw).row["iteration_s"]


@pytest.mark.parametrize("aggregation", ["ring", "halving_doubling"])
def test_a_training_job_alone_is_simulate_trainings_iteration(aggregation):
    graph = _fat_tree()
    expected = _training_reference(graph, "resnet50", 4, aggregation)
    job = TrainingJob("t", "resnet50", (0, 1, 2, 3), aggregation=aggregation, device=V100,
                      iterations=3)
    row = run_jobs(graph, [job]).jobs.iloc[0]
    assert row["kind"] == "training" and row["model"] == "resnet50"
    assert math.isclose(row["alone_s"], 3 * expected, rel_tol=1e-9)
    assert row["slowdown"] == 1.0


def test_a_collective_loop_doubles_a_training_jobs_exposed_all_reduce():
    """Without overlap the training job computes C, then all-reduces its G gradient bytes over
    one leaf uplink each way (a 2-rank ring: G / bw alone), then steps its optimizer. A ring
    loop on the other two hosts, running all along, halves the uplinks for the all-reduce: it
    takes 2 G / bw, and the loop loses G / bw of progress while they share."""
    graph = _fat_tree()
    train = TrainingJob("t", "resnet50", (0, 2), device=V100, overlap=False)
    plan = train.plan(graph)
    compute = plan.forward_s + plan.backward_s
    wire = plan.gradient_bytes / (10 * GB)
    n = 64 << 20
    loops = math.ceil((compute + 2 * wire) / (n / (10 * GB))) + 2
    bench = CollectiveJob("b", "allreduce", "ring", n, (1, 3), iterations=loops)
    rows = run_jobs(graph, [train, bench]).jobs.set_index("job")
    assert math.isclose(rows.loc["t", "alone_s"], compute + wire + plan.optimizer_s,
                        rel_tol=1e-9)
    assert math.isclose(rows.loc["t", "together_s"], compute + 2 * wire + plan.optimizer_s,
                        rel_tol=1e-9)
    assert math.isclose(rows.loc["b", "together_s"], rows.loc["b", "alone_s"] + wire,
                        rel_tol=1e-9)
    assert rows.loc["t", "size_bytes"] == plan.gradient_bytes


def test_a_training_job_inside_its_leaf_is_not_slowed():
    train = TrainingJob("t", "resnet50", (0, 1), device=V100, overlap=False)
    bench = CollectiveJob("b", "allreduce", "ring", 256 << 20, (2, 3), iterations=20)
    result = run_jobs(_fat_tree(), [train, bench])
    assert result.shared_links.empty
    assert result.jobs["slowdown"].tolist() == [1.0, 1.0]


def test_a_one_gpu_training_job_only_computes():
    job = TrainingJob("t", "resnet50", (3,), device=V100, iterations=2)
    plan = job.plan(_fat_tree())
    row = run_jobs(_fat_tree(), [job]).jobs.iloc[0]
    assert math.isclose(row["alone_s"], 2 * plan.compute_s, rel_tol=1e-12)


def test_a_training_job_owns_its_gpus():
    train = TrainingJob("t", "resnet50", (0, 1), device=V100)
    bench = CollectiveJob("b", "allreduce", "ring", 1 << 20, (1, 2))
    with pytest.raises(ConfigError, match=r"jobs.b.ranks: endpoint 1 belongs to training job"):
        run_jobs(_fat_tree(), [train, bench])


def _oversubscribed():
    # four DGX A100, two per leaf, 2 x 400 Gb/s up per leaf for 16 x 200 Gb/s down (4:1)
    return load_topology("dgx-a100-2node", {"nodes": 4, "fabric": "fat_tree",
                                            "nics_per_leaf": 16, "spines": 2,
                                            "uplink_bandwidth": "400 Gbps"})


def test_an_llm_job_alone_is_simulate_steps_step():
    from simulator.workload.llm.layout import Layout
    from simulator.workload.llm.step import simulate_step

    graph = _oversubscribed()
    layout = Layout(tp=4, dp=2, global_batch=8)
    step = simulate_step(graph, "gpt3-350m", layout).row["step_time_s"]
    job = LlmJob("l", "gpt3-350m", layout, tuple(range(8)), iterations=2)
    row = run_jobs(graph, [job]).jobs.iloc[0]
    assert row["kind"] == "llm" and row["algorithm"].startswith("tp4 cp1 ep1 pp1 dp2")
    assert math.isclose(row["alone_s"], 2 * step, rel_tol=1e-9)
    assert row["size_bytes"] > 0


def test_an_llm_job_meets_a_collective_loop_only_across_the_leaves():
    from simulator.workload.llm.layout import Layout

    graph = _oversubscribed()
    layout = Layout(tp=8, dp=2, global_batch=8)
    llm = LlmJob("l", "gpt3-350m", layout, tuple(range(0, 8)) + tuple(range(16, 24)))
    across = CollectiveJob("c", "allreduce", "halving_doubling", 1 << 30,
                           tuple(range(8, 16)) + tuple(range(24, 32)))
    result = run_jobs(graph, [llm, across])
    rows = result.jobs.set_index("job")
    assert rows.loc["l", "slowdown"] > 1.0 and rows.loc["c", "slowdown"] > 1.0
    assert set(result.shared_links["link"].str.contains("spine")) == {True}
    # the same loop inside machines 1 and 3's own leaves' ports never meets the LLM's traffic
    inside = CollectiveJob("c", "allreduce", "halving_doubling", 1 << 30, tuple(range(8, 16)))
    result = run_jobs(graph, [llm, inside])
    assert result.shared_links.empty
    assert result.jobs["slowdown"].tolist() == [1.0, 1.0]


MIXED = FAT_TREE + """jobs:
  - {name: t, kind: training, model: resnet50, device: v100-sxm2-16gb, overlap: false,
     ranks: "0,2"}
  - {name: b, collective: allreduce, algorithm: ring, size: 64MiB, iterations: 30,
     ranks: "1,3"}
"""


def test_the_jobs_section_runs_a_training_job_beside_a_loop():
    frame = run_study(read_scenario(MIXED, "m.yaml")).frame
    assert frame["kind"].tolist() == ["training", "collective"]
    assert (frame["slowdown"] > 1.0).all()


@pytest.mark.parametrize("old, new, words", [
    ("kind: training,", "kind: train,", r"m.yaml:\d+: jobs.0.kind: expected one of collective, "
                                         r"training, llm, got 'train'"),
    ("overlap: false", "size: 1MiB", r"m.yaml:\d+: jobs.0.size: unknown key 'size'; valid: name, "
                                     r"kind, model"),
    ("overlap: false", "aggregation: ps", r"jobs.0.aggregation: a training job aggregates "
                                          r"with an all-reduce algorithm"),
    ("model: resnet50", "model: resnet5", r"jobs.0.model: expected one of"),
    ('ranks: "1,3"', 'ranks: "1,2"', r"m.yaml: jobs.b.ranks: endpoint 2 belongs to training "
                                     r"job 't'"),
    ("kind: training, model: resnet50, device: v100-sxm2-16gb, overlap: false",
     "kind: llm, model: gpt3-350m, tp: 4, global_batch: 8",
     r"m.yaml:\d+: jobs.0: 2 ranks are not a multiple of tp 4"),
])
def test_a_bad_job_is_one_line_naming_file_and_key(old, new, words):
    assert old in MIXED
    with pytest.raises(ConfigError, match=words) as caught:
        run_study(read_scenario(MIXED.replace(old, new), "m.yaml"))
    assert "\n" not in str(caught.value)


def test_an_llm_job_states_its_expert_tensor_parallelism():
    from simulator.scenario import read_scenario as read

    text = _HGX_B200 + """jobs:
  - {name: moe, kind: llm, model: qwen3-30b-a3b, tp: 2, ep: 8, expert_tp: 1, global_batch: 4,
     sequence_parallel: true, distributed_optimizer: true, precision: fp8, ranks: "0-7"}
"""
    job = read(text, "m.yaml").study[0]
    layout = job.layout(8)
    assert (layout.tp, layout.ep, layout.expert_tp, layout.edp) == (2, 8, 1, 1)
    with pytest.raises(ConfigError, match=r"m.yaml:\d+: jobs.0.expert_tp"):
        read(text.replace("expert_tp: 1", "expert_tp: 0"), "m.yaml")
    assert layout.dispatcher == "alltoall"
    hybrid = read(text.replace("expert_tp: 1,", "expert_tp: 1, dispatcher: hybridep,"), "m.yaml")
    assert hybrid.study[0].layout(8).dispatcher == "hybridep"
    assert layout.ep_overlap is False
    hidden = read(text.replace("expert_tp: 1,", "expert_tp: 1, ep_overlap: true,"), "m.yaml")
    assert hidden.study[0].layout(8).ep_overlap is True
    with pytest.raises(ConfigError, match=r"m.yaml:\d+: jobs.0.dispatcher.*hybridep"):
        read(text.replace("expert_tp: 1,", "expert_tp: 1, dispatcher: allgather,"), "m.yaml")
    assert layout.fp8_recipe == "delayed"
    mx = read(text.replace("expert_tp: 1,", "expert_tp: 1, fp8_recipe: mxfp8,"), "m.yaml")
    assert mx.study[0].layout(8).fp8_recipe == "mxfp8"
    with pytest.raises(ConfigError, match=r"m.yaml:\d+: jobs.0.fp8_recipe.*tensorwise"):
        read(text.replace("expert_tp: 1,", "expert_tp: 1, fp8_recipe: hybrid,"), "m.yaml")


_HGX_B200 = """name: moe
topology: hgx-b200
"""


def test_the_mixed_example_scenario_validates():
    from pathlib import Path

    from simulator.scenario import load_scenario

    scenario = load_scenario(str(Path(__file__).parent.parent / "scenarios" / "jobs_mixed.yaml"))
    assert [j.kind for j in scenario.study] == ["llm", "training", "collective"]
