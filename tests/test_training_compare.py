"""Frameworks' bucket policies, compute anchored on a measured GPU, and ``compare`` on training
tables: hand-derived buckets, exact anchoring, and comparisons whose numbers move with inputs."""

import io
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from simulator.comparison.training import (compare_training, mape_failures, model_name, select,
                                        summarise_training)
from simulator.errors import ConfigError
from simulator.measure.schema import read_training
from simulator.topology import load_topology
from simulator.workload.compute import compute_profile
from simulator.workload.models import get_model
from simulator.workload.frameworks import (FRAMEWORKS, Framework, detect_framework,
                                           parse_framework)
from simulator.workload.training import make_buckets, negotiation_s

DATA = Path(__file__).parent / "data" / "training"
TF = DATA / "train_tf_benchmarks_2017_ps_vs_replicated.csv"
DLPERF = DATA / "train_dlperf_v100x32_edr.csv"
MiB = 1 << 20


# -- bucket policies -----------------------------------------------------------------------------

def test_per_layer_buckets_are_each_layer_with_gradients_at_its_backward_end():
    grads, bwd = [100, 0, 300, 400], [1.0, 2.0, 3.0, 4.0]
    buckets = make_buckets(grads, bwd, 10**9, True, FRAMEWORKS["tf-per-variable"])
    # backward order: layer 3 (done 4), 2 (7), 1 (9, no gradient), 0 (10)
    assert [(b.layers, b.size_bytes, b.ready_s) for b in buckets] == [
        ((3,), 400, 4.0), ((2,), 300, 7.0), ((0,), 100, 10.0)]


