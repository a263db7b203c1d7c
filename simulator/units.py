"""Units: the one place where quantities written by users become SI numbers, and back.

Inside clustersim every quantity is SI and carries its unit in its name: sizes in bytes (``int``),
times in seconds, bandwidths in bytes per second, compute rates in FLOP/s. Users write units; the
``parse_*`` functions convert at the boundary (scenario, topology file, CLI) and the ``format_*``
functions convert back for display.

Conventions, with numbers:

* ``B`` is a byte, ``b`` is a bit. ``100 Gbps`` = ``100 Gb/s`` = ``100 Gbit/s`` = 1e11 bits/s =
  12.5e9 bytes/s, while ``100 GB/s`` = ``100 GBps`` = 1e11 bytes/s. NICs are quoted in bits (a
  400G NIC is 400 Gbps = 50 GB/s); NVLink and nccl-tests ``busbw`` in bytes.
* Decimal prefixes are powers of ten and binary prefixes powers of two, never mixed: ``1 MB`` =
  1_000_000 bytes, ``1 MiB`` = 1_048_576 bytes, ``1 GB/s`` = 1e9 bytes/s, ``1 GiB/s`` = 2**30.
* Case does not matter except for b/B: ``mib`` = ``MiB``, ``gbps`` = ``Gbps``, ``MS`` = ``ms``,
  but ``Mb`` is a megabit (125_000 bytes) and ``MB`` a megabyte. There are no binary bit units, so
  ``kib`` means ``KiB``. Two spellings are refused as sizes because people mean bytes by them:
  a bare ``b`` (write ``B``) and all-lowercase ``kb``/``mb``/``gb``/``tb`` (write ``MB`` or
  ``Mb``). In bandwidths ``bps`` and ``gbps`` are bits, as everywhere.
* Times: ``h``, ``min``, ``s``, ``ms``, ``us`` = ``µs`` (micro sign U+00B5 or Greek mu U+03BC),
  ``ns``, ``ps``. ``2 us`` = 2e-6 s.
* A bare number is already SI: ``"512"`` is 512 bytes, ``"0.5"`` 0.5 s, ``"1e9"`` 1e9 bytes/s.

Conversion is exact (:class:`fractions.Fraction`) and rounded once at the end, so
``parse_duration("3 us") == 3e-6`` holds exactly; a size must come out a whole number of bytes
(``"1.5 KiB"`` is 1536, ``"1.5 B"`` is an error). Every unit is one row of :data:`UNITS_TABLE`;
the parsers, the formatters and :func:`describe_units` all read it, so they cannot drift.
"""

from __future__ import annotations

import math
import numbers
import re
from fractions import Fraction
from typing import NamedTuple

from simulator.errors import UnitError

__all__ = [
    "UNITS_TABLE", "Unit", "describe_units",
    "parse_size", "parse_sizes", "parse_duration", "parse_bandwidth", "parse_rate",
    "format_size", "format_duration", "format_bandwidth",
]


class Unit(NamedTuple):
    """One accepted spelling: ``value_SI = number * factor`` (``factor`` is exact)."""

    kind: str  # "size" (bytes), "duration" (s), "bandwidth" (bytes/s), "rate" (FLOP/s)
    spelling: str
    factor: Fraction
    meaning: str


SI_UNIT = {"size": "bytes", "duration": "s", "bandwidth": "bytes/s", "rate": "FLOP/s"}

_DECIMAL = [("K", "kilo", 10**3), ("M", "mega", 10**6), ("G", "giga", 10**9), ("T", "tera", 10**12)]
_BINARY = [("Ki", "kibi", 2**10), ("Mi", "mebi", 2**20), ("Gi", "gibi", 2**30),
           ("Ti", "tebi", 2**40)]
_RATE = _DECIMAL + [("P", "peta", 10**15), ("E", "exa", 10**18)]


