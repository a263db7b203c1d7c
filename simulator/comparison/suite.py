"""A validation suite: many measured files, each compared on its machine, summed up in one table.

``clustersim compare`` checks one measured file against one topology. The project's claims rest
on many (the ledger ``docs/validation/sources.md`` lists one command per published table), and a
change to the model is judged by what it does to all of them at once, band by band: the mean
absolute percentage error (MAPE) and the signed bias of every file in each message-size band,
and their means over files. A *suite* is that list written down as data, so the numbers a
change moves are the program's output, not a hand-run script's:

.. code-block:: yaml

    description: public nccl-tests tables with the presets a user would pick
    cases:
      - name: thanos                     # unique; letters, digits, ``_ . -``
        file: ../../tests/data/measurements/nccl_thanos_a100sxm80_1node.csv
        args: --topology dgx-a100 --param gpu=a100-sxm4-80gb
        note: one 8 x A100 SXM4 80 GB machine      # optional

``file`` is relative to the suite file; ``args`` are ``clustersim compare``'s own flags (a
string as typed on the command line, or a list). A case's result is the MAPE table ``compare``
prints: per size band for collective files, the speedup MAPE for training tables and the
metric's MAPE for LLM tables (:func:`case_rows`).

This module is the data side (the manifest's shape, the per-case rows, the means, the
comparison with an earlier run); :mod:`simulator.cli.validate` runs the cases.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..errors import ConfigError

#: The size bands of collective files, in the order they are shown.
BANDS = ("<64KiB", "64KiB-1MiB", ">=1MiB")
#: The group of a training or LLM table's one line: its overall MAPE.
OVERALL = "overall"
#: Columns of the long table a suite run writes (``validation.csv``) and reads back as a
#: baseline.
COLUMNS = ("case", "kind", "group", "points", "mape_pct", "bias_pct")

#: Decimals of the percentages a suite keeps: a baseline file diffs only where a number moved.
DECIMALS = 3

_TOP_KEYS = ("description", "cases")
_CASE_KEYS = ("name", "file", "args", "note")
_NAME = re.compile(r"[A-Za-z0-9_.-]+")
#: ``compare`` flags a case may not carry: the suite decides where results go and what fails.
_SUITE_FLAGS = ("-o", "--output", "--max-mape", "--workers")


@dataclass(frozen=True)
class Case:
    """One measured file and the ``compare`` flags it runs with."""

    name: str
    file: Path
    args: tuple
    note: str = ""
    origin: str = ""
    line: int = 0       # the line of the case's args (else of the case) in its suite file

    def command(self) -> str:
        """The ``clustersim compare`` command line of this case, as a user would type it."""
        return shlex.join(["clustersim", "compare", str(self.file), *self.args])


@dataclass(frozen=True)
class Suite:
    """A suite file's cases (see the module docstring)."""

    origin: str
    description: str
    cases: tuple

    def only(self, names: list[str] | None) -> "Suite":
        """The cases named in ``names`` (all of them for None or an empty list), in suite
        order; an unknown name is an error that lists the suite's names."""
        if not names:
            return self
        known = {c.name for c in self.cases}
        unknown = [n for n in names if n not in known]
        if unknown:
            raise ConfigError(f"--only {', '.join(unknown)}: no such case in {self.origin}; "
                              f"its cases: {', '.join(c.name for c in self.cases)}")
        wanted = set(names)
        return Suite(self.origin, self.description,
                     tuple(c for c in self.cases if c.name in wanted))


