"""Collective libraries: what happens between an algorithm and the wires.

A registry of libraries, like the algorithm registry: ``ideal`` (no library: the schedule on
bare wires, the closed forms' contract) and ``nccl`` (NVIDIA's collective library: protocols,
channels, per-step latencies, NVLS, its tuner; :mod:`simulator.library.nccl`). A library turns
one call into a :class:`~simulator.library.base.Plan`: data the engine consumes unchanged.

:func:`default_library` picks ``nccl`` for GPU topologies (the ``gpu_cluster`` builder and its
presets) and ``ideal`` for ``star`` and ``fat_tree``, whose closed forms are the contract.
"""

from __future__ import annotations

from ..errors import unknown_name
from .base import Plan
from .ideal import IdealLibrary
from .launch import Launch, parse_launch
from .nccl import NcclLibrary

LIBRARIES = {"ideal": IdealLibrary, "nccl": NcclLibrary}


def get_library(name: str, **settings):
    """A library object by registered name (unknown names list the valid ones)."""
    if not isinstance(name, str) or name not in LIBRARIES:
        raise unknown_name("library", name, LIBRARIES)
    return LIBRARIES[name](**settings)


def default_library(graph) -> str:
    """``nccl`` on GPU topologies, ``ideal`` on ``star`` and ``fat_tree``."""
    return "nccl" if graph.graph.get("builder") == "gpu_cluster" else "ideal"


def resolve_library(name, graph, **settings):
    """A library object from a name, ``None``/``"default"`` (by topology) or an object."""
    if name is None or name == "default":
        name = default_library(graph)
    if not isinstance(name, str):
        return name
    if name == "ideal":
        return IdealLibrary()
    return get_library(name, **settings)


__all__ = ["LIBRARIES", "Launch", "Plan", "default_library", "get_library", "parse_launch",
           "resolve_library"]
