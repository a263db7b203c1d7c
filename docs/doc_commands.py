"""The shell commands the documentation shows, and how CI runs them.

Every fenced block tagged ``bash``, ``sh``, ``shell`` or ``console`` in ``README.md`` and
``docs/**/*.md`` is split into commands: ``\\`` continuations are joined, comments dropped,
``&&`` chains split; in ``console`` blocks only the lines after a ``$ `` prompt are commands (the
rest is output). Each command is then one of:

* **run**: ``clustersim ...`` or ``python -m simulator ...``; ``tests/test_docs_commands.py``
  runs it in a fresh folder (with ``scenarios/``, ``topologies/``, ``tests/`` and ``docs/`` of the
  repository linked into it) and fails on a non-zero exit;
* **setup**: creating and activating the virtual environment and ``pip install``: not re-run,
  CI installs the package itself (``.ci/run``);
* **test suite**: ``pytest`` lines: not re-run, they are the suite this check belongs to;
* **skipped**: marked by a directive (below) with its reason. A skipped ``clustersim`` command
  is still parsed by the real argument parser, so a renamed flag fails the test all the same.

Any other command without a directive is an error: a page cannot show a command CI ignores
without saying why.

Directives are HTML comments directly above the opening fence (invisible on GitHub and on the
site), one or more, each applying to the commands of that block::

    <!-- docs-test: skip reason="needs root and iproute2" -->
    <!-- docs-test: skip match="measure training" reason="..." -->   only commands containing it
    <!-- docs-test: replace "--param nodes=128" "--param nodes=2" -->
    <!-- docs-test: scenario scenarios/zero_7b.yaml zero.gpus=8 topology.params.nodes=1 -->
    <!-- docs-test: file measured.csv=tests/data/measurements/nccl_autodl_2x2080ti_pcie_nop2p.csv -->
    <!-- docs-test: requires torch -->
    <!-- docs-test: continue -->

and, above a block that is not a shell block (a YAML file the page shows)::

    <!-- docs-test: save my-cluster.yaml -->

``replace`` runs the command with the first text replaced by the second (a directive whose text
no command of the block contains is an error, so rewrites cannot go stale silently);
``scenario`` runs on a copy of that scenario file with the dotted keys set (values are YAML);
``file`` copies a repository file into the run folder under a name before the block runs;
``requires`` skips the block where a Python module is not installed; ``continue`` runs the block
after the page's previous shell block, in the same folder (a how-to in several steps); ``save`` writes the
block's text into the run folder of every later shell block of the same page, so the commands
use exactly the file the page shows.

This module needs only the standard library and PyYAML: the test and the site build
(``docs/hooks.py``, page "Commands not run in CI") both use it.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LANGUAGES = {"bash", "sh", "shell", "console"}
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})\s*(?P<lang>[\w+-]*)")
DIRECTIVE = re.compile(r"^\s*<!--\s*docs-test:\s*(?P<body>.*?)\s*-->\s*$")

SETUP = "setup: creates or activates the environment or installs packages; CI does this itself (.ci/run)"
SUITE = "test suite: the tests this check is part of; CI runs them itself"


@dataclass
class Command:
    text: str                      # as shown (one line, continuations joined)
    file: str                      # relative to the repository root
    line: int                      # first line of the command in the file
    status: str = "run"            # run | setup | suite | skip
    reason: str = ""
    run_text: str = ""             # what CI runs (after replace/scenario rewriting)
    notes: list = field(default_factory=list)   # how the run differs, for the summary

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    def is_clustersim(self) -> bool:
        return _clustersim_argv(self.text) is not None


@dataclass
class Block:
    file: str
    line: int                      # line of the opening fence
    lang: str
    commands: list[Command] = field(default_factory=list)
    replaces: list[tuple[str, str]] = field(default_factory=list)
    scenarios: list[tuple[str, dict]] = field(default_factory=list)
    files: list[tuple[str, str]] = field(default_factory=list)
    requires: list[str] = field(default_factory=list)
    saved: list[tuple[str, str]] = field(default_factory=list)    # (name, text) from the page
    continues: bool = False        # runs in the folder of the page's previous shell block

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    def runnable(self) -> list[Command]:
        return [c for c in self.commands if c.status == "run"]


class DirectiveError(ValueError):
    pass


# -- reading -----------------------------------------------------------------------------------

def documents(root: Path = ROOT) -> list[Path]:
    """README.md and every Markdown page under docs/, in a stable order."""
    pages = sorted(p for p in (root / "docs").rglob("*.md") if "site" not in p.parts)
    return [root / "README.md", *pages]


def _strip_comment(line: str) -> str:
    """Drop a shell comment: an unquoted # at the start or after whitespace."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
            continue
        if ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def _split_chain(text: str) -> list[str]:
    """Split ``a && b`` (outside quotes) into its commands."""
    parts, quote, start, i = [], None, 0, 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif text.startswith("&&", i):
            parts.append(text[start:i].strip())
            start = i + 2
            i += 1
        i += 1
    parts.append(text[start:].strip())
    return [p for p in parts if p]


