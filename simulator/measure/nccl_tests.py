"""Read nccl-tests results (``all_reduce_perf`` and friends) into the measurement schema.

nccl-tests (github.com/NVIDIA/nccl-tests) prints one table per run on stdout and, since 2025,
can also write the same results as JSON (``-J,--output_file FILE.json``). This module reads both
into rows of :data:`~simulator.measure.schema.COLLECTIVE_COLUMNS`, so a real log can be compared
with the simulator directly (``clustersim compare all_reduce.log --topology ...``).

The layouts, as printed by the nccl-tests sources
-------------------------------------------------
Header lines (``#`` first)::

    # nccl-tests version 2.17.1 nccl-headers=22703 nccl-library=22703      (2025 and later)
    # Collective test starting: all_reduce_perf                            (2025 and later)
    # nThread 1 nGpus 1 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20 ...
    # Using devices
    #  Rank  0 Group  0 Pid  1234 on node1 device  0 [0x07] NVIDIA A100-SXM4-80GB   (2.x: Group,
    #   Rank  0 Pid  1234 on node1 device  0 [0x07] Tesla V100-SXM2-32GB           older: none,
    #  Rank  0 Group  0 Pid  1234 on node1 device  0 [0000:07:00] NVIDIA H100 ...  2025: domain)

One ``Rank`` line per rank (with MPI, rank 0 gathers and prints every process's lines), so the
rank count and the hosts come from them; ``Group`` is the communicator colour
(``NCCL_TESTS_SPLIT_MASK``), and a collective spans the ranks of one group.

Column header, then one row per size (and per data type / op / root when several are asked)::

    #  size   count  type redop root   time  algbw  busbw #wrong   time  algbw  busbw #wrong
    #   (B) (elements)                   (us) (GB/s) (GB/s)          (us) (GB/s) (GB/s)
    1048576  262144 float   sum   -1  45.21  23.19  43.49      0  44.87  23.37  43.82      0

(columns narrowed here; the real ones are wider, e.g. ``%12li  %12li  %8s  %6s  %6i``).

The first group of ``time algbw busbw`` is out-of-place, the second in-place. Older versions
(before the ``root`` column, ~2019-2021) print ``size count type redop time algbw busbw error
...`` with ``error`` the largest relative error (``2e-07``) or ``N/A``; older all_gather and
broadcast tables have no ``redop`` (``size count type [root] time ...``); ``time`` becomes
``cputime`` with ``-C 1``; ``-S 1`` appends a timestamp. Footer::

    # Out of bounds values : 0 OK
    # Avg bus bandwidth    : 43.21

``Avg bus bandwidth`` is the mean of every busbw the run printed, out-of-place and in-place;
the parser recomputes it and refuses a log whose rows do not add up to it (a truncated or
interleaved log). NCCL's own ``NCCL INFO`` lines may be interleaved anywhere and are skipped,
except ``NCCL_ALGO set by environment to X``, which gives the algorithm (else ``auto``), the
same lines for ``NCCL_PROTO`` and ``NCCL_NVLS_ENABLE``, and for the channel bounds
(``NCCL_MIN_NCHANNELS``, ``NCCL_MAX_NCHANNELS``, ``NCCL_MIN_CTAS``, ``NCCL_MAX_CTAS``), which go
into the rows' notes.

JSON (``-J``, ``JSON_FILE_VERSION 2``): ``{"version", "start_time", "args": [argv...], "env":
[...], "nccl_version": 22703, "config": {"nthreads", "ngpus", ..., "iterations", ...,
"devices": [{"rank", "group", "pid", "hostname", "device", "device_hex", "device_info"}]},
"results": [{"size", "count", "type", "redop", "root", "out_of_place": {"time" (or
"cpu_time"), "alg_bw", "bus_bw", "nwrong"} or null, "in_place": {...}, "actual_iterations",
"experiment_name"}], "out_of_bounds": {...}, "average_bus_bandwidth": {"bandwidth", "okay"},
"errors": [...], "end_time"}``. The collective comes from ``args[0]``, the algorithm from
``NCCL_ALGO=`` in ``env``.

Sources: NVIDIA/nccl-tests ``src/common.cu`` @d2d40cc8249378efa4d7e2c949528c15eeb7d8e7 (the 2.x
stdout: ``nThread`` line, ``Rank %2d Group %2d Pid %6d on %10s device %2d [0x%02x] %s``, the
``size count type redop root time algbw busbw #wrong`` header, the footer) and ``src/util.cu``
@0fdb00a3f4339efc1176771a9c97db5438bd3f7f (``writeDeviceReport``, ``writeResultHeader``,
``writeBenchmarkLinePreamble/Body``, ``writeResultFooter``, ``jsonOutputInit``: the 2025 header
lines and the JSON document); ``-J,--output_file`` from the usage text of ``src/common.cu``;
the older ``error`` and no-``redop``/no-``Group`` layouts as printed in public logs of
nccl-tests 2.0-2.10.

Size-0 rows (a size that rounds down to zero elements per rank) move no data; they are skipped
and listed in ``frame.attrs["skipped"]``.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from simulator.collective import bus_factor
from simulator.errors import ConfigError
from simulator.library.nccl_env import CHANNEL_VARIABLE, channel_assignments

from .schema import NCCL_COLLECTIVES, _collective_frame, nccl_algorithm, nccl_collective

__all__ = ["parse_nccl_tests_json", "parse_nccl_tests_log", "read_nccl_tests"]

_RE_NTHREAD = re.compile(r"^#\s*nThread\s+(\d+)\s+nGpus\s+(\d+)")
_RE_GRAPH = re.compile(r"\bgraph:\s*(\d+)")
_RE_AGG = re.compile(r"\bagg iters:\s*(\d+)")
_RE_BLOCKING = re.compile(r"^#\s*Blocking Enabled")
_RE_ITERS = re.compile(r"(?<!warmup )(?<!agg )\biters:\s*(\d+)")
_RE_RANK = re.compile(r"^#\s*Rank\s+(\d+)\s+(?:Group\s+(\d+)\s+)?Pid\s+(\d+)\s+on\s+(\S+)\s+"
                      r"device\s+(\d+)\s+\[([^\]]*)\]\s*(.*?)\s*$")
_RE_START = re.compile(r"^#\s*Collective test starting:\s*(\S+)")
_RE_TESTS_VERSION = re.compile(r"^#\s*nccl-tests version\s+(\S+)(?:.*nccl-library=(\d+))?")
_RE_NCCL_VERSION = re.compile(r"NCCL version\s+(\d+\.\d+\.\d+\S*)")
_RE_ENV = re.compile(r"\b(NCCL_ALGO|NCCL_PROTO|NCCL_NVLS_ENABLE) set by environment to\s+(\S+)")
#: NCCL's channel bounds as ``NCCL_DEBUG=INFO`` prints an integer parameter the environment set
#: (``src/misc/param.cc``: ``"%s set by environment to %lld."``).
_RE_CHANNEL_ENV = re.compile(rf"\b({CHANNEL_VARIABLE}) set by environment to\s+(-?\d+)")
_RE_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(\S+)")
#: What launchers and log collectors put before every line of a rank's output, possibly
#: several of them (a Ray / SkyPilot prefix around an Open MPI one): Open MPI's
#: ``--tag-output`` (``[1,0]<stdout>:``, job and rank), Slurm's ``srun --label`` (``0: ``),
#: MPICH / Intel MPI's ``-prepend-rank`` (``[0] ``), Ray's and SkyPilot's
#: ``(head, rank=0, pid=3808) `` and ``kubectl logs --timestamps``' RFC 3339 time. A result row
#: never starts with one (it starts with its size in bytes), so they are removed before the
#: line is read.
_RE_LAUNCHER_PREFIX = re.compile(
    r"^\s*(?:(?:\[\d+,\d+\]<std(?:out|err)>:|\[\d+\]\s|\d+:\s|\([\w.-]+(?:,\s*\w+=[^,)\s]+)+\)\s"
    r"|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)\s)\s*)+")

_PARAM_NAMES = {"size": "size", "bytes": "size", "count": "count", "n": "count",
                "type": "type", "redop": "redop", "op": "redop", "root": "root"}
_TIME_NAMES = ("time", "cputime")
_ERROR_NAMES = ("error", "#wrong", "res")


def _version_code(code: int) -> str:
    """NCCL_VERSION_CODE -> ``major.minor.patch`` (2.9+: major*10000 + minor*100 + patch)."""
    code = int(code)
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def _collective_from_name(text: str) -> str | None:
    """The collective in a program or file name (``all_reduce_perf``, ``x/alltoall_perf.log``)."""
    stem = Path(str(text)).name.lower()
    for name in sorted(NCCL_COLLECTIVES, key=len, reverse=True):
        if re.search(rf"(^|[^a-z]){name}([^a-z]|$)", stem):
            return NCCL_COLLECTIVES[name]
    return None


@dataclass
class _Run:
    """What one nccl-tests invocation printed."""

    line: int
    iterations: int | None = None
    threads_x_gpus: int | None = None
    threads: int | None = None                      # nThread T
    gpus_per_thread: int | None = None              # nGpus G (-g G)
    cuda_graph: int = 0                             # graph: N (-G N)
    agg_iters: int = 1                              # agg iters: N (-a N)
    blocking: int = 0                               # "# Blocking Enabled" (-z)
    collective: str | None = None
    tests_version: str = ""
    nccl_version: str = ""
    algorithm: str | None = None                    # NCCL_ALGO as the run set it
    selection: str = "auto"                         # ours, NCCL_NVLS_ENABLE included
    protocol: str = ""                              # NCCL_PROTO as the run set it
    nvls_disabled: bool = False                     # NCCL_NVLS_ENABLE=0
    channel_env: dict = field(default_factory=dict)  # NCCL_MIN_NCHANNELS ... -> value
    ranks: list = field(default_factory=list)      # (rank, group, host, device name, pid)
    columns: list | None = None
    header_line: int = 0
    rows: list = field(default_factory=list)        # (line, parsed dict)
    busbw_printed: list = field(default_factory=list)
    avg: tuple | None = None                        # (line, value)


class _Log:
    """Names places in errors: ``file:line`` for logs, ``file: results[i]`` for JSON."""

    def __init__(self, origin: str, locate=None):
        self.origin = origin
        self.locate = locate or (lambda line: f"{origin}:{line}")

    def error(self, line: int, message: str) -> ConfigError:
        return ConfigError(f"{self.locate(line)}: {message}")


def _float(log: _Log, line: int, token: str, column: str, minimum: float = 0.0) -> float:
    try:
        value = float(token)
    except ValueError:
        raise log.error(line, f"column {column!r}: expected a number, got {token!r}") from None
    if not math.isfinite(value) or value < minimum:
        raise log.error(line, f"column {column!r}: expected a finite number >= {minimum:g}, "
                              f"got {token!r}")
    return value


def _int(log: _Log, line: int, token: str, column: str, minimum: int | None = 0) -> int:
    try:
        value = int(token)
    except ValueError:
        raise log.error(line, f"column {column!r}: expected an integer, got {token!r}") from None
    if minimum is not None and value < minimum:
        raise log.error(line, f"column {column!r}: must be >= {minimum}, got {value}")
    return value


def _layout(log: _Log, line: int, names: list[str]) -> tuple[list[str], list[list[str]], bool]:
    """Split a column header into parameter columns, result groups and a timestamp flag."""
    starts = [i for i, n in enumerate(names) if n in _TIME_NAMES]
    params = names[:starts[0]]
    for name in params:
        if name not in _PARAM_NAMES:
            raise log.error(line, f"unknown column {name!r} before the time columns; expected "
                                  f"some of {', '.join(sorted(set(_PARAM_NAMES)))}")
    if "size" not in [_PARAM_NAMES[n] for n in params]:
        raise log.error(line, "column header without a size column")
    stamp = names[-1] == "timestamp"
    body = names[starts[0]:len(names) - stamp]
    groups = [body[a - starts[0]:b - starts[0]]
              for a, b in zip(starts, starts[1:] + [len(names) - stamp])]
    for group in groups:
        if group[1:3] != ["algbw", "busbw"]:
            raise log.error(line, f"expected 'time algbw busbw' in the column header, got "
                                  f"{' '.join(group[:3])!r}")
    if len(groups) > 2:
        raise log.error(line, f"expected one or two groups of time/algbw/busbw columns "
                              f"(out-of-place, in-place), got {len(groups)}")
    return [_PARAM_NAMES[n] for n in params], groups, stamp


def _parse_group(log: _Log, line: int, names: list[str], tokens: list[str]) -> dict:
    result = {"time_us": _float(log, line, tokens[0], names[0], 0.0),
              "algbw_GBps": _float(log, line, tokens[1], "algbw"),
              "busbw_GBps": _float(log, line, tokens[2], "busbw")}
    if result["time_us"] <= 0:
        raise log.error(line, f"column {names[0]!r}: must be > 0, got {tokens[0]!r}")
    for name, token in zip(names[3:], tokens[3:]):
        if name == "#wrong" and token != "N/A":
            result["correct"] = _float(log, line, token, name) == 0
        elif name in _ERROR_NAMES and token != "N/A":
            _float(log, line, token, name)  # relative error: checked, not kept
    return result


def _parse_row(log: _Log, run: _Run, line: int, tokens: list[str]) -> dict:
    params, groups, stamp = run.columns
    group_len = [len(g) for g in groups]
    stamp_tokens = 2 if stamp else 0
    full = len(params) + sum(group_len) + stamp_tokens
    in_place_only = len(groups) == 2 and len(tokens) == len(params) + group_len[1] + stamp_tokens
    if len(tokens) != full and not in_place_only:
        raise log.error(line, f"expected {full} fields like the column header on line "
                              f"{run.header_line}, got {len(tokens)}")
    row = {}
    for name, token in zip(params, tokens):
        if name in ("size", "count"):
            row[name] = _int(log, line, token, name)
        elif name == "root":
            row[name] = _int(log, line, token, name, minimum=-1)
        else:
            row[name] = token
    rest = tokens[len(params):]
    if in_place_only:
        row["in_place"] = _parse_group(log, line, groups[1], rest)
    else:
        row["out_of_place"] = _parse_group(log, line, groups[0], rest[:group_len[0]])
        if len(groups) == 2:
            row["in_place"] = _parse_group(log, line, groups[1], rest[group_len[0]:])
    return row


def _ranks_in_group(run: _Run) -> tuple[int, list[str], list[str]]:
    """(ranks in rank 0's communicator, their hosts, their device names)."""
    group0 = run.ranks[0][1]
    members = [r for r in run.ranks if r[1] == group0]
    return len(members), [r[2] for r in members], [r[3] for r in members]


def _check_bus_factor(log: _Log, collective: str, gpus: int, rows) -> None:
    """busbw / algbw must be the nccl-tests bus factor for ``gpus`` ranks (rows with algbw >= 1
    GB/s, where two printed decimals are precise to 1 %)."""
    expected = bus_factor(collective, gpus)
    for line, row in rows:
        for key in ("out_of_place", "in_place"):
            block = row.get(key)
            if not block or block["algbw_GBps"] < 1.0:
                continue
            ratio = block["busbw_GBps"] / block["algbw_GBps"]
            if abs(ratio - expected) > 0.02 * expected + 0.01:
                raise log.error(line, f"busbw/algbw = {ratio:.3f}, but {collective} on {gpus} "
                                      f"ranks has bus factor {expected:.3f}: the rank count is "
                                      f"wrong (pass --ranks N, gpus= in Python) or the "
                                      f"collective is")


#: What a collective's rows print besides its bus factor: a reduction operator (``redop``
#: other than ``none``) and a root (``root`` >= 0), as nccl-tests' tests fill those columns.
_SIGNATURE = {"allreduce": (True, False), "reduce_scatter": (True, False),
              "allgather": (False, False), "alltoall": (False, False),
              "broadcast": (False, True), "reduce": (True, True)}


def _infer_collective(log: _Log, run: _Run, gpus: int) -> tuple[str | None, str]:
    """The collective a log without a test name measured, from what its rows print: the
    ratio busbw / algbw (nccl-tests' bus factor, on rows whose algbw has three significant
    digits) and whether the rows carry a reduction operator and a root. ``(None, why)``
    where no collective, or more than one, fits."""
    first = run.rows[0][1]
    ratios = [b["busbw_GBps"] / b["algbw_GBps"] for _, row in run.rows
              for b in (row.get("out_of_place"), row.get("in_place"))
              if b and b["algbw_GBps"] >= 1.0]
    if not ratios:
        return None, "no row with algbw >= 1 GB/s to read the bus factor from"
    ratio = sum(ratios) / len(ratios)
    reduces = first.get("redop") not in (None, "none")
    rooted = first.get("root", -1) >= 0
    fits = [name for name, (has_op, has_root) in _SIGNATURE.items()
            if abs(ratio - bus_factor(name, gpus)) <= 0.02 * bus_factor(name, gpus) + 0.01
            and ("redop" not in first or has_op == reduces)
            and ("root" not in first or has_root == rooted)]
    seen = (f"busbw/algbw {ratio:.3f} on {gpus} ranks"
            + (f", redop {first['redop']}" if "redop" in first else "")
            + (f", root {first['root']}" if "root" in first else ""))
    if len(fits) == 1:
        return fits[0], f"collective {fits[0]} read from the rows ({seen})"
    return None, (f"the rows ({seen}) fit {' or '.join(sorted(fits))}" if fits
                  else f"no collective fits the rows ({seen}; is the rank count right? "
                       f"--ranks N sets it)")


def _finish_run(log: _Log, run: _Run, defaults: dict, out: list, skipped: list, runs: list):
    if not run.rows:
        return
    first = run.rows[0][0]
    if run.ranks:
        gpus, hosts, devices = _ranks_in_group(run)
    else:
        gpus, hosts, devices = run.threads_x_gpus, [], []
    if defaults["gpus"] is not None:
        gpus = defaults["gpus"]
    if not gpus:
        raise log.error(first, "cannot tell the rank count (no '#  Rank' lines): pass --ranks N "
                               "(gpus= in Python)")
    collective = defaults["collective"] or run.collective or defaults["from_name"]
    inferred = ""
    if collective is None:
        from simulator.schedules import COLLECTIVES

        collective, inferred = _infer_collective(log, run, gpus)
        if collective is None:
            raise log.error(first, "cannot tell which collective this log measured (no '# "
                                   "Collective test starting' line, no test name in the file "
                                   f"name, and {inferred}): pass --collective NAME "
                                   f"(collective= in Python), one of "
                                   f"{', '.join(sorted(COLLECTIVES))}")
    _check_bus_factor(log, collective, gpus, run.rows)
    if run.avg is not None and run.busbw_printed:
        mean = sum(run.busbw_printed) / len(run.busbw_printed)
        line, value = run.avg
        if abs(mean - value) > 0.01 * abs(value) + 0.011:
            raise log.error(line, f"'Avg bus bandwidth' {value:g} GB/s is not the mean of the "
                                  f"{len(run.busbw_printed)} busbw values above ({mean:.3f}): "
                                  f"a truncated or interleaved log")
    algorithm = defaults["algorithm"] or run.selection
    device = "; ".join(dict.fromkeys(devices))
    nodes = len(set(hosts))
    note_parts = []
    if run.tests_version:
        note_parts.append(f"nccl-tests {run.tests_version}")
    if run.nccl_version:
        note_parts.append(f"NCCL {run.nccl_version}")
    if nodes:
        note_parts.append(f"{nodes} host(s)")
    harness = _harness(run)
    if harness is not None:
        note_parts.append(harness[1])
    if inferred:
        note_parts.append(inferred)
    if run.channel_env:
        # read back by compare (simulator.library.nccl_env.channel_bounds)
        note_parts.append(" ".join(f"{k}={v}" for k, v in sorted(run.channel_env.items())))
    for line, row in run.rows:
        main = row.get("out_of_place") or row["in_place"]
        if row["size"] == 0:
            skipped.append((line, "size 0 (rounds down to zero elements per rank)"))
            continue
        extras = [f"redop {row['redop']}"] if row.get("redop") not in (None, "none") else []
        if row.get("root", -1) >= 0:
            extras.append(f"root {row['root']}")
        if "out_of_place" not in row:
            extras.append("in-place only")
        out.append((line, {
            "source": defaults["source"], "topology": defaults["topology"],
            "collective": collective, "algorithm": algorithm, "gpus": gpus,
            "size_bytes": row["size"], "time_us": main["time_us"],
            "algbw_GBps": main["algbw_GBps"], "busbw_GBps": main["busbw_GBps"],
            "iterations": run.iterations, "backend": "nccl", "device": device,
            "correct": main.get("correct"),
            "inplace_time_us": row["in_place"]["time_us"]
            if "out_of_place" in row and "in_place" in row else math.nan,
            "dtype": row.get("type", ""), "notes": "; ".join(note_parts + extras),
            "library_version": run.nccl_version.split("+", 1)[0],
            "protocol": run.protocol,
            "launch": str(harness[0]) if harness is not None else "",
            **({"nodes": nodes, "gpus_per_node": gpus // nodes}
               if nodes and gpus % nodes == 0 else {})}))
    runs.append({"line": run.line, "collective": collective, "gpus": gpus, "hosts": nodes,
                 "devices": device, "nccl_version": run.nccl_version,
                 "avg_busbw_GBps": run.avg[1] if run.avg else math.nan})


def _set_env(log: _Log, line: int, run: _Run, name: str, value: str) -> None:
    """Record one NCCL variable the run set (``NCCL_ALGO``, ``NCCL_PROTO``,
    ``NCCL_NVLS_ENABLE``), checked as NCCL reads it."""
    from simulator.library.nccl_env import allowed_protocols

    try:
        if name == "NCCL_ALGO":
            run.algorithm = value
        elif name == "NCCL_PROTO":
            allowed_protocols(value, "allreduce")       # NCCL's grammar, or a clear error
            run.protocol = value
        else:
            run.nvls_disabled = value.strip() == "0"
        text = run.algorithm or "default"
        run.selection = nccl_algorithm(f"{text} (NCCL_NVLS_ENABLE=0)" if run.nvls_disabled
                                       else text)
    except ConfigError as exc:
        raise log.error(line, str(exc)) from None


def _harness(run: _Run):
    """(launch, note) of the run's harness from its ``nThread``/``nGpus`` line and ``Rank``
    lines (:func:`~simulator.library.launch.launch_from_harness`), or None without them."""
    from simulator.library.launch import launch_from_harness

    if run.gpus_per_thread is None:
        return None
    launch = launch_from_harness(run.threads, run.gpus_per_thread, cuda_graph=run.cuda_graph,
                                 blocking=run.blocking)
    processes = len({(r[2], r[4]) for r in run.ranks}) if run.ranks else None
    words = [f"harness: nThread {run.threads} nGpus {run.gpus_per_thread}"]
    if processes:
        words.append(f"{processes} process(es) for {len(run.ranks)} rank(s)")
    if run.iterations:
        words.append(f"iters {run.iterations}")
    if run.agg_iters > 1:
        words.append(f"agg iters {run.agg_iters}")
    if run.cuda_graph:
        words.append(f"graph {run.cuda_graph}")
    if run.blocking:
        words.append("blocking")
    return launch, ", ".join(words) + f" -> launch {launch}"


def _our_algorithm(name: str | None) -> str | None:
    """A registered algorithm or ``auto`` as is; an NCCL spelling (``Ring``, ``Tree``) mapped."""
    from simulator.schedules import ALGORITHMS

    if name is None or name == "auto" or name in ALGORITHMS:
        return name
    return nccl_algorithm(name)


def _defaults(path: Path, source, topology, collective, algorithm, gpus) -> dict:
    if gpus is not None and (isinstance(gpus, bool) or int(gpus) < 1):
        raise ConfigError(f"gpus must be a positive integer, got {gpus!r}")
    return {"source": source or path.stem, "topology": topology or "",
            "collective": nccl_collective(collective) if collective else None,
            "from_name": _collective_from_name(path.name),
            "algorithm": _our_algorithm(algorithm), "gpus": int(gpus) if gpus is not None
            else None}


def _frame(rows, origin: str, layout: str, skipped: list, runs: list) -> pd.DataFrame:
    if not rows:
        raise ConfigError(f"{origin}: no nccl-tests result rows found")
    frame = _collective_frame([r for _, r in rows])
    frame.attrs.update(origin=origin, layout=layout, lines=[line for line, _ in rows],
                       skipped=skipped, runs=runs)
    return frame


def parse_nccl_tests_log(path, *, collective: str | None = None, gpus: int | None = None,
                         source: str | None = None, topology: str = "",
                         algorithm: str | None = None) -> pd.DataFrame:
    """Parse the stdout of nccl-tests binaries into collective points.

    Parameters
    ----------
    path : str or Path
        The log; several runs one after another are fine (each ``# nThread`` line starts one).
    collective : str, optional
        ``allreduce`` / ``all_reduce`` ...; default: the ``Collective test starting`` line, else
        the test name in the file name.
    gpus : int, optional
        Ranks per collective; default: the ``#  Rank`` lines of the run's first group.
    source, topology : str, optional
        Copied into every row (``source`` defaults to the file's stem).
    algorithm : str, optional
        Our algorithm name; default: ``NCCL_ALGO set by environment to X`` in the log, else
        ``auto``.

    Returns
    -------
    pandas.DataFrame
        Rows of :data:`~simulator.measure.schema.COLLECTIVE_COLUMNS` (+ optional columns):
        out-of-place time as ``time_us``, in-place as ``inplace_time_us``. ``attrs``:
        ``origin``, ``layout``, ``lines``, ``skipped``, ``runs``.

    Raises
    ------
    ConfigError
        ``file:line: ...`` for a row that does not fit its header, a non-numeric value, a rank
        count that disagrees with busbw/algbw, an ``Avg bus bandwidth`` the rows do not add up to.
    """
    path = Path(path)
    origin = str(path)
    log = _Log(origin)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raise ConfigError(f"nccl-tests log {origin!r} not found") from None
    defaults = _defaults(path, source, topology, collective, algorithm, gpus)
    out, skipped, runs = [], [], []
    run = None
    pending = {}  # header lines seen before the nThread line (newest versions print them first)
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = _RE_LAUNCHER_PREFIX.sub("", raw, count=1).strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            match = _RE_NTHREAD.match(stripped)
            if match:
                if run is not None:
                    _finish_run(log, run, defaults, out, skipped, runs)
                run = _Run(line=number, threads_x_gpus=int(match[1]) * int(match[2]),
                           threads=int(match[1]), gpus_per_thread=int(match[2]), **pending)
                pending = {}
                iters = _RE_ITERS.search(stripped)
                run.iterations = int(iters[1]) if iters else None
                graph = _RE_GRAPH.search(stripped)
                run.cuda_graph = int(graph[1]) if graph else 0
                agg = _RE_AGG.search(stripped)
                run.agg_iters = int(agg[1]) if agg else 1
                continue
            if _RE_BLOCKING.match(stripped):
                if run is not None:
                    run.blocking = 1
                continue
            match = _RE_START.match(stripped)
            if match:
                name = _collective_from_name(match[1])
                if name is None:
                    raise log.error(number, f"unknown nccl-tests program {match[1]!r}")
                if run is not None and run.rows:
                    _finish_run(log, run, defaults, out, skipped, runs)
                    run = None
                if run is None:
                    pending["collective"] = name
                else:
                    run.collective = name
                continue
            match = _RE_TESTS_VERSION.match(stripped)
            if match:
                if run is not None and run.rows:
                    _finish_run(log, run, defaults, out, skipped, runs)
                    run = None
                pending["tests_version"] = match[1]
                if match[2]:
                    pending["nccl_version"] = _version_code(int(match[2]))
                continue
            if run is None:
                run = _Run(line=number, **pending)
                pending = {}
            match = _RE_RANK.match(stripped)
            if match:
                run.ranks.append((int(match[1]), int(match[2] or 0), match[4], match[7],
                                  int(match[3])))
                continue
            match = _RE_AVG.match(stripped)
            if match:
                run.avg = (number, _float(log, number, match[1], "Avg bus bandwidth"))
                continue
            names = stripped.lstrip("#").split()
            if any(n in _TIME_NAMES for n in names) and "algbw" in names and "busbw" in names:
                run.columns = _layout(log, number, names)
                run.header_line = number
            continue
        match = _RE_ENV.search(stripped)
        if match:
            run = run or _Run(line=number, **pending)
            _set_env(log, number, run, match[1], match[2])
            continue
        match = _RE_CHANNEL_ENV.search(stripped)
        if match:
            run = run or _Run(line=number, **pending)
            run.channel_env[match[1]] = int(match[2])
            continue
        match = _RE_NCCL_VERSION.search(stripped)
        if match:
            run = run or _Run(line=number, **pending)
            run.nccl_version = run.nccl_version or match[1]
            continue
        tokens = stripped.split()
        if run is None or run.columns is None or not tokens[0].isdigit():
            continue  # NCCL INFO lines, warnings, anything that is not a result row
        row = _parse_row(log, run, number, tokens)
        run.rows.append((number, row))
        run.busbw_printed += [row[k]["busbw_GBps"] for k in ("out_of_place", "in_place")
                              if k in row]
    if run is not None:
        _finish_run(log, run, defaults, out, skipped, runs)
    return _frame(out, origin, "nccl-tests-log", skipped, runs)


def _json_error(origin: str, where: str, message: str) -> ConfigError:
    return ConfigError(f"{origin}: {where}: {message}")


def _json_number(origin, where, value, minimum=0.0, positive=False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _json_error(origin, where, f"expected a number, got {value!r}")
    if not math.isfinite(value) or value < minimum or (positive and value <= 0):
        raise _json_error(origin, where, f"expected a finite number {'>' if positive else '>='}"
                                         f" {minimum:g}, got {value!r}")
    return float(value)


def _json_block(origin: str, where: str, block) -> dict | None:
    if block is None:
        return None
    if not isinstance(block, dict):
        raise _json_error(origin, where, f"expected an object, got {type(block).__name__}")
    time_key = "time" if "time" in block else "cpu_time"
    for key in (time_key, "alg_bw", "bus_bw"):
        if key not in block:
            raise _json_error(origin, where, f"missing key {key!r}")
    result = {"time_us": _json_number(origin, f"{where}.{time_key}", block[time_key],
                                      positive=True),
              "algbw_GBps": _json_number(origin, f"{where}.alg_bw", block["alg_bw"]),
              "busbw_GBps": _json_number(origin, f"{where}.bus_bw", block["bus_bw"])}
    wrong = block.get("nwrong")
    if wrong is not None:
        result["correct"] = _json_number(origin, f"{where}.nwrong", wrong) == 0
    return result


def parse_nccl_tests_json(path, *, collective: str | None = None, gpus: int | None = None,
                          source: str | None = None, topology: str = "",
                          algorithm: str | None = None) -> pd.DataFrame:
    """Parse the JSON document nccl-tests writes with ``-J FILE.json`` (format version 2).

    Same parameters and result as :func:`parse_nccl_tests_log`. The collective comes from the
    program name in ``args[0]``, the rank count from ``config.devices`` (rank 0's group), the
    algorithm from ``NCCL_ALGO=`` in ``env``. JSON syntax errors name the line; structural
    errors name the key path (``results[3].out_of_place.time``).
    """
    path = Path(path)
    origin = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"nccl-tests JSON {origin!r} not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{origin}: cannot read nccl-tests JSON: {exc}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{origin}:{exc.lineno}: invalid JSON: {exc.msg}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
        raise ConfigError(f"{origin}: not an nccl-tests JSON document (no 'results' list)")
    args = doc.get("args") or []
    program = args[0] if args and isinstance(args[0], str) else ""
    env = [e for e in doc.get("env") or [] if isinstance(e, str)]
    setting = {e.split("=", 1)[0]: e.split("=", 1)[1] for e in env if "=" in e}
    config = doc.get("config") or {}
    if not isinstance(config, dict):
        raise _json_error(origin, "config", "expected an object")
    devices = config.get("devices") or []
    if not isinstance(devices, list) or not all(isinstance(d, dict) for d in devices):
        raise _json_error(origin, "config.devices", "expected a list of objects")
    run = _Run(line=1, iterations=config.get("iterations"),
               threads_x_gpus=(config.get("nthreads") or 1) * (config.get("ngpus") or 1),
               threads=config.get("nthreads"), gpus_per_thread=config.get("ngpus"),
               cuda_graph=int(config.get("graph") or 0),
               agg_iters=int(config.get("aggregated_iterations") or 1),
               blocking=int(str(config.get("blocking_collectives", "")).strip().lower()
                            in ("true", "1")),
               collective=_collective_from_name(program) if program else None)
    for name in ("NCCL_ALGO", "NCCL_PROTO", "NCCL_NVLS_ENABLE"):
        if name in setting:
            try:
                _set_env(_Log(origin), 0, run, name, setting[name])
            except ConfigError as exc:
                raise _json_error(origin, "env", str(exc).split(": ", 1)[-1]) from None
    run.channel_env.update(channel_assignments(" ".join(env)))
    run.ranks = [(d.get("rank", i), d.get("group", 0), d.get("hostname", ""),
                  d.get("device_info", ""), d.get("pid", 0)) for i, d in enumerate(devices)]
    if isinstance(doc.get("nccl_version"), int):
        run.nccl_version = _version_code(doc["nccl_version"])
    for i, item in enumerate(doc["results"]):
        where = f"results[{i}]"
        if not isinstance(item, dict):
            raise _json_error(origin, where, "expected an object")
        for key in ("size", "count"):
            if key not in item:
                raise _json_error(origin, where, f"missing key {key!r}")
            value = item[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise _json_error(origin, f"{where}.{key}", f"expected an integer >= 0, got "
                                                            f"{value!r}")
        root_text = str(item.get("root", "-1")).strip()
        try:
            root = int(root_text)
        except ValueError:
            raise _json_error(origin, f"{where}.root", f"expected an integer, got "
                                                       f"{root_text!r}") from None
        row = {"size": item["size"], "count": item["count"], "type": str(item.get("type", "")),
               "redop": str(item.get("redop", "")), "root": root}
        oop = _json_block(origin, f"{where}.out_of_place", item.get("out_of_place"))
        inp = _json_block(origin, f"{where}.in_place", item.get("in_place"))
        if oop is None and inp is None:
            raise _json_error(origin, where, "neither out_of_place nor in_place results")
        if oop is not None:
            row["out_of_place"] = oop
        if inp is not None:
            row["in_place"] = inp
        run.rows.append((i + 1, row))
    avg = doc.get("average_bus_bandwidth")
    if isinstance(avg, dict) and isinstance(avg.get("bandwidth"), (int, float)):
        run.avg = (0, float(avg["bandwidth"]))
        run.busbw_printed = [r[k]["busbw_GBps"] for _, r in run.rows
                             for k in ("out_of_place", "in_place") if k in r]
    defaults = _defaults(path, source, topology, collective, algorithm, gpus)
    out, skipped, runs = [], [], []
    # JSON rows have no line: "line" k names results[k-1], 0 the average.
    log = _Log(origin, lambda k: f"{origin}: results[{k - 1}]" if k else
               f"{origin}: average_bus_bandwidth")
    _finish_run(log, run, defaults, out, skipped, runs)
    frame = _frame(out, origin, "nccl-tests-json", skipped, runs)
    frame.attrs["lines"] = [None] * len(frame)
    return frame


def read_nccl_tests(path, **kwargs) -> pd.DataFrame:
    """A nccl-tests JSON document (``.json`` or text starting with ``{``) or a stdout log."""
    path = Path(path)
    if path.suffix.lower() == ".json":
        return parse_nccl_tests_json(path, **kwargs)
    try:
        head = path.read_text(encoding="utf-8", errors="replace").lstrip()[:1]
    except FileNotFoundError:
        raise ConfigError(f"nccl-tests output {str(path)!r} not found") from None
    if head == "{":
        return parse_nccl_tests_json(path, **kwargs)
    return parse_nccl_tests_log(path, **kwargs)
