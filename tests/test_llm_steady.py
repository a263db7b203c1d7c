"""Steady-state extrapolation of long steps: the extended step equals simulating every
micro-batch, and a window that is not periodic is never extended."""

import numpy as np
import pytest

import simulator.workload.llm.step as step_module
from simulator.cli import main
from simulator.topology import load_topology
from simulator.workload.llm.layout import Layout
from simulator.errors import ConfigError
from simulator.workload.llm.steady import (TOLERANCE, Unsteady, check_tolerance, drift, extend,
                                          windows)
from simulator.workload.llm.step import simulate_step
from simulator.workload.llm.work import Comm, Op

from llm_work import make_work


def dgx(nodes):
    return load_topology("dgx-a100-2node", {"nodes": str(nodes)})


# ---------------------------------------------------------------- windows and extend (pure)

@pytest.mark.parametrize("m,stages", [(512, 8), (64, 1), (100, 4), (99, 3), (1000, 7)])
def test_windows_are_a_period_apart_and_land_on_the_step(m, stages):
    wins = list(windows(m, stages))
    assert wins, "a long step offers a window"
    spent = set()
    for w in wins:
        m1, m2, m3 = w.counts
        assert m2 - m1 == m3 - m2 == w.period == stages
        assert m3 + w.periods_left * w.period == m
        assert m1 >= 2 * stages                       # past the pipeline's fill
        spent |= set(w.counts)
    assert sum(spent) <= m / 2                        # trying costs at most half the step
    first = wins[0].counts[0]
    assert 2 * stages <= first < 3 * stages            # the earliest window (aligned to M)
    assert [w.counts[0] for w in wins] == list(range(first, first + len(wins) * stages, stages))


@pytest.mark.parametrize("m,stages", [(8, 8), (40, 8), (10, 1), (7, 3)])
def test_short_steps_offer_no_window(m, stages):
    assert list(windows(m, stages)) == []


def test_extend_is_the_affine_continuation():
    a = {"x": 1.0, "r": {"c": 10.0, "z": 0.0}}
    b = {"x": 3.0, "r": {"c": 15.0, "z": 0.0}}
    c = {"x": 5.0, "r": {"c": 20.0, "z": 0.0}}
    assert extend((a, b, c), 10) == {"x": 25.0, "r": {"c": 70.0, "z": 0.0}}


def test_extend_refuses_what_is_not_periodic():
    with pytest.raises(Unsteady, match=r"\['x'\]"):
        extend(({"x": 1.0}, {"x": 3.0}, {"x": 5.0 + 1e-6}), 4)
    # within the tolerance it is accepted
    assert extend(({"x": 1.0}, {"x": 3.0}, {"x": 5.0 * (1 + TOLERANCE / 10)}), 1)["x"] \
        == pytest.approx(7.0)
    with pytest.raises(Unsteady, match="different keys"):
        extend(({"x": 1.0}, {"x": 2.0}, {"x": 3.0, "y": 1.0}), 1)
    # a time part checked against the step's span: float noise far below it passes
    assert extend(({"x": 0.0}, {"x": 1e-17}, {"x": 0.0}), 3, scale=1.0)["x"] \
        == pytest.approx(0.0, abs=1e-15)


# ---------------------------------------------------------------- the step runner

EP_EXTRA = (Op("moe.dispatch", "ep", comm=Comm("ep", "alltoall", 4 << 20)),
            Op("moe.experts", "gemm", 2e-4, flops=1e11),
            Op("moe.combine", "ep", comm=Comm("ep", "alltoall", 4 << 20)))

CASES = {
    # name: (nodes, layout, chunks per stage, extra ops)
    "dp buckets, 1 stage": (2, Layout(tp=2, dp=8, global_batch=8 * 40,
                                      distributed_optimizer=True, bucket_bytes=40 << 20), 1, ()),
    "1f1b over machines": (2, Layout(tp=4, pp=2, dp=2, global_batch=2 * 40,
                                     bucket_bytes=40 << 20), 1, ()),
    "interleaved": (2, Layout(tp=4, pp=2, dp=2, virtual_stages=2, pipeline="interleaved",
                              global_batch=2 * 48, bucket_bytes=40 << 20), 2, ()),
    "zero-3": (2, Layout(tp=4, pp=2, dp=2, zero_stage=3, global_batch=2 * 40), 1, ()),
    "gpipe, context parallel": (2, Layout(tp=2, cp=2, pp=2, dp=2, pipeline="gpipe",
                                          global_batch=2 * 40, bucket_bytes=40 << 20), 1,
                                (Op("attn.cp", "cp", comm=Comm("cp", "allgather", 1 << 20)),)),
    "expert all-to-alls": (2, Layout(tp=1, ep=8, dp=16, global_batch=16 * 30,
                                     distributed_optimizer=True), 1, EP_EXTRA),
}


