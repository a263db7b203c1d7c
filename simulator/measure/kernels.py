"""Per-layer forward and backward times of a real network, measured with PyTorch.

The compute model of :mod:`simulator.workload` needs, per layer of a registry model, how long
its forward and its backward take. This module measures exactly those rows.

Torch builders, named like the registry
---------------------------------------
torchvision cannot be installed beside the pinned torch, so the networks are built here, small
and plain, from the same architectures :mod:`simulator.workload.models` counts (AlexNet,
VGG-16, ResNet-50/101/152 as torchvision builds them). The *leaf modules* (modules without
children) are exactly the registry's layers, in the same order and with the same names, so a
measured row joins its counted row by name with no mapping table:

* an activation is folded into the layer that feeds it, as the registry counts it: ``ConvAct``
  (AlexNet's and VGG's conv + ReLU), ``LinearAct``, ``BatchNormAct`` (ResNet's bn + ReLU);
* ResNet's residual ``x + identity`` followed by ReLU is one leaf, ``AddReLU`` (the registry's
  ``layerS.B.add``); ResNet's stem is the module ``stem`` (``stem.conv``, ``stem.bn``,
  ``stem.maxpool``) where torchvision has ``conv1``, ``bn1``, ``relu``, ``maxpool`` at the top;
* what the registry counts as free has no module: dropout, flatten, and the adaptive average
  pools that are identities at 224x224 (AlexNet's 6x6, VGG's 7x7).

Parameter counts equal torchvision's (and the registry's); the tests check names and counts.

How a layer is timed: in isolation, on captured inputs
------------------------------------------------------
One untimed forward pass of the whole network records each leaf's input tensors (forward hooks).
Then each leaf is timed on its own, on those inputs, with autograd on and BatchNorm in training
mode: ``forward_s`` is ``leaf(*inputs)``; ``backward_s`` is the backward of that one call
(``torch.autograd.grad`` of the output, with a fixed random output gradient, with respect to the
leaf's parameters and to its inputs, except the network's input image, which needs no
gradient). Each phase has ``warmup`` untimed runs, then ``iterations`` timed runs summarised by
median and standard deviation (:mod:`simulator.measure.timing`).

This was chosen over timing hooks inside one full forward/backward pass because hooks give
*boundaries between* modules, not module costs: on a CPU they fold framework overhead and the
work of unhooked functional ops into a neighbour, full backward hooks fire at gradient-ready
points that do not bracket a module's whole backward (the weight gradient may come later), and
in-place activations break them. Isolation measures each leaf alone, repeatably, on the same
code path on CPU and GPU; what it misses is the cache reuse between neighbouring layers, so the
sum of the rows is usually a little above a whole training step (``measure_step`` gives the
latter for comparison). Leaves never modify their inputs in place, so re-running them is safe.

Output schema (one row per leaf, in forward order)::

    layer, forward_s, backward_s, forward_std_s, backward_std_s, iterations, model, device,
    batch, threads

``forward_s``/``backward_s`` are medians in seconds for the whole batch; the compute model reads
``layer, forward_s, backward_s`` and ignores the rest.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Callable

import pandas as pd

from simulator.errors import ConfigError, unknown_name

from . import require_torch, resolve_device
from .timing import Stats, check_counts, fixed_threads, measure

__all__ = ["KERNEL_COLUMNS", "TORCH_MODELS", "build_torch_model", "layer_names",
           "measure_kernels", "measure_step", "write_kernels_csv"]

#: Columns of the per-layer CSV, in order.
KERNEL_COLUMNS = ("layer", "forward_s", "backward_s", "forward_std_s", "backward_std_s",
                  "iterations", "model", "device", "batch", "threads")

#: Input image side of the CNN builders (the registry counts them at 224x224).
IMAGE_SIZE = 224


@functools.lru_cache(maxsize=None)
def _modules():
    """The leaf module classes; defined on first use so that torch is imported lazily."""
    torch = require_torch()
    nn, F = torch.nn, torch.nn.functional

    class ConvAct(nn.Conv2d):
        """Conv2d, optionally followed by ReLU (one registry layer)."""

        def __init__(self, *args, relu: bool = False, **kwargs):
            super().__init__(*args, **kwargs)
            self.relu = relu

        def forward(self, x):
            y = super().forward(x)
            return F.relu(y) if self.relu else y

    class LinearAct(nn.Linear):
        """Linear, optionally followed by ReLU (one registry layer)."""

        def __init__(self, *args, relu: bool = False, **kwargs):
            super().__init__(*args, **kwargs)
            self.relu = relu

        def forward(self, x):
            y = super().forward(x)
            return F.relu(y) if self.relu else y

    class BatchNormAct(nn.BatchNorm2d):
        """BatchNorm2d, optionally followed by ReLU (one registry layer)."""

        def __init__(self, *args, relu: bool = False, **kwargs):
            super().__init__(*args, **kwargs)
            self.relu = relu

        def forward(self, x):
            y = super().forward(x)
            return F.relu(y) if self.relu else y

    class AddReLU(nn.Module):
        """ResNet's residual add followed by ReLU (the registry's ``.add`` layer)."""

        def forward(self, x, identity):
            return F.relu(x + identity)

    class ConvBN(nn.Module):
        """Bias-free convolution then batch norm (+ ReLU): registry ``<name>.conv``, ``.bn``."""

        def __init__(self, cin, cout, k, stride=1, pad=0, relu=True):
            super().__init__()
            self.conv = nn.Conv2d(cin, cout, k, stride=stride, padding=pad, bias=False)
            self.bn = BatchNormAct(cout, relu=relu)

        def forward(self, x):
            return self.bn(self.conv(x))

    class Bottleneck(nn.Module):
        """torchvision's Bottleneck (v1.5: the stride sits in the 3x3 convolution)."""

        def __init__(self, cin, width, stride):
            super().__init__()
            cout = 4 * width
            self.conv1 = ConvBN(cin, width, 1)
            self.conv2 = ConvBN(width, width, 3, stride=stride, pad=1)
            self.conv3 = ConvBN(width, cout, 1, relu=False)
            self.downsample = (ConvBN(cin, cout, 1, stride=stride, relu=False)
                               if stride != 1 or cin != cout else None)
            self.add = AddReLU()

        def forward(self, x):
            out = self.conv3(self.conv2(self.conv1(x)))
            identity = self.downsample(x) if self.downsample is not None else x
            return self.add(out, identity)

    class Stem(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
            self.bn = BatchNormAct(64, relu=True)
            self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)

        def forward(self, x):
            return self.maxpool(self.bn(self.conv(x)))

    class ResNet(nn.Module):
        def __init__(self, blocks):
            super().__init__()
            self.stem = Stem()
            c = 64
            for stage, (count, width) in enumerate(zip(blocks, (64, 128, 256, 512)), start=1):
                layer = []
                for block in range(count):
                    layer.append(Bottleneck(c, width, 2 if block == 0 and stage > 1 else 1))
                    c = 4 * width
                setattr(self, f"layer{stage}", nn.Sequential(*layer))
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(c, 1000)

        def forward(self, x):
            x = self.stem(x)
            for stage in (self.layer1, self.layer2, self.layer3, self.layer4):
                x = stage(x)
            return self.fc(torch.flatten(self.avgpool(x), 1))

    class FeaturesClassifier(nn.Module):
        """AlexNet/VGG: ``features`` and ``classifier`` with torchvision's module indices."""

        def __init__(self, features: dict, classifier: dict):
            super().__init__()
            self.features = nn.ModuleDict(features)
            self.classifier = nn.ModuleDict(classifier)

        def forward(self, x):
            for module in self.features.values():
                x = module(x)
            x = torch.flatten(x, 1)  # the 6x6 / 7x7 adaptive pool is an identity at 224x224
            for module in self.classifier.values():
                x = module(x)
            return x

    return dict(ConvAct=ConvAct, LinearAct=LinearAct, ResNet=ResNet,
                FeaturesClassifier=FeaturesClassifier, MaxPool2d=nn.MaxPool2d)


