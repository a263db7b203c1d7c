"""Strict YAML input: every key located by file and line, every mistake named.

Users type YAML (scenarios, topology presets); a misspelt key that is silently ignored is the
worst bug a simulator can have, because the run looks fine and answers a different question.
:func:`read_yaml` parses text into plain data plus a map from every key path to its line, and
rejects duplicate keys. :class:`Where` turns a key path into ``file:line: a.b.c`` for messages.
The typed grammar (:mod:`simulator.grammar`) then checks the keys and values of scenarios.
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


#: Deepest nesting of mappings and sequences a YAML input may have, and the most nodes its
#: aliases may expand to (a "billion laughs" document names a few aliases that expand to
#: billions of nodes): far beyond any real scenario or preset, far below a crash.
MAX_YAML_DEPTH = 64
MAX_YAML_NODES = 200_000


def read_text_file(path, origin: str | None = None) -> str:
    """A user's text file as a string: strict UTF-8 (an optional BOM dropped), or a
    ConfigError naming the file, the line and column of the first bad byte, and the fix."""
    from pathlib import Path

    origin = origin or str(path)
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{origin}: file not found") from None
    except IsADirectoryError:
        raise ConfigError(f"{origin}: is a directory, not a file") from None
    except OSError as exc:
        raise ConfigError(f"{origin}: cannot read: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        before = data[:exc.start]
        line = before.count(b"\n") + 1
        column = exc.start - (before.rfind(b"\n") + 1) + 1
        raise ConfigError(f"{origin}:{line}: not UTF-8 text: byte 0x{data[exc.start]:02X} at "
                          f"column {column} (offset {exc.start}); save the file as UTF-8")
    

def read_yaml(text: str, origin: str) -> tuple[object, Where]:
    """Parse YAML ``text``; return the data and a :class:`Where` covering every mapping key.

    Sequence items are addressed by their index (``("sizes", 2)``).
    """
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        _check_shape(root, origin)
        data = yaml.safe_load(text)
    except RecursionError:
        raise ConfigError(f"{origin}: YAML nested too deeply (more than {MAX_YAML_DEPTH} levels "
                          f"of mappings and lists)") from None
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


def _check_shape(root, origin: str) -> None:
    """Reject documents nested deeper than MAX_YAML_DEPTH or whose aliases expand past
    MAX_YAML_NODES nodes (counted as the walk below would visit them), without recursion."""
    if root is None:
        return
    stack = [(root, 1)]
    seen = 0
    while stack:
        node, depth = stack.pop()
        seen += 1
        if depth > MAX_YAML_DEPTH:
            line = node.start_mark.line + 1
            raise ConfigError(f"{origin}:{line}: YAML nested too deeply (more than "
                              f"{MAX_YAML_DEPTH} levels of mappings and lists)")
        if seen > MAX_YAML_NODES:
            raise ConfigError(f"{origin}: YAML too large: more than {MAX_YAML_NODES:,} nodes once "
                              f"its aliases are expanded")
        if isinstance(node, yaml.MappingNode):
            stack.extend((v, depth + 1) for pair in node.value for v in pair)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((v, depth + 1) for v in node.value)
