"""Command line: ``clustersim compare`` and ``clustersim calibrate``.

compare     simulate every point of a measured file (a CSV in the measurement schema, a public
            nccl-tests table, or an nccl-tests log or ``-J`` JSON) on a topology; print the
            per-point table and the MAPE tables; optionally write ``compare.csv``, ``mape.csv``
            and plots; exit 1 when ``--max-mape`` is exceeded in any size band or overall.
            Training tables (a throughput column), LLM training tables (a layout and TFLOP/s,
            MFU, step time or tokens/s) and tables of timed layers (a measured forward or
            backward in milliseconds) are recognised by their header
calibrate   fit per-link-class bandwidth factors and latency offsets of a preset to a measured
            file, print the held-out MAPE before and after, write the calibrated preset YAML

User mistakes raise :class:`~simulator.errors.ClusterSimError` (exit 2 in ``clustersim``'s
``main``); a comparison that runs but misses ``--max-mape`` is a result, not a mistake: exit 1.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..errors import ConfigError
from ..workload.mixed_precision import GRADIENT_DTYPES

EXIT_MAPE_EXCEEDED = 1
_LOG_SUFFIXES = (".log", ".txt", ".out", ".json")


def read_points(path: str, collective: str | None = None,
                ranks: int | None = None) -> pd.DataFrame:
    """Collective points from a CSV (either layout) or an nccl-tests log / JSON document;
    ``collective`` (``--collective``) and ``ranks`` (``--ranks``) say what a log measured, and
    on how many ranks, when the log does not."""
    from ..measure.nccl_tests import read_nccl_tests
    from ..measure.schema import nccl_collective, read_measurements

    if collective is not None:
        try:
            collective = nccl_collective(collective)
        except ConfigError as exc:
            raise ConfigError(f"--collective: {exc}") from None
    if ranks is not None and ranks < 1:
        raise ConfigError(f"--ranks must be >= 1, got {ranks}")
    if Path(path).suffix.lower() in _LOG_SUFFIXES:
        return read_nccl_tests(path, collective=collective, gpus=ranks)
    for flag, value in (("--collective", collective), ("--ranks", ranks)):
        if value is not None:
            raise ConfigError(f"{flag} applies to nccl-tests logs and JSON (.log, .txt, .out, "
                              f".json); {path} is a table with its own columns")
    return read_measurements(path)


def _topology_groups(args, measured: pd.DataFrame):
    """(topology, params, points) to compare: --topology, else the scenario's, else the CSV's
    ``topology`` column (one group per value)."""
    from .args import _params
    from ..comparison.training import subset_rows

    params = _params(args.param)
    if args.topology:
        return [(args.topology, params, measured)]
    if args.scenario:
        from ..scenario import load_scenario

        scenario = load_scenario(args.scenario)
        return [(scenario.topology, {**scenario.topology_params, **params}, measured)]
    names = measured["topology"].fillna("").astype(str)
    if (names == "").any():
        first = int((names == "").to_numpy().argmax())
        lines = measured.attrs.get("lines") or []
        where = f":{lines[first]}" if first < len(lines) and lines[first] else ""
        raise ConfigError(f"{measured.attrs.get('origin', 'measured file')}{where}: no topology "
                          f"for this point: pass --topology NAME_OR_FILE (or --scenario), or "
                          f"fill the file's topology column")
    return [(name, params, subset_rows(measured, (names == name).to_numpy()))
            for name in dict.fromkeys(names)]


def _stated_machines(points: pd.DataFrame) -> int | None:
    """The most machines any point of a measured file states (its ``nodes`` column), or None."""
    if "nodes" not in points.columns:
        return None
    nodes = pd.to_numeric(points["nodes"], errors="coerce").dropna()
    return int(nodes.max()) if len(nodes) and nodes.max() >= 1 else None


def _machines(graph) -> int:
    from ..topology.graph import endpoints

    return len({graph.nodes[e].get("node_index", 0) for e in endpoints(graph)})


def stated_topology(name: str, params: dict, points: pd.DataFrame, origin: str = ""):
    """``(params, topology)`` a file's points run on: ``name`` built with ``params``; where
    the points state more machines than that has and ``--param nodes`` is not given, built
    with ``nodes`` set to the machines they state (one two-machine row of ``l40s-pcie`` runs
    on two machines, not on four GPUs of one), with a note on standard error. A topology that
    cannot take the count stays as given (its own error names the layout a point needs)."""
    from ..errors import ClusterSimError
    from ..topology import load_topology

    graph = load_topology(name, params)
    stated = _stated_machines(points)
    if "nodes" in params or stated is None or stated <= _machines(graph):
        return params, graph
    bigger = {**params, "nodes": str(stated)}
    try:
        built = load_topology(name, bigger)
    except ClusterSimError:
        return params, graph
    if _machines(built) != stated:
        return params, graph
    print(f"clustersim: {origin or 'the measured file'} states {stated} machines; topology "
          f"{name!r} built with nodes={stated} (--param nodes=N to choose)", file=sys.stderr)
    return bigger, built


def _scenario_slices(args) -> int | None:
    if not args.scenario:
        return None
    from ..scenario import load_scenario

    sweep = load_scenario(args.scenario).collective
    return sweep.slices if sweep is not None else None


def format_points(points: pd.DataFrame) -> str:
    """Human table of compared points."""
    from ..units import format_size

    if points.empty:
        return "(no points)"
    shown = pd.DataFrame({
        "collective": points["collective"], "algorithm": points["simulated_algorithm"],
        "gpus": points["gpus"], "size": [format_size(s) for s in points["size_bytes"]],
        "measured_us": [f"{t:.2f}" for t in points["measured_time_us"]],
        "simulated_us": [f"{t:.2f}" for t in points["simulated_time_us"]],
        "error": [f"{e:+.1f}%" for e in points["error_pct"]],
        "meas_busbw": [f"{b:.2f}" for b in points["measured_busbw_GBps"]],
        "sim_busbw": [f"{b:.2f}" for b in points["simulated_busbw_GBps"]],
    })
    if points["source"].nunique() > 1 or points["topology"].nunique() > 1:
        shown.insert(0, "topology", points["topology"])
        shown.insert(0, "source", points["source"])
    return shown.to_string(index=False)


def format_summary(summary: dict) -> str:
    """The MAPE tables, one block each."""
    blocks = []
    for key, title in (("size_band", "by size band"), ("gpus", "by GPU count"),
                       ("algorithm", "by algorithm"), ("overall", "overall")):
        table = summary[key].copy()
        for column in ("mape_pct", "median_ape_pct", "max_ape_pct", "bias_pct"):
            table[column] = [f"{v:.1f}" for v in table[column]]
        blocks.append(f"MAPE {title}:\n{table.to_string(index=False)}")
    return "\n\n".join(blocks)


def summary_frame(summary: dict) -> pd.DataFrame:
    """All MAPE tables stacked: ``table, group, points, mape_pct, ...``."""
    frames = []
    for key, table in summary.items():
        group_column = table.columns[0]
        frame = table.rename(columns={group_column: "group"}).copy()
        frame["group"] = frame["group"].astype(str)
        frame.insert(0, "table", key)
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def _header(path: str) -> set[str]:
    """The column names of a CSV's first line (empty for logs and unreadable files: the
    reader reports those)."""
    if Path(path).suffix.lower() in _LOG_SUFFIXES:
        return set()
    import csv

    try:
        with open(path, "rb") as handle:
            header = handle.readline(65536).decode("utf-8", "replace")
    except OSError:
        return set()
    return {c.strip() for row in csv.reader([header]) for c in row}


def is_training_file(path: str) -> bool:
    """Whether ``path`` is a training table (a CSV whose header names a throughput)."""
    return bool(_header(path) & {"throughput_img_s", "throughput_samples_s"})


def is_layer_file(path: str) -> bool:
    """Whether ``path`` is a table of timed layers (a measured forward or backward)."""
    from ..measure.layer_table import is_layer_table

    return is_layer_table(_header(path))


def is_llm_file(path: str) -> bool:
    """Whether ``path`` is an LLM training table (a layout and an LLM metric)."""
    from ..measure.llm_table import is_llm_table

    return is_llm_table(_header(path))


@dataclass
class Comparison:
    """What ``compare`` computed on one measured file, before anything is printed: the file's
    ``kind`` (``collective``, ``training``, ``llm`` or ``layer``), the compared ``points``, the MAPE
    tables (``summary``), the rows skipped with their reasons, and the ``--max-mape``
    failures at ``max_mape`` (empty when none was given)."""

    kind: str
    points: pd.DataFrame
    summary: dict
    skipped: list = field(default_factory=list)
    failures: list = field(default_factory=list)


def compared(args) -> Comparison:
    """Simulate every point of ``args.measured`` as ``clustersim compare`` would (the same
    flags), without printing the tables or writing files."""
    if args.max_mape is not None and not args.max_mape >= 0:
        raise ConfigError(f"--max-mape must be a percentage >= 0, got {args.max_mape}")
    if is_llm_file(args.measured) and not is_layer_file(args.measured):
        return _compared_rows(args, "llm")
    if getattr(args, "steady_tolerance", None) is not None:
        raise ConfigError(f"--steady-tolerance applies to LLM training tables (each row one "
                          f"step); {args.measured} is not one")
    if is_layer_file(args.measured):
        return _compared_rows(args, "layer")
    if is_training_file(args.measured):
        return _compared_training(args)
    return _compared_collective(args)


def _compared_collective(args) -> Comparison:
    from ..comparison.collective import compare, mape_failures, summarise

    if args.shared_cores is not None and args.shared_cores < 1:
        raise ConfigError(f"--shared-cores must be >= 1, got {args.shared_cores}")
    for flag, value in (("--select", args.select), ("--framework", args.framework),
                        ("--gradient-dtype", args.gradient_dtype),
                        ("--anchor", args.anchor), ("--ps-impl", args.ps_impl),
                        ("--device", args.device), ("--shared-cores", args.shared_cores),
                        ("--workers", args.workers)):
        if value:
            raise ConfigError(f"{flag} applies to training files; {args.measured} holds "
                              f"collective points")
    slices = args.slices or _scenario_slices(args) or 1
    if slices < 1:
        raise ConfigError(f"--slices must be >= 1, got {slices}")
    from .args import check_algorithm, library_args

    algorithm = args.algorithm
    if algorithm and algorithm != "auto":
        from ..library.nccl_env import is_selection
        from ..measure.schema import nccl_algorithm

        if is_selection(algorithm) or algorithm.startswith("auto["):
            algorithm = nccl_algorithm(algorithm)   # an NCCL_ALGO list: auto[...], checked
        else:
            check_algorithm(algorithm)
    measured = read_points(args.measured, args.collective, args.ranks)
    frames = []
    for name, params, part in _topology_groups(args, measured):
        _, graph = stated_topology(name, params, part, args.measured)
        frames.append(compare(part, graph, slices=slices, algorithm_override=algorithm,
                              **library_args(args, graph)))
    points = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    summary = summarise(points)
    failures = mape_failures(summary, args.max_mape) if args.max_mape is not None else []
    return Comparison("collective", points, summary, failures=failures)


def cmd_compare(args) -> int:
    result = compared(args)
    if result.kind in ("llm", "layer"):
        return _report_rows(args, result)
    if result.kind == "training":
        return _report_training(args, result)
    from ..report.compare_plots import COMPARE_PLOTS

    points, summary = result.points, result.summary
    print(format_points(points))
    print()
    print(format_summary(summary))
    if args.output:
        def plots(stage):
            written = []
            for plot_name, plot in COMPARE_PLOTS.items():
                written += plot(points, stage / plot_name)
            return written

        _publish(args.output, points, summary, plots)
    return _gate(args.max_mape, result.failures, "size band")


def _publish(output: str, points: pd.DataFrame, summary: dict, plots) -> None:
    """Write ``compare.csv``, ``mape.csv`` and ``plots(stage)``'s files to ``output``, all or
    nothing."""
    from ..report.output import published, staged_output, write_csv

    out = Path(output)
    with staged_output(out) as stage:
        written = [write_csv(stage / "compare.csv", points),
                   write_csv(stage / "mape.csv", summary_frame(summary))]
        written += plots(stage)
    print(f"wrote {', '.join(published(written, stage, out))}", file=sys.stderr)


def _gate(max_mape: float | None, failures: list[str], groups: str) -> int:
    """``--max-mape``: print each failure and return exit 1, or say every group is within."""
    if max_mape is None:
        return 0
    if failures:
        for failure in failures:
            print(f"clustersim compare: --max-mape {max_mape:g}% FAILED: {failure}",
                  file=sys.stderr)
        return EXIT_MAPE_EXCEEDED
    print(f"--max-mape {max_mape:g}%: every {groups} within", file=sys.stderr)
    return 0


def _compared_training(args) -> Comparison:
    """``compare`` on a training table: per-point throughput and speedup, speedup MAPE by
    arch, model and GPU count; ``--max-mape`` on the speedup MAPE of every arch."""
    from .args import library_args
    from ..library import training_library
    from ..comparison.training import (compare_training, mape_failures, select,
                                       summarise_training)
    from ..measure.schema import read_training
    from ..workload.frameworks import parse_framework

    for flag, value in (("--slices", args.slices), ("--protocol", args.protocol),
                        ("--nccl-channels", args.nccl_channels)):
        if value:
            raise ConfigError(f"{flag} does not apply to a training file (each bucket's call "
                              f"is planned by the library)")
    for flag, value in (("--collective", args.collective), ("--ranks", args.ranks)):
        if value is not None:
            raise ConfigError(f"{flag} applies to nccl-tests logs; a training file's rows "
                              f"are training jobs")
    if args.workers is not None and args.workers < 1:
        raise ConfigError(f"--workers must be >= 1, got {args.workers}")
    framework = parse_framework(args.framework)
    ps = None
    if args.ps_impl not in (None, "auto"):
        from ..comparison.training import default_ps
        from ..workload.ps_impls import get_ps_impl

        impl = get_ps_impl(args.ps_impl).name
        ps = lambda record: default_ps(record, impl=impl)  # noqa: E731
    measured = read_training(args.measured)
    if args.select:
        measured = select(measured, args.select)
    frames = []
    for name, params, part in _topology_groups(args, measured):
        _, graph = stated_topology(name, params, part, args.measured)
        lib = library_args(args, graph)
        library = training_library(graph, lib["library"], launch=lib["launch"],
                                   version=lib["version"]) or "ideal"
        # a row that states its NCCL runs that version's constants, unless --nccl-version
        library_for = None if lib["version"] or lib["library"] != "nccl" else (
            lambda version, graph=graph, lib=lib: training_library(
                graph, lib["library"], launch=lib["launch"], version=version))
        frames.append(compare_training(part, graph, library=library, framework=framework,
                                       anchor=args.anchor or "measured",
                                       aggregation=args.algorithm, ps=ps,
                                       device=args.device, shared_cores=args.shared_cores,
                                       workers=args.workers or 1, library_for=library_for,
                                       gradient_dtype=args.gradient_dtype))
    points = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    skipped = [why for frame in frames for why in frame.attrs.get("skipped", [])]
    summary = summarise_training(points)
    failures = mape_failures(summary, args.max_mape) if args.max_mape is not None else []
    return Comparison("training", points, summary, skipped, failures)


def _print_skipped(skipped: list) -> None:
    for why in skipped[:5]:
        print(f"clustersim compare: skipped {why}", file=sys.stderr)
    if len(skipped) > 5:
        print(f"clustersim compare: skipped {len(skipped) - 5} more rows", file=sys.stderr)


def _report_training(args, result: Comparison) -> int:
    from ..comparison.training import format_training_points, format_training_summary
    from ..report.compare_plots import speedup_measured_vs_simulated

    points, summary = result.points, result.summary
    _print_skipped(result.skipped)
    print(format_training_points(points))
    print()
    print(format_training_summary(summary))
    if args.output:
        curves = points.assign(aggregation=points["arch"])
        _publish(args.output, points, summary, lambda stage: speedup_measured_vs_simulated(
            curves.assign(speedup=curves["measured_speedup"]),
            curves.assign(speedup=curves["simulated_speedup"]),
            stage / "speedup_measured_vs_simulated"))
    return _gate(args.max_mape, result.failures, "arch")


#: Flags of ``compare`` that mean nothing for an LLM table.
_NOT_FOR_LLM = ("slices", "protocol", "framework", "gradient_dtype", "ps_impl", "anchor",
                "shared_cores", "device", "algorithm", "collective", "workers",
                "nccl_channels")


def _llm_topology(args, what: str, example: str) -> tuple[str, dict]:
    """``(topology, params)`` of an LLM or layer table: ``--topology`` (or the scenario's), which
    each row sizes to its GPU count; the flags that mean nothing for such a table refused."""
    from .args import _params

    for name in _NOT_FOR_LLM:
        if getattr(args, name, None):
            raise ConfigError(f"--{name.replace('_', '-')} does not apply to {what}")
    if not args.topology and not args.scenario:
        raise ConfigError(f"{args.measured} is {what}: pass --topology with the preset of its "
                          f"machines (e.g. {example}); the cluster is sized to each row's GPU "
                          f"count")
    topology, params = args.topology, _params(args.param)
    if not topology:
        from ..scenario import load_scenario

        scenario = load_scenario(args.scenario)
        topology, params = scenario.topology, {**scenario.topology_params, **params}
    return topology, params


def _gated(summary: dict, by_groups, max_mape) -> list[str]:
    """``--max-mape`` failures of an LLM or layer table: each group of ``by_groups`` and the
    overall MAPE over the limit."""
    failures = []
    if max_mape is not None:
        for by in (*by_groups, "overall"):
            for _, row in summary[by].iterrows():
                if row["mape_pct"] > max_mape:
                    failures.append(f"{by} {row.iloc[0]}: MAPE {row['mape_pct']:.1f}%")
    return failures


def _compared_rows(args, kind: str) -> Comparison:
    """``compare`` on an LLM training table (``kind`` ``llm``: model, GPUs, layout, measured
    TFLOP/s per GPU or MFU or step time or tokens/s; each row one step) or a table of timed
    layers (``layer``: one layer or block, its measured forward and backward milliseconds;
    each row :func:`~simulator.workload.llm.layer.simulate_layer`), every row on the
    topology's machine sized to it. ``-o DIR`` writes ``compare.csv`` (a row per measured row,
    or per measured pass: its identifying columns, measured, simulated, ``error_pct``, the
    simulated breakdown) and ``mape.csv``; ``--max-mape`` gates on the overall MAPE and each
    model's (LLM) or pass's (layers)."""
    from ..comparison.training import select

    if kind == "llm":
        from ..comparison.llm import compare_llm as compare, summarise_llm as summarise
        from ..measure.llm_table import read_llm_table as read
        what, example, gate_by = "an LLM training table", "dgx-a100-2node", "model"
    else:
        from ..comparison.layer import compare_layers as compare, summarise_layers as summarise
        from ..measure.layer_table import read_layer_table as read
        what, example, gate_by = "a table of timed layers", "hgx-h100", "pass"
    topology, params = _llm_topology(args, what, example)
    measured = read(args.measured)
    if args.select:
        measured = select(measured, args.select)
    library = getattr(args, "library", None) or "default"
    extra = {}
    if kind == "llm":
        from .llm import steady_tolerance

        extra = steady_tolerance(args)
    points = compare(measured, topology, params, library=library, **extra)
    skipped = points.attrs.get("skipped", [])
    if not (points["skipped"].fillna("") == "").any():
        raise ConfigError(f"{args.measured}: no row could be simulated ({len(points)} skipped; "
                          f"the first: {skipped[0] if skipped else '-'})")
    summary = summarise(points)
    return Comparison(kind, points, summary, skipped,
                      _gated(summary, (gate_by,), args.max_mape))


def _report_rows(args, result: Comparison) -> int:
    """Print an LLM or layer table's comparison (``result.kind``), write it with ``-o``."""
    if result.kind == "llm":
        from ..comparison.llm import format_llm_points as points, format_llm_summary as summary
    else:
        from ..comparison.layer import (format_layer_points as points,
                                        format_layer_summary as summary)
    _print_skipped(result.skipped)
    print(points(result.points))
    print()
    print(summary(result.summary))
    if args.output:
        _publish(args.output, result.points, result.summary, lambda stage: [])
    return _gate(args.max_mape, result.failures, "model" if result.kind == "llm" else "pass")


