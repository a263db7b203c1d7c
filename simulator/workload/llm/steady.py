"""Steady-state extrapolation of a long training step: simulate three short steps, prove the
pipeline periodic, extend it.

A step of ``M`` micro-batches is a warm-up (the pipeline filling), a steady state in which every
``u`` more micro-batches add the same work in the same order on the same links, and a drain
(the pipeline emptying, the last data-parallel buckets, the optimizer). The step time and every
additive quantity the step reports (each rank's compute, exposed communication and bubble
seconds, the bytes of each group kind, the bytes each link carried) are then affine in ``M``
once ``M`` is past the warm-up:

    x(M) = x(m3) + (M - m3) / u x (x(m3) - x(m2))

The simulator does not assume it. :func:`windows` proposes three micro-batch counts ``m1 <
m2 < m3`` a period ``u`` apart (``u`` = the pipeline stages; ``M - m3`` a multiple of ``u``, so
an interleaved schedule keeps its multiple-of-stages rule); the step runner simulates the three
and :func:`extend` accepts them only when both differences agree, quantity by quantity, to
:data:`TOLERANCE` (relative): a step whose steady state has not begun by ``m1``, or whose
period is not ``u``, fails the check, and the runner tries a later window, then gives up and
simulates all ``M``. A 512-micro-batch step of Qwen3-235B-A22B on 256 H100s (PP 8, VP 4, EP 32)
tries 16, 24 and 32 micro-batches (one rank's exposed all-to-all time is still settling, by
2e-5 s), then 24, 32 and 40, which agree to 1e-12 s: 112 micro-batches simulated instead of
512, 5 minutes instead of 27, and the same tokens/s (414,320) as simulating all 512. With its
recipe's all-to-all overlap (``ep_overlap``) the same step has no exact period: its increments
per 8 micro-batches, from 16 to 56, are 0.8458195, 0.8458221, 0.8458292, 0.8458174 and
0.8458232 s (presumably the eight expert groups' serial all-to-all streams interleave a little
differently each period), so at the default tolerance it is simulated whole (25 minutes on one
core).

**A looser tolerance, asked for.** ``tolerance`` (``clustersim llm --steady-tolerance``,
``compare --steady-tolerance``, the ``llm`` section's ``steady_tolerance``) accepts a window
whose two increments differ by up to that fraction of the step's span, for every quantity
checked. The extension is then no longer exact; :func:`drift` estimates what it may be off by
(the difference of the two increments times the periods extended), and the step's note states
it for the step time and for the worst rank's part. On the step above, the step time's
increments agree to about 2e-6 of the span from the first window on, but the bubble some
ranks are charged still settles, by 2.6e-4, 8.8e-5, 3.3e-5 and 1.2e-5 of the span in the
windows from 16 to 56: ``1e-5`` finds no window within the budget, ``1e-4`` extends from 24,
32 and 40 (see docs/validation/sources.md for the numbers against the whole step). Accepted
values: :data:`TOLERANCE` to :data:`LOOSEST_TOLERANCE`.

Pure functions on numbers and dicts; no SimPy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...errors import ConfigError

__all__ = ["LOOSEST_TOLERANCE", "TOLERANCE", "Window", "check_tolerance", "drift", "extend",
           "windows", "Unsteady"]

#: Largest relative disagreement between the two differences of a window that still proves the
#: step periodic. Times are compared relative to the longest of the three step times, bytes
#: relative to their own value: float rounding is about 1e-15 of either.
TOLERANCE = 1e-9

#: The loosest tolerance a user may ask for: a window's increments may differ by a thousandth
#: of the step's span, far above any float noise and still far below what a transient (a
#: pipeline still filling, a queue still growing) usually leaves between two periods.
LOOSEST_TOLERANCE = 1e-3


def check_tolerance(tolerance: float, where: str = "steady_tolerance") -> float:
    """``tolerance`` as a float, or a :class:`~simulator.errors.ConfigError` naming ``where``
    and the accepted range (:data:`TOLERANCE` to :data:`LOOSEST_TOLERANCE`)."""
    try:
        value = float(tolerance)
    except (TypeError, ValueError):
        value = math.nan
    if not TOLERANCE <= value <= LOOSEST_TOLERANCE:
        raise ConfigError(f"{where}: expected a relative tolerance from {TOLERANCE:g} (exact, "
                          f"the default) to {LOOSEST_TOLERANCE:g}, got {tolerance!r}")
    return value


def drift(x1: float, x2: float, x3: float, k: int) -> float:
    """How far the extension of ``x`` by ``k`` periods may be off: the difference of the
    window's two increments, ``|(x3 - x2) - (x2 - x1)|``, times ``k``. Zero for an exactly
    periodic quantity; with a looser tolerance, an estimate (the increments of a step without
    an exact period wander around their mean), not a bound."""
    return abs((x3 - x2) - (x2 - x1)) * k


class Unsteady(ValueError):
    """The three steps of a window are not in one affine steady state."""


@dataclass(frozen=True)
class Window:
    """Three micro-batch counts a period apart, and how far the last is from the real step."""

    counts: tuple[int, int, int]
    period: int
    periods_left: int            # (M - m3) / period

    def __str__(self) -> str:
        m1, m2, m3 = self.counts
        return f"{m1}, {m2} and {m3}"


def windows(micro_batches: int, stages: int, budget: float = 0.5):
    """The windows worth trying for a step of ``micro_batches`` on ``stages`` pipeline stages,
    earliest first: the first starts at two periods, each next one a period later (it shares
    two steps with the one before, so a failed window costs one more step). A window is offered
    only while the micro-batches of every step simulated so far, the window's new one included,
    stay within ``budget`` of ``micro_batches`` (trying costs at most that fraction of
    simulating it all)."""
    u = max(1, stages)
    m3 = 4 * u
    m3 += (micro_batches - m3) % u              # M - m3 a multiple of the period
    spent: set[int] = set()
    while True:
        counts = (m3 - 2 * u, m3 - u, m3)
        spent |= set(counts)
        if m3 >= micro_batches or sum(spent) > budget * micro_batches:
            return
        yield Window(counts, u, (micro_batches - m3) // u)
        m3 += u


def _next(x1: float, x2: float, x3: float, k: int, scale: float, what: str,
          tolerance: float) -> float:
    d1, d2 = x2 - x1, x3 - x2
    if abs(d2 - d1) > tolerance * max(abs(scale), 1e-300):
        raise Unsteady(f"{what}: {x1!r}, {x2!r}, {x3!r} are not a period apart")
    return x3 + k * d2


def extend(values: tuple[dict, dict, dict], k: int, scale: float | None = None,
           what: str = "", tolerance: float = TOLERANCE) -> dict:
    """``x(m3) + k (x(m3) - x(m2))`` for every key of three dicts of numbers (nested dicts
    recurse), after checking ``x(m2) - x(m1) == x(m3) - x(m2)`` to ``tolerance`` x ``scale``
    (None: the value itself). Keys missing from one of the three make the window unsteady (a
    link used only in one step, a group kind in one)."""
    a, b, c = values
    if not (a.keys() == b.keys() == c.keys()):
        raise Unsteady(f"{what}: the three steps report different keys")
    out = {}
    for key in c:
        x1, x2, x3 = a[key], b[key], c[key]
        label = f"{what}[{key!r}]"
        if isinstance(x3, dict):
            out[key] = extend((x1, x2, x3), k, scale, label, tolerance)
            continue
        out[key] = _next(float(x1), float(x2), float(x3), k, x3 if scale is None else scale,
                         label, tolerance)
    return out
