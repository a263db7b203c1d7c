"""One tidy schema for measured and simulated points, and strict readers for it.

Everything that compares the simulator with reality goes through two tables:

Collective points (:data:`COLLECTIVE_COLUMNS`, one row per collective, algorithm, GPU count and
size), required
    ``source`` (where the number comes from), ``topology`` (a preset name or YAML path; may be
    empty, then the caller names it), ``collective`` (:data:`~simulator.schedules.COLLECTIVES`),
    ``algorithm`` (a registered algorithm or ``auto``: whatever the library chose), ``gpus``,
    ``size_bytes``, ``time_us``, ``algbw_GBps``, ``busbw_GBps``. Times and bandwidths follow
    nccl-tests: ``time_us`` is the out-of-place time, algbw = size / time, busbw = algbw x the
    bus factor (:func:`~simulator.collective.bus_factor`), GB = 1e9 bytes; a row needs only one
    of the three (:func:`complete_timing` derives the others).
and optional (:data:`COLLECTIVE_OPTIONAL`)
    ``time_std_us``, ``iterations``, ``backend`` (``nccl``, ``gloo``, ...), ``device`` (GPU or
    CPU model), ``network``, ``bandwidth_bytes_per_s`` (the shaped link rate of a measured
    network, when there is one), ``correct`` (the result was checked and right),
    ``inplace_time_us``, ``dtype``, ``notes``.

Training points (:data:`TRAINING_COLUMNS`)
    ``source, topology, model, aggregation, gpus, batch_per_gpu, precision,
    throughput_samples_s, speedup, efficiency`` plus optional :data:`TRAINING_OPTIONAL`.

:func:`read_measurements` reads a CSV in this schema, or in the layout of the public nccl-tests
tables collected in the project's ``measurements`` folder (``source_id, hardware, gpu_model,
gpus, ..., collective, algo, ..., size_bytes, count, time_us, algbw_GBps, busbw_GBps,
inplace_time_us, ...``). :func:`read_training` does the same for training points. Both validate
strictly, the way the YAML loaders do: a missing or unknown column, a non-numeric value, a
size or time that is not positive, an unknown collective or algorithm raises ConfigError naming
the file, the 1-based line and the column.

nccl-tests prints rows of size 0 when a size rounds down to zero elements per rank (e.g.
all_gather of 8 bytes on 2 ranks); they move no data. In the nccl-tests layouts such rows are
skipped and listed in ``frame.attrs["skipped"]``; in our schema a size must be positive.
"""

from __future__ import annotations

import csv
import math
import re
from pathlib import Path

import pandas as pd

from simulator.config import read_text_file
from simulator.errors import ConfigError

__all__ = [
    "COLLECTIVE_COLUMNS", "COLLECTIVE_OPTIONAL", "NCCL_COLLECTIVES", "NCCL_CSV_COLUMNS",
    "TIMING_COLUMNS", "TRAINING_COLUMNS", "TRAINING_OPTIONAL", "check_frame",
    "complete_timing", "empty_collective_frame", "nccl_algorithm", "nccl_collective",
    "read_measurements", "read_training",
]

#: The simulator's algorithm for a library's own all-reduce (``algorithm: library`` rows of
#: ``clustersim measure collectives``): gloo's all-reduce is a ring; NCCL's is whatever its
#: tuner picks, which the comparison resolves with the simulator's tuner (``auto``).
LIBRARY_ALGORITHM = {"gloo": "ring", "nccl": "auto"}

COLLECTIVE_COLUMNS = ("source", "topology", "collective", "algorithm", "gpus", "size_bytes",
                      "time_us", "algbw_GBps", "busbw_GBps")
COLLECTIVE_OPTIONAL = ("time_std_us", "iterations", "backend", "device", "network",
                       "bandwidth_bytes_per_s", "correct", "inplace_time_us", "dtype", "notes",
                       "protocol", "library_version", "launch", "nodes", "gpus_per_node")
TRAINING_COLUMNS = ("source", "topology", "model", "aggregation", "gpus", "batch_per_gpu",
                    "precision", "throughput_samples_s", "speedup", "efficiency")