def _logical_lines(lines: list[tuple[int, str]], console: bool) -> list[tuple[int, str]]:
    """(line number, command text) after joining continuations and dropping comments."""
    out: list[tuple[int, str]] = []
    current, first, in_command = "", 0, False
    for number, raw in lines:
        line = raw.rstrip()
        if console and not in_command:
            if not line.startswith("$ "):
                continue                      # output
            line, first = line[2:], number
        elif console and in_command and line.startswith("> "):
            line = line[2:]
        if not in_command:
            first = number
        stripped = _strip_comment(line)
        if stripped.endswith("\\"):
            current += stripped[:-1].rstrip() + " "
            in_command = True
            continue
        current += stripped
        in_command = False
        if current.strip():
            out.append((first, " ".join(current.split())))
        current = ""
    if current.strip():
        out.append((first, " ".join(current.split())))
    return out


def _parse_directive(body: str, block: Block, skips: list[tuple[str | None, str]]) -> None:
    words = shlex.split(body)
    if not words:
        raise DirectiveError("empty docs-test directive")
    kind, args = words[0], words[1:]
    if kind == "skip":
        opts = dict(a.split("=", 1) for a in args if "=" in a)
        if not opts.get("reason") or set(opts) - {"reason", "match"}:
            raise DirectiveError(f"skip needs reason=\"...\" (and optionally match=\"...\"): {body}")
        skips.append((opts.get("match"), opts["reason"]))
    elif kind == "replace":
        if len(args) != 2:
            raise DirectiveError(f"replace needs two quoted texts: {body}")
        block.replaces.append((args[0], args[1]))
    elif kind == "scenario":
        if len(args) < 2 or any("=" not in a for a in args[1:]):
            raise DirectiveError(f"scenario needs a file and KEY=VALUE pairs: {body}")
        import yaml
        sets = {k: yaml.safe_load(v) for k, v in (a.split("=", 1) for a in args[1:])}
        block.scenarios.append((args[0], sets))
    elif kind == "file":
        if len(args) != 1 or "=" not in args[0]:
            raise DirectiveError(f"file needs NAME=REPOSITORY_PATH: {body}")
        name, source = args[0].split("=", 1)
        block.files.append((name, source))
    elif kind == "continue":
        if args:
            raise DirectiveError(f"continue takes no arguments: {body}")
        block.continues = True
    elif kind == "requires":
        if not args:
            raise DirectiveError(f"requires needs module names: {body}")
        block.requires.extend(args)
    else:
        raise DirectiveError(f"unknown docs-test directive {kind!r}: {body}")


def _classify(command: Command) -> None:
    words = command.text.split()
    head = words[0]
    if _clustersim_argv(command.text) is not None:
        return
    if head in {".", "source"} and len(words) > 1 and words[1].endswith("activate"):
        command.status, command.reason = "setup", SETUP
    elif re.match(r"^python3?( -m)? ?(venv|pip)\b", command.text) or head in {"pip", "pip3"}:
        command.status, command.reason = "setup", SETUP
    elif head == "pytest" or re.match(r"^python3? -m pytest\b", command.text):
        command.status, command.reason = "suite", SUITE
    else:
        command.status = "unclassified"


def _clustersim_argv(text: str) -> list[str] | None:
    """The arguments after ``clustersim`` / ``python -m simulator``, or None."""
    try:
        words = shlex.split(text)
    except ValueError:
        return None
    if words and words[0] == "clustersim":
        return words[1:]
    if len(words) >= 3 and words[0] in {"python", "python3"} and words[1:3] == ["-m", "simulator"]:
        return words[3:]
    return None