def _both(name):
    nodes, lay, v, extra = CASES[name]
    work = make_work(lay.pp, v, lay.global_batch // (lay.dp * lay.micro_batch), tp_comm=2 << 20,
                     extra=extra)
    g = dgx(nodes)
    full = simulate_step(g, "toy", lay, work=work, extrapolate=False)
    fast = simulate_step(g, "toy", lay, work=work)
    return full, fast


@pytest.mark.parametrize("name", sorted(CASES))
def test_extended_step_equals_every_micro_batch(name):
    full, fast = _both(name)
    assert full.steady is None
    assert fast.steady is not None, "the step is long enough to extend"
    assert max(fast.steady.counts) < full.row["micro_batches"]
    assert any(n.startswith("steady state:") for n in fast.notes)
    for key, want in full.row.items():
        got = fast.row[key]
        if isinstance(want, float):
            assert got == pytest.approx(want, rel=1e-9, abs=1e-12, nan_ok=True), key
        else:
            assert got == want, key
    cols = [c for c in full.breakdown.columns if c not in ("node",)]
    np.testing.assert_allclose(fast.breakdown[cols].to_numpy(float),
                               full.breakdown[cols].to_numpy(float), rtol=1e-9, atol=1e-12)
    assert list(fast.traffic["group"]) == list(full.traffic["group"])
    np.testing.assert_allclose(fast.traffic["bytes"], full.traffic["bytes"], rtol=1e-9)
    assert list(fast.links["link"]) == list(full.links["link"])
    np.testing.assert_allclose(fast.links["utilisation"], full.links["utilisation"], rtol=1e-9)


def test_a_window_that_fails_is_never_extended(monkeypatch):
    def refuse(*_a, **_k):
        raise Unsteady("refused by the test")

    monkeypatch.setattr(step_module, "extend", refuse)
    full, fast = _both("1f1b over machines")
    assert fast.steady is None
    assert not any(n.startswith("steady state:") for n in fast.notes)
    assert fast.row["step_time_s"] == full.row["step_time_s"]


