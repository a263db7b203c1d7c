"""NCCL's own selection variables: ``NCCL_ALGO`` and ``NCCL_PROTO``, read as NCCL reads them;
and the channel bounds ``NCCL_MIN_NCHANNELS``, ``NCCL_MAX_NCHANNELS``, ``NCCL_MIN_CTAS`` and
``NCCL_MAX_CTAS`` (:func:`channel_bounds`).

A run can narrow NCCL's tuner to some algorithms or protocols. NCCL parses both variables with
one grammar (``parseList``, NVIDIA/nccl v2.30.7-1 ``src/graph/tuning.cc``; the names are
``ncclAlgoStr``, ``ncclProtoStr`` and ``ncclFuncStr`` in ``src/init.cc``):

* a comma-separated list enables only the elements it names: ``Ring,Tree``;
* a list starting with ``^`` disables the elements it names: ``^NVLS``, ``^LL128``;
* ``;`` separates entries; an entry may start with a function and ``:``, and then applies
  to that function only: ``LL,Simple;allreduce:^LL``. Only the first entry may go without a
  function, and it applies to every function;
* names are matched without regard to case. An unknown name is an error, as in NCCL
  ("Unrecognized element token").

``NCCL_NVLS_ENABLE=0`` is another way to leave algorithms out: NCCL then never sets NVLink
SHARP up (``ncclNvlsInit`` returns with ``nvlsSupport = 0``, ``src/transport/nvls.cc``), so
neither NVLS nor NVLS tree can run.

The functions here turn such text into the set of this library's algorithm or protocol names
that a collective may use. Point-to-point work (all-to-all) is not one of NCCL's collective
functions, and no selection applies to it.
"""

from __future__ import annotations

import re

from ..errors import ConfigError

#: ``ncclAlgoStr`` -> this library's algorithm name (None: no counterpart in the simulator).
ALGORITHMS = {"tree": "tree", "ring": "ring", "collnetdirect": "collnet_direct",
              "collnetchain": None, "nvls": "nvls", "nvlstree": "nvls_tree", "pat": None}
#: How NCCL spells each algorithm (``ncclAlgoStr``), for messages.
ALGORITHM_SPELLING = {"tree": "Tree", "ring": "Ring", "collnetdirect": "CollNetDirect",
                      "collnetchain": "CollNetChain", "nvls": "NVLS", "nvlstree": "NVLSTree",
                      "pat": "PAT"}
#: ``ncclProtoStr`` -> this library's protocol name.
PROTOCOLS = {"ll": "LL", "ll128": "LL128", "simple": "Simple"}
#: ``ncclFuncStr`` -> collective name.
FUNCTIONS = {"broadcast": "broadcast", "reduce": "reduce", "allgather": "allgather",
             "reducescatter": "reduce_scatter", "allreduce": "allreduce"}
#: Text meaning "NCCL_NVLS_ENABLE=0" in a selection (``auto[...]`` names it this way).
NO_NVLS = "^NVLS,NVLSTree"

_KINDS = {"NCCL_ALGO": ALGORITHMS, "NCCL_PROTO": PROTOCOLS}


def is_selection(text) -> bool:
    """Whether ``text`` names more than one element, or excludes some (a list, ``^``, ``;``
    or ``function:``), rather than one algorithm or protocol."""
    value = str(text or "")
    return any(mark in value for mark in (",", "^", ";", ":"))


def _spelled(kind: str) -> str:
    names = ALGORITHM_SPELLING.values() if kind == "NCCL_ALGO" else PROTOCOLS.values()
    return ", ".join(names)


def enabled(text: str, kind: str, collective: str) -> frozenset:
    """NCCL's names (lower case) that ``text``, read as ``kind`` (``NCCL_ALGO`` or
    ``NCCL_PROTO``), leaves enabled for ``collective``; all of them for a collective NCCL's
    lists do not cover (all-to-all). Raises ConfigError for text NCCL would refuse."""
    elements = _KINDS[kind]
    state = {name: set(elements) for name in FUNCTIONS}
    entries = [e.strip() for e in str(text).split(";")]
    for position, entry in enumerate(entries):
        if not entry:
            raise ConfigError(f"{kind}={text!r}: an empty entry")
        prefix, sep, items = entry.partition(":")
        if not sep:
            if position:
                raise ConfigError(f"{kind}={text!r}: every entry after the first needs a "
                                  f"function prefix (as 'allreduce:Ring')")
            prefix, items = None, entry
        else:
            prefix = prefix.strip().lower()
            if prefix not in FUNCTIONS:
                raise ConfigError(f"{kind}={text!r}: unknown function {prefix!r}; NCCL's "
                                  f"functions: Broadcast, Reduce, AllGather, ReduceScatter, "
                                  f"AllReduce")
        items = items.strip()
        exclude = items.startswith("^")
        names = [n.strip().lower() for n in items.lstrip("^").split(",")]
        for name in names:
            if name not in elements:
                raise ConfigError(f"{kind}={text!r}: unknown element {name!r}; NCCL "
                                  f"accepts {_spelled(kind)}")
        chosen = (set(elements) - set(names)) if exclude else set(names)
        for function in ([FUNCTIONS[prefix]] if prefix else FUNCTIONS.values()):
            state[function] = set(chosen)
    return frozenset(state.get(collective, set(elements)))


