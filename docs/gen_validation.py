"""The validation tables and figures of "How close to real machines", regenerated.

Runs ``clustersim compare`` (with the ideal wires and with the default ``nccl`` library model)
and ``clustersim calibrate`` on the public nccl-tests tables the project ships in
``tests/data/measurements/`` with their presets, and returns the Markdown table and the
measured-against-simulated bus bandwidth PNGs. Nothing here is fitted to these files except by
``calibrate``, whose numbers are for the held-out half.

* The site build (``docs/hooks.py``) calls :func:`generate` and puts the results into the
  page and the site, so the published numbers are the program's numbers of that build.
* ``python docs/gen_validation.py --update`` also rewrites the snapshot between the markers
  in ``docs/explanation/validation.md`` and the PNGs in ``docs/validation/``, which is what
  GitHub shows.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "measurements"
PAGE = ROOT / "docs" / "explanation" / "validation.md"
START, END = "<!-- generated:validation:start -->", "<!-- generated:validation:end -->"


@dataclass(frozen=True)
class Case:
    file: str           # in tests/data/measurements
    preset: str
    label: str


CASES = (
    Case("nccl_deepops_dgxa100_2node_ib_ring.csv", "dgx-a100-2node", "DGX A100 x2, HDR IB, ring"),
    Case("nccl_deepops_dgx1_v100_2node_roce100g.csv", "dgx1-v100-2node-roce",
         "DGX-1 V100 x2, RoCE"),
    Case("nccl_autodl_2x2080ti_pcie_nop2p.csv", "pcie-2x-2080ti", "2x RTX 2080 Ti, PCIe, no P2P"),
)
BANDS = ("<64KiB", "64KiB-1MiB", ">=1MiB")
BAND_LABEL = {"<64KiB": "< 64 KiB", "64KiB-1MiB": "64 KiB-1 MiB", ">=1MiB": ">= 1 MiB"}


def _clustersim(*args: str, cwd: Path) -> str:
    env = dict(os.environ, MPLBACKEND="Agg")
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    done = subprocess.run([sys.executable, "-m", "simulator", *args], cwd=cwd, env=env,
                          capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"clustersim {' '.join(args)} exited {done.returncode}:\n"
                           f"{done.stderr[-2000:]}")
    return done.stdout


def _compare(case: Case, library: str, work: Path) -> tuple[pd.DataFrame, bytes]:
    out = work / f"{Path(case.file).stem}-{library}"
    _clustersim("compare", str(DATA / case.file), "--topology", case.preset,
                "--library", library, "-o", str(out), cwd=work)
    mape = pd.read_csv(out / "mape.csv")
    return mape[mape["table"] == "size_band"].set_index("group"), \
        (out / "busbw_measured_vs_simulated.png").read_bytes()


def _calibrate(case: Case, work: Path) -> dict:
    """Held-out MAPE / bias, all bands, before and after, and the fitted values."""
    text = _clustersim("calibrate", str(DATA / case.file), "--topology", case.preset, "--out",
                       str(work / f"{case.preset}-cal.yaml"), cwd=work)
    row = next(line.split() for line in text.splitlines() if line.split()[:1] == ["all"])
    fitted = re.findall(r"fitted: (\S+) = (\S+)", text)
    return {"before": (float(row[2]), float(row[4])), "after": (float(row[3]), float(row[5])),
            "fitted": fitted}


@dataclass
class Result:
    markdown: str
    images: dict        # name in docs/validation/ -> PNG bytes


def generate(workers: int = 2) -> Result:
    with tempfile.TemporaryDirectory(prefix="clustersim-validation-") as tmp:
        work = Path(tmp)
        with ThreadPoolExecutor(workers) as pool:
            compares = {(c, lib): pool.submit(_compare, c, lib, work)
                        for c in CASES for lib in ("ideal", "nccl")}
            calibrations = {c: pool.submit(_calibrate, c, work) for c in CASES}
            compares = {k: f.result() for k, f in compares.items()}
            calibrations = {k: f.result() for k, f in calibrations.items()}
    lines = ["| file (preset) | band | points | ideal MAPE / bias | nccl MAPE / bias |",
             "|---|---|---:|---:|---:|"]
    for case in CASES:
        ideal, nccl = compares[(case, "ideal")][0], compares[(case, "nccl")][0]
        for i, band in enumerate(b for b in BANDS if b in nccl.index):
            head = f"{case.label} (`{case.preset}`)" if i == 0 else ""
            lines.append(
                f"| {head} | {BAND_LABEL[band]} | {int(nccl.loc[band, 'points'])} | "
                f"{ideal.loc[band, 'mape_pct']:.1f} / {ideal.loc[band, 'bias_pct']:+.1f} | "
                f"{nccl.loc[band, 'mape_pct']:.1f} / {nccl.loc[band, 'bias_pct']:+.1f} |")
    lines += ["", "After `clustersim calibrate` (the library's constants fitted on half of each "
              "file, split by size band with seed 0), on the held-out half, all bands together:",
              "", "| file (preset) | MAPE / bias before | after | fitted |", "|---|---:|---:|---|"]
    for case in CASES:
        cal = calibrations[case]
        fitted = ", ".join(f"{k} {float(v):.4g}" for k, v in cal["fitted"])
        lines.append(f"| {case.label} (`{case.preset}`) | {cal['before'][0]:.1f} / "
                     f"{cal['before'][1]:+.1f} | {cal['after'][0]:.1f} / {cal['after'][1]:+.1f} | "
                     f"{fitted} |")
    lines += ["", "Measured against simulated bus bandwidth (`nccl` library):", ""]
    images = {}
    for case in CASES:
        name = Path(case.file).with_suffix(".png").name
        images[name] = compares[(case, "nccl")][1]
        lines.append(f"![{case.label}](../validation/{name})")
    return Result("\n".join(lines) + "\n", images)


def splice(page_text: str, generated: str) -> str:
    """The page with the text between the markers replaced."""
    start, end = page_text.index(START) + len(START), page_text.index(END)
    return page_text[:start] + "\n" + generated + page_text[end:]


def main(argv: list[str]) -> int:
    result = generate()
    if "--update" in argv:
        PAGE.write_text(splice(PAGE.read_text(encoding="utf-8"), result.markdown),
                        encoding="utf-8")
        for name, data in result.images.items():
            (ROOT / "docs" / "validation" / name).write_bytes(data)
        print(f"updated {PAGE.relative_to(ROOT)} and docs/validation/*.png")
    else:
        print(result.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
