"""Training frameworks: how each one turns backward's gradients into collective calls.

The same model on the same wires scales differently under PyTorch DDP, Horovod or 2017's
TensorFlow, because each groups gradients into calls in its own way, and every call pays the
library's fixed costs (launch, base latency, protocol). A :class:`Framework` is that policy as
data; :func:`simulator.workload.training.make_buckets` applies it. Policies:

``size``
    Buckets close when they reach ``bucket_bytes`` (in backward order); the first bucket may be
    smaller (``first_bucket_bytes``). PyTorch DDP, Apex DDP, most all-reduce frameworks. Apex
    counts its buckets in gradient *elements* (``message_size``), so a bucket of
    ``bucket_elements`` holds half the bytes in fp16 that it holds in fp32; a bucket larger than
    the whole model means a single call after backward, with no overlap at all.
``cycle``
    Horovod's tensor fusion: a background thread wakes every ``cycle_s``; every gradient ready by
    then is negotiated with the coordinator and fused into buffers of at most ``bucket_bytes``.
    A bucket's all-reduce starts at the first cycle boundary after its last gradient, plus one
    negotiation (a gather and a broadcast of ready lists through rank 0).
``per_layer``
    No fusion: one all-reduce per layer, issued as soon as backward has produced it (TensorFlow
    ``tf_cnn_benchmarks`` 2017, ``variable_update=replicated``, ``use_nccl=True``, before
    ``--gradient_repacking`` existed, and its parameter-server modes; TensorFlow issues one call per *variable*, and a layer's
    weight and bias come back to back, so a layer is one call here).

Every constant carries its source. :func:`detect_framework` maps the free-text ``framework``
column of the measurement files (``"NGC PyTorch 1.5.0a0 + DALI + APEX DDP"``, ``"MXNet 1.6.0 +
Horovod"``) to a registry name; ``--framework NAME`` picks one by hand.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import ConfigError

_MiB = 1 << 20


@dataclass(frozen=True)
class Framework:
    """How a framework issues gradient all-reduces (see the module docstring).

    Attributes
    ----------
    name : str
        Registry name.
    policy : str
        ``size``, ``cycle`` or ``per_layer``.
    bucket_bytes : int
        Bucket cap (``size``) or fusion buffer (``cycle``); unused for ``per_layer``.
    first_bucket_bytes : int or None
        A smaller first bucket (DDP), so communication starts early.
    bucket_elements : int
        ``size`` only: the bucket cap in gradient elements instead of bytes (Apex's
        ``message_size``); 0: ``bucket_bytes`` applies. See :meth:`bucket_cap_bytes`.
    cycle_s : float
        ``cycle`` only: time between fusion cycles.
    negotiation_hops : int
        ``cycle`` only: messages on the critical path of one negotiation (ranks' ready lists
        gathered at the coordinator, the decision broadcast back), each costing one network
        latency of the topology.
    launch : str
        How the collective library is driven (:mod:`simulator.library.launch`): ``torch``
        (one process per GPU through a Python binding), ``mpi`` (one process per GPU, C++
        calls), ``group`` (one process driving each machine's GPUs).
    source : str
        Where the numbers come from.
    """

    name: str
    policy: str
    bucket_bytes: int = 25 * _MiB
    first_bucket_bytes: int | None = None
    bucket_elements: int = 0
    cycle_s: float = 0.0
    negotiation_hops: int = 0
    launch: str = "mpi"
    source: str = ""

    def bucket_cap_bytes(self, element_bytes: int) -> int:
        """The ``size`` bucket cap in bytes for gradients of ``element_bytes`` each."""
        if self.bucket_elements:
            return int(self.bucket_elements) * int(element_bytes)
        return int(self.bucket_bytes)

    def describe(self) -> str:
        if self.policy == "per_layer":
            return f"{self.name}: one all-reduce per layer"
        if self.policy == "cycle":
            return (f"{self.name}: fusion buffer {self.bucket_bytes / _MiB:g} MiB every "
                    f"{self.cycle_s * 1e3:g} ms cycle")
        first = (f", first {self.first_bucket_bytes / _MiB:g} MiB"
                 if self.first_bucket_bytes else "")
        if self.bucket_elements:
            return (f"{self.name}: buckets of {self.bucket_elements / 1e6:g} M gradient "
                    f"elements{first}")
        return f"{self.name}: buckets of {self.bucket_bytes / _MiB:g} MiB{first}"


def _apex(name: str, message_size: int, source: str) -> Framework:
    """Apex DDP with buckets of ``message_size`` gradient elements (fp32 bytes shown by
    ``bucket_bytes``; :meth:`Framework.bucket_cap_bytes` sizes them by the run's precision)."""
    return Framework(name, "size", bucket_bytes=message_size * 4, bucket_elements=message_size,
                     launch="torch", source=source)


FRAMEWORKS: dict[str, Framework] = {f.name: f for f in (
    Framework(
        "ddp", "size", bucket_bytes=25 * _MiB, first_bucket_bytes=1 * _MiB, launch="torch",
        source="PyTorch DistributedDataParallel: kDefaultBucketBytesCap = 25 MiB and "
               "kDefaultFirstBucketBytes = 1 MiB (torch/csrc/distributed/c10d/reducer.hpp, "
               "v2.5.0), the buckets DDP rebuilds after its first iteration"),
    _apex("apex-ddp", 10_000_000,
          "NVIDIA Apex apex.parallel.DistributedDataParallel: 'message_size (int, "
          "default=1e7): Minimum number of elements in a communication bucket' "
          "(apex/parallel/distributed.py docstring); the elements are the model's "
          "gradients (fp16 under amp opt_level O2)"),
    _apex("apex-ddp-bert", 250_000_000,
          "NVIDIA DeepLearningExamples PyTorch/LanguageModeling/BERT/run_pretraining.py "
          "(@042e8724, and DLPerf's fork dl-framework-benchmark/DeepLearningExamples "
          "@08552ece): DDP(model, message_size=250000000, ...) of apex.parallel, amp "
          "opt_level O2; 250 M elements exceed BERT-base (110 M) and the bucket is "
          "all-reduced once backward has ended"),
    Framework(
        "single-bucket", "size", bucket_bytes=1 << 62, launch="torch",
        source="every gradient in one call after backward: clustersim measure training's "
               "parameter server flattens the whole gradient and sends it once"),
    Framework(
        "horovod", "cycle", bucket_bytes=64 * _MiB, cycle_s=5e-3, negotiation_hops=2,
        launch="mpi",
        source="Horovod docs/tensor-fusion.rst: 'Default fusion buffer size is 64 MB', "
               "HOROVOD_CYCLE_TIME; defaults 5 ms / 64 MB until v0.21.0, whose changelog "
               "says 'Changed default cycle time from 5ms to 1ms and fusion threshold from "
               "64MB to 128MB (#2468)'; docs/timeline.rst: negotiation = every worker "
               "signals rank 0, rank 0 signals every worker"),
    Framework(
        "horovod-0.21", "cycle", bucket_bytes=128 * _MiB, cycle_s=1e-3, negotiation_hops=2,
        launch="mpi",
        source="Horovod v0.21.0 changelog (#2468): cycle time 1 ms, fusion threshold 128 MB"),
    Framework(
        "tf-per-variable", "per_layer", launch="group",
        source="tensorflow/benchmarks tf_cnn_benchmarks (2017): every gradient tensor is its "
               "own transfer (parameter_server, distributed_replicated) or its own NCCL "
               "all-reduce (replicated with use_nccl=True; gradient_repacking came later, "
               "default 0); one process drives the machine's GPUs"),
)}

#: Free-text framework descriptions -> registry names, first match wins (case-insensitive).
#: Horovod is named in the text wherever it drives the all-reduce, whatever the framework.
#: A recipe is a framework text and a model together: Apex-based BERT *pretraining* is
#: NVIDIA's DeepLearningExamples recipe (in its NGC containers), with its own bucket. Its
#: SQuAD fine-tuning script of 2019 wrapped the model as ``DDP(model)``, Apex's default
#: (``run_squad.py`` @0663b67c), so fine-tuning rows keep ``apex-ddp``.
_RECIPES = (
    (r"apex", r"\bbert\b.*pre-?train|pre-?train.*\bbert\b", "apex-ddp-bert"),
)
_PATTERNS = (
    (r"horovod.*0\.(2[1-9]|[3-9]\d)|horovod.*[1-9]\.\d", "horovod-0.21"),
    (r"horovod", "horovod"),
    (r"apex", "apex-ddp"),
    (r"torch.*parameter server", "single-bucket"),
    (r"pytorch|torch|ddp", "ddp"),
    (r"tf_cnn_benchmarks|tensorflow.*(parameter.server|distributed_replicated|replicated)",
     "tf-per-variable"),
)


def get_framework(name: str) -> Framework:
    """The registered framework ``name``; unknown names list the valid ones."""
    try:
        return FRAMEWORKS[name]
    except KeyError:
        raise ConfigError(f"unknown framework {name!r}; valid: {', '.join(FRAMEWORKS)}") \
            from None


def detect_framework(text: str, model: str = "") -> Framework | None:
    """The framework a measurement file's ``framework`` text names (with the row's ``model``
    where a recipe fixes the framework's settings, :data:`_RECIPES`), or None (then the
    caller's default applies)."""
    lowered = str(text or "").lower()
    model_text = str(model or "").lower()
    for pattern, model_pattern, name in _RECIPES:
        if re.search(pattern, lowered) and re.search(model_pattern, model_text):
            return FRAMEWORKS[name]
    for pattern, name in _PATTERNS:
        if re.search(pattern, lowered):
            return FRAMEWORKS[name]
    return None


def parse_framework(text: str | None) -> Framework | None:
    """``--framework``: a registry name, ``auto`` / None (detect per row), or a spec
    ``size:25MiB``, ``cycle:64MiB:5ms``, ``per_layer``."""
    from ..units import parse_duration, parse_size

    if text in (None, "", "auto"):
        return None
    if text in FRAMEWORKS:
        return FRAMEWORKS[text]
    kind, _, rest = str(text).partition(":")
    parts = [p for p in rest.split(":") if p]
    try:
        if kind in ("size", "cycle") and parts and parse_size(parts[0],
                                                              what="--framework") <= 0:
            raise ConfigError(f"bucket bytes must be > 0, got {parts[0]!r}")
        if kind == "per_layer" and not parts:
            return Framework("per_layer", "per_layer", source="--framework per_layer")
        if kind == "size" and len(parts) == 1:
            return Framework(text, "size", bucket_bytes=parse_size(parts[0], what="--framework"),
                             source=f"--framework {text}")
        if kind == "cycle" and len(parts) == 2:
            return Framework(text, "cycle", bucket_bytes=parse_size(parts[0], what="--framework"),
                             cycle_s=parse_duration(parts[1], what="--framework"),
                             negotiation_hops=2, source=f"--framework {text}")
    except ConfigError as exc:
        raise ConfigError(f"--framework {text!r}: {exc}") from None
    raise ConfigError(f"--framework expects auto, one of {', '.join(FRAMEWORKS)}, per_layer, "
                      f"size:BYTES or cycle:BYTES:TIME (e.g. cycle:64MiB:5ms), got {text!r}")