def allowed_algorithms(text: str, collective: str) -> frozenset:
    """This library's algorithm names an ``NCCL_ALGO`` text leaves ``collective``.

    Elements without a counterpart here (CollNetChain, PAT) are dropped; a selection that
    leaves nothing else is an error naming them."""
    names = enabled(text, "NCCL_ALGO", collective)
    ours = frozenset(ALGORITHMS[n] for n in names if ALGORITHMS[n])
    if not ours:
        left = ", ".join(ALGORITHM_SPELLING[n] for n in sorted(names)) or "nothing"
        raise ConfigError(f"NCCL_ALGO={text!r} leaves {collective} only {left}, which the "
                          f"simulator does not model; it models Ring, Tree, NVLS, NVLSTree and "
                          f"CollNetDirect")
    return ours


def allowed_protocols(text: str, collective: str) -> frozenset:
    """The protocols an ``NCCL_PROTO`` text leaves ``collective`` (``LL``, ``LL128``,
    ``Simple``); an error when it leaves none."""
    ours = frozenset(PROTOCOLS[n] for n in enabled(text, "NCCL_PROTO", collective))
    if not ours:
        raise ConfigError(f"NCCL_PROTO={text!r} leaves {collective} no protocol")
    return ours


def without_nvls(text: str) -> str:
    """The ``NCCL_ALGO`` text ``text`` with NVLS and NVLS tree also left out
    (``NCCL_NVLS_ENABLE=0``), written per function."""
    entries = []
    for spelled, function in (("Broadcast", "broadcast"), ("Reduce", "reduce"),
                              ("AllGather", "allgather"), ("ReduceScatter", "reduce_scatter"),
                              ("AllReduce", "allreduce")):
        left = sorted(enabled(text, "NCCL_ALGO", function) - {"nvls", "nvlstree"})
        names = ",".join(ALGORITHM_SPELLING[n] for n in left)
        entries.append(f"{spelled}:{names}" if names else f"{spelled}:^{','.join(ALGORITHMS)}")
    return ";".join(entries)


#: The algorithms of this library's NCCL tuner.
LIBRARY_ALGORITHMS = ("tree", "ring", "nvls", "nvls_tree", "collnet_direct")


def selected(algorithm: str, collective: str) -> tuple[str, tuple]:
    """(algorithm to run, library algorithms the tuner may not choose) for a point's
    algorithm: ``auto[<NCCL_ALGO text>]`` -> ``auto`` without what the text leaves out;
    ``auto-nonvls`` (the older spelling of ``auto[^NVLS]``) -> ``auto`` without NVLS; any other
    name runs as it is."""
    text = str(algorithm)
    if text == "auto-nonvls":
        return "auto", ("nvls",)
    if text.startswith("auto[") and text.endswith("]"):
        allowed = allowed_algorithms(text[5:-1], collective)
        return "auto", tuple(a for a in LIBRARY_ALGORITHMS if a not in allowed)
    return text, ()


#: NCCL's channel variables (the older ``NCCL_MIN_NRINGS`` / ``NCCL_MAX_NRINGS`` spellings too).
CHANNEL_VARIABLE = r"NCCL_(?:MIN|MAX)_(?:NCHANNELS|NRINGS|CTAS)"
#: ``NAME=value`` of one of them in a run's stated environment.
_CHANNEL_ASSIGNMENT = re.compile(rf"\b({CHANNEL_VARIABLE})\s*=\s*(-?\d+)")


def channel_assignments(text) -> dict:
    """The channel variables ``text`` assigns (``NCCL_MIN_NCHANNELS=24 ...``): name -> value."""
    return {name: int(value) for name, value in _CHANNEL_ASSIGNMENT.findall(str(text or ""))}


def channel_bounds(text) -> tuple[int, int | None] | None:
    """(least, most) channels a communicator runs, from the ``NCCL_*`` assignments in
    ``text`` (a measured file's stated environment), as NCCL combines them; None when the
    text sets none.

    NCCL doubles its graph search's channels, then keeps at most ``min(NCCL_MAX_NCHANNELS,
    NCCL_MAX_CTAS)`` and copies channels up to at least ``max(NCCL_MIN_NCHANNELS,
    NCCL_MIN_CTAS)`` (NVIDIA/nccl v2.26.2-1 ``src/graph/connect.cc``:480-484;
    ``ncclMinNchannels`` / ``ncclMaxNchannels`` :325-350, where ``NCCL_*_NCHANNELS`` overrides
    the older ``NCCL_*_NRINGS``; ``NCCL_MIN_CTAS`` / ``NCCL_MAX_CTAS`` are the communicator's
    ``minCTAs`` / ``maxCTAs``, ``src/init.cc``). ``least`` is 0 and ``most`` None where
    unbounded."""
    found = {tuple(name.split("_")[1:]): value
             for name, value in channel_assignments(text).items()}
    if not found:
        return None

    def pick(kind: str):
        channels = found.get((kind, "NCHANNELS"), found.get((kind, "NRINGS")))
        return channels, found.get((kind, "CTAS"))

    least = max([0] + [v for v in pick("MIN") if v is not None])
    most = [v for v in pick("MAX") if v is not None]
    return least, (max(1, min(most)) if most else None)


def bounded_channels(channels: int, bounds, limit: int) -> int:
    """``channels`` (the search's, doubled) within ``bounds`` = (least, most) as NCCL applies
    them: at most ``most``, then copied up to at least ``least``, never above ``limit``
    (``MAXCHANNELS``)."""
    if not bounds:
        return channels
    least, most = bounds
    if most is not None:
        channels = min(channels, int(most))
    return max(1, min(limit, max(channels, int(least or 0))))
