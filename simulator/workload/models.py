"""Real neural networks as layer tables, counted from their architectures.

A :class:`Model` is a tuple of :class:`Layer` rows, each carrying what the simulator needs to
turn a training step into compute time and traffic: trainable parameters (hence gradient bytes
to aggregate), forward FLOPs per sample, and output activation bytes per sample. Every number is
*counted* by one helper per layer type (:func:`conv2d`, :func:`linear`, :func:`batchnorm`,
:func:`layernorm`, :func:`embedding`, :func:`attention`, :func:`pool2d`, :func:`elementwise`;
:func:`transformer_block` composes them), from the layer shapes of the published architecture;
nothing is copied from a table except the reference values the tests compare against.

Counting conventions
--------------------
* **FLOPs**: one multiply-add (MAC) is 2 FLOPs. Published CNN costs are usually MACs (He et al.
  2016 call 3.8e9 multiply-adds "3.8 billion FLOPs"; torchvision's "GFLOPS" column is GMACs),
  so compare ``forward_flops / 2`` with them. Counted per sample (one image, or one whole
  sequence), forward pass only; backward is conventionally about twice forward.
* **Included**: convolutions and linear layers (MACs, plus one add per output for a bias);
  attention score ``Q K^T`` and context ``P V`` matmuls (2 * seq^2 * d_model MACs per layer,
  the full square: dense kernels and Megatron-LM's count, Narayanan et al. 2021, do not halve it
  for a causal mask) and the softmax (:data:`SOFTMAX_FLOPS_PER_ELEMENT` per score); batch and
  layer norm (:data:`NORM_FLOPS_PER_ELEMENT` per element: sum and sum of squares, then a fused
  scale-and-shift); activations folded into the layer that feeds them
  (:data:`ACTIVATION_FLOPS_PER_ELEMENT`, nominal costs for ReLU, GELU, tanh); pooling (one
  compare or add per window element); residual adds (one add per element, plus the ReLU that
  follows in ResNet). GPT-2's output projection onto the vocabulary is counted (its weights are
  tied to the token embedding, so it has zero parameters of its own).
* **Excluded** (zero FLOPs): embedding look-ups and the sums of BERT's three embeddings,
  dropout, concatenation, flattening, and adaptive pools that are identities at the modelled
  input size (AlexNet's 6x6, VGG's 7x7).
* **Parameters**: trainable tensors only (weights, biases, norm scales and shifts); batch-norm
  running statistics are buffers, not parameters. A tied weight is counted once.
* **Activation bytes**: fp32 bytes of the tensor a layer outputs (an activation folded into the
  layer shares its output, as in-place ReLU does). The attention row also counts the
  ``heads x seq x seq`` probability matrix it keeps for the backward pass.

Architectures and sources
-------------------------
* AlexNet: torchvision's single-tower variant from Krizhevsky 2014, "One weird trick for
  parallelizing convolutional neural networks" (arXiv:1404.5997); 224x224 input.
* VGG-16: configuration D of Simonyan & Zisserman 2015 (ICLR), without batch norm.
* ResNet-50/101/152: He et al. 2016 (CVPR), Table 1, as torchvision builds them ("v1.5": the
  stride-2 of a downsampling bottleneck sits in its 3x3 convolution, which costs about 0.3
  GMACs more than the paper's 3.8e9 for ResNet-50).
* Inception-v3: Szegedy et al. 2016 (CVPR), "Rethinking the Inception Architecture", as
  torchvision builds it at 299x299; by default without the auxiliary classifier (only used
  during training; ``inception_v3(aux_logits=True)`` adds it).
* BERT-base/large: Devlin et al. 2019 (NAACL), uncased WordPiece vocabulary of 30,522 tokens,
  512 positions, 2 token types, with the pooler; default sequence length 512 (pre-training's
  final phase; the builders take ``seq_len``).
* GPT-2 small/XL: Radford et al. 2019, 50,257-token vocabulary, 1,024-token context, pre-norm
  blocks and a final layer norm; default sequence length 1,024.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

from simulator.errors import ConfigError, unknown_name

#: Bytes of one fp32 activation element.
FP32_BYTES = 4
#: FLOPs per multiply-add.
FLOPS_PER_MAC = 2
#: Batch/layer norm: sum and sum of squares (3 FLOPs), then a fused scale-and-shift (2 FLOPs).
NORM_FLOPS_PER_ELEMENT = 5
#: Softmax over attention scores: scale, subtract max, exp, sum, divide.
SOFTMAX_FLOPS_PER_ELEMENT = 5
#: Nominal cost of an activation function applied to each output element.
ACTIVATION_FLOPS_PER_ELEMENT = {None: 0, "relu": 1, "tanh": 4, "gelu": 8}


@dataclass(frozen=True)
class Layer:
    """One row of a model's layer table.

    Attributes
    ----------
    name : str
        Unique within the model; based on the reference implementation's module names.
    kind : str
        ``conv``, ``linear``, ``batchnorm``, ``layernorm``, ``embedding``, ``attention``,
        ``pool`` or ``add``.
    params : int
        Trainable parameters.
    forward_flops : float
        Forward FLOPs per sample (a multiply-add is 2 FLOPs).
    activation_bytes : int
        Output activation bytes per sample at fp32.
    """

    name: str
    kind: str
    params: int
    forward_flops: float
    activation_bytes: int

    def __post_init__(self):
        if self.params < 0 or self.forward_flops < 0 or self.activation_bytes < 0:
            raise ValueError(f"layer {self.name!r} has a negative count")


@dataclass(frozen=True)
class Model:
    """A network as a layer table, with the published parameter count it was checked against.

    Attributes
    ----------
    name : str
        Registry name.
    layers : tuple of Layer
        In forward order.
    input_desc : str
        One sample, in words (``"224x224x3 image"``, ``"sequence of 512 tokens"``).
    sample_unit : str
        ``"images"`` or ``"sequences"``: what throughput is counted in.
    published_params : int
        The parameter count the literature (or the reference implementation) gives.
    source : str
        Where ``published_params`` comes from.
    """

    name: str
    layers: tuple[Layer, ...]
    input_desc: str
    sample_unit: str
    published_params: int
    source: str

    def __post_init__(self):
        if self.sample_unit not in ("images", "sequences"):
            raise ValueError(f"sample_unit must be 'images' or 'sequences', not "
                             f"{self.sample_unit!r}")
        if not self.layers:
            raise ValueError(f"model {self.name!r} has no layers")

    @property
    def params(self) -> int:
        """Trainable parameters, summed over layers."""
        return sum(layer.params for layer in self.layers)

    @property
    def forward_flops(self) -> float:
        """Forward FLOPs per sample."""
        return float(sum(layer.forward_flops for layer in self.layers))

    @property
    def activation_bytes(self) -> int:
        """Output activation bytes per sample at fp32, summed over layers."""
        return sum(layer.activation_bytes for layer in self.layers)

    def gradient_bytes(self, bytes_per_param: int = 4) -> int:
        """Bytes of one full gradient (what data-parallel training all-reduces each step)."""
        return self.params * bytes_per_param


# --------------------------------------------------------------------------------------------
# One helper per layer type.  Spatial helpers return (layer, h_out, w_out).
# --------------------------------------------------------------------------------------------

def _pair(x) -> tuple[int, int]:
    return (x, x) if isinstance(x, int) else (int(x[0]), int(x[1]))


def _out_size(n: int, k: int, stride: int, pad: int) -> int:
    out = (n + 2 * pad - k) // stride + 1
    if out < 1:
        raise ValueError(f"window {k} with stride {stride}, pad {pad} does not fit size {n}")
    return out


def conv2d(name, cin, cout, k, stride, h_in, w_in, pad=0, bias=True, act=None):
    """2-D convolution; ``k`` and ``pad`` are an int or a (height, width) pair.

    Returns ``(layer, h_out, w_out)`` with ``h_out = (h_in + 2 pad - k) // stride + 1``.
    MACs are ``cout * h_out * w_out * cin * kh * kw``.
    """
    (kh, kw), (ph, pw) = _pair(k), _pair(pad)
    h, w = _out_size(h_in, kh, stride, ph), _out_size(w_in, kw, stride, pw)
    outputs = cout * h * w
    params = cout * cin * kh * kw + (cout if bias else 0)
    flops = (FLOPS_PER_MAC * outputs * cin * kh * kw + (outputs if bias else 0)
             + ACTIVATION_FLOPS_PER_ELEMENT[act] * outputs)
    return Layer(name, "conv", params, float(flops), outputs * FP32_BYTES), h, w


def pool2d(name, channels, k, stride, h_in, w_in, pad=0):
    """Max or average pooling: one compare or add per window element. Returns (layer, h, w)."""
    kh, kw = _pair(k)
    h, w = _out_size(h_in, kh, stride, pad), _out_size(w_in, kw, stride, pad)
    outputs = channels * h * w
    return Layer(name, "pool", 0, float(outputs * kh * kw), outputs * FP32_BYTES), h, w


def linear(name, fin, fout, bias=True, tokens=1, act=None, tied=False):
    """Fully connected layer applied to ``tokens`` positions (1 for an image classifier).

    ``tied=True`` marks a weight shared with an earlier layer (GPT-2's output projection): its
    FLOPs count, its parameters do not.
    """
    params = 0 if tied else fin * fout + (fout if bias else 0)
    outputs = fout * tokens
    flops = (FLOPS_PER_MAC * fin * outputs + (outputs if bias else 0)
             + ACTIVATION_FLOPS_PER_ELEMENT[act] * outputs)
    return Layer(name, "linear", params, float(flops), outputs * FP32_BYTES)


def batchnorm(name, channels, h, w, act=None):
    """Batch norm over a ``channels x h x w`` map: a scale and a shift per channel."""
    elements = channels * h * w
    flops = (NORM_FLOPS_PER_ELEMENT + ACTIVATION_FLOPS_PER_ELEMENT[act]) * elements
    return Layer(name, "batchnorm", 2 * channels, float(flops), elements * FP32_BYTES)


def layernorm(name, dim, tokens):
    """Layer norm over ``dim`` features at each of ``tokens`` positions."""
    elements = dim * tokens
    return Layer(name, "layernorm", 2 * dim, float(NORM_FLOPS_PER_ELEMENT * elements),
                 elements * FP32_BYTES)


def embedding(name, num_embeddings, dim, tokens):
    """Embedding table; a look-up costs no FLOPs."""
    return Layer(name, "embedding", num_embeddings * dim, 0.0, dim * tokens * FP32_BYTES)


def elementwise(name, kind, elements, flops_per_element):
    """Parameter-free element-wise op (residual add, optionally with the ReLU after it)."""
    return Layer(name, kind, 0, float(flops_per_element * elements), elements * FP32_BYTES)


def attention(name, seq_len, d_model, n_heads):
    """Scaled dot-product attention core, without its projections.

    ``Q K^T`` and ``P V`` cost ``seq_len^2 * d_model`` MACs each, summed over heads; the softmax
    touches ``n_heads * seq_len^2`` scores. Activation bytes count the probabilities (kept for
    backward) and the context output.
    """
    if d_model % n_heads:
        raise ValueError(f"d_model {d_model} is not divisible by {n_heads} heads")
    scores = n_heads * seq_len * seq_len
    flops = 2 * FLOPS_PER_MAC * seq_len * seq_len * d_model + SOFTMAX_FLOPS_PER_ELEMENT * scores
    return Layer(name, "attention", 0, float(flops),
                 (scores + seq_len * d_model) * FP32_BYTES)


def transformer_block(prefix, d_model, n_heads, d_ff, seq_len, pre_norm):
    """One encoder/decoder block: fused QKV projection, attention, output projection, GELU MLP,
    two residual adds and two layer norms; ``pre_norm`` puts each norm before its sub-block
    (GPT-2) instead of after the residual add (BERT). Returns a tuple of layers."""
    s, d = seq_len, d_model
    attn = (linear(f"{prefix}.attn.qkv", d, 3 * d, tokens=s),
            attention(f"{prefix}.attn.core", s, d, n_heads),
            linear(f"{prefix}.attn.proj", d, d, tokens=s),
            elementwise(f"{prefix}.attn.residual", "add", s * d, 1))
    mlp = (linear(f"{prefix}.mlp.fc", d, d_ff, tokens=s, act="gelu"),
           linear(f"{prefix}.mlp.proj", d_ff, d, tokens=s),
           elementwise(f"{prefix}.mlp.residual", "add", s * d, 1))
    norm1, norm2 = layernorm(f"{prefix}.ln_1", d, s), layernorm(f"{prefix}.ln_2", d, s)
    if pre_norm:
        return (norm1, *attn, norm2, *mlp)
    return (*attn, norm1, *mlp, norm2)


def _conv_bn(layers, name, cin, cout, k, stride, h, w, pad=0, act="relu"):
    """Bias-free convolution followed by batch norm (and ReLU): appends both, returns (h, w)."""
    conv, h, w = conv2d(f"{name}.conv", cin, cout, k, stride, h, w, pad=pad, bias=False)
    layers += [conv, batchnorm(f"{name}.bn", cout, h, w, act=act)]
    return h, w


# --------------------------------------------------------------------------------------------
# Builders
# --------------------------------------------------------------------------------------------

def _check_seq_len(seq_len, max_positions):
    if not isinstance(seq_len, int) or not 1 <= seq_len <= max_positions:
        raise ConfigError(f"seq_len must be an integer in 1..{max_positions}, not {seq_len!r}")


@lru_cache(maxsize=None)
def alexnet() -> Model:
    """torchvision's AlexNet (Krizhevsky 2014 single-tower variant) at 224x224."""
    layers, c, h, w = [], 3, 224, 224
    plan = [(64, 11, 4, 2, True), (192, 5, 1, 2, True), (384, 3, 1, 1, False),
            (256, 3, 1, 1, False), (256, 3, 1, 1, True)]  # cout, k, stride, pad, maxpool after
    index = 0
    for cout, k, stride, pad, pool in plan:
        conv, h, w = conv2d(f"features.{index}", c, cout, k, stride, h, w, pad=pad, act="relu")
        layers.append(conv)
        c, index = cout, index + 2
        if pool:
            mp, h, w = pool2d(f"features.{index}", c, 3, 2, h, w)
            layers.append(mp)
            index += 1
    layers += [linear("classifier.1", c * h * w, 4096, act="relu"),
               linear("classifier.4", 4096, 4096, act="relu"),
               linear("classifier.6", 4096, 1000)]
    return Model("alexnet", tuple(layers), "224x224x3 image", "images", 61_100_840,
                 "torchvision.models.alexnet (61,100,840 params), the single-tower variant of "
                 "Krizhevsky 2014, 'One weird trick for parallelizing convolutional neural "
                 "networks', arXiv:1404.5997")


#: VGG networks (no batch norm) as Simonyan & Zisserman 2015 define them and torchvision builds
#: them: name -> (configuration of Table 1, output channels of its 3x3 convolutions with "M" a
#: 2x2 max-pool (torchvision's ``cfgs``), the paper's rounded millions of parameters (Table 2),
#: torchvision's exact count (``VGG*_Weights`` num_params)).
_VGG = {
    "vgg11": ("A", (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"),
              133, 132_863_336),
    "vgg13": ("B", (64, 64, "M", 128, 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"),
              133, 133_047_848),
    "vgg16": ("D", (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M",
                    512, 512, 512, "M"), 138, 138_357_544),
    "vgg19": ("E", (64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512,
                    "M", 512, 512, 512, 512, "M"), 144, 143_667_240),
}


def _vgg(name: str) -> Model:
    """A :data:`_VGG` network at 224x224, named as torchvision names its layers."""
    config, cfg, rounded_m, exact = _VGG[name]
    layers, c, h, w, index = [], 3, 224, 224, 0
    for item in cfg:
        if item == "M":
            mp, h, w = pool2d(f"features.{index}", c, 2, 2, h, w)
            layers.append(mp)
            index += 1
        else:
            conv, h, w = conv2d(f"features.{index}", c, item, 3, 1, h, w, pad=1, act="relu")
            layers.append(conv)
            c, index = item, index + 2  # the ReLU module is folded into the conv row
    layers += [linear("classifier.0", c * h * w, 4096, act="relu"),
               linear("classifier.3", 4096, 4096, act="relu"),
               linear("classifier.6", 4096, 1000)]
    return Model(name, tuple(layers), "224x224x3 image", "images", exact,
                 f"Simonyan & Zisserman 2015 (ICLR), Table 2: {rounded_m}M for configuration "
                 f"{config}; exact count {exact:,} from torchvision.models.{name} "
                 f"({name.upper()}_Weights num_params)")


def _vgg_builder(name: str) -> Callable[[], Model]:
    """The registry builder of one :data:`_VGG` network (built once)."""
    builder = lru_cache(maxsize=None)(lambda: _vgg(name))
    builder.__name__ = name
    builder.__doc__ = f"VGG ({name}, configuration {_VGG[name][0]}, no batch norm) at 224x224."
    return builder


vgg11, vgg13, vgg16, vgg19 = (_vgg_builder(name) for name in _VGG)


def _basic_block(layers, prefix, cin, width, stride, h, w):
    """torchvision BasicBlock (two 3x3 convolutions, expansion 1, stride in the first);
    appends layers, returns shape."""
    h1, w1 = _conv_bn(layers, f"{prefix}.conv1", cin, width, 3, stride, h, w, pad=1)
    h2, w2 = _conv_bn(layers, f"{prefix}.conv2", width, width, 3, 1, h1, w1, pad=1, act=None)
    if stride != 1 or cin != width:
        _conv_bn(layers, f"{prefix}.downsample", cin, width, 1, stride, h, w, act=None)
    layers.append(elementwise(f"{prefix}.add", "add", width * h2 * w2, 2))  # add, then ReLU
    return width, h2, w2


def _bottleneck(layers, prefix, cin, width, stride, h, w):
    """torchvision Bottleneck (expansion 4, stride in the 3x3); appends layers, returns shape."""
    cout = 4 * width
    h1, w1 = _conv_bn(layers, f"{prefix}.conv1", cin, width, 1, 1, h, w)
    h2, w2 = _conv_bn(layers, f"{prefix}.conv2", width, width, 3, stride, h1, w1, pad=1)
    h3, w3 = _conv_bn(layers, f"{prefix}.conv3", width, cout, 1, 1, h2, w2, act=None)
    if stride != 1 or cin != cout:
        _conv_bn(layers, f"{prefix}.downsample", cin, cout, 1, stride, h, w, act=None)
    layers.append(elementwise(f"{prefix}.add", "add", cout * h3 * w3, 2))  # add, then ReLU
    return cout, h3, w3


def _resnet(name, blocks, published, block=None):
    """A ResNet at 224x224: stem, four stages of ``blocks`` residual blocks (bottlenecks, or
    ``block``), global pooling, the classifier."""
    block = block or _bottleneck
    layers = []
    h, w = _conv_bn(layers, "stem", 3, 64, 7, 2, 224, 224, pad=3)
    mp, h, w = pool2d("stem.maxpool", 64, 3, 2, h, w, pad=1)
    layers.append(mp)
    c = 64
    for stage, (count, width) in enumerate(zip(blocks, (64, 128, 256, 512)), start=1):
        for index in range(count):
            stride = 2 if index == 0 and stage > 1 else 1
            c, h, w = block(layers, f"layer{stage}.{index}", c, width, stride, h, w)
    gap, h, w = pool2d("avgpool", c, (h, w), 1, h, w)
    layers += [gap, linear("fc", c, 1000)]
    return Model(name, tuple(layers), "224x224x3 image", "images", published,
                 f"He et al. 2016 (CVPR), Table 1; exact count {published:,} from "
                 f"torchvision.models.{name}")


@lru_cache(maxsize=None)
def resnet18() -> Model:
    """ResNet-18 (torchvision, basic blocks) at 224x224."""
    return _resnet("resnet18", (2, 2, 2, 2), 11_689_512, block=_basic_block)


@lru_cache(maxsize=None)
def resnet34() -> Model:
    """ResNet-34 (torchvision, basic blocks) at 224x224."""
    return _resnet("resnet34", (3, 4, 6, 3), 21_797_672, block=_basic_block)


@lru_cache(maxsize=None)
def resnet50() -> Model:
    """ResNet-50 (torchvision v1.5) at 224x224."""
    return _resnet("resnet50", (3, 4, 6, 3), 25_557_032)


@lru_cache(maxsize=None)
def resnet101() -> Model:
    """ResNet-101 (torchvision v1.5) at 224x224."""
    return _resnet("resnet101", (3, 4, 23, 3), 44_549_160)


@lru_cache(maxsize=None)
def resnet152() -> Model:
    """ResNet-152 (torchvision v1.5) at 224x224."""
    return _resnet("resnet152", (3, 8, 36, 3), 60_192_808)


# Inception-v3 modules, named as torchvision names them.  Each appends its layers and returns
# (channels_out, h, w); branches are concatenated along channels (free).

def _inception_a(layers, p, cin, pool_features, h, w):
    _conv_bn(layers, f"{p}.branch1x1", cin, 64, 1, 1, h, w)
    _conv_bn(layers, f"{p}.branch5x5_1", cin, 48, 1, 1, h, w)
    _conv_bn(layers, f"{p}.branch5x5_2", 48, 64, 5, 1, h, w, pad=2)
    _conv_bn(layers, f"{p}.branch3x3dbl_1", cin, 64, 1, 1, h, w)
    _conv_bn(layers, f"{p}.branch3x3dbl_2", 64, 96, 3, 1, h, w, pad=1)
    _conv_bn(layers, f"{p}.branch3x3dbl_3", 96, 96, 3, 1, h, w, pad=1)
    layers.append(pool2d(f"{p}.avgpool", cin, 3, 1, h, w, pad=1)[0])
    _conv_bn(layers, f"{p}.branch_pool", cin, pool_features, 1, 1, h, w)
    return 64 + 64 + 96 + pool_features, h, w


def _inception_b(layers, p, cin, h, w):
    ho, wo = _conv_bn(layers, f"{p}.branch3x3", cin, 384, 3, 2, h, w)
    _conv_bn(layers, f"{p}.branch3x3dbl_1", cin, 64, 1, 1, h, w)
    _conv_bn(layers, f"{p}.branch3x3dbl_2", 64, 96, 3, 1, h, w, pad=1)
    _conv_bn(layers, f"{p}.branch3x3dbl_3", 96, 96, 3, 2, h, w)
    layers.append(pool2d(f"{p}.maxpool", cin, 3, 2, h, w)[0])
    return 384 + 96 + cin, ho, wo


def _inception_c(layers, p, cin, c7, h, w):
    row, col = ((1, 7), (0, 3)), ((7, 1), (3, 0))  # (kernel, pad) of the factorised 7x7
    _conv_bn(layers, f"{p}.branch1x1", cin, 192, 1, 1, h, w)
    _conv_bn(layers, f"{p}.branch7x7_1", cin, c7, 1, 1, h, w)
    _conv_bn(layers, f"{p}.branch7x7_2", c7, c7, row[0], 1, h, w, pad=row[1])
    _conv_bn(layers, f"{p}.branch7x7_3", c7, 192, col[0], 1, h, w, pad=col[1])
    _conv_bn(layers, f"{p}.branch7x7dbl_1", cin, c7, 1, 1, h, w)
    _conv_bn(layers, f"{p}.branch7x7dbl_2", c7, c7, col[0], 1, h, w, pad=col[1])
    _conv_bn(layers, f"{p}.branch7x7dbl_3", c7, c7, row[0], 1, h, w, pad=row[1])
    _conv_bn(layers, f"{p}.branch7x7dbl_4", c7, c7, col[0], 1, h, w, pad=col[1])
    _conv_bn(layers, f"{p}.branch7x7dbl_5", c7, 192, row[0], 1, h, w, pad=row[1])
    layers.append(pool2d(f"{p}.avgpool", cin, 3, 1, h, w, pad=1)[0])
    _conv_bn(layers, f"{p}.branch_pool", cin, 192, 1, 1, h, w)
    return 4 * 192, h, w


def _inception_d(layers, p, cin, h, w):
    _conv_bn(layers, f"{p}.branch3x3_1", cin, 192, 1, 1, h, w)
    ho, wo = _conv_bn(layers, f"{p}.branch3x3_2", 192, 320, 3, 2, h, w)
    _conv_bn(layers, f"{p}.branch7x7x3_1", cin, 192, 1, 1, h, w)
    _conv_bn(layers, f"{p}.branch7x7x3_2", 192, 192, (1, 7), 1, h, w, pad=(0, 3))
    _conv_bn(layers, f"{p}.branch7x7x3_3", 192, 192, (7, 1), 1, h, w, pad=(3, 0))
    _conv_bn(layers, f"{p}.branch7x7x3_4", 192, 192, 3, 2, h, w)
    layers.append(pool2d(f"{p}.maxpool", cin, 3, 2, h, w)[0])
    return 320 + 192 + cin, ho, wo


def _inception_e(layers, p, cin, h, w):
    _conv_bn(layers, f"{p}.branch1x1", cin, 320, 1, 1, h, w)
    _conv_bn(layers, f"{p}.branch3x3_1", cin, 384, 1, 1, h, w)
    _conv_bn(layers, f"{p}.branch3x3_2a", 384, 384, (1, 3), 1, h, w, pad=(0, 1))
    _conv_bn(layers, f"{p}.branch3x3_2b", 384, 384, (3, 1), 1, h, w, pad=(1, 0))
    _conv_bn(layers, f"{p}.branch3x3dbl_1", cin, 448, 1, 1, h, w)
    _conv_bn(layers, f"{p}.branch3x3dbl_2", 448, 384, 3, 1, h, w, pad=1)
    _conv_bn(layers, f"{p}.branch3x3dbl_3a", 384, 384, (1, 3), 1, h, w, pad=(0, 1))
    _conv_bn(layers, f"{p}.branch3x3dbl_3b", 384, 384, (3, 1), 1, h, w, pad=(1, 0))
    layers.append(pool2d(f"{p}.avgpool", cin, 3, 1, h, w, pad=1)[0])
    _conv_bn(layers, f"{p}.branch_pool", cin, 192, 1, 1, h, w)
    return 320 + 2 * 384 + 2 * 384 + 192, h, w


def _inception_aux(layers, p, cin, h, w):
    """Auxiliary classifier on the 17x17 map (training only)."""
    ap, h, w = pool2d(f"{p}.avgpool", cin, 5, 3, h, w)
    layers.append(ap)
    h, w = _conv_bn(layers, f"{p}.conv0", cin, 128, 1, 1, h, w)
    h, w = _conv_bn(layers, f"{p}.conv1", 128, 768, 5, 1, h, w)
    layers.append(linear(f"{p}.fc", 768 * h * w, 1000))


@lru_cache(maxsize=None)
def inception_v3(aux_logits: bool = False) -> Model:
    """Inception-v3 (torchvision) at 299x299, optionally with the auxiliary classifier."""
    layers = []
    h, w = _conv_bn(layers, "Conv2d_1a_3x3", 3, 32, 3, 2, 299, 299)
    h, w = _conv_bn(layers, "Conv2d_2a_3x3", 32, 32, 3, 1, h, w)
    h, w = _conv_bn(layers, "Conv2d_2b_3x3", 32, 64, 3, 1, h, w, pad=1)
    mp, h, w = pool2d("maxpool1", 64, 3, 2, h, w)
    layers.append(mp)
    h, w = _conv_bn(layers, "Conv2d_3b_1x1", 64, 80, 1, 1, h, w)
    h, w = _conv_bn(layers, "Conv2d_4a_3x3", 80, 192, 3, 1, h, w)
    mp, h, w = pool2d("maxpool2", 192, 3, 2, h, w)
    layers.append(mp)
    c = 192
    for name, pool_features in (("Mixed_5b", 32), ("Mixed_5c", 64), ("Mixed_5d", 64)):
        c, h, w = _inception_a(layers, name, c, pool_features, h, w)
    c, h, w = _inception_b(layers, "Mixed_6a", c, h, w)
    for name, c7 in (("Mixed_6b", 128), ("Mixed_6c", 160), ("Mixed_6d", 160), ("Mixed_6e", 192)):
        c, h, w = _inception_c(layers, name, c, c7, h, w)
    if aux_logits:
        _inception_aux(layers, "AuxLogits", c, h, w)
    c, h, w = _inception_d(layers, "Mixed_7a", c, h, w)
    c, h, w = _inception_e(layers, "Mixed_7b", c, h, w)
    c, h, w = _inception_e(layers, "Mixed_7c", c, h, w)
    gap, h, w = pool2d("avgpool", c, (h, w), 1, h, w)
    layers += [gap, linear("fc", c, 1000)]
    published = 27_161_264 if aux_logits else 23_834_568
    return Model("inception_v3", tuple(layers), "299x299x3 image", "images", published,
                 "Szegedy et al. 2016 (CVPR), 'Rethinking the Inception Architecture for "
                 "Computer Vision'; torchvision.models.inception_v3 has 27,161,264 params with "
                 "its AuxLogits head (3,326,696), 23,834,568 without")


_BERT_VOCAB, _BERT_POSITIONS, _BERT_TOKEN_TYPES = 30_522, 512, 2


def _bert(name, d, n_layers, n_heads, seq_len, published):
    _check_seq_len(seq_len, _BERT_POSITIONS)
    layers = [embedding("embeddings.word", _BERT_VOCAB, d, seq_len),
              embedding("embeddings.position", _BERT_POSITIONS, d, seq_len),
              embedding("embeddings.token_type", _BERT_TOKEN_TYPES, d, seq_len),
              layernorm("embeddings.norm", d, seq_len)]
    for i in range(n_layers):
        layers += transformer_block(f"encoder.{i}", d, n_heads, 4 * d, seq_len, pre_norm=False)
    layers.append(linear("pooler", d, d, act="tanh"))  # on the [CLS] position only
    return Model(name, tuple(layers), f"sequence of {seq_len} tokens", "sequences", published,
                 f"Devlin et al. 2019 (NAACL), Section 3: {published // 10**6}M parameters")


@lru_cache(maxsize=None)
def bert_base(seq_len: int = 512) -> Model:
    """BERT-base (12 layers, hidden 768, 12 heads, intermediate 3072)."""
    return _bert("bert_base", 768, 12, 12, seq_len, 110_000_000)


@lru_cache(maxsize=None)
def bert_large(seq_len: int = 512) -> Model:
    """BERT-large (24 layers, hidden 1024, 16 heads, intermediate 4096)."""
    return _bert("bert_large", 1024, 24, 16, seq_len, 340_000_000)


_GPT2_VOCAB, _GPT2_CONTEXT = 50_257, 1024


def _gpt2(name, d, n_layers, n_heads, seq_len, published, paper):
    _check_seq_len(seq_len, _GPT2_CONTEXT)
    layers = [embedding("wte", _GPT2_VOCAB, d, seq_len),
              embedding("wpe", _GPT2_CONTEXT, d, seq_len)]
    for i in range(n_layers):
        layers += transformer_block(f"h.{i}", d, n_heads, 4 * d, seq_len, pre_norm=True)
    layers += [layernorm("ln_f", d, seq_len),
               linear("lm_head", d, _GPT2_VOCAB, bias=False, tokens=seq_len, tied=True)]
    return Model(name, tuple(layers), f"sequence of {seq_len} tokens", "sequences", published,
                 f"Radford et al. 2019, Table 2 lists {paper}; the released checkpoint holds "
                 f"{published:,} (output projection tied to the token embedding)")


@lru_cache(maxsize=None)
def gpt2_small(seq_len: int = 1024) -> Model:
    """GPT-2 small (12 layers, d_model 768, 12 heads)."""
    return _gpt2("gpt2_small", 768, 12, 12, seq_len, 124_439_808, "117M")


@lru_cache(maxsize=None)
def gpt2_xl(seq_len: int = 1024) -> Model:
    """GPT-2 XL (48 layers, d_model 1600, 25 heads)."""
    return _gpt2("gpt2_xl", 1600, 48, 25, seq_len, 1_557_611_200, "1542M")


@lru_cache(maxsize=None)
def small_cnn() -> Model:
    """The small CNN ``clustersim measure training`` trains on CPUs (32x32x3 images, 10
    classes): two 3x3 convolutions with ReLU and 2x2 max-pooling, then two fully connected
    layers; :func:`simulator.measure.training.build_small_cnn` is the same network in torch."""
    conv1, h, w = conv2d("conv1", 3, 32, 3, 1, 32, 32, pad=1, act="relu")
    pool1, h, w = pool2d("pool1", 32, 2, 2, h, w)
    conv2, h, w = conv2d("conv2", 32, 64, 3, 1, h, w, pad=1, act="relu")
    pool2, h, w = pool2d("pool2", 64, 2, 2, h, w)
    layers = (conv1, pool1, conv2, pool2, linear("fc1", 64 * h * w, 256, act="relu"),
              linear("fc2", 256, 10))
    return Model("small_cnn", layers, "32x32x3 image", "images", 1_070_794,
                 "this project's measuring model (simulator/measure/training.py): "
                 "896 + 18,496 + 1,048,832 + 2,570 parameters")


#: Registry: name -> builder with default arguments.
MODELS: dict[str, Callable[[], Model]] = {
    "alexnet": alexnet,
    "vgg11": vgg11,
    "vgg13": vgg13,
    "vgg16": vgg16,
    "vgg19": vgg19,
    "resnet18": resnet18,
    "resnet34": resnet34,
    "resnet50": resnet50,
    "resnet101": resnet101,
    "resnet152": resnet152,
    "inception_v3": inception_v3,
    "bert_base": bert_base,
    "bert_large": bert_large,
    "gpt2_small": gpt2_small,
    "gpt2_xl": gpt2_xl,
    "small_cnn": small_cnn,
}


def get_model(name: str) -> Model:
    """The registered model called ``name`` (built once, then cached).

    ``NAME:seqN`` is a sequence model at sequence length ``N`` (``bert_large:seq128``: BERT-large
    as pre-trained at 128 tokens) for the models whose builder takes ``seq_len``.

    Raises
    ------
    ConfigError
        If ``name`` is not registered (the message lists the valid names), or names a sequence
        length a model does not take.
    """
    base, variant = name, ""
    if isinstance(name, str) and ":" in name:
        base, variant = name.split(":", 1)
    try:
        builder = MODELS[base]
    except (KeyError, TypeError):
        raise unknown_name("model", name, MODELS) from None
    if not variant:
        return builder()
    import inspect
    import re

    match = re.fullmatch(r"seq(\d+)", variant)
    if match is None or "seq_len" not in inspect.signature(builder).parameters:
        takes = [n for n, b in MODELS.items() if "seq_len" in inspect.signature(b).parameters]
        raise ConfigError(f"model {name!r}: the only variant is NAME:seqN, a sequence length, "
                          f"for {', '.join(takes)}")
    return builder(seq_len=int(match[1]))