def _alexnet():
    m = _modules()
    conv, pool = m["ConvAct"], m["MaxPool2d"]
    features = {"0": conv(3, 64, 11, stride=4, padding=2, relu=True), "2": pool(3, 2),
                "3": conv(64, 192, 5, padding=2, relu=True), "5": pool(3, 2),
                "6": conv(192, 384, 3, padding=1, relu=True),
                "8": conv(384, 256, 3, padding=1, relu=True),
                "10": conv(256, 256, 3, padding=1, relu=True), "12": pool(3, 2)}
    classifier = {"1": m["LinearAct"](256 * 6 * 6, 4096, relu=True),
                  "4": m["LinearAct"](4096, 4096, relu=True), "6": m["LinearAct"](4096, 1000)}
    return m["FeaturesClassifier"](features, classifier)


def _vgg16():
    m = _modules()
    cfg = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M",
           512, 512, 512, "M"]
    features, c, index = {}, 3, 0
    for item in cfg:
        if item == "M":
            features[str(index)] = m["MaxPool2d"](2, 2)
            index += 1
        else:
            features[str(index)] = m["ConvAct"](c, item, 3, padding=1, relu=True)
            c, index = item, index + 2  # torchvision's ReLU module index is folded
    classifier = {"0": m["LinearAct"](512 * 7 * 7, 4096, relu=True),
                  "3": m["LinearAct"](4096, 4096, relu=True), "6": m["LinearAct"](4096, 1000)}
    return m["FeaturesClassifier"](features, classifier)


