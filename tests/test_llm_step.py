"""The hybrid-parallel step runner against closed forms and against `collective`.

Every StepWork here is built by hand (tests/llm_work.py), so these tests do not depend on the
LLM cost model."""

import math

import pytest

from simulator.collective import run_collective
from simulator.errors import ConfigError
from simulator.topology import build, load_topology
from simulator.workload.llm.layout import Layout
from simulator.workload.llm.step import simulate_step
from simulator.workload.llm.schedule import stage_orders
from simulator.workload.llm.work import Comm, Op

from llm_work import make_work

REL = 1e-9


def dgx(nodes):
    return load_topology("dgx-a100-2node", {"nodes": str(nodes)})


def free_net(hosts):
    """Hosts on a switch with no latency and huge links: communication is (almost) free."""
    return build("star", {"hosts": hosts, "link_latency": 0, "link_bandwidth": "1e18 B/s"})


def test_one_tp_group_equals_collective():
    g = dgx(1)
    size = 64 << 20
    lay = Layout(tp=8, global_batch=1)
    work = make_work(1, 1, 1, fwd=0.0, bwd=0.0, tp_comm=size, layers=1, grad=0, param=0,
                     opt=0.0)
    want = run_collective(g, "allreduce", "auto", size, gpus=8, library="default",
                          engine="auto").row["time_s"]
    for mode in ("flows", "duration"):
        got = simulate_step(g, "toy", lay, work=work, tp_mode=mode,
                            representative=False).row["step_time_s"]
        assert got == pytest.approx(2 * want, rel=REL)   # one in forward, one in backward


def test_tp_flows_equal_durations_inside_machines():
    g = dgx(4)
    lay = Layout(tp=8, pp=2, dp=2, global_batch=8, bucket_bytes=40 << 20)
    work = make_work(2, 1, 4, tp_comm=8 << 20)
    a = simulate_step(g, "toy", lay, work=work, tp_mode="flows", representative=False)
    b = simulate_step(g, "toy", lay, work=work, tp_mode="duration", representative=False)
    assert a.row["step_time_s"] == pytest.approx(b.row["step_time_s"], rel=REL)
    assert a.row["exposed_tp_s"] == pytest.approx(b.row["exposed_tp_s"], rel=REL)


@pytest.mark.parametrize("pipeline", ["gpipe", "1f1b"])
@pytest.mark.parametrize("p,m", [(2, 1), (4, 8), (4, 3), (8, 16)])
def test_pipeline_bubble(pipeline, p, m):
    g = free_net(p)
    tf, tb = 1e-3, 2e-3
    lay = Layout(pp=p, global_batch=m, pipeline=pipeline)
    work = make_work(p, 1, m, fwd=tf, bwd=tb, act=1, grad=0, param=0, opt=0.0)
    r = simulate_step(g, "toy", lay, work=work, library="ideal")
    step = r.row["step_time_s"]
    assert step == pytest.approx((m + p - 1) * (tf + tb), rel=1e-6)
    assert r.row["bubble_s"] / step == pytest.approx((p - 1) / (m + p - 1), rel=1e-5)


@pytest.mark.parametrize("p,v,m", [(2, 2, 4), (4, 2, 8), (4, 4, 8), (4, 3, 12)])
def test_interleaved_bubble(p, v, m):
    g = free_net(p)
    tf, tb = 1e-3, 2e-3              # per chunk
    lay = Layout(pp=p, virtual_stages=v, global_batch=m, pipeline="interleaved")
    work = make_work(p, v, m, fwd=tf, bwd=tb, act=1, grad=0, param=0, opt=0.0)
    r = simulate_step(g, "toy", lay, work=work, library="ideal")
    ideal = m * v * (tf + tb)
    bubble = r.row["step_time_s"] - ideal
    assert bubble / ideal == pytest.approx((p - 1) / (v * m), rel=1e-5)
    assert r.row["bubble_s"] == pytest.approx(bubble, rel=1e-5)


def test_interleaved_needs_multiple_of_stages():
    with pytest.raises(ConfigError, match="multiple"):
        stage_orders("interleaved", 4, 6, 2)


def test_interleaved_order_each_op_once():
    for ops in stage_orders("interleaved", 4, 8, 3):
        assert sorted(ops) == sorted({(k, i, d) for k in range(3) for i in range(8)
                                      for d in "FB"})