def test_ddp_first_bucket_is_smaller():
    grads = [MiB // 2] * 8                       # backward: 0.5 MiB per layer
    buckets = make_buckets(grads, [1.0] * 8, 25 * MiB, True, FRAMEWORKS["ddp"])
    assert [b.size_bytes for b in buckets] == [MiB, 3 * MiB]
    assert [b.ready_s for b in buckets] == [2.0, 8.0]


def test_horovod_cycle_fuses_what_is_ready_by_each_boundary_plus_negotiation():
    fw = Framework("h", "cycle", bucket_bytes=250, cycle_s=5e-3, negotiation_hops=2)
    # backward order: layers 3, 2, 1, 0 ready at 1, 2, 6, 16 ms
    grads, bwd = [10, 100, 200, 100], [10e-3, 4e-3, 1e-3, 1e-3]
    buckets = make_buckets(grads, bwd, 10**9, True, fw, negotiation_s=1e-4)
    got = [(b.layers, b.size_bytes, round(b.ready_s, 9)) for b in buckets]
    # layers 3 and 2 ready by 5 ms (300 bytes > 250: two buffers at the same boundary),
    # layer 1 by 10 ms, layer 0 by 20 ms
    assert got == [((3,), 100, 0.0051), ((2,), 200, 0.0051), ((1,), 100, 0.0101),
                   ((0,), 10, 0.0201)]


def test_negotiation_is_hops_times_the_farthest_path_latency():
    graph = load_topology("star", {"hosts": 4, "link_latency": "3us"})
    workers = ["host0", "host1", "host2", "host3"]
    assert negotiation_s(graph, workers, FRAMEWORKS["horovod"]) == pytest.approx(2 * 6e-6)
    assert negotiation_s(graph, workers, FRAMEWORKS["ddp"]) == 0.0


@pytest.mark.parametrize("text, name", [
    ("NGC MXNet 1.6.0 (nvcr 20.03) + DALI + Horovod", "horovod"),
    ("NGC PyTorch 1.5.0a0 (nvcr 20.03) + DALI + APEX DDP", "apex-ddp"),
    ("PyTorch 1.6.0 pytorch/examples DDP", "ddp"),
    ("TensorFlow (tf_cnn_benchmarks, TF hash b1e174e): replicated (with NCCL)", "tf-per-variable"),
    ("Horovod 0.28.1 + PyTorch 2.0", "horovod-0.21"),
])
def test_framework_detected_from_the_measurement_text(text, name):
    assert detect_framework(text).name == name


def test_apex_buckets_count_elements_so_fp16_buckets_hold_half_the_bytes():
    apex = FRAMEWORKS["apex-ddp"]                # message_size = 10 M elements
    grads = [4_000_000] * 30                      # 1 M fp32 elements per layer
    fp32 = make_buckets(grads, [1.0] * 30, 1, True, apex, element_bytes=4)
    assert [b.size_bytes for b in fp32] == [40_000_000, 40_000_000, 40_000_000]
    fp16 = make_buckets([g // 2 for g in grads], [1.0] * 30, 1, True, apex, element_bytes=2)
    assert [b.size_bytes for b in fp16] == [20_000_000] * 3     # 10 M elements each
    assert [b.ready_s for b in fp16] == [10.0, 20.0, 30.0]
    assert apex.bucket_cap_bytes(2) == 20_000_000 and FRAMEWORKS["ddp"].bucket_cap_bytes(2) \
        == 25 * MiB


@pytest.mark.parametrize("model, name", [
    ("BERT-base pretraining", "apex-ddp-bert"), ("pre-training BERT-large", "apex-ddp-bert"),
    ("BERT-large SQuAD fine-tuning", "apex-ddp"), ("ResNet-50 v1.5", "apex-ddp"),
    ("RoBERTa-base pretraining", "apex-ddp")])
def test_apex_bert_is_the_deeplearningexamples_recipe_with_one_bucket_after_backward(model,
                                                                                        name):
    text = "NGC PyTorch 1.5.0a0 (nvcr 20.03) + APEX"
    assert detect_framework(text, model).name == name
    if name == "apex-ddp-bert":
        # BERT-base's 110 M gradients are below message_size = 250 M: one call, when backward
        # has ended (no overlap); BERT-large's 340 M make a 250 M bucket, then the rest
        for model_name, calls in (("bert_base", 1), ("bert_large", 2)):
            layers = get_model(model_name).layers
            grads = [layer.params * 2 for layer in layers]
            buckets = make_buckets(grads, [1.0] * len(grads), 25 * MiB, True,
                                   FRAMEWORKS[name], element_bytes=2)
            assert len(buckets) == calls and buckets[-1].ready_s == float(len(grads))
            assert buckets[0].size_bytes >= (500_000_000 if calls == 2 else sum(grads))


def test_unknown_framework_text_is_none_and_bad_spec_is_one_clear_error():
    assert detect_framework("OneFlow 0.2.0") is None
    assert parse_framework("cycle:64MiB:5ms").cycle_s == pytest.approx(5e-3)
    assert parse_framework("size:4MiB").bucket_bytes == 4 * MiB
    with pytest.raises(ConfigError, match="cycle:BYTES:TIME"):
        parse_framework("cycle:64MiB")
    with pytest.raises(ConfigError, match="must be > 0"):
        parse_framework("size:0")
    with pytest.raises(ConfigError, match="ddp"):
        parse_framework("nonsense")


# -- compute anchored on one measured GPU --------------------------------------------------------

def test_anchored_profile_runs_exactly_the_measured_throughput_and_keeps_the_split():
    prof = compute_profile("resnet50", "v100-sxm2-16gb", 64)
    anchored = prof.anchored(400.0, 64)
    assert anchored.iteration_s == pytest.approx(64 / 400.0, rel=1e-12)
    assert anchored.layers[3].backward_s / anchored.layers[3].forward_s == pytest.approx(
        prof.layers[3].backward_s / prof.layers[3].forward_s)
    with pytest.raises(ValueError):
        prof.anchored(0.0, 64)


# -- compare on training tables ------------------------------------------------------------------

def test_model_names_of_the_public_files_map_to_the_registry():
    assert model_name("ResNet-50 v1.5") == "resnet50"
    assert model_name("BERT-base pretraining") == "bert_base"
    assert model_name("InceptionV3") == "inception_v3"
    with pytest.raises(ConfigError, match="known"):
        model_name("NotANet")


@pytest.fixture(scope="module")
def dgx1_ps():
    measured = select(read_training(TF), ["hardware=DGX-1", "model=ResNet-50"])
    return compare_training(measured, load_topology("dgx1-p100"))


def test_one_gpu_points_reproduce_the_measurement_and_speedup_is_one(dgx1_ps):
    one = dgx1_ps[dgx1_ps["gpus"] == 1]
    assert len(one) > 0
    assert (one["simulated_speedup"] == 1.0).all()
    assert one["simulated_img_s"].to_numpy() == pytest.approx(one["measured_img_s"].to_numpy())


def test_single_machine_ps_speedups_are_close_and_fall_with_gpus(dgx1_ps):
    scaled = dgx1_ps[dgx1_ps["gpus"] > 1]
    assert scaled["abs_speedup_error_pct"].mean() < 5.0
    series = (scaled["measured_img_s"] / scaled["measured_speedup"]).round(1)
    for _, group in scaled.groupby(["framework", "batch_per_gpu", series]):
        ordered = group.sort_values("gpus")
        eff = (ordered["simulated_speedup"] / ordered["gpus"]).tolist()
        assert eff == sorted(eff, reverse=True)


def test_summary_counts_only_multi_gpu_points_and_max_mape_flags(dgx1_ps):
    summary = summarise_training(dgx1_ps)
    assert summary["overall"].iloc[0]["points"] == int((dgx1_ps["gpus"] > 1).sum())
    assert mape_failures(summary, 0.0)
    assert not mape_failures(summary, 1000.0)


def test_a_faster_network_raises_simulated_speedup_of_a_bandwidth_bound_model():
    measured = select(read_training(DLPERF), ["framework=Horovod", "model=BERT",
                                               "precision=AMP"])
    measured = measured[measured["gpus"] == 32].reset_index(drop=True)
    slow = compare_training(measured, load_topology(
        "dgx1-v100", {"nodes": 4, "nics_per_node": 1, "nic_bandwidth": "25 Gbps"}))
    fast = compare_training(measured, load_topology("dgx1-v100",
                                                    {"nodes": 4, "nics_per_node": 1}))
    assert (fast["simulated_speedup"] > slow["simulated_speedup"]).all()
    assert (fast["library"] == "nccl").all()
    assert set(fast["framework_model"]) == {"horovod"}


def test_apex_bert_rows_wait_for_backward_and_expose_more_of_their_all_reduce():
    """DLPerf's PyTorch BERT rows ran NVIDIA's recipe (apex DDP, message_size = 250 M
    elements): one all-reduce after backward, so more of it is exposed than with Apex's
    default 10 M-element buckets, which overlap backward."""
    measured = select(read_training(DLPERF), ["framework=PyTorch 1.5.0a0", "model=BERT",
                                               "precision=FP32"])
    measured = measured[measured["gpus"] == 32].reset_index(drop=True)
    graph = load_topology("dgx1-v100", {"nodes": 4, "nics_per_node": 1})
    recipe = compare_training(measured, graph)
    default = compare_training(measured, graph, framework=FRAMEWORKS["apex-ddp"])
    assert set(recipe["framework_model"]) == {"apex-ddp-bert"}
    assert (recipe["exposed_comm_s"] > default["exposed_comm_s"] + 0.01).all()
    assert (recipe["simulated_speedup"] < default["simulated_speedup"]).all()


def test_training_buckets_that_nccl_runs_as_nvls_trees_take_the_nvswitches(tmp_path):
    """On H100 machines NCCL's tuner runs a large all-reduce as an NVLink SHARP tree, whose
    schedule reduces in each machine's NVSwitch: a training row's buckets get those helper
    ranks as a single call does (this failed with 'schedule needs 9 ranks, placement has 8'
    before), on one machine and across machines, within a few percent of linear."""
    from simulator.library import training_library

    graph = load_topology("hgx-h100", {"nodes": 2})
    assert training_library(graph, "nccl").plan(
        graph, "allreduce", "auto", 64 << 20, 8).algorithm == "nvls_tree"
    rows = pd.DataFrame([{
        "source_id": "t", "model": "ResNet-50", "dataset": "ImageNet", "hardware": "H100",
        "framework": "Horovod", "arch": "allreduce", "gpus": g, "nodes": g // 8 or 1,
        "gpus_per_node": min(g, 8), "precision": "FP32", "batch_per_gpu": 64,
        "throughput_img_s": 100.0 * g, "throughput_unit": "images/s", "speedup": float(g),
        "efficiency": 1.0, "derived_fields": "", "notes": ""} for g in (1, 8, 16)])
    path = tmp_path / "h100.csv"
    rows.to_csv(path, index=False)
    points = compare_training(read_training(path), graph)
    speedups = points.set_index("gpus")["simulated_speedup"]
    assert 7.2 < speedups[8] < 8.0 and 14.0 < speedups[16] < 16.0


def test_measured_single_gpu_anchor_changes_the_throughput_not_its_definition():
    measured = select(read_training(DLPERF), ["framework=OneFlow", "model=ResNet",
                                               "precision=FP32"])
    measured = measured[measured["gpus"].isin([1, 8])].reset_index(drop=True)
    graph = load_topology("dgx1-v100")
    anchored = compare_training(measured, graph, anchor="measured")
    modelled = compare_training(measured, graph, anchor="model")
    one = anchored[anchored["gpus"] == 1]
    assert one["simulated_img_s"].iloc[0] == pytest.approx(one["measured_img_s"].iloc[0])
    assert modelled["simulated_img_s"].iloc[0] != pytest.approx(one["measured_img_s"].iloc[0])


@pytest.mark.parametrize("text, expected", [
    ("mixed precision", "amp"), ("AMP", "amp"), ("FP16 (mixed)", "amp"), ("mixed16", "amp"),
    ("Mixed Precision (AMP)", "amp"), ("mixed_float16", "amp"), ("amp", "amp"),
    ("FP16 compute, FP32 master weights", "amp"), ("TF32", "fp32"), ("fp32", "fp32"),
    ("Single precision", "fp32"), ("BF16", "bf16"), ("bf16 (mixed)", "bf16"),
    ("mixed_bfloat16", "bf16"), ("FP16", "fp16"), ("  fp16.", "fp16"),
])
def test_precision_spellings_of_papers_and_vendor_tables(text, expected):
    from simulator.comparison.training import precision_name

    assert precision_name(text) == expected


@pytest.mark.parametrize("text, word", [("quarter precision", "'quarter' not understood"),
                                        ("FP8 (Transformer Engine)", "'fp8' is a format"),
                                        ("precision", "names no precision")])
def test_a_precision_not_understood_names_the_word(text, word):
    from simulator.comparison.training import precision_name

    with pytest.raises(ConfigError, match=re.escape(word)):
        precision_name(text)


@pytest.mark.parametrize("text, expected", [
    ("BERT-large pretraining (LAMB), seq len 128", "bert_large:seq128"),
    ("BERT-base pretraining", "bert_base"), ("ResNet-50 v1.5", "resnet50"),
    ("ResNet-50 v1b (gluon-cv)", "resnet50"), ("ResNet-50 v1.5 (TF32)", "resnet50"),
    ("GPT-2 XL, sequence length 512", "gpt2_xl:seq512"), ("bert_large", "bert_large"),
    ("InceptionV3", "inception_v3"), ("small_cnn", "small_cnn"),
    ("ResNet-18", "resnet18"), ("ResNet-34 (torchvision)", "resnet34"), ("VGG-19", "vgg19"),
    ("VGG 11", "vgg11"),
])
def test_model_names_followed_by_words(text, expected):
    assert model_name(text) == expected


@pytest.mark.parametrize("text, word", [("GoogLeNet", "'googlenet' not understood"),
                                        ("ResNet-200", "'200' not understood"),
                                        ("ResNet-50, seq len 128", "'seq len 128' not "
                                                                   "understood"),
                                        ("BERT-large, seq len 1024", "1..512")])
def test_a_model_not_understood_names_the_word(text, word):
    with pytest.raises(ConfigError, match=re.escape(word)):
        model_name(text)


def test_a_sequence_length_is_simulated_at_that_length():
    long, short = get_model("bert_large"), get_model("bert_large:seq128")
    assert short.params == long.params
    assert short.forward_flops < long.forward_flops / 4
    with pytest.raises(ConfigError, match="NAME:seqN"):
        get_model("resnet50:seq128")


def test_compare_reads_the_spellings_of_a_vendor_table(tmp_path, capsys):
    """The issue's table: precision 'mixed precision' and a model followed by words, on the
    command line; a row it cannot read says which word."""
    from simulator.cli import main

    table = pd.read_csv(DLPERF)
    rows = table[table["framework"].str.contains("Horovod") & table["model"].str.contains("BERT")
                 & (table["precision"] == "AMP") & table["gpus"].isin([1, 8])].head(2)
    assert len(rows) == 2
    rows = rows.assign(precision="mixed precision",
                       model="BERT-base pretraining (LAMB), seq len 128")
    odd = rows.head(1).assign(precision="quarter precision")
    path = tmp_path / "vendor.csv"
    pd.concat([rows, odd]).to_csv(path, index=False)
    assert main(["compare", str(path), "--topology", "dgx1-v100"]) == 0
    out, err = capsys.readouterr()
    assert "skipped" in err and "'quarter' not understood" in err
    assert len([l for l in err.splitlines() if "skipped" in l]) == 1
    points = compare_training(read_training(path), load_topology("dgx1-v100"))
    assert len(points) == 2 and set(points["precision"]) == {"amp"}


def test_select_errors_name_the_column():
    measured = read_training(TF)
    with pytest.raises(ConfigError, match="no column 'nope'"):
        select(measured, ["nope=x"])
    with pytest.raises(ConfigError, match="no row matches"):
        select(measured, ["model=zzz"])


def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "simulator", *args], capture_output=True,
                          text=True, cwd=cwd)


def test_cli_compare_on_a_training_table_writes_everything_and_gates_on_max_mape(tmp_path):
    out = tmp_path / "out"
    done = _cli("compare", str(TF), "--topology", "dgx1-p100", "--select", "hardware=DGX-1",
                "--select", "model=AlexNet", "-o", str(out), "--max-mape", "80")
    assert done.returncode == 0, done.stderr
    assert "speedup MAPE by arch" in done.stdout
    frame = pd.read_csv(out / "compare.csv")
    assert {"measured_speedup", "simulated_speedup", "speedup_error_pct"} <= set(frame.columns)
    assert (out / "speedup_measured_vs_simulated.png").is_file()
    gated = _cli("compare", str(TF), "--topology", "dgx1-p100", "--select", "hardware=DGX-1",
                 "--select", "model=AlexNet", "--max-mape", "0")
    assert gated.returncode == 1
    assert "FAILED" in gated.stderr


@pytest.mark.parametrize("args, needle", [
    (("--select", "hardware"), "COLUMN=TEXT"),
    (("--framework", "cycle:1MiB"), "cycle:BYTES:TIME"),
    (("--slices", "4"), "does not apply to a training file"),
])
def test_cli_training_mistakes_are_one_line(tmp_path, args, needle):
    done = _cli("compare", str(TF), "--topology", "dgx1-p100", *args, "-o", str(tmp_path / "o"))
    assert done.returncode == 2
    assert needle in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "o").exists()


