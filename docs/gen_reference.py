"""Reference pages generated from the code: the command line, the file grammars, the presets.

Each function returns Markdown; ``docs/hooks.py`` adds them to the site at build time, so the
reference cannot drift from the program. ``python docs/gen_reference.py cli`` (or ``schema``,
``presets``) prints one to look at.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WIDTH = "100"


# -- command line ------------------------------------------------------------------------------

def _subcommands(parser: argparse.ArgumentParser, prefix: str):
    """(full command, parser, one-line help) for every subcommand, depth first."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                full = f"{prefix} {name}"
                yield full, sub, helps.get(name) or ""
                yield from _subcommands(sub, full)


def cli_markdown() -> str:
    os.environ["COLUMNS"] = WIDTH                 # argparse wraps at the terminal's width
    from simulator.cli import build_parser

    parser = build_parser()
    parser.prog = "clustersim"
    subs = list(_subcommands(parser, "clustersim"))
    lines = [
        "# Command line",
        "",
        "Generated from the program's own argument parser (`simulator.cli.build_parser`) when "
        "this site is built, so it is exactly what `--help` prints. `python -m simulator` is the "
        "same program as `clustersim`. Every user mistake is one line on stderr and exit "
        "code 2; `compare --max-mape` exits 1 when a gate fails.",
        "",
        "| command | what it does |",
        "|---|---|",
    ]
    for full, _, text in subs:
        anchor = full.replace(" ", "-")
        lines.append(f"| [`{full}`](#{anchor}) | {' '.join(text.split())} |")
    lines += ["", "## clustersim", "", "```text", parser.format_help().rstrip(), "```", ""]
    for full, sub, text in subs:
        anchor = full.replace(" ", "-")
        level = "#" * min(2 + full.count(" ") - 1, 4)
        lines += [f"{level} {full} {{#{anchor}}}", "", " ".join(text.split()) + ("." if text else ""),
                  "", "```text", sub.format_help().rstrip(), "```", ""]
    return "\n".join(lines)


# -- JSON Schema -------------------------------------------------------------------------------

def _schema(kind: str) -> dict:
    from simulator.grammar import json_schema

    return json.loads(json_schema(kind))


