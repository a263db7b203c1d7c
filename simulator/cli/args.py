"""Command-line pieces that more than one command's module uses: ``--param`` pairs, algorithm
names, and the collective-library flags. :mod:`.commands` and :mod:`.compare`
both build on this module, and it on neither.
"""

from __future__ import annotations

from ..errors import ConfigError

#: ``--engine`` values: the engines, then the fast methods a name forces
#: (``collective.ENGINES``, kept equal by tests/test_cli.py; spelled out here so that building
#: the parser does not import the engine).
ENGINE_CHOICES = ("event", "fast", "auto", "ring", "tree-pipeline", "aligned-steps", "compiled",
                  "step-sync")


def _params(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--param expects KEY=VALUE, got {pair!r}")
        out[key.strip()] = value.strip()
    return out


def check_algorithm(name: str) -> None:
    """A registered algorithm, or one a library adds (``nvls``); else the error listing both."""
    from ..library.nccl import NCCL_ALGORITHM
    from ..schedules import ALGORITHMS, get_algorithm

    if name in NCCL_ALGORITHM and name not in ALGORITHMS:
        return
    get_algorithm(name)


def add_library_arguments(parser) -> None:
    """``--library``, ``--protocol``, ``--launch``, ``--nccl-version``: the collective library
    between the algorithm and the wires (:mod:`simulator.library`)."""
    parser.add_argument("--library", default=None, metavar="ideal|nccl",
                        help="collective library (default: nccl on GPU topologies, ideal on "
                             "star and fat_tree)")
    parser.add_argument("--protocol", default=None, metavar="LL|LL128|Simple|LIST|auto",
                        help="the library's protocols, as NCCL_PROTO: one to force it, or a "
                             "list in NCCL's grammar for its tuner to choose from (Simple,LL128; "
                             "^LL128; allreduce:Simple); default: its tuner over all of them")
    parser.add_argument("--launch", default=None, metavar="MODE",
                        help="how calls were issued: mpi (one process per GPU), group[:G] (one "
                             "thread drives G GPUs, nccl-tests -g G), torch, none")
    parser.add_argument("--nccl-version", default=None, metavar="X.Y",
                        help="NCCL version whose constants to use (default: the newest, 2.30; "
                             "1.x: NCCL 1, one ring in device order inside one machine; "
                             "compare: each point's nccl_version)")


def add_channels_argument(parser) -> None:
    """``--nccl-channels LEAST[:MOST]``: the channels NCCL runs (``collective`` and ``compare``
    on collective points)."""
    parser.add_argument("--nccl-channels", default=None, metavar="LEAST[:MOST]",
                        help="the channels NCCL runs, as NCCL_MIN_NCHANNELS and "
                             "NCCL_MAX_NCHANNELS set them: 24 (at least 24), :8 (at most 8), "
                             "8:8; compare: instead of what each point's notes state")


def channels_flag(text) -> tuple[int, int | None] | None:
    """``--nccl-channels``' text as (least, most); a clear error for anything else."""
    if text is None:
        return None
    import re

    match = re.fullmatch(r"\s*(\d*)\s*(?::\s*(\d*)\s*)?", str(text))
    if not match or not (match.group(1) or match.group(2)):
        raise ConfigError(f"--nccl-channels: expected LEAST, LEAST:MOST or :MOST in whole "
                          f"numbers (24, 8:8, :8), got {text!r}")
    least = int(match.group(1)) if match.group(1) else 0
    most = int(match.group(2)) if match.group(2) else None
    if most is not None and most < 1:
        raise ConfigError(f"--nccl-channels: the most channels must be >= 1, got {text!r}")
    return least, most


def library_args(args, graph) -> dict:
    """The library keyword arguments of ``run_collective``/``compare`` from parsed flags."""
    from ..library import LIBRARIES, default_library
    from ..library.launch import parse_launch
    from ..library.nccl import protocol_setting
    from ..library.nccl_constants import get_version

    name = args.library or default_library(graph)
    if name not in LIBRARIES:
        from ..errors import unknown_name

        raise unknown_name("library (--library)", name, LIBRARIES)
    protocol = protocol_setting(args.protocol)
    if name == "ideal" and (protocol or args.launch or args.nccl_version):
        raise ConfigError("--protocol, --launch and --nccl-version need --library nccl (the "
                          "ideal library has no protocols or launch costs)")
    if args.launch is not None:
        parse_launch(args.launch)
    if args.nccl_version is not None:
        import re

        if not re.fullmatch(r"\s*\d+\.\d+(\.\d+)?\s*", str(args.nccl_version)):
            raise ConfigError(f"--nccl-version: expected a version such as 2.18 or 2.18.3, "
                              f"got {args.nccl_version!r}")
        get_version(args.nccl_version)
    channels = channels_flag(getattr(args, "nccl_channels", None))
    if name == "ideal" and channels is not None:
        raise ConfigError("--nccl-channels needs --library nccl (the ideal library has no "
                          "channels)")
    return {"library": name, "protocol": protocol, "launch": args.launch,
            "version": args.nccl_version, "channels": channels}