def test_training_flags_on_a_collective_file_are_refused():
    points = Path(__file__).parent / "data" / "measurements"
    csv = next(iter(sorted(points.glob("nccl_*.csv"))))
    done = _cli("compare", str(csv), "--topology", "dgx-a100", "--anchor", "model")
    assert done.returncode == 2
    assert "applies to training files" in done.stderr


# -- train and scenarios take the framework, the measured GPU and the library -------------------

def _train_csv(*extra):
    done = _cli("train", "--topology", "dgx1-v100", "--param", "nodes=2", "--param",
                "nics_per_node=1", "--model", "resnet50", "--gpus", "1,16",
                "--batch-per-gpu", "64", "--format", "csv", *extra)
    assert done.returncode == 0, done.stderr
    frame = pd.read_csv(io.StringIO(done.stdout))
    return frame.set_index("gpus")


def test_train_single_gpu_throughput_fixes_the_one_gpu_iteration():
    frame = _train_csv("--single-gpu-throughput", "320img/s")
    assert frame.loc[1, "throughput_samples_s"] == pytest.approx(320.0)
    assert frame.loc[1, "iteration_s"] == pytest.approx(64 / 320.0)


def test_train_per_layer_calls_cost_more_than_fused_buckets_on_the_library():
    fused = _train_csv("--framework", "horovod", "--single-gpu-throughput", "320img/s")
    per_layer = _train_csv("--framework", "per_layer", "--single-gpu-throughput", "320img/s")
    assert per_layer.loc[16, "comm_busy_s"] > fused.loc[16, "comm_busy_s"]


