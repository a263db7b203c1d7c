"""Collective libraries: what happens between an algorithm and the wires.

A registry of libraries, like the algorithm registry: ``ideal`` (no library: the schedule on
bare wires, the closed forms' contract) and ``nccl`` (NVIDIA's collective library: protocols,
channels, per-step latencies, NVLS, its tuner; :mod:`simulator.library.nccl`; version 1.x:
:mod:`simulator.library.nccl1`). A library turns
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
from .nccl1 import Nccl1Library, is_nccl1

LIBRARIES = {"ideal": IdealLibrary, "nccl": NcclLibrary}


def get_library(name: str, **settings):
    """A library object by registered name (unknown names list the valid ones); ``nccl`` at a
    ``version`` of 1.x is NCCL 1 (:mod:`simulator.library.nccl1`), whose data path is not
    NCCL 2's."""
    if not isinstance(name, str) or name not in LIBRARIES:
        raise unknown_name("library", name, LIBRARIES)
    if name == "nccl" and is_nccl1(settings.get("version")):
        return Nccl1Library(**settings)
    return LIBRARIES[name](**settings)


def default_library(graph) -> str:
    """``nccl`` on GPU topologies, ``ideal`` on ``star`` and ``fat_tree``."""
    return "nccl" if graph.graph.get("builder") == "gpu_cluster" else "ideal"


def resolve_library(name, graph, **settings):
    """A library object from a name, ``None``/``"default"`` (by topology) or an object.

    A calibrated topology (``library:`` in its preset, written by ``clustersim calibrate``)
    supplies the settings of its library unless ``settings`` give them."""
    if name is None or name == "default":
        name = default_library(graph)
    if not isinstance(name, str):
        return name
    if name == "ideal":
        return IdealLibrary()
    return get_library(name, **graph_settings(graph, name, settings))


def training_library(graph, name: str | None = None, *, launch=None, version=None,
                     compressed: bool = False):
    """The library of training's gradient buckets, or None for bare wires.

    ``name`` if given, else the topology's default (:func:`default_library`), except that
    compressed gradients, whose (de)compression kernels share the devices with the
    collectives and need the event engine, stay on bare wires unless ``nccl`` is named. The
    launch mode is left to the training framework unless ``launch`` names one."""
    if name is None:
        name = "ideal" if compressed else default_library(graph)
    if name == "ideal":
        return None
    return get_library(name, **graph_settings(graph, name, {"version": version,
                                                            "launch": launch}))


def graph_settings(graph, name: str, settings: dict | None = None) -> dict:
    """The settings of library ``name`` a topology carries, overridden by ``settings``
    (entries that are None do not override)."""
    stored = dict(graph.graph.get("library_settings") or {})
    if stored.pop("name", name) != name:
        stored = {}
    given = {k: v for k, v in (settings or {}).items() if v is not None}
    return {**stored, **given}


__all__ = ["LIBRARIES", "Launch", "Plan", "default_library", "get_library",
           "graph_settings", "parse_launch", "resolve_library"]
