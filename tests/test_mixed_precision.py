"""The dtype mixed-precision gradients are all-reduced in: recipes read from framework texts, and
training whose wire bytes, Apex buckets and step time follow the dtype."""

import io
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from simulator.comparison.training import compare_training
from simulator.errors import ConfigError
from simulator.measure.schema import read_training
from simulator.topology import load_topology
from simulator.workload.compute import compute_profile
from simulator.workload.frameworks import FRAMEWORKS
from simulator.workload.mixed_precision import (AMP_RECIPES, detect_gradient_dtype, get_recipe,
                                                gradient_element_bytes)
from simulator.workload.models import get_model
from simulator.workload.sweep import TrainingSpec, run_training
from simulator.workload.training import plan_iteration

DLPERF = Path(__file__).parent / "data" / "training" / "train_dlperf_v100x32_edr.csv"


@pytest.mark.parametrize("precision, dtype, expected", [
    ("amp", None, 2), ("amp", "fp32", 4), ("fp32", None, 4), ("fp16", None, 2),
    ("bf16", None, 2), ("amp", "bf16", 2)])
def test_bytes_per_gradient_element(precision, dtype, expected):
    assert gradient_element_bytes(precision, dtype) == expected


def test_an_unknown_dtype_or_recipe_lists_the_valid_ones():
    with pytest.raises(ConfigError, match="fp16, bf16, fp32"):
        gradient_element_bytes("amp", "fp8")
    with pytest.raises(ConfigError, match="tensorflow-amp"):
        get_recipe("nope")


@pytest.mark.parametrize("text, model, dtype", [
    ("NGC TensorFlow 1.15.2 (nvcr 20.03) + DALI + Horovod [bsz=224]", "ResNet-50 v1.5", "fp32"),
    ("TensorFlow 2.3.0 tf-models", "ResNet-50 v1.5", "fp32"),
    ("NGC PyTorch 1.5.0a0 (nvcr 20.03) + DALI + APEX DDP", "ResNet-50 v1.5", "fp32"),
    ("NGC PyTorch 1.5.0a0 (nvcr 20.03) + APEX", "BERT-base pretraining", "fp16"),
    ("OneFlow 0.2.0", "ResNet-50 v1.5", "fp16"),
])
def test_recipes_read_from_the_framework_text_and_model(text, model, dtype):
    recipe = detect_gradient_dtype(text, model, "amp")
    assert recipe is not None and recipe.gradient_dtype == dtype
    assert recipe.source


def test_only_mixed_precision_rows_and_known_recipes_get_one():
    assert detect_gradient_dtype("NGC TensorFlow 1.15.2 + Horovod", "BERT", "fp32") is None
    assert detect_gradient_dtype("SomeFramework 9", "ResNet-50", "amp") is None
    assert all(r.gradient_dtype in ("fp16", "fp32") for r in AMP_RECIPES)


def test_fp32_gradients_put_exactly_twice_the_bytes_on_the_wire_and_take_longer():
    graph = load_topology("dgx1-v100", {"nodes": 2, "nics_per_node": 1})
    spec16 = TrainingSpec(models=("resnet50",), batch_per_gpu=64, gpus=(16,),
                          aggregations=("ring",), precision="amp", overlap=False,
                          single_gpu_throughput=1400.0)
    half = run_training(graph, spec16).iloc[0]
    full = run_training(graph, TrainingSpec(**{**spec16.__dict__, "gradient_dtype": "fp32"}))
    full = full.iloc[0]
    assert (half["gradient_dtype"], full["gradient_dtype"]) == ("fp16", "fp32")
    assert full["wire_bytes_per_iteration"] == 2 * half["wire_bytes_per_iteration"]
    assert full["exposed_comm_s"] > 1.5 * half["exposed_comm_s"] > 0
    assert full["iteration_s"] > half["iteration_s"]