def _progress(evaluations: int, value: float) -> None:
    """A calibration's progress, every 25 objective evaluations, on stderr."""
    if evaluations % 25 == 0:
        print(f"calibrate: {evaluations} simulations of the fit points, mean |ln error| "
              f"{value:.4f}", file=sys.stderr)


def cmd_calibrate(args) -> int:
    from ..comparison.calibrate import calibrate
    from .args import _params, library_args

    if not args.out.endswith((".yaml", ".yml")):
        raise ConfigError(f"--out must name a .yaml file, got {args.out!r}")
    measured = read_points(args.measured, args.collective, args.ranks)
    params, graph = stated_topology(args.topology, _params(args.param), measured,
                                    args.measured)
    lib = library_args(args, graph)
    if lib["library"] == "nccl":
        return _calibrate_library(args, measured, lib, params)

    result = calibrate(measured, None, args.topology, fit_fraction=args.fit_fraction,
                       seed=args.seed, params=params,
                       max_fit_points=args.max_fit_points,
                       max_evaluations=args.max_evaluations, progress=_progress)
    print(f"calibrated {args.topology} on {len(result.fit_points)} of {len(measured)} points "
          f"(fit fraction {args.fit_fraction:g}, seed {args.seed}, {result.evaluations} "
          f"objective evaluations)")
    for param in result.parameters:
        print(f"  fitted: {param.describe()}")
    for note in result.screened_out:
        print(f"  not fitted: {note}")
    table = result.mape_table()
    for column in ("mape_before_pct", "mape_after_pct"):
        table[column] = [f"{v:.1f}" for v in table[column]]
    held = "held-out" if result.fit_fraction < 1 else "fit (nothing held out)"
    print(f"\nMAPE on the {held} points, before -> after:\n{table.to_string(index=False)}")
    path = result.write(args.out)
    print(f"wrote {path}", file=sys.stderr)
    return 0


