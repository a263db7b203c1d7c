"""The study workloads as YAML scenarios (zero, pipeline, hybrid, time_to_train) and the
compression training scenario: each packaged file loads and runs (with smaller overrides),
results follow their inputs, mistakes are named by file, line and key, and the must-show values
of issue 9 come out of the scenario path. The library functions have their own tests."""

from pathlib import Path

import pandas as pd
import pytest
import yaml

from simulator.cli import main
from simulator.errors import ConfigError
from simulator.scenario import load_scenario, read_scenario, run_scenario, run_study

SCENARIOS = Path(__file__).parent.parent / "scenarios"
NEW = ("zero_7b", "pipeline_gpipe_1f1b", "hybrid_recsys", "time_to_train", "compression")


def document(name: str, **sections) -> dict:
    """The packaged scenario ``name`` with some keys of its sections replaced."""
    doc = yaml.safe_load((SCENARIOS / f"{name}.yaml").read_text())
    for section, keys in sections.items():
        doc[section].update(keys)
    return doc


def write(tmp_path, name: str, **sections) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document(name, **sections), sort_keys=False))
    return path


def study(name: str, **sections):
    return run_study(read_scenario(yaml.safe_dump(document(name, **sections)), f"{name}.yaml"))


#: Small versions of each scenario (seconds each).
SMALL = {
    "zero_7b": {"topology": {"name": "dgx-a100", "params": {"nodes": 1}},
                "zero": {"model": "gpt2_small", "gpus": 8, "group": "100MB",
                         "device": "a100-sxm4-80gb"}},
    "pipeline_gpipe_1f1b": {"pipeline": {"micro_batches": [1, 4], "timeline_micro_batches": 4}},
    "hybrid_recsys": {"hybrid": {"rows": 100000, "tables": 4, "batch_per_gpu": 256,
                                 "iterations": 2}},
    "time_to_train": {"topology": {"params": {"nodes": 2, "gpu": "a100-sxm4-80gb"}},
                      "time_to_train": {"studies": [{"model": "resnet50", "batch_per_gpu": 32,
                                                     "gpus": [8, 16], "optimizers": ["sgd"]}]}},
    "compression": {"training": {"gpus": [8]}},
}


# -- every scenario file loads and runs ---------------------------------------------------------

@pytest.mark.parametrize("name", NEW)
def test_packaged_scenario_loads_with_its_header(name):
    path = SCENARIOS / f"{name}.yaml"
    scenario = load_scenario(str(path))
    assert scenario.name == name
    assert path.read_text().startswith("# ")              # the comment header explains it
    assert f"clustersim run scenarios/{name}.yaml" in path.read_text()


@pytest.mark.parametrize("name", NEW)
def test_cli_runs_each_scenario(tmp_path, capsys, name):
    path = write(tmp_path, name, **SMALL[name])
    out = tmp_path / "out"
    assert main(["run", str(path), "-o", str(out)]) == 0
    frame = pd.read_csv(out / "results.csv")
    assert len(frame) and (frame["scenario"] == name).all() and (frame["seed"] == 0).all()
    resolved = (out / "scenario.resolved.yaml").read_text()
    assert "clustersim_version" in resolved and "seed: 0" in resolved
    pngs = sorted(out.glob("*.png"))
    assert pngs and all(p.stat().st_size > 5000 and p.with_suffix(".svg").exists()
                        for p in pngs)
    assert "wrote" in capsys.readouterr().out


def test_columns_carry_units_and_energy():
    zero = study("zero_7b", **SMALL["zero_7b"]).frame
    hybrid = study("hybrid_recsys", **SMALL["hybrid_recsys"]).frame
    ttt = study("time_to_train", **SMALL["time_to_train"]).frame
    for frame in (zero, hybrid, ttt):
        assert {"joules_per_sample", "joules_per_iteration", "iteration_s"} <= set(frame.columns)
        assert (frame["joules_per_sample"].dropna() > 0).all()
    assert (ttt["joules_to_train"] > 0).all()


# -- results follow the inputs ------------------------------------------------------------------

def test_results_change_with_inputs():
    small = SMALL["pipeline_gpipe_1f1b"]["pipeline"]
    one = study("pipeline_gpipe_1f1b", pipeline={**small, "micro_batch": 1}).frame
    two = study("pipeline_gpipe_1f1b", pipeline={**small, "micro_batch": 2}).frame
    assert (two["iteration_s"] > one["iteration_s"]).all()
    hy = SMALL["hybrid_recsys"]["hybrid"]
    uniform = study("hybrid_recsys", hybrid={**hy, "alpha": 0.0}).frame
    skewed = study("hybrid_recsys", hybrid={**hy, "alpha": 1.2}).frame
    assert (uniform["distinct_rows_per_worker"] > skewed["distinct_rows_per_worker"]).all()
    zero = SMALL["zero_7b"]["zero"]
    a = study("zero_7b", topology=SMALL["zero_7b"]["topology"], zero={**zero, "stages": [3]})
    b = study("zero_7b", topology=SMALL["zero_7b"]["topology"],
              zero={**zero, "stages": [3], "gpus": 4})
    assert b.frame["total_bytes"].iloc[0] > a.frame["total_bytes"].iloc[0]


