"""Strict YAML input: every key located by file and line, every mistake named.

Users type YAML (scenarios, topology presets); a misspelt key that is silently ignored is the
worst bug a simulator can have, because the run looks fine and answers a different question.
:func:`read_yaml` parses text into plain data plus a map from every key path to its line, and
rejects duplicate keys. :class:`Where` turns a key path into ``file:line: a.b.c`` for messages.
:func:`check_keys` rejects unknown keys listing the valid ones and reports missing required ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import yaml

from .errors import ConfigError


@dataclass(frozen=True)
class Where:
    """Locates key paths of one YAML document for error messages."""

    origin: str
    lines: dict = field(default_factory=dict)

    def __call__(self, *path) -> str:
        """``origin:line: dotted.path`` for ``path`` (the nearest located parent gives the line)."""
        dotted = ".".join(str(p) for p in path)
        probe = tuple(path)
        while probe and probe not in self.lines:
            probe = probe[:-1]
        line = self.lines.get(probe)
        location = f"{self.origin}:{line}" if line else self.origin
        return f"{location}: {dotted}" if dotted else location

    def error(self, path: tuple, message: str) -> ConfigError:
        return ConfigError(f"{self(*path)}: {message}")


def read_yaml(text: str, origin: str) -> tuple[object, Where]:
    """Parse YAML ``text``; return the data and a :class:`Where` covering every mapping key.

    Sequence items are addressed by their index (``("sizes", 2)``).
    """
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{origin}{line}: invalid YAML: {problem}") from None
    lines: dict = {}

    def walk(node, prefix):
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                path = prefix + (key_node.value,)
                line = key_node.start_mark.line + 1
                if path in lines:
                    raise ConfigError(f"{origin}:{line}: duplicate key {'.'.join(map(str, path))!r}"
                                      f" (first on line {lines[path]})")
                lines[path] = line
                walk(value_node, path)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                lines[prefix + (i,)] = item.start_mark.line + 1
                walk(item, prefix + (i,))

    if root is not None:
        walk(root, ())
    return data, Where(origin, lines)


def check_keys(data, where: Where, path: tuple, valid, required=()) -> dict:
    """``data`` must be a mapping whose keys are all in ``valid`` and include ``required``."""
    if not isinstance(data, dict):
        raise where.error(path, f"expected a mapping with keys {', '.join(valid)}, got "
                                f"{type(data).__name__}")
    for key in data:
        if key not in valid:
            raise where.error(path + (key,), f"unknown key {key!r}; valid: {', '.join(valid)}")
    for key in required:
        if key not in data:
            raise where.error(path, f"missing required key {key!r}")
    return data


def as_list(value) -> list:
    """A scalar or a list, as a list (``gpus: 8`` and ``gpus: [8, 16]`` both work)."""
    return list(value) if isinstance(value, (list, tuple)) else [value]
