"""User-facing errors.

Every mistake a user can make (a bad unit string, an unknown topology, an algorithm that does not
implement a collective) raises a subclass of :class:`ClusterSimError`. The command line catches
exactly this family, prints the message on one line and exits with code 2; anything else is a bug
and keeps its traceback.
"""


class ClusterSimError(Exception):
    """Base class of every error caused by user input."""


class UnitError(ClusterSimError, ValueError):
    """A quantity string could not be parsed (bad number, unknown or wrong kind of unit)."""


class ConfigError(ClusterSimError, ValueError):
    """A configuration value (CLI flag, parameter, scenario or topology key) is invalid."""


class ResourceError(ConfigError):
    """A request estimated to need more memory than the limit (:mod:`simulator.guard`)."""


class TopologyError(ClusterSimError):
    """A topology cannot be built, loaded, or routed."""


class ScheduleError(ClusterSimError):
    """An algorithm cannot produce a schedule for the requested collective or rank count."""


class SimulationError(ClusterSimError):
    """The simulation cannot make progress (stuck dependencies, unroutable transfer)."""


def unknown_name(kind: str, name: str, valid) -> ConfigError:
    """Build the error for an unknown registry name, listing the valid names."""
    names = ", ".join(sorted(valid))
    return ConfigError(f"unknown {kind} {name!r}; valid: {names}")


#: The exit status of a run stopped by Ctrl-C or SIGTERM (128 + SIGINT, as shells report it).
EXIT_INTERRUPTED = 130


def exit_interrupted() -> None:
    """End the process at once with :data:`EXIT_INTERRUPTED`, its output flushed.

    The interrupt has been handled by then (files written to temporary names removed, one line
    printed). A normal interpreter exit after it was seen to end in SIGINT anyway (status -2
    instead of 130): in about one ``python -m simulator run`` in ten interrupted in its first
    second, while the command line was still importing (the interrupt surfaced in
    ``dataclasses``' ``exec()`` of generated methods). The path inside CPython's exit that
    re-raised the signal was not pinned down; leaving with ``os._exit`` skips that exit, and
    no such run was seen in 200 more. Only the program's entry points call this
    (:mod:`simulator.program`); :func:`simulator.cli.main` returns the status to callers in
    the same process. Standard library only, so that it works while the rest is still
    importing."""
    import os
    import sys

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(EXIT_INTERRUPTED)