def parse_file(path: Path, root: Path = ROOT) -> list[Block]:
    rel = path.relative_to(root).as_posix()
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    pending: list[tuple[int, str]] = []       # directives seen directly above
    saved: list[tuple[str, str]] = []         # files the page showed so far (save directive)
    i = 0
    while i < len(lines):
        line = lines[i]
        directive = DIRECTIVE.match(line)
        if directive:
            pending.append((i + 1, directive.group("body")))
            i += 1
            continue
        fence = FENCE.match(line)
        if not fence:
            if pending and line.strip():
                raise DirectiveError(f"{rel}:{pending[0][0]}: docs-test directive not directly "
                                     f"above a fenced block")
            i += 1
            continue
        marker, indent, lang = fence.group("fence"), len(fence.group("indent")), fence.group("lang")
        body: list[tuple[int, str]] = []
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(marker):
            body.append((j + 1, lines[j][indent:] if lines[j][:indent].isspace() else lines[j]))
            j += 1
        if lang.lower() in LANGUAGES:
            block = Block(rel, i + 1, lang.lower(), saved=list(saved))
            skips: list[tuple[str | None, str]] = []
            for number, text in pending:
                try:
                    _parse_directive(text, block, skips)
                except DirectiveError as exc:
                    raise DirectiveError(f"{rel}:{number}: {exc}") from None
            for number, text in _logical_lines(body, console=block.lang == "console"):
                for part in _split_chain(text):
                    command = Command(part, rel, number)
                    _classify(command)
                    for match, reason in skips:
                        if match is None or match in part:
                            if command.status in {"run", "unclassified"}:
                                command.status, command.reason = "skip", reason
                    block.commands.append(command)
            for match, _ in skips:
                if match is not None and not any(match in c.text for c in block.commands):
                    raise DirectiveError(f"{block.where}: skip match={match!r} matches no command")
            _rewrite(block)
            if block.continues:
                if not blocks:
                    raise DirectiveError(f"{block.where}: continue, but no shell block above it "
                                         f"on this page")
                _merge(blocks[-1], block)
            else:
                blocks.append(block)
        elif pending:
            for number, text in pending:
                words = shlex.split(text)
                if len(words) != 2 or words[0] != "save":
                    raise DirectiveError(f"{rel}:{number}: above a ```{lang} block only "
                                         f"'save NAME' applies, got {text!r}")
                saved.append((words[1], "\n".join(t for _, t in body) + "\n"))
        pending = []
        i = j + 1
    if pending:
        raise DirectiveError(f"{rel}:{pending[0][0]}: docs-test directive at the end of the file")
    return blocks


def _rewrite(block: Block) -> None:
    for command in block.commands:
        command.run_text = command.text
    for old, new in block.replaces:
        hit = False
        for command in block.runnable():
            if old in command.run_text:
                command.run_text = command.run_text.replace(old, new)
                hit = True
        if not hit:
            raise DirectiveError(f"{block.where}: replace {old!r}: no command of the block "
                                 f"that CI runs contains it")
    for path, _ in block.scenarios:
        hit = False
        for command in block.runnable():
            words = command.run_text.split()
            if path in words:
                command.run_text = " ".join(_scenario_copy(path) if w == path else w
                                            for w in words)
                sets = dict(next(s for p, s in block.scenarios if p == path))
                command.notes.append(f"{path} with " + ", ".join(
                    f"{k}: {json.dumps(v, separators=(', ', ': '))}" for k, v in sets.items()))
                hit = True
        if not hit:
            raise DirectiveError(f"{block.where}: scenario {path}: no command of the block "
                                 f"that CI runs names it")


def _merge(first: Block, later: Block) -> None:
    """A ``continue`` block: its commands run after ``first``'s, in the same folder."""
    first.commands.extend(later.commands)
    first.replaces.extend(later.replaces)
    first.scenarios.extend(later.scenarios)
    first.files.extend(later.files)
    first.requires.extend(later.requires)
    first.saved.extend(s for s in later.saved if s not in first.saved)


def _scenario_copy(path: str) -> str:
    return f"_docs_test/{Path(path).name}"


OUTPUT_FLAGS = {"-o", "--out", "--output", "--topology-out"}


def _inputs(block: Block, command: Command) -> tuple:
    """What the block prepares that this command reads (by the names in its text)."""
    words = set(command.text.split())
    return (tuple((p, json.dumps(s, sort_keys=True)) for p, s in block.scenarios if p in words),
            tuple(f for f in block.files if f[0] in words),
            tuple(f for f in block.saved if f[0] in words), tuple(block.requires))


def _dedupe(blocks: list[Block]) -> None:
    """A command shown again, identical, with identical inputs, runs once.

    Identical means the same text as run, in a block with the same prepared inputs, neither
    reading what an earlier command of its block wrote nor writing what a later one reads (a
    path after an output flag or a redirection): such a command does the same thing wherever it
    is shown.
    """
    seen: dict[tuple, Command] = {}
    for block in blocks:
        outputs = [_outputs(c.run_text) for c in block.commands]
        for i, command in enumerate(block.commands):
            words = set(command.run_text.split())
            reads_output = any(words & out for out in outputs[:i])
            read_later = any(outputs[i] & set(later.run_text.split())
                             for later in block.commands[i + 1:])
            if command.status != "run" or reads_output or read_later:
                continue
            key = (command.run_text, _inputs(block, command))
            if key in seen:
                command.status = "repeat"
                command.reason = f"the same command runs at {seen[key].where}"
            else:
                seen[key] = command