@pytest.mark.parametrize("zero,coll", [(0, "allreduce"), (1, "reduce_scatter")])
def test_dp_only_zero_compute_is_the_bucket_collectives(zero, coll):
    g = dgx(2)
    bucket = 32 << 20
    lay = Layout(dp=16, global_batch=16, zero_stage=zero, bucket_bytes=bucket)
    work = make_work(1, 1, 1, fwd=0.0, bwd=0.0, grad=3 * bucket, opt=0.0)
    one = run_collective(g, coll, "auto", bucket, gpus=16, library="default",
                         engine="auto").row["time_s"]
    want = 3 * one
    if zero:
        want += 3 * run_collective(g, "allgather", "auto", bucket, gpus=16, library="default",
                                   engine="auto").row["time_s"]
    r = simulate_step(g, "toy", lay, work=work)
    assert r.row["step_time_s"] == pytest.approx(want, rel=REL)
    assert r.row["exposed_dp_s"] == pytest.approx(want, rel=REL)


def test_dp_buckets_overlap_backward():
    g = dgx(2)
    bucket = 32 << 20
    lay = Layout(dp=16, global_batch=16, bucket_bytes=bucket)
    one = run_collective(g, "allreduce", "auto", bucket, gpus=16, library="default",
                         engine="auto").row["time_s"]
    bwd = 10 * one
    work = make_work(1, 1, 1, fwd=0.0, bwd=bwd, grad=4 * bucket, opt=0.0, layers=1)
    r = simulate_step(g, "toy", lay, work=work)
    # buckets ready at 1/4, 2/4, 3/4 and the end of backward: only the last is exposed
    assert r.row["step_time_s"] == pytest.approx(bwd + one, rel=REL)


def test_two_dp_groups_sharing_a_nic_slow_each_other():
    g = build("gpu_cluster", {"nodes": 2, "gpus_per_node": 2, "nics_per_node": 1})
    size = 256 << 20
    work = make_work(1, 1, 1, fwd=0.0, bwd=0.0, grad=size, opt=0.0)
    # alone: one group with one GPU per machine
    from simulator.workload.llm.groups import GroupCoster
    coster = GroupCoster(g, "default")
    t_alone = coster.time_s("allreduce", ["n0.gpu0", "n1.gpu0"], size)
    lay = Layout(tp=2, dp=2, global_batch=2, bucket_bytes=size)
    r = simulate_step(g, "toy", lay, work=work, tp_mode="flows", representative=False)
    nic = g.edges["n0.nic0", "switch"]["bandwidth_bytes_per_s"]
    # each group's ring edge carries 2(n-1)/n S = S bytes per direction; two share the NIC
    want = max(t_alone, 2 * size / nic)
    assert 2 * size / nic > t_alone          # the NIC binds
    assert r.row["step_time_s"] == pytest.approx(want, rel=REL)


@pytest.mark.parametrize("pipeline,v", [("1f1b", 1), ("interleaved", 2), ("gpipe", 1)])
@pytest.mark.parametrize("zero", [0, 1, 3])
def test_representative_equals_full(pipeline, v, zero):
    g = dgx(4)
    lay = Layout(tp=4, pp=2, dp=4, global_batch=16, pipeline=pipeline, virtual_stages=v,
                 zero_stage=zero, bucket_bytes=30 << 20)
    work = make_work(2, v, 4, tp_comm=4 << 20, act=8 << 20)
    full = simulate_step(g, "toy", lay, work=work, representative=False)
    rep = simulate_step(g, "toy", lay, work=work, representative=True)
    # tp index 0 (a quarter), and two of its four replicas (two share a machine: they fold
    # by pairs)
    assert full.simulated_ranks == 32 and rep.simulated_ranks == 4
    for key in ("step_time_s", "compute_s", "exposed_tp_s", "exposed_pp_s", "exposed_dp_s",
                "bubble_s"):
        assert rep.row[key] == pytest.approx(full.row[key], rel=REL, abs=1e-15), key
    fb = full.breakdown.set_index("rank")
    for _, row in rep.breakdown.iterrows():
        assert row["end_s"] == pytest.approx(fb.loc[row["rank"], "end_s"], rel=REL)


