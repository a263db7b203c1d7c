"""Multi-latent attention, multi-token prediction and explicit pipeline layouts (DeepSeek-V3)."""

from dataclasses import replace

import pytest

from simulator.cli import main
from simulator.errors import ConfigError
from simulator.topology.devices import get_device
from simulator.workload.llm.compute import attention
from simulator.workload.llm.costs import step_work
from simulator.workload.llm.layout import Layout, parse_pipeline_layout
from simulator.workload.llm.memory import chunk_layers, chunk_params, memory_per_gpu
from simulator.workload.llm.model import (MoEConfig, TransformerConfig, layer_forward_flops,
                                          model_flops_per_step, mtp_forward_flops)
from simulator.workload.llm.registry import get_llm_model

DSV3 = get_llm_model("deepseek-v3")

#: a small model of DeepSeek-V3's kind: every feature, shapes that run in a second
TOY = TransformerConfig(
    name="mla-toy", layers=5, hidden=512, heads=8, head_dim=64, ffn_hidden=1024, vocab=1000,
    seq_len=256, ffn_kind="swiglu", tied_embeddings=False, positions="rope", norm="rmsnorm",
    bias=False, moe=MoEConfig(experts=8, top_k=2, expert_ffn_hidden=256, shared_experts=1,
                              first_dense_layers=1),
    q_lora_rank=128, kv_lora_rank=64, rope_head_dim=32, v_head_dim=48, mtp_layers=1)


def test_deepseek_v3_has_the_published_parameter_counts():
    # DeepSeek-V3 report: 671B total, 37B activated; 685B with the 14B MTP module, whose
    # checkpoint also holds copies of the embedding and the output layer
    assert DSV3.params == pytest.approx(671e9, rel=1e-3)
    assert DSV3.active_params == pytest.approx(37e9, rel=0.03)
    word = DSV3.vocab * DSV3.hidden
    assert DSV3.mtp_layer_params + 2 * word == pytest.approx(14e9, rel=0.05)
    # one MLA block by hand: q down + up, kv down + up, the two latent norms, the output
    h, n = 7168, 128
    by_hand = (h * 1536 + 1536 * n * 192 + h * (512 + 64) + 512 * n * (128 + 128)
               + n * 128 * h + 1536 + 512)
    assert DSV3.attention_params == by_hand
    assert DSV3.attention_replicated_params == h * (1536 + 512 + 64) + 1536 + 512
    assert (DSV3.q_dim, DSV3.kv_dim, DSV3.v_dim, DSV3.o_dim) == (n * 192, n * 192, n * 128,
                                                                 n * 128)


def test_mla_flops_count_each_projection_and_the_two_head_widths():
    t = 2 * DSV3.seq_len
    f = layer_forward_flops(DSV3, 2, index=10)
    h, n = 7168, 128
    assert f.qkv == 2 * t * (h * 1536 + 1536 * n * 192 + h * 576 + 512 * n * 256)
    assert f.scores == 2 * t * DSV3.seq_len * n * 192
    assert f.attn_v == 2 * t * DSV3.seq_len * n * 128
    assert f.proj == 2 * t * n * 128 * h
    # a standard model keeps Narayanan's count
    gpt = get_llm_model("gpt3-175b")
    g = layer_forward_flops(gpt, 1)
    assert g.qkv == 2 * gpt.seq_len * gpt.hidden * 3 * gpt.hidden == 3 * g.proj


def test_attention_kernel_counts_query_key_and_value_widths_apart():
    same = attention(1, 8, 8, 1024, 1024, 128)
    wide = attention(1, 8, 8, 1024, 1024, 192, v_head_dim=128)
    assert same.flops == 4.0 * 1024 * 1024 * 8 * 128 / 2
    assert wide.flops == 2.0 * 1024 * (1024 / 2) * 8 * (192 + 128)
    assert "dv=128" in wide.shape and "dv" not in same.shape
    assert attention(1, 8, 8, 1024, 1024, 128, v_head_dim=128) == same


