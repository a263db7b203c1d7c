"""Time to train: simulated iteration times turned into wall-clock time to a target accuracy.

More GPUs at a fixed per-GPU batch mean a larger global batch ``B = batch_per_gpu x GPUs``, and
hence fewer optimizer steps, but only up to a point: past a *critical batch* a step's larger
sample stops buying proportionally more progress. Time to train is

    time_to_train_s = steps(B) x iteration_s(GPUs)

and the GPU count that minimises it is where adding GPUs stops helping: the communication that
grows with the GPU count (iteration time) meets the steps that no longer shrink.

Steps as a function of the global batch
---------------------------------------
McCandlish, Kaplan, Amodei et al. 2018, "An Empirical Model of Large-Batch Training"
(arXiv:1812.06162), Section 2: to reach a given loss,

    steps(B)    = S_min (1 + B_noise / B)
    examples(B) = E_min (1 + B / B_noise),    E_min = S_min x B_noise

(``form="mccandlish"``). For ``B << B_noise`` steps fall as ``E_min / B`` (perfect scaling: a
fixed number of epochs); for ``B >> B_noise`` they level off at ``S_min``. The critical batch
``B_crit ≈ B_noise`` is where the two asymptotes meet. ``form="piecewise"`` (the default) *is*
those two asymptotes: ``steps = E_min / B`` up to ``B_crit``, ``E_min / B_crit`` beyond.

Turning the published limits into parameters
--------------------------------------------
Each entry of :data:`CONVERGENCE` comes from a paper that trained to the reference accuracy with
the *same number of epochs* at every batch up to a largest batch ``B_max``, and reported the loss
of accuracy (or nothing) beyond. Both published facts map directly onto the piecewise form:
``E_min`` = the paper's epoch budget x the dataset (examples to target at any batch up to
``B_max``) and ``B_crit = B_max``. The McCandlish form with ``B_noise = B_max`` and the same
``E_min`` shares its asymptotes and is more pessimistic near the knee (twice the examples at
``B = B_crit``); the truth for these recipes lies between (the papers saw no extra epochs up to
``B_max``, and a loss of accuracy at the same epochs beyond, which neither form models).

* ``sgd``: ResNet-50 on ImageNet-1k with momentum SGD, linear learning-rate scaling and warm-up
  (Goyal et al. 2017, "Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour",
  arXiv:1706.02677): 90 epochs reach the batch-256 accuracy up to 8,192 images per batch; error
  rises beyond. ``E_min = 90 x 1,281,167``, ``B_crit = 8,192``.
* ``lars``: ResNet-50 with LARS (You, Gitman and Ginsburg 2017, "Large Batch Training of
  Convolutional Networks", arXiv:1708.03888; You et al. 2018, "ImageNet Training in Minutes",
  ICPP, arXiv:1709.05011): 90 epochs at a batch of 32K. ``E_min = 90 x 1,281,167``,
  ``B_crit = 32,768``.
* ``lamb``: BERT-large pre-training with LAMB (You et al. 2020, "Large Batch Optimization for
  Deep Learning: Training BERT in 76 minutes", ICLR, arXiv:1904.00962, Table 1): the baseline
  512 x 1,000k steps; LAMB keeps the same 512M sequences at every batch up to 32K (32K x 15.6k
  steps; the 64K/32K mixed-batch run needs 8,599 steps, 10 % more than 512M / 64K).
  ``E_min = 512 x 10^6`` sequences, ``B_crit = 32,768``.

Input and output
----------------
:func:`time_to_train` takes training result rows (a DataFrame with ``gpus``, ``iteration_s`` and
``batch_per_gpu`` or ``global_batch``, as :func:`simulator.workload.sweep.run_training` returns)
and adds ``global_batch, steps, examples, epochs, time_to_train_s, convergence, form``.
:func:`best_gpu_count` picks the row with the shortest time per group.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ..errors import ConfigError, unknown_name

__all__ = ["CONVERGENCE", "FORMS", "IMAGENET_TRAIN_IMAGES", "ConvergenceModel",
           "best_gpu_count", "examples_to_target", "get_convergence", "steps_to_target",
           "time_to_train"]

#: ImageNet-1k (ILSVRC 2012) training images (Russakovsky et al. 2015, IJCV).
IMAGENET_TRAIN_IMAGES = 1_281_167

FORMS = ("piecewise", "mccandlish")


@dataclass(frozen=True)
class ConvergenceModel:
    """How many steps a recipe needs to reach its target at a given global batch.

    Attributes
    ----------
    name : str
        Registry key (the optimizer).
    model : str
        The network and task the recipe trains.
    examples_min : float
        ``E_min``: samples to target at any batch up to the critical batch.
    critical_batch : int
        ``B_crit`` (= ``B_noise`` in the McCandlish form).
    dataset_examples : int
        Samples in one epoch (for the ``epochs`` column).
    target : str
        The accuracy the recipe reaches.
    source : str
        The paper, and how its numbers became ``examples_min`` and ``critical_batch``.
    """

    name: str
    model: str
    examples_min: float
    critical_batch: int
    dataset_examples: int
    target: str
    source: str

    def __post_init__(self):
        if not (self.examples_min > 0 and self.critical_batch > 0 and self.dataset_examples > 0):
            raise ConfigError(f"convergence model {self.name!r}: examples_min, critical_batch "
                              f"and dataset_examples must be positive")

    @property
    def steps_min(self) -> float:
        """``S_min = E_min / B_crit``: steps at an unbounded batch."""
        return self.examples_min / self.critical_batch


CONVERGENCE: dict[str, ConvergenceModel] = {
    "sgd": ConvergenceModel(
        "sgd", "resnet50", 90 * IMAGENET_TRAIN_IMAGES, 8192, IMAGENET_TRAIN_IMAGES,
        "76.3% top-1 on ImageNet (the batch-256 reference)",
        "Goyal et al. 2017, arXiv:1706.02677: momentum SGD with the linear scaling rule and "
        "gradual warm-up matches the batch-256 accuracy in 90 epochs up to batch 8,192 and loses "
        "accuracy beyond; E_min = 90 epochs, B_crit = 8,192"),
    "lars": ConvergenceModel(
        "lars", "resnet50", 90 * IMAGENET_TRAIN_IMAGES, 32768, IMAGENET_TRAIN_IMAGES,
        "ResNet-50 reference top-1 on ImageNet in 90 epochs",
        "You, Gitman and Ginsburg 2017, arXiv:1708.03888 (LARS); You et al. 2018, ICPP, "
        "arXiv:1709.05011: ResNet-50 in 90 epochs at batch 32K; E_min = 90 epochs, "
        "B_crit = 32,768"),
    "lamb": ConvergenceModel(
        "lamb", "bert_large", 512 * 1_000_000, 32768, 512 * 1_000_000,
        "SQuAD v1.1 F1 of the BERT-large baseline (90.4)",
        "You et al. 2020, ICLR, arXiv:1904.00962, Table 1: batch 512 x 1,000k steps (baseline) "
        "down to 32K x 15.6k steps at the same F1, i.e. the same 512M sequences; E_min = 512M "
        "sequences, B_crit = 32,768 (the 64K/32K run already needs 10% more steps than perfect "
        "scaling). One 'epoch' here is the baseline's 512M sequences"),
}


def get_convergence(name) -> ConvergenceModel:
    """A registered :class:`ConvergenceModel` (or pass one through)."""
    if isinstance(name, ConvergenceModel):
        return name
    if not isinstance(name, str) or name not in CONVERGENCE:
        raise unknown_name("convergence model (optimizer)", name, CONVERGENCE)
    return CONVERGENCE[name]


def _check_form(form: str) -> str:
    if form not in FORMS:
        raise ConfigError(f"unknown form {form!r}; valid: {', '.join(FORMS)}")
    return form


def steps_to_target(global_batch: float, model, form: str = "piecewise") -> float:
    """Optimizer steps to the target at ``global_batch`` (see the module notes)."""
    model, form = get_convergence(model), _check_form(form)
    if not global_batch > 0:
        raise ConfigError(f"global batch must be positive, not {global_batch!r}")
    if form == "piecewise":
        return model.examples_min / min(global_batch, model.critical_batch)
    return model.steps_min * (1 + model.critical_batch / global_batch)


def examples_to_target(global_batch: float, model, form: str = "piecewise") -> float:
    """Samples processed to reach the target: ``steps x global_batch``."""
    return steps_to_target(global_batch, model, form) * global_batch


def time_to_train(results: pd.DataFrame, model, form: str = "piecewise") -> pd.DataFrame:
    """Add time-to-train columns to training result rows.

    Parameters
    ----------
    results : pandas.DataFrame
        Rows with ``gpus``, ``iteration_s`` and ``global_batch`` or ``batch_per_gpu`` (then
        ``global_batch = batch_per_gpu x accumulation x gpus``, ``accumulation`` 1 where the
        rows have no such column).
    model : str or ConvergenceModel
        The convergence model (registry key: the optimizer).
    form : {"piecewise", "mccandlish"}

    Returns
    -------
    pandas.DataFrame
        A copy with ``global_batch, steps, examples, epochs, time_to_train_s, convergence,
        form`` added (steps may be fractional: they are an expectation).
    """
    conv, form = get_convergence(model), _check_form(form)
    missing = [c for c in ("gpus", "iteration_s") if c not in results.columns]
    if "global_batch" not in results.columns and "batch_per_gpu" not in results.columns:
        missing.append("batch_per_gpu or global_batch")
    if missing:
        raise ConfigError(f"training results lack column(s) {', '.join(missing)}")
    out = results.copy()
    if "global_batch" not in out.columns:
        micro = out["accumulation"].fillna(1) if "accumulation" in out.columns else 1
        out["global_batch"] = out["batch_per_gpu"] * micro * out["gpus"]
    out["steps"] = [steps_to_target(b, conv, form) for b in out["global_batch"]]
    out["examples"] = out["steps"] * out["global_batch"]
    out["epochs"] = out["examples"] / conv.dataset_examples
    out["time_to_train_s"] = out["steps"] * out["iteration_s"]
    out["convergence"] = conv.name
    out["form"] = form
    return out


def best_gpu_count(frame: pd.DataFrame, by=None) -> pd.DataFrame:
    """The row with the shortest ``time_to_train_s`` (per group of ``by`` columns): the GPU
    count beyond which adding GPUs no longer shortens training. Ties go to fewer GPUs."""
    if "time_to_train_s" not in frame.columns:
        raise ConfigError("best_gpu_count needs time_to_train_s (run time_to_train first)")
    ordered = frame.sort_values(list(by or []) + ["time_to_train_s", "gpus"], kind="stable")
    if by:
        return ordered.groupby(list(by), sort=True).head(1).reset_index(drop=True)
    return ordered.head(1).reset_index(drop=True)


# --------------------------------------------------------------------------------------------
# A scenario's study: simulated iterations at every GPU count, then time to train
# --------------------------------------------------------------------------------------------

def _time_to_train_columns() -> tuple[str, ...]:
    from .sweep import EXTRA_COLUMNS
    from .training import TRAINING_COLUMNS

    return TRAINING_COLUMNS + EXTRA_COLUMNS + (
        "global_batch", "steps", "examples", "epochs", "time_to_train_s", "convergence", "form",
        "joules_to_train", "fastest", "speedup_vs_fewest_gpus")


#: Columns of a study row: the training row, time to train, energy to train, the minimum.
TIME_TO_TRAIN_COLUMNS = _time_to_train_columns()


@dataclass(frozen=True)
class TimeToTrainStudy:
    """One model at a fixed per-GPU batch over ``gpus``, judged by each optimizer's convergence
    model (every optimizer must model this network: its ``E_min`` is that network's)."""

    model: str
    batch_per_gpu: int
    gpus: tuple[int, ...]
    optimizers: tuple[str, ...]


@dataclass(frozen=True)
class TimeToTrainSpec:
    """What the ``time_to_train:`` section of a scenario asks for."""

    studies: tuple[TimeToTrainStudy, ...]
    forms: tuple[str, ...] = FORMS
    aggregation: str = "hierarchical"
    precision: str = "fp16"
    device: str | None = None            # default: the topology's GPU preset
    bucket_bytes: int = 25 * 2**20

    def points(self) -> list[tuple[str, int]]:
        """``(model, gpus)``: the simulated training points (each yields a row per optimizer
        and form)."""
        return [(s.model, n) for s in self.studies for n in s.gpus]


def mark_fastest(frame: pd.DataFrame, by=("model", "convergence", "form")) -> pd.DataFrame:
    """Add ``fastest``: True on the row of each group with the shortest time to train (the GPU
    count beyond which adding GPUs no longer helps), and ``speedup_vs_fewest_gpus``."""
    out = frame.copy()
    best = best_gpu_count(out, by=list(by))
    keys = set(map(tuple, best[list(by) + ["gpus"]].itertuples(index=False)))
    out["fastest"] = [k in keys for k in map(tuple, out[list(by) + ["gpus"]]
                                              .itertuples(index=False))]
    first = out.groupby(list(by))["time_to_train_s"].transform("first")
    out["speedup_vs_fewest_gpus"] = first / out["time_to_train_s"]
    return out


def run_time_to_train(graph, spec: TimeToTrainSpec, progress=None) -> pd.DataFrame:
    """Simulate every study's training points, then add time to train per optimizer and form
    (:func:`time_to_train`), the energy to train (``joules_to_train`` = joules per iteration x
    steps) and :func:`mark_fastest`."""
    from .sweep import TrainingSpec, run_training

    frames = []
    for study in spec.studies:
        training = TrainingSpec(models=(study.model,), batch_per_gpu=study.batch_per_gpu,
                                gpus=tuple(sorted(study.gpus)), aggregations=(spec.aggregation,),
                                precision=spec.precision, device=spec.device,
                                bucket_bytes=spec.bucket_bytes)
        results = run_training(graph, training, progress)
        for optimizer in study.optimizers:
            for form in spec.forms:
                frames.append(time_to_train(results, optimizer, form))
    frame = pd.concat(frames, ignore_index=True)
    frame["joules_to_train"] = frame["joules_per_iteration"] * frame["steps"]
    return mark_fastest(frame)
