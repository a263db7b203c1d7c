"""Wall time of a validation suite: ``clustersim validate`` (every case in one process, or in
``--workers N``) against one ``clustersim compare`` process per case, the shell loop it replaces.

Usage: python benchmarks/bench_validate.py [--suite docs/validation/collectives.yaml]
           [--workers 2] [--only NAME ...]

The three ways run one after the other in this run, so their ratios are measured within one run
(these machines drift by up to 3x from hour to hour; see README.md). Their numbers must agree:
each case's MAPE and bias from ``compare``'s ``mape.csv`` equal the suite's ``validation.csv``
to its three decimals (checked): the way of running changes the wall time, never a number.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent


def _validate(suite: str, workers: int, only: list[str], out: Path) -> float:
    argv = [sys.executable, "-m", "simulator", "validate", suite, "--workers", str(workers),
            "-o", str(out)]
    for name in only:
        argv += ["--only", name]
    begin = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True, cwd=ROOT)
    return time.perf_counter() - begin


def _one_process_per_case(suite: str, only: list[str], out: Path) -> tuple[float, pd.DataFrame]:
    from simulator.comparison.suite import load_suite

    cases = load_suite(ROOT / suite).only(only).cases
    rows = []
    begin = time.perf_counter()
    for case in cases:
        folder = out / case.name
        subprocess.run([sys.executable, "-m", "simulator", "compare", str(case.file),
                        *case.args, "-o", str(folder)], check=True, capture_output=True,
                       cwd=ROOT)
        mape = pd.read_csv(folder / "mape.csv")
        for row in mape[mape["table"].isin(["size_band", "overall"])].itertuples():
            rows.append({"case": case.name, "group": "overall" if row.group == "all"
                         else row.group, "mape_pct": row.mape_pct, "bias_pct": row.bias_pct})
    return time.perf_counter() - begin, pd.DataFrame(rows)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="docs/validation/collectives.yaml")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--only", action="append", default=[])
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        one = _validate(args.suite, 1, args.only, tmp / "one")
        many = _validate(args.suite, args.workers, args.only, tmp / "many")
        loop, looped = _one_process_per_case(args.suite, args.only, tmp / "loop")
        suite = pd.read_csv(tmp / "one" / "validation.csv")
        pd.testing.assert_frame_equal(suite, pd.read_csv(tmp / "many" / "validation.csv"))
        merged = suite.merge(looped, on=["case", "group"], suffixes=("", "_loop"))
        assert len(merged) == len(suite), "every case and band of the suite from compare too"
        for column in ("mape_pct", "bias_pct"):
            assert (merged[column] - merged[f"{column}_loop"]).abs().max() < 6e-4, column
    cases = suite["case"].nunique()
    print(f"{cases} cases, {os.cpu_count()} CPUs: one compare process per case {loop:.1f} s, "
          f"validate in 1 process {one:.1f} s ({loop / one:.1f}x), in {args.workers} processes "
          f"{many:.1f} s ({loop / many:.1f}x); the numbers agree")


if __name__ == "__main__":
    main()