@pytest.mark.parametrize("fields, needle", [
    (dict(rope_head_dim=64), "rope_head_dim belong to multi-latent attention"),
    (dict(q_lora_rank=32, v_head_dim=16), "q_lora_rank, v_head_dim belong"),
    (dict(kv_lora_rank=64, kv_heads=2), "kv_heads must equal heads"),
    (dict(kv_lora_rank=0), "kv_lora_rank must be a positive integer"),
    (dict(mtp_layers=-1), "mtp_layers must be an integer >= 0"),
])
def test_mla_fields_are_checked_in_one_line(fields, needle):
    base = dict(name="x", layers=2, hidden=256, heads=4, ffn_hidden=512, vocab=100, seq_len=64)
    with pytest.raises(ConfigError, match=needle) as err:
        TransformerConfig(**base, **fields)
    assert "\n" not in str(err.value)


def test_mla_ops_split_the_heads_and_keep_the_down_projections_whole():
    layout = Layout(tp=4, dp=1, global_batch=1, sequence_parallel=True)
    model = replace(TOY, moe=None, mtp_layers=0)
    chunk = step_work(model, layout, "h100-sxm5-80gb").chunks[(0, 0)]
    ops = {o.name: o for o in chunk.forward}
    T, tp = model.seq_len, 4
    # down projections duplicated: full width on the rank's sequence shard
    assert ops["l0.attn.q_down"].flops == 2 * (T // tp) * 128 * 512
    assert ops["l0.attn.kv_down"].flops == 2 * (T // tp) * (64 + 32) * 512
    # up projections column-parallel on the gathered sequence
    assert ops["l0.attn.q_up"].flops == 2 * T * (8 * 96 // tp) * 128
    assert ops["l0.attn.kv_up"].flops == 2 * T * (8 * (64 + 48) // tp) * 64
    assert ops["l0.attn.proj"].flops == 2 * T * 512 * (8 * 48 // tp)
    gathers = {o.name: o.comm.size_bytes for o in chunk.forward
               if o.comm and o.name.startswith("l0.") and o.comm.collective == "allgather"}
    assert gathers == {"l0.attn.kpe.tp.allgather": T * 32 * 2,
                       "l0.attn.q_up.tp.allgather": T * 128 * 2,
                       "l0.attn.kv_up.tp.allgather": T * 64 * 2,
                       "l0.mlp.tp.allgather": T * 512 * 2}
    back = [o.name for o in chunk.backward if o.name.startswith("l0.attn")]
    for name in ("q_down", "kv_down", "q_up", "kv_up"):
        assert f"l0.attn.{name}.dgrad" in back and f"l0.attn.{name}.wgrad" in back
    assert "l0.attn.q_up.tp.reducescatter.grad" in back
    assert back.index("l0.attn.kv_up.dgrad") < back.index("l0.attn.kv_down.dgrad")


def test_op_flops_add_up_with_mla_experts_and_prediction_modules():
    layout = Layout(ep=4, pp=2, dp=4, global_batch=8, pipeline="interleaved", virtual_stages=2,
                    recompute="selective",
                    pipeline_layout=parse_pipeline_layout("Et|tt|t|tmL", 2, 2, 5, 1))
    folded = Layout(tp=2, ep=4, pp=2, dp=4, global_batch=8, sequence_parallel=True,
                    pipeline_layout=(2, 3))        # the down projections on sequence shards
    for lay, recompute in ((layout, "selective"), (layout, "full"), (folded, "selective")):
        work = step_work(TOY, replace(lay, recompute=recompute), "h100-sxm5-80gb")
        ops = [o for c in work.chunks.values() for o in c.forward + c.backward]
        ranks = lay.tp * lay.cp * lay.dp * work.micro_batches
        assert sum(o.flops for o in ops if o.kind != "recompute") * ranks == pytest.approx(
            work.model_flops_per_step, rel=1e-9)
        assert sum(o.flops for o in ops) * ranks == pytest.approx(
            work.hardware_flops_per_step, rel=1e-9)
    assert work.model_flops_per_step == model_flops_per_step(TOY, 8)
    assert mtp_forward_flops(TOY, 1) > 0 and mtp_forward_flops(replace(TOY, mtp_layers=0), 1) == 0
    assert model_flops_per_step(TOY, 8) - model_flops_per_step(replace(TOY, mtp_layers=0), 8) \
        == pytest.approx(3 * mtp_forward_flops(TOY, 8))


def test_the_prediction_module_runs_on_the_last_chunk_with_its_own_head():
    layout = Layout(pp=2, dp=1, global_batch=2)
    work = step_work(TOY, layout, "h100-sxm5-80gb")
    first, last = work.chunks[(0, 0)], work.chunks[(1, 0)]
    assert not any(o.name.startswith("mtp") for o in first.forward + first.backward)
    names = [o.name for o in last.forward]
    for name in ("mtp0.embed.lookup", "mtp0.eh_proj", "mtp0.layer.attn.q_up",
                 "mtp0.layer.moe.experts.fc1", "mtp0.head.logits", "head.logits"):
        assert name in names, name
    assert names.index("mtp0.head.logits") < names.index("head.logits")
    eh = next(o for o in last.forward if o.name == "mtp0.eh_proj")
    assert eh.flops == 2 * TOY.seq_len * 512 * 1024
    back = [o.name for o in last.backward]
    assert back.index("head.logits.dgrad") < back.index("mtp0.head.logits.dgrad") \
        < back.index("mtp0.eh_proj.dgrad") < back.index("mtp0.embed.grad")
    # its weights and an embedding copy sit on the last stage
    with_mtp = chunk_params(TOY, layout, 1, 0)
    without = chunk_params(replace(TOY, mtp_layers=0), layout, 1, 0)
    expert = TOY.layer_expert_params(TOY.layers - 1)
    assert with_mtp[0] - without[0] == pytest.approx(
        TOY.mtp_layer_params - expert + TOY.vocab * TOY.hidden)
    assert with_mtp[1] - without[1] == pytest.approx(expert)


def test_megatrons_layout_strings_place_the_layers():
    split = parse_pipeline_layout("Et*4|(t*4|)*14tmL", 8, 2, 61, 1)
    assert split == (4,) * 15 + (1,)
    layout = Layout(pp=8, virtual_stages=2, pipeline="interleaved", global_batch=8,
                    pipeline_layout=split)
    # chunk k on stage k % pp, virtual stage k // pp (Megatron-Core's mapping)
    assert chunk_layers(DSV3, layout, 0, 0) == range(0, 4)
    assert chunk_layers(DSV3, layout, 0, 1) == range(32, 36)
    assert chunk_layers(DSV3, layout, 7, 1) == range(60, 61)
    assert parse_pipeline_layout("Et|(tt|)*30mL", 8, 4, 61, 1)[-1] == 0
    assert parse_pipeline_layout("E, t*2 | t*2 L", 2, 1, 4) == (2, 2)


@pytest.mark.parametrize("text, needle", [
    ("Et*4|(t*4|)*13tmL", "has 15 chunks; pp x virtual_stages = 8 x 2 = 16"),
    ("Et*4|(t*4|)*14tL", "places 0 multi-token prediction modules"),
    ("Et*4|(t*4|)*14tmLx", "unknown symbol(s) x"),
    ("tE*4|(t*4|)*14tmL", "the embedding E must open the first chunk"),
    ("Et*4|(t*4|)*14mtL", "a decoder layer (t) follows"),
    ("Et*4|(t*4|)*13t*5m|L", "must be in the last chunk"),
    ("Et*4|(t*4|)*14t*2mL", "places 62 decoder layers"),
    ("", "non-empty string"),
])
def test_bad_layout_strings_are_refused_in_one_line(text, needle):
    with pytest.raises(ConfigError) as err:
        parse_pipeline_layout(text, 8, 2, 61, 1)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_a_layout_given_as_chunks_must_add_up():
    from simulator.workload.llm.layout import check_layout

    bad = Layout(pp=2, global_batch=2, pipeline_layout=(3, 3))
    with pytest.raises(ConfigError, match="adding up to the model's 5"):
        check_layout(TOY, bad)
    # an explicit layout lifts the even-split rule (5 layers on 2 stages)
    check_layout(TOY, Layout(pp=2, global_batch=2, pipeline_layout=(2, 3)))


def test_memory_counts_the_prediction_module_on_the_last_stage():
    layout = Layout(pp=2, dp=1, global_batch=2)
    dev = get_device("h100-sxm5-80gb")
    last = memory_per_gpu(TOY, layout, dev, stage=1).items
    plain = memory_per_gpu(replace(TOY, mtp_layers=0), layout, dev, stage=1).items
    assert last["activations"] > plain["activations"]
    assert last["weights"] > plain["weights"]
    first = memory_per_gpu(TOY, layout, dev, stage=0).items
    assert first == memory_per_gpu(replace(TOY, mtp_layers=0), layout, dev, stage=0).items


def test_cli_takes_a_layout_string_and_refuses_a_bad_one(capsys):
    args = ["llm", "--model", "deepseek-v3", "--topology", "hgx-b200", "--param", "nodes=32",
            "--pp", "8", "--virtual-stages", "2", "--ep", "32", "--dp", "32",
            "--global-batch", "256", "--precision", "fp8", "--fp8-recipe", "mxfp8"]
    assert main(args + ["--pp-layout", "Et*4|(t*4|)*13tmL"]) == 2
    err = capsys.readouterr().err
    assert "has 15 chunks" in err and "Traceback" not in err
    searched = [a for a in args if a not in ("--ep", "32", "--dp")]
    assert main(searched + ["--pp-layout", "Et*4|(t*4|)*14tmL", "--search"]) == 2
    assert "--pp-layout is for one layout" in capsys.readouterr().err


def test_a_scenario_job_and_a_table_row_take_a_layout_string():
    import pandas as pd

    from simulator.comparison.llm import pipeline_layout_of
    from simulator.scenario import read_scenario, run_study

    text = """name: moe
topology: hgx-b200
jobs:
  - {name: moe, kind: llm, model: qwen3-30b-a3b, pp: 2, ep: 4, global_batch: 4,
     pp_layout: "Et*20|t*28L", ranks: "0-7"}
"""
    job = read_scenario(text, "m.yaml").study[0]
    assert job.layout(8).pipeline_layout == (20, 28)
    with pytest.raises(ConfigError, match=r"m.yaml.*jobs.0.*places 47 decoder layers") as err:
        run_study(read_scenario(text.replace("t*28L", "t*27L"), "m.yaml"))
    assert "\n" not in str(err.value)
    model = get_llm_model("qwen3-30b-a3b")
    plain = Layout(pp=2, global_batch=2)
    row = pd.Series({"model": "qwen3-30b-a3b", "pp_layout": "Et*20|t*28L"})
    assert pipeline_layout_of(row, plain, model).pipeline_layout == (20, 28)
    assert pipeline_layout_of(pd.Series({"model": "x", "pp_layout": ""}), plain, model) is plain


def test_recompute_modules_rerun_what_they_name_and_keep_less():
    from simulator.workload.llm.model import activation_bytes_per_layer

    base = Layout(pp=1, dp=1, global_batch=1, recompute="selective")
    mods = replace(base, recompute_modules=("mla_up_proj", "mlp"))
    default = step_work(TOY, base, "h100-sxm5-80gb")
    chosen = step_work(TOY, mods, "h100-sxm5-80gb")
    again = {o.name for c in chosen.chunks.values() for o in c.backward
             if o.kind == "recompute"}
    assert "l0.recompute.attn.q_up" in again and "l0.recompute.attn.rope" in again
    assert "l0.recompute.mlp.fc1" in again                     # layer 0 is dense
    assert "l1.recompute.mlp.fc1" not in again                 # layer 1 is MoE: mlp is not it
    assert not any(".attn.core" in n for n in again)           # core_attn not asked for
    assert {o.name for c in default.chunks.values() for o in c.backward
            if o.kind == "recompute"} == {f"l{i}.recompute.attn.core" for i in range(5)} | {
                "mtp0.layer.recompute.attn.core"}
    # the hardware FLOPs count what is run again
    ops = [o for c in chosen.chunks.values() for o in c.forward + c.backward]
    assert sum(o.flops for o in ops) * chosen.micro_batches == pytest.approx(
        chosen.hardware_flops_per_step, rel=1e-9)
    assert chosen.hardware_flops_per_step > chosen.model_flops_per_step
    # activations: MLA's Q, K and V are not kept
    kw = dict(recompute="selective", flash=True, index=2)
    kept = activation_bytes_per_layer(TOY, 1, **kw)
    fewer = activation_bytes_per_layer(TOY, 1, modules=("mla_up_proj",), **kw)
    assert kept - fewer == 2 * TOY.seq_len * (TOY.q_dim + TOY.kv_dim + TOY.v_dim)
    moe = activation_bytes_per_layer(TOY, 1, modules=("moe",), **kw)
    act = activation_bytes_per_layer(TOY, 1, modules=("moe_act",), **kw)
    assert moe < act < kept


@pytest.mark.parametrize("model, layout, needle", [
    (get_llm_model("llama3-8b"), Layout(recompute="selective", recompute_modules=("mla_up_proj",)),
     "mla_up_proj needs multi-latent attention"),
    (TOY, Layout(recompute="none", recompute_modules=("mlp",)), "go with recompute 'selective'"),
    (get_llm_model("llama3-8b"), Layout(recompute="selective", recompute_modules=("moe_act",)),
     "need an MoE model"),
    (TOY, Layout(recompute="selective", recompute_modules=("attn",)), "expected a comma list of"),
])
def test_recompute_modules_are_refused_where_they_cannot_run(model, layout, needle):
    from simulator.workload.llm.layout import check_layout

    with pytest.raises(ConfigError, match=needle) as err:
        check_layout(model, layout)
    assert "\n" not in str(err.value)


def test_a_table_row_names_its_recompute_modules():
    import pandas as pd

    from simulator.comparison.llm import row_layout

    row = pd.Series({"model": "deepseek-v3", "gpus": 8, "tp": 1, "global_batch": 8,
                     "activation_recompute": "selective", "recompute_modules": "mla_up_proj, mlp"})
    assert row_layout(row)[0].recompute_modules == ("mla_up_proj", "mlp")
    row["activation_recompute"] = "none"
    with pytest.raises(ConfigError, match="go with activation_recompute 'selective'"):
        row_layout(row)


def test_the_deepseek_table_states_each_recipe():
    from pathlib import Path

    from simulator.comparison.llm import pipeline_layout_of, row_layout
    from simulator.measure.llm_table import read_llm_table

    table = read_llm_table(Path(__file__).parent / "data" / "measurements"
                           / "train_llm_nvidia_dgxb200_deepseek.csv")
    new, old = (pipeline_layout_of(row, row_layout(row)[0], DSV3) for _, row in table.iterrows())
    assert (new.pp, new.virtual_stages, new.ep, new.dispatcher, new.ep_overlap) == (
        8, 2, 32, "deepep", True)
    assert new.pipeline_layout == (4,) * 15 + (1,)
    assert new.selective_modules == ("mla_up_proj", "mlp")
    assert (old.pp, old.virtual_stages, old.ep, old.dispatcher, old.ep_overlap) == (
        16, 1, 8, "hybridep", False)
    assert old.pipeline_layout == new.pipeline_layout and old.selective_modules == (
        "mla_up_proj",)
    for lay in (new, old):
        assert (lay.gpus, lay.global_batch, lay.main_grads, lay.zero_stage) == (256, 4096, "bf16",
                                                                                1)


def test_fp8_keeps_gemm_inputs_quantized_for_backward():
    """Transformer Engine keeps a GEMM's input as its fp8 column-wise copy under fp8: one byte
    per element instead of two for the QKV, fc1 and fc2 inputs, and the attention's output
    twice (16-bit for the attention, fp8 for the projection)."""
    from simulator.workload.llm.model import activation_bytes_per_layer

    llama = get_llm_model("llama3-8b")
    sb, h, f = llama.seq_len, llama.hidden, llama.ffn_hidden
    kw = dict(flash=True, recompute="selective")
    bf16 = activation_bytes_per_layer(llama, 1, **kw)
    fp8 = activation_bytes_per_layer(llama, 1, fp8=True, **kw)
    assert bf16 - fp8 == sb * (2 * h + f - llama.o_dim)
    expert = activation_bytes_per_layer(TOY, 1, index=2, **kw) - activation_bytes_per_layer(
        TOY, 1, index=2, fp8=True, **kw)
    m = TOY.moe
    latents = TOY.q_lora_rank + TOY.kv_lora_rank
    assert expert == TOY.seq_len * (2 * TOY.hidden + latents - TOY.o_dim
                                    + m.top_k * (TOY.hidden + m.expert_ffn_hidden)
                                    + m.shared_hidden)
    layout = Layout(tp=1, dp=1, global_batch=1, recompute="selective")
    dev = get_device("h100-sxm5-80gb")
    assert memory_per_gpu(llama, replace(layout, precision="fp8"), dev).items["activations"] \
        < memory_per_gpu(llama, layout, dev).items["activations"]


def test_the_search_splits_uneven_layers_as_megatron_bridge_lays_out_deepseek():
    from simulator.workload.llm.layout import short_last_chunk
    from simulator.workload.llm.search import SearchSpace, enumerate_layouts, layout_label

    # Megatron-Bridge's DeepSeek-V3 layouts: 16 x 3 + 13, 8 x 7 + 5, 4 x 15 + 1
    assert short_last_chunk(61, 4) == (16, 16, 16, 13)
    assert short_last_chunk(61, 8) == (8,) * 7 + (5,)
    assert short_last_chunk(61, 16) == (4,) * 15 + (1,)
    assert short_last_chunk(61, 32) is None and short_last_chunk(64, 16) is None
    space = SearchSpace(tp=(1,), cp=(1,), pp=(8, 16), virtual_stages=(1, 2), micro_batch=(1,),
                        optimizers=("distopt",), recompute=("selective",))
    found = {(lay.pp, lay.virtual_stages): lay for lay in
             enumerate_layouts(DSV3, 256, 8, 1024, space) if lay.ep == 8}
    assert found[(8, 2)].pipeline_layout == (4,) * 15 + (1,)
    assert found[(16, 1)].pipeline_layout == (4,) * 15 + (1,)
    assert found[(8, 1)].pipeline_layout == (8,) * 7 + (5,)
    assert found[(16, 2)].pipeline_layout is None           # 32 chunks: no such split
    assert layout_label(found[(8, 1)]).endswith(" last5")
    # a model that splits evenly keeps Megatron's even chunks
    qwen = get_llm_model("qwen3-30b-a3b")
    assert all(lay.pipeline_layout is None for lay in enumerate_layouts(qwen, 64, 8, 64, space))


def test_the_llm_section_takes_a_layout_string_and_recompute_modules():
    from simulator.scenario import read_scenario

    text = """name: sweep
topology: {name: hgx-b200, params: {nodes: 1}}
llm:
  model: qwen3-30b-a3b
  pp: [2, 4]
  ep: 4
  global_batch: 8
  recompute: [selective, none]
  recompute_modules: [moe_act, layernorm]
  pp_layout: "Et*20|t*28L"
"""
    study = read_scenario(text, "s.yaml").study
    layouts = {}
    for point in study.points():
        try:
            lay = study.layout(point, 8)
        except ConfigError as exc:
            layouts[point] = str(exc)
            continue
        layouts[(lay.pp, lay.recompute)] = lay
    assert layouts[(2, "selective")].pipeline_layout == (20, 28)
    assert layouts[(2, "selective")].selective_modules == ("moe_act", "layernorm")
    assert layouts[(2, "none")].recompute_modules == ()
    refused = [v for v in layouts.values() if isinstance(v, str)]
    assert len(refused) == 2 and all("has 2 chunks; pp x virtual_stages = 4 x 1" in r
                                     for r in refused)
    with pytest.raises(ConfigError, match=r"s.yaml:\d+: llm.pp_layout: not used with search"):
        read_scenario(text.replace("pp: [2, 4]", "search: {tp: [1]}").replace(
            "  recompute: [selective, none]\n  recompute_modules: [moe_act, layernorm]\n", "")
            .replace("  ep: 4\n", ""), "s.yaml")


def test_an_llm_sweep_interleaves_virtual_stages_and_labels_refusals():
    import pandas as pd

    from simulator.report.tables import llm_table
    from simulator.scenario import read_scenario

    text = """name: sweep
topology: {name: hgx-b200, params: {nodes: 1}}
llm: {model: qwen3-30b-a3b, pp: 2, virtual_stages: [1, 2], ep: 4, global_batch: 8}
"""
    study = read_scenario(text, "s.yaml").study
    kinds = {study.layout(p, 8).virtual_stages: study.layout(p, 8).pipeline
             for p in study.points()}
    assert kinds == {1: "1f1b", 2: "interleaved"}
    nan = float("nan")
    row = dict(tp=1, cp=1, ep=4, pp=2, dp=nan, virtual_stages=1, micro_batch=1,
               global_batch=8, recompute="none", zero_stage=0, refused="no",
               **{c: nan for c in ("step_time_s", "tokens_per_s", "hardware_tflops_per_gpu",
                                   "mfu_pct", "compute_s", "exposed_tp_s", "exposed_cp_s",
                                   "exposed_ep_s", "exposed_pp_s", "exposed_dp_s", "bubble_s",
                                   "optimizer_s")})
    assert "tp1 cp1 ep4 pp2 dp? v1 mb1/8 none z0" in llm_table(pd.DataFrame([row]))


def test_model_flops_per_token_match_nvidias_published_counter():
    """NVIDIA's tables print Model TFLOP/s/GPU next to tokens/s/GPU: their ratio is the FLOPs a
    token costs by Megatron-LM's counter (``num_floating_point_operations``, which halves the
    causal attention core). The architecture's FLOPs (:func:`model_flops_per_step`, attention
    counted whole), with the causal half taken off, agree within the tables' rounding for
    DeepSeek-V3 (MLA, MoE, MTP) and Qwen3. GPT-OSS is left out: NVIDIA's figure (27.2 GFLOP a
    token) is below 6 x its 5.1B active parameters, so their counter did not count its shape.
    The GB200 and GB300 tables' dense Llama rows are left out too (70B agrees within 0.2 %,
    405B within 1.7 %, its rows 0.4 % apart from each other)."""
    from pathlib import Path

    import pandas as pd

    data = Path(__file__).parent / "data" / "measurements"
    rows = pd.concat([pd.read_csv(data / f"train_llm_nvidia_{name}.csv") for name in
                      ("dgxb200_deepseek", "dgxb200_moe", "dgxh100_moe", "dgxgb200",
                       "dgxb300", "dgxgb300")])
    checked = set()
    for row in rows.itertuples():
        if row.model == "gpt-oss-120b" or row.model.startswith("llama"):
            continue
        m = get_llm_model(row.model)
        whole = model_flops_per_step(m, 1)
        core = sum(layer_forward_flops(m, 1, i).attention_core for i in range(m.layers)) \
            + m.mtp_layers * layer_forward_flops(m, 1, m.layers - 1).attention_core
        ours = (whole - 3 * core / 2) / m.seq_len
        theirs = row.published_model_tflops_per_gpu * 1e12 / row.published_tokens_per_s_per_gpu
        assert ours == pytest.approx(theirs, rel=0.015), (row.model, ours, theirs)
        checked.add(row.model)
    assert checked == {"deepseek-v3", "qwen3-30b-a3b", "qwen3-235b-a22b"}


def test_the_llm_section_states_the_moe_recipe_for_every_point():
    from pathlib import Path

    from simulator.scenario import load_scenario, read_scenario

    path = Path(__file__).parent.parent / "scenarios" / "deepseek_v3_b200.yaml"
    study = load_scenario(str(path)).study
    layouts = [study.layout(p, 256) for p in study.points()]
    assert [lay.ep for lay in layouts] == [8, 16, 32]
    for lay in layouts:
        assert (lay.dispatcher, lay.ep_overlap, lay.fp8_recipe, lay.precision) == (
            "deepep", True, "mxfp8", "fp8")
        assert lay.pipeline_layout == (4,) * 15 + (1,) and lay.pipeline == "interleaved"
        assert lay.selective_modules == ("mla_up_proj", "mlp")
    text = path.read_text().replace("precision: fp8", "precision: [fp8, bf16]")
    mixed = read_scenario(text, "m.yaml").study
    recipes = {(lay.precision, lay.fp8_recipe) for lay in
               (mixed.layout(p, 256) for p in mixed.points())}
    assert recipes == {("fp8", "mxfp8"), ("bf16", "delayed")}
    with pytest.raises(ConfigError, match=r"m.yaml:\d+: llm.dispatcher: not used with search"):
        read_scenario("""name: s
topology: hgx-b200
llm: {model: qwen3-30b-a3b, global_batch: 8, dispatcher: hybridep, search: {tp: [1]}}
""", "m.yaml")


def test_the_cli_and_scenarios_state_where_gradients_are_reduced():
    from pathlib import Path

    import argparse

    from simulator.cli.llm import add_llm_parser, layout_from_args
    from simulator.scenario import load_scenario
    from simulator.workload.llm.layout import main_grad_bytes

    parser = argparse.ArgumentParser()
    add_llm_parser(parser.add_subparsers())
    base = ["llm", "--model", "qwen3-30b-a3b", "--topology", "hgx-b200", "--ep", "8", "--dp", "8",
            "--global-batch", "64"]
    assert layout_from_args(parser.parse_args(base)).main_grads == "auto"
    bf16 = layout_from_args(parser.parse_args(base + ["--main-grads", "bf16"]))
    assert bf16.main_grads == "bf16" and main_grad_bytes(bf16) == 2
    path = Path(__file__).parent.parent / "scenarios" / "deepseek_v3_b200.yaml"
    study = load_scenario(str(path)).study
    assert {study.layout(p, 256).main_grads for p in study.points()} == {"bf16"}
