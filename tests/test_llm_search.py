"""Layout search: enumeration follows the rules, the compute bound is a lower bound of the
simulated step, pruning keeps the exact top K, resume skips rows done, bad input is one line."""

import math

import pandas as pd
import pytest

from simulator.errors import ConfigError
from simulator.topology import load_topology
from simulator.workload.llm.layout import Layout, check_layout
from simulator.workload.llm.memory import check_memory
from simulator.workload.llm.registry import get_llm_model
from simulator.workload.llm.search import (SearchSpace, _Bounds, compute_lower_bound,
                                           enumerate_layouts, feasible_layouts, search_layouts)
from simulator.workload.llm.costs import step_work
from simulator.workload.llm.step import simulate_step

H100 = "h100-sxm5-80gb"
# A small search: gpt3-350m on one 8-GPU machine, a few values per dimension.
SMALL = SearchSpace(tp=(1, 2), cp=(1,), pp=(1, 2, 4), virtual_stages=(1, 2), micro_batch=(1, 2),
                    optimizers=("none", "distopt"), recompute=("none", "full"))


def small_search(tmp_path=None, **kw):
    args = dict(global_batch=8, space=SMALL, top=3, workers=1, progress=False)
    args.update(kw)
    return search_layouts("gpt3-350m", "hgx-h100", {"nodes": "1"},
                          out_dir=tmp_path, **args)


def test_enumeration_respects_rules_and_memory():
    model = get_llm_model("llama2-13b")
    counts = {}
    feasible = list(feasible_layouts(model, 16, 8, 32, H100, SearchSpace(micro_batch=(1, 2)),
                                     counts))
    assert feasible and counts["enumerated"] == len(feasible) + counts["refused_rules"] + \
        counts["refused_memory"]
    assert counts["refused_rules"] > 0 and counts["refused_memory"] > 0
    for _bound, lay in feasible:
        check_layout(model, lay, 16, device=H100)
        check_memory(model, lay, H100)
        assert lay.tp in (1, 2, 4, 8) and lay.sequence_parallel == (lay.tp > 1)
        assert lay.cp in (1, 2, 4) and lay.micro_batch in (1, 2) and lay.pp <= 32
        assert (lay.virtual_stages > 1) == (lay.pipeline == "interleaved")
        assert lay.virtual_stages == 1 or lay.pp > 1
        assert lay.gpus == 16
    kinds = {(lay.zero_stage, lay.distributed_optimizer) for _b, lay in feasible}
    assert kinds == {(0, False), (0, True), (3, False)}
    assert {lay.recompute for _b, lay in feasible} == {"none", "selective", "full"}
    assert any(lay.virtual_stages == 4 for _b, lay in feasible)


def test_moe_tries_expert_parallel_degrees_within_dp_cp():
    model = get_llm_model("mixtral-8x7b")
    space = SearchSpace(cp=(1, 2), virtual_stages=(1,), micro_batch=(1,),
                        optimizers=("distopt",), recompute=("full",))
    eps = set()
    for lay in enumerate_layouts(model, 64, 8, 64, space):
        try:
            check_layout(model, lay, 64)
        except ConfigError:
            continue
        assert model.moe.experts % lay.ep == 0 and (lay.dp * lay.cp) % lay.ep == 0
        eps.add(lay.ep)
    assert eps == {1, 2, 4, 8}


@pytest.mark.parametrize("name, layout", [
    ("gpt3-350m", Layout(tp=2, pp=2, dp=2, global_batch=16, sequence_parallel=True)),
    ("gpt3-350m", Layout(tp=1, pp=4, dp=2, virtual_stages=2, pipeline="interleaved",
                         global_batch=16, recompute="full")),
    ("gpt3-350m", Layout(tp=2, cp=2, pp=1, dp=2, micro_batch=2, global_batch=16,
                         sequence_parallel=True, distributed_optimizer=True)),
    ("gpt3-350m", Layout(tp=1, pp=8, dp=1, global_batch=8, pipeline="gpipe",
                         recompute="selective")),
    ("gpt3-350m", Layout(tp=1, pp=1, dp=8, global_batch=16, zero_stage=3)),
    # 30 layers on 4 stages: 7 + 8 + 8 + 7 (uneven ends)
    ("megatron-gpt-3.6b", Layout(tp=2, pp=4, dp=1, global_batch=8, sequence_parallel=True)),
], ids=["1f1b-tp-sp", "interleaved-full", "cp-distopt", "gpipe-sel", "zero3", "uneven"])
def test_bound_is_a_lower_bound_of_the_simulated_step(name, layout):
    model = get_llm_model(name)
    graph = load_topology("hgx-h100", {"nodes": "1"})
    dev = H100
    bound = compute_lower_bound(model, layout, dev)
    step = simulate_step(graph, model, layout).row["step_time_s"]
    assert bound <= step * (1 + 1e-12)
    # never below the busiest stage's compute per micro-batch x micro-batches
    work = step_work(model, layout, dev)
    busiest = max(sum(work.chunks[(s, v)].forward_compute_s +
                      work.chunks[(s, v)].backward_compute_s
                      for v in range(layout.virtual_stages)) for s in range(layout.pp))
    assert bound >= busiest * work.micro_batches * (1 - 1e-12)
    # the search's cached bound is the same number
    assert _Bounds(model, dev)(layout) == pytest.approx(bound, rel=1e-12)


