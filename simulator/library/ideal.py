"""The ``ideal`` library: no library at all.

The schedule runs on the topology's wires as they are, with no launch cost, base latency or
protocol overhead. This is the contract of the closed forms (``star``, ``fat_tree``): ring
all-reduce on a star equals ``2(p-1)·alpha + 2(p-1)/p·n·beta`` exactly.
"""

from __future__ import annotations

from .base import Plan


class IdealLibrary:
    """Runs the algorithm's schedule on the bare topology."""

    name = "ideal"
    summary = "no collective library: the schedule on ideal wires (the closed forms' contract)"

    def plan(self, graph, collective: str, algorithm: str, size_bytes: int, gpus: int, *,
             protocol: str | None = None, launch=None, exclude=()) -> Plan:
        from ..errors import ConfigError

        if protocol not in (None, "", "auto"):
            raise ConfigError(f"--protocol {protocol}: the ideal library has no protocols; use "
                              f"--library nccl")
        return Plan(library=self.name, algorithm=algorithm, label=algorithm, protocol="",
                    channels=0, graph=graph)

    def unavailable(self, graph, collective: str, algorithm: str, gpus: int, *,
                    protocol: str | None = None) -> str:
        """Bare wires run every registered schedule: always ``""``."""
        return ""

    def describe(self) -> str:
        return self.summary
