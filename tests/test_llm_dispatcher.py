"""The MoE token dispatchers: Megatron-Core's all-to-all of every token-expert copy against
Hybrid-EP (a token crosses to another machine once, to its own rail, then NVLink to each GPU
holding one of its experts)."""

import math

import numpy as np
import pytest

from simulator.cli import main
from simulator.comparison.llm import row_layout
from simulator.errors import ConfigError
from simulator.topology import load_topology
from simulator.workload.llm.costs import hit_probability, step_work
from simulator.workload.llm.layout import Layout, check_layout
from simulator.workload.llm.placement import place
from simulator.workload.llm.registry import get_llm_model
from simulator.workload.llm.step import _Step, simulate_step

from llm_work import make_work

QWEN = get_llm_model("qwen3-30b-a3b")            # 128 experts, top-8, hidden 2048


@pytest.mark.parametrize("experts,k,held", [(128, 8, 64), (128, 8, 8), (64, 6, 16), (8, 2, 1)])
def test_hit_probability_is_the_hypergeometric_complement(experts, k, held):
    want = 1 - math.comb(experts - held, k) / math.comb(experts, k)
    assert hit_probability(experts, k, held) == pytest.approx(want, rel=1e-12)
    assert hit_probability(experts, k, experts) == 1.0
    assert hit_probability(experts, k, 0) == 0.0
    assert hit_probability(experts, 1, held) == pytest.approx(held / experts)


def test_hit_probability_counts_what_routed_tokens_hit():
    """Route 20,000 tokens to top-8 of 128 experts spread over 16 GPUs on 2 machines (balanced,
    uniform, as the published runs force it) and count the distinct machines and GPUs each
    token reaches: the means are the dispatcher's per-token rows."""
    rng = np.random.default_rng(7)
    experts, k, gpus, machines = 128, 8, 16, 2
    picks = np.argsort(rng.random((20_000, experts)), axis=1)[:, :k]
    gpu = picks // (experts // gpus)
    machine = picks // (experts // machines)
    gpus_hit = np.array([len(set(row)) for row in gpu])
    other_machine = (machine != 0).any(axis=1)          # a token of machine 0 leaving it
    se = 4 / math.sqrt(len(picks))
    assert gpus_hit.mean() / gpus == pytest.approx(
        hit_probability(experts, k, experts / gpus), abs=se)
    assert other_machine.mean() == pytest.approx(
        hit_probability(experts, k, experts / machines), abs=se)


def _exchanges(chunk, prefix="l0.moe.ep."):
    return [(o.name, o.comm.group if o.comm else o.kind, o.comm.size_bytes if o.comm else None)
            for o in chunk.forward + chunk.backward if o.name.startswith(prefix)]


def test_hybridep_sends_once_per_machine_and_once_per_gpu():
    lay = Layout(ep=16, dp=16, global_batch=16, dispatcher="hybridep")
    chunk = step_work(QWEN, lay, "h100-sxm5-80gb", ep_machines=2).chunks[(0, 0)]
    t, row = QWEN.seq_len, QWEN.hidden * 2
    to_machine = round(t * hit_probability(128, 8, 64) * row)
    landed = 16 * t * hit_probability(128, 8, 8)
    to_gpu = round(landed * row / 8)
    assert [(n, g) for n, g, _ in _exchanges(chunk)] == [
        ("l0.moe.ep.dispatch.rdma", "ep_rail"), ("l0.moe.ep.dispatch.nvl", "ep_node"),
        ("l0.moe.ep.dispatch.copy", "elementwise"),
        ("l0.moe.ep.combine.copy", "elementwise"), ("l0.moe.ep.combine.nvl", "ep_node"),
        ("l0.moe.ep.combine.rdma", "ep_rail"),
        ("l0.moe.ep.combine.bwd.rdma", "ep_rail"), ("l0.moe.ep.combine.bwd.nvl", "ep_node"),
        ("l0.moe.ep.combine.bwd.copy", "elementwise"),
        ("l0.moe.ep.dispatch.bwd.copy", "elementwise"),
        ("l0.moe.ep.dispatch.bwd.nvl", "ep_node"), ("l0.moe.ep.dispatch.bwd.rdma", "ep_rail")]
    sizes = {n: s for n, _, s in _exchanges(chunk)}
    assert sizes["l0.moe.ep.dispatch.rdma"] == 2 * to_machine
    assert sizes["l0.moe.ep.dispatch.nvl"] == 8 * to_gpu
    # the same layout with NCCL's all-to-all: one exchange of every token-expert copy
    plain = step_work(QWEN, Layout(ep=16, dp=16, global_batch=16), "h100-sxm5-80gb",
                      ep_machines=2).chunks[(0, 0)]
    assert _exchanges(plain)[0] == ("l0.moe.ep.dispatch", "ep", t * 8 * row)
    # half of a token's 8 copies leave its machine under all-to-all; under hybridep at most one
    assert (t * 8 * row / 2) / (to_machine) > 3.9
    # one machine: no rail exchange, the NVLink one over the whole group
    one = step_work(QWEN, Layout(ep=8, dp=8, global_batch=8, dispatcher="hybridep"),
                    "b200-sxm-180gb").chunks[(0, 0)]
    names = [n for n, _, _ in _exchanges(one)]
    assert not any(n.endswith(".rdma") for n in names)
    assert dict((n, s) for n, _, s in _exchanges(one))["l0.moe.ep.dispatch.nvl"] == \
        8 * round(8 * t * hit_probability(128, 8, 16) * row / 8)