def test_pruning_keeps_the_exact_top_k():
    pruned = small_search(prune=True)
    full = small_search(prune=False)
    c = pruned.counts
    assert c["pruned"] > 0 and full.counts["pruned"] == 0
    assert c["enumerated"] == c["refused_rules"] + c["refused_memory"] + c["pruned"] + \
        c["simulated"]
    assert c["simulated"] < full.counts["simulated"]
    cols = ["label", "step_time_s"]
    pd.testing.assert_frame_equal(pruned.top[cols].reset_index(drop=True),
                                  full.top[cols].reset_index(drop=True))
    # every pruned layout's bound exceeds the K-th best step time
    kth = full.top["step_time_s"].iloc[-1]
    done = set(pruned.rows["label"])
    skipped = full.rows[~full.rows["label"].isin(done)]
    assert (skipped["bound_s"] > kth).all()
    assert (full.rows["bound_s"] <= full.rows["step_time_s"] * (1 + 1e-12)).all()


def test_resume_skips_rows_already_done(tmp_path):
    first = small_search(tmp_path)
    csv = tmp_path / "search.csv"
    frame = pd.read_csv(csv)
    assert len(frame) == first.counts["simulated"]
    keep = frame.sort_values("bound_s").iloc[:4].copy()
    keep.loc[keep.index[0], "busiest_link"] = "MARKER"   # a resumed row is kept, not redone
    keep.to_csv(csv, index=False)
    again = small_search(tmp_path, resume=True)
    assert again.counts["resumed"] == 4
    assert again.counts["simulated"] + 4 == first.counts["simulated"]
    assert (pd.read_csv(csv)["busiest_link"] == "MARKER").sum() == 1
    cols = ["label", "step_time_s"]
    pd.testing.assert_frame_equal(again.top[cols].reset_index(drop=True),
                                  first.top[cols].reset_index(drop=True))


def test_several_cluster_sizes_give_a_front():
    res = search_layouts("gpt3-350m", "hgx-h100", {"nodes": "1"}, global_batch=16,
                         gpus=[8, 16], space=SearchSpace(tp=(1, 8), cp=(1,), pp=(1,),
                                                         virtual_stages=(1,), micro_batch=(1,),
                                                         optimizers=("none",),
                                                         recompute=("none",)),
                         top=1, workers=1, progress=False)
    assert set(res.top["gpus"]) == {8, 16}
    assert list(res.front["gpus"]) == sorted(res.front["gpus"])
    assert res.front["step_time_s"].is_monotonic_decreasing


@pytest.mark.parametrize("argv, text", [
    (["--model", "nope"], "LLM model"),
    (["--gpus", "12"], "not a multiple of the 8 GPUs per machine"),
    (["--resume"], "--resume needs -o"),
    (["--top", "0"], "--top must be a positive integer"),
    (["--optimizers", "zero9"], "optimizers"),
    (["--dp", "2"], "--dp is not searched"),
    (["--micro-batch", "1,x"], "--micro-batch"),
])
def test_cli_errors_are_one_line(capsys, argv, text):
    from simulator.cli.commands import main

    base = ["llm", "--search", "--model", "gpt3-350m", "--topology", "hgx-h100",
            "--global-batch", "16", "--no-progress"]
    if argv[0] == "--model":
        base[3] = argv[1]
        argv = []
    rc = main(base + argv)
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and text in err, err