def _type(spec: dict) -> str:
    if "$ref" in spec:
        name = spec["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    if "enum" in spec:
        return "one of " + ", ".join(f"`{v}`" for v in spec["enum"])
    if "const" in spec:
        return f"`{spec['const']}`"
    for key in ("anyOf", "oneOf"):
        if key in spec:
            kinds = [_type(s) for s in spec[key] if s.get("type") != "null"]
            nullable = any(s.get("type") == "null" for s in spec[key])
            return " or ".join(kinds) + (" (or null)" if nullable else "")
    kind = spec.get("type", "any")
    if kind == "array":
        items = spec.get("items")
        return f"list of {_type(items)}" if items else "list"
    if kind == "object":
        extra = spec.get("additionalProperties")
        if isinstance(extra, dict):
            keys = spec.get("propertyNames", {}).get("enum")
            keys = f" ({', '.join(f'`{k}`' for k in keys)})" if keys else ""
            return f"mapping{keys} to {_type(extra)}"
        return "mapping"
    bounds = []
    for key, sign in (("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="),
                      ("exclusiveMaximum", "<")):
        if key in spec:
            bounds.append(f"{sign} {spec[key]}")
    return kind + (f" ({', '.join(bounds)})" if bounds else "")


def _cell(text) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _properties_table(model: dict) -> list[str]:
    required = set(model.get("required", []))
    lines = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for key, spec in model.get("properties", {}).items():
        default = "required" if key in required else (
            f"`{json.dumps(spec['default'])}`" if "default" in spec else "")
        lines.append(f"| `{key}` | {_cell(_type(spec))} | {_cell(default)} | "
                     f"{_cell(spec.get('description', ''))} |")
    return lines


def schema_markdown(kind: str) -> str:
    schema = _schema(kind)
    what = {"scenario": "scenario files (`scenarios/*.yaml`, `clustersim run`, `clustersim sweep`)",
            "topology": "topology preset files (`topologies/*.yaml`, `--topology FILE.yaml`)"}[kind]
    lines = [
        f"# {kind.capitalize()} file grammar",
        "",
        f"The grammar of {what}, generated from the typed models that validate them "
        f"(`clustersim schema {kind}` prints the same as JSON Schema). Keys are strict: an "
        "unknown key, a wrong type (`\"8\"` is not a count, `1` is not `true`) or a value out "
        "of range is refused with `file:line: key.path: what was expected, got what`. Sizes, "
        "durations and bandwidths may be written with units ([Units](units.md)).",
        "",
        f"For completion and checks while typing, save the schema (`clustersim schema {kind} -o "
        f"{kind}.schema.json`) and put `# yaml-language-server: $schema={kind}.schema.json` on "
        "the first line of the file.",
        "",
        "## Top level",
        "",
        _cell(schema.get("description", "")),
        "",
        *_properties_table(schema),
        "",
    ]
    for name, model in schema.get("$defs", {}).items():
        lines += [f"## {name} {{#{name.lower()}}}", "", _cell(model.get("description", "")), ""]
        if model.get("properties"):
            lines += _properties_table(model)
        else:
            lines.append(f"Type: {_cell(_type(model))}")
        lines.append("")
    lines += ["## The JSON Schema", "", '??? note "JSON Schema as printed by '
              f'`clustersim schema {kind}`"', "", "    ```json"]
    lines += ["    " + line for line in json.dumps(schema, indent=2).splitlines()]
    lines += ["    ```", ""]
    return "\n".join(lines)


# -- presets -----------------------------------------------------------------------------------

def presets_markdown() -> str:
    import yaml

    from simulator.topology import load_topology

    files = sorted((ROOT / "topologies").glob("*.yaml"))
    lines = [
        "# Topology presets",
        "",
        "Every machine and cluster shipped in `topologies/`, generated from the files when this "
        "site is built: what it is, its parameters and the source of each number. Use a preset "
        "by name (`--topology dgx-a100`); presets built by `gpu_cluster` take more machines "
        "with `--param nodes=N`; write your own with "
        "[Describe your cluster as a preset](../how-to/preset.md). The builders and every "
        "parameter they take: [`simulator.topology`](api/topology.md#simulator.topology.gpu_cluster).",
        "",
        "| preset | builder | GPUs | in one sentence |",
        "|---|---|---:|---|",
    ]
    docs = []
    for path in files:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        graph = load_topology(doc["name"])
        summary = _cli_output(["topology", "show", doc["name"]])
        docs.append((doc, summary))
        first = _cell(_first_sentence(doc.get("description") or ""))
        gpus = sum(1 for _, d in graph.nodes(data=True) if d.get("kind") == "gpu")
        lines.append(f"| [`{doc['name']}`](#{doc['name']}) | `{doc['builder']}` | {gpus} | "
                     f"{first} |")
    lines.append("")
    for doc, summary in docs:
        lines += [f"## {doc['name']} {{#{doc['name']}}}", "", _cell(doc.get("description", "")), "",
                  "| parameter | value |", "|---|---|"]
        for key, value in (doc.get("params") or {}).items():
            lines.append(f"| `{key}` | `{_cell(value)}` |")
        for key, value in (doc.get("per_gpu") or {}).items():
            lines.append(f"| `{key}` | `{_cell(value)}` per GPU (follows `gpus_per_node`) |")
        lines += ["", "Sources:", ""]
        lines += [f"- {_cell(s)}" for s in doc.get("sources") or ["(none given)"]]
        if doc.get("library"):
            lines += ["", f"Library settings: `{_cell(json.dumps(doc['library']))}`"]
        lines += ["", f'??? info "`clustersim topology show {doc["name"]}`"', "", "    ```text"]
        lines += ["    " + line for line in summary.rstrip().splitlines()]
        lines += ["    ```", ""]
    return "\n".join(lines)


def _first_sentence(text: str) -> str:
    import re

    parts = re.split(r"(?<!e\.g)(?<!i\.e)(?<! al)(?<!etc)\.\s+(?=[A-Z])", " ".join(text.split()))
    return parts[0].rstrip(".")


def _cli_output(argv: list[str]) -> str:
    """What ``clustersim ARGV`` prints, run in this process."""
    import contextlib
    import io

    from simulator.cli import main

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = main(argv)
    if code:
        raise RuntimeError(f"clustersim {' '.join(argv)} exited {code}")
    return buffer.getvalue()


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "cli"
    if what == "cli":
        print(cli_markdown())
    elif what == "presets":
        print(presets_markdown())
    else:
        print(schema_markdown(sys.argv[2] if len(sys.argv) > 2 else "scenario"))