TRAINING_OPTIONAL = ("device", "network", "throughput_unit", "notes", "framework", "hardware",
                     "nodes", "gpus_per_node", "cores", "threads_per_rank", "accumulation")

#: nccl-tests binary / NCCL collective names -> ours.
NCCL_COLLECTIVES = {"all_reduce": "allreduce", "all_gather": "allgather",
                    "reduce_scatter": "reduce_scatter", "broadcast": "broadcast",
                    "reduce": "reduce", "alltoall": "alltoall"}

#: The columns of the public nccl-tests tables (``measurements/nccl_*.csv``).
NCCL_CSV_COLUMNS = ("source_id", "hardware", "gpu_model", "gpus", "nodes", "gpus_per_node",
                    "intra_node", "inter_node", "nccl_version", "collective", "algo", "proto",
                    "dtype", "redop", "size_bytes", "count", "time_us", "algbw_GBps",
                    "busbw_GBps", "inplace_time_us", "inplace_algbw_GBps",
                    "inplace_busbw_GBps", "notes")
_NCCL_CSV_REQUIRED = ("source_id", "gpus", "collective", "algo", "size_bytes", "time_us",
                      "algbw_GBps", "busbw_GBps")

#: The public training tables (``measurements/train_*.csv``).
_TRAIN_CSV_REQUIRED = ("source_id", "model", "arch", "gpus", "precision", "batch_per_gpu",
                       "throughput_img_s", "speedup", "efficiency")
_TRAIN_CSV_COLUMNS = ("source_id", "model", "dataset", "hardware", "framework", "arch", "gpus",
                      "nodes", "gpus_per_node", "precision", "batch_per_gpu", "throughput_img_s",
                      "throughput_unit", "speedup", "efficiency", "derived_fields", "notes")

_UNSUPPORTED_NCCL_ALGOS = ("collnetchain", "collnet_chain", "pat")


# --- names --------------------------------------------------------------------------------------

def nccl_collective(name: str) -> str:
    """Our name for an nccl-tests / NCCL collective name (``all_reduce`` -> ``allreduce``).

    Our own spellings pass through; anything else raises ConfigError listing the valid names.
    """
    from simulator.schedules import COLLECTIVES

    key = str(name).strip().lower()
    if key.endswith("_perf"):
        key = key[:-5]
    if key in NCCL_COLLECTIVES:
        return NCCL_COLLECTIVES[key]
    if key in COLLECTIVES:
        return key
    raise ConfigError(f"unknown collective {name!r}; valid: "
                      f"{', '.join(sorted(set(NCCL_COLLECTIVES) | set(COLLECTIVES)))}")


