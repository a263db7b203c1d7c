"""Simulated against measured data-parallel training: throughput and speedup, point by point.

The input is a training file (:func:`simulator.measure.schema.read_training`: our layout, or the
public ``train_*.csv`` layout with ``model, framework, arch, gpus, throughput_img_s, speedup``).
Every measured point is simulated on one topology with :func:`~simulator.workload.sweep.
run_training_point`, nothing tuned per point:

* **model** from the file's name (:data:`MODEL_ALIASES`: ``ResNet-50 v1.5`` -> ``resnet50``);
* **aggregation** from ``arch``: ``ps`` -> parameter servers (one per machine, on the machines'
  CPUs, as TensorFlow's benchmarks ran them; ``distributed_replicated`` in the framework text
  reduces inside each machine first), ``allreduce`` -> the collective library's choice
  (``auto`` under ``nccl``, ``ring`` on bare wires), ``replicated`` (TensorFlow's replicated
  variables without NCCL: peer copies) -> ``direct`` on bare wires;
* **framework** from the ``framework`` text (:func:`~simulator.workload.frameworks.
  detect_framework`): bucket policy, Horovod's fusion cycle, launch mode;
* **compute**, ``anchor="measured"`` (the default): the point's own single-GPU throughput
  (``throughput / speedup``, the file's definition of speedup) fixes one iteration: compute
  is what is left of it after what the simulator says the aggregation costs on one GPU (a
  one-GPU parameter server still pushes and pulls), and the model only splits it over layers. This is the input a user has (one GPU, measured),
  and it leaves the simulator to answer what it is for: what communication costs at scale.
  ``anchor="model"``: the roofline compute model alone.

Simulated speedup is simulated throughput at N GPUs over simulated throughput at one GPU with
the same aggregation (a one-GPU parameter server still copies to the CPU and back), so both
speedups have the same definition. Errors are (simulated - measured) / measured; > 0 means the
simulator is optimistic.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Callable

import pandas as pd

from ..errors import ClusterSimError, ConfigError
from .collective import release_text

#: Model names of measurement files (lower case, without spaces, dashes, dots and brackets)
#: -> model registry names. A name not here that is a registry name is taken as it is.
MODEL_ALIASES = {
    "inceptionv3": "inception_v3", "resnet50": "resnet50", "resnet50v15": "resnet50",
    "resnet50v1": "resnet50", "resnet50v1bgluoncv": "resnet50", "resnet50v1b": "resnet50",
    "resnet101": "resnet101", "resnet152": "resnet152", "alexnet": "alexnet",
    "vgg16": "vgg16", "bertbase": "bert_base", "bertbasepretraining": "bert_base",
    "bertlarge": "bert_large", "bertlargepretraining": "bert_large",
    "gpt2small": "gpt2_small", "gpt2xl": "gpt2_xl",
}

#: Precision words of papers and vendor tables (lower case) -> what they say. A precision is
#: read from every word of the cell: ``mixed precision``, ``AMP``, ``FP16 (mixed)``, ``TF32``,
#: ``mixed_bfloat16`` ...; see :func:`precision_name`.
PRECISION_WORDS = {
    "fp32": "fp32", "float32": "fp32", "tf32": "fp32",
    "fp16": "fp16", "float16": "fp16",
    "bf16": "bf16", "bfloat16": "bf16",
    "amp": "mixed", "mixed": "mixed", "mixed16": "mixed",
}
#: Two-word spellings, read as one word.
_PRECISION_PHRASES = ((re.compile(r"\bsingle[\s_-]*precision\b"), " fp32 "),
                      (re.compile(r"\bhalf[\s_-]*precision\b"), " fp16 "),
                      (re.compile(r"\bdouble[\s_-]*precision\b"), " fp64 "))
#: Formats the simulator does not model: a cell naming one is refused, not read as another.
UNMODELLED_PRECISIONS = ("fp8", "int8", "int4", "fp4", "fp6", "e4m3", "e5m2", "fp64")
#: Words around a precision that say nothing about it.
_PRECISION_FILLER = ("precision", "mode", "math", "training", "with", "and", "compute",
                     "weights", "master", "tensor", "core", "cores", "automatic", "on", "in")
#: The accepted spellings, for messages.
PRECISION_NAMES = ("fp32", "tf32", "fp16", "bf16", "amp", "mixed", "mixed precision",
                   "FP16 (mixed)", "mixed16")

ANCHORS = ("measured", "model")

POINT_COLUMNS = (
    "source", "model", "framework", "arch", "aggregation", "gpus", "batch_per_gpu",
    "precision", "measured_img_s", "simulated_img_s", "throughput_error_pct",
    "measured_speedup", "simulated_speedup", "speedup_error_pct", "abs_speedup_error_pct",
    "exposed_comm_s", "iteration_s", "framework_model", "gradient_dtype", "library",
    "library_version",
    "anchor", "topology", "line")

#: An NCCL version a row's text states: ``NCCL 1.3``, ``NCCL 2.4.8``, ``nccl-2.18`` (major and
#: minor at least; a bare ``NCCL 2`` names no constants table and is left to the default).
_STATED_NCCL = re.compile(r"\bnccl[\s_-]*v?(\d+\.\d+(?:\.\d+)?)\b", re.IGNORECASE)
_YEAR = re.compile(r"\b(20[0-4]\d)\b")
_USES_NCCL = re.compile(r"(?<!without )(?<!no )\bnccl\b", re.IGNORECASE)

#: The NCCL that TensorFlow's own NCCL ops (``tf.contrib.nccl``: tf_cnn_benchmarks'
#: ``replicated`` mode with NCCL) linked in 2017: TensorFlow built NCCL from the archive its
#: ``tensorflow/workspace.bzl`` pinned, ``nvidia/nccl`` @024d1e2 (2017-02-08, its Makefile
#: NCCL 1.3.2) and from August 2017 @03d8569 (NCCL 1.3.5); its ``configure`` still offered
#: "default to NCCL 1.3" in 2018 (TensorFlow 1.7 and later prompts). NCCL 2 came to
#: TensorFlow's own ops later; Horovod brought its own NCCL 2.
TENSORFLOW_2017_NCCL = "1.3"


def stated_nccl_version(text: str, notes: str = "") -> str | None:
    """The NCCL version a training row ran, as far as its texts say, or None.

    * a version the framework text states (``"1.3"`` of ``... NCCL 1.3 ...``);
    * TensorFlow's own NCCL ops in a row of 2017 or earlier (the framework text names
      TensorFlow and NCCL but not Horovod, and every year its texts mention is 2017 or
      earlier): :data:`TENSORFLOW_2017_NCCL`.

    A measured row that says which NCCL it ran is simulated with that version's constants, as
    an nccl-tests log's header is (``compare`` on collective files), unless ``--nccl-version``
    names one for every row."""
    match = _STATED_NCCL.search(str(text or ""))
    if match:
        return match.group(1)
    lowered = str(text or "").lower()
    if "tensorflow" in lowered and _USES_NCCL.search(lowered) and "horovod" not in lowered:
        years = [int(y) for y in _YEAR.findall(f"{text} {notes}")]
        if years and max(years) <= 2017:
            return TENSORFLOW_2017_NCCL
    return None


_SEQ_LEN = re.compile(r"\b(?:seq(?:uence)?[\s_-]*(?:len(?:gth)?)?(?:\s+of)?|sl)\s*[=:]?\s*"
                      r"(\d+)\b", re.IGNORECASE)


def _words(text: str) -> list[str]:
    """The words of a cell: split at spaces, dashes, underscores, slashes, brackets and
    punctuation; dots stay inside a word (``v1.5``)."""
    return [w for w in re.split(r"[\s\-_/,;:()\[\]{}+&|]+", str(text).strip().lower()) if w]


def model_name(text: str, where: str = "") -> str:
    """The registry name of a measurement file's model name.

    The longest run of leading words that is a known name (:data:`MODEL_ALIASES` or a
    registry name, compared without spaces, dashes, dots and brackets) names the model; the
    words after it (``pretraining (LAMB)``, ``fine-tuning``) are descriptions. A sequence
    length (``seq len 128``, ``sequence length 128``, ``seq_len=128``) gives ``NAME:seqN``
    (:func:`~simulator.workload.models.get_model`): ``BERT-large pretraining (LAMB), seq len
    128`` is ``bert_large:seq128``."""
    from ..workload.models import MODELS, get_model

    names = dict(MODEL_ALIASES)
    names.update({re.sub(r"[^a-z0-9]", "", m.lower()): m for m in MODELS})
    cell = str(text)
    seq = _SEQ_LEN.search(cell)
    rest = _SEQ_LEN.sub(" ", cell) if seq else cell
    words = _words(rest)
    keys = [re.sub(r"[^a-z0-9]", "", w) for w in words]
    found = next((names["".join(keys[:stop])] for stop in range(len(words), 0, -1)
                  if "".join(keys[:stop]) in names), None)
    if found is None:
        # the first word that no known name goes on with
        known = 0
        while known < len(words) and any(n.startswith("".join(keys[:known + 1]))
                                         for n in names):
            known += 1
        word = repr(words[known]) if known < len(words) else f"{cell.strip()!r} (incomplete)"
        raise ConfigError(f"{where}model {cell!r}: {word} not understood; known: "
                          f"{', '.join(sorted(set(MODEL_ALIASES) | set(MODELS)))}")
    if seq is None:
        return found
    variant = f"{found}:seq{int(seq[1])}"
    try:
        get_model(variant)
    except ConfigError as exc:
        raise ConfigError(f"{where}model {cell!r}: {seq[0]!r} not understood: {exc}") from None
    return variant


def precision_name(text: str, where: str = "") -> str:
    """The simulator's precision (``fp32``, ``fp16``, ``amp``, ``bf16``) of a file's cell, as
    papers and vendor tables spell it, in any case and among other words: ``mixed
    precision``, ``AMP``, ``FP16 (mixed)`` and ``mixed16`` are ``amp``; ``TF32`` is ``fp32``
    (fp32 storage, tensor-core math); ``BF16`` (mixed or not) is ``bf16``. Mixed with fp32
    named too (``FP16 compute, FP32 master weights``) is ``amp``."""
    cell = str(text).lower()
    for phrase, word in _PRECISION_PHRASES:
        cell = phrase.sub(word, cell)
    words = [w for w in re.split(r"[^a-z0-9]+", cell) if w]
    said = {PRECISION_WORDS[w] for w in words if w in PRECISION_WORDS}
    for word in words:
        if word in UNMODELLED_PRECISIONS:
            raise ConfigError(f"{where}precision {text!r}: {word!r} is a format the simulator "
                              f"does not model; accepted: {', '.join(PRECISION_NAMES)}")
    if "bf16" in said:
        return "bf16"
    if "mixed" in said or {"fp16", "fp32"} <= said:
        return "amp"
    if "fp16" in said:
        return "fp16"
    if "fp32" in said:
        return "fp32"
    unknown = ", ".join(repr(w) for w in words if w not in _PRECISION_FILLER)
    raise ConfigError(f"{where}precision {text!r}: "
                      f"{unknown + ' not understood' if unknown else 'names no precision'}; "
                      f"accepted: {', '.join(PRECISION_NAMES)} (any case, among other words)")


def default_ps(record: dict, base=None, impl: str | None = None):
    """The parameter servers a ``ps`` point ran: TensorFlow's benchmarks put one on every
    worker machine's CPU (``local_parameter_device=cpu``); ``distributed_replicated``
    reduces inside each machine before pushing; a framework text naming a ``dedicated
    server`` (``clustersim measure training``) gets one server on its own host; the
    implementation (gRPC, ps-lite, BytePS) follows the framework text
    (:func:`~simulator.workload.ps_impls.detect_ps_impl`) unless ``impl`` names one.

    Variables are placed as tf_cnn_benchmarks placed them (:func:`tf_sharding`): greedy by
    bytes in its distributed ``parameter_server`` mode, round-robin otherwise."""
    from ..workload.ps_impls import detect_ps_impl
    from ..workload.training import PsConfig

    text = str(record.get("framework", ""))
    if base is None and "dedicated server" in text.lower():
        base = PsConfig(servers=1, placement="dedicated")
    base = base or PsConfig(servers="per_node", placement="colocated")
    local = "distributed_replicated" in text.lower()
    impl = impl or (base.impl if base.impl != "ideal" else detect_ps_impl(text).name)
    sharding = tf_sharding(text, impl) or base.sharding
    return dataclasses.replace(base, local_aggregation=base.local_aggregation or local,
                               impl=impl, sharding=sharding)


def tf_sharding(text: str, impl: str) -> str | None:
    """How TensorFlow's benchmarks spread variables over parameter-server tasks, for a row
    whose framework text (and detected implementation ``impl``) says TensorFlow; None for
    other frameworks.

    tensorflow/benchmarks ``tf_cnn_benchmarks/variable_mgr.py`` (as of 615c4ff, 2017-08-29,
    the code of the 2017 published runs): the distributed ``parameter_server`` mode
    (``VariableMgrDistributedFetchFromPS.get_devices``) passes
    ``GreedyLoadBalancingStrategy(len(ps_hosts), byte_size_load_fn)`` to
    ``replica_device_setter``: each variable goes to the task holding the fewest bytes so
    far (``greedy``). ``distributed_replicated`` creates its shadow variables under the
    default ``replica_device_setter``, which places them round-robin (``round_robin``)."""
    lowered = str(text or "").lower()
    if impl != "tf-grpc" and "tensorflow" not in lowered:
        return None
    return "round_robin" if "distributed_replicated" in lowered else "greedy"


def _on_host(text: str) -> bool:
    """Whether a row's framework text says its all-reduce ran on the host CPUs (Horovod's
    MPI path without ``HOROVOD_GPU_ALLREDUCE``: gradients copied to host memory, summed by
    MPI there and copied back), not on the GPUs."""
    return re.search(r"all-?reduce on (the )?(host )?cpus?\b", str(text or "").lower()) is not None


def _aggregation(arch: str, library_name: str, where: str) -> tuple[str, str | None]:
    """(aggregation, library override) of a measured ``arch``."""
    arch = str(arch).strip().lower()
    if arch in ("ps", "parameter_server", "parameter-server"):
        return "ps", None
    if arch in ("allreduce", "all-reduce", "all_reduce", "ring", "nccl"):
        return ("auto" if library_name == "nccl" else "ring"), None
    if arch == "replicated":
        return "direct", "ideal"
    raise ConfigError(f"{where}arch {arch!r}; valid: allreduce, ps, replicated")


def _where(measured: pd.DataFrame, i: int) -> str:
    lines = measured.attrs.get("lines") or []
    origin = measured.attrs.get("origin", "measured file")
    return f"{origin}:{lines[i]}: " if i < len(lines) else f"{origin}: "


def compare_training(measured: pd.DataFrame, graph, *, library=None, framework=None,
                     anchor: str = "measured", ps: Callable | None = None,
                     aggregation: str | None = None, device: str | None = None,
                     shared_cores: int | None = None, overheads="auto",
                     workers: int = 1, library_for: Callable | None = None,
                     gradient_dtype: str | None = None) -> pd.DataFrame:
    """Simulate every point of ``measured`` (a :func:`read_training` frame) on ``graph``.

    Rows whose model, precision or arch the simulator does not know are skipped, and so are
    rows on a GPU topology whose all-reduce ran on the host CPUs (see ``_on_host``); the
    reasons are in the result's ``attrs["skipped"]`` (an error if every row is).

    Parameters
    ----------
    library : str, library object or None
        The collective library of every bucket (None: the topology's default, ``nccl`` on
        ``gpu_cluster``).
    framework : Framework or None
        Force one framework for every point (None: detect from each point's text).
    anchor : {"measured", "model"}
        Where one GPU's compute comes from (see the module docstring).
    ps : callable(record) -> PsConfig, optional
        The parameter servers of a ``ps`` point (default :func:`default_ps`).
    aggregation : str, optional
        Simulate this aggregation for every point instead of the file's ``arch``.
    device : str, optional
        The compute model's device preset (default: the topology's).
    shared_cores : int, optional
        The workers share this many CPU cores (compute contention, see
        :func:`~simulator.workload.sweep.contention`); default: the row's ``cores`` column
        (written by ``clustersim measure training``), else none.
    overheads : "auto", TrainingOverheads, callable(record) -> TrainingOverheads, or None
        Time outside communication (:mod:`~simulator.workload.overheads`): ``auto`` (the
        default) takes each row's from its text (:func:`~simulator.workload.overheads.
        for_measured_row`: sourced per-step jitter, TensorFlow 2017's real-data input pipeline
        on the machine's cores); None: none (the behaviour before they were modelled).
    workers : int
        Simulate the rows in this many local processes (default 1: in this process, where
        rows share their one-GPU runs). The results do not depend on it.
    library_for : callable(version) -> library, optional
        The library of a row whose text states its NCCL version (:func:`stated_nccl_version`)
        and which would run on the default NCCL library: that version's library (one per
        version). None (the default): every such row keeps ``library``.
    gradient_dtype : {"fp16", "bf16", "fp32"} or None
        The dtype every mixed-precision row all-reduces its gradients in (None: each row's
        recipe, :func:`~simulator.workload.mixed_precision.detect_gradient_dtype`, else
        ``amp``'s fp16). Rows of other precisions keep their own.
    """
    from ..library import resolve_library
    from ..workload.frameworks import detect_framework
    from ..workload.mixed_precision import detect_gradient_dtype, gradient_dtype_for
    from ..workload.sweep import TrainingSpec

    if anchor not in ANCHORS:
        raise ConfigError(f"anchor must be one of {', '.join(ANCHORS)}, got {anchor!r}")
    default_lib = resolve_library(library, graph)
    default_name = getattr(default_lib, "name", "ideal")
    by_version: dict = {}
    ps = ps or default_ps
    gpu_workers = graph.graph.get("builder") == "gpu_cluster"
    datasets = _datasets(measured)
    jobs, calls = [], []
    skipped: list[str] = []
    for i, point in enumerate(measured.to_dict("records")):
        where = _where(measured, i)
        try:   # a row the simulator cannot place is skipped and said, not fatal to the file
            model = model_name(point["model"], where)
            precision = precision_name(point["precision"], where)
            kind, lib_override = _aggregation(point["aggregation"], default_name, where)
        except ConfigError as exc:
            skipped.append(str(exc))
            continue
        gpus, batch = int(point["gpus"]), int(point["batch_per_gpu"])
        if aggregation:
            kind, lib_override = aggregation, None
        lib = resolve_library(lib_override, graph) if lib_override else default_lib
        text = point.get("framework") or point.get("notes") or ""
        stated = stated_nccl_version(text, point.get("notes") or "")
        if library_for is not None and stated and lib is default_lib and default_name == "nccl":
            if stated not in by_version:
                by_version[stated] = library_for(stated)
            lib = by_version[stated]
        if not aggregation and kind not in ("ps", "direct") and gpu_workers and _on_host(text):
            skipped.append(f"{where}{point['model']} on {gpus} GPU{'s' * (gpus != 1)}: its "
                           f"all-reduce ran on the "
                           f"host CPUs (MPI over host memory: {text!r}), which the simulator "
                           f"does not model (its all-reduce runs on the GPUs); --algorithm "
                           f"forces a GPU all-reduce for such rows")
            continue
        fw = framework or detect_framework(text, point.get("model") or "")
        recipe = detect_gradient_dtype(text, point.get("model") or "", precision)
        wire = (gradient_dtype if gradient_dtype and precision == "amp" else
                recipe.gradient_dtype if recipe else None)
        measured_1 = float(point["throughput_samples_s"]) / float(point["speedup"])
        spec = TrainingSpec(
            models=(model,), batch_per_gpu=batch, gpus=(gpus,), aggregations=(kind,),
            precision=precision, ps=ps({**point, "framework": text}),
            library=None if getattr(lib, "name", "ideal") == "ideal" else lib, framework=fw,
            single_gpu_throughput=measured_1 if anchor == "measured" else None, device=device,
            shared_cores=shared_cores or _count(point.get("cores")),
            threads_per_worker=_count(point.get("threads_per_rank")) or 1,
            accumulation=_count(point.get("accumulation")) or 1,
            overheads=_overheads(overheads, {**point, "dataset": datasets.get(i, "")}),
            gradient_dtype=wire)
        # what the row reports, and the simulations it needs (run below, maybe in parallel)
        jobs.append((i, where, point, text, gpus, batch, precision, lib, fw, measured_1,
                     gradient_dtype_for(precision, wire)))
        calls.append((spec, model, kind, gpus, measured_1, anchor, len(calls)))
    results = _simulate_points(graph, calls, workers)
    rows = []
    for (i, where, point, text, gpus, batch, precision, lib, fw, measured_1, wire), (
            sim_n, sim_1, exc) in zip(jobs, results):
        if exc is not None and isinstance(exc, ConfigError) and any(
                lib is stated_lib for stated_lib in by_version.values()):
            # the NCCL its text states cannot run this row here (NCCL 1 across machines):
            # said and skipped, as a row the simulator cannot place
            skipped.append(f"{where}{point['model']} on {gpus} GPUs: the NCCL its text states "
                           f"cannot run it here: {exc}")
            continue
        if exc is not None:
            raise type(exc)(f"{where}{point['model']} {point['aggregation']} on {gpus} GPUs: "
                            f"{exc}") from None
        speedup = sim_n["throughput_samples_s"] / sim_1["throughput_samples_s"]
        base = measured_1 if anchor == "measured" else sim_1["throughput_samples_s"]
        simulated = base * speedup
        meas_speedup = float(point["speedup"])
        error = (speedup - meas_speedup) / meas_speedup * 100
        lines = measured.attrs.get("lines") or []
        rows.append({
            "source": point["source"], "model": point["model"], "framework": text,
            "arch": point["aggregation"], "aggregation": sim_n["aggregation"], "gpus": gpus,
            "batch_per_gpu": batch, "precision": precision,
            "measured_img_s": float(point["throughput_samples_s"]),
            "simulated_img_s": simulated,
            "throughput_error_pct": (simulated - point["throughput_samples_s"])
            / point["throughput_samples_s"] * 100,
            "measured_speedup": meas_speedup, "simulated_speedup": speedup,
            "speedup_error_pct": error, "abs_speedup_error_pct": abs(error),
            "exposed_comm_s": sim_n["exposed_comm_s"], "iteration_s": sim_n["iteration_s"],
            "framework_model": fw.name if fw else "default", "gradient_dtype": wire,
            "library": getattr(lib, "name", "ideal"),
            "library_version": release_text(lib), "anchor": anchor,
            "topology": graph.graph.get("name", ""),
            "line": lines[i] if i < len(lines) else None,
        })
    if not rows:
        raise ConfigError(f"{measured.attrs.get('origin', 'measured file')}: no row can be "
                          f"simulated; the first: {skipped[0] if skipped else 'no rows'}")
    frame = pd.DataFrame(rows, columns=list(POINT_COLUMNS))
    frame.attrs.update(origin=measured.attrs.get("origin", ""),
                       topology=graph.graph.get("name", ""), skipped=skipped)
    return frame


def _datasets(measured: pd.DataFrame) -> dict:
    """Row index -> the ``dataset`` cell of a public ``train_*.csv`` table (``ImageNet
    (synthetic data)``, ``ImageNet (real data)``), read back from the file by line: the
    reader keeps no dataset column. Empty where there is none."""
    from ..measure.schema import _records

    origin, lines = measured.attrs.get("origin"), measured.attrs.get("lines") or []
    if measured.attrs.get("layout") != "training-table" or not origin:
        return {}
    try:
        header, records = _records(Path(origin), origin)
    except (OSError, ClusterSimError):
        return {}
    if "dataset" not in header:
        return {}
    by_line = {line: str(record.get("dataset") or "") for line, record in records}
    return {i: by_line.get(line, "") for i, line in enumerate(lines)}


def _overheads(overheads, point: dict):
    """The :class:`TrainingOverheads` of one measured row (see :func:`compare_training`)."""
    from ..workload.overheads import for_measured_row

    if overheads is None:
        return None
    if isinstance(overheads, str):
        if overheads != "auto":
            raise ConfigError(f"overheads must be 'auto', None or TrainingOverheads, got "
                              f"{overheads!r}")
        return for_measured_row(point)
    return overheads(point) if callable(overheads) else overheads


def _anchored(cache: dict, graph, spec, model: str, kind: str, measured_1: float,
              rounds: int = 4):
    """``spec`` with the single-GPU compute throughput at which the *simulated* one-GPU run
    with this aggregation reaches ``measured_1``: a one-GPU parameter-server row includes its
    push and pull, so compute is the measured iteration less what the simulator says the
    aggregation adds (a few fixed-point rounds: what overlap hides depends on compute)."""
    import dataclasses

    target_s = spec.batch_per_gpu / measured_1
    compute_s = target_s
    for _ in range(rounds):
        trial = dataclasses.replace(spec, single_gpu_throughput=spec.batch_per_gpu / compute_s)
        simulated_s = spec.batch_per_gpu / _simulate(cache, graph, trial, model, kind,
                                                     1)["throughput_samples_s"]
        if abs(simulated_s - target_s) <= 1e-9 * target_s:
            return trial
        # the aggregation's own cost at one GPU, kept; compute takes the rest (at least 1 %)
        compute_s = max(0.01 * target_s, compute_s - (simulated_s - target_s))
    return dataclasses.replace(spec, single_gpu_throughput=spec.batch_per_gpu / compute_s)


def _count(value) -> int | None:
    """A positive count from an optional column value (None, NaN or empty: None)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return int(number) if number == number and number >= 1 else None


def _simulate_points(graph, calls: list, workers: int) -> list:
    """``(n-GPU row, one-GPU row, error)`` of every ``(spec, model, kind, gpus, measured_1,
    anchor, index)`` call, in order: in this process with one cache shared by all (``workers``
    <= 1), else in ``workers`` local processes (:func:`simulator.parallel.run_calls`)."""
    from ..parallel import run_calls

    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise ConfigError(f"workers: expected an integer >= 1, got {workers!r}")
    results: list = [None] * len(calls)
    if workers == 1 or len(calls) <= 1:
        cache: dict = {}
        for call in calls:
            results[call[-1]] = _simulate_point(graph, *call, cache=cache)[1:]
        return results

    def collect(result):
        results[result[0]] = result[1:]

    run_calls(_simulate_point, [(graph, *call) for call in calls], collect,
              workers=min(workers, len(calls)))
    return results


def _simulate_point(graph, spec, model: str, kind: str, gpus: int, measured_1: float,
                    anchor: str, index: int, cache: dict | None = None) -> tuple:
    """One measured row's simulations: ``(index, n-GPU row, one-GPU row, None)``, or
    ``(index, None, None, error)`` for a simulation error (raised by the caller, with the
    row's place). Module-level, so that worker processes can run it."""
    cache = {} if cache is None else cache
    try:
        if anchor == "measured":
            spec = _anchored(cache, graph, spec, model, kind, measured_1)
        return (index, _simulate(cache, graph, spec, model, kind, gpus),
                _simulate(cache, graph, spec, model, kind, 1), None)
    except ClusterSimError as exc:
        return index, None, None, exc


def _simulate(cache: dict, graph, spec, model: str, kind: str, gpus: int) -> dict:
    from ..workload.sweep import run_training_point

    key = (spec, model, kind, gpus)
    if key not in cache:
        cache[key] = run_training_point(graph, spec, model, kind, gpus).row
    return cache[key]


_SUMMARY_COLUMNS = ("points", "mape_pct", "median_ape_pct", "max_ape_pct", "bias_pct",
                    "throughput_mape_pct")


def summarise_training(points: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Speedup MAPE tables (points with more than one GPU): by ``arch``, ``model``, ``gpus``
    and overall; ``bias_pct`` > 0 means the simulator is optimistic. Each row also has the
    throughput MAPE."""
    scaled = points[points["gpus"] > 1]

    def stats(group: pd.DataFrame) -> dict:
        ape = group["abs_speedup_error_pct"]
        return {"points": len(group), "mape_pct": ape.mean(), "median_ape_pct": ape.median(),
                "max_ape_pct": ape.max(), "bias_pct": group["speedup_error_pct"].mean(),
                "throughput_mape_pct": group["throughput_error_pct"].abs().mean()}

    tables = {}
    for by in ("arch", "model", "gpus"):
        keys = sorted(dict.fromkeys(scaled[by]))
        tables[by] = pd.DataFrame([{by: k, **stats(scaled[scaled[by] == k])} for k in keys],
                                  columns=[by, *_SUMMARY_COLUMNS])
    tables["overall"] = pd.DataFrame([{"group": "all", **stats(scaled)}] if len(scaled) else [],
                                     columns=["group", *_SUMMARY_COLUMNS])
    return tables


def mape_failures(summary: dict[str, pd.DataFrame], max_mape_pct: float) -> list[str]:
    """One message per arch (and overall) whose speedup MAPE exceeds ``max_mape_pct``."""
    from .collective import mape_failures as failures

    return failures(summary, max_mape_pct, by="arch", label="arch", metric="speedup MAPE")


def select(measured: pd.DataFrame, selections: list[str]) -> pd.DataFrame:
    """Rows whose column contains a text (case-insensitive), for every ``COLUMN=TEXT``."""
    frame = measured
    for item in selections:
        column, sep, text = str(item).partition("=")
        if not sep or not column:
            raise ConfigError(f"--select expects COLUMN=TEXT, got {item!r}")
        if column not in frame.columns:
            raise ConfigError(f"--select {item!r}: no column {column!r}; columns: "
                              f"{', '.join(frame.columns)}")
        mask = frame[column].astype(str).str.lower().str.contains(text.lower(), regex=False)
        frame = subset_rows(frame, mask.to_numpy())
    if frame.empty:
        raise ConfigError(f"{measured.attrs.get('origin', 'measured file')}: no row matches "
                          f"{' and '.join(selections)}")
    return frame


def subset_rows(measured: pd.DataFrame, mask) -> pd.DataFrame:
    """Rows of ``measured`` under ``mask``, keeping its origin and the rows' lines."""
    part = measured[mask].reset_index(drop=True)
    lines = measured.attrs.get("lines")
    part.attrs = dict(measured.attrs)
    if lines is not None and len(lines) == len(measured):
        part.attrs["lines"] = [line for line, keep in zip(lines, mask) if keep]
    return part


def format_training_points(points: pd.DataFrame) -> str:
    """Human table of compared training points."""
    if points.empty:
        return "(no points)"
    shown = pd.DataFrame({
        "model": points["model"], "arch": points["arch"],
        "framework": points["framework_model"], "gpus": points["gpus"],
        "batch": points["batch_per_gpu"], "prec": points["precision"],
        "meas_img_s": [f"{v:.1f}" for v in points["measured_img_s"]],
        "sim_img_s": [f"{v:.1f}" for v in points["simulated_img_s"]],
        "meas_speedup": [f"{v:.2f}" for v in points["measured_speedup"]],
        "sim_speedup": [f"{v:.2f}" for v in points["simulated_speedup"]],
        "error": [f"{e:+.1f}%" for e in points["speedup_error_pct"]],
    })
    return shown.to_string(index=False)


def format_training_summary(summary: dict) -> str:
    blocks = []
    for key, title in (("arch", "by arch"), ("model", "by model"), ("gpus", "by GPU count"),
                       ("overall", "overall")):
        table = summary[key].copy()
        for column in _SUMMARY_COLUMNS[1:]:
            table[column] = [f"{v:.1f}" for v in table[column]]
        blocks.append(f"speedup MAPE {title} (points with > 1 GPU; bias > 0: simulator "
                      f"optimistic):\n{table.to_string(index=False)}")
    return "\n\n".join(blocks)