def test_cli_search_prints_table_and_counts(tmp_path, capsys):
    from simulator.cli.commands import main

    rc = main(["llm", "--search", "--model", "gpt3-350m", "--topology", "hgx-h100",
               "--global-batch", "16", "--no-progress", "--workers", "1", "--top", "2",
               "--tp", "1,2", "--cp", "1", "--virtual-stages", "1", "--micro-batch", "1",
               "--recompute", "none", "--optimizers", "distopt", "-o", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0 and "enumerated" in out and "pruned by bound" in out and "MFU" in out
    assert (tmp_path / "search.csv").exists() and (tmp_path / "search.png").exists()
    assert not math.isnan(pd.read_csv(tmp_path / "search.csv")["step_time_s"].min())


def test_shared_coster_gives_the_same_rows():
    from simulator.workload.llm.search import _layout_fields, _simulate

    lay = Layout(tp=2, pp=2, dp=2, global_batch=8, sequence_parallel=True,
                 distributed_optimizer=True)
    graph = load_topology("hgx-h100", {"nodes": "1"})
    fresh = simulate_step(graph, "gpt3-350m", lay).row
    for _ in range(2):        # the second run reuses the worker's alone-times
        row = _simulate("hgx-h100", (("nodes", "1"),), "gpt3-350m", _layout_fields(lay),
                        "default", 0.0)
        assert row["step_time_s"] == fresh["step_time_s"]
        assert row["exposed_dp_s"] == fresh["exposed_dp_s"]


def test_workers_share_alone_times(monkeypatch):
    """A worker hands back the alone-times it computed; another worker given them computes
    none and gives the same row."""
    from simulator.workload.llm import groups, search

    lay = Layout(tp=2, pp=2, dp=2, global_batch=8, sequence_parallel=True,
                 distributed_optimizer=True)
    args = ("hgx-h100", (("nodes", "1"),), "gpt3-350m", search._layout_fields(lay), "default",
            0.0)
    monkeypatch.setattr(search, "_COSTERS", {})            # a fresh worker process
    first = search._simulate(*args, known={})
    times = first.pop(search._ALONE)
    assert times and all(t > 0 for t in times.values())
    monkeypatch.setattr(search, "_COSTERS", {})            # another fresh worker

    def refuse(*_a, **_k):
        raise AssertionError("an alone-time was computed again")

    monkeypatch.setattr(groups, "run_collective", refuse)
    second = search._simulate(*args, known=times)
    assert second.pop(search._ALONE) == {}
    assert second["step_time_s"] == first["step_time_s"]
    assert second["exposed_dp_s"] == first["exposed_dp_s"]
    # the search's rows never carry the hand-over
    assert search._ALONE not in list(search.SEARCH_COLUMNS)


def test_order_holds_a_family_back_until_its_first_layout_is_back():
    from simulator.workload.llm.search import _Order

    o = _Order([(1, "a"), (2, "a"), (3, "b"), (4, "a"), (5, "c")], family=lambda it: it[1])
    assert o.next() == (1, "a")
    assert o.next() == (3, "b")          # (2, "a") waits for (1, "a")
    o.finished("b", ran=True)
    assert o.next() == (5, "c")          # (4, "a") waits too
    o.finished("a", ran=True)            # (1, "a") is back: its alone-times go along
    assert [o.next(), o.next(), o.next()] == [(2, "a"), (4, "a"), None]
    # a family whose first call was skipped (pruned) is not held back for ever, and with
    # nothing else left a waiting call runs anyway
    o = _Order([(1, "a"), (2, "a"), (3, "a")], family=lambda it: it[1])
    assert o.next() == (1, "a")
    assert o.next() == (2, "a")          # nothing else: runs although (1, "a") still runs
    o.finished("a", ran=False)
    o.finished("a", ran=False)
    assert o.next() == (3, "a") and o.next() is None


def test_a_search_with_nothing_to_run_says_why(capsys):
    """Every layout refused: the table says so and names the commonest refusal, no traceback
    (an empty candidate list once broke the frame's column selection)."""
    from simulator.cli.commands import main

    rc = main(["llm", "--search", "--model", "gpt3-350m", "--topology", "hgx-h100",
               "--global-batch", "16", "--no-progress", "--workers", "1", "--tp", "1",
               "--cp", "1", "--pp", "8", "--virtual-stages", "2", "--micro-batch", "1",
               "--recompute", "none", "--optimizers", "distopt"])
    captured = capsys.readouterr()
    assert rc == 0 and "Traceback" not in captured.err
    assert "no layout fits and runs" in captured.out
    assert "most often refused by rules (1 of 1): gpt3-350m: 24 layers do not split" in \
        captured.out
    rc = main(["llm", "--search", "--model", "gpt3-350m", "--topology", "hgx-h100",
               "--global-batch", "16", "--no-progress", "--workers", "1", "--tp", "1",
               "--cp", "1", "--pp", "3", "--virtual-stages", "1", "--micro-batch", "1",
               "--recompute", "none", "--optimizers", "distopt"])
    captured = capsys.readouterr()
    assert rc == 0 and "0 enumerated" in captured.out and "no layout fits" in captured.out
