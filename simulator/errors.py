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
