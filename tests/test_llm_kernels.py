"""A measured kernel table for an LLM step: written with torch, read back by the cost model."""

import functools

import pytest

from simulator.cli import main
from simulator.workload.llm.compute import KernelTable, kernels_of
from simulator.workload.llm.costs import step_work
from simulator.workload.llm.layout import Layout
from simulator.workload.llm.model import TransformerConfig

torch = pytest.importorskip("torch")

TINY = TransformerConfig(name="tiny", layers=2, hidden=64, heads=4, ffn_hidden=256, vocab=512,
                         seq_len=128)
LAYOUT = Layout(tp=1, micro_batch=2, global_batch=2)


def _work(**kw):
    return step_work(TINY, LAYOUT, "a100-sxm4-80gb", **kw)


def test_the_recorder_lists_each_distinct_kernel_once():
    kernels = kernels_of(_work)
    keys = [(k.op, k.shape) for k in kernels]
    assert len(keys) == len(set(keys))
    assert {"gemm", "attention_fwd", "attention_bwd", "elementwise", "adam"} <= {
        k.op for k in kernels}


def test_a_measured_table_replaces_the_roofline_and_covers_the_step(tmp_path):
    from simulator.measure.llm_kernels import measure_llm_kernels

    frame = measure_llm_kernels(_work, device="cpu", iterations=2, warmup=1, threads=1)
    assert len(frame) == len(kernels_of(_work))
    assert (frame["time_s"] > 0).all()
    path = tmp_path / "k.csv"
    frame.to_csv(path, index=False)
    table = KernelTable.from_csv(path)            # no fallback: every kernel must be there
    measured = _work(kernels=table)
    roofline = _work()
    assert measured.chunks[(0, 0)].forward_compute_s != roofline.chunks[(0, 0)].forward_compute_s
    # a table twice as slow makes the compute twice as long (launch overheads aside: none
    # are added to measured times)
    doubled = KernelTable({(r.op, r.shape): 2 * r.time_s for r in frame.itertuples()})
    slow = _work(kernels=doubled)
    assert slow.chunks[(0, 0)].forward_compute_s == pytest.approx(
        2 * measured.chunks[(0, 0)].forward_compute_s)


def test_the_command_writes_the_table(tmp_path, capsys):
    out = tmp_path / "kernels.csv"
    code = main(["measure", "kernels", "--llm", "--model", "gpt3-350m", "--batch", "1",
                 "--limit", "2", "--iterations", "1", "--warmup", "0", "--threads", "1",
                 "-o", str(out)])
    assert code == 0
    text = out.read_text().splitlines()
    assert text[0].startswith("op,shape,time_s") and len(text) == 3


def test_clustersim_llm_reads_a_kernel_table(tmp_path, capsys):
    from simulator.workload.llm.registry import get_llm_model

    model, layout = get_llm_model("gpt3-350m"), Layout(tp=1, micro_batch=1, global_batch=8,
                                                       dp=8)
    work = functools.partial(step_work, model, layout, "a100-sxm4-80gb")
    table = tmp_path / "k.csv"
    rows = ["op,shape,time_s"] + [f"{k.op},\"{k.shape}\",0.001" for k in kernels_of(work)]
    table.write_text("\n".join(rows) + "\n")
    args = ["llm", "--model", "gpt3-350m", "--topology", "dgx-a100", "--dp", "8",
            "--global-batch", "8"]
    assert main(args) == 0
    roofline = capsys.readouterr().out
    assert main(args + ["--kernels", str(table)]) == 0
    measured = capsys.readouterr().out
    assert roofline != measured
    partial = tmp_path / "partial.csv"
    partial.write_text("\n".join(rows[:3]) + "\n")
    assert main(args + ["--kernels", str(partial)]) == 2
    assert "has no entry for op" in capsys.readouterr().err
    assert main(args + ["--kernels", str(partial), "--kernels-fallback"]) == 0