def nccl_algorithm(text: str) -> str:
    """Our algorithm for an NCCL algorithm as written in a table or ``NCCL_ALGO``.

    One algorithm: ``Ring...`` -> ``ring``; ``Tree`` -> ``double_binary_tree`` (NCCL's tree is
    the double binary tree of Sanders, Speck and Traeff, NCCL >= 2.4); ``NVLS`` -> ``nvls``;
    ``NVLSTree`` -> ``nvls_tree``; ``CollNetDirect`` -> ``collnet``. ``default (NCCL auto)`` or
    an empty value -> ``auto``, the library's tuner. A selection in NCCL's own grammar (a list
    ``Ring,Tree``, an exclusion ``^NVLS``, per-function entries ``allreduce:Tree``; see
    :mod:`simulator.library.nccl_env`) -> ``auto[<text>]``: the tuner, over the algorithms the
    selection leaves. ``NCCL_NVLS_ENABLE=0`` in the text leaves out NVLS and NVLS tree as NCCL
    does. CollNetChain and PAT have no counterpart in the simulator and raise ConfigError, as
    does text NCCL would refuse.
    """
    from simulator.library import nccl_env

    written = str(text).strip()
    if written.startswith("auto["):               # our own spelling of a selection
        if not written.endswith("]"):
            raise ConfigError(f"algorithm {text!r}: expected auto[<NCCL_ALGO list>], as "
                              f"auto[Ring,Tree]")
        written = written[5:-1]
    written = written.split("(", 1)[0].strip()    # drop "(NCCL_ALGO=RING ...)"
    written = written.split("=", 1)[1].strip() if written.upper().startswith("NCCL_ALGO=") \
        else written
    if "/" in written and all(part.strip().lower() in nccl_env.ALGORITHMS
                              for part in written.split("/")):
        written = written.replace("/", ",")       # "Ring/Tree" as people write it: a list
    key = written.lower()
    no_nvls = "nvls_enable=0" in str(text).lower().replace(" ", "")
    words = set(re.findall(r"[a-z]+", key))
    if nccl_env.is_selection(written):
        nccl_env.allowed_algorithms(written, "allreduce")   # NCCL's grammar, or a clear error
        if no_nvls:
            written = nccl_env.without_nvls(written)
        return f"auto[{written.replace(' ', '')}]"
    if not key or words & {"auto", "default"}:               # "NCCL auto", "default"
        return f"auto[{nccl_env.NO_NVLS}]" if no_nvls else "auto"
    if key in ("nvlstree", "nvls_tree"):
        return "nvls_tree"
    if key.startswith("nvls"):
        return "nvls"
    if key.startswith("ring"):
        return "ring"
    if key.startswith("tree"):
        return "double_binary_tree"
    if key in ("collnetdirect", "collnet_direct", "collnet"):
        return "collnet"
    if key.startswith(_UNSUPPORTED_NCCL_ALGOS):
        raise ConfigError(f"NCCL algorithm {text!r} has no counterpart in the simulator; "
                          f"supported: Ring, Tree, NVLS, NVLSTree, CollNetDirect, a list of "
                          f"them (Ring,Tree), an exclusion (^NVLS), default (NCCL auto)")
    raise ConfigError(f"unknown NCCL algorithm {text!r}; expected Ring, Tree, NVLS, NVLSTree, "
                      f"CollNetDirect, a list or exclusion of them, or 'default (NCCL auto)'")


# --- timing columns -----------------------------------------------------------------------------

#: The nccl-tests timing columns; any one of them gives the other two.
TIMING_COLUMNS = ("time_us", "algbw_GBps", "busbw_GBps")


def complete_timing(collective: str, gpus: int, size_bytes: int, time_us: float,
                    algbw_GBps: float, busbw_GBps: float) -> tuple[float, float, float]:
    """``(time_us, algbw_GBps, busbw_GBps)`` with the absent ones (NaN) derived from one that is
    given, by the nccl-tests definitions: algbw = size / time (GB = 1e9 bytes), busbw = algbw x
    :func:`~simulator.collective.bus_factor` of the collective over ``gpus`` ranks. Values given
    are kept as they are. Raises ConfigError (without a place: the caller adds file and line)
    when none is given, or when the one given cannot give a time."""
    from simulator.collective import bus_factor

    given = [not math.isnan(v) for v in (time_us, algbw_GBps, busbw_GBps)]
    if all(given):
        return time_us, algbw_GBps, busbw_GBps
    factor = bus_factor(collective, gpus)
    if not any(given):
        raise ConfigError(f"columns {', '.join(map(repr, TIMING_COLUMNS))}: all empty; give one "
                          f"of them (the others follow from size_bytes, gpus and the collective "
                          f"as in nccl-tests)")
    if given[0]:
        time = time_us
    elif given[1]:
        if algbw_GBps <= 0:
            raise ConfigError(f"column 'algbw_GBps': {algbw_GBps:g} gives no time (time_us is "
                              f"empty)")
        time = size_bytes / (algbw_GBps * 1e3)
    else:
        if busbw_GBps <= 0 or factor <= 0:
            why = (f"{collective} on {gpus} rank(s) has bus factor 0" if factor <= 0
                   else f"it is {busbw_GBps:g}")
            raise ConfigError(f"column 'busbw_GBps' gives no time ({why}) and time_us and "
                              f"algbw_GBps are empty")
        time = size_bytes / (busbw_GBps / factor * 1e3)
    algbw = algbw_GBps if given[1] else size_bytes / (time * 1e3)
    busbw = busbw_GBps if given[2] else algbw * factor
    return time, algbw, busbw


# --- cell parsing -------------------------------------------------------------------------------

