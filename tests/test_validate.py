"""``clustersim validate``: a suite of measured files, compared case by case, summed up per band.

Stories:

* the project's own suite (``docs/validation/collectives.yaml``: the ledger's 40 commands, the
  two other multi-node p5 tables and five later checks)
  reproduces the committed baseline ``docs/validation/collectives.csv`` number for number, so a
  change that moves any published table's MAPE or bias shows here, and its before -> after is
  the diff of that file;
* a case's numbers are exactly what ``clustersim compare`` prints for the same file and flags;
  the means weigh every case the same; other flags give other numbers; workers change nothing;
* ``--baseline`` puts the earlier numbers next to the new ones and ``--max-regression`` exits 1
  (not 2) naming the case and band that got worse;
* a mistake in a suite names the file, the line and the key (or the case and its flag) before
  any case runs; a case that fails while running is named, and nothing is written.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from simulator.cli import main
from simulator.comparison.suite import BANDS, OVERALL, load_suite, means
from simulator.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / "docs" / "validation" / "collectives.yaml"
BASELINE = ROOT / "docs" / "validation" / "collectives.csv"
TABLES = ROOT / "tests" / "data" / "measurements"

SMALL = "nccl_nvidia2094_h100_1node_small.csv"          # 6 points, one H100 machine
MID = "nccl_nvidia2355_a100sxm80_1node.csv"               # 12 points, one A100 machine


def _suite(tmp_path, body: str, name: str = "suite.yaml") -> Path:
    path = tmp_path / name
    path.write_text(body)
    return path


def _fine_and(tmp_path, name: str, args: str) -> Path:
    """A suite of a case that runs, then case ``name`` with ``args``."""
    return _suite(tmp_path, f"""
cases:
  - name: fine
    file: {TABLES / SMALL}
    args: --topology hgx-h100
  - name: {name}
    file: {TABLES / SMALL}
    args: {args}
""")


def _two_cases(tmp_path) -> Path:
    return _suite(tmp_path, f"""
cases:
  - name: h100
    file: {TABLES / SMALL}
    args: --topology hgx-h100
  - name: a100
    file: {TABLES / MID}
    args: [--topology, dgx-a100, --param, gpu=a100-sxm4-80gb]
