"""Command line front end: ``clustersim`` (also ``python -m simulator``).

:mod:`.commands` builds the argument parser and runs each subcommand; :mod:`.args` holds the
flags several subcommands share (topology parameters, algorithm names, the collective-library
flags); :mod:`.compare` adds ``compare`` and ``calibrate``, the front ends of
:mod:`simulator.comparison`.
"""

from .commands import build_parser, main

__all__ = ["build_parser", "main"]
