"""Strict input: every key located by file and line, every mistake named.

Users type YAML (scenarios, topology presets); a misspelt key that is silently ignored is the
worst bug a simulator can have, because the run looks fine and answers a different question.
Every file the tool reads goes through two steps:

* :func:`read_yaml` parses text (strict UTF-8, bounded depth and aliases) into plain data plus a
  map from every key path to its line, and rejects duplicate keys. :class:`Where` turns a key
  path into ``file:line: a.b.c`` for messages.
* :func:`validate` checks the data against a typed model (pydantic; :class:`Section` is the base
  of every file section: unknown keys refused listing the valid ones, strict types, finite
  numbers) and turns the first problem into ``file:line: key.path: what was expected, got
  what``. The value types here (:func:`listed`, :func:`one_of`, :func:`quantity`) are the
  grammar's vocabulary: scalars standing for one-item lists, registry names, values with units.
  The scenario grammar is :mod:`simulator.grammar`; the preset grammar is in
  :mod:`simulator.topology.presets`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Annotated, Callable, Iterable, Union

import yaml
from pydantic import (BaseModel, BeforeValidator, ConfigDict, Field, PlainValidator,
                      ValidationError, ValidationInfo, model_validator)

from .errors import ClusterSimError, ConfigError


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
    

class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, reading ``1e-5`` and ``2E+3`` as numbers, as YAML 1.2 does (YAML
    1.1, which PyYAML follows, wants a dot: ``1.0e-5``; a user who writes a tolerance as
    ``1e-5`` means the number)."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?[0-9]+(?:\.[0-9]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"))


def yaml_value(text: str):
    """One value written as YAML (a ``--param`` or ``--option`` on the command line), read as
    :func:`read_yaml` reads values (``1e-5`` a number); raises ``yaml.YAMLError``."""
    return yaml.load(text, Loader=_Loader)  # noqa: S506 (_Loader is a SafeLoader)


def read_yaml(text: str, origin: str) -> tuple[object, Where]:
    """Parse YAML ``text``; return the data and a :class:`Where` covering every mapping key.

    Sequence items are addressed by their index (``("sizes", 2)``).
    """
    try:
        root = yaml.compose(text, Loader=_Loader)
        _check_shape(root, origin)
        data = yaml.load(text, Loader=_Loader)  # noqa: S506 (_Loader is a SafeLoader)
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


# -- typed sections -------------------------------------------------------------------------------

class Invalid(ConfigError):
    """A validator's complaint; ``key`` locates it below the value being validated (a model's
    check that spans keys names the key it blames)."""

    def __init__(self, message: str, *key):
        super().__init__(message)
        self.key = key



def _as_list(value):
    return value if isinstance(value, list) else [value]


def listed(item, min_length: int = 1):
    """A list of ``item``, a scalar standing for a one-item list."""
    return Annotated[list[item], Field(min_length=min_length),
                     BeforeValidator(_as_list, json_schema_input_type=Union[item, list[item]])]


class _Enum:
    """JSON Schema ``enum`` of a registry's names, read when the schema is printed."""

    def __init__(self, names: Callable[[], Iterable[str]]):
        self.names = names

    def __get_pydantic_json_schema__(self, core_schema, handler):
        schema = handler(core_schema)
        schema["enum"] = list(self.names())
        return schema


def one_of(names: Callable[[], Iterable[str]]):
    """A name from a registry (``names()``, read when a file is validated)."""
    def check(value):
        valid = tuple(names())
        if not isinstance(value, str) or value not in valid:
            raise Invalid(f"expected one of {', '.join(map(str, valid))}, got {value!r}")
        return value
    return Annotated[str, PlainValidator(check, json_schema_input_type=str), _Enum(names)]


def quantity(parse, what: str):
    """A value with its unit, parsed by ``parse`` (``parse_size``, ``parse_duration``, ...)."""
    def check(value):
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise Invalid(f"expected a {what} with its unit, got {value!r}")
        return parse(value)       # the key path names the value; the parser names its kind
    return Annotated[Union[int, float, str], PlainValidator(check, json_schema_input_type=Union[
        int, float, str]), Field(description=f"a {what} with its unit")]



def registered(check) -> Callable:
    """``check(value)`` with the project's errors turned into validation errors."""
    def run(value):
        try:
            check(value)
        except ClusterSimError as exc:
            raise Invalid(str(exc)) from None
        return value
    return run



