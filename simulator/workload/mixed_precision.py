"""The precision gradients cross the wire in: what mixed precision leaves in float32.

A data-parallel job all-reduces the gradients of the parameters it trains, in their own
dtype (unless a compression such as Horovod's ``Compression.fp16`` casts them, which
``--compression`` models). Mixed precision ("amp") computes in fp16 everywhere, but frameworks
differ in what they *store*, and so in how many bytes the all-reduce moves:

``fp16`` (the model cast to half)
    The parameters are fp16 and the optimizer keeps fp32 master copies: the gradients are
    fp16, and so is every all-reduce. Apex ``opt_level="O2"``, MXNet/Gluon
    ``net.cast('float16')`` with a multi-precision optimizer, PyTorch ``network_to_half``.
``fp32`` (the variables stay float32)
    The parameters stay fp32 and are cast to fp16 inside the forward pass: the gradients of
    fp32 parameters are fp32, and the all-reduce moves twice the bytes. TensorFlow's
    automatic mixed precision graph rewrite and Keras's ``mixed_float16`` policy, Apex
    ``opt_level="O1"``, ``torch.cuda.amp`` autocast.

:func:`gradient_element_bytes` is the bytes one gradient element has on the wire;
:func:`detect_gradient_dtype` reads a measured row's framework text (with its model, where
a recipe decides) and returns the recipe's dtype with its source, or None where no recipe is
known (then ``amp`` keeps fp16 gradients, the behaviour before recipes were told apart).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import ConfigError

#: Bytes per gradient element on the wire, by dtype.
DTYPE_BYTES = {"fp16": 2, "bf16": 2, "fp32": 4}
GRADIENT_DTYPES = tuple(DTYPE_BYTES)
#: What ``--gradient-dtype`` and the scenario key ``gradient_dtype`` mean, for their help.
GRADIENT_DTYPE_HELP = ("the dtype gradients are all-reduced in (default: the precision's; "
                       "amp: fp16, as a model cast to half). fp32 for mixed precision that "
                       "keeps fp32 variables: TensorFlow AMP, Keras mixed_float16, Apex O1, "
                       "torch.cuda.amp")

#: The gradient dtype of each training precision when nothing else is said: mixed precision
#: (``amp``) as the model cast to half.
PRECISION_GRADIENTS = {"fp32": "fp32", "fp16": "fp16", "amp": "fp16", "bf16": "bf16"}


def gradient_dtype_for(precision: str, gradient_dtype: str | None = None) -> str:
    """The dtype gradients cross the wire in: ``gradient_dtype`` where given (checked), else
    the precision's own (:data:`PRECISION_GRADIENTS`)."""
    if gradient_dtype is not None:
        if gradient_dtype not in DTYPE_BYTES:
            raise ConfigError(f"gradient dtype must be one of {', '.join(GRADIENT_DTYPES)}, "
                              f"got {gradient_dtype!r}")
        return gradient_dtype
    return PRECISION_GRADIENTS.get(precision, "fp32")


def gradient_element_bytes(precision: str, gradient_dtype: str | None = None) -> int:
    """Bytes of one gradient element on the wire (see :func:`gradient_dtype_for`)."""
    return DTYPE_BYTES[gradient_dtype_for(precision, gradient_dtype)]


@dataclass(frozen=True)
class AmpRecipe:
    """A framework's mixed-precision recipe: which text names it, and its gradients' dtype.

    Attributes
    ----------
    name : str
    framework_pattern : str
        Regular expression on the row's framework text (case-insensitive).
    model_pattern : str
        Regular expression on the row's model ("" matches every model).
    gradient_dtype : str
        ``fp16`` or ``fp32``.
    source : str
        Where the recipe's dtype is read.
    """

    name: str
    framework_pattern: str
    model_pattern: str
    gradient_dtype: str
    source: str

    def matches(self, text: str, model: str) -> bool:
        return bool(re.search(self.framework_pattern, text, re.IGNORECASE)
                    and re.search(self.model_pattern, model, re.IGNORECASE))


_DLE = "NVIDIA/DeepLearningExamples"

