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

A machine made of identical units, each a GPU with its own NIC (GH200 superchips), scales some
counts with ``gpus_per_node``: the optional ``per_gpu`` section gives such counts per GPU
(``per_gpu: {nics_per_node: 1}`` makes a 4-GPU machine of the preset have 4 NICs). A
``--param`` of the same key still sets the count itself.

The packaged presets live in the ``topologies`` package (``topologies/<name>.yaml``, shipped as
package data). :func:`load_topology` takes a preset name, a builder name (its defaults), or a path
to a YAML file, plus ``--param KEY=VALUE`` overrides. Loading is strict (the typed model
:class:`TopologyFile`): unknown or duplicate keys, wrong types and unknown parameters raise
ConfigError naming the file, the key and its line.
"""

from __future__ import annotations

import importlib.resources
import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import networkx as nx
import yaml
from pydantic import BeforeValidator, Field, model_validator

from simulator.config import (Invalid, Section, one_of, read_text_file, read_yaml, validate,
                              yaml_value)
from simulator.errors import ClusterSimError, ConfigError, unknown_name
from simulator.topology.builders import BUILDERS, build, parameter_names

__all__ = ["PresetSpec", "list_topologies", "load_topology", "param_value", "preset_names",
           "read_preset", "scale_per_gpu", "with_params"]

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
    per_gpu: dict = field(default_factory=dict)   # counts per GPU (see the module docstring)


def _package_files() -> dict:
    root = importlib.resources.files("topologies")
    return {f.name[:-5]: f for f in root.iterdir() if f.name.endswith(".yaml")}


def preset_names() -> list[str]:
    """Names of the packaged presets."""
    return sorted(_package_files())


def list_topologies() -> list[str]:
    """Every name :func:`load_topology` accepts: the builders, then the presets."""
    return sorted(BUILDERS) + preset_names()


class LibrarySettings(Section):
    """A calibrated preset's ``library:`` section (written by ``clustersim calibrate``)."""

    name: Literal["ideal", "nccl"] = "nccl"
    version: Annotated[str, BeforeValidator(
        lambda v: str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v)] \
        | None = Field(None, description="the NCCL version calibrated, e.g. 2.18.3")
    scale: dict[Literal["latency", "bandwidth"], Annotated[float, Field(gt=0)]] = Field(
        default_factory=dict, description="factors on the library's latencies and bandwidths")
    costs: dict[Literal["kernel_launch_s", "call_overhead_s", "python_call_s"],
                Annotated[float, Field(ge=0)]] = Field(
        default_factory=dict, description="fixed costs per call, in seconds")

    def settings(self) -> dict:
        """As the library takes them: what the file wrote (``name`` always)."""
        out = {"name": self.name}
        if self.version is not None:
            out["version"] = self.version
        out.update({key: dict(getattr(self, key)) for key in ("scale", "costs")
                    if getattr(self, key)})
        return out


class TopologyFile(Section):
    """A topology preset file: a builder and its parameters, with the sources of the numbers."""

    name: str
    description: str | None = None
    builder: one_of(lambda: BUILDERS) = Field(description="a builder: star, fat_tree, gpu_cluster, or a fabric of simulator.topology.fabrics")
    params: dict[str, Any] = Field(default_factory=dict,
                                   description="the builder's parameters; unit strings allowed")
    sources: list[str] = Field(default_factory=list, description="where each number comes from")
    library: LibrarySettings | None = None
    per_gpu: dict[str, Annotated[int, Field(ge=0, strict=True)]] = Field(
        default_factory=dict,
        description="counts that follow gpus_per_node, given per GPU (nics_per_node: 1 makes "
                    "one NIC per GPU); a --param of the same key sets the count itself")

    @model_validator(mode="after")
    def _builder_parameters(self):
        valid = parameter_names(self.builder)
        for key in self.params:
            if key not in valid:
                raise Invalid(f"unknown parameter {key!r} for builder {self.builder!r}; valid: "
                              f"{', '.join(valid)}", "params", key)
        counts = _count_parameters(self.builder)
        for key in self.per_gpu:
            if "gpus_per_node" not in valid:
                raise Invalid(f"per_gpu needs a builder with gpus_per_node; {self.builder!r} "
                              f"has none", "per_gpu", key)
            if key not in counts:
                raise Invalid(f"unknown count {key!r} for builder {self.builder!r}; valid: "
                              f"{', '.join(counts)}", "per_gpu", key)
            if key in self.params:
                raise Invalid(f"{key!r} is in params and in per_gpu; give it in one of them",
                              "per_gpu", key)
        return self