def test_scenario_training_takes_framework_throughput_and_library(tmp_path):
    from simulator.scenario import load_scenario, scenario_training

    text = """name: t
topology: dgx1-v100
training:
  models: [resnet50]
  gpus: [1, 8]
  aggregations: [ring]
  framework: horovod
  single_gpu_throughput: 300 img/s
library: {name: ideal}
"""
    path = tmp_path / "s.yaml"
    path.write_text(text)
    scenario = load_scenario(str(path))
    assert scenario.training.framework.name == "horovod"
    assert scenario.training.single_gpu_throughput == 300.0
    graph = load_topology("dgx1-v100")
    assert scenario_training(scenario, graph).library is None
    path.write_text(text.replace("library: {name: ideal}\n", ""))
    assert scenario_training(load_scenario(str(path)), graph).library.name == "nccl"
    path.write_text(text.replace("{name: ideal}", "{name: nccl, protocol: LL}"))
    with pytest.raises(ConfigError, match="library.protocol"):
        load_scenario(str(path))
    path.write_text(text.replace("300 img/s", "fast"))
    with pytest.raises(ConfigError, match="single_gpu_throughput"):
        load_scenario(str(path))


def test_rows_the_simulator_cannot_place_are_skipped_and_said(tmp_path):
    text = TF.read_text().splitlines()
    header, rows = text[0], text[1:]
    dgx = [r for r in rows if "DGX-1" in r and "AlexNet" in r][:4]
    odd = dgx[0].replace("AlexNet", "GoogLeNet", 1)
    path = tmp_path / "t.csv"
    path.write_text("\n".join([header, odd] + dgx) + "\n")
    points = compare_training(read_training(path), load_topology("dgx1-p100"))
    assert len(points) == len(dgx)
    assert len(points.attrs["skipped"]) == 1 and "GoogLeNet" in points.attrs["skipped"][0]
    only = tmp_path / "odd.csv"
    only.write_text("\n".join([header, odd]) + "\n")
    with pytest.raises(ConfigError, match="no row can be simulated"):
        compare_training(read_training(only), load_topology("dgx1-p100"))