# -- must-show values through the scenario path -------------------------------------------------

def test_zero_7b_memory_is_the_paper_formula_and_stage_0_is_refused():
    frame = study("zero_7b", topology={"name": "star",
                                       "params": {"hosts": 64, "link_bandwidth": "100 GB/s"}},
                  zero={"prefetch": [True], "device": "a100-sxm4-80gb"}).frame.set_index("stage")
    psi, n = float(frame["params"].iloc[0]), 64
    assert 6.6e9 < psi < 7.1e9
    expected = {0: 16 * psi, 1: 4 * psi + 12 * psi / n, 2: 2 * psi + 14 * psi / n,
                3: 16 * psi / n}
    for stage, value in expected.items():
        assert frame.loc[stage, "model_state_bytes"] == pytest.approx(value, rel=1e-12)
    assert not frame.loc[0, "fits"] and frame.loc[0, "status"].startswith("does not fit")
    assert pd.isna(frame.loc[0, "iteration_s"])
    assert frame.loc[[1, 2, 3], "fits"].all() and (frame.loc[[1, 2, 3], "iteration_s"] > 0).all()
    ratio = frame.loc[3, "predicted_bytes_per_gpu_per_step"] / \
        frame.loc[0, "predicted_bytes_per_gpu_per_step"]
    assert ratio == pytest.approx(1.5, rel=1e-12)


def test_zero_stage_3_sends_one_and_a_half_times_stage_0():
    frame = study("zero_7b", **SMALL["zero_7b"]).frame
    sent = frame[frame["prefetch"]].set_index("stage")["bytes_sent_total"]
    assert sent[3] / sent[0] == pytest.approx(1.5, rel=1e-3)
    assert sent[1] == pytest.approx(sent[0], rel=1e-3)


def test_gpipe_bubble_is_the_formula_on_equal_stages():
    frame = study("pipeline_gpipe_1f1b",
                  topology={"name": "star", "params": {"hosts": 8, "link_latency": "0 s",
                                                       "link_bandwidth": "1000000 GB/s"}},
                  pipeline={"device": "a100-sxm4-80gb", "replicas": 1, "equal_stages": True,
                            "schedules": ["gpipe"], "micro_batches": [1, 4, 8, 32],
                            "timeline_micro_batches": 8}).frame
    p = frame["stages"]
    expected = (p - 1) / (frame["micro_batches"] + p - 1)
    assert frame["bubble_fraction"].to_numpy() == pytest.approx(expected.to_numpy(), abs=1e-4)


def test_compression_must_show_values():
    frame = run_scenario(load_scenario(str(SCENARIOS / "compression.yaml")))
    rows = frame.set_index(["aggregation", "compression"])
    ring, ps = rows.loc["ring"], rows.loc["ps"]
    assert ring.loc["fp16", "wire_bytes_per_iteration"] / \
        ring.loc["none", "wire_bytes_per_iteration"] == pytest.approx(0.5, rel=1e-3)
    for column in ("ps_in_bytes_per_iteration", "ps_out_bytes_per_iteration"):
        assert ps.loc["fp16", column] / ps.loc["none", column] == pytest.approx(0.5, rel=1e-3)
    # top-k 1 %: 1 % of the values plus an int32 index each, 2 % of the fp32 bytes pushed
    assert ps.loc["topk:0.01", "ps_in_bytes_per_iteration"] / \
        ps.loc["none", "ps_in_bytes_per_iteration"] == pytest.approx(0.02, rel=0.02)
    assert ps.loc["topk:0.01", "ps_out_bytes_per_iteration"] == \
        pytest.approx(ps.loc["none", "ps_out_bytes_per_iteration"], rel=1e-6)
    assert (ring["ps_in_bytes_per_iteration"] == 0).all()


def test_time_to_train_marks_the_fastest_gpu_count():
    frame = study("time_to_train", topology={"params": {"nodes": 64, "gpu": "a100-sxm4-80gb"}},
                  time_to_train={"forms": ["piecewise"], "studies": [
                      {"model": "resnet50", "batch_per_gpu": 32, "gpus": [128, 256, 512],
                       "optimizers": ["sgd"]}]}).frame
    fastest = frame[frame["fastest"]]
    assert len(fastest) == 1 and fastest["gpus"].iloc[0] == 256      # B_crit = 8192 = 256 x 32
    assert fastest["time_to_train_s"].iloc[0] == frame["time_to_train_s"].min()


# -- validation: file, line and key path; exit 2; nothing written --------------------------------