class _Cells:
    """Typed access to one CSV record; every error names file, line and column."""

    def __init__(self, origin: str, line: int, record: dict):
        self.origin, self.line, self.record = origin, line, record

    def error(self, column: str, message: str) -> ConfigError:
        return ConfigError(f"{self.origin}:{self.line}: column {column!r}: {message}")

    def text(self, column: str, required: bool = True) -> str:
        value = (self.record.get(column) or "").strip()
        if required and not value:
            raise self.error(column, "empty value")
        return value

    def number(self, column: str, *, required: bool = True, minimum: float | None = None,
               positive: bool = False) -> float:
        raw = self.text(column, required)
        if not raw:
            return math.nan
        try:
            value = float(raw)
        except ValueError:
            raise self.error(column, f"expected a number, got {raw!r}") from None
        if not math.isfinite(value):
            raise self.error(column, f"expected a finite number, got {raw!r}")
        if positive and value <= 0:
            raise self.error(column, f"must be > 0, got {raw}")
        if minimum is not None and value < minimum:
            raise self.error(column, f"must be >= {minimum:g}, got {raw}")
        return value

    def integer(self, column: str, *, required: bool = True, minimum: int | None = None) -> int:
        raw = self.text(column, required)
        if not raw:
            return None
        try:
            value = float(raw)
        except ValueError:
            raise self.error(column, f"expected an integer, got {raw!r}") from None
        if not math.isfinite(value) or value != int(value):
            raise self.error(column, f"expected an integer, got {raw!r}")
        if minimum is not None and value < minimum:
            raise self.error(column, f"must be >= {minimum}, got {raw}")
        return int(value)

    def boolean(self, column: str):
        raw = self.text(column, required=False).lower()
        if not raw:
            return None
        if raw in ("true", "yes", "1", "ok"):
            return True
        if raw in ("false", "no", "0", "failed"):
            return False
        raise self.error(column, f"expected true or false, got {raw!r}")

    def collective(self, column: str) -> str:
        try:
            return nccl_collective(self.text(column))
        except ConfigError as exc:
            raise self.error(column, str(exc)) from None

    def timing(self, row: dict) -> None:
        """Read ``time_us``, ``algbw_GBps`` and ``busbw_GBps`` into ``row`` (which has its
        collective, gpus and size_bytes): any one of them gives the other two."""
        values = (self.number("time_us", required=False, positive=True),
                  self.number("algbw_GBps", required=False, minimum=0),
                  self.number("busbw_GBps", required=False, minimum=0))
        try:
            done = complete_timing(row["collective"], row["gpus"], row["size_bytes"], *values)
        except ConfigError as exc:
            raise ConfigError(f"{self.origin}:{self.line}: {exc}") from None
        row.update(zip(TIMING_COLUMNS, done))

    def algorithm(self, column: str, nccl: bool) -> str:
        raw = self.text(column, required=not nccl)
        try:
            if nccl:
                return nccl_algorithm(raw)
            if raw == "library":
                backend = self.text("backend", required=False)
                if backend not in LIBRARY_ALGORITHM:
                    raise ConfigError(f"'library' rows need a backend column naming one of "
                                      f"{', '.join(LIBRARY_ALGORITHM)}, got {backend!r}")
                return LIBRARY_ALGORITHM[backend]
            if raw.startswith("auto["):
                return nccl_algorithm(raw)           # an NCCL_ALGO selection, checked
            if raw != "auto":
                from simulator.schedules import get_algorithm

                get_algorithm(raw)
            return raw
        except ConfigError as exc:
            raise self.error(column, str(exc)) from None


def _records(path: Path, origin: str):
    """``(header, [(line, record dict)])`` of a CSV file, with each record's first line."""
    if not path.exists():
        raise ConfigError(f"measurement file {origin!r} not found")
    text = read_text_file(path, origin)
    reader = csv.reader(text.splitlines(keepends=True))
    try:
        header = [h.strip() for h in next(reader)]
    except StopIteration:
        raise ConfigError(f"{origin}: empty file (expected a CSV header)") from None
    except csv.Error as exc:
        raise ConfigError(f"{origin}:1: invalid CSV: {exc}") from None
    duplicates = sorted({h for h in header if header.count(h) > 1})
    if duplicates:
        raise ConfigError(f"{origin}:1: duplicate column(s) {', '.join(map(repr, duplicates))}")
    rows, previous = [], reader.line_num
    while True:
        try:
            values = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            raise ConfigError(f"{origin}:{previous + 1}: invalid CSV: {exc}") from None
        line, previous = previous + 1, reader.line_num
        if not values or all(not v.strip() for v in values):
            continue
        if len(values) != len(header):
            raise ConfigError(f"{origin}:{line}: expected {len(header)} fields like the header, "
                              f"got {len(values)}")
        rows.append((line, dict(zip(header, values))))
    return header, rows