#: Recipes in the order they are tried (the first match wins). Only what a recipe's own code
#: shows is listed; a framework without an entry keeps ``amp``'s fp16 gradients.
AMP_RECIPES: tuple[AmpRecipe, ...] = (
    AmpRecipe(
        "apex-o2-bert", r"apex", r"\bbert\b", "fp16",
        f"{_DLE} @042e8724 PyTorch/LanguageModeling/BERT/run_pretraining.py:376 "
        "'amp.initialize(model, optimizer, opt_level=\"O2\", ...)' (the model's parameters "
        "become fp16) and :406 'DDP(model, message_size=250000000, ...)' (Apex all-reduces "
        "the model's gradients); run_squad.py 'opt_level=\"O2\"' likewise"),
    AmpRecipe(
        "apex-o1-convnets", r"apex", r"resnet|resnext|convnet", "fp32",
        f"{_DLE} @5cc03caa PyTorch/Classification/ConvNets/main.py:492-498 'if args.amp: "
        "model_and_loss, optimizer = amp.initialize(model_and_loss, optimizer, "
        "opt_level=\"O1\", ...)': O1 patches functions to cast to fp16 and leaves the "
        "parameters fp32, so Apex DDP all-reduces fp32 gradients"),
    AmpRecipe(
        "dle-tensorflow-bert", r"ngc tensorflow|tensorflow.*deeplearningexamples", r"\bbert\b",
        "fp16",
        f"{_DLE} @fed7ba99 TensorFlow/LanguageModeling/BERT/optimization.py:97 "
        "'hvd.DistributedOptimizer(..., compression=Compression.fp16 if use_fp16 or "
        "manual_fp16 else Compression.none)': the fp32 gradients are cast to fp16 for the "
        "all-reduce (horovod v0.19.0 tensorflow/compression.py:54 'tf.cast(tensor, "
        "dtype=tf.float16)'); DLPerf runs it with --use_fp16 "
        "(NVIDIADeepLearningExamples/TensorFlow/LanguageModeling/BERT/scripts/"
        "multi_node_run_pretraining_adam.sh:47, Oneflow-Inc/DLPerf @c89430ba)"),
    AmpRecipe(
        "dlperf-ngc-mxnet-amp", r"ngc mxnet 1\.6\.0 \(nvcr 20\.03\)", r"resnet", "fp32",
        "Oneflow-Inc/DLPerf @c89430ba NVIDIADeepLearningExamples/MxNet/Classification/"
        "RN50v1.5/runner.sh:42 '--dtype float16 --amp' and "
        f"{_DLE} @e470c215 MxNet/Classification/RN50v1.5/models.py:517-518 'if not amp: "
        "net.cast(dtype)': with --amp the parameters stay fp32 (MXNet's AMP casts the ops' "
        "inputs), so Horovod all-reduces fp32 gradients. NVIDIA's own runner passes "
        "'--dtype float16' without --amp (the model cast to half: fp16), so only DLPerf's "
        "text is this recipe"),
    AmpRecipe(
        "oneflow-amp", r"oneflow", r"", "fp16",
        "Oneflow-Inc/oneflow @f3d736e (v0.2.0): auto mixed precision keeps the variables fp32 "
        "(oneflow/core/job_rewriter/auto_mixed_precision.cpp:110-123, only ops with a batch "
        "axis run in half) but the pass 'do_parallel_cast_before_widening_type_cast' "
        "(job_conf.proto:101, default true; do_parallel_cast_before_widening_type_cast_pass"
        ".cpp:56-93, 'find cast_fp16_to_fp32_or_double -> parallel_cast pattern') moves the "
        "gradient's all-reduce before its cast back to fp32: conv and matmul gradients are "
        "all-reduced in fp16 (BatchNorm's, never cast, stay fp32: small)"),
    AmpRecipe(
        "gluon-cast", r"gluon", r"", "fp16",
        "dmlc/gluon-cv @f9a8a284b8 scripts/classification/imagenet/train_horovod.py:317 "
        "'net.cast(args.dtype)' with ':384-385 multi_precision = True' and "
        "hvd.DistributedTrainer (horovod v0.19.5 horovod/mxnet/__init__.py:107 allreduce_ of "
        "each parameter's gradient, no cast); dmlc/gluon-nlp @7b7bf602 scripts/bert/"
        "pretraining_utils.py:77 'model.cast(dtype)' likewise (BatchNorm stays fp32: "
        "mxnet 1.6.0 gluon/nn/basic_layers.py:359-362)"),
    AmpRecipe(
        "mxnet-cast", r"mxnet", r"", "fp16",
        f"{_DLE} @e470c215 MxNet/Classification/RN50v1.5/runner:29,51 (float16 passes "
        "'--dtype float16', no --amp) and models.py:517-518 'if not amp: net.cast(dtype)': "
        "the model cast to half, fp16 gradients to Horovod"),
    AmpRecipe(
        "paddle-decorate", r"paddle", r"", "fp16",
        "PaddlePaddle 1.8 python/paddle/fluid/contrib/mixed_precision/decorator.py:139-141 "
        "'so that gradients transferred across GPUs can be FP16' and fp16_utils.py:277-284 "
        "(update_role_var_grad moves the cast to fp32 after the all-reduce); DLPerf runs "
        "--use_fp16=True (PaddlePaddle/resnet50v1.5/scripts/multi_node_train.sh:32); its BERT "
        "builds fp16 parameters (PaddlePaddle/models @b71cf632 PaddleNLP/"
        "pretrain_language_models/BERT/model/bert.py:74) and casts after the all-reduce "
        "(utils/fp16.py:100-112)"),
    AmpRecipe(
        "tensorflow-amp", r"tensorflow|\btf[\s-]?\d|\bkeras\b", r"", "fp32",
        f"{_DLE} @fed7ba99 TensorFlow/Classification/ConvNets/runtime/runner.py:119-120 "
        "(AMP = TF_ENABLE_AUTO_MIXED_PRECISION_GRAPH_REWRITE=1, a rewrite of the ops' "
        "types that leaves the variables fp32) and model/resnet.py:301 "
        "'hvd.DistributedOptimizer(optimizer)' (no compression: Horovod all-reduces each "
        "gradient in its own dtype); Keras mixed precision guide: the 'mixed_float16' "
        "policy computes in float16 and keeps variables in float32 (TF 2.3.0 keras/"
        "mixed_precision/experimental/policy.py:94 'keeping variables in float32'; "
        "optimizer_v2.py:564 batch_reduce_to(ReduceOp.SUM, grads_and_vars), no cast)"),
)


def get_recipe(name: str) -> AmpRecipe:
    """The registered recipe ``name``; unknown names list the valid ones."""
    for recipe in AMP_RECIPES:
        if recipe.name == name:
            return recipe
    raise ConfigError(f"unknown mixed-precision recipe {name!r}; valid: "
                      f"{', '.join(r.name for r in AMP_RECIPES)}")


def detect_gradient_dtype(text: str, model: str = "", precision: str = "amp"):
    """The :class:`AmpRecipe` a measured row's framework text (and model) names, for a mixed
    precision row; None for other precisions and for frameworks without a recipe."""
    if precision != "amp":
        return None
    for recipe in AMP_RECIPES:
        if recipe.matches(str(text or ""), str(model or "")):
            return recipe
    return None
