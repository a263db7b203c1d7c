"""Command line: ``clustersim validate SUITE.yaml``.

Runs every case of a validation suite (:mod:`simulator.comparison.suite`) as ``clustersim
compare`` would run it alone, and prints one line per case (its MAPE and signed bias per size
band, or overall for a training table) and the means over cases. ``--baseline`` puts an
earlier run's ``validation.csv`` next to each number (``before -> after``) and
``--max-regression PCT`` exits 1 when any case's MAPE in any band rose by more than ``PCT``
points, so a model change is judged on every published table at once. ``-o DIR`` writes
``validation.csv``, ``means.csv`` and each case's compared points (``cases/NAME.csv``), all or
nothing.

Every case's flags are checked before the first case runs; a case that fails while running is
reported with its name and command, and then nothing is written (exit 2).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from ..errors import ClusterSimError, ConfigError

EXIT_REGRESSION = 1


class _CaseParser(argparse.ArgumentParser):
    """``compare``'s parser for a case's flags: a mistake raises instead of exiting."""

    def error(self, message):  # noqa: D401 - argparse hook
        raise ConfigError(message)


def _compare_parser() -> argparse.ArgumentParser:
    from .compare import add_compare_parsers

    parser = _CaseParser(prog="clustersim", add_help=False)
    add_compare_parsers(parser.add_subparsers(dest="command", parser_class=_CaseParser))
    return parser


def case_namespace(case, parser=None) -> argparse.Namespace:
    """The parsed ``compare`` flags of ``case``, or a ConfigError naming the case."""
    parser = parser or _compare_parser()
    try:
        args = parser.parse_args(["compare", str(case.file), *case.args])
    except ConfigError as exc:
        raise ConfigError(f"{case.origin}:{case.line}: case {case.name}: args: {exc}") from None
    except SystemExit:   # -h in a case's args
        raise ConfigError(f"{case.origin}:{case.line}: case {case.name}: args: -h/--help is "
                          f"not a comparison") from None
    # the suite's own flags, however spelt (argparse takes --out for --output)
    for flag, value in (("-o/--output", args.output), ("--max-mape", args.max_mape),
                        ("--workers", args.workers)):
        if value is not None:
            raise ConfigError(f"{case.origin}:{case.line}: case {case.name}: args: {flag} is "
                              f"the suite's to set, not a case's")
    return args


def run_case(case) -> dict:
    """Compare one case's file; ``{"name", "kind", "rows", "points", "error"}`` (``error``:
    the message of a user-input error, else None). Top level, so worker processes can run
    it."""
    from ..comparison.suite import case_rows
    from .compare import compared

    try:
        result = compared(case_namespace(case))
    except ClusterSimError as exc:
        return {"name": case.name, "kind": "", "rows": None, "points": None,
                "error": str(exc)}
    rows = case_rows(case.name, result.kind, result.summary)
    if rows.empty:
        return {"name": case.name, "kind": result.kind, "rows": None, "points": None,
                "error": f"nothing to score: {len(result.points)} compared points, none in a "
                         f"size band or with more than one GPU"}
    rows["command"] = case.command()
    return {"name": case.name, "kind": result.kind, "rows": rows, "points": result.points,
            "error": None}


def _run(cases, workers: int) -> list[dict]:
    if workers <= 1 or len(cases) <= 1:
        results = []
        for i, case in enumerate(cases, 1):
            print(f"clustersim validate: [{i}/{len(cases)}] {case.name}", file=sys.stderr)
            results.append(run_case(case))
        return results
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=min(workers, len(cases))) as pool:
        futures = [pool.submit(run_case, case) for case in cases]
        results = []
        for i, (case, future) in enumerate(zip(cases, futures), 1):
            results.append(future.result())
            print(f"clustersim validate: [{i}/{len(cases)}] {case.name}", file=sys.stderr)
        return results


def run_suite(suite, only: list[str] | None = None, workers: int = 1):
    """Run a suite's cases (a path, or a loaded :class:`~simulator.comparison.suite.Suite`):
    ``(table, results)``, the long table of :data:`~simulator.comparison.suite.COLUMNS` plus
    ``command``, and each case's result (``name``, ``kind``, ``rows``, ``points``: its
    compared points). The Python face of ``clustersim validate``, for notebooks:

    >>> table, _ = run_suite("docs/validation/collectives.yaml", only=["thanos"])  # doctest: +SKIP

    Every case's flags are checked before any case runs; a case that fails while running
    raises ConfigError naming every failed case (their messages go to standard error)."""
    from ..comparison import suite as sv

    if workers < 1:
        raise ConfigError(f"--workers must be >= 1, got {workers}")
    chosen = suite if isinstance(suite, sv.Suite) else sv.load_suite(suite)
    chosen = chosen.only(only)
    parser = _compare_parser()
    for case in chosen.cases:        # every case's flags checked before any case runs
        case_namespace(case, parser)
    results = _run(chosen.cases, workers)
    failed = [r for r in results if r["error"]]
    if failed:
        by_name = {c.name: c for c in chosen.cases}
        for r in failed:
            print(f"clustersim validate: case {r['name']} failed: {r['error']}\n"
                  f"  {by_name[r['name']].command()}", file=sys.stderr)
        raise ConfigError(f"{chosen.origin}: {len(failed)} of {len(results)} cases failed "
                          f"({', '.join(r['name'] for r in failed)}); nothing was written")
    return pd.concat([r["rows"] for r in results], ignore_index=True), results


def cmd_validate(args) -> int:
    from ..comparison import suite as sv

    if args.max_regression is not None:
        if not args.max_regression >= 0:
            raise ConfigError(f"--max-regression must be percentage points >= 0, got "
                              f"{args.max_regression}")
        if not args.baseline:
            raise ConfigError("--max-regression needs --baseline (an earlier run's "
                              "validation.csv) to compare with")
    if args.workers < 1:
        raise ConfigError(f"--workers must be >= 1, got {args.workers}")
    chosen = sv.load_suite(args.suite)
    baseline = sv.read_baseline(args.baseline) if args.baseline else None
    table, results = run_suite(chosen, args.only, args.workers)
    joined = sv.against(table, baseline) if baseline is not None else None
    if chosen.description:
        print(chosen.description)
        print()
    print(sv.format_table(table, joined))
    print()
    print("Means over cases (each case weighs the same):")
    print(sv.format_means(table, baseline))
    if baseline is not None:
        missing = sorted(set(baseline["case"]) - set(table["case"]))
        if missing and not args.only:
            print(f"\nIn the baseline, not in this run: {', '.join(missing)}")
    if args.output:
        _publish(Path(args.output), table, results)
    if args.max_regression is None:
        return 0
    worse = sv.regressions(joined, args.max_regression)
    for line in worse:
        print(f"clustersim validate: --max-regression {args.max_regression:g} FAILED: {line}",
              file=sys.stderr)
    if worse:
        return EXIT_REGRESSION
    print(f"--max-regression {args.max_regression:g}: no case's MAPE rose by more",
          file=sys.stderr)
    return 0


def _publish(out: Path, table: pd.DataFrame, results: list[dict]) -> None:
    from ..comparison.suite import DECIMALS, means
    from ..report.output import published, staged_output, write_csv

    with staged_output(out) as stage:
        written = [write_csv(stage / "validation.csv", table),
                   write_csv(stage / "means.csv", means(table).round(DECIMALS))]
        for r in results:
            written.append(write_csv(stage / "cases" / f"{r['name']}.csv", r["points"]))
    shown = published(written, stage, out)
    print(f"wrote {', '.join(shown[:2])} and {len(shown) - 2} case files in "
          f"{out / 'cases'}", file=sys.stderr)


def add_validate_parser(subparsers) -> None:
    """Add ``validate`` to ``clustersim``'s subcommands."""
    v = subparsers.add_parser(
        "validate", help="compare a suite of measured files (a YAML list of compare commands) "
                         "and print MAPE and bias per file and size band, with means")
    v.add_argument("suite", metavar="SUITE.yaml",
                   help="the suite: cases of a name, a measured file and compare's flags "
                        "(e.g. docs/validation/collectives.yaml)")
    v.add_argument("--only", action="append", default=[], metavar="NAME",
                   help="run only this case (repeatable)")
    v.add_argument("--baseline", default=None, metavar="validation.csv",
                   help="an earlier run's validation.csv: show before -> after")
    v.add_argument("--max-regression", type=float, default=None, metavar="PCT",
                   help="with --baseline: exit 1 if any case's MAPE in any band rose by more "
                        "than PCT percentage points")
    v.add_argument("--workers", type=int, default=1, metavar="N",
                   help="run the cases in N local processes (default 1; the results do not "
                        "depend on it)")
    v.add_argument("-o", "--output", default=None, metavar="OUT",
                   help="folder for validation.csv, means.csv and cases/NAME.csv")
    v.set_defaults(func=cmd_validate)
