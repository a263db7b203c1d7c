"""Stragglers and failures: the directions the trade-off predicts, and hand-checked goodput."""

import math
from pathlib import Path

import pytest

from simulator.scenario import load_scenario, run_scenario
from simulator.workload.faults import FailurePlan, goodput

ROOT = Path(__file__).parent.parent
PLAN = FailurePlan(at_s=1800, horizon_s=3600, checkpoint_interval_s=600, checkpoint_cost_s=30,
                   restart_s=300, reform_s=30)


def test_goodput_without_failure_pays_only_checkpoints():
    g = goodput("none", 100.0, 90.0, 0.5, PLAN)
    # 3600 s = 5 full cycles of 630 s (3000 s work) + 450 s of work
    assert math.isclose(g["goodput_samples_s"], 100.0 * 3450 / 3600)


def test_checkpoint_restart_loses_work_since_last_checkpoint_and_the_restart():
    g = goodput("checkpoint_restart", 100.0, 90.0, 0.5, PLAN)
    # failure at 1800 s: 2 cycles done (1260 s, 1200 s saved), 540 s more work lost
    assert math.isclose(g["lost_s"], 540.0) and math.isclose(g["stalled_s"], 300.0)
    # resume at 2100 s; 1500 s left = 2 cycles (1200 s work) + 240 s work
    assert math.isclose(g["goodput_samples_s"], 100.0 * (1200 + 1440) / 3600)


def test_elastic_keeps_work_and_runs_at_n_minus_one():
    g = goodput("elastic", 100.0, 90.0, 0.5, PLAN)
    before = 1200 + 540
    after = 1200 + min(3600 - 1830 - 2 * 630, 600)
    assert math.isclose(g["goodput_samples_s"], (100 * (before - 0.5) + 90 * after) / 3600)
    assert g["goodput_samples_s"] > goodput("checkpoint_restart", 100, 90, 0.5,
                                            PLAN)["goodput_samples_s"]


@pytest.fixture(scope="module")
def stragglers():
    frame = run_scenario(load_scenario(str(ROOT / "scenarios" / "stragglers.yaml")))
    return frame


def test_ring_waits_for_the_straggler_async_ps_does_not(stragglers):
    base = stragglers[stragglers.failure_policy == "none"].set_index(
        ["aggregation", "straggler_factor"])["throughput_samples_s"]
    ring_keep = base[("ring", 4.0)] / base[("ring", 1.0)]
    async_keep = base[("ps-async", 4.0)] / base[("ps-async", 1.0)]
    ssp_keep = base[("ps-ssp3", 4.0)] / base[("ps-ssp3", 1.0)]
    assert ring_keep < 0.3                       # synchronous: paced by the 4x slower GPU
    assert async_keep > 0.9                      # asynchronous: 15 of 16 workers unaffected
    assert ring_keep < ssp_keep < async_keep
    assert math.isclose(ring_keep, 1 / 4, rel_tol=0.05)


def test_staleness_zero_for_bsp_positive_for_async(stragglers):
    rows = stragglers[stragglers.failure_policy == "none"]
    assert (rows[rows.aggregation == "ring"].staleness_max == 0).all()
    assert (rows[rows.aggregation == "ps-async"].staleness_mean > 0).all()


def test_failure_policies_rank_as_expected(stragglers):
    one = stragglers[stragglers.straggler_factor == 1.0].set_index(
        ["aggregation", "failure_policy"])["goodput_samples_s"]
    assert one[("ring", "elastic")] > one[("ring", "checkpoint_restart")]
    assert one[("ring", "none")] > one[("ring", "elastic")]
    async_rows = stragglers[(stragglers.aggregation == "ps-async")
                            & (stragglers.failure_policy != "none")]
    assert (async_rows.recovery == "async_ps").all()
    # one failure row per straggler factor: the listed recovery policies do not apply to it
    assert list(async_rows.failure_policy.unique()) == ["async_ps"]
    assert len(async_rows) == stragglers.straggler_factor.nunique()
    ring_failures = stragglers[(stragglers.aggregation == "ring")
                               & (stragglers.failure_policy != "none")]
    assert set(ring_failures.failure_policy) == {"checkpoint_restart", "elastic"}


def test_same_seed_same_bytes(tmp_path):
    from simulator.cli import main

    outs = []
    for k in range(2):
        out = tmp_path / f"o{k}"
        assert main(["run", str(ROOT / "scenarios" / "nudt_ps_vs_ring.yaml"), "-o", str(out)]) == 0
        outs.append((out / "results.csv").read_bytes())
    assert outs[0] == outs[1]
