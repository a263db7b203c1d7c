"""Output folders written safely: every file goes to a temporary name and is renamed into place,
so an interrupted run never leaves a half-written CSV behind."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

import pandas as pd
import yaml

from .. import __version__
from ..errors import ConfigError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def output_error(path, exc: OSError) -> ConfigError:
    """One line for an output location the user named that cannot be written."""
    import errno

    reasons = {errno.ENOTDIR: "a parent of it is a file, not a folder",
               errno.EEXIST: "a parent of it is a file, not a folder",
               errno.EISDIR: "it is a folder", errno.EACCES: "permission denied",
               errno.EPERM: "permission denied", errno.EROFS: "the file system is read-only",
               errno.ENOSPC: "no space left on the device",
               errno.EDQUOT: "the disk quota is exceeded"}
    why = reasons.get(exc.errno, exc.strerror or str(exc))
    return ConfigError(f"cannot write {str(path)!r}: {why}; nothing was written there")


def write_text(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically (a temporary file renamed into place); a location
    that cannot be written raises ConfigError and leaves nothing behind."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise output_error(path, exc) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600; give the usual permissions
        os.replace(tmp, path)
    except OSError as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise output_error(path, exc) from None
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


@contextlib.contextmanager
def staged_output(out: Path):
    """A folder's files written all or none: yield a hidden staging folder inside ``out``;
    when the block ends normally its files are renamed into ``out``, and on any error or
    interruption the staging folder is removed, leaving ``out`` as it was."""
    out = Path(out)
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(dir=out, prefix=".partial-"))
    except OSError as exc:
        raise output_error(out, exc) from None
    done = False
    try:
        yield stage
        for item in sorted(stage.rglob("*"), key=lambda p: len(p.parts)):
            target = out / item.relative_to(stage)
            if item.is_dir():
                target.mkdir(exist_ok=True)
            else:
                os.replace(item, target)
        done = True
    except OSError as exc:
        raise output_error(out, exc) from None
    finally:
        shutil.rmtree(stage, ignore_errors=True)
        if created and not done and not any(out.iterdir()):
            out.rmdir()


def published(written, stage: Path, out: Path) -> list[str]:
    """Where files written into a :func:`staged_output` stage ended up, as strings."""
    return [str(Path(out) / Path(p).relative_to(stage)) for p in written]


def write_csv(path: Path, frame: pd.DataFrame) -> Path:
    return write_text(path, frame.to_csv(index=False, lineterminator="\n"))


def write_resolved(path: Path, resolved: dict, seed: int) -> Path:
    """The scenario as it was run, with the seed and the package version."""
    doc = dict(resolved)
    doc["seed"] = seed
    doc["clustersim_version"] = __version__
    return write_text(path, yaml.safe_dump(doc, sort_keys=False))