def test_representative_refused_when_tp_ranks_share_a_nic():
    g = build("gpu_cluster", {"nodes": 2, "gpus_per_node": 2, "nics_per_node": 1})
    lay = Layout(tp=2, dp=2, global_batch=2)
    with pytest.raises(ConfigError, match="share"):
        simulate_step(g, "toy", lay, work=make_work(1, 1, 1), representative=True)


def test_cp_and_ep_collectives_run_as_flows():
    g = dgx(2)
    extra = (Op("ep.dispatch", "ep", comm=Comm("ep", "alltoall", 4 << 20)),
             Op("cp.ring", "cp", comm=Comm("cp", "allgather", 4 << 20, overlapped=True)))
    lay = Layout(tp=4, cp=2, ep=2, dp=2, global_batch=4)
    work = make_work(1, 1, 2, extra=extra)
    r = simulate_step(g, "toy", lay, work=work, record_trace=True)
    assert r.row["exposed_ep_s"] > 0
    assert {"ep", "cp", "dp"} <= set(r.traffic["group"])
    names = {e.get("cat") for e in r.trace["traceEvents"]}
    assert {"compute", "ep", "dp"} <= names


def test_row_columns_and_mfu():
    from simulator.workload.llm.step import STEP_COLUMNS

    g = dgx(2)
    lay = Layout(tp=8, dp=2, global_batch=4)
    r = simulate_step(g, "toy", lay, work=make_work(1, 1, 2, tp_comm=1 << 20))
    assert set(STEP_COLUMNS) <= set(r.row)
    t = r.row["step_time_s"]
    assert r.row["mfu_pct"] == pytest.approx(100 * 1e15 / (16 * 312e12 * t))
    assert r.row["tokens_per_s"] == pytest.approx(1000 / t)
    assert not math.isnan(r.row["busiest_link_utilisation"])


def test_too_few_gpus_is_one_line():
    with pytest.raises(ConfigError, match=r"needs 64 GPUs.*--param nodes=8"):
        simulate_step(dgx(2), "toy", Layout(tp=8, pp=8), work=make_work(8, 1, 1))