class Section(BaseModel):
    """A mapping with a fixed set of keys: unknown keys are refused listing the valid ones,
    missing required keys named, before any value is looked at."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data):
        valid = tuple(cls.model_fields)
        if not isinstance(data, dict):
            raise Invalid(f"expected a mapping with keys {', '.join(valid)}, got "
                          f"{described(data)}")
        for key in data:
            if key not in valid:
                raise Invalid(f"unknown key {key!r}; valid: {', '.join(valid)}", key)
        for key, spec in cls.model_fields.items():
            if spec.is_required() and key not in data:
                raise Invalid(f"missing required key {key!r}")
        return data

    def given(self, key: str) -> bool:
        """Whether the file wrote ``key`` (rather than taking its default)."""
        return key in self.model_fields_set


def described(value) -> str:
    """What a user wrote, in words, for messages about its shape."""
    if value is None:
        return "nothing (the section is empty)"
    if isinstance(value, (list, tuple)):
        return f"a list ({_shown(value)})"
    return _shown(value)



def one_or_list(model, value, info: ValidationInfo, shape=lambda v: v):
    """``model`` validated on one mapping or on each of a list of them (``shape`` turns an
    item into its mapping), keeping the shape; errors keep their key paths."""
    def one(item, *at):
        try:
            return model.model_validate(shape(item), context=info.context)
        except ValidationError as exc:
            path, message = explain(exc.errors(include_url=False)[0])
            raise Invalid(message, *at, *path) from None

    if not isinstance(value, list):
        return one(value)
    if not value:
        raise Invalid("expected at least one item, got []")
    return [one(item, i) for i, item in enumerate(value)]



#: pydantic's error types -> what the message says was expected.
_EXPECTED = {
    "int_type": "expected an integer", "int_from_float": "expected an integer",
    "int_parsing": "expected an integer", "bool_type": "expected true or false",
    "bool_parsing": "expected true or false", "string_type": "expected a string",
    "float_type": "expected a number", "float_parsing": "expected a number",
    "finite_number": "expected a finite number", "list_type": "expected a list",
    "dict_type": "expected a mapping", "model_type": "expected a mapping",
}
_BOUNDS = {"greater_than_equal": ("ge", ">="), "greater_than": ("gt", ">"),
           "less_than_equal": ("le", "<="), "less_than": ("lt", "<")}


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _choices(ctx: dict) -> str:
    """A literal's choices, as the messages list them (``a, b, c``)."""
    return str(ctx.get("expected", "")).replace("'", "").replace(" or ", ", ")


def explain(error: dict) -> tuple[tuple, str]:
    """One pydantic error as ``(key path, message)`` in the project's words."""
    loc, kind = tuple(error["loc"]), error["type"]
    ctx, value = error.get("ctx") or {}, error.get("input")
    if loc and loc[-1] == "[key]":              # a mapping's key, not its value
        loc = loc[:-1]
        if kind == "literal_error":
            return loc, f"unknown key {_shown(value)}; valid: {_choices(ctx)}"
    if kind in ("value_error", "assertion_error") and "error" in ctx:
        exc = ctx["error"]
        return loc + tuple(getattr(exc, "key", ())), str(exc)
    if kind in _EXPECTED:
        return loc, f"{_EXPECTED[kind]}, got {_shown(value)}"
    if kind in _BOUNDS:
        name, sign = _BOUNDS[kind]
        return loc, f"must be {sign} {ctx[name]:g}, got {_shown(value)}"
    if kind == "literal_error":
        return loc, f"expected one of {_choices(ctx)}, got {_shown(value)}"
    if kind == "too_short":
        n = ctx.get("min_length", 1)
        return loc, f"expected at least {n} item{'s' if n != 1 else ''}, got {_shown(value)}"
    if kind == "missing" and loc:
        return loc[:-1], f"missing required key {loc[-1]!r}"
    return loc, f"{error['msg']}, got {_shown(value)}"


def validate(model: type[BaseModel], data, where, context: dict | None = None):
    """``model`` validated on ``data`` (located by ``where``, a :class:`simulator.config.Where`),
    or a ConfigError ``file:line: key.path: message`` for the first problem, saying how many
    more the file has."""
    try:
        return model.model_validate(data, context=context)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        path, message = explain(errors[0])
        more = len(errors) - 1
        if more:
            message += f" (and {more} more problem{'s' if more > 1 else ''})"
        raise where.error(path, message) from None