# -- compute slowed while the library's kernels run beside it -----------------------------------

def test_overlapped_backward_is_slowed_exactly_while_a_collective_runs():
    from simulator.engine.common import FastResult
    from simulator.engine.runner import Engine
    from simulator.workload.training import Bucket, _overlapped

    engine = Engine(load_topology("star", {"hosts": 2}))
    b, s, d = 1.0, 0.25, 0.3            # backward, slowdown, collective time
    buckets = [Bucket((1,), 10, 0.5 * b), Bucket((0,), 10, b)]
    fast = [FastResult(d, True, bytes_sent=10.0), FastResult(d, True, bytes_sent=10.0)]
    it, busy, wire = _overlapped(engine, fast, buckets, fwd=0.2, bwd_total=b, optimizer_s=0.05,
                                 slowest=1.0, slowdown=s)
    # the first collective runs from 0.7 s for 0.3 s; backward's second half advances 0.3/1.25
    # in that time, then finishes undisturbed; the second collective follows
    backward_end = 0.7 + d + (0.5 * b - d / (1 + s))
    assert it == pytest.approx(backward_end + d + 0.05, rel=1e-12)
    assert busy == pytest.approx(2 * d) and wire == 20.0
    it0, _, _ = _overlapped(engine, fast, buckets, fwd=0.2, bwd_total=b, optimizer_s=0.05,
                            slowest=1.0, slowdown=0.0)
    assert it0 == pytest.approx(0.2 + b + d + 0.05, rel=1e-12)