def _resnet(blocks) -> Callable:
    return lambda: _modules()["ResNet"](blocks)


#: Registry name -> torch builder (a subset of :data:`simulator.workload.models.MODELS`).
TORCH_MODELS: dict[str, Callable] = {
    "alexnet": _alexnet,
    "vgg16": _vgg16,
    "resnet50": _resnet((3, 4, 6, 3)),
    "resnet101": _resnet((3, 4, 23, 3)),
    "resnet152": _resnet((3, 8, 36, 3)),
}


def build_torch_model(name: str, seed: int = 0):
    """The torch module for registry model ``name``, initialised from ``seed``.

    The global torch RNG is forked, so the caller's random state is untouched.
    """
    torch = require_torch()
    try:
        builder = TORCH_MODELS[name]
    except (KeyError, TypeError):
        raise unknown_name("model with a torch builder", name, TORCH_MODELS) from None
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return builder()


def _leaves(module) -> dict:
    return {name: m for name, m in module.named_modules() if name and not list(m.children())}


def _capture(model, image):
    """Run ``model(image)`` once without autograd; return ``[(name, leaf, inputs), ...]`` in
    call order, ``inputs`` being the leaf's positional tensor arguments, each paired with
    whether training would need its gradient (all but the network's input)."""
    torch = require_torch()
    calls, handles = [], []
    for name, leaf in _leaves(model).items():
        def hook(module, args, _output, name=name):
            calls.append((name, module, tuple((a.detach(), a is not image and
                                               a.is_floating_point()) for a in args)))
        handles.append(leaf.register_forward_hook(hook))
    try:
        with torch.no_grad():
            model(image)
    finally:
        for handle in handles:
            handle.remove()
    names = [name for name, _, _ in calls]
    if len(set(names)) != len(names):
        raise RuntimeError("a leaf module ran more than once; layers cannot be timed alone")
    return calls


def layer_names(model_name: str) -> list[str]:
    """Leaf layer names of the torch builder, in forward order (= the registry's layer names)."""
    torch = require_torch()
    model = build_torch_model(model_name)
    with torch.random.fork_rng(devices=[]):
        image = torch.zeros(1, 3, IMAGE_SIZE, IMAGE_SIZE)
        return [name for name, _, _ in _capture(model.train(), image)]


def _time_leaf(leaf, inputs, device, iterations, warmup, generator) -> tuple[Stats, Stats]:
    """Forward and backward statistics of one leaf on its captured ``(tensor, needs_grad)``
    inputs."""
    torch = require_torch()
    inputs = tuple(x.detach().requires_grad_(needs_grad) for x, needs_grad in inputs)
    wrt = [x for x in inputs if x.requires_grad] + [p for p in leaf.parameters()
                                                     if p.requires_grad]
    with torch.enable_grad():
        forward = measure(lambda: leaf(*inputs), device, iterations, warmup)
        out = leaf(*inputs)
        grad = torch.randn(out.shape, generator=generator, dtype=out.dtype,
                           device="cpu").to(out.device)
        del out
        if not wrt:
            backward = Stats(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, iterations)
        else:
            backward = measure(lambda out: torch.autograd.grad(out, wrt, grad), device,
                               iterations, warmup, setup=lambda: leaf(*inputs))
    return forward, backward


