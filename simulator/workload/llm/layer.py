"""One transformer layer, or one block of it, timed on its own: what a layer benchmark measures.

Frameworks time their layers in isolation to catch kernel regressions: Megatron-LM's MoE
performance test (``tests/functional_tests/test_cases/common/moe_perf``) builds one ``MoELayer``
on eight GPUs, records CUDA events around ``layer(x)`` and around ``output.backward(grad)``, and
keeps the mean of twenty iterations. Such a number checks the per-layer costs of
:mod:`.costs` directly, with no pipeline, data parallelism or optimizer around them.

:func:`simulate_layer` answers the same question. It takes the ops :func:`.costs.step_work`
builds for a rank of the layout, keeps those of one layer and one ``part`` of it, and runs them
as a step of their own on the engine (:func:`.step.simulate_step`): the forward ops alone, then
the backward ops alone, each starting from an idle machine. The compute ops run back to back
on the rank's stream; every collective among them (tensor-parallel gathers, expert
all-to-alls) runs on the topology's links between the ranks of its group, as in a whole step.

Parts (by the names :mod:`.costs` gives its ops, ``l<i>.<block>.<op>``):

* ``layer``: everything of layer ``i``: norms, attention, MLP or MoE block, residuals;
* ``attention``: the attention block with its pre-norm and residual (``l<i>.attn.*``);
* ``mlp``: the MLP block as its module runs it, without the pre-MLP norm and the residual
  that the transformer layer applies around it (``l<i>.mlp.*`` but ``norm`` and ``residual``,
  and ``l<i>.moe.*``): for a mixture of experts, Megatron-Core's ``MoELayer``: router, token
  permutation, dispatch, experts, combine, shared experts.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from simulator.errors import ConfigError

from .costs import step_work
from .layout import Layout
from .work import Op, StepWork

__all__ = ["LAYER_PARTS", "LayerTime", "layer_ops", "simulate_layer"]

#: What of a layer can be timed (see the module docstring).
LAYER_PARTS = ("layer", "attention", "mlp")

#: Ops of a layer's MLP block that the transformer layer, not the MLP module, runs.
_AROUND_MLP = ("norm", "residual")


@dataclass(frozen=True)
class LayerTime:
    """One layer (or block) of one rank: ``forward_s`` and ``backward_s`` from an idle machine
    to the last op's end; ``*_compute_s`` the compute ops' seconds (the rest of each pass is
    communication the compute waited for); ``forward`` and ``backward`` the ops timed."""

    forward_s: float
    backward_s: float
    forward_compute_s: float
    backward_compute_s: float
    forward: tuple
    backward: tuple

    @property
    def forward_comm_s(self) -> float:
        return self.forward_s - self.forward_compute_s

    @property
    def backward_comm_s(self) -> float:
        return self.backward_s - self.backward_compute_s


def _in_part(name: str, layer: int, part: str) -> bool:
    prefix = f"l{layer}."
    if not name.startswith(prefix):
        return False
    block, _, rest = name[len(prefix):].partition(".")
    if part == "layer":
        return True
    if part == "attention":
        return block == "attn"
    return block == "moe" or (block == "mlp" and rest.split(".")[0] not in _AROUND_MLP)


def layer_ops(work: StepWork, layer: int, part: str = "layer") -> tuple[tuple, tuple]:
    """``(forward ops, backward ops)`` of layer ``layer``'s ``part`` in ``work``'s chunk that
    holds it, in issue order. Refuses an unknown part, a layer no chunk holds, and a part the
    layer does not have (an MLP part of a layer whose ops have no MLP)."""
    if part not in LAYER_PARTS:
        raise ConfigError(f"layer part {part!r}: expected one of {', '.join(LAYER_PARTS)}")
    for chunk in work.chunks.values():
        fwd = tuple(op for op in chunk.forward if _in_part(op.name, layer, part))
        bwd = tuple(op for op in chunk.backward if _in_part(op.name, layer, part))
        if fwd or bwd:
            return fwd, bwd
    raise ConfigError(f"layer {layer} has no {part} ops in this step")


def _alone(work: StepWork, forward: tuple, backward: tuple) -> StepWork:
    """``work`` (one stage, one chunk) reduced to ``forward`` and ``backward``: one
    micro-batch, nothing sent to another stage, no gradient reduction, no optimizer."""
    chunk = dataclasses.replace(work.chunks[(0, 0)], forward=forward, backward=backward,
                                activation_bytes=0, grad_bytes=0)
    return dataclasses.replace(work, chunks={(0, 0): chunk}, micro_batches=1, optimizer_s=0.0)


def simulate_layer(graph, model, layout: Layout, *, layer: int = 0, part: str = "layer",
                   device=None, library: str = "default") -> LayerTime:
    """Time layer ``layer``'s ``part`` (:data:`LAYER_PARTS`) of ``model`` cut by ``layout``
    on ``graph``: its forward and its backward, each on its own (see the module docstring).
    ``layout.pp`` must be 1: a layer runs on one pipeline stage, and the layout's ranks are
    the GPUs the layer's groups span."""
    from .step import _gpu_device, _resolve_model, expert_machines, simulate_step

    if layout.pp != 1:
        raise ConfigError(f"a layer is timed on one pipeline stage: pp must be 1, not "
                          f"{layout.pp}")
    config = _resolve_model(model)
    if not 0 <= layer < config.layers:
        raise ConfigError(f"layer {layer}: the model has layers 0 to {config.layers - 1}")
    dev = _gpu_device(graph, device)
    work = step_work(config, layout, dev, ep_machines=expert_machines(graph, layout))
    forward, backward = layer_ops(work, layer, part)
    times = []
    for alone in (_alone(work, forward, ()), _alone(work, (), backward)):
        if not alone.chunks[(0, 0)].forward and not alone.chunks[(0, 0)].backward:
            times.append(0.0)
            continue
        result = simulate_step(graph, config, layout, work=alone, device=dev, library=library,
                               check_fit=False, extrapolate=False)
        times.append(float(result.row["step_time_s"]))
    return LayerTime(forward_s=times[0], backward_s=times[1],
                     forward_compute_s=_compute(forward), backward_compute_s=_compute(backward),
                     forward=forward, backward=backward)


def _compute(ops: tuple[Op, ...]) -> float:
    return sum(op.compute_s for op in ops)