def test_zero_slowdown_equals_the_engine_timed_buckets():
    from simulator.library import training_library
    from simulator.workload.training import simulate_training
    from simulator.workload.sweep import _profile

    graph = load_topology("dgx1-v100", {"nodes": 2, "nics_per_node": 1})
    prof = _profile("resnet50", "v100-sxm2-16gb", 64, "fp32", None)
    grads = [layer.params * 4 for layer in get_model("resnet50").layers]
    kw = dict(gpus=16, batch_per_gpu=64, aggregation="ring", model_name="resnet50",
              gradient_bytes=grads, library=training_library(graph))
    engine_timed = simulate_training(graph, prof, overlap_slowdown=0.0, **kw).row
    analytic = simulate_training(graph, prof, overlap_slowdown=1e-15, **kw).row
    slowed = simulate_training(graph, prof, **kw).row
    assert analytic["iteration_s"] == pytest.approx(engine_timed["iteration_s"], rel=1e-12)
    assert slowed["iteration_s"] > engine_timed["iteration_s"]


def test_rows_simulated_in_worker_processes_give_the_same_frame(dgx1_ps):
    measured = select(read_training(TF), ["hardware=DGX-1", "model=ResNet-50"])
    parallel = compare_training(measured, load_topology("dgx1-p100"), workers=2)
    pd.testing.assert_frame_equal(parallel, dgx1_ps)
    with pytest.raises(ConfigError, match="workers"):
        compare_training(measured, load_topology("dgx1-p100"), workers=0)


