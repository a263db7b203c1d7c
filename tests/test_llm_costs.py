"""Kernel times, layout refusals and the StepWork built for hybrid-parallel layouts."""

import collections
from dataclasses import replace

import pytest

from simulator.errors import ConfigError
from simulator.topology.devices import get_device
from simulator.workload.llm.compute import (ADAM_BYTES_PER_PARAM, TRAINING_GEMM_EFFICIENCY,
                                            KernelTable, adam, attention, check_precision,
                                            gemm, gemm_shape_factor, kernel_time, peak_flops,
                                            roofline_time)
from simulator.workload.llm.costs import step_work
from simulator.workload.llm.layout import Layout, check_layout
from simulator.workload.llm.model import TransformerConfig
from simulator.workload.llm.registry import get_llm_model

GPT = get_llm_model("megatron-gpt-7.5b")          # 36 layers, h 4096, 32 heads, s 2048
LLAMA = get_llm_model("llama3-8b")
MIXTRAL = get_llm_model("mixtral-8x7b")


# ------------------------------------------------------------------ peaks and roofline
def test_fp8_refused_without_fp8_tensor_cores():
    for name in ("a100-sxm4-80gb", "v100-sxm2-32gb"):
        with pytest.raises(ConfigError) as err:
            check_precision(name, "fp8")
        assert "\n" not in str(err.value) and name in str(err.value)
    assert peak_flops("h100-sxm5-80gb", "fp8") == 1979e12
    assert peak_flops("a100-sxm4-80gb", "tf32") == 156e12
    assert peak_flops("a100-sxm4-80gb", "bf16") == 312e12
    with pytest.raises(ConfigError, match="bf16"):
        check_precision("v100-sxm2-32gb", "bf16")


def test_hand_computed_gemm_time():
    dev = get_device("a100-sxm4-80gb")
    m = n = k = 8192
    # 64 x 64 = 4096 tiles of 128 x 128 on 108 SMs: 38 waves, last one partial
    factor = 4096 / (38 * 108)
    assert gemm_shape_factor(m, n, k, 108) == pytest.approx(factor)
    # MAMF fraction 0.869 x the fitted in-training GEMM efficiency 0.785
    assert TRAINING_GEMM_EFFICIENCY == 0.785
    expected = 2 * m * n * k / (312e12 * 0.869 * 0.785 * factor) + 5e-6
    assert roofline_time(dev, gemm(m, n, k)) == pytest.approx(expected)


def test_gemm_time_is_monotone_in_every_dimension():
    dev = get_device("h100-sxm5-80gb")
    for base in ((1024, 1024, 1024), (4096, 512, 8192), (128, 50000, 4096)):
        for axis in range(3):
            times = []
            for scale in (1, 2, 3, 4, 8):
                dims = list(base)
                dims[axis] *= scale
                times.append(roofline_time(dev, gemm(*dims)))
            assert all(b >= a * (1 - 1e-12) for a, b in zip(times, times[1:]))


def test_small_gemms_get_a_lower_fraction_and_memory_bound_ops_follow_bandwidth():
    dev = get_device("a100-sxm4-80gb")
    big, small = gemm(8192, 8192, 8192), gemm(256, 256, 8192)
    rate = lambda kern: kern.flops / (roofline_time(dev, kern) - 5e-6)
    assert rate(small) < 0.5 * rate(big)
    from simulator.workload.llm.compute import elementwise
    t = roofline_time(dev, elementwise("x", 2e9))
    assert t == pytest.approx(2e9 / (2039e9 * 0.90) + 5e-6)


def test_flash_attention_time_uses_the_published_fraction():
    dev = get_device("a100-sxm4-80gb")
    fwd = attention(1, 32, 32, 2048, 2048, 128)
    assert fwd.flops == 4 * 2048 * 2048 * 32 * 128 / 2                      # causal
    assert roofline_time(dev, fwd) == pytest.approx(fwd.flops / (312e12 * 0.73) + 5e-6)
    bwd = attention(1, 32, 32, 2048, 2048, 128, backward=True)
    assert bwd.flops == 2.5 * fwd.flops
    assert roofline_time(dev, bwd) == pytest.approx(bwd.flops / (312e12 * 0.50) + 5e-6)


def test_optimizer_bytes_follow_megatrons_step():
    # grad norm 4 + Adam 28 + main -> model copy 6 + zeroed grad buffer 4; fp16 unscale + 8
    assert ADAM_BYTES_PER_PARAM == 42
    assert adam(1e9).bytes == 42e9
    assert adam(1e9, "fp16").bytes == 50e9