""")


def test_the_projects_suite_reproduces_its_committed_baseline(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["validate", str(SUITE), "--workers", "2", "-o", str(out),
                 "--baseline", str(BASELINE), "--max-regression", "0.05"]) == 0
    now = pd.read_csv(out / "validation.csv")
    committed = pd.read_csv(BASELINE)
    assert len(load_suite(SUITE).cases) == 49 == now["case"].nunique()
    merged = committed.merge(now, on=["case", "group"], suffixes=("_committed", "_now"),
                             how="outer", indicator=True)
    assert (merged["_merge"] == "both").all(), merged[merged["_merge"] != "both"]
    for column in ("mape_pct", "bias_pct"):
        drift = (merged[f"{column}_now"] - merged[f"{column}_committed"]).abs()
        assert drift.max() <= 0.0015, merged.loc[drift.idxmax(), ["case", "group"]].tolist()
    assert (merged["points_now"] == merged["points_committed"]).all()
    printed = capsys.readouterr().out
    # the headline means of the ledger ("means over tables", issue 26)
    assert "collective     <64KiB     32     473" in printed
    # the ledger's 40 tables (without the two p5 tables it left out and the checks added later,
    # "Four more public tables" and "Three A3 Mega machines over TCPXO"): its stated means
    later = ["p5multi-ag", "p5multi-a2a", "xe9680vm4", "gjib", "gjring", "a3hightcpxag",
             "a3megatorch", "gb200rack", "gb200ib"]
    ledger = means(now[~now["case"].isin(later)]).set_index("group")
    for band, mape, bias in (("<64KiB", 19.0, -7.85), ("64KiB-1MiB", 20.8, -10.35),
                             (">=1MiB", 15.5, -9.4)):
        assert ledger.loc[band, "mape_pct"] == pytest.approx(mape, abs=0.05)
        assert ledger.loc[band, "bias_pct"] == pytest.approx(bias, abs=0.05)
    assert len(list((out / "cases").glob("*.csv"))) == 49


def test_the_training_suites_quick_tables_reproduce_their_committed_baseline(tmp_path, capsys):
    # the whole training suite takes about 45 minutes; its quick tables (a training table, four
    # LLM tables and the timed MoE layers, about 35 s) hold the committed numbers to the same
    # resolution
    suite = ROOT / "docs" / "validation" / "training.yaml"
    committed = ROOT / "docs" / "validation" / "training.csv"
    quick = ("nvdle-dgx1", "megatron", "nvidia-llm-h100", "nvidia-llm-b200", "nvidia-moe-b200",
             "moe-layer-h100")
    assert main(["validate", str(suite), *[a for c in quick for a in ("--only", c)],
                 "-o", str(tmp_path / "t"), "--baseline", str(committed),
                 "--max-regression", "0.0015"]) == 0
    now = pd.read_csv(tmp_path / "t" / "validation.csv").set_index("case")
    before = pd.read_csv(committed).set_index("case")
    assert sorted(before.index) == sorted(c.name for c in load_suite(suite).cases)
    for case in quick:
        for column in ("points", "mape_pct", "bias_pct"):
            assert now.loc[case, column] == pytest.approx(before.loc[case, column], abs=0.0015)
    assert now.loc["megatron", "kind"] == "llm" and now.loc["nvdle-dgx1", "kind"] == "training"
    assert now.loc["nvidia-llm-h100", "points"] == 10 and now.loc["nvidia-llm-b200", "points"] == 2
    assert now.loc["nvidia-moe-b200", "points"] == 3 and now.loc["nvidia-moe-b200", "kind"] == "llm"
    assert now.loc["moe-layer-h100", "points"] == 24 and now.loc["moe-layer-h100", "kind"] == "layer"


def test_a_case_gives_what_compare_gives_and_the_means_weigh_cases_alike(tmp_path, capsys):
    suite = _two_cases(tmp_path)
    assert main(["validate", str(suite), "-o", str(tmp_path / "v")]) == 0
    table = pd.read_csv(tmp_path / "v" / "validation.csv")
    for case, file, flags in (("h100", SMALL, ["--topology", "hgx-h100"]),
                              ("a100", MID, ["--topology", "dgx-a100", "--param",
                                             "gpu=a100-sxm4-80gb"])):
        assert main(["compare", str(TABLES / file), *flags, "-o", str(tmp_path / case)]) == 0
        alone = pd.read_csv(tmp_path / case / "mape.csv")
        alone = alone[alone["table"].isin(["size_band", "overall"])]
        mine = table[table["case"] == case]
        assert sorted(mine["group"]) == sorted(g if g != "all" else OVERALL
                                               for g in alone["group"])
        for row in alone.itertuples():
            group = OVERALL if row.group == "all" else row.group
            got = mine[mine["group"] == group].iloc[0]
            assert got["points"] == row.points
            assert got["mape_pct"] == pytest.approx(row.mape_pct, abs=1e-3)
            assert got["bias_pct"] == pytest.approx(row.bias_pct, abs=1e-3)
        points = pd.read_csv(tmp_path / "v" / "cases" / f"{case}.csv")
        assert len(points) == len(pd.read_csv(tmp_path / case / "compare.csv"))
    mean = pd.read_csv(tmp_path / "v" / "means.csv").set_index("group")
    overall = table[table["group"] == OVERALL]
    assert mean.loc[OVERALL, "mape_pct"] == pytest.approx(overall["mape_pct"].mean(), abs=2e-3)
    assert mean.loc[OVERALL, "cases"] == 2
    assert mean.loc[OVERALL, "points"] == overall["points"].sum() == 18
    # one band has only the A100 case: its mean is that case's number, not diluted
    only = set(table.loc[table["case"] == "a100", "group"]) - set(
        table.loc[table["case"] == "h100", "group"])
    assert only
    for group in only:
        assert mean.loc[group, "cases"] == 1
        assert mean.loc[group, "mape_pct"] == pytest.approx(
            table[(table["case"] == "a100") & (table["group"] == group)]["mape_pct"].iloc[0],
            abs=2e-3)


def test_other_flags_give_other_numbers_and_workers_change_nothing(tmp_path, capsys):
    suite = _suite(tmp_path, f"""