def _missing(header, required) -> list[str]:
    return [c for c in required if c not in header]


# --- collective points --------------------------------------------------------------------------

def _text_column(values: pd.Series) -> pd.Series:
    """Strings, with absent values (None, NaN) as ""."""
    return pd.Series(["" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)
                      for v in values], index=values.index, dtype=str)


def empty_collective_frame() -> pd.DataFrame:
    """A collective-points table with no rows and every column, typed."""
    return _collective_frame([])


def _collective_frame(rows: list[dict]) -> pd.DataFrame:
    columns = list(COLLECTIVE_COLUMNS + COLLECTIVE_OPTIONAL)
    frame = pd.DataFrame(rows, columns=columns)
    for c in ("gpus", "size_bytes"):
        frame[c] = frame[c].astype("int64")
    for c in ("time_us", "algbw_GBps", "busbw_GBps", "time_std_us", "bandwidth_bytes_per_s",
              "inplace_time_us"):
        frame[c] = frame[c].astype("float64")
    for c in ("iterations", "nodes", "gpus_per_node"):
        frame[c] = frame[c].astype("Int64")
    frame["correct"] = frame["correct"].astype("boolean")
    for c in ("source", "topology", "collective", "algorithm", "backend", "device", "network",
              "dtype", "notes"):
        frame[c] = _text_column(frame[c])
    return frame


def _our_collective_row(cells: _Cells) -> dict:
    row = {
        "source": cells.text("source"),
        "topology": cells.text("topology", required=False),
        "collective": cells.collective("collective"),
        "algorithm": cells.algorithm("algorithm", nccl=False),
        "gpus": cells.integer("gpus", minimum=1),
        "size_bytes": cells.integer("size_bytes", minimum=1),
    }
    cells.timing(row)
    optional = {
        "time_std_us": lambda c: cells.number(c, required=False, minimum=0),
        "iterations": lambda c: cells.integer(c, required=False, minimum=1),
        "nodes": lambda c: cells.integer(c, required=False, minimum=1),
        "gpus_per_node": lambda c: cells.integer(c, required=False, minimum=1),
        "bandwidth_bytes_per_s": lambda c: cells.number(c, required=False, positive=True),
        "correct": cells.boolean,
        "inplace_time_us": lambda c: cells.number(c, required=False, positive=True),
    }
    for column in COLLECTIVE_OPTIONAL:
        if column in cells.record:
            read = optional.get(column, lambda c: cells.text(c, required=False))
            row[column] = read(column)
    return row


def _nccl_csv_row(cells: _Cells) -> dict | None:
    size = cells.integer("size_bytes", minimum=0)
    if size == 0:
        return None
    row = {
        "source": cells.text("source_id"),
        "topology": "",
        "collective": cells.collective("collective"),
        "algorithm": cells.algorithm("algo", nccl=True),
        "gpus": cells.integer("gpus", minimum=1),
        "size_bytes": size,
        "backend": "nccl",
    }
    cells.timing(row)
    if "inplace_time_us" in cells.record:
        row["inplace_time_us"] = cells.number("inplace_time_us", required=False, positive=True)
    for column in ("nodes", "gpus_per_node", "iterations"):
        if cells.record.get(column):
            row[column] = cells.integer(column, minimum=1)
    for ours, theirs in (("device", "gpu_model"), ("network", "inter_node"), ("dtype", "dtype"),
                         ("notes", "notes"), ("protocol", "proto"),
                         ("library_version", "nccl_version"), ("launch", "launch")):
        if theirs in cells.record:
            row[ours] = cells.text(theirs, required=False)
    return row