def test_unfused_attention_bytes_are_not_counted_twice():
    from simulator.workload.llm import costs
    lay = Layout(tp=8, micro_batch=4, global_batch=4, precision="fp16", attention="unfused")
    model = TransformerConfig(name="k22b", layers=2, hidden=6144, heads=64,
                              ffn_hidden=4 * 6144, vocab=51200, seq_len=2048)
    work = step_work(model, lay, "a100-sxm4-80gb")
    chunk = work.chunks[(0, 0)]
    ops = {o.name: o for o in chunk.forward + chunk.backward}
    elems = 4 * (64 // 8) * 2048 * 2048
    bw = 2039e9 * 0.90
    # the softmax/dropout passes between the GEMMs: 9 bytes forward, 11 backward per score
    assert costs.UNFUSED_SCORE_BYTES == 9 and costs.UNFUSED_SCORE_BYTES_BWD == 11
    assert ops["l0.attn.softmax"].compute_s == pytest.approx(elems * 9 / bw + 5e-6)
    assert ops["l0.attn.softmax.bwd"].compute_s == pytest.approx(elems * 11 / bw + 5e-6)


def test_dgx2_v100_runs_on_the_v100_entries():
    # v100-sxm3-32gb has no DEVICE_EFFICIENCY entry: the same GV100 silicon's is used
    kern = gemm(8192, 8192, 8192, "fp16")
    assert roofline_time("v100-sxm3-32gb", kern) == roofline_time("v100-sxm2-32gb", kern)


# ------------------------------------------------------------------ kernel tables
def test_kernel_table_overrides_and_reports_missing_entries(tmp_path):
    kern = gemm(4096, 12288, 4096)
    table = KernelTable({(kern.op, kern.shape): 1.0})
    assert kernel_time("a100-sxm4-80gb", kern, table) == 1.0
    other = gemm(4096, 4096, 4096)
    with pytest.raises(ConfigError) as err:
        kernel_time("a100-sxm4-80gb", other, table)
    assert other.shape in str(err.value) and "gemm" in str(err.value)
    lenient = KernelTable({(kern.op, kern.shape): 1.0}, fallback=True)
    assert kernel_time("a100-sxm4-80gb", other, lenient) == \
        roofline_time("a100-sxm4-80gb", other)
    path = tmp_path / "kernels.csv"
    path.write_text(f"op,shape,time_s\n{kern.op},\"{kern.shape}\",0.5\n")
    assert KernelTable.from_csv(path).lookup(kern.op, kern.shape) == 0.5
    bad = tmp_path / "bad.csv"
    bad.write_text("op,time_s\ngemm,1\n")
    with pytest.raises(ConfigError, match="shape"):
        KernelTable.from_csv(bad)


def test_kernel_table_changes_step_times():
    layout = Layout(tp=1, dp=1, global_batch=1)
    base = step_work(GPT, layout, "a100-sxm4-80gb")
    qkv = gemm(2048, 3 * 4096, 4096)
    table = KernelTable({(qkv.op, qkv.shape): 1.0}, fallback=True)
    slow = step_work(GPT, layout, "a100-sxm4-80gb", kernels=table)
    chunk, slow_chunk = base.chunks[(0, 0)], slow.chunks[(0, 0)]
    assert slow_chunk.forward_compute_s > chunk.forward_compute_s + 30   # 36 layers x ~1 s
    assert slow_chunk.backward_compute_s == pytest.approx(chunk.backward_compute_s)
    with pytest.raises(ConfigError, match="no entry"):
        step_work(GPT, layout, "a100-sxm4-80gb", kernels=KernelTable({}))


# ------------------------------------------------------------------ layout refusals
BAD_LAYOUTS = [
    (GPT, Layout(tp=3), None, "heads"),
    (TransformerConfig("gqa", 4, 3072, 48, 8192, 1000, 1024, kv_heads=6), Layout(tp=4), None,
     "multiple or a divisor"),
    (GPT, Layout(pp=5, global_batch=5), None, "pp x virtual_stages"),
    (GPT, Layout(pp=4, virtual_stages=2, pipeline="interleaved", global_batch=8), None,
     "pp x virtual_stages"),
    (GPT, Layout(dp=4, micro_batch=2, global_batch=12), None, "dp x micro_batch"),
    (GPT, Layout(pp=4, virtual_stages=3, pipeline="interleaved", global_batch=6), None,
     "divisible by pp"),
    (GPT, Layout(virtual_stages=2, pp=2, global_batch=2), None, "interleaved"),
    (GPT, Layout(cp=3), None, "2 x cp"),
    (GPT, Layout(ep=2, dp=2, global_batch=2), None, "no experts"),
    (MIXTRAL, Layout(ep=3, dp=3, global_batch=3), None, "experts are not divisible"),
    (MIXTRAL, Layout(ep=4, dp=2, global_batch=2), None, "must divide dp x cp"),
    (MIXTRAL, Layout(tp=2), None, "sequence parallelism"),
    (GPT, Layout(tp=2, dp=2), 8, "GPUs"),
    (GPT, Layout(zero_stage=5), None, "ZeRO stage"),
    (GPT, Layout(zero_stage=1, distributed_optimizer=True), None, "not both"),
    (GPT, Layout(precision="fp8"), "a100", "fp8"),
    (GPT, Layout(tp=8, sequence_parallel=True, cp=2, dp=1), None, None),   # accepted
]


@pytest.mark.parametrize("model,layout,extra,needle", BAD_LAYOUTS)
def test_layout_refusals_are_one_line(model, layout, extra, needle):
    kwargs = {}
    if extra == "a100":
        kwargs["device"] = get_device("a100-sxm4-80gb")
    elif extra is not None:
        kwargs["gpus"] = extra
    if needle is None:
        assert check_layout(model, layout, **kwargs) is layout
        return
    with pytest.raises(ConfigError) as err:
        check_layout(model, layout, **kwargs)
    assert needle in str(err.value) and "\n" not in str(err.value)


# ------------------------------------------------------------------ step work
def _comm_counts(ops, prefix="l0."):
    return collections.Counter((o.comm.group, o.comm.collective) for o in ops
                               if o.comm and o.name.startswith(prefix))


def _flop_totals(work, layout):
    ranks = layout.tp * layout.cp * layout.dp * work.micro_batches
    ops = [o for c in work.chunks.values() for o in c.forward + c.backward]
    model = sum(o.flops for o in ops if o.kind != "recompute") * ranks
    hardware = sum(o.flops for o in ops) * ranks
    return model, hardware


def test_tensor_parallel_without_sp_two_allreduces_each_way():
    layout = Layout(tp=8, dp=2, global_batch=4)
    work = step_work(GPT, layout, "a100-sxm4-80gb")
    chunk = work.chunks[(0, 0)]
    assert _comm_counts(chunk.forward) == {("tp", "allreduce"): 2}
    assert _comm_counts(chunk.backward) == {("tp", "allreduce"): 2}
    sizes = {o.comm.size_bytes for o in chunk.forward if o.comm and o.name.startswith("l0.")}
    assert sizes == {1 * 2048 * 4096 * 2}
    assert all(o.comm.overlapped for o in chunk.backward if o.comm and o.name.startswith("l0."))


def test_sequence_parallel_gathers_and_scatters():
    layout = Layout(tp=8, dp=1, sequence_parallel=True)
    chunk = step_work(GPT, layout, "a100-sxm4-80gb").chunks[(0, 0)]
    assert _comm_counts(chunk.forward) == {("tp", "allgather"): 2, ("tp", "reducescatter"): 2}
    # backward: gradient all-gathers, input re-gathers (overlapped), input-gradient RS
    assert _comm_counts(chunk.backward) == {("tp", "allgather"): 4, ("tp", "reducescatter"): 2}
    assert chunk.activation_bytes == 0           # single chunk is also the last
    sp2 = step_work(GPT, replace(layout, pp=2, global_batch=2), "a100-sxm4-80gb")
    assert sp2.chunks[(0, 0)].activation_bytes == 2048 * 4096 * 2 // 8


def test_context_parallel_gathers_keys_and_values():
    layout = Layout(tp=2, cp=4, dp=1, sequence_parallel=True)
    chunk = step_work(LLAMA, layout, "h100-sxm5-80gb").chunks[(0, 0)]
    fwd, bwd = _comm_counts(chunk.forward), _comm_counts(chunk.backward)
    assert fwd[("cp", "allgather")] == 1 and bwd[("cp", "reducescatter")] == 1
    cp_op = next(o for o in chunk.forward if o.comm and o.comm.group == "cp")
    assert cp_op.comm.size_bytes == 8192 * 2 * (1024 // 2) * 2      # b·s·2·kv_dim/tp·2
    tp_op = next(o for o in chunk.forward if o.comm and o.comm.group == "tp")
    assert tp_op.comm.size_bytes == 8192 // 4 * 4096 * 2            # tokens b·s/cp


def test_expert_parallel_all_to_all_per_moe_layer():
    layout = Layout(tp=2, ep=4, dp=4, global_batch=4, sequence_parallel=True)
    chunk = step_work(MIXTRAL, layout, "h100-sxm5-80gb").chunks[(0, 0)]
    fwd, bwd = _comm_counts(chunk.forward), _comm_counts(chunk.backward)
    assert fwd[("ep", "alltoall")] == 2 and bwd[("ep", "alltoall")] == 2
    a2a = next(o for o in chunk.forward if o.comm and o.comm.group == "ep")
    assert a2a.comm.size_bytes == 32768 // 2 * 2 * 4096 * 2   # T/tp tokens x top-2 x h x 2 B
    deepseek = get_llm_model("deepseekmoe-16b")
    lay = Layout(ep=8, dp=8, global_batch=8)
    ds = step_work(deepseek, lay, "h100-sxm5-80gb").chunks[(0, 0)]
    assert not _comm_counts(ds.forward, "l0.")                 # the dense first layer
    assert _comm_counts(ds.forward, "l1.") == {("ep", "alltoall"): 2}


def test_expert_tp_1_keeps_tensor_collectives_out_of_the_experts():
    """MoE parallel folding: with expert_tp 1 under tp 2 the experts run whole on each rank
    (no all-gather / reduce-scatter around them), on the rank's own T/tp routed copies, with
    full-width GEMMs; the FLOPs of the step do not change, the expert parameters per rank are
    those of ep experts, not ep x tp, and the expert-data-parallel group the optimizer shards
    them over is tp x cp x dp / (expert_tp x ep) ranks."""
    from simulator.workload.llm.memory import chunk_params

    folded = Layout(tp=2, ep=8, dp=4, global_batch=4, sequence_parallel=True, expert_tp=1)
    default = replace(folded, ep=4, expert_tp=None)
    fc, dc = (step_work(MIXTRAL, lay, "h100-sxm5-80gb").chunks[(0, 0)]
              for lay in (folded, default))
    moe = lambda chunk, kind: [o for o in chunk.forward + chunk.backward   # noqa: E731
                               if o.name.startswith("l0.moe.") and o.comm
                               and o.comm.group == kind]
    assert not moe(fc, "tp") and not moe(fc, "etp")
    assert len(moe(dc, "tp")) == 4                     # all-gather + reduce-scatter, both ways
    tokens = 32768 // 2                                # T/tp under sequence parallelism
    fc1 = next(o for o in fc.forward if o.name == "l0.moe.experts.fc1")
    dc1 = next(o for o in dc.forward if o.name == "l0.moe.experts.fc1")
    assert fc1.flops == dc1.flops == pytest.approx(2.0 * 32768 * 2 * 4096 * 2 * 14336 / 2)
    a2a = next(o for o in fc.forward if o.name == "l0.moe.ep.dispatch")
    assert a2a.comm.size_bytes == tokens * 2 * 4096 * 2
    _, fe = chunk_params(MIXTRAL, folded, 0, 0)
    _, de = chunk_params(MIXTRAL, default, 0, 0)
    per_layer = MIXTRAL.layer_expert_params(0) * MIXTRAL.layers
    assert fe == pytest.approx(per_layer / 8) and de == pytest.approx(per_layer / (4 * 2))
    assert (folded.edp, default.edp) == (1, 1)
    assert replace(folded, ep=4).edp == 2                 # 2 x 4 ranks over 1 x 4: two replicas
    assert any("expert tensor parallelism = 1" in n for n in
               step_work(MIXTRAL, folded, "h100-sxm5-80gb").notes)
    with pytest.raises(ConfigError, match="expert_tp = 3 must divide tp = 2"):
        step_work(MIXTRAL, replace(folded, expert_tp=3), "h100-sxm5-80gb")


def test_a_sliding_window_prices_each_querys_window_not_the_sequence():
    """A windowed layer's fused attention does the work of each query's keys (positions before
    the window see fewer: 2 - 2·1/(2·4) = 1.75 keys on average for s = 4, w = 2); on GPT-OSS
    the windowed layers' attention takes a small fraction of the full layers' time."""
    from simulator.workload.llm.compute import attention, window_keys

    assert window_keys(4, 2) == 1.75 and window_keys(4096, 8192) == pytest.approx(2048.5)
    full = attention(1, 64, 8, 4096, 4096, 64)
    band = attention(1, 64, 8, 4096, 4096, 64, window=128)
    assert band.flops == pytest.approx(4.0 * 4096 * window_keys(4096, 128) * 64 * 64)
    assert band.flops < full.flops / 16 and band.bytes == full.bytes    # 126 keys vs 2048
    oss = get_llm_model("gpt-oss-120b")
    chunk = step_work(oss, Layout(ep=8, dp=8, global_batch=8), "h100-sxm5-80gb").chunks[(0, 0)]
    core = {o.name: o for o in chunk.forward if o.name.endswith(".attn.core")}
    # a banded layer is bound by reading Q, K, V and writing O, not by its FLOPs
    assert core["l0.attn.core"].compute_s < core["l1.attn.core"].compute_s / 5
    assert core["l0.attn.core"].flops == pytest.approx(4.0 * 4096 * 128 * 64 * 64)


def test_recompute_adds_forward_ops_to_backward():
    plain = step_work(GPT, Layout(), "a100-sxm4-80gb").chunks[(0, 0)]
    full = step_work(GPT, Layout(recompute="full"), "a100-sxm4-80gb").chunks[(0, 0)]
    sel = step_work(GPT, Layout(recompute="selective"), "a100-sxm4-80gb").chunks[(0, 0)]
    fwd_gemms = sum(o.kind == "gemm" and o.name.startswith("l0.") for o in plain.forward)
    re_full = [o for o in full.backward if o.kind == "recompute" and o.name.startswith("l0.")]
    assert sum(".attn.core" not in o.name for o in re_full) >= fwd_gemms
    re_sel = [o for o in sel.backward if o.kind == "recompute"]
    assert len(re_sel) == GPT.layers and all("attn.core" in o.name for o in re_sel)
    assert full.backward_compute_s > sel.backward_compute_s > plain.backward_compute_s


@pytest.mark.parametrize("model,layout,device", [
    (GPT, Layout(tp=4, pp=3, dp=2, global_batch=12, recompute="full"), "a100-sxm4-80gb"),
    (LLAMA, Layout(tp=2, cp=2, pp=2, dp=2, global_batch=8, sequence_parallel=True,
                   recompute="selective"), "h100-sxm5-80gb"),
    (MIXTRAL, Layout(tp=2, ep=4, pp=4, dp=4, global_batch=32, sequence_parallel=True,
                     pipeline="interleaved", virtual_stages=2), "h100-sxm5-80gb"),
    (get_llm_model("megatron-gpt2-1.2b"), Layout(precision="fp16", global_batch=2),
     "v100-sxm2-32gb"),
])
def test_op_flops_add_up_to_model_and_hardware_flops(model, layout, device):
    work = step_work(model, layout, device)
    model_flops, hardware_flops = _flop_totals(work, layout)
    assert model_flops == pytest.approx(work.model_flops_per_step, rel=1e-9)
    assert hardware_flops == pytest.approx(work.hardware_flops_per_step, rel=1e-9)
    assert work.tokens_per_step == layout.global_batch * model.seq_len


def test_chunks_embedding_head_and_bytes():
    layout = Layout(tp=2, pp=4, dp=1, global_batch=8)
    work = step_work(GPT, layout, "a100-sxm4-80gb")
    assert set(work.chunks) == {(s, 0) for s in range(4)}
    names = lambda c: {o.name.split(".")[0] for o in c.forward}
    assert "embed" in names(work.chunks[(0, 0)]) and "head" not in names(work.chunks[(0, 0)])
    assert "head" in names(work.chunks[(3, 0)]) and "embed" not in names(work.chunks[(3, 0)])
    middle = work.chunks[(1, 0)]
    assert middle.layers == 9 and not names(middle) & {"embed", "head"}
    assert middle.grad_bytes == 2 * middle.param_bytes            # fp32 main grads, bf16 weights
    assert middle.activation_bytes == 2048 * 4096 * 2
    assert work.chunks[(3, 0)].activation_bytes == 0
    assert work.micro_batches == 8 and work.optimizer_s > 0
    fp16 = step_work(GPT, replace(layout, precision="fp16"), "a100-sxm4-80gb")
    assert fp16.chunks[(1, 0)].grad_bytes == fp16.chunks[(1, 0)].param_bytes


def test_interleaved_chunks_hold_layers_in_megatron_order():
    layout = Layout(pp=4, virtual_stages=3, pipeline="interleaved", global_batch=8)
    work = step_work(GPT, layout, "a100-sxm4-80gb")
    assert len(work.chunks) == 12 and work.virtual_stages == 3
    first_layer = lambda c: min(int(o.name.split(".")[0][1:]) for o in c.forward
                                if o.name.startswith("l"))
    assert first_layer(work.chunks[(1, 0)]) == 3 and first_layer(work.chunks[(0, 1)]) == 12


def test_fp8_gemms_are_faster_on_h100_and_unfused_attention_on_v100():
    bf16 = step_work(LLAMA, Layout(), "h100-sxm5-80gb").chunks[(0, 0)]
    fp8 = step_work(LLAMA, Layout(precision="fp8"), "h100-sxm5-80gb").chunks[(0, 0)]
    assert fp8.forward_compute_s < bf16.forward_compute_s
    v100 = step_work(get_llm_model("megatron-gpt2-1.2b"), Layout(precision="fp16"),
                     "v100-sxm2-32gb")
    assert any(o.name.endswith("attn.softmax") for o in v100.chunks[(0, 0)].forward)
    assert any("unfused" in note for note in v100.notes)


def test_fp8_leaves_the_output_layer_in_bf16():
    """Megatron-Core's LM head is its own ColumnParallelLinear, not a Transformer Engine
    module: under fp8 its three GEMMs take the bf16 time, the layers' GEMMs the fp8 one."""
    def ops(precision):
        chunk = step_work(LLAMA, Layout(precision=precision), "h100-sxm5-80gb").chunks[(0, 0)]
        return {o.name: o for o in chunk.forward + chunk.backward}
    bf16, fp8 = ops("bf16"), ops("fp8")
    head = [n for n in bf16 if n.startswith("head.logits")]
    assert sorted(head) == ["head.logits", "head.logits.dgrad", "head.logits.wgrad"]
    for name in head:
        assert fp8[name].compute_s == bf16[name].compute_s > 0
        assert fp8[name].flops == bf16[name].flops
    qkv = next(n for n in bf16 if n.endswith("attn.qkv"))
    assert fp8[qkv].compute_s < 0.75 * bf16[qkv].compute_s
    chunk = step_work(LLAMA, Layout(precision="fp8"), "h100-sxm5-80gb")
    assert any("output layer" in note for note in chunk.notes)


@pytest.mark.parametrize("model, layout", [
    ("llama3-70b", Layout(tp=8, pp=4, global_batch=8, sequence_parallel=True, recompute="full")),
    ("llama3-70b", Layout(tp=2, cp=2, global_batch=2, sequence_parallel=True,
                          recompute="selective", precision="fp8")),
    # MoE with a leading dense layer: two kinds of layers in one chunk
    ("mixtral-8x7b", Layout(tp=2, ep=4, dp=4, pp=2, global_batch=16, sequence_parallel=True)),
    # windowed and full attention alternating: two kinds of layers again
    ("gpt-oss-120b", Layout(ep=8, dp=8, pp=2, global_batch=16, recompute="selective")),
])
def test_layer_copies_equal_layers_built_one_by_one(model, layout):
    """step_work builds one layer of each kind and renames copies for the others: every op of
    every layer is what building that layer alone gives (names included)."""
    from simulator.workload.llm import costs
    from simulator.workload.llm.memory import chunk_layers, uses_flash

    cfg = get_llm_model(model)
    if model == "mixtral-8x7b":
        from dataclasses import replace as dc_replace
        cfg = dc_replace(cfg, moe=dc_replace(cfg.moe, first_dense_layers=1, moe_layer_freq=2))
    dev = get_device("h100-sxm5-80gb")
    work = step_work(cfg, layout, dev)
    fresh = costs._Ctx(cfg, layout, dev, None, uses_flash(layout, dev))
    kinds = set()
    for (s, v), chunk in work.chunks.items():
        layers = chunk_layers(cfg, layout, s, v)
        fwd = [op for i in layers for op in costs._layer_forward(fresh, i)]
        bwd = [op for i in reversed(layers) for op in costs._layer_backward(fresh, i)]
        assert [op for op in chunk.forward if op.name.startswith("l")] == fwd
        assert [op for op in chunk.backward if op.name.startswith("l")] == bwd
        kinds |= {(cfg.is_moe_layer(i), cfg.attention_window(i)) for i in layers}
    assert len(kinds) == (2 if model in ("mixtral-8x7b", "gpt-oss-120b") else 1)


def test_fp8_experts_quantize_their_own_operands():
    """Transformer Engine's GroupedLinear quantizes its input forward and its output gradient
    backward, with Megatron-Core's 16-bit activation between expert fc1 and fc2: under fp8 a
    MoE layer casts the dispatched tokens, the activation and both output gradients (4 bytes
    per element: read 16-bit, write fp8 and its transpose); under bf16 it casts nothing, and
    the casts take the memory-bound time of their bytes, plus one launch for each of the
    rank's other experts (one quantize kernel per expert tensor)."""
    from simulator.workload.llm.compute import elementwise
    from simulator.workload.llm.costs import FP8_CAST_TRANSPOSE_BYTES

    lay = Layout(ep=8, dp=8, global_batch=8)
    model = get_llm_model("qwen3-30b-a3b")
    rows = model.seq_len * model.moe.top_k                 # one micro-batch's routed copies
    h, fe = model.hidden, model.moe.expert_ffn_hidden
    want = {"l0.moe.experts.fc1.fp8cast": rows * h, "l0.moe.experts.fc2.fp8cast": rows * fe,
            "l0.moe.experts.fc2.grad.fp8cast": rows * h,
            "l0.moe.experts.fc1.grad.fp8cast": rows * 2 * fe}
    for precision in ("fp8", "bf16"):
        chunk = step_work(model, replace(lay, precision=precision),
                          "b200-sxm-180gb").chunks[(0, 0)]
        ops = {o.name: o for o in chunk.forward + chunk.backward}
        casts = sorted(n for n in ops if n.startswith("l0.moe.") and n.endswith("fp8cast"))
        if precision == "bf16":
            assert casts == []
            continue
        assert casts == sorted(want)
        launch = kernel_time("b200-sxm-180gb", elementwise("launch", 0))
        local = model.moe.experts // lay.ep                   # 16 experts on each rank
        for name, elements in want.items():
            t = kernel_time("b200-sxm-180gb",
                            elementwise("fp8cast", elements * FP8_CAST_TRANSPOSE_BYTES))
            assert ops[name].compute_s == pytest.approx(t + (local - 1) * launch, rel=1e-12)
        names = [o.name for o in chunk.forward]
        assert names.index("l0.moe.experts.fc1.fp8cast") + 1 == \
            names.index("l0.moe.experts.fc1")
        assert names.index("l0.moe.experts.fc2.fp8cast") + 1 == \
            names.index("l0.moe.experts.fc2")


def test_experts_with_biases_pay_megatrons_eager_bias_add():
    """GPT-OSS's experts have biases; Megatron-Core adds fc2's itself, per local expert
    (``t + b * p``, then a ``cat``): 6 passes over the fc2 output and 2 E + 1 kernels forward,
    8 passes and 4 E + 1 kernels backward, between fc2 and the combine. A model without
    biases (Qwen3) pays nothing, and more experts on a rank pay more launches."""
    from simulator.workload.llm.compute import elementwise

    dev = "b200-sxm-180gb"
    model = get_llm_model("gpt-oss-120b")
    rows = model.seq_len * model.moe.top_k                 # one micro-batch's routed copies
    launch = kernel_time(dev, elementwise("launch", 0))
    seconds = {}
    for ep in (8, 16):
        chunk = step_work(model, Layout(ep=ep, dp=16, global_batch=16), dev).chunks[(0, 0)]
        fwd = [o.name for o in chunk.forward]
        ops = {o.name: o for o in chunk.forward + chunk.backward}
        local = model.moe.experts // ep
        for name, passes, kernels in (("l0.moe.experts.bias", 6, 2 * local + 1),
                                      ("l0.moe.experts.bias.bwd", 8, 4 * local + 1)):
            t = kernel_time(dev, elementwise(name.split(".")[-1],
                                             passes * rows * model.hidden * 2))
            assert ops[name].compute_s == pytest.approx(t + (kernels - 1) * launch, rel=1e-12)
        assert fwd.index("l0.moe.experts.fc2") + 1 == fwd.index("l0.moe.experts.bias")
        bwd = [o.name for o in chunk.backward]
        assert bwd.index("l0.moe.experts.bias.bwd") < bwd.index("l0.moe.experts.fc2.dgrad")
        seconds[ep] = ops["l0.moe.experts.bias"].compute_s
    assert seconds[8] > seconds[16]                        # 16 experts a rank against 8
    qwen = step_work(get_llm_model("qwen3-30b-a3b"), Layout(ep=8, dp=8, global_batch=8),
                     dev).chunks[(0, 0)]
    assert not [o for o in qwen.forward + qwen.backward if ".experts.bias" in o.name]


# ------------------------------------------------------------------ fp8 recipes
def _fp8_ops(recipe, device="h100-sxm5-80gb", model=LLAMA):
    layout = Layout(precision="fp8", fp8_recipe=recipe)
    chunk = step_work(model, layout, device).chunks[(0, 0)]
    return {o.name: o for o in chunk.forward + chunk.backward}


def test_fp8_recipes_quantize_where_transformer_engine_does():
    """Delayed scaling fuses the casts of norm and activation outputs; current scaling writes
    16 bits and quantizes after both; MXFP8 fuses activations only (its norm runs unfused)."""
    quant = {r: sorted(n.split(".", 1)[1] for n in _fp8_ops(r, "b200-sxm-180gb")
                       if n.startswith("l0.") and n.endswith(".fp8quant"))
             for r in ("delayed", "tensorwise", "blockwise", "mxfp8")}
    assert quant["delayed"] == []
    assert quant["tensorwise"] == quant["blockwise"] == [
        "attn.norm.fp8quant", "mlp.act.bwd.fp8quant", "mlp.act.fp8quant", "mlp.norm.fp8quant"]
    assert quant["mxfp8"] == ["attn.norm.fp8quant", "mlp.norm.fp8quant"]
    delayed, current = _fp8_ops("delayed"), _fp8_ops("tensorwise")
    cast = "l0.attn.proj.fp8cast"
    # the amax pass reads the 16-bit input once more: 6 bytes an element against 4
    launch = 5e-6
    assert (current[cast].compute_s - launch) == pytest.approx(
        1.5 * (delayed[cast].compute_s - launch), rel=1e-9)
    # tensor-wise scaling runs the same per-tensor GEMMs as delayed scaling
    assert current["l0.attn.qkv"].compute_s == delayed["l0.attn.qkv"].compute_s
    assert sum(o.compute_s for o in current.values()) > sum(o.compute_s
                                                            for o in delayed.values())


def test_block_scaled_gemms_run_slower_than_per_tensor_ones():
    delayed, block = _fp8_ops("delayed"), _fp8_ops("blockwise")
    for name in ("l0.attn.qkv", "l0.mlp.fc2.dgrad", "l0.attn.proj.wgrad"):
        ratio = block[name].compute_s / delayed[name].compute_s
        assert ratio == pytest.approx((22.882 - (18.978 - 16.785)) / 16.785, rel=1e-12)
    # the output layer stays bf16 whatever the recipe
    assert block["head.logits"].compute_s == delayed["head.logits"].compute_s
    b200 = {r: _fp8_ops(r, "b200-sxm-180gb") for r in ("delayed", "mxfp8", "blockwise")}
    for recipe in ("mxfp8", "blockwise"):      # Blackwell runs block scaling on MXFP8 kernels
        assert (b200[recipe]["l0.attn.qkv"].compute_s / b200["delayed"]["l0.attn.qkv"].compute_s
                == pytest.approx(7.161 / 6.812, rel=1e-12))


def test_transformer_engines_gemm_guide_ordering_on_its_own_model():
    """Transformer Engine's GEMM profiling guide (H200 NVL, 5B config: h 4096, ffn 16384,
    31 x 512 tokens, autocast) measures fp8 GEMM speedups over bf16 of 1.69x (delayed), 1.58x
    (current scaling) and 1.40x (block scaling). The layer's GEMMs plus the quantization the
    recipe adds give the same order; block scaling's factor was derived from that table."""
    model = TransformerConfig(name="te-5b", layers=2, hidden=4096, heads=32, ffn_hidden=16384,
                              vocab=32000, seq_len=512, ffn_kind="gelu", tied_embeddings=False,
                              positions="rope", norm="layernorm", bias=False)

    def gemm_and_quant(precision, recipe="delayed"):
        layout = Layout(micro_batch=31, global_batch=31, precision=precision, fp8_recipe=recipe)
        chunk = step_work(model, layout, "h200-sxm-141gb").chunks[(0, 0)]
        return sum(o.compute_s for o in chunk.forward + chunk.backward
                   if o.name.startswith("l1.") and (o.kind == "gemm" or "fp8" in o.name))

    bf16 = gemm_and_quant("bf16")
    speedup = {r: bf16 / gemm_and_quant("fp8", r) for r in ("delayed", "tensorwise", "blockwise")}
    assert speedup["delayed"] > speedup["tensorwise"] > speedup["blockwise"] > 1.3
    assert speedup["blockwise"] == pytest.approx(1.40, rel=0.03)


def test_fp8_recipes_are_refused_where_they_cannot_run():
    with pytest.raises(ConfigError, match="applies to precision fp8, not bf16"):
        check_layout(LLAMA, Layout(fp8_recipe="tensorwise"))
    with pytest.raises(ConfigError, match="expected one of delayed, tensorwise, blockwise, "
                                          "mxfp8"):
        check_layout(LLAMA, Layout(precision="fp8", fp8_recipe="hybrid"))
    with pytest.raises(ConfigError, match="mxfp8 runs on Blackwell GPUs only.*is hopper"):
        step_work(LLAMA, Layout(precision="fp8", fp8_recipe="mxfp8"), "h100-sxm5-80gb")
    assert step_work(LLAMA, Layout(precision="fp8", fp8_recipe="mxfp8"), "b200-sxm-180gb")


def test_a_shared_expert_quantizes_its_own_input():
    """An MoE layer's norm is its own module (the router and the dispatch read 16 bits), so
    its shared expert's Linear quantizes its input; a dense layer's norm feeds fc1 directly."""
    deepseek = get_llm_model("deepseekmoe-16b")          # layer 0 dense, then MoE layers
    for recipe in ("delayed", "tensorwise"):
        layout = Layout(precision="fp8", ep=8, dp=8, global_batch=8, fp8_recipe=recipe)
        names = {o.name for o in
                 step_work(deepseek, layout, "h100-sxm5-80gb").chunks[(0, 0)].forward}
        assert "l1.moe.shared.fc1.fp8cast" in names and "l0.moe.shared.fc1.fp8cast" not in names
        assert "l1.mlp.norm.fp8quant" not in names
        assert ("l0.mlp.norm.fp8quant" in names) == (recipe == "tensorwise")


# ------------------------------------------------------------------ grouped expert GEMMs
def _expert_ops(ep: int, precision: str = "bf16"):
    model = get_llm_model("qwen3-30b-a3b")                  # 128 experts, top-8
    lay = Layout(ep=ep, dp=ep, global_batch=ep, precision=precision)
    chunk = step_work(model, lay, "b200-sxm-180gb").chunks[(0, 0)]
    return model, {o.name: o for o in chunk.forward + chunk.backward}


def test_expert_gemms_run_one_gemm_per_local_expert_on_four_streams():
    """Transformer Engine's GroupedLinear runs one cuBLAS GEMM per local expert, round-robin
    on 4 streams: the forward fc1 of 16 experts of Qwen3-30B-A3B (ep 8) is 4 rounds of 4
    concurrent GEMMs, each round the tiles of a GEMM 4 experts tall, plus a launch for each
    of the other 12 GEMMs; its weight gradient reduces each expert's own rows."""
    from simulator.workload.llm.compute import elementwise
    from simulator.workload.llm.costs import GROUPED_GEMM_STREAMS

    assert GROUPED_GEMM_STREAMS == 4
    model, ops = _expert_ops(8)
    dev = "b200-sxm-180gb"
    rows = model.seq_len * model.moe.top_k                  # the rank's routed copies
    h, f1 = model.hidden, model.fc1_width(model.moe.expert_ffn_hidden)
    local = model.moe.experts // 8
    per = rows // local
    launch = kernel_time(dev, elementwise("launch", 0))
    want = 4 * kernel_time(dev, gemm(4 * per, f1, h)) + (local - 4) * launch
    assert ops["l0.moe.experts.fc1"].compute_s == pytest.approx(want, rel=1e-12)
    wgrad = 4 * kernel_time(dev, gemm(h * 4, f1, per)) + (local - 4) * launch
    assert ops["l0.moe.experts.fc1.wgrad"].compute_s == pytest.approx(wgrad, rel=1e-12)
    # the work is the whole layer's, however it is cut
    assert ops["l0.moe.experts.fc1"].flops == pytest.approx(2.0 * rows * h * f1)
    # one big GEMM of every row would be faster: 12 launches fewer
    assert ops["l0.moe.experts.fc1"].compute_s > kernel_time(dev, gemm(rows, f1, h))


def test_one_expert_per_rank_is_one_gemm():
    """With as many ranks as experts (ep 128) each rank holds one expert: its GEMMs are single
    GEMMs of all its rows, as before grouping."""
    model, ops = _expert_ops(128)
    rows = model.seq_len * model.moe.top_k
    h, f1 = model.hidden, model.fc1_width(model.moe.expert_ffn_hidden)
    assert ops["l0.moe.experts.fc1"].compute_s == pytest.approx(
        kernel_time("b200-sxm-180gb", gemm(rows, f1, h)), rel=1e-12)


def test_more_experts_per_rank_cost_more_launches():
    """The same rows cut among more local experts cost more: ep 4 (32 experts a rank) takes
    longer per routed row than ep 8 (16), and the gap is at least the 16 extra launches less
    what the pooled rounds save."""
    model, ops8 = _expert_ops(8)
    _, ops4 = _expert_ops(4)
    # per-rank rows are the same (tokens x top_k); only the cut differs
    assert ops4["l0.moe.experts.fc2"].flops == pytest.approx(ops8["l0.moe.experts.fc2"].flops)
    assert ops4["l0.moe.experts.fc2"].compute_s > ops8["l0.moe.experts.fc2"].compute_s


def test_a_measured_table_times_the_expert_gemms_and_the_device_times_their_launches():
    """With a measured kernel table, each round of expert GEMMs takes the table's time and the
    further launches take the device's launch cost: the table is never asked for a kernel
    that moves nothing, so a table of the kernels a step asks for covers an MoE layer."""
    import functools

    from simulator.workload.llm.compute import elementwise, kernels_of

    model = get_llm_model("qwen3-30b-a3b")
    lay = Layout(ep=8, dp=8, global_batch=8)
    asked = kernels_of(functools.partial(step_work, model, lay, "b200-sxm-180gb"))
    assert not any(k.shape.startswith("launch") for k in asked)
    table = KernelTable({(k.op, k.shape): 1e-3 for k in asked})
    chunk = step_work(model, lay, "b200-sxm-180gb", kernels=table).chunks[(0, 0)]
    ops = {o.name: o for o in chunk.forward}
    launch = kernel_time("b200-sxm-180gb", elementwise("launch", 0))
    # 16 experts a rank: 4 rounds from the table, 12 more launches
    assert ops["l0.moe.experts.fc1"].compute_s == pytest.approx(4 * 1e-3 + 12 * launch)