cases:
  - name: asis
    file: {TABLES / MID}
    args: --topology dgx-a100 --param gpu=a100-sxm4-80gb
  - name: ideal
    file: {TABLES / MID}
    args: --topology dgx-a100 --param gpu=a100-sxm4-80gb --library ideal
  - name: h100
    file: {TABLES / SMALL}
    args: --topology hgx-h100
""")
    assert main(["validate", str(suite), "-o", str(tmp_path / "one")]) == 0
    assert main(["validate", str(suite), "--workers", "3", "-o", str(tmp_path / "three")]) == 0
    one = pd.read_csv(tmp_path / "one" / "validation.csv")
    three = pd.read_csv(tmp_path / "three" / "validation.csv")
    pd.testing.assert_frame_equal(one, three)
    by = one[one["group"] == OVERALL].set_index("case")
    assert abs(by.loc["asis", "mape_pct"] - by.loc["ideal", "mape_pct"]) > 1.0


def test_a_baseline_shows_before_and_after_and_gates_regressions(tmp_path, capsys):
    suite = _two_cases(tmp_path)
    assert main(["validate", str(suite), "-o", str(tmp_path / "v")]) == 0
    first = pd.read_csv(tmp_path / "v" / "validation.csv")
    capsys.readouterr()
    # the same model against its own run: unchanged, within any bound
    assert main(["validate", str(suite), "--baseline", str(tmp_path / "v" / "validation.csv"),
                 "--max-regression", "0"]) == 0
    printed = capsys.readouterr()
    row = first[(first["case"] == "a100") & (first["group"] == OVERALL)].iloc[0]
    cell = f"{row['mape_pct']:.1f}/{row['bias_pct']:+.1f}"
    assert f"{cell} -> {cell}" in printed.out
    assert "no case's MAPE rose" in printed.err
    # a baseline where a100's >= 1 MiB band was 3 points better: that band regressed
    better = first.copy()
    band = (better["case"] == "a100") & (better["group"] == ">=1MiB")
    assert band.sum() == 1
    better.loc[band, "mape_pct"] -= 3.0
    better.to_csv(tmp_path / "better.csv", index=False)
    assert main(["validate", str(suite), "--baseline", str(tmp_path / "better.csv"),
                 "--max-regression", "2.5"]) == 1
    err = capsys.readouterr().err
    assert "FAILED: a100 >=1MiB: MAPE" in err and "+3.0 points" in err
    assert "h100" not in err.split("FAILED", 1)[1]
    # 3 points is within a 3.5-point allowance
    assert main(["validate", str(suite), "--baseline", str(tmp_path / "better.csv"),
                 "--max-regression", "3.5"]) == 0
    # a case the baseline lacks is new, not a regression
    first[first["case"] != "h100"].to_csv(tmp_path / "partial.csv", index=False)
    assert main(["validate", str(suite), "--baseline", str(tmp_path / "partial.csv"),
                 "--max-regression", "0"]) == 0
    assert "new -> " in capsys.readouterr().out


@pytest.mark.parametrize("body, message", [
    ("cases: []\n", "suite.yaml:1: cases: expected a list of cases"),
    ("cases:\n  - name: x\n    file: {small}\nextra: 1\n", "suite.yaml:4: extra: unknown key; "
     "accepted: description, cases"),
    ("cases:\n  - name: x\n    file: {small}\n    topology: dgx-a100\n",
     "suite.yaml:4: cases.0.topology: unknown key; accepted: name, file, args, note"),
    ("cases:\n  - name: x\n    file: nowhere.csv\n", "suite.yaml:3: cases.0.file: "
     "'nowhere.csv': no such file"),
    ("cases:\n  - name: x\n    file: {small}\n  - name: x\n    file: {small}\n",
     "suite.yaml:4: cases.1.name: 'x' is also case 0"),
    ("cases:\n  - name: a b\n    file: {small}\n", "cases.0.name: 'a b': use letters"),
    ("cases:\n  - file: {small}\n", "cases.0.name: required"),
    ("cases:\n  - name: x\n    file: {small}\n    args: --topology hgx-h100 -o out\n",
     "cases.0.args: -o is the suite's to set"),
    ("cases:\n  - name: x\n    file: {small}\n    args: --topology hgx-h100 --max-mape=5\n",
     "cases.0.args: --max-mape is the suite's to set"),
    ("cases:\n  - name: x\n    file: {small}\n    args: {{a: 1}}\n",
     "cases.0.args: expected compare's flags"),
    ("cases:\n  - name: x\n    file: {small}\n    args: --topology 'hgx\n",
     "cases.0.args: cannot split"),
    ("- name: x\n", "a suite is a mapping"),
    ("cases: [\n", "invalid YAML"),
])
def test_suite_mistakes_name_the_file_line_and_key(tmp_path, capsys, body, message):
    suite = _suite(tmp_path, body.format(small=TABLES / SMALL))
    with pytest.raises(ConfigError) as err:
        load_suite(suite)
    assert message in str(err.value)
    assert main(["validate", str(suite), "-o", str(tmp_path / "out")]) == 2
    text = capsys.readouterr().err
    assert message in text and "Traceback" not in text
    assert not (tmp_path / "out").exists()


def test_a_bad_case_flag_stops_the_suite_before_any_case_runs(tmp_path, capsys):
    suite = _fine_and(tmp_path, "typo", "--topology hgx-h100 --protocl LL")
    assert main(["validate", str(suite), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "suite.yaml:8: case typo: args: unrecognized arguments: --protocl LL" in err
    assert "[1/2]" not in err                       # nothing ran
    assert not (tmp_path / "out").exists()


def test_the_suites_flags_are_refused_in_a_case_however_spelt(tmp_path, capsys):
    suite = _fine_and(tmp_path, "abbrev", "--topology hgx-h100 --out elsewhere")
    assert main(["validate", str(suite)]) == 2
    err = capsys.readouterr().err
    assert "suite.yaml:8: case abbrev: args: -o/--output is the suite's to set" in err


def test_a_case_that_fails_while_running_is_named_and_nothing_is_written(tmp_path, capsys):
    suite = _fine_and(tmp_path, "nopreset", "--topology no-such-machine")
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert main(["validate", str(suite), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "case nopreset failed:" in err and "no-such-machine" in err
    assert "clustersim compare" in err and "--topology no-such-machine" in err
    assert "1 of 2 cases failed (nopreset); nothing was written" in err
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]


def test_flag_mistakes_of_validate_itself(tmp_path, capsys):
    suite = _two_cases(tmp_path)
    assert main(["validate", str(suite), "--only", "h200"]) == 2
    assert "--only h200: no such case" in capsys.readouterr().err
    assert main(["validate", str(suite), "--max-regression", "1"]) == 2
    assert "--max-regression needs --baseline" in capsys.readouterr().err
    assert main(["validate", str(suite), "--workers", "0"]) == 2
    assert "--workers must be >= 1" in capsys.readouterr().err
    (tmp_path / "bad.csv").write_text("case,group,mape_pct,bias_pct\nh100,overall,ten,1\n")
    assert main(["validate", str(suite), "--baseline", str(tmp_path / "bad.csv")]) == 2
    assert "bad.csv:2: mape_pct 'ten' is not a number" in capsys.readouterr().err
    (tmp_path / "twice.csv").write_text("case,group,mape_pct,bias_pct\nh100,overall,1,1\n"
                                        "h100,overall,2,2\n")
    assert main(["validate", str(suite), "--baseline", str(tmp_path / "twice.csv")]) == 2
    assert "twice.csv:3: case h100 group overall again (first on line 2)" in \
        capsys.readouterr().err
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    assert main(["validate", str(suite), "--baseline", str(tmp_path / "other.csv")]) == 2
    assert "not a validation.csv of clustersim validate: no column case" in \
        capsys.readouterr().err
    assert main(["validate", str(tmp_path / "none.yaml")]) == 2
    assert "none.yaml: file not found" in capsys.readouterr().err


def test_only_runs_the_named_cases_in_suite_order(tmp_path, capsys):
    suite = _two_cases(tmp_path)
    assert main(["validate", str(suite), "--only", "a100", "-o", str(tmp_path / "v")]) == 0
    table = pd.read_csv(tmp_path / "v" / "validation.csv")
    assert set(table["case"]) == {"a100"}
    assert set(table["group"]) <= {*BANDS, OVERALL}
    # the same from Python (a notebook): the table as the command writes it
    from simulator.cli.validate import run_suite

    again, results = run_suite(suite, only=["a100"])
    pd.testing.assert_frame_equal(again, table, check_dtype=False)
    assert [r["name"] for r in results] == ["a100"] and len(results[0]["points"]) == 12
    with pytest.raises(ConfigError, match="1 of 1 cases failed"):
        run_suite(_fine_and(tmp_path, "bad", "--topology no-such-machine"), only=["bad"])


def test_a_training_case_scores_its_speedup_and_one_gpu_alone_scores_nothing(tmp_path, capsys):
    table = ROOT / "tests" / "data" / "training" / "train_nvdle_mxnet_rn50_dgx_2021.csv"
    suite = _suite(tmp_path, f"""