def load_suite(path) -> Suite:
    """Read and check a suite file: its keys, every case's name, file (it must exist) and
    args (a string or a list of strings, none of the flags the suite sets itself). Errors
    name the file, the line and the key."""
    from ..config import read_text_file, read_yaml

    origin = str(path)
    data, where = read_yaml(read_text_file(path), origin)
    if not isinstance(data, dict):
        raise ConfigError(f"{origin}: a suite is a mapping with the keys "
                          f"{', '.join(_TOP_KEYS)}; got {type(data).__name__}")
    for key in data:
        if key not in _TOP_KEYS:
            raise where.error((key,), f"unknown key; accepted: {', '.join(_TOP_KEYS)}")
    cases = data.get("cases")
    if not isinstance(cases, list) or not cases:
        raise where.error(("cases",), "expected a list of cases (name, file, args), at least "
                                      "one")
    base = Path(path).parent
    seen: dict = {}
    out = []
    for i, item in enumerate(cases):
        if not isinstance(item, dict):
            raise where.error(("cases", i), f"expected a mapping with the keys "
                                            f"{', '.join(_CASE_KEYS)}; got {item!r}")
        for key in item:
            if key not in _CASE_KEYS:
                raise where.error(("cases", i, key),
                                  f"unknown key; accepted: {', '.join(_CASE_KEYS)}")
        if isinstance(item.get("name"), int) and not isinstance(item["name"], bool):
            item = {**item, "name": str(item["name"])}     # name: 4090
        for key in ("name", "file"):
            if not isinstance(item.get(key), str) or not item[key].strip():
                raise where.error(("cases", i, key), "required: a non-empty text")
        name = item["name"].strip()
        if not _NAME.fullmatch(name):
            raise where.error(("cases", i, "name"), f"{name!r}: use letters, digits, '_', '.' "
                                                    f"and '-' only")
        if name in seen:
            raise where.error(("cases", i, "name"), f"{name!r} is also case {seen[name]}; "
                                                    f"names must be unique")
        seen[name] = i
        file = Path(os.path.normpath(base / item["file"].strip()))
        if not file.is_file():
            raise where.error(("cases", i, "file"), f"{item['file']!r}: no such file ({file})")
        args = _case_args(item.get("args", ""), where, i)
        note = item.get("note", "")
        if not isinstance(note, str):
            raise where.error(("cases", i, "note"), "expected a text")
        line = where.lines.get(("cases", i, "args"), where.lines.get(("cases", i), 0))
        out.append(Case(name, file, args, note, origin, line))
    description = data.get("description", "")
    if not isinstance(description, str):
        raise where.error(("description",), "expected a text")
    return Suite(origin, description, tuple(out))


def _case_args(value, where, i: int) -> tuple:
    if isinstance(value, str):
        try:
            args = shlex.split(value)
        except ValueError as exc:
            raise where.error(("cases", i, "args"), f"cannot split {value!r}: {exc}") from None
    elif isinstance(value, list) and all(isinstance(a, (str, int, float)) for a in value):
        args = [str(a) for a in value]
    else:
        raise where.error(("cases", i, "args"), "expected compare's flags: a text as typed on "
                                                "the command line, or a list of texts")
    for arg in args:
        flag = arg.split("=", 1)[0]
        if flag in _SUITE_FLAGS:
            raise where.error(("cases", i, "args"), f"{flag} is the suite's to set, not a "
                                                    f"case's (validate -o DIR, "
                                                    f"--max-regression PCT, --workers N)")
    return tuple(args)


def case_rows(name: str, kind: str, summary: dict) -> pd.DataFrame:
    """The rows a case adds to the suite's table: one per size band that has points and one
    ``overall`` for a collective file; one ``overall`` (speedup MAPE, or the LLM metric's)
    for a training or LLM table. Columns :data:`COLUMNS`; percentages to :data:`DECIMALS`
    decimals, the resolution a baseline is compared at."""
    rows = []
    if kind == "collective":
        bands = summary["size_band"].set_index("size_band")
        for band in BANDS:
            if band in bands.index:
                row = bands.loc[band]
                rows.append((name, kind, band, int(row["points"]),
                             round(float(row["mape_pct"]), DECIMALS),
                             round(float(row["bias_pct"]), DECIMALS)))
    overall = summary["overall"]
    if len(overall):
        row = overall.iloc[0]
        rows.append((name, kind, OVERALL, int(row["points"]),
                     round(float(row["mape_pct"]), DECIMALS),
                     round(float(row["bias_pct"]), DECIMALS)))
    return pd.DataFrame(rows, columns=list(COLUMNS))


def means(table: pd.DataFrame) -> pd.DataFrame:
    """Mean over cases of MAPE and bias, per kind and group (every case weighs the same,
    however many points it has, as the ledger's "means over tables" do); ``cases`` counts
    them and ``points`` sums their points."""
    if table.empty:
        return pd.DataFrame(columns=["kind", "group", "cases", "points", "mape_pct",
                                     "bias_pct"])
    order = {g: i for i, g in enumerate((*BANDS, OVERALL))}
    grouped = (table.groupby(["kind", "group"], sort=False)
               .agg(cases=("case", "count"), points=("points", "sum"),
                    mape_pct=("mape_pct", "mean"), bias_pct=("bias_pct", "mean"))
               .reset_index())
    grouped["_order"] = grouped["group"].map(order)
    return (grouped.sort_values(["kind", "_order"]).drop(columns="_order")
            .reset_index(drop=True))


