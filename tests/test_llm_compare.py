"""LLM training tables against simulated steps, the ``llm:`` scenario section, uneven stages."""

import math
from pathlib import Path

import pandas as pd
import pytest

from simulator.cli import main
from simulator.comparison.llm import compare_llm, row_layout, summarise_llm
from simulator.errors import ConfigError
from simulator.measure.llm_table import read_llm_table
from simulator.scenario import read_scenario, run_study
from simulator.topology import load_topology
from simulator.workload.llm.layout import Layout
from simulator.workload.llm.memory import chunk_layers, chunk_sizes
from simulator.workload.llm.registry import get_llm_model
from simulator.workload.llm.step import simulate_step

DATA = Path(__file__).parent / "data" / "measurements"
TABLE = DATA / "train_llm_megatron_a100_v100.csv"

HEADER = ("source_id,source,model,layers,hidden,heads,ffn_hidden,vocab,seq_len,gpus,gpu_model,"
          "tp,pp,dp,micro_batch,global_batch,precision,activation_recompute,"
          "measured_tflops_per_gpu,measured_step_time_s\n")


def _write(tmp_path, *rows) -> Path:
    path = tmp_path / "llm.csv"
    path.write_text(HEADER + "".join(r + "\n" for r in rows))
    return path


def test_the_table_reads_as_published():
    frame = read_llm_table(TABLE)
    assert len(frame) == 22
    assert frame["tp"].tolist()[:4] == [1, 2, 4, 8]
    assert frame["measured_tflops_per_gpu"].iloc[0] == 137.0
    assert pd.isna(frame["micro_batch"].iloc[0])          # the source does not state it


def test_a_column_stated_on_some_rows_only_reads_as_integers_and_blanks(tmp_path):
    path = _write(tmp_path,
                  "a,src,GPT 1.7B,24,2304,24,,51200,2048,32,A100,1,1,32,4,512,,,137,",
                  "b,src,GPT 1.7B,24,2304,24,,51200,2048,32,A100,1,1,32,,512,,,137,")
    frame = read_llm_table(path)
    assert frame["micro_batch"].iloc[0] == 4
    assert pd.isna(frame["micro_batch"].iloc[1])
    assert str(frame["micro_batch"].dtype) == "Int64"


def test_a_row_states_where_its_gradients_are_reduced():
    """Megatron-Bridge's MoE recipes set grad_reduce_in_fp32 = False: the table's main_grads
    column says bf16, the layout carries it (half the data-parallel bytes of fp32), a blank
    keeps Megatron's default, and a value that is no precision is refused by name."""
    from simulator.workload.llm.layout import main_grad_bytes

    moe = read_llm_table(DATA / "train_llm_nvidia_dgxb200_moe.csv")
    layout, _ = row_layout(moe.iloc[0])
    assert layout.main_grads == "bf16" and main_grad_bytes(layout) == 2
    assert (layout.ep, layout.expert_tp, layout.zero_stage) == (8, 1, 1)
    row = moe.iloc[0].copy()
    row["main_grads"] = ""
    assert row_layout(row)[0].main_grads == "auto" and main_grad_bytes(row_layout(row)[0]) == 4
    row["main_grads"] = "fp64"
    with pytest.raises(ConfigError, match="main_grads 'fp64': expected one of auto, fp32"):
        row_layout(row)


def test_a_row_without_a_measurement_is_refused_naming_the_line(tmp_path):
    path = _write(tmp_path, "x,src,GPT 1.7B,24,2304,24,,51200,2048,32,A100,1,1,32,,512,,,,")
    with pytest.raises(ConfigError, match=r"llm.csv:2: no measured value"):
        read_llm_table(path)


def test_row_layout_fills_blanks_and_says_so():
    frame = read_llm_table(TABLE)
    layout, assumed = row_layout(frame.iloc[0])        # Narayanan's 1.7B row, 2021
    assert (layout.tp, layout.pp, layout.dp) == (1, 1, 32)
    assert layout.micro_batch == 512 // 32             # one micro-batch per replica, pp = 1
    assert layout.recompute == "full" and layout.precision == "fp16"
    assert layout.attention == "unfused"               # a 2021 run predates FlashAttention
    assert any(a.startswith("attention=unfused") for a in assumed)
    layout, _ = row_layout(frame.iloc[5])              # 76.1B: pp 4, micro-batch 1
    assert (layout.pp, layout.micro_batch) == (4, 1)