def test_hybridep_groups_are_rails_and_machines():
    g = load_topology("hgx-h100", {"nodes": "4"})
    lay = Layout(ep=16, dp=32, global_batch=32, dispatcher="hybridep")
    pl = place(g, lay)
    step = _Step(g, lay, make_work(1, 1, 1), pl, "default", "duration", False, False)
    for r in (0, 5, 13, 16, 31):
        ep = step.group("ep", r)
        node = step.group("ep_node", r)
        rail = step.group("ep_rail", r)
        assert r in node and r in rail and set(node) | set(rail) <= set(ep)
        assert len(set(pl.machines(g, node))) == 1 and len(node) == 8
        assert len(set(pl.machines(g, rail))) == len(rail) == 2
        assert {m % 8 for m in rail} == {r % 8}            # the same GPU on each machine


def test_hybridep_step_keeps_expert_traffic_off_the_nics():
    g = load_topology("hgx-h100", {"nodes": "2"})
    rows = {}
    for d in ("alltoall", "hybridep"):
        lay = Layout(ep=16, dp=16, global_batch=16, precision="fp8",
                     distributed_optimizer=True, dispatcher=d)
        r = simulate_step(g, "qwen3-30b-a3b", lay)
        rows[d] = r
        assert r.row["exposed_ep_s"] > 0
    traffic = rows["hybridep"].traffic.set_index("group")["bytes"]
    assert set(traffic.index) >= {"ep_rail", "ep_node"}
    plain = rows["alltoall"].traffic.set_index("group")["bytes"]["ep"]
    assert traffic["ep_rail"] < plain / 3.5        # about 4x fewer bytes between machines
    assert rows["hybridep"].row["step_time_s"] < rows["alltoall"].row["step_time_s"]


def test_dispatcher_refusals_name_the_choices(capsys):
    with pytest.raises(ConfigError, match="dispatcher 'allgather': expected one of alltoall, "
                                          "hybridep, deepep"):
        check_layout(QWEN, Layout(ep=8, dp=8, global_batch=8, dispatcher="allgather"))
    with pytest.raises(SystemExit) as out:
        main(["llm", "--model", "qwen3-30b-a3b", "--topology", "hgx-b200", "--ep", "8",
              "--dp", "8", "--global-batch", "8", "--dispatcher", "nccl"])
    assert out.value.code == 2
    assert "invalid choice: 'nccl'" in capsys.readouterr().err
    assert main(["llm", "--model", "qwen3-30b-a3b", "--topology", "hgx-b200",
                 "--global-batch", "8", "--search", "--dispatcher", "hybridep"]) == 2
    assert "--dispatcher is not searched" in capsys.readouterr().err
    row = {"model": "qwen3-30b-a3b", "gpus": 8, "tp": 1, "ep": 8, "global_batch": 8,
           "dispatcher": "HybridEP"}
    assert row_layout(row)[0].dispatcher == "hybridep"
    row["dispatcher"] = "allgather"
    with pytest.raises(ConfigError, match="dispatcher 'allgather': expected one of"):
        row_layout(row)


