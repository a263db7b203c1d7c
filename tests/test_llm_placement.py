"""Ranks, groups and endpoints of a hybrid-parallel layout (Megatron's order)."""

import pytest

from simulator.errors import ConfigError
from simulator.topology import load_topology
from simulator.workload.llm.layout import Layout
from simulator.workload.llm.placement import parse_order, place


def topo(nodes=2):
    return load_topology("dgx-a100-2node", {"nodes": str(nodes)})


def test_megatron_order_groups():
    pl = place(topo(), Layout(tp=2, dp=2, pp=2))
    assert pl.groups("tp") == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert pl.groups("dp") == [(0, 2), (1, 3), (4, 6), (5, 7)]
    assert pl.groups("pp") == [(0, 4), (1, 5), (2, 6), (3, 7)]
    assert pl.coords(7) == {"tp": 1, "cp": 0, "dp": 1, "pp": 1, "etp": 1, "ep": 0, "edp": 1}


def test_cp_between_tp_and_dp():
    pl = place(topo(), Layout(tp=2, cp=2, dp=2))
    assert pl.groups("cp")[0] == (0, 2)
    assert pl.groups("dp")[0] == (0, 4)


def test_ep_carved_from_cp_dp():
    pl = place(topo(), Layout(tp=2, dp=4, ep=2))
    assert pl.groups("ep") == [(0, 2), (1, 3), (4, 6), (5, 7)]
    pl = place(topo(), Layout(tp=1, cp=2, dp=4, ep=4))
    assert pl.groups("ep") == [(0, 1, 2, 3), (4, 5, 6, 7)]


def test_expert_tp_1_folds_expert_groups_across_tensor_ranks():
    # Megatron's expert rank generator (tp=expert_tp, ep, dp=expert dp, cp=1): with expert_tp 1
    # a stage's ranks in tp-cp-dp order are cut straight into expert groups
    pl = place(topo(), Layout(tp=2, dp=4, ep=4, expert_tp=1))
    assert pl.groups("ep") == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert pl.groups("etp") == [(r,) for r in range(8)]
    assert pl.coords(5) == {"tp": 1, "cp": 0, "dp": 2, "pp": 0, "etp": 0, "ep": 1, "edp": 1}
    assert pl.replica_unit == 2            # an expert group of 4 spans two tp-2 replicas
    pl = place(topo(), Layout(tp=2, dp=4, ep=8, expert_tp=1))
    assert pl.groups("ep") == [tuple(range(8))]
    # expert_tp = tp is the default and gives the old groups
    assert place(topo(), Layout(tp=2, dp=4, ep=2, expert_tp=2)).groups("ep") == \
        place(topo(), Layout(tp=2, dp=4, ep=2)).groups("ep") == [(0, 2), (1, 3), (4, 6), (5, 7)]
    assert place(topo(), Layout(tp=2, dp=4, ep=2)).groups("etp")[0] == (0, 1)
    with pytest.raises(ConfigError, match="expert-tp 1 x --ep 16"):
        place(topo(), Layout(tp=2, dp=4, ep=16, expert_tp=1))
    with pytest.raises(ConfigError, match="--ep 8 must divide cp x dp = 4"):
        place(topo(), Layout(tp=2, dp=4, ep=8))


def test_order_override():
    pl = place(topo(), Layout(tp=2, dp=2, pp=2, order="tp-pp-dp"))
    assert pl.groups("pp")[0] == (0, 2)
    assert pl.groups("dp")[0] == (0, 4)
    assert parse_order("dp-tp") == ("dp", "tp", "cp", "pp")
    with pytest.raises(ConfigError, match="rank order"):
        parse_order("tp-xx")


def test_every_rank_in_one_group_of_each_kind():
    pl = place(topo(4), Layout(tp=4, cp=2, dp=2, pp=2, ep=2))
    for kind in ("tp", "cp", "dp", "pp", "ep"):
        ranks = sorted(r for g in pl.groups(kind) for r in g)
        assert ranks == list(range(32)), kind


def test_ranks_on_endpoints_node_major():
    pl = place(topo(2), Layout(tp=8, dp=2))
    assert pl.node[:2] == ("n0.gpu0", "n0.gpu1")
    assert pl.node[8] == "n1.gpu0"
    assert set(pl.machines(topo(2), pl.groups("tp")[1])) == {1}


def test_too_few_gpus_names_the_param():
    with pytest.raises(ConfigError) as err:
        place(topo(2), Layout(tp=8, pp=8, dp=16))
    msg = str(err.value)
    assert "needs 1024 GPUs" in msg and "has 16" in msg and "--param nodes=128" in msg
    assert "\n" not in msg


def test_ep_must_divide():
    with pytest.raises(ConfigError, match="--ep 3"):
        place(topo(2), Layout(dp=4, ep=3))