cases:
  - name: mxnet
    file: {table}
    args: --topology dgx1-v100 --select hardware=DGX-1
  - name: collective
    file: {TABLES / SMALL}
    args: --topology hgx-h100
""")
    assert main(["validate", str(suite), "-o", str(tmp_path / "v")]) == 0
    rows = pd.read_csv(tmp_path / "v" / "validation.csv")
    mxnet = rows[rows["case"] == "mxnet"]
    assert list(mxnet["group"]) == [OVERALL] and list(mxnet["kind"]) == ["training"]
    assert main(["compare", str(table), "--topology", "dgx1-v100", "--select", "hardware=DGX-1",
                 "-o", str(tmp_path / "alone")]) == 0
    alone = pd.read_csv(tmp_path / "alone" / "mape.csv")
    alone = alone[alone["table"] == "overall"].iloc[0]
    assert mxnet["points"].iloc[0] == alone["points"] == 6
    assert mxnet["mape_pct"].iloc[0] == pytest.approx(alone["mape_pct"], abs=1e-3)
    assert mxnet["bias_pct"].iloc[0] == pytest.approx(alone["bias_pct"], abs=1e-3)
    means_now = pd.read_csv(tmp_path / "v" / "means.csv")
    assert set(means_now["kind"]) == {"training", "collective"}   # kinds are not mixed
    capsys.readouterr()
    # the one-GPU rows alone (its counts are 1, 2, 4 and 8): a speedup of 1 by construction,
    # nothing to score
    one = _suite(tmp_path, f"""
cases:
  - name: single
    file: {table}
    args: --topology dgx1-v100 --select hardware=DGX-1 --select gpus=1
""", name="one.yaml")
    assert main(["validate", str(one)]) == 2
    err = capsys.readouterr().err
    assert "case single failed: nothing to score" in err