def _calibrate_library(args, measured, lib, params: dict) -> int:
    from ..comparison.calibrate_library import calibrate_library

    result = calibrate_library(measured, args.topology, params=params,
                               fit_fraction=args.fit_fraction, seed=args.seed,
                               max_fit_points=args.max_fit_points,
                               max_evaluations=args.max_evaluations, launch=lib["launch"],
                               version=lib["version"], progress=_progress)
    print(f"calibrated the nccl library on {args.topology}: {len(result.fit_points)} of "
          f"{len(measured)} points fitted (fit fraction {args.fit_fraction:g}, seed "
          f"{args.seed}, {result.evaluations} objective evaluations)")
    for text in result.fitted:
        print(f"  fitted: {text}")
    for name in result.unseen:
        print(f"  not fitted (the fit points do not see it): {name}")
    table = result.mape_table()
    for column in table.columns[2:]:
        table[column] = [f"{v:.1f}" for v in table[column]]
    held = "held-out" if args.fit_fraction < 1 else "fit (nothing held out)"
    print(f"\nMAPE and bias on the {held} points, before -> after:\n"
          f"{table.to_string(index=False)}")
    path = result.write(args.out)
    print(f"wrote {path}", file=sys.stderr)
    return 0


_COLLECTIVE_HELP = ("nccl-tests logs: the collective the log measured when it does not say "
                    "(no '# Collective test starting' line, no test name in the file name): "
                    "allreduce, allgather, reduce_scatter, broadcast, reduce, alltoall (or "
                    "the nccl-tests spellings, all_reduce, ...)")