def test_ep_overlap_hides_the_exchanges_behind_the_chunks_compute():
    """Megatron-Core's 1F1B all-to-all overlap, as the model takes it: each chunk ends when both
    its compute and its expert exchanges have; compute is unchanged, the step shorter, and never
    shorter than its compute or its exchanges alone."""
    g = load_topology("hgx-h100", {"nodes": "2"})
    rows = {}
    for overlap in (False, True):
        lay = Layout(ep=16, dp=16, global_batch=64, precision="fp8", distributed_optimizer=True,
                     ep_overlap=overlap)
        rows[overlap] = simulate_step(g, "qwen3-30b-a3b", lay).row
    plain, hidden = rows[False], rows[True]
    assert hidden["compute_s"] == pytest.approx(plain["compute_s"], rel=1e-12)
    assert hidden["step_time_s"] < plain["step_time_s"] - 0.25 * plain["exposed_ep_s"]
    assert hidden["step_time_s"] >= max(plain["compute_s"], plain["exposed_ep_s"])
    assert hidden["exposed_ep_s"] < plain["exposed_ep_s"]


def test_ep_overlap_refusals_are_megatrons():
    base = dict(ep=8, dp=8, global_batch=8, ep_overlap=True)
    check_layout(QWEN, Layout(**base))
    with pytest.raises(ConfigError, match="needs expert parallelism"):
        check_layout(QWEN, Layout(**{**base, "ep": 1}))
    with pytest.raises(ConfigError, match="needs virtual stages"):
        check_layout(QWEN, Layout(**{**base, "pp": 2, "dp": 4, "global_batch": 8}))
    with pytest.raises(ConfigError, match="full recompute"):
        check_layout(QWEN, Layout(**{**base, "recompute": "full"}))
    row = {"model": "qwen3-30b-a3b", "gpus": 8, "tp": 1, "ep": 8, "global_batch": 8,
           "moe_a2a_overlap": "True"}
    assert row_layout(row)[0].ep_overlap is True
    row["moe_a2a_overlap"] = "false"
    assert row_layout(row)[0].ep_overlap is False
    row["moe_a2a_overlap"] = "sometimes"
    with pytest.raises(ConfigError, match="moe_a2a_overlap 'sometimes': expected one of"):
        row_layout(row)


def test_cli_ep_overlap(capsys):
    args = ["llm", "--model", "qwen3-30b-a3b", "--topology", "hgx-b200", "--ep", "8", "--dp",
            "8", "--global-batch", "8", "--precision", "fp8", "--distributed-optimizer"]

    def exposed(out):
        return float(next(line.split()[1] for line in out.splitlines()
                          if line.startswith("exposed_ep_s")))

    assert main(args) == 0
    plain = exposed(capsys.readouterr().out)
    assert main(args + ["--ep-overlap"]) == 0
    assert exposed(capsys.readouterr().out) < plain


def test_ep_overlap_runs_a_ranks_exchanges_one_at_a_time():
    """Megatron-Core issues a rank's overlapped dispatches and combines on one communication
    stream: in the trace no two expert exchanges of one rank overlap in time, and there are as
    many as without the overlap (every exchange still runs)."""
    g = load_topology("hgx-h100", {"nodes": "2"})
    counts = {}
    for overlap in (False, True):
        lay = Layout(ep=16, dp=16, global_batch=32, precision="fp8", distributed_optimizer=True,
                     ep_overlap=overlap)
        res = simulate_step(g, "qwen3-30b-a3b", lay, record_trace=True)
        by_rank = {}
        for e in res.trace["traceEvents"]:
            if e.get("ph") == "X" and e["cat"] == "ep":
                by_rank.setdefault(e["pid"], []).append((e["ts"], e["ts"] + e["dur"]))
        counts[overlap] = sorted(len(v) for v in by_rank.values())
        if overlap:
            for spans in by_rank.values():
                spans.sort()
                assert all(b[0] >= a[1] - 1e-6 for a, b in zip(spans, spans[1:]))
    assert counts[True] == counts[False] and counts[True][0] > 0