def test_compare_simulates_each_row_and_the_error_has_its_sign(tmp_path):
    path = _write(tmp_path,
                  "a,Narayanan SC21,GPT 1.7B,24,2304,24,,51200,2048,32,A100-SXM4-80GB,1,1,32,,512,"
                  "mixed16,full,137,",
                  "b,Megatron 2020,GPT-2 1B,24,1920,15,,51200,1024,1,A100,1,1,1,,16,mixed16,,"
                  ",1.076")
    points = compare_llm(read_llm_table(path), "dgx-a100-2node")
    assert points["skipped"].tolist() == ["", ""]
    assert points["metric"].tolist() == ["tflops_per_gpu", "step_time_s"]
    tflops, step = points.iloc[0], points.iloc[1]
    assert tflops["simulated"] == pytest.approx(tflops["hardware_tflops_per_gpu"])
    assert tflops["error_pct"] == pytest.approx((tflops["simulated"] / 137 - 1) * 100)
    # a step time: optimistic (> 0) when the simulated step is shorter
    assert step["error_pct"] == pytest.approx((1.076 / step["simulated"] - 1) * 100)
    summary = summarise_llm(points)
    assert summary["overall"]["points"].iloc[0] == 2
    assert summary["overall"]["mape_pct"].iloc[0] == pytest.approx(
        points["error_pct"].abs().mean())


def test_a_bigger_gpu_in_the_row_changes_the_answer(tmp_path):
    row = ("a,SC21,GPT 7.5B,36,4096,32,,51200,2048,8,{gpu},8,1,1,,8,bf16,full,140,")
    a100 = compare_llm(read_llm_table(_write(tmp_path, row.format(gpu="A100-SXM4-80GB"))),
                       "dgx-a100-2node")
    h100 = compare_llm(read_llm_table(_write(tmp_path, row.format(gpu="H100-SXM5-80GB"))),
                       "dgx-a100-2node")
    assert h100["simulated"].iloc[0] > 1.5 * a100["simulated"].iloc[0]


def test_a_gpu_family_in_the_row_picks_that_family(tmp_path):
    # Megatron-LM's 2020 README writes "V100 (DGX-2)" and "A100 (DGX-A100)", no exact preset
    row = ("a,M20,GPT-2 1B,24,1920,15,,51200,1024,1,{gpu},1,1,1,8,8,mixed16,full,71.9,")
    points = {gpu: compare_llm(read_llm_table(_write(tmp_path, row.format(gpu=gpu))),
                               "dgx-a100-2node").iloc[0]
              for gpu in ("V100 (DGX-2; variant not stated)", "V100-SXM2-32GB",
                          "A100 (DGX-A100; 40/80GB not stated)", "A100-SXM4-40GB",
                          "TPU v4")}
    v100, a100 = points["V100 (DGX-2; variant not stated)"], points["A100-SXM4-40GB"]
    # a V100 row runs on a V100, not on the preset's A100, and says so
    assert v100["simulated"] == pytest.approx(points["V100-SXM2-32GB"]["simulated"], rel=1e-12)
    assert v100["simulated"] < 0.6 * a100["simulated"]
    assert "gpu=v100-sxm2-32gb" in v100["assumed"]
    # a family the preset's own GPU belongs to keeps the preset's variant, silently
    family = points["A100 (DGX-A100; 40/80GB not stated)"]
    assert family["simulated"] == pytest.approx(a100["simulated"], rel=1e-12)
    assert "gpu=" not in family["assumed"]
    # a GPU the registry does not know: the preset's, noted
    assert points["TPU v4"]["simulated"] == pytest.approx(a100["simulated"], rel=1e-12)
    assert "gpu=a100-sxm4-40gb" in points["TPU v4"]["assumed"]
    assert "TPU v4" in points["TPU v4"]["assumed"]


def test_the_words_of_the_row_choose_the_variant_and_the_user_overrides(tmp_path):
    row = ("a,X,GPT-2 1B,24,1920,15,,51200,1024,1,{gpu},1,1,1,8,8,mixed16,full,71.9,")
    path = _write(tmp_path, row.format(gpu="A100 80GB"))
    on_h100 = compare_llm(read_llm_table(path), "hgx-h100").iloc[0]
    assert "gpu=a100-sxm4-80gb" in on_h100["assumed"]          # "80GB" picks the variant
    exact = compare_llm(read_llm_table(_write(tmp_path, row.format(gpu="A100-SXM4-80GB"))),
                        "hgx-h100").iloc[0]
    assert on_h100["simulated"] == pytest.approx(exact["simulated"], rel=1e-12)
    # --param gpu=... is the user's word: no guess, no note
    forced = compare_llm(read_llm_table(path), "hgx-h100", {"gpu": "h100-sxm5-80gb"}).iloc[0]
    assert "gpu=" not in forced["assumed"]
    assert forced["simulated"] > 1.5 * on_h100["simulated"]