def test_a_trace_simulates_every_micro_batch():
    nodes, lay, v, extra = CASES["1f1b over machines"]
    work = make_work(lay.pp, v, lay.global_batch // lay.dp, tp_comm=2 << 20)
    r = simulate_step(dgx(nodes), "toy", lay, work=work, record_trace=True)
    assert r.steady is None
    mbs = {e["name"] for e in r.trace["traceEvents"] if e.get("ph") == "X"}
    assert mbs                                      # the trace holds the whole step


def test_cli_every_micro_batch(capsys):
    args = ["llm", "--model", "llama2-7b", "--topology", "dgx-a100-2node", "--tp", "4",
            "--dp", "4", "--global-batch", "256", "--distributed-optimizer",
            "--sequence-parallel", "--recompute", "selective"]
    assert main(args) == 0
    fast = capsys.readouterr().out
    assert "note: steady state:" in fast
    assert main(args + ["--every-micro-batch"]) == 0
    full = capsys.readouterr().out
    assert "steady state" not in full

    def step_s(out):
        return float(next(line.split()[1] for line in out.splitlines()
                          if line.startswith("step_time_s")))

    assert step_s(fast) == pytest.approx(step_s(full), rel=1e-5)    # as printed
    assert main(["llm", "--model", "llama2-7b", "--topology", "dgx-a100-2node",
                 "--global-batch", "256", "--search", "--every-micro-batch"]) == 2
    assert "--every-micro-batch is for one step" in capsys.readouterr().err


# ---------------------------------------------------------------- a looser tolerance, asked for

def _outcome(m, noise=0.0):
    """A fake short step of ``m`` micro-batches: 0.5 s each after a 1 s fill, plus ``noise``."""
    t = 1.0 + 0.5 * m + noise
    return step_module._Outcome(
        step_s=t, ranks=[0], stage={0: 0}, end={0: t}, acc={0: {"compute_s": 0.4 * m}},
        traffic={"dp": 10.0 * m}, link_bytes={("a->b", "dp", 1e9): 5.0 * m}, fold_note="",
        engine=None, trace_events=None)


def test_check_tolerance_names_the_range():
    assert check_tolerance(1e-5) == 1e-5 and check_tolerance(TOLERANCE) == TOLERANCE
    for bad in (0.0, 1e-12, 2e-3, -1e-5, float("nan"), "x"):
        with pytest.raises(ConfigError, match=r"steady_tolerance: expected a relative tolerance "
                                              r"from 1e-09 \(exact, the default\) to 0.001"):
            check_tolerance(bad)


def test_drift_is_the_increments_difference_times_the_periods():
    assert drift(1.0, 3.0, 5.0, 60) == 0.0
    assert drift(1.0, 3.0, 5.0 + 1e-6, 60) == pytest.approx(6e-5, rel=1e-6)


def test_a_step_without_an_exact_period_is_extended_only_when_asked():
    """Increments that wander by 2e-7 s (4e-7 of the step's span): never extended at the
    default tolerance, extended at 1e-5 with the drift stated, and the extension lies within
    that drift of the noiseless step."""
    wobble = {16: 0.0, 24: 2e-7, 32: 0.0, 40: 2e-7, 48: 0.0}

    def run(m):
        return _outcome(m, wobble.get(m, 0.0))

    assert step_module._steady(run, 512, 8, []) is None
    notes = []
    out = step_module._steady(run, 512, 8, notes, tolerance=1e-5)
    assert out is not None and out.window.counts == (16, 24, 32)
    k = out.window.periods_left
    assert out.drift_s == pytest.approx(k * 4e-7, rel=1e-6)
    truth = 1.0 + 0.5 * 512
    assert abs(out.step_s - truth) <= out.drift_s
    assert out.traffic == {"dp": pytest.approx(10.0 * 512)}       # exact quantities stay exact
    assert "to 1e-05 relative, not exactly: the step time may be off by about 2.4e-05 s" \
        in notes[0]
    # an increment off by more than the tolerance is still refused
    loud = {24: 1e-3}
    assert step_module._steady(lambda m: _outcome(m, loud.get(m, 0.0)), 512, 8, [],
                               tolerance=1e-5).window.counts != (16, 24, 32)


def test_a_looser_tolerance_leaves_an_exactly_periodic_step_exact():
    nodes, lay, v, extra = CASES["1f1b over machines"]
    work = make_work(lay.pp, v, lay.global_batch // lay.dp, tp_comm=2 << 20)
    exact = simulate_step(dgx(nodes), "toy", lay, work=work)
    loose = simulate_step(dgx(nodes), "toy", lay, work=work, steady_tolerance=1e-4)
    assert loose.row == exact.row and loose.steady_drift_s == 0.0
    assert any("(to 1e-09)" in n for n in loose.notes)
    with pytest.raises(ConfigError, match="steady_tolerance"):
        simulate_step(dgx(nodes), "toy", lay, work=work, steady_tolerance=0.1)


def test_cli_steady_tolerance(capsys):
    args = ["llm", "--model", "llama2-7b", "--topology", "dgx-a100-2node", "--tp", "4",
            "--dp", "4", "--global-batch", "256"]
    assert main(args + ["--steady-tolerance", "1e-5"]) == 0
    assert "note: steady state:" in capsys.readouterr().out
    for extra, message in (
            (["--steady-tolerance", "0.01"], "--steady-tolerance: expected a relative "
                                             "tolerance from 1e-09"),
            (["--steady-tolerance", "1e-5", "--every-micro-batch"], "give one of them"),
            (["--steady-tolerance", "1e-5", "--trace", "t.json"], "--trace simulates every"),
            (["--steady-tolerance", "1e-5", "--search"], "--steady-tolerance is for one step")):
        given = args[:-4] + args[-2:] if "--search" in extra else args      # no --dp
        assert main(given + extra) == 2
        assert message in capsys.readouterr().err
    assert main(["compare", "tests/data/measurements/nccl_a3mega_2node_tcpxo.csv",
                 "--topology", "gcp-a3-mega", "--steady-tolerance", "1e-5"]) == 2
    assert "--steady-tolerance applies to LLM training tables" in capsys.readouterr().err


def test_compare_passes_the_tolerance_and_reports_the_drift(tmp_path, monkeypatch):
    """``compare --steady-tolerance`` on an LLM table: each row's step is asked for it; an
    exactly periodic step keeps every number, and ``compare.csv`` says it drifted by nothing."""
    import pandas as pd

    asked = []
    real = step_module.simulate_step

    def spy(*args, **kwargs):
        asked.append(kwargs.get("steady_tolerance"))
        return real(*args, **kwargs)

    monkeypatch.setattr(step_module, "simulate_step", spy)
    table = "tests/data/measurements/train_llm_nvidia_dgxh100_fp8.csv"
    base = ["compare", table, "--topology", "hgx-h100", "--select", "model=llama3-8b"]
    assert main(base + ["-o", str(tmp_path / "exact")]) == 0
    assert main(base + ["--steady-tolerance", "1e-4", "-o", str(tmp_path / "loose")]) == 0
    exact = pd.read_csv(tmp_path / "exact" / "compare.csv")
    loose = pd.read_csv(tmp_path / "loose" / "compare.csv")
    pd.testing.assert_frame_equal(exact, loose)
    assert (loose["steady_drift_s"] == 0.0).all() and len(loose) == 2
    assert asked == [TOLERANCE, TOLERANCE, 1e-4, 1e-4]