def _rows():
    F = Fraction
    yield Unit("size", "B", F(1), "byte")
    yield from (Unit("size", f"{p}B", F(f), f"{n}byte (decimal)") for p, n, f in _DECIMAL)
    yield from (Unit("size", f"{p}B", F(f), f"{n}byte (binary)") for p, n, f in _BINARY)
    yield from (Unit("size", f"{p}b", F(f, 8), f"{n}bit = {f} bits") for p, n, f in _DECIMAL)
    for spelling, factor, meaning in [
        ("h", 3600, "hour"), ("min", 60, "minute"), ("s", 1, "second"),
        ("ms", F(1, 10**3), "millisecond"), ("us", F(1, 10**6), "microsecond"),
        ("\u00b5s", F(1, 10**6), "microsecond (micro sign)"),
        ("\u03bcs", F(1, 10**6), "microsecond (Greek mu)"),
        ("ns", F(1, 10**9), "nanosecond"), ("ps", F(1, 10**12), "picosecond"),
    ]:
        yield Unit("duration", spelling, F(factor), meaning)
    for suffix in ("/s", "ps"):
        yield Unit("bandwidth", f"B{suffix}", F(1), "byte per second")
        for p, n, f in _DECIMAL + _BINARY:
            yield Unit("bandwidth", f"{p}B{suffix}", F(f), f"{n}byte per second")
    for suffix in ("bps", "b/s", "bit/s"):
        if suffix != "b/s":  # a bare "b/s" is too easily a typo for "B/s"
            yield Unit("bandwidth", suffix, F(1, 8), "bit per second")
        for p, n, f in _DECIMAL:
            yield Unit("bandwidth", f"{p}{suffix}", F(f, 8), f"{n}bit per second = {f} bits/s")
    for suffix in ("FLOPS", "FLOP/s"):
        yield Unit("rate", suffix, F(1), "floating-point operation per second")
        for p, n, f in _RATE:
            yield Unit("rate", f"{p}{suffix}", F(f), f"{n}FLOP per second")


UNITS_TABLE: tuple[Unit, ...] = tuple(_rows())


def _key(spelling: str) -> str:
    """Case-fold everything except b/B; binary prefixes have no bit units, so ``kib`` is KiB."""
    return "".join(c if c in "bB" else c.lower() for c in spelling).replace("ib", "iB")


_BY_KEY = {_key(u.spelling): u for u in UNITS_TABLE}
assert len(_BY_KEY) == len(UNITS_TABLE), "two unit spellings collide after case folding"
_BY_SPELLING = {u.spelling: u for u in UNITS_TABLE}
# ASCII digits only; a 1-3 digit exponent keeps "1e999999999" from building a huge Fraction.
_NUMBER = re.compile(r"\s*([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d{1,3})?)\s*(.*?)\s*",
                     re.ASCII | re.DOTALL)


def _accepted(kind: str) -> str:
    names = ", ".join(u.spelling for u in UNITS_TABLE if u.kind == kind)
    return f"accepted: {names}, or a bare number in {SI_UNIT[kind]}"


def _error(kind: str, value, reason: str, what: str | None) -> UnitError:
    """The single error format: ``[what: ]cannot parse KIND 'INPUT': REASON; accepted: ...``."""
    text = value if isinstance(value, str) else repr(value)
    head = f"{what}: " if what else ""
    return UnitError(f"{head}cannot parse {kind} {text!r}: {reason}; {_accepted(kind)}")


def _parse(value, kind: str, what: str | None) -> Fraction:
    """Shared core: turn a number or a 'NUMBER UNIT' string into an exact, non-negative SI value."""
    if isinstance(value, bool) or not isinstance(value, (str, numbers.Real)):
        reason = f"expected a number or a string, got {type(value).__name__}"
        raise _error(kind, value, reason, what)
    if isinstance(value, str):
        match = _NUMBER.fullmatch(value)
        if match is None:
            raise _error(kind, value, "expected a number followed by an optional unit", what)
        number, spelling = Fraction(match[1]), match[2]
        unit = _BY_KEY.get(_key(spelling)) if spelling else Unit(kind, "", Fraction(1), "")
        if unit is None:
            raise _error(kind, value, f"unknown unit {spelling!r}", what)
        if unit.kind != kind:
            per_second = kind == "bandwidth" and _key(spelling + "/s") in _BY_KEY
            hint = f" (did you mean '{spelling}/s'?)" if per_second else ""
            reason = f"{spelling!r} is a {unit.kind} unit, but a {kind} was expected{hint}"
            raise _error(kind, value, reason, what)
        if kind == "size" and unit.spelling.endswith("b") and spelling.islower():
            prefix = unit.spelling[:-1]
            raise _error(kind, value, f"{spelling!r} is ambiguous; write {prefix}B for bytes "
                         f"or {prefix}b for bits", what)
        result = number * unit.factor
    else:
        if not math.isfinite(value):
            raise _error(kind, value, "not a finite number", what)
        result = Fraction(value)
    if result < 0:
        raise _error(kind, value, "must not be negative", what)
    return result