def test_cli_and_tables_state_the_fp8_recipe(capsys):
    args = ["llm", "--model", "llama3-8b", "--topology", "hgx-b200", "--global-batch", "8",
            "--dp", "8", "--distributed-optimizer", "--precision", "fp8"]

    def step(out):
        return float(next(line.split()[1] for line in out.splitlines()
                          if line.startswith("step_time_s")))

    assert main(args) == 0
    delayed = step(capsys.readouterr().out)
    assert main(args + ["--fp8-recipe", "mxfp8"]) == 0
    assert step(capsys.readouterr().out) > delayed
    assert main(args[:4] + ["hgx-h100"] + args[5:] + ["--fp8-recipe", "mxfp8"]) == 2
    assert "Blackwell GPUs only" in capsys.readouterr().err
    assert main(args[:-2] + ["--fp8-recipe", "tensorwise"]) == 2
    assert "applies to precision fp8, not bf16" in capsys.readouterr().err
    row = {"model": "llama3-8b", "gpus": 8, "tp": 1, "global_batch": 8, "precision": "fp8",
           "fp8_recipe": "Tensorwise"}
    layout, assumed = row_layout(row)
    assert layout.fp8_recipe == "tensorwise" and not any("fp8_recipe" in a for a in assumed)
    del row["fp8_recipe"]
    layout, assumed = row_layout(row)
    assert layout.fp8_recipe == "delayed" and "fp8_recipe=delayed" in assumed
    row.update(precision="bf16", fp8_recipe="mxfp8")
    with pytest.raises(ConfigError, match="fp8_recipe mxfp8 is given for precision bf16"):
        row_layout(row)


def test_the_alltoall_dispatcher_sorts_rows_by_local_expert():
    """Megatron-Core's all-to-all dispatcher sorts the received rows by local expert (and
    unsorts them before the combine) when a rank holds more than one expert; the flex
    dispatcher does it inside its kernels, and one expert a rank needs no sort."""
    def sorts(model, ep, dispatcher):
        layout = Layout(ep=ep, dp=ep, global_batch=ep, dispatcher=dispatcher)
        chunk = step_work(model, layout, "h100-sxm5-80gb").chunks[(0, 0)]
        return {o.name.split(".", 2)[2]: o for o in chunk.forward + chunk.backward
                if o.name.startswith("l0.moe.ep.") and "sort" in o.name}

    many = sorts(QWEN, 8, "alltoall")                # 16 experts a rank
    assert sorted(many) == ["ep.sort", "ep.sort.bwd", "ep.unsort", "ep.unsort.bwd"]
    assert sorts(QWEN, 8, "hybridep") == {}
    mixtral = get_llm_model("mixtral-8x7b")          # 8 experts on 8 ranks: one each
    assert sorts(mixtral, 8, "alltoall") == {}
    # one read and one write of every received row: 4096 tokens x top-8, hidden 2048, bf16
    fewer = sorts(QWEN, 16, "alltoall")["ep.sort"]   # 8 experts a rank, the same rows
    assert many["ep.sort"].compute_s == fewer.compute_s > 0
    rows_bytes = 4096 * 8 * 2048 * 2 * 2
    assert many["ep.sort"].compute_s == pytest.approx(
        5e-6 + rows_bytes / (3.35e12 * 0.90), rel=0.02)


def test_deepep_moves_hybrideps_rows_without_its_buffer_copy():
    def exchange_ops(dispatcher):
        lay = Layout(ep=16, dp=16, global_batch=16, dispatcher=dispatcher)
        chunk = step_work(QWEN, lay, "h100-sxm5-80gb", ep_machines=2).chunks[(0, 0)]
        return [o for o in chunk.forward + chunk.backward if ".ep." in o.name]

    hybrid, deep = exchange_ops("hybridep"), exchange_ops("deepep")
    copies = [o.name for o in hybrid if o.name.endswith(".copy")]
    assert copies and not any(o.name.endswith(".copy") for o in deep)
    assert [(o.name, o.comm) for o in deep] == [(o.name, o.comm) for o in hybrid
                                                if not o.name.endswith(".copy")]
    assert {o.comm.group for o in deep if o.comm} == {"ep_rail", "ep_node"}