def read_measurements(path) -> pd.DataFrame:
    """Read collective points from a CSV in our schema or the public nccl-tests table layout.

    Parameters
    ----------
    path : str or Path
        The CSV file.

    Returns
    -------
    pandas.DataFrame
        Columns :data:`COLLECTIVE_COLUMNS` then :data:`COLLECTIVE_OPTIONAL` (empty strings / NaN
        where a value is absent). ``attrs``: ``origin`` (the path), ``layout``
        (``"clustersim"`` or ``"nccl-table"``), ``lines`` (the 1-based line of each row) and
        ``skipped`` (``(line, reason)`` of rows left out).

    Raises
    ------
    ConfigError
        Naming the file, the line and the column of the first bad value.
    """
    path = Path(path)
    origin = str(path)
    header, records = _records(path, origin)
    if set(COLLECTIVE_COLUMNS) <= set(header):
        unknown = [c for c in header if c not in COLLECTIVE_COLUMNS + COLLECTIVE_OPTIONAL]
        if unknown:
            raise ConfigError(f"{origin}:1: unknown column(s) {', '.join(map(repr, unknown))}; "
                              f"valid: {', '.join(COLLECTIVE_COLUMNS + COLLECTIVE_OPTIONAL)}")
        layout, convert = "clustersim", _our_collective_row
    elif "source_id" in header and "algo" in header:
        missing = _missing(header, _NCCL_CSV_REQUIRED)
        if missing:
            raise ConfigError(f"{origin}:1: nccl-tests table layout without column(s) "
                              f"{', '.join(map(repr, missing))}")
        layout, convert = "nccl-table", _nccl_csv_row
    elif "throughput_samples_s" in header or "throughput_img_s" in header:
        raise ConfigError(f"{origin}: this is a training table, not collective points "
                          f"(read it with read_training)")
    else:
        missing = _missing(header, COLLECTIVE_COLUMNS)
        raise ConfigError(f"{origin}:1: missing column(s) {', '.join(map(repr, missing))}; a "
                          f"measurement file has {', '.join(COLLECTIVE_COLUMNS)} (optional: "
                          f"{', '.join(COLLECTIVE_OPTIONAL)}), or is an nccl-tests table with "
                          f"{', '.join(_NCCL_CSV_REQUIRED)}")
    rows, lines, skipped = [], [], []
    for line, record in records:
        row = convert(_Cells(origin, line, record))
        if row is None:
            skipped.append((line, "size 0 (nccl-tests prints it when a size rounds down to "
                                  "zero elements per rank)"))
            continue
        rows.append(row)
        lines.append(line)
    if not rows:
        raise ConfigError(f"{origin}: no measurement rows")
    frame = _collective_frame(rows)
    frame.attrs.update(origin=origin, layout=layout, lines=lines, skipped=skipped)
    return frame


def check_frame(frame: pd.DataFrame, columns=COLLECTIVE_COLUMNS, what: str = "measured points"
                ) -> pd.DataFrame:
    """``frame`` must have ``columns`` and at least one row (for frames built in code)."""
    if not isinstance(frame, pd.DataFrame):
        raise ConfigError(f"{what}: expected a pandas DataFrame, got {type(frame).__name__}")
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        origin = frame.attrs.get("origin", what)
        raise ConfigError(f"{origin}: missing column(s) {', '.join(map(repr, missing))}")
    if frame.empty:
        raise ConfigError(f"{frame.attrs.get('origin', what)}: no rows")
    return frame


# --- training points ----------------------------------------------------------------------------

def _training_frame(rows: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=list(TRAINING_COLUMNS + TRAINING_OPTIONAL))
    for c in ("gpus", "batch_per_gpu"):
        frame[c] = frame[c].astype("int64")
    for c in ("throughput_samples_s", "speedup", "efficiency"):
        frame[c] = frame[c].astype("float64")
    for c in ("source", "topology", "model", "aggregation", "precision", "device", "network",
              "throughput_unit", "notes", "framework", "hardware"):
        frame[c] = _text_column(frame[c])
    for c in ("nodes", "gpus_per_node", "cores", "threads_per_rank", "accumulation"):
        frame[c] = pd.to_numeric(frame[c], errors="coerce")
    return frame