def _to_float(exact: Fraction, kind: str, value, what: str | None) -> float:
    try:
        return float(exact)
    except OverflowError:
        raise _error(kind, value, "too large", what) from None


#: Largest size accepted: 2^62 bytes (4 EiB), what 64-bit byte counts hold with room to add.
MAX_SIZE_BYTES = 2**62


def parse_size(value, *, what: str | None = None) -> int:
    """Size in bytes from ``512``, ``"64 MiB"``, ``"1.5GB"``, ``"100 Mb"`` (bits) ...; exact int
    from 0 to :data:`MAX_SIZE_BYTES`."""
    exact = _parse(value, "size", what)
    if exact.denominator != 1:
        raise _error("size", value, "not a whole number of bytes", what)
    if exact > MAX_SIZE_BYTES:
        raise _error("size", value, "too large: sizes go from 0 to 4 EiB (2^62 bytes)", what)
    return int(exact)


#: Most sizes one :func:`parse_sizes` text may stand for (``1B:4GiB:+1B`` would be 4 billion).
MAX_SWEEP_SIZES = 4096

_STEP = re.compile(r"\s*([x*+])\s*(.+?)\s*")


def _sweep_error(value, reason: str, what: str | None) -> UnitError:
    head = f"{what}: " if what else ""
    return UnitError(f"{head}cannot read sizes {value!r}: {reason}; write one size (64MiB), a "
                     f"comma list (1MiB,16MiB) or a range as nccl-tests sweeps: 8B:8GiB "
                     f"(doubling, -f 2), 8B:8GiB:x4 (-f 4), 1MiB:8MiB:+1MiB (-i 1MiB)")


def _size_range(part: str, value, what: str | None) -> list[int]:
    """The sizes of one ``BEGIN:END[:STEP]`` range, ``END`` included when a step lands on it
    (nccl-tests' loop: ``for (size = min; size <= max; size = f > 1 ? size * f : size + i)``)."""
    fields = part.split(":")
    if len(fields) not in (2, 3):
        raise _sweep_error(value, f"{part!r} has {len(fields) - 1} colons, a range has 1 or 2",
                           what)
    begin, end = (parse_size(f.strip(), what=what) for f in fields[:2])
    if begin > end:
        raise _sweep_error(value, f"the range starts above its end ({begin} > {end} bytes)",
                           what)
    match = _STEP.fullmatch(fields[2]) if len(fields) == 3 else None
    if len(fields) == 3 and match is None:
        raise _sweep_error(value, f"step {fields[2]!r} is neither xF (multiply) nor +SIZE (add)",
                           what)
    sign, amount = match.groups() if match else ("x", "2")
    if sign in "x*":
        if not amount.isdigit() or int(amount) < 2:
            raise _sweep_error(value, f"factor {amount!r} must be a whole number >= 2", what)
        factor, increment = int(amount), 0
        if begin == 0:
            raise _sweep_error(value, "a multiplying range cannot start at 0 bytes", what)
    else:
        factor, increment = 1, parse_size(amount, what=what)
        if increment == 0:
            raise _sweep_error(value, "an adding step must be above 0 bytes", what)
    sizes, size = [], begin
    while size <= end:
        sizes.append(size)
        if len(sizes) > MAX_SWEEP_SIZES:
            raise _sweep_error(value, f"more than {MAX_SWEEP_SIZES} sizes", what)
        size = size * factor if factor > 1 else size + increment
    return sizes


def parse_sizes(value, *, what: str | None = None) -> list[int]:
    """Sizes in bytes from one size (``"64MiB"``), a comma list (``"1MiB,16MiB"``) or ranges
    as nccl-tests sweeps them: ``"8B:8GiB"`` doubles from 8 B to 8 GiB (``-b 8 -e 8G -f 2``),
    ``"8B:8GiB:x4"`` multiplies by 4 (``-f 4``), ``"1MiB:8MiB:+1MiB"`` adds 1 MiB (``-i``).
    Parts of a comma list may be ranges; order is kept, at most :data:`MAX_SWEEP_SIZES`."""
    if not isinstance(value, str) or ("," not in value and ":" not in value):
        return [parse_size(value, what=what)]
    sizes = []
    for part in value.split(","):
        if not part.strip():
            raise _sweep_error(value, "an empty item", what)
        sizes += (_size_range(part, value, what) if ":" in part
                  else [parse_size(part.strip(), what=what)])
        if len(sizes) > MAX_SWEEP_SIZES:
            raise _sweep_error(value, f"more than {MAX_SWEEP_SIZES} sizes", what)
    return sizes


