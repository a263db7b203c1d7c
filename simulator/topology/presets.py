"""Topology presets: YAML files describing real machines, loaded strictly.

A preset is a builder call with sourced numbers::

    name: dgx-a100
    description: One NVIDIA DGX A100 ...
    builder: gpu_cluster          # a key of BUILDERS
    params:                       # that builder's parameters; unit strings allowed
      gpus_per_node: 8
      nvlink_bandwidth: 300 GB/s
    sources:                      # where each number comes from
      - "NVIDIA DGX A100 System Architecture whitepaper: ..."

The packaged presets live in the ``topologies`` package (``topologies/<name>.yaml``, shipped as
package data). :func:`load_topology` takes a preset name, a builder name (its defaults), or a path
to a YAML file, plus ``--param KEY=VALUE`` overrides. Loading is strict: unknown or duplicate keys,
wrong types and unknown parameters raise ConfigError naming the file, the key and its line.
"""

from __future__ import annotations

import importlib.resources
from dataclasses import dataclass, field
from pathlib import Path

import networkx as nx
import yaml

from simulator.config import read_text_file, read_yaml
from simulator.errors import ClusterSimError, ConfigError, unknown_name
from simulator.topology.builders import BUILDERS, build, parameter_names

__all__ = ["PresetSpec", "list_topologies", "load_topology", "preset_names", "read_preset"]

_KEYS = {"name": str, "description": str, "builder": str, "params": dict, "sources": list,
         "library": dict}
_REQUIRED = ("name", "builder")


@dataclass(frozen=True)
class PresetSpec:
    """A parsed, checked preset file (before building)."""

    name: str
    builder: str
    params: dict
    description: str = ""
    sources: tuple[str, ...] = ()
    origin: str = ""
    lines: dict = field(default_factory=dict, compare=False)  # key path -> 1-based line
    library: dict = field(default_factory=dict)   # calibrated library settings (calibrate)


def _package_files() -> dict:
    root = importlib.resources.files("topologies")
    return {f.name[:-5]: f for f in root.iterdir() if f.name.endswith(".yaml")}


def preset_names() -> list[str]:
    """Names of the packaged presets."""
    return sorted(_package_files())


def list_topologies() -> list[str]:
    """Every name :func:`load_topology` accepts: the builders, then the presets."""
    return sorted(BUILDERS) + preset_names()


def read_preset(text: str, origin: str = "<string>") -> PresetSpec:
    """Parse and check preset YAML ``text``; ``origin`` (a file name) goes into every error."""
    data, located = read_yaml(text, origin)
    lines = located.lines

    def where(*path) -> str:
        line = lines.get(path)
        return f"{origin}:{line}" if line else origin

    if not isinstance(data, dict):
        raise ConfigError(f"{origin}: a topology preset is a mapping with keys "
                          f"{', '.join(_KEYS)}")
    for key, value in data.items():
        if key not in _KEYS:
            raise ConfigError(f"{where(key)}: unknown key {key!r}; valid: {', '.join(_KEYS)}")
        if not isinstance(value, _KEYS[key]):
            raise ConfigError(f"{where(key)}: {key!r} must be a {_KEYS[key].__name__}, "
                              f"got {type(value).__name__}")
    for key in _REQUIRED:
        if key not in data:
            raise ConfigError(f"{origin}: missing required key {key!r}")
    if data["builder"] not in BUILDERS:
        error = unknown_name("topology builder", data["builder"], BUILDERS)
        raise ConfigError(f"{where('builder')}: {error}")
    params = data.get("params") or {}
    valid = parameter_names(data["builder"])
    for key in params:
        if key not in valid:
            raise ConfigError(f"{where('params', key)}: unknown parameter {key!r} for builder "
                              f"{data['builder']!r}; valid: {', '.join(valid)}")
    sources = data.get("sources", [])
    for i, source in enumerate(sources):
        if not isinstance(source, str):
            raise ConfigError(f"{where('sources')}: sources[{i}] must be a str, got "
                              f"{type(source).__name__}")
    library = data.get("library") or {}
    if library:
        from simulator.library import check_settings

        try:
            library = check_settings(library)
        except ClusterSimError as exc:
            raise ConfigError(f"{where('library')}: {exc}") from None
    return PresetSpec(name=data["name"], builder=data["builder"], params=dict(params),
                      description=data.get("description", ""), sources=tuple(sources),
                      origin=origin, lines=lines, library=library)