def _outputs(text: str) -> set[str]:
    words = text.split()
    return {value for flag, value in zip(words, words[1:]) if flag in OUTPUT_FLAGS or flag == ">"}


def collect(root: Path = ROOT) -> list[Block]:
    """Every shell block of the documentation, parsed and classified."""
    blocks = []
    for path in documents(root):
        blocks.extend(parse_file(path, root))
    _dedupe(blocks)
    return blocks


# -- preparing a run folder ---------------------------------------------------------------------

LINKED = ("scenarios", "topologies", "tests", "notebooks", "benchmarks", "docs")


def _set_key(doc: dict, dotted: str, value) -> None:
    keys = dotted.split(".")
    node = doc
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    node[keys[-1]] = value


def prepare(block: Block, workdir: Path, root: Path = ROOT) -> None:
    """Link the repository's input folders into ``workdir`` and write the block's files."""
    import shutil

    import yaml

    for name in LINKED:
        if (root / name).exists() and not (workdir / name).exists():
            (workdir / name).symlink_to(root / name, target_is_directory=True)
    for path, sets in block.scenarios:
        doc = yaml.safe_load((root / path).read_text(encoding="utf-8"))
        for key, value in sets.items():
            _set_key(doc, key, value)
        target = workdir / _scenario_copy(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    for name, source in block.files:
        shutil.copyfile(root / source, workdir / name)
    for name, text in block.saved:
        (workdir / name).parent.mkdir(parents=True, exist_ok=True)
        (workdir / name).write_text(text, encoding="utf-8")


# -- the summary page --------------------------------------------------------------------------

def summary_markdown(blocks: list[Block]) -> str:
    """The page "Commands not run in CI, and why" (and the counts)."""
    commands = [c for b in blocks for c in b.commands]
    run = [c for c in commands if c.status == "run"]
    rewritten = [c for c in run if c.run_text != c.text]
    skipped = [c for c in commands if c.status == "skip"]
    other = [c for c in commands if c.status in {"setup", "suite"}]
    repeats = [c for c in commands if c.status == "repeat"]
    requires = sorted({m for b in blocks for m in b.requires})
    lines = [
        "# Commands not run in CI, and why",
        "",
        "Every shell block of the README and of these pages is checked by "
        "`tests/test_docs_commands.py` (how: [About these docs](../about.md#every-command-runs-in-ci)). "
        "This page is generated from the pages themselves when the site is built.",
        "",
        f"- **{len(run)} commands run** in CI ({len(rewritten)} of them on smaller sizes, "
        "listed below);",
        f"- **{len(repeats)} commands shown twice** run once (same command, same inputs);",
        f"- **{len(skipped)} not run**, each with its reason (their flags are still checked "
        "by the real argument parser where they are `clustersim` commands);",
        f"- **{len(other)} setup and test-suite commands** are not re-run: CI creates the "
        "environment, installs the package and runs the tests itself.",
    ]
    if requires:
        lines.append(f"- Blocks that need {', '.join(f'`{m}`' for m in requires)} are skipped "
                     "where it is not installed (it is in CI: the `measure` extra).")
    lines += ["", "## Not run", "", "| where | command | why |", "|---|---|---|"]
    for c in skipped:
        lines.append(f"| `{c.where}` | `{_cell(c.text)}` | {_cell(c.reason)} |")
    lines += ["", "## Run on smaller sizes", "", "| where | as shown | as run |", "|---|---|---|"]
    for c in rewritten:
        notes = "".join(f"; {_cell(n)}" for n in c.notes)
        lines.append(f"| `{c.where}` | `{_cell(c.text)}` | `{_cell(c.run_text)}`{notes} |")
    lines += ["", "## Shown twice, run once", "", "| where | command | runs at |", "|---|---|---|"]
    for c in repeats:
        lines.append(f"| `{c.where}` | `{_cell(c.text)}` | `{c.reason.rsplit(' ', 1)[-1]}` |")
    lines += ["", "## Setup and test-suite commands", "", "| where | command | why not re-run |",
              "|---|---|---|"]
    for c in other:
        lines.append(f"| `{c.where}` | `{_cell(c.text)}` | {_cell(c.reason)} |")
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


if __name__ == "__main__":                                   # python docs/doc_commands.py
    print(summary_markdown(collect()))