@pytest.mark.parametrize("measured, words", [
    (str(TF), "--workers must be >= 1"),
    ("tests/data/measurements/nccl_thanos_a100sxm80_1node.csv", "--workers applies to training"),
])
def test_workers_flag_is_checked_without_a_traceback(measured, words):
    done = subprocess.run([sys.executable, "-m", "simulator", "compare", measured, "--topology",
                           "dgx1-p100", "--workers", "0" if "must" in words else "2"],
                          capture_output=True, text=True, cwd=Path(__file__).parent.parent)
    assert done.returncode == 2 and words in done.stderr and "Traceback" not in done.stderr


# -- gradient accumulation through the scenario, the CLI and compare ------------------------------

def test_accumulation_from_a_scenario_the_cli_and_a_measured_column(tmp_path, capsys):
    from simulator.cli import main
    from simulator.scenario import read_scenario, run_scenario

    body = ("name: acc\ntopology: {name: dgx1-v100, params: {nodes: 2}}\ntraining:\n"
            "  models: [bert_large]\n  gpus: [16]\n  aggregations: [ring]\n"
            "  batch_per_gpu: 4\n  precision: amp\n  accumulation: K\n")
    rows = {k: run_scenario(read_scenario(body.replace("K", str(k)))).iloc[0] for k in (1, 8)}
    assert rows[8]["accumulation"] == 8 and rows[1]["accumulation"] == 1
    assert rows[8]["speedup"] > rows[1]["speedup"]       # one aggregation per 8 micro-batches
    assert rows[8]["exposed_comm_s"] == pytest.approx(rows[1]["exposed_comm_s"], rel=1e-9)

    out = tmp_path / "cli"
    assert main(["train", "--topology", "dgx1-v100", "--param", "nodes=2", "--model",
                 "bert_large", "--gpus", "16", "--batch-per-gpu", "4", "--precision", "amp",
                 "--accumulation", "8", "-o", str(out)]) == 0
    written = pd.read_csv(out / "results.csv")
    assert written.loc[0, "accumulation"] == 8
    assert written.loc[0, "iteration_s"] == pytest.approx(rows[8]["iteration_s"], rel=1e-9)
    assert main(["train", "--topology", "dgx1-v100", "--model", "bert_large", "--gpus", "8",
                 "--accumulation", "0"]) == 2
    assert "--accumulation must be >= 1" in capsys.readouterr().err

    # a measured table may state the micro-batches of each row (an optional column)
    table = pd.read_csv(DLPERF)
    table = table[table["framework"].str.contains("PyTorch 1.5.0a0")
                  & table["model"].str.contains("BERT") & (table["precision"] == "FP32")
                  & (table["batch_per_gpu"] == 32)]
    table.to_csv(tmp_path / "plain.csv", index=False)
    table.assign(accumulation=4).to_csv(tmp_path / "stated.csv", index=False)
    graph = load_topology("dgx1-v100", {"nodes": 4})
    plain = compare_training(read_training(tmp_path / "plain.csv"), graph)
    stated_table = read_training(tmp_path / "stated.csv")
    assert set(stated_table["accumulation"]) == {4}
    stated = compare_training(stated_table, graph)
    many = plain["gpus"] > 8
    assert (stated.loc[many, "simulated_speedup"] > plain.loc[many, "simulated_speedup"]).all()
    table.assign(accumulation=0).to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(ConfigError, match="accumulation"):
        read_training(tmp_path / "bad.csv")
