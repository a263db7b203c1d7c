"""Build the documentation site: ``python docs/build.py`` (from anywhere).

Runs ``mkdocs build --strict`` on ``mkdocs.yml`` (every warning is an error) and says how long
it took; the site goes to ``site/``. ``python docs/build.py --serve`` serves it with live
reload instead. Other arguments are passed to MkDocs (``--site-dir DIR``, ``--verbose``, ...).
Needs the ``docs`` extra: ``pip install -e '.[docs]'``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str]) -> int:
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1", MPLBACKEND="Agg")
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    if "--serve" in argv:
        argv = [a for a in argv if a != "--serve"]
        command = [sys.executable, "-m", "mkdocs", "serve", "--strict", *argv]
    else:
        command = [sys.executable, "-m", "mkdocs", "build", "--strict", *argv]
    started = time.perf_counter()
    code = subprocess.call(command, cwd=ROOT, env=env)
    took = time.perf_counter() - started
    if "serve" not in command:
        print(f"docs/build.py: {'built the site' if code == 0 else 'FAILED'} in {took:.0f} s",
              file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