BAD = [
    ("zero_7b", {"zero": {"stagez": [1]}}, "zero.stagez", "unknown key 'stagez'; valid: model"),
    ("zero_7b", {"zero": {"group": "1 parsec"}}, "zero.group", "parsec"),
    ("zero_7b", {"zero": {"stages": [0, 4]}}, "zero.stages.1", "ZeRO stages are 0, 1, 2 and 3"),
    ("zero_7b", {"zero": {"model": "gpt5"}}, "zero.model", "gpt3_6.7b"),
    ("zero_7b", {"zero": {"gpus": 0}}, "zero.gpus", "must be >= 1"),
    ("zero_7b", {"zero": {"algorithm": "ps"}}, "zero.algorithm", "does not implement"),
    ("pipeline_gpipe_1f1b", {"pipeline": {"model": "gpt5"}}, "pipeline.model", "gpt2_xl"),
    ("pipeline_gpipe_1f1b", {"pipeline": {"schedules": ["gpipe", "zigzag"]}},
     "pipeline.schedules.1", "expected one of gpipe, 1f1b"),
    ("pipeline_gpipe_1f1b", {"pipeline": {"timeline_micro_batches": 3}},
     "pipeline.timeline_micro_batches", "must be one of micro_batches"),
    ("pipeline_gpipe_1f1b", {"pipeline": {"device": "a100"}}, "pipeline.device",
     "a100-sxm4-80gb"),
    ("hybrid_recsys", {"hybrid": {"bucket": "25 MiBs"}}, "hybrid.bucket", "bucket"),
    ("hybrid_recsys", {"hybrid": {"alpha": -1}}, "hybrid.alpha", "must be >= 0"),
    ("hybrid_recsys", {"hybrid": {"bottom_mlp": [13, 512, 64]}}, "hybrid.bottom_mlp",
     "bottom_mlp must run"),
    ("hybrid_recsys", {"hybrid": {"shardings": ["modulo"]}}, "hybrid.shardings.0", "hash"),
    ("time_to_train", {"time_to_train": {"forms": ["linear"]}}, "time_to_train.forms.0",
     "piecewise"),
    ("time_to_train", {"time_to_train": {"studies": [{"model": "resnet50", "gpus": [8],
                                                      "optimizers": ["lamb"]}]}},
     "time_to_train.studies.0.optimizers.0", "measured on bert_large, not resnet50"),
    ("time_to_train", {"time_to_train": {"studies": [{"model": "resnet50", "gpus": [8],
                                                      "optimizers": ["sgd"], "lr": 0.1}]}},
     "time_to_train.studies.0.lr", "unknown key 'lr'"),
    ("compression", {"training": {"compression": ["none", {"kind": "topk",
                                                           "fraction": 2}]}},
     "training.compression.1.fraction", ""),
    ("compression", {"training": {"compression": ["fp16", "fp16"]}},
     "training.compression.1", "listed twice"),
]


def _line_of(path: Path, key_path: str) -> int:
    """The line the loader attributes to ``key_path`` (its nearest located key)."""
    from simulator.config import read_yaml

    _, where = read_yaml(path.read_text(), str(path))
    parts = [int(p) if p.isdigit() else p for p in key_path.split(".")]
    while tuple(parts) not in where.lines:
        parts.pop()
    return where.lines[tuple(parts)]


@pytest.mark.parametrize("name, change, key_path, message", BAD,
                         ids=[b[2] + ":" + str(i) for i, b in enumerate(BAD)])
def test_mistakes_name_file_line_and_key(tmp_path, name, change, key_path, message):
    path = write(tmp_path, name, **change)
    with pytest.raises(ConfigError) as err:
        load_scenario(str(path))
    text = str(err.value)
    assert f"{path}:{_line_of(path, key_path)}: {key_path}:" in text, text
    assert message in text
    assert "\n" not in text


def test_cli_mistake_exits_2_without_output(tmp_path, capsys):
    path = write(tmp_path, "zero_7b", zero={"group": "1 parsec"})
    out = tmp_path / "out"
    assert main(["run", str(path), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert not out.exists() and "Traceback" not in err
    assert f"{path}:" in err and "zero.group" in err


def test_exactly_one_workload_and_plots_of_its_own(tmp_path):
    doc = document("zero_7b")
    doc["pipeline"] = document("pipeline_gpipe_1f1b")["pipeline"]
    with pytest.raises(ConfigError, match="exactly one workload.*here: zero, pipeline"):
        read_scenario(yaml.safe_dump(doc), "two.yaml")
    doc = document("zero_7b")
    doc["report"] = {"plots": ["busbw_vs_size"]}
    with pytest.raises(ConfigError, match=r"two.yaml:\d+: report.plots.0: .*zero_memory_time"):
        read_scenario(yaml.safe_dump(doc, sort_keys=False), "two.yaml")


def test_sweep_and_trace_refuse_study_scenarios(tmp_path, capsys):
    path = write(tmp_path, "pipeline_gpipe_1f1b", **SMALL["pipeline_gpipe_1f1b"])
    assert main(["run", str(path), "-o", str(tmp_path / "o"), "--trace"]) == 2
    assert main(["sweep", str(path), "-o", str(tmp_path / "s.csv"), "--quiet"]) == 2
    assert not (tmp_path / "o").exists() and not (tmp_path / "s.csv").exists()
    assert "clustersim run" in capsys.readouterr().err
