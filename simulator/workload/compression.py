"""Gradient compression: bytes on the wire, (de)compression work on the GPU, and how a format
is aggregated.

A :class:`Compression` is a gradient format. For one bucket (or one parameter-server shard) of
``E`` elements, produced at ``e`` bytes per element (4 in fp32, 2 in mixed precision), it
answers three questions that :mod:`.training` turns into traffic and time:

(a) **Bytes on the wire** per worker (:meth:`Compression.wire_bytes`):

    ======== ============================================ ==========================================
    format   payload                                      reference
    ======== ============================================ ==========================================
    none     ``E e``
    fp16     ``2 E`` (a cast; ``E e`` when ``e <= 2``)     IEEE half
    bf16     ``2 E``, like fp16 (fp32's exponent range:    Kalamkar et al. 2019, "A Study of BFLOAT16
             no loss scaling, which is not modelled)       for Deep Learning Training"
    topk     ``K (e + 4)``, ``K = ceil(f E)``: kept        Aji & Heafield 2017, "Sparse
             values at gradient precision plus one         Communication for Distributed Gradient
             int32 index each                              Descent" (EMNLP); Lin et al. 2018, "Deep
                                                           Gradient Compression" (ICLR)
    onebit   ``ceil(E / 8)`` sign bits plus one fp32       Seide et al. 2014, "1-Bit Stochastic
             scale per bucket, or per ``chunk_elements``   Gradient Descent and its Application to
             elements                                      Data-Parallel Distributed Training of
                                                           Speech DNNs" (Interspeech); Tang et al.
                                                           2021, "1-bit Adam" (ICML)
    ======== ============================================ ==========================================

(b) **Work on the GPU**, modelled as memory-bound kernels: bytes of memory traffic divided by the
    device's memory bandwidth (the same peak-bandwidth convention as the engine's reductions,
    :attr:`~simulator.topology.devices.Device.reduce_bytes_per_s`). Compression runs after the
    bucket is ready and before its aggregation starts; decompression after it is received.

    * fp16/bf16 cast: read ``e`` and write 2 bytes per element; casting back reads 2, writes ``e``.
    * top-k selection: ``selection_passes`` (default 3) reads of the dense gradient, then the
      kept values and indices are written. Exact top-k on a GPU is a radix select over several
      passes; DGC estimates the threshold on a 0.1-1 % sample and selects in one more pass
      (Lin et al. 2018, section 3.3; Shi et al. 2019, "Understanding Top-k Sparsification in
      Distributed Deep Learning", measure the selection as a sizeable cost on GPUs). Three passes
      stand for threshold estimation, selection with compaction, and the residual update: an
      assumption, exposed as a parameter.
    * 1-bit: one pass for the scale (mean magnitude), one to quantise, then the bits written.
    * error feedback (top-k and 1-bit): what was not sent is kept in an fp32 residual added to the
      next step's gradient (Seide et al. 2014; Karimireddy et al. 2019, "Error Feedback Fixes
      SignSGD"): one extra read and one write of the residual, 8 bytes per element.
    * accumulating one received payload into a dense fp32 sum (:meth:`accumulate_traffic_bytes`):
      read the payload, read and write the touched elements of the sum. For a dense payload
      this is the engine's 3 bytes per message byte.

(c) **Which aggregation can carry it** (:attr:`Compression.summable`). fp16/bf16 payloads add up
    inside any all-reduce and parameter server as a smaller dense message. A top-k or 1-bit
    payload cannot be summed inside a ring's reduce-scatter without densifying (the sum of two
    sparse vectors has up to twice the entries; the sum of two sign vectors is not a sign
    vector), so all-reduce aggregation becomes an **all-gather** of every worker's payload (each
    rank receives ``(N - 1)`` payloads) followed by a local decompress-and-sum of all ``N``
    payloads, as in Aji & Heafield's and DGC's implementations. With a parameter server, workers
    push compressed payloads, the server decompresses each into its sum (charged on the server)
    and workers pull dense parameters (fp16 ones with fp16/bf16).

Left out: compressed all-reduce schemes that re-compress partial sums (1-bit Adam's two-phase
compressed all-reduce, PowerSGD's low-rank all-reduce), momentum correction and warm-up of DGC,
and any effect on convergence (more iterations to the same accuracy).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ..errors import ConfigError, unknown_name

__all__ = ["COMPRESSIONS", "Compression", "INDEX_BYTES", "RESIDUAL_BYTES", "SCALE_BYTES",
           "TOPK_SELECTION_PASSES", "get_compression", "parse_compression"]

#: Bytes of one top-k index (int32) and of one 1-bit scale (fp32).
INDEX_BYTES = 4
SCALE_BYTES = 4
#: Bytes per element of a half-precision value (fp16 and bf16).
HALF_BYTES = 2
#: Bytes per element of the fp32 error-feedback residual.
RESIDUAL_BYTES = 4
#: Memory passes over the dense gradient a top-k selection makes (module notes: an assumption).
TOPK_SELECTION_PASSES = 3.0
#: Formats whose payloads add up element-wise inside an all-reduce.
_SUMMABLE = ("none", "fp16", "bf16")
_KINDS = ("none", "fp16", "bf16", "topk", "onebit")


@dataclass(frozen=True)
class Compression:
    """A gradient format and its costs (see the module notes).

    Attributes
    ----------
    kind : {"none", "fp16", "bf16", "topk", "onebit"}
    fraction : float
        ``topk`` only: kept fraction of the elements, in (0, 1].
    error_feedback : bool
        ``topk`` and ``onebit`` only: keep an fp32 residual of what was not sent.
    chunk_elements : int
        ``onebit`` only: elements per fp32 scale; 0 means one scale per bucket (or shard).
    selection_passes : float
        ``topk`` only: memory passes over the dense gradient to select the top k.
    """

    kind: str = "none"
    fraction: float = 1.0
    error_feedback: bool = False
    chunk_elements: int = 0
    selection_passes: float = TOPK_SELECTION_PASSES

    def __post_init__(self):
        if self.kind not in _KINDS:
            raise unknown_name("compression", self.kind, _KINDS)
        if isinstance(self.fraction, bool) or not isinstance(self.fraction, (int, float)) \
                or not 0 < self.fraction <= 1:
            raise ConfigError(f"compression fraction must be in (0, 1], got {self.fraction!r}")
        if self.kind != "topk" and self.fraction != 1.0:
            raise ConfigError(f"fraction applies to topk only, not {self.kind}")
        if not isinstance(self.error_feedback, bool):
            raise ConfigError(f"error_feedback must be true or false, got "
                              f"{self.error_feedback!r}")
        if self.error_feedback and self.kind in _SUMMABLE:
            raise ConfigError(f"error_feedback applies to topk and onebit, not {self.kind}")
        if isinstance(self.chunk_elements, bool) or not isinstance(self.chunk_elements, int) \
                or self.chunk_elements < 0:
            raise ConfigError(f"chunk_elements must be an integer >= 0, got "
                              f"{self.chunk_elements!r}")
        if self.kind != "onebit" and self.chunk_elements:
            raise ConfigError(f"chunk_elements applies to onebit only, not {self.kind}")
        if not (isinstance(self.selection_passes, (int, float))
                and math.isfinite(self.selection_passes) and self.selection_passes >= 0):
            raise ConfigError(f"selection_passes must be >= 0, got {self.selection_passes!r}")
        if self.kind != "topk" and self.selection_passes != TOPK_SELECTION_PASSES:
            raise ConfigError(f"selection_passes applies to topk only, not {self.kind}")

    @property
    def label(self) -> str:
        """The name rows carry: ``none``, ``fp16``, ``bf16``, ``topk:0.01``, ``onebit``
        (``onebit:2048`` with a chunk), with ``+noef`` when error feedback is off."""
        text = self.kind
        if self.kind == "topk":
            text += f":{self.fraction:g}"
        if self.kind == "onebit" and self.chunk_elements:
            text += f":{self.chunk_elements}"
        if self.kind in ("topk", "onebit") and not self.error_feedback:
            text += "+noef"
        return text

    @property
    def identity(self) -> bool:
        """No compression at all."""
        return self.kind == "none"

    @property
    def summable(self) -> bool:
        """Payloads add up inside an all-reduce (otherwise aggregation is an all-gather)."""
        return self.kind in _SUMMABLE

    # -- sizes --------------------------------------------------------------------------------
    @staticmethod
    def elements(size_bytes: int, element_bytes: int) -> int:
        """Elements of a dense buffer of ``size_bytes`` at ``element_bytes`` each."""
        return math.ceil(int(size_bytes) / element_bytes)

    def kept(self, size_bytes: int, element_bytes: int) -> int:
        """Elements a top-k payload keeps: ``ceil(fraction E)`` (all of them otherwise)."""
        n = self.elements(size_bytes, element_bytes)
        return math.ceil(self.fraction * n - 1e-9) if self.kind == "topk" else n

    def _scales(self, n: int) -> int:
        return math.ceil(n / self.chunk_elements) if self.chunk_elements else 1

    def wire_bytes(self, size_bytes: int, element_bytes: int = 4) -> int:
        """Bytes one worker sends for a dense buffer of ``size_bytes`` (see the table)."""
        size_bytes = int(size_bytes)
        if size_bytes <= 0 or self.kind == "none":
            return max(size_bytes, 0)
        n = self.elements(size_bytes, element_bytes)
        if self.kind in ("fp16", "bf16"):
            return HALF_BYTES * n if element_bytes > HALF_BYTES else size_bytes
        if self.kind == "topk":
            return self.kept(size_bytes, element_bytes) * (element_bytes + INDEX_BYTES)
        return math.ceil(n / 8) + SCALE_BYTES * self._scales(n)     # onebit

    def pull_bytes(self, size_bytes: int, element_bytes: int = 4) -> int:
        """Bytes of parameters a parameter-server worker pulls: half with fp16/bf16, else
        dense."""
        if self.kind in ("fp16", "bf16"):
            return self.wire_bytes(size_bytes, element_bytes)
        return int(size_bytes)

    # -- memory traffic of the kernels -------------------------------------------------------
    def compress_traffic_bytes(self, size_bytes: int, element_bytes: int = 4) -> float:
        """Memory bytes a worker moves to compress a dense buffer of ``size_bytes``."""
        if size_bytes <= 0 or self.kind == "none":
            return 0.0
        n = self.elements(size_bytes, element_bytes)
        e = element_bytes
        feedback = 2 * RESIDUAL_BYTES * n if self.error_feedback else 0
        if self.kind in ("fp16", "bf16"):
            return float((e + HALF_BYTES) * n) if e > HALF_BYTES else 0.0
        if self.kind == "topk":
            return float(self.selection_passes * e * n + self.wire_bytes(size_bytes, e)
                         + feedback)
        return float(2 * e * n + self.wire_bytes(size_bytes, e) + feedback)   # onebit

    def unpack_traffic_bytes(self, size_bytes: int, element_bytes: int = 4) -> float:
        """Memory bytes to turn one dense half-precision buffer (an all-reduced or pulled
        fp16/bf16 payload) back into ``element_bytes`` per element; 0 for other formats."""
        if self.kind not in ("fp16", "bf16") or element_bytes <= HALF_BYTES or size_bytes <= 0:
            return 0.0
        return float((HALF_BYTES + element_bytes) * self.elements(size_bytes, element_bytes))

    def accumulate_traffic_bytes(self, size_bytes: int, element_bytes: int = 4) -> float:
        """Memory bytes to add ONE received payload of a dense ``size_bytes`` buffer into a
        dense sum: read the payload, read and write the elements it touches."""
        if size_bytes <= 0:
            return 0.0
        e = element_bytes
        touched = self.kept(size_bytes, e) if self.kind == "topk" \
            else self.elements(size_bytes, e)
        return float(self.wire_bytes(size_bytes, e) + 2 * e * touched)

    def gather_decompress_traffic_bytes(self, size_bytes: int, payloads: int,
                                        element_bytes: int = 4) -> float:
        """Memory bytes to sum ``payloads`` gathered compressed payloads into a zeroed dense
        buffer: one write of the buffer plus one accumulation per payload (∝ N payloads)."""
        if size_bytes <= 0:
            return 0.0
        return float(self.elements(size_bytes, element_bytes) * element_bytes
                     + payloads * self.accumulate_traffic_bytes(size_bytes, element_bytes))


#: Registered formats with their default parameters (top-k keeps 1 %, as in DGC's 99 %
#: sparsity at the low end; error feedback on for the biased formats).
COMPRESSIONS: dict[str, Compression] = {
    "none": Compression("none"),
    "fp16": Compression("fp16"),
    "bf16": Compression("bf16"),
    "topk": Compression("topk", fraction=0.01, error_feedback=True),
    "onebit": Compression("onebit", error_feedback=True),
}


def get_compression(name: str) -> Compression:
    """The registered format ``name`` with its default parameters."""
    if not isinstance(name, str) or name not in COMPRESSIONS:
        raise unknown_name("compression", name, COMPRESSIONS)
    return COMPRESSIONS[name]


def parse_compression(text: str) -> Compression:
    """A format from its command-line spelling: ``none``, ``fp16``, ``bf16``, ``topk``,
    ``topk:0.01`` (kept fraction), ``onebit`` or ``onebit:2048`` (elements per scale)."""
    match = re.fullmatch(r"\s*([a-z0-9]+)\s*(?::\s*([^\s]+)\s*)?", str(text))
    if not match:
        raise ConfigError(f"compression {text!r}: expected NAME or NAME:VALUE "
                          f"(fp16, bf16, topk:0.01, onebit)")
    name, value = match.groups()
    base = get_compression(name)
    if value is None:
        return base
    convert = {"topk": float, "onebit": int}.get(name)
    if convert is not None:
        try:
            number = convert(value)
        except ValueError:
            raise ConfigError(f"compression {text!r}: {value!r} is not "
                              f"{'a number' if convert is float else 'an integer'}") from None
        if name == "topk":
            return Compression("topk", fraction=number, error_feedback=True)
        return Compression("onebit", error_feedback=True, chunk_elements=number)
    raise ConfigError(f"compression {name} takes no value (got {text!r}); only topk:FRACTION "
                      f"and onebit:CHUNK do")