def _our_training_row(cells: _Cells) -> dict:
    row = {
        "source": cells.text("source"), "topology": cells.text("topology", required=False),
        "model": cells.text("model"), "aggregation": cells.text("aggregation"),
        "gpus": cells.integer("gpus", minimum=1),
        "batch_per_gpu": cells.integer("batch_per_gpu", minimum=1),
        "precision": cells.text("precision"),
        "throughput_samples_s": cells.number("throughput_samples_s", positive=True),
        "speedup": cells.number("speedup", positive=True),
        "efficiency": cells.number("efficiency", positive=True),
    }
    for column in TRAINING_OPTIONAL:
        if column in cells.record:
            row[column] = cells.text(column, required=False)
    return row


def _train_csv_row(cells: _Cells) -> dict:
    return {
        "source": cells.text("source_id"), "topology": "", "model": cells.text("model"),
        "aggregation": cells.text("arch"), "gpus": cells.integer("gpus", minimum=1),
        "batch_per_gpu": cells.integer("batch_per_gpu", minimum=1),
        "precision": cells.text("precision"),
        "throughput_samples_s": cells.number("throughput_img_s", positive=True),
        "speedup": cells.number("speedup", positive=True),
        "efficiency": cells.number("efficiency", positive=True),
        "device": cells.text("hardware", required=False) if "hardware" in cells.record else "",
        "throughput_unit": cells.text("throughput_unit", required=False)
        if "throughput_unit" in cells.record else "",
        "notes": cells.text("notes", required=False) if "notes" in cells.record else "",
        "framework": cells.text("framework", required=False)
        if "framework" in cells.record else "",
        "hardware": cells.text("hardware", required=False) if "hardware" in cells.record else "",
        "nodes": cells.integer("nodes", minimum=1) if cells.record.get("nodes") else None,
        "gpus_per_node": cells.integer("gpus_per_node", minimum=1)
        if cells.record.get("gpus_per_node") else None,
        # what ``clustersim measure training`` adds: the cores its ranks shared
        "cores": cells.integer("cores", minimum=1) if cells.record.get("cores") else None,
        "threads_per_rank": cells.integer("threads_per_rank", minimum=1)
        if cells.record.get("threads_per_rank") else None,
        # micro-batches of batch_per_gpu per optimizer step (gradient accumulation)
        "accumulation": cells.integer("accumulation", minimum=1)
        if cells.record.get("accumulation") else None,
    }


def read_training(path) -> pd.DataFrame:
    """Read training points (our :data:`TRAINING_COLUMNS`, or the public ``train_*.csv`` layout,
    whose ``arch`` becomes ``aggregation`` and ``throughput_img_s`` ``throughput_samples_s``).

    Validation is as strict as :func:`read_measurements`; ``attrs`` carries ``origin``,
    ``layout`` and ``lines``.
    """
    path = Path(path)
    origin = str(path)
    header, records = _records(path, origin)
    if set(TRAINING_COLUMNS) <= set(header):
        unknown = [c for c in header if c not in TRAINING_COLUMNS + TRAINING_OPTIONAL]
        if unknown:
            raise ConfigError(f"{origin}:1: unknown column(s) {', '.join(map(repr, unknown))}; "
                              f"valid: {', '.join(TRAINING_COLUMNS + TRAINING_OPTIONAL)}")
        layout, convert = "clustersim", _our_training_row
    elif "source_id" in header and "throughput_img_s" in header:
        missing = _missing(header, _TRAIN_CSV_REQUIRED)
        if missing:
            raise ConfigError(f"{origin}:1: training table layout without column(s) "
                              f"{', '.join(map(repr, missing))}")
        layout, convert = "training-table", _train_csv_row
    else:
        missing = _missing(header, TRAINING_COLUMNS)
        raise ConfigError(f"{origin}:1: missing column(s) {', '.join(map(repr, missing))}; a "
                          f"training file has {', '.join(TRAINING_COLUMNS)}")
    rows, lines = [], []
    for line, record in records:
        rows.append(convert(_Cells(origin, line, record)))
        lines.append(line)
    if not rows:
        raise ConfigError(f"{origin}: no training rows")
    frame = _training_frame(rows)
    frame.attrs.update(origin=origin, layout=layout, lines=lines)
    return frame