def test_cli_errors_are_one_line(capsys):
    from simulator.cli.commands import main

    rc = main(["llm", "--model", "gpt3-175b", "--topology", "dgx-a100-2node", "--tp", "8",
               "--pp", "8", "--dp", "16", "--global-batch", "1536"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "--param nodes=128" in err
    rc = main(["llm", "--model", "gpt3-175b", "--topology", "dgx-a100-2node", "--dp", "16",
               "--global-batch", "100"])
    err = capsys.readouterr().err
    assert rc == 2 and "multiple" in err


# -- folded data-parallel replicas -----------------------------------------------------------

def _same_step(a, b):
    """Two results of one step agree on everything a user reads."""
    for key in ("step_time_s", "compute_s", "exposed_tp_s", "exposed_cp_s", "exposed_ep_s",
                "exposed_pp_s", "exposed_dp_s", "bubble_s", "optimizer_s",
                "busiest_link_utilisation"):
        assert a.row[key] == pytest.approx(b.row[key], rel=REL, abs=1e-15), key
    assert a.row["busiest_link"] == b.row["busiest_link"]
    ta, tb = a.traffic.set_index("group")["bytes"], b.traffic.set_index("group")["bytes"]
    assert set(ta.index) == set(tb.index)
    for k in ta.index:
        assert ta[k] == pytest.approx(tb[k], rel=REL), k
    ends = b.breakdown.set_index("rank")["end_s"]
    for _, row in a.breakdown.iterrows():
        assert row["end_s"] == pytest.approx(ends[row["rank"]], rel=REL)


CP_RING = (Op("cp.ring", "cp", comm=Comm("cp", "allgather", 6 << 20)),)
EP_A2A = (Op("ep.dispatch", "ep", comm=Comm("ep", "alltoall", 6 << 20)),)


@pytest.mark.parametrize("layout, extra, simulated", [
    # one GPU per replica, 8 replicas per machine: folded onto the 8 of machine 0
    (Layout(dp=32, global_batch=32, bucket_bytes=40 << 20), (), 8),
    # the data-parallel ring over dp x cp with ZeRO-3 gathers; replicas of 2 GPUs
    (Layout(cp=2, dp=16, global_batch=16, zero_stage=3, bucket_bytes=40 << 20), CP_RING, 8),
    # tp index 0 only, and its pipeline of 2 stages over interleaved chunks; a replica is
    # one machine per stage
    (Layout(tp=8, pp=2, dp=2, virtual_stages=2, pipeline="interleaved", global_batch=8,
            distributed_optimizer=True, bucket_bytes=40 << 20), (), 2),
    # expert groups of 4 over cp 1: 4 consecutive replicas are one unit
    (Layout(ep=4, dp=32, global_batch=32, zero_stage=1, bucket_bytes=40 << 20), EP_A2A, 8),
], ids=["dp-only", "cp-zero3", "tp-pp-interleaved", "ep-spans-replicas"])
def test_folded_replicas_equal_every_replica(layout, extra, simulated):
    g = load_topology("hgx-h100", {"nodes": "4"})
    v = layout.virtual_stages
    work = make_work(layout.pp, v, layout.global_batch // layout.dp, act=4 << 20,
                     grad=90 << 20, param=90 << 20, tp_comm=2 << 20 if layout.tp > 1 else 0,
                     extra=extra)
    full = simulate_step(g, "toy", layout, work=work, representative=False)
    folded = simulate_step(g, "toy", layout, work=work)
    assert full.simulated_ranks == 32 and folded.simulated_ranks == simulated
    assert any("folded onto" in n for n in folded.notes), folded.notes
    _same_step(folded, full)


def test_fold_refused_where_replicas_see_different_links():
    # machine 1's NIC is half as fast: the replicas' paths differ, every replica runs
    g = build("gpu_cluster", {"nodes": 4, "gpus_per_node": 1, "nics_per_node": 1})
    for e in (("n1.nic0", "switch"), ("switch", "n1.nic0")):
        g.edges[e]["bandwidth_bytes_per_s"] /= 2
    lay = Layout(dp=4, global_batch=4, bucket_bytes=40 << 20)
    work = make_work(1, 1, 1, grad=90 << 20)
    r = simulate_step(g, "toy", lay, work=work)
    assert r.simulated_ranks == 4
    assert any("not the same in every replica" in n for n in r.notes), r.notes
    # the same machines on a symmetric star fold onto one
    sym = build("gpu_cluster", {"nodes": 4, "gpus_per_node": 1, "nics_per_node": 1})
    assert simulate_step(sym, "toy", lay, work=work).simulated_ranks == 1


@pytest.mark.parametrize("per_leaf, simulated", [(2, 2), (3, 4)])
def test_fold_on_a_fat_tree_by_whole_leaves(per_leaf, simulated):
    # 2 machines per leaf: replica 0 -> 1 stays in a leaf, 1 -> 2 crosses the spine, so the
    # replicas fold by leaves (onto 2); leaves of 3 and 1 machines do not fold at all
    g = build("gpu_cluster", {"nodes": 4, "gpus_per_node": 1, "nics_per_node": 1,
                              "fabric": "fat_tree", "nics_per_leaf": per_leaf, "spines": 1,
                              "uplink_bandwidth": "50 Gbps"})
    lay = Layout(dp=4, global_batch=4, bucket_bytes=40 << 20)
    work = make_work(1, 1, 1, grad=90 << 20)
    full = simulate_step(g, "toy", lay, work=work, representative=False)
    r = simulate_step(g, "toy", lay, work=work)
    assert r.simulated_ranks == simulated
    _same_step(r, full)


def test_unchecked_path_reruns_every_replica(monkeypatch):
    from simulator.workload.llm import groups

    g = load_topology("hgx-h100", {"nodes": "2"})
    lay = Layout(dp=16, global_batch=16, bucket_bytes=40 << 20)
    work = make_work(1, 1, 1, grad=90 << 20)
    full = simulate_step(g, "toy", lay, work=work, representative=False)
    monkeypatch.setattr(groups.ReplicaFold, "check", lambda self, pairs: "")
    r = simulate_step(g, "toy", lay, work=work)
    assert r.simulated_ranks == 16
    assert any("was not checked" in n for n in r.notes), r.notes
    _same_step(r, full)