def _override_value(value):
    """``--param`` values arrive as text: read numbers, lists and null the YAML way."""
    if not isinstance(value, str):
        return value
    if value.strip().lower() == "none":
        return None
    try:
        return yaml.safe_load(value)
    except yaml.YAMLError:
        return value


def _apply_overrides(builder: str, params: dict, overrides: dict, origin: str) -> dict:
    valid = parameter_names(builder)
    merged = dict(params)
    for key, value in overrides.items():
        if key not in valid:
            raise ConfigError(f"{origin}, --param {key}: unknown parameter {key!r} for builder "
                              f"{builder!r}; valid: {', '.join(valid)}")
        merged[key] = _override_value(value)
    return merged


def _build(spec: PresetSpec, params: dict, overridden) -> nx.DiGraph:
    """Build; a user error gets the file, and the line or ``--param`` of the key it names."""
    try:
        return build(spec.builder, params)
    except ClusterSimError as exc:
        message = str(exc)
        key = (message.split(":", 1)[0].split() or [""])[0]
        if key in overridden:
            prefix = f"{spec.origin}, --param {key}"
        elif ("params", key) in spec.lines:
            prefix = f"{spec.origin}:{spec.lines[('params', key)]}"
        else:
            prefix = spec.origin
        raise type(exc)(f"{prefix}: {message}") from None


def load_topology(name_or_path: str, overrides: dict[str, str] | None = None) -> nx.DiGraph:
    """Build a topology from a preset name, a builder name, or a YAML file path.

    Parameters
    ----------
    name_or_path : str
        A packaged preset (``"dgx-a100"``), a builder (``"star"``: its defaults), or a path to
        a preset YAML file.
    overrides : dict of str to str, optional
        ``--param KEY=VALUE`` pairs replacing the preset's params. Values are read as YAML
        scalars or lists (``"64"`` is an int, ``"[[0, 1, 2]]"`` a list, ``"none"`` None); unit
        strings stay strings for the builder to parse. Unknown keys raise ConfigError listing
        the valid ones.

    Returns
    -------
    networkx.DiGraph
        The validated topology; ``graph.graph`` carries the preset's name, description and
        sources (joined by newlines into ``source``).
    """
    overrides = dict(overrides or {})
    if not isinstance(name_or_path, str):
        raise ConfigError(f"topology must be a name or a path, got {name_or_path!r}")
    is_builder = name_or_path in BUILDERS
    if is_builder:
        spec = PresetSpec(name=name_or_path, builder=name_or_path, params={},
                          origin=f"builder {name_or_path!r}")
    else:
        files = _package_files()
        if name_or_path in files:
            text = files[name_or_path].read_text(encoding="utf-8")
            origin = f"topologies/{name_or_path}.yaml"
        elif Path(name_or_path).is_file():
            text = read_text_file(name_or_path)
            origin = name_or_path
        elif name_or_path.endswith((".yaml", ".yml")) or "/" in name_or_path:
            raise ConfigError(f"topology file not found: {name_or_path!r}")
        else:
            raise unknown_name("topology (or path to a YAML file)", name_or_path,
                               list_topologies())
        spec = read_preset(text, origin)
    params = _apply_overrides(spec.builder, spec.params, overrides, spec.origin)
    graph = _build(spec, params, overrides)
    if not is_builder:
        graph.graph.update(name=spec.name, description=spec.description,
                           source="\n".join(spec.sources))
    if spec.library:
        graph.graph["library_settings"] = dict(spec.library)
    return graph
