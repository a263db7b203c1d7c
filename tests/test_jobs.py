"""Several collective loops on one fabric: slowdowns against hand-derived max-min answers."""

import math

import pytest

from simulator.errors import ConfigError
from simulator.scenario import read_scenario, run_study
from simulator.topology import load_topology
from simulator.workload.jobs import CollectiveJob, parse_ranks, run_jobs

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


SCENARIO = """
topology:
  name: fat_tree
  params: {hosts_per_leaf: 2, leaves: 2, spines: 1, host_bandwidth: 10GB/s,
           uplink_bandwidth: 10GB/s, host_latency: 0us, uplink_latency: 0us}
jobs:
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