def read_baseline(path) -> pd.DataFrame:
    """An earlier run's ``validation.csv``, checked: the columns it needs, numbers where
    numbers belong (errors name the file and the line)."""
    from ..measure.schema import _records

    origin = str(path)
    header, records = _records(Path(path), origin)
    missing = [c for c in ("case", "group", "mape_pct", "bias_pct") if c not in header]
    if missing:
        raise ConfigError(f"{origin}: not a validation.csv of clustersim validate: no column "
                          f"{', '.join(missing)} (it has {', '.join(header)})")
    rows, seen = [], {}
    for line, record in records:
        row = {"case": record["case"].strip(), "group": record["group"].strip(),
               "kind": record.get("kind", "").strip()}
        key = (row["case"], row["group"])
        if key in seen:
            raise ConfigError(f"{origin}:{line}: case {key[0]} group {key[1]} again (first on "
                              f"line {seen[key]}); a baseline has one row per case and group")
        seen[key] = line
        for column in ("mape_pct", "bias_pct", "points"):
            if column not in record:
                continue
            try:
                row[column] = float(record[column])
            except ValueError:
                raise ConfigError(f"{origin}:{line}: {column} {record[column]!r} is not a "
                                  f"number") from None
        rows.append(row)
    return pd.DataFrame(rows, columns=["case", "kind", "group", "points", "mape_pct",
                                       "bias_pct"])


def against(table: pd.DataFrame, baseline: pd.DataFrame) -> pd.DataFrame:
    """Each (case, group) of this run next to the baseline's: ``mape_before``,
    ``bias_before``, ``mape_pct``, ``bias_pct`` and ``delta_mape`` (after - before, in
    percentage points; NaN where the baseline has no such row)."""
    before = baseline[["case", "group", "mape_pct", "bias_pct"]].rename(
        columns={"mape_pct": "mape_before", "bias_pct": "bias_before"})
    joined = table.merge(before, on=["case", "group"], how="left")
    joined["delta_mape"] = joined["mape_pct"] - joined["mape_before"]
    return joined


def regressions(joined: pd.DataFrame, max_increase_pct: float) -> list[str]:
    """One line per (case, group) whose MAPE rose by more than ``max_increase_pct``
    percentage points over the baseline."""
    worse = joined[joined["delta_mape"] > max_increase_pct]
    return [f"{r.case} {r.group}: MAPE {r.mape_before:.1f} -> {r.mape_pct:.1f}% "
            f"(+{r.delta_mape:.1f} points)" for r in worse.itertuples(index=False)]


def cell(mape: float, bias: float) -> str:
    """``MAPE/bias`` as the ledger writes them (``19.5/-9.8``)."""
    return f"{mape:.1f}/{bias:+.1f}"


def format_table(table: pd.DataFrame, joined: pd.DataFrame | None = None) -> str:
    """One line per case: its points and ``MAPE/bias`` in each band and overall; with a
    baseline (``joined`` from :func:`against`), ``before -> after`` in each cell."""
    if table.empty:
        return "(no cases)"
    source = joined if joined is not None else table
    groups = [g for g in (*BANDS, OVERALL) if g in set(source["group"])]
    lines = []
    for (case, kind), rows in source.groupby(["case", "kind"], sort=False):
        by_group = rows.set_index("group")
        entry = {"case": case, "kind": kind,
                 "points": int(rows.loc[rows["group"] == OVERALL, "points"].sum()
                               or rows["points"].sum())}
        for group in groups:
            if group not in by_group.index:
                entry[group] = "-"
                continue
            row = by_group.loc[group]
            after = cell(row["mape_pct"], row["bias_pct"])
            if joined is not None:
                before = ("new" if pd.isna(row["mape_before"])
                          else cell(row["mape_before"], row["bias_before"]))
                after = f"{before} -> {after}"
            entry[group] = after
        lines.append(entry)
    return pd.DataFrame(lines).to_string(index=False)


def format_means(table: pd.DataFrame, baseline: pd.DataFrame | None = None) -> str:
    """The means over cases per kind and group (:func:`means`), with the baseline's means
    of the same cases where one is given."""
    now = means(table)
    if now.empty:
        return "(no cases)"
    if baseline is not None:
        same = baseline.drop(columns=["kind", "points"]).merge(
            table[["case", "group", "kind", "points"]], on=["case", "group"])
        before = means(same[list(COLUMNS)]).rename(
            columns={"mape_pct": "mape_before", "bias_pct": "bias_before"})
        now = now.merge(before[["kind", "group", "mape_before", "bias_before"]],
                        on=["kind", "group"], how="left")
    shown = pd.DataFrame({"kind": now["kind"], "group": now["group"], "cases": now["cases"],
                          "points": now["points"]})
    after = [cell(m, b) for m, b in zip(now["mape_pct"], now["bias_pct"])]
    if baseline is not None:
        after = [("-" if pd.isna(mb) else cell(mb, bb)) + " -> " + a
                 for mb, bb, a in zip(now["mape_before"], now["bias_before"], after)]
    shown["mean MAPE/bias"] = after
    return shown.to_string(index=False)