_RANKS_HELP = ("nccl-tests logs: ranks per collective when the log has no '#  Rank' lines "
               "(a table copied from its column header on)")


def add_compare_parsers(subparsers) -> None:
    """Add ``compare`` and ``calibrate`` to ``clustersim``'s subcommands."""
    from .args import add_channels_argument, add_library_arguments

    c = subparsers.add_parser(
        "compare", help="simulate measured points (CSV, nccl-tests log/JSON) and report errors")
    c.add_argument("measured", metavar="MEASURED",
                   help="CSV in the measurement schema or an nccl-tests table; or an "
                        "nccl-tests stdout log (.log/.txt/.out) or -J JSON (.json)")
    c.add_argument("--topology", default=None,
                   help="preset name, builder name or YAML file (default: the scenario's, else "
                        "the file's topology column)")
    c.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="override a topology builder parameter (repeatable)")
    c.add_argument("--scenario", default=None, metavar="S.yaml",
                   help="take the topology (and its params, and slices) from a scenario")
    c.add_argument("--algorithm", default=None,
                   help="simulate this algorithm (or auto) for every point instead of the "
                        "file's; an NCCL_ALGO list (Ring,Tree; ^NVLS) lets the library's "
                        "tuner choose among what it leaves")
    c.add_argument("--collective", default=None, metavar="NAME", help=_COLLECTIVE_HELP)
    c.add_argument("--ranks", type=int, default=None, metavar="N", help=_RANKS_HELP)
    c.add_argument("--slices", type=int, default=None,
                   help="pipelining slices per transfer (default 1, or the scenario's)")
    add_library_arguments(c)
    add_channels_argument(c)
    c.add_argument("--select", action="append", default=[], metavar="COLUMN=TEXT",
                   help="training files: keep the rows whose COLUMN contains TEXT "
                        "(case-insensitive; repeatable), e.g. hardware=DGX-1")
    c.add_argument("--framework", default=None,
                   help="training files: auto (the default: detect from each row's framework "
                        "text, and its model where a recipe fixes the buckets), a registered "
                        "framework (ddp, apex-ddp, apex-ddp-bert, horovod, horovod-0.21, "
                        "tf-per-variable), per_layer, size:BYTES or cycle:BYTES:TIME")
    c.add_argument("--gradient-dtype", default=None, choices=GRADIENT_DTYPES,
                   help="training files: the dtype mixed-precision rows all-reduce their "
                        "gradients in (default: each row's recipe from its framework text "
                        "and model: TensorFlow AMP and Apex O1 keep fp32 variables; else "
                        "fp16)")
    c.add_argument("--ps-impl", default=None,
                   help="training files: the parameter-server implementation of ps rows: auto "
                        "(from the framework text; the default), ideal, tf-grpc, "
                        "mxnet-kvstore or byteps")
    c.add_argument("--device", default=None,
                   help="training files: the compute model's device preset (default: the "
                        "topology's; needed for topologies without GPUs, e.g. cpu-host)")
    c.add_argument("--shared-cores", type=int, default=None, metavar="CORES",
                   help="training files: the ranks share CORES CPU cores, so each computes "
                        "max(1, ranks x threads / CORES) times slower (default: the file's "
                        "cores column, written by measure training)")
    c.add_argument("--anchor", choices=["measured", "model"], default=None,
                   help="training files: one GPU's compute from the row's measured single-GPU "
                        "throughput (measured, the default) or from the compute model")
    c.add_argument("--workers", type=int, default=None, metavar="N",
                   help="training files: simulate the rows in N local processes (default 1; "
                        "the results do not depend on it)")
    c.add_argument("--max-mape", type=float, default=None, metavar="PCT",
                   help="exit 1 if the MAPE of any size band (or overall) exceeds PCT percent "
                        "(training files: the speedup MAPE of any arch, or overall)")
    c.add_argument("--steady-tolerance", type=float, default=None, metavar="REL",
                   help="LLM training tables: extend each row's step from a steady state "
                        "periodic to REL of its span (1e-9, exact, the default, to 1e-3), as "
                        "`clustersim llm --steady-tolerance`")
    c.add_argument("-o", "--output", default=None, metavar="OUT",
                   help="folder for compare.csv, mape.csv and plots")
    c.set_defaults(func=cmd_compare)

    k = subparsers.add_parser(
        "calibrate", help="fit the collective library's constants (nccl: latency and bandwidth "
                          "scales, launch cost) or, with --library ideal, a preset's link "
                          "bandwidths and latencies, to measured points")
    k.add_argument("measured", metavar="MEASURED", help="as for compare")
    k.add_argument("--topology", required=True, help="preset name, builder name or YAML file")
    k.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="override a builder parameter before calibrating (repeatable)")
    k.add_argument("--collective", default=None, metavar="NAME", help=_COLLECTIVE_HELP)
    k.add_argument("--ranks", type=int, default=None, metavar="N", help=_RANKS_HELP)
    k.add_argument("--out", required=True, metavar="CALIBRATED.yaml",
                   help="where to write the calibrated preset")
    k.add_argument("--fit-fraction", type=float, default=0.5,
                   help="share of the points (per size band) to fit on; the rest are held out")
    k.add_argument("--seed", type=int, default=0, help="seed of the fit/held-out split")
    k.add_argument("--max-fit-points", type=int, default=30,
                   help="cap on fit points (each evaluation simulates them all; default 30)")
    k.add_argument("--max-evaluations", type=int, default=150,
                   help="cap on objective evaluations (default 150)")
    add_library_arguments(k)
    k.set_defaults(func=cmd_calibrate)
