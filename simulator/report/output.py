"""Output folders written safely: every file goes to a temporary name and is renamed into place,
so an interrupted run never leaves a half-written CSV behind."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pandas as pd
import yaml

from .. import __version__


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text(path: Path, text: str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600; give the usual permissions
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def write_csv(path: Path, frame: pd.DataFrame) -> Path:
    return write_text(path, frame.to_csv(index=False, lineterminator="\n"))


def write_resolved(path: Path, resolved: dict, seed: int) -> Path:
    """The scenario as it was run, with the seed and the package version."""
    doc = dict(resolved)
    doc["seed"] = seed
    doc["clustersim_version"] = __version__
    return write_text(path, yaml.safe_dump(doc, sort_keys=False))
