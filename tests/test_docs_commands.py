"""Every command a reader can copy from README.md and docs/ runs, or says why not.

The blocks are read by ``docs/doc_commands.py`` (its docstring is the grammar of the
``<!-- docs-test: ... -->`` directives). One test per shell block runs the block's ``clustersim``
commands in order in a fresh folder and fails on a non-zero exit (so a renamed flag fails too);
commands a directive skips are still parsed by the real argument parser and reported as skipped
with their reason (``pytest -ra`` lists them); setup and ``pytest`` lines are not re-run.
``python docs/doc_commands.py`` prints the same summary as the site's page.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_S = 120


def _load():
    spec = importlib.util.spec_from_file_location("doc_commands", ROOT / "docs" / "doc_commands.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("doc_commands", module)
    spec.loader.exec_module(module)
    return module


dc = _load()
BLOCKS = dc.collect(ROOT)
RUN_BLOCKS = [b for b in BLOCKS if b.runnable()]
SKIPPED = [c for b in BLOCKS for c in b.commands if c.status == "skip"]


def _env() -> dict:
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env["MPLBACKEND"] = "Agg"
    env.pop("COLUMNS", None)
    return env


def _parse_only(command) -> None:
    """Parse a command the docs show but CI does not run: renamed flags still fail."""
    from simulator.cli import build_parser

    argv = dc._clustersim_argv(command.text)
    if argv is None or any(ch in command.text for ch in "|><;"):
        return
    try:
        build_parser().parse_args(argv)
    except SystemExit as exc:
        if exc.code:
            pytest.fail(f"{command.where}: `{command.text}` no longer parses (exit {exc.code})")


@pytest.mark.parametrize("block", RUN_BLOCKS, ids=[b.where for b in RUN_BLOCKS])
def test_documented_block_runs(block, tmp_path, capsys):
    missing = [m for m in block.requires if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"{block.where}: needs {', '.join(missing)}")
    dc.prepare(block, tmp_path, ROOT)
    env = _env()
    for command in block.commands:
        if command.status == "skip":
            _parse_only(command)
            continue
        if command.status != "run":
            continue
        try:
            done = subprocess.run(["bash", "-c", command.run_text], cwd=tmp_path, env=env,
                                  capture_output=True, text=True, timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{command.where}: `{command.run_text}` ran over {TIMEOUT_S} s")
        assert done.returncode == 0, (
            f"{command.where}: `{command.run_text}` exited {done.returncode}\n"
            f"--- stderr ---\n{done.stderr[-3000:]}\n--- stdout ---\n{done.stdout[-2000:]}")


@pytest.mark.parametrize("command", SKIPPED, ids=[c.where for c in SKIPPED])
def test_documented_command_not_run_still_parses(command):
    _parse_only(command)
    pytest.skip(f"not run: {command.where} `{command.text}`: {command.reason}")


def test_every_documented_command_is_classified_and_counted(capsys):
    unclassified = [c for b in BLOCKS for c in b.commands if c.status == "unclassified"]
    assert not unclassified, "commands CI neither runs nor skips with a reason:\n" + "\n".join(
        f"  {c.where}: {c.text}" for c in unclassified)
    run = [c for b in BLOCKS for c in b.commands if c.status == "run"]
    assert len(run) >= 30, f"only {len(run)} documented commands found: is the extractor broken?"
    # the README opens with the two commands of a fresh machine
    first = [b for b in BLOCKS if b.file == "README.md"][:2]
    assert any(c.text.startswith("clustersim run scenarios/quickstart.yaml")
               for c in first[0].commands)
    assert any(c.status == "suite" for c in first[1].commands)
    with capsys.disabled():
        print(f"\ndocumented commands: {len(run)} run, {len(SKIPPED)} not run "
              f"(python docs/doc_commands.py lists them with reasons)")


def test_extractor_handles_continuations_prompts_comments_and_directives(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text(
        "text\n"
        "<!-- docs-test: replace \"--size 1GiB\" \"--size 1MiB\" -->\n"
        "```bash\n"
        "# a comment\n"
        "clustersim collective --topology star \\\n"
        "    --size 1GiB    # trailing comment\n"
        "pip install -e . && clustersim algorithms\n"
        "```\n"
        "```console\n"
        "$ clustersim topology list\n"
        "dgx-a100\n"
        "```\n"
        "<!-- docs-test: skip reason=\"needs root\" -->\n"
        "```sh\n"
        "clustersim measure collectives --network shaped\n"
        "```\n"
        "```text\n"
        "clustersim not-a-command\n"
        "```\n", encoding="utf-8")
    blocks = dc.collect(tmp_path)
    assert [b.lang for b in blocks] == ["bash", "console", "sh"]
    first = blocks[0].commands
    assert [c.text for c in first] == ["clustersim collective --topology star --size 1GiB",
                                       "pip install -e .", "clustersim algorithms"]
    assert first[0].run_text.endswith("--size 1MiB") and first[0].line == 5
    assert [c.status for c in first] == ["run", "setup", "run"]
    assert [c.text for c in blocks[1].commands] == ["clustersim topology list"]
    assert blocks[2].commands[0].status == "skip" and blocks[2].commands[0].reason == "needs root"


def test_a_stale_rewrite_is_an_error(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text(
        "<!-- docs-test: replace \"--size 4GiB\" \"--size 1MiB\" -->\n"
        "```bash\nclustersim collective --topology star --size 1GiB\n```\n", encoding="utf-8")
    with pytest.raises(dc.DirectiveError, match="no command"):
        dc.collect(tmp_path)