def test_apex_buckets_hold_their_element_count_in_the_wire_dtype():
    graph = load_topology("dgx1-v100")
    model = get_model("resnet50")
    profile = compute_profile("resnet50", "v100-sxm2-32gb", 64, "amp")
    workers = [f"n0.gpu{i}" for i in range(8)]
    sizes = {}
    for dtype, element in (("fp16", 2), ("fp32", 4)):
        grads = [layer.params * element for layer in model.layers]
        plan = plan_iteration(graph, profile, workers, grads, aggregation="ring",
                              precision="amp", framework=FRAMEWORKS["apex-ddp"],
                              gradient_dtype=dtype)
        sizes[dtype] = [b.size_bytes for b in plan.buckets]
        # every bucket but the last closes at 10 M elements or just above
        assert all(size >= 10_000_000 * element for size in sizes[dtype][:-1])
        assert sum(sizes[dtype]) == sum(grads)
    # the same elements per bucket, so the same number of buckets, each twice the bytes
    assert [2 * s for s in sizes["fp16"]] == sizes["fp32"]


def test_compare_runs_each_row_in_its_recipes_dtype_unless_told(tmp_path):
    table = pd.read_csv(DLPERF)
    rows = table[(table["precision"] == "AMP") & table["gpus"].isin([1, 16])
                 & table["framework"].str.startswith("NGC TensorFlow 1.15.2 (nvcr 20.03) + DALI")
                 & ~table["framework"].str.contains("XLA")]
    assert len(rows) == 2
    path = tmp_path / "tf.csv"
    rows.to_csv(path, index=False)
    graph = load_topology("dgx1-v100", {"nodes": 2, "nics_per_node": 1})
    own = compare_training(read_training(path), graph)
    forced = compare_training(read_training(path), graph, gradient_dtype="fp16")
    assert set(own["gradient_dtype"]) == {"fp32"} and set(forced["gradient_dtype"]) == {"fp16"}
    sixteen = own["gpus"] == 16
    assert (own.loc[sixteen, "simulated_speedup"].item()
            < forced.loc[forced["gpus"] == 16, "simulated_speedup"].item())


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "simulator", *args], capture_output=True,
                          text=True)


def test_train_takes_the_gradient_dtype_and_refuses_a_wrong_one():
    done = _cli("train", "--topology", "dgx1-v100", "--model", "resnet50", "--gpus", "8",
                "--precision", "amp", "--gradient-dtype", "fp32", "--format", "csv")
    assert done.returncode == 0, done.stderr
    assert pd.read_csv(io.StringIO(done.stdout))["gradient_dtype"].tolist() == ["fp32"]
    bad = _cli("train", "--topology", "dgx1-v100", "--model", "resnet50", "--gpus", "8",
               "--gradient-dtype", "fp8")
    assert bad.returncode == 2 and "fp16" in bad.stderr and "Traceback" not in bad.stderr


def test_the_gradient_dtype_is_refused_on_a_collective_file():
    csv = sorted((Path(__file__).parent / "data" / "measurements").glob("nccl_*.csv"))[0]
    done = _cli("compare", str(csv), "--topology", "dgx-a100", "--gradient-dtype", "fp32")
    assert done.returncode == 2 and "applies to training files" in done.stderr


def test_a_scenario_names_the_gradient_dtype(tmp_path):
    from simulator.scenario import load_scenario, scenario_training

    text = """name: t
topology: dgx1-v100
training:
  models: [resnet50]
  gpus: [8]
  aggregations: [ring]
  precision: amp
  gradient_dtype: fp32
"""
    path = tmp_path / "s.yaml"
    path.write_text(text)
    assert scenario_training(load_scenario(str(path)),
                             load_topology("dgx1-v100")).gradient_dtype == "fp32"
    path.write_text(text.replace("gradient_dtype: fp32", "gradient_dtype: fp8"))
    with pytest.raises(ConfigError, match="gradient_dtype"):
        load_scenario(str(path))


def test_a_training_job_beside_others_takes_the_gradient_dtype():
    from simulator.workload.jobs import TrainingJob

    graph = load_topology("dgx1-v100")
    sizes = {}
    for dtype in (None, "fp32"):
        job = TrainingJob("t", "resnet50", tuple(range(8)), precision="amp",
                          gradient_dtype=dtype, device="v100-sxm2-16gb", overlap=False)
        sizes[dtype] = sum(b.size_bytes for b in job.plan(graph).buckets)
    assert sizes["fp32"] == 2 * sizes[None] == 4 * get_model("resnet50").params