def _check_batch(batch) -> None:
    if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
        raise ConfigError(f"batch must be an integer >= 1, got {batch!r}")


def measure_kernels(model_name: str, device="cpu", batch: int = 8, iterations: int = 20,
                    warmup: int = 3, threads: int | None = None, seed: int = 0) -> pd.DataFrame:
    """Per-layer forward and backward times of registry model ``model_name``.

    Parameters
    ----------
    model_name : str
        A key of :data:`TORCH_MODELS` (alexnet, vgg16, resnet50, resnet101, resnet152).
    device : str
        ``"cpu"``, ``"cuda"`` or ``"cuda:N"``; a GPU request without a GPU raises ConfigError.
    batch : int
        Samples per forward (times are for the whole batch).
    iterations, warmup : int
        Timed and untimed runs per layer and phase (medians of >= 20 after >= 3 warm-ups
        repeat to ~5 % on a CPU for layers above 1 ms).
    threads : int, optional
        Intra-op CPU threads (``torch.set_num_threads``) during the measurement; default: the
        current count, which is recorded in the ``threads`` column either way.
    seed : int
        Seeds the weights, the input batch and the output gradients.

    Returns
    -------
    pandas.DataFrame
        One row per layer, columns :data:`KERNEL_COLUMNS`.
    """
    torch = require_torch()
    _check_batch(batch)
    check_counts(iterations, warmup)
    dev = resolve_device(device)
    model = build_torch_model(model_name, seed).to(dev).train()
    generator = torch.Generator().manual_seed(seed)
    image = torch.randn(batch, 3, IMAGE_SIZE, IMAGE_SIZE, generator=generator).to(dev)
    rows = []
    with fixed_threads(threads) as used_threads:
        for name, leaf, inputs in _capture(model, image):
            fwd, bwd = _time_leaf(leaf, inputs, dev, iterations, warmup, generator)
            rows.append({"layer": name, "forward_s": fwd.median_s, "backward_s": bwd.median_s,
                         "forward_std_s": fwd.std_s, "backward_std_s": bwd.std_s,
                         "iterations": iterations, "model": model_name, "device": dev.type,
                         "batch": batch, "threads": used_threads})
    return pd.DataFrame(rows, columns=list(KERNEL_COLUMNS))


def measure_step(model_name: str, device="cpu", batch: int = 8, iterations: int = 20,
                 warmup: int = 3, threads: int | None = None, seed: int = 0) -> dict:
    """Whole-network forward and forward+backward times (medians, s), to compare with the sum
    of :func:`measure_kernels` rows: ``{"forward": Stats, "step": Stats}``."""
    torch = require_torch()
    _check_batch(batch)
    check_counts(iterations, warmup)
    dev = resolve_device(device)
    model = build_torch_model(model_name, seed).to(dev).train()
    image = torch.randn(batch, 3, IMAGE_SIZE, IMAGE_SIZE,
                        generator=torch.Generator().manual_seed(seed)).to(dev)
    params = [p for p in model.parameters() if p.requires_grad]

    def step():
        out = model(image)
        torch.autograd.grad(out.sum(), params)

    with fixed_threads(threads), torch.enable_grad():
        forward = measure(lambda: model(image), dev, iterations, warmup)
        full = measure(step, dev, iterations, warmup)
    return {"forward": forward, "step": full}


def write_kernels_csv(frame: pd.DataFrame, path) -> Path:
    """Write a :func:`measure_kernels` frame to ``path`` atomically (temp file, then rename)."""
    missing = [c for c in KERNEL_COLUMNS if c not in frame.columns]
    if missing:
        raise ConfigError(f"not a per-layer kernel frame: missing columns {', '.join(missing)}")
    from ..report.output import write_text

    return write_text(Path(path), frame.to_csv(index=False, columns=list(KERNEL_COLUMNS),
                                               float_format="%.9g", lineterminator="\n"))