def _count_parameters(builder: str) -> list[str]:
    """The builder's whole-number parameters a ``per_gpu`` section may scale (every one with an
    integer default, but ``gpus_per_node`` itself)."""
    return [name for name, p in inspect.signature(BUILDERS[builder]).parameters.items()
            if isinstance(p.default, int) and not isinstance(p.default, bool)
            and name != "gpus_per_node"]


def read_preset(text: str, origin: str = "<string>") -> PresetSpec:
    """Parse and check preset YAML ``text``; ``origin`` (a file name) goes into every error."""
    data, where = read_yaml(text, origin)
    if data is None:
        raise where.error((), "the file is empty; a topology preset names a builder and its "
                              "params (see topologies/dgx-a100.yaml)")
    spec = validate(TopologyFile, data, where)
    return PresetSpec(name=spec.name, builder=spec.builder, params=dict(spec.params),
                      description=spec.description or "", sources=tuple(spec.sources),
                      origin=origin, lines=where.lines,
                      library=spec.library.settings() if spec.library else {},
                      per_gpu=dict(spec.per_gpu))


def param_value(value):
    """``--param`` values arrive as text: read numbers, lists and null the YAML way."""
    if not isinstance(value, str):
        return value
    if value.strip().lower() == "none":
        return None
    try:
        return yaml_value(value)
    except yaml.YAMLError:
        return value


def with_params(params: dict, overrides: dict | None) -> dict:
    """``params`` with ``--param`` ``overrides`` read as :func:`param_value` (what a written
    preset must hold: ``nodes: 2``, not the text ``'2'``)."""
    return {**params, **{key: param_value(value) for key, value in (overrides or {}).items()}}


def _apply_overrides(builder: str, params: dict, overrides: dict, origin: str) -> dict:
    valid = parameter_names(builder)
    merged = dict(params)
    for key, value in overrides.items():
        if key not in valid:
            raise ConfigError(f"{origin}, --param {key}: unknown parameter {key!r} for builder "
                              f"{builder!r}; valid: {', '.join(valid)}")
        merged[key] = param_value(value)
    return merged


def scale_per_gpu(builder: str, params: dict, per_gpu: dict, overridden=()) -> dict:
    """``params`` with every ``per_gpu`` count times the machine's GPUs (``gpus_per_node`` of
    ``params``, else the builder's default); keys in ``overridden`` keep their given value."""
    if not per_gpu:
        return params
    gpus = params.get("gpus_per_node",
                      inspect.signature(BUILDERS[builder]).parameters["gpus_per_node"].default)
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        return params       # the builder names the bad gpus_per_node
    scaled = dict(params)
    for key, count in per_gpu.items():
        if key not in overridden:
            scaled[key] = count * gpus
    return scaled


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
        elif ("per_gpu", key) in spec.lines:
            prefix = f"{spec.origin}:{spec.lines[('per_gpu', key)]} (per_gpu)"
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
    params = scale_per_gpu(spec.builder, params, spec.per_gpu, overrides)
    graph = _build(spec, params, overrides)
    if not is_builder:
        graph.graph.update(name=spec.name, description=spec.description,
                           source="\n".join(spec.sources))
    if spec.library:
        graph.graph["library_settings"] = dict(spec.library)
    return graph