def test_cli_compare_on_an_llm_table_writes_one_row_per_measured_row(tmp_path, capsys):
    path = _write(tmp_path,
                  "a,SC21,GPT 1.7B,24,2304,24,,51200,2048,32,A100-SXM4-80GB,1,1,32,,512,mixed16,"
                  "full,137,",
                  "b,SC21,GPT 3.6B,30,3072,32,,51200,2048,64,A100-SXM4-80GB,2,1,32,,512,mixed16,"
                  "full,138,")
    out = tmp_path / "out"
    assert main(["compare", str(path), "--topology", "dgx-a100-2node", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "GPT 3.6B" in text and "by model" in text
    written = pd.read_csv(out / "compare.csv")
    assert len(written) == 2
    for column in ("source_id", "model", "gpus", "tp", "pp", "dp", "metric", "measured",
                   "simulated", "error_pct"):
        assert column in written
    assert (out / "mape.csv").exists()


def test_cli_compare_on_an_llm_table_needs_a_topology(tmp_path, capsys):
    path = _write(tmp_path, "a,SC21,GPT 1.7B,24,2304,24,,51200,2048,32,A100,1,1,32,,512,,,137,")
    assert main(["compare", str(path)]) == 2
    err = capsys.readouterr().err
    assert "--topology" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("layers, chunks, expected", [
    (96, 8, [12] * 8),
    (126, 16, [7] + [8] * 14 + [7]),          # Llama 3 405B as Meta ran it
    (10, 4, [2, 3, 3, 2]),
    (7, 4, [1, 2, 2, 2]),
])
def test_uneven_chunks_shorten_the_ends(layers, chunks, expected):
    sizes = chunk_sizes(layers, chunks)
    assert sizes == expected and sum(sizes) == layers


def test_uneven_pipeline_places_every_layer_once():
    model = get_llm_model("llama3-405b")
    layout = Layout(tp=8, pp=16, dp=1, global_batch=16)
    seen = [i for s in range(16) for i in chunk_layers(model, layout, s, 0)]
    assert seen == list(range(126))


def test_layers_far_from_a_multiple_are_refused():
    from simulator.workload.llm.layout import check_layout

    with pytest.raises(ConfigError, match="do not split over"):
        check_layout(get_llm_model("gpt3-175b"), Layout(tp=8, pp=10, dp=1, global_batch=10))


SCENARIO = """
topology: {name: dgx-a100-2node, params: {nodes: 2, gpu: a100-sxm4-80gb}}
llm:
  model: gpt3-1.3b
  tp: [1, 2]
  pp: [1, 2]
  global_batch: 32
  recompute: full
"""


def test_the_llm_section_sweeps_and_fills_dp():
    scenario = read_scenario(SCENARIO, "s.yaml")
    frame = run_study(scenario).frame
    assert len(frame) == 4
    assert (frame["tp"] * frame["pp"] * frame["dp"] == 16).all()
    assert (frame["refused"].fillna("") == "").all()
    assert frame["step_time_s"].nunique() == 4       # every layout gives its own answer
    # the same step as the command's entrance
    one = frame[(frame["tp"] == 2) & (frame["pp"] == 2)].iloc[0]
    direct = simulate_step(load_topology("dgx-a100-2node", {"nodes": "2",
                                                            "gpu": "a100-sxm4-80gb"}),
                           "gpt3-1.3b", Layout(tp=2, pp=2, dp=4, global_batch=32,
                                               recompute="full")).row
    assert math.isclose(one["step_time_s"], direct["step_time_s"], rel_tol=1e-12)


def test_a_layout_that_cannot_run_is_a_row_saying_why():
    text = SCENARIO.replace("tp: [1, 2]", "tp: [1, 3]")
    frame = run_study(read_scenario(text, "s.yaml")).frame
    refused = frame[frame["tp"] == 3]["refused"]
    assert refused.str.len().gt(0).all()


def test_a_bad_llm_key_names_the_file_and_line():
    text = SCENARIO.replace("recompute: full", "recompute: sometimes")
    with pytest.raises(ConfigError, match=r"s.yaml:\d+: llm.recompute"):
        read_scenario(text, "s.yaml")