def parse_duration(value, *, what: str | None = None) -> float:
    """Duration in seconds from ``0.5``, ``"2 us"``, ``"2µs"``, ``"1.5ms"``, ``"1 h"`` ..."""
    return _to_float(_parse(value, "duration", what), "duration", value, what)


def _parse_positive(value, kind: str, what: str | None, allow_zero: bool) -> float:
    result = _to_float(_parse(value, kind, what), kind, value, what)
    if result == 0 and not allow_zero:
        raise _error(kind, value, "must be positive", what)
    return result


def parse_bandwidth(value, *, what: str | None = None, allow_zero: bool = False) -> float:
    """Bandwidth in bytes/s from ``"100 Gbps"`` (bits: 12.5e9), ``"25 GB/s"`` (bytes: 25e9) ..."""
    return _parse_positive(value, "bandwidth", what, allow_zero)


def parse_rate(value, *, what: str | None = None, allow_zero: bool = False) -> float:
    """Compute rate in FLOP/s from ``"19.5 TFLOPS"``, ``"312TFLOP/s"``, ``9.3e12`` ..."""
    return _parse_positive(value, "rate", what, allow_zero)


#: Units a training throughput may carry (all mean samples per second).
THROUGHPUT_UNITS = ("img/s", "images/s", "samples/s", "sample/s", "seq/s", "sequences/s", "/s")


def parse_throughput(value, *, what: str | None = None) -> float:
    """Training throughput in samples/s from ``134``, ``"134 img/s"``, ``"2.5e3 samples/s"``."""
    text = value
    if isinstance(value, str):
        text = value.strip()
        for unit in THROUGHPUT_UNITS:
            if text.lower().endswith(unit):
                text = text[: -len(unit)].strip()
                break
    head = f"{what}: " if what else ""
    try:
        if isinstance(text, bool):
            raise ValueError
        number = float(text)
    except (TypeError, ValueError):
        raise UnitError(f"{head}cannot parse throughput {value!r}: expected a number of "
                        f"samples per second; accepted units: {', '.join(THROUGHPUT_UNITS)} "
                        f"(e.g. 134img/s)") from None
    if not (math.isfinite(number) and number > 0):
        raise UnitError(f"{head}cannot parse throughput {value!r}: must be finite and > 0")
    return number


def _format(value: float, spellings: list[str]) -> str:
    """Pick the largest listed unit not above |value|; at most 3 decimals, trailing zeros cut."""
    units = [_BY_SPELLING[s] for s in spellings]
    chosen = next(u for u in units if u.factor == 1) if value == 0 else units[0]
    for unit in units:
        if abs(value) >= unit.factor:
            chosen = unit
    number = f"{value / float(chosen.factor):.3f}".rstrip("0").rstrip(".")
    return f"{number} {chosen.spelling}"


def format_size(size_bytes: float) -> str:
    """``67108864`` -> ``"64 MiB"``, ``1536`` -> ``"1.5 KiB"`` (binary prefixes)."""
    return _format(size_bytes, ["B", "KiB", "MiB", "GiB", "TiB"])


def format_duration(time_s: float) -> str:
    """``2e-6`` -> ``"2 us"``, ``0.0015`` -> ``"1.5 ms"``, ``12.3`` -> ``"12.3 s"``."""
    return _format(time_s, ["ns", "us", "ms", "s"])


def format_bandwidth(bandwidth_bytes_per_s: float) -> str:
    """``12.5e9`` -> ``"12.5 GB/s"`` (decimal bytes per second, as nccl-tests reports)."""
    return _format(bandwidth_bytes_per_s, ["B/s", "KB/s", "MB/s", "GB/s", "TB/s"])


def describe_units(kind: str | None = None) -> str:
    """The accepted units as a plain-text table, for README and ``--help``."""
    def exact(f: Fraction) -> str:
        return str(f.numerator) if f.denominator == 1 else f"{float(f):g}"

    rows = [u for u in UNITS_TABLE if kind in (None, u.kind)]
    return "\n".join(f"{u.kind:<10} {u.spelling:<8} = {exact(u.factor):>19} {SI_UNIT[u.kind]:<8} "
                      f"{u.meaning}" for u in rows)
