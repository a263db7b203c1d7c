"""Command line: ``clustersim`` (also ``python -m simulator``).

Subcommands
-----------
collective   simulate collectives on a topology and print nccl-tests style rows
topology     ``list`` the builders and presets, ``show`` one topology's devices and links
algorithms   list the registered algorithms and the collectives each implements

Every user mistake raises a :class:`~simulator.errors.ClusterSimError`; :func:`main` prints it
on one line to stderr and exits with code 2. Nothing is written before the inputs are validated.
"""

from __future__ import annotations

import argparse
import json
import sys

import pandas as pd

from .. import __version__
from ..errors import EXIT_INTERRUPTED, ClusterSimError, ConfigError
from .args import (ENGINE_CHOICES, _params, add_channels_argument, add_library_arguments,
                   check_algorithm, library_args)
from ..units import format_bandwidth, format_size, parse_bandwidth, parse_size, parse_sizes
from ..workload.mixed_precision import GRADIENT_DTYPE_HELP, GRADIENT_DTYPES

EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    """argparse that reports mistakes as one line and exit code 2 (no usage dump)."""

    def error(self, message):  # noqa: D401 - argparse hook
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _load(args):
    from ..topology import load_topology

    return load_topology(args.topology, _params(args.param))


def default_algorithm(collective: str) -> str:
    """``collective``'s algorithm when ``--algorithm`` is not given: the ring where it
    implements the collective, else the library's own choice (``auto``: an all-to-all); the
    ring for a name no algorithm knows, whose error lists the valid collectives."""
    from ..schedules import ALGORITHMS

    known = {c for a in ALGORITHMS.values() for c in a.collectives}
    ring = ALGORITHMS["ring"].collectives
    return "auto" if collective in known and collective not in ring else "ring"


def _algorithms(spec: str, collective: str) -> list[str]:
    from ..schedules import ALGORITHMS

    if spec == "all":
        return [a.name for a in ALGORITHMS.values()
                if collective in a.collectives and a.name in _primary_names()]
    names = [s.strip() for s in spec.split(",") if s.strip()]
    if not names:
        raise ConfigError("--algorithm is empty")
    for name in names:
        if name != "auto":
            check_algorithm(name)
    return names


def _primary_names() -> list[str]:
    """Registered names minus aliases (an alias shares its builder with an earlier name)."""
    from ..schedules import ALGORITHMS

    seen, names = set(), []
    for algo in ALGORITHMS.values():
        if algo.build not in seen:
            seen.add(algo.build)
            names.append(algo.name)
    return names


def _ps_options(args) -> dict:
    opts = {"servers": args.ps_servers, "placement": args.ps_placement}
    if args.ps_shards:
        try:
            opts["shards"] = [float(x) for x in args.ps_shards.split(",")]
        except ValueError:
            raise ConfigError(f"--ps-shards expects comma-separated fractions, got "
                              f"{args.ps_shards!r}") from None
    if args.ps_overlap:
        opts["phased"] = False
    return opts


def _algo_options(pairs: list[str], algorithms: list[str]) -> dict[str, dict]:
    """``--option KEY=VALUE`` pairs, routed to the algorithms that accept each key."""
    import yaml

    from ..config import yaml_value
    from ..schedules import get_algorithm

    values = {}
    for key, text in _params(pairs).items():
        if key.endswith("_bytes"):
            values[key] = parse_size(text, what=f"--option {key}")
        elif key.endswith("_bytes_per_s"):
            values[key] = parse_bandwidth(text, what=f"--option {key}")
        else:
            try:
                values[key] = yaml_value(text)
            except yaml.YAMLError:
                values[key] = text
    routed = {name: {} for name in algorithms}
    for key, value in values.items():
        takers = [n for n in algorithms if n != "auto" and key in get_algorithm(n).options()]
        if not takers:
            raise ConfigError(f"--option {key}: none of the selected algorithms "
                              f"({', '.join(algorithms)}) takes it; see clustersim algorithms")
        for name in takers:
            routed[name][key] = value
    return routed


def _runnable(graph, args, algorithms: list[str], library, protocol) -> list[str]:
    """``--algorithm all``: the algorithms this machine and library can run; the others are
    named on one stderr line with the reason, and none at all is an error."""
    from ..collective import endpoints, missing_hardware
    from ..library import resolve_library

    lib = resolve_library(library, graph)
    gpus = len(endpoints(graph)) if args.gpus is None else args.gpus
    unavailable = getattr(lib, "unavailable", None)
    reasons = {}
    for name in algorithms:
        reasons[name] = missing_hardware(graph, name) or (
            unavailable(graph, args.collective, name, gpus, protocol=protocol)
            if unavailable else "")
    by_reason: dict[str, list[str]] = {}
    for name, why in reasons.items():
        if why:
            by_reason.setdefault(why, []).append(name)
    skipped = [f"{', '.join(names)} ({why})" for why, names in by_reason.items()]
    runnable = [name for name, why in reasons.items() if not why]
    where = f"{graph.graph.get('name') or 'this topology'} with library {lib.name}"
    if not runnable:
        raise ConfigError(f"--algorithm all: no algorithm can run {args.collective} on "
                          f"{where}: {'; '.join(skipped) or 'none implements it'}")
    if skipped:
        print(f"all: skipped on {where}: {'; '.join(skipped)}", file=sys.stderr)
    return runnable


def cmd_collective(args) -> int:
    from ..collective import RESULT_COLUMNS, run_collective
    from ..library import get_library, graph_settings

    graph = _load(args)
    if args.gpus is not None:
        from ..guard import check_gpus

        check_gpus(graph, args.gpus)
    sizes = [size for text in args.size for size in parse_sizes(text, what="--size")]
    if args.slices < 1:
        raise ConfigError(f"--slices must be >= 1, got {args.slices}")
    if args.algorithm is None:
        args.algorithm = default_algorithm(args.collective)
    algorithms = _algorithms(args.algorithm, args.collective)
    lib_args = library_args(args, graph)
    library = lib_args["library"]
    if library == "nccl":
        library = get_library("nccl", **graph_settings(graph, "nccl", {
            "version": lib_args["version"], "launch": lib_args["launch"],
            "channels": lib_args["channels"]}))
    ps_opts = _ps_options(args)
    extra = _algo_options(args.option, algorithms)
    if args.algorithm == "all":
        algorithms = _runnable(graph, args, algorithms, library, lib_args["protocol"])
    if args.algorithm == "all" and "ps" in algorithms and ps_opts["placement"] == "dedicated":
        from ..collective import free_hosts

        if free_hosts(graph, args.gpus) < ps_opts["servers"]:
            ps_opts["placement"] = "colocated"
            print("all: no free host for a dedicated parameter server on this topology; "
                  "the ps rows use colocated servers", file=sys.stderr)
    from ..collective import default_engine

    engine = args.engine or default_engine()
    rows = []
    for size in sizes:
        for name in algorithms:
            opts = dict(ps_opts) if name == "ps" else {}
            opts.update(extra.get(name, {}))
            result = run_collective(graph, args.collective, name, size, gpus=args.gpus,
                                    slices=args.slices, reduce_compute=not args.free_reduce,
                                    engine=engine, library=library,
                                    protocol=lib_args["protocol"], **opts)
            row = dict(result.row)
            if args.verbose:
                others = "; ".join(result.why_not_others()) or "none before it"
                print(f"{name} {format_size(size)}: {result.method} answered; before it: "
                      f"{others}", file=sys.stderr)
            if name == "auto":
                plan = result.plan
                how = (f"{plan.label}/{plan.protocol} on {plan.channels} channel(s)"
                       if plan.protocol else plan.label)
                by = plan.notes.get("tuner")
                staged = plan.notes.get("staged_channel_GBps")
                print(f"auto: chose {how} for {args.collective} of {format_size(size)}"
                      f" ({row['library']} library{', ' + by + ' tuner' if by else ''})"
                      + (f"; network bytes staged through host memory, {staged:.2f} GB/s a "
                         f"channel" if staged else ""), file=sys.stderr)
            rows.append(row)
    frame = pd.DataFrame(rows, columns=list(RESULT_COLUMNS))
    _emit(frame, args.format)
    return 0


def _emit(frame: pd.DataFrame, fmt: str) -> None:
    if fmt == "json":
        print(json.dumps(frame.to_dict(orient="records"), indent=1))
    elif fmt == "csv":
        print(frame.to_csv(index=False), end="")
    else:
        print(format_table(frame))


def format_table(frame: pd.DataFrame) -> str:
    """Human table: sizes and times with units, bandwidths in GB/s, the bottleneck link."""
    if frame.empty:
        return "(no results)"
    shown = pd.DataFrame({
        "collective": frame["collective"], "algorithm": frame["algorithm"],
        "gpus": frame["gpus"], "size": [format_size(s) for s in frame["size_bytes"]],
        "time_us": [f"{t:.3f}" for t in frame["time_us"]],
        "algbw_GBps": [f"{b:.3f}" for b in frame["algbw_GBps"]],
        "busbw_GBps": [f"{b:.3f}" for b in frame["busbw_GBps"]],
        "bottleneck": [f"{l} ({u:.0%})" for l, u in zip(frame["bottleneck_link"],
                                                          frame["bottleneck_utilisation"])],
    })
    if "engine" in frame and (frame["engine"] != "event").any():
        shown["engine"] = frame["engine"]
    if "library" in frame and (frame["library"] != "ideal").any():
        shown["library"] = frame["library"]
        shown["protocol"] = frame["protocol"]
        shown["channels"] = frame["channels"]
    fastest = frame.groupby("size_bytes")["time_s"].transform("min")
    if frame["algorithm"].nunique() > 1:
        shown["vs_best"] = [f"{t / b:.2f}x" if b > 0 else "-" for t, b in
                            zip(frame["time_s"], fastest)]
    return shown.to_string(index=False)


def cmd_run(args) -> int:
    from pathlib import Path

    from ..report.output import published, staged_output, write_csv, write_resolved
    from ..report.plots import WORKLOAD_PLOTS
    from ..scenario import load_scenario, run_scenario, run_study

    scenario = load_scenario(args.scenario)
    out = Path(args.output or Path("out") / scenario.name)
    if args.trace and scenario.study is not None:
        raise ConfigError(f"--trace takes collective and training scenarios, not "
                          f"{scenario.workload}")
    registry = WORKLOAD_PLOTS[scenario.workload]
    if scenario.study is not None:
        from ..report.tables import STUDY_TABLES

        result = run_study(scenario)
        frame = result.frame
        print(STUDY_TABLES[scenario.workload](frame))
        plots = [lambda stem, fn=registry[p]: fn(frame, stem, result.extras)
                 for p in scenario.plots or tuple(registry)]
        names = list(scenario.plots or tuple(registry))
    else:
        frame = run_scenario(scenario)
        training = scenario.training is not None
        print(format_training_table(frame) if training else format_table(frame))
        names = list(scenario.plots or tuple(registry)[:1])
        plots = [lambda stem, fn=registry[p]: fn(frame, stem) for p in names]
    with staged_output(out) as stage:
        written = [write_csv(stage / "results.csv", frame),
                   write_resolved(stage / "scenario.resolved.yaml", scenario.resolved,
                                  scenario.seed)]
        for name, plot in zip(names, plots):
            written += plot(stage / name)
        if args.trace:
            written += _write_traces(scenario, stage)
    print(f"wrote {', '.join(published(written, stage, out))}")
    return 0


def _write_traces(scenario, out) -> list:
    """Chrome trace, link heatmap and Gantt chart of the scenario's representative points."""
    from ..records import compute_frame, link_timeline, transfers_frame
    from ..report.plots import gantt, link_heatmap
    from ..report.trace import write_trace
    from ..scenario import simulate_point, trace_points

    graph = scenario.graph()
    written = []
    for point in trace_points(scenario):
        row, engine = simulate_point(scenario, point, graph, record_rates=True)
        name = "_".join(str(p) for p in point if p is not None)
        title = f"{scenario.name}: {name}"
        written.append(write_trace(engine, out / f"trace_{name}.json", title=title))
        written += link_heatmap(link_timeline(engine), out / f"heatmap_{name}")
        written += gantt(transfers_frame(engine.runs), compute_frame(engine), out / f"gantt_{name}")
    return written


def format_training_table(frame: pd.DataFrame) -> str:
    """Human table of training points: iteration time, throughput, speedup, where time goes."""
    if frame.empty:
        return "(no results)"
    shown = pd.DataFrame({
        "model": frame["model"], "aggregation": frame["aggregation"], "gpus": frame["gpus"],
        "iter_ms": [f"{t * 1e3:.1f}" for t in frame["iteration_s"]],
        "samples/s": [f"{t:.1f}" for t in frame["throughput_samples_s"]],
        "per_gpu": [f"{t:.1f}" for t in frame["per_gpu_samples_s"]],
        "speedup": [f"{t:.2f}" for t in frame["speedup"]],
        "efficiency": [f"{t:.1%}" for t in frame["efficiency"]],
        "exposed_ms": [f"{t * 1e3:.1f}" for t in frame["exposed_comm_s"]],
        "overlap": [f"{t:.0%}" for t in frame["overlap"]],
        "bottleneck": frame["bottleneck_link"],
    })
    if (frame["consistency"] != "bsp").any():
        shown["staleness"] = [f"{m:.1f} (max {x})" for m, x in
                              zip(frame["staleness_mean"], frame["staleness_max"])]
    if "straggler_factor" in frame and (frame["straggler_factor"] != 1.0).any():
        shown.insert(3, "slowdown", [f"{f:g}x" for f in frame["straggler_factor"]])
    if "failure_policy" in frame and (frame["failure_policy"] != "none").any():
        shown["failure"] = frame["recovery"]
        shown["goodput"] = [f"{g:.1f}" for g in frame["goodput_samples_s"]]
    if "compression" in frame and (frame["compression"] != "none").any():
        shown.insert(2, "compression", frame["compression"])
        shown["wire_MB/it"] = [f"{b / 1e6:.3g}" for b in frame["wire_bytes_per_iteration"]]
        shown["ps_in_MB/it"] = [f"{b / 1e6:.3g}" for b in frame["ps_in_bytes_per_iteration"]]
        shown["ps_out_MB/it"] = [f"{b / 1e6:.3g}" for b in frame["ps_out_bytes_per_iteration"]]
        shown["J/sample"] = [f"{j:.2f}" for j in frame["joules_per_sample"]]
    return shown.to_string(index=False)


def _int_list(text: str, what: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise ConfigError(f"{what} expects comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise ConfigError(f"{what} expects positive integers, got {text!r}")
    return values


def _fraction(value, flag: str):
    """A finite number >= 0 (or None)."""
    import math

    if value is not None and not (math.isfinite(value) and value >= 0):
        raise ConfigError(f"{flag} must be a finite number >= 0, got {value}")
    return value


def _servers(text: str):
    if text == "per_node":
        return text
    if text.isdigit() and int(text) >= 1:
        return int(text)
    raise ConfigError(f"--ps-servers expects a positive integer or per_node, got {text!r}")


def _consistency(text: str) -> dict:
    """``bsp``, ``async``, ``ssp:K`` or ``easgd:TAU`` -> PsConfig fields."""
    if text == "bsp":
        return {"staleness": 0}
    if text == "async":
        return {"staleness": None}
    kind, _, k = text.partition(":")
    if kind == "ssp" and k.isdigit() and int(k) >= 1:
        return {"staleness": int(k)}
    if kind == "easgd" and k.isdigit() and int(k) >= 1:
        return {"staleness": None, "easgd_tau": int(k)}
    raise ConfigError(f"--consistency expects bsp, ssp:K (K >= 1), async or easgd:TAU "
                      f"(TAU >= 1), got {text!r}")


def _overheads(args):
    """``--jitter-cv``, ``--step-overhead``, ``--decode-per-sample``, ``--host-cores`` as a
    :class:`~simulator.workload.overheads.TrainingOverheads` (None when all are off)."""
    from ..units import parse_duration
    from ..workload.overheads import TrainingOverheads

    step = parse_duration(args.step_overhead, what="--step-overhead")
    decode = parse_duration(args.decode_per_sample, what="--decode-per-sample")
    if args.host_cores is not None and args.host_cores < 1:
        raise ConfigError(f"--host-cores must be >= 1, got {args.host_cores}")
    if not (args.jitter_cv or step or decode):
        return None
    if not 0.0 <= args.jitter_cv < 1.0:
        raise ConfigError(f"--jitter-cv must be a coefficient of variation in [0, 1), got "
                          f"{args.jitter_cv} (0.01: the sourced Horovod value)")
    return TrainingOverheads(jitter_cv=args.jitter_cv, step_overhead_s=step,
                             decode_cpu_s_per_sample=decode, host_cores=args.host_cores)


def cmd_train(args) -> int:
    from pathlib import Path

    from ..report.output import write_csv
    from ..report.plots import TRAINING_PLOTS
    from ..workload.models import get_model
    from ..workload.compression import parse_compression
    from ..workload.sweep import PRECISIONS, TrainingSpec, run_training
    from ..workload.training import PsConfig

    graph = _load(args)
    models = tuple(m.strip() for m in args.model.split(",") if m.strip())
    for m in models:
        get_model(m)
    aggregations = tuple(a.strip() for a in args.aggregation.split(",") if a.strip())
    from ..workload.sweep import is_aggregation

    for a in aggregations:
        if not is_aggregation(a):
            _algorithms(a, "allreduce")
    if args.precision not in PRECISIONS:
        raise ConfigError(f"--precision must be one of {', '.join(PRECISIONS)}, "
                          f"got {args.precision!r}")
    if args.batch_per_gpu < 1:
        raise ConfigError(f"--batch-per-gpu must be >= 1, got {args.batch_per_gpu}")
    if args.accumulation < 1:
        raise ConfigError(f"--accumulation must be >= 1 (micro-batches per optimizer step), "
                          f"got {args.accumulation}")
    if args.compute and not Path(args.compute).is_file():
        raise ConfigError(f"--compute: file {args.compute!r} not found")
    from ..units import parse_throughput
    from ..workload.frameworks import parse_framework
    from ..workload.ps_impls import get_ps_impl

    from ..guard import check_gpus, check_servers

    gpus = _int_list(args.gpus, "--gpus")
    for n in gpus:       # before anything is sized by a count
        check_gpus(graph, n)
    servers = _servers(args.ps_servers)
    if servers != "per_node" and args.ps_placement == "colocated":
        check_servers(graph, servers)
    compression = parse_compression(args.compression) if args.compression else None
    compressed = compression is not None and not compression.identity
    spec = TrainingSpec(
        models=models, batch_per_gpu=args.batch_per_gpu, gpus=gpus,
        accumulation=args.accumulation,
        aggregations=aggregations, precision=args.precision, device=args.device,
        bucket_bytes=parse_size(args.bucket, what="--bucket"), overlap=not args.no_overlap,
        slices=args.slices,
        ps=PsConfig(servers=servers, placement=args.ps_placement,
                    sharding=args.ps_sharding, **_consistency(args.consistency),
                    hierarchy=args.ps_hierarchy,
                    local_aggregation=args.ps_local_aggregation,
                    impl=get_ps_impl(args.ps_impl).name),
        measured_csv=args.compute,
        compression=compression, library=_training_library(args, graph, compressed),
        framework=parse_framework(args.framework), overlap_slowdown=_fraction(
            args.overlap_slowdown, "--overlap-slowdown"),
        single_gpu_throughput=parse_throughput(args.single_gpu_throughput,
                                               what="--single-gpu-throughput")
        if args.single_gpu_throughput else None, overheads=_overheads(args),
        gradient_dtype=args.gradient_dtype)
    frame = run_training(graph, spec)
    if args.format == "table":
        print(format_training_table(frame))
    else:
        _emit(frame, args.format)
    if args.output:
        from ..report.output import published, staged_output

        out = Path(args.output)
        with staged_output(out) as stage:
            written = [write_csv(stage / "results.csv", frame)]
            for name, plot in TRAINING_PLOTS.items():
                written += plot(frame, stage / name)
        print(f"wrote {', '.join(published(written, stage, out))}", file=sys.stderr)
    return 0


def _training_library(args, graph, compressed: bool = False):
    """``--library`` of ``train``: the topology's default (``nccl`` on GPU clusters) unless
    asked; each bucket's protocol is the library's choice."""
    from ..library import training_library

    if args.protocol:
        raise ConfigError("--protocol: train lets the library choose each bucket's protocol")
    if args.library is None:
        return training_library(graph, None, launch=args.launch, version=args.nccl_version,
                                compressed=compressed)
    lib = library_args(args, graph)
    return training_library(graph, lib["library"], launch=lib["launch"],
                            version=lib["version"], compressed=compressed)


def cmd_sweep(args) -> int:
    from ..sweep import run_sweep

    frame = run_sweep(args.scenario, args.output, workers=args.workers, scheduler=args.scheduler,
                      progress=not args.quiet)
    print(f"{len(frame)} rows in {args.output}", file=sys.stderr)
    return 0


def cmd_topology(args) -> int:
    from ..topology import describe, list_topologies

    if args.action == "list":
        for name in list_topologies():
            print(name)
        return 0
    if not args.name:
        raise ConfigError("topology show needs a NAME_OR_FILE")
    from ..topology import load_topology

    graph = load_topology(args.name, _params(args.param))
    info = describe(graph)
    print(f"topology {graph.graph.get('name', args.name)}")
    for key, value in info.items():
        if key == "links":
            print("links:")
            for link in value:
                print(f"  {link['count']:>5} x {link['kind']:<9} "
                      f"{format_bandwidth(link['bandwidth_bytes_per_s']):>12} per direction")
        elif key == "throughput_caps":
            caps = ", ".join(f"{c['count']} x {c['kind']} "
                             f"{format_bandwidth(c['throughput_bytes_per_s'])}" for c in value)
            print(f"throughput caps: {caps or 'none'}")
        elif isinstance(value, dict):
            print(f"{key}: " + ", ".join(f"{k}={v}" for k, v in value.items()))
        else:
            print(f"{key}: {value}")
    return 0


def cmd_schema(args) -> int:
    from pathlib import Path

    from ..grammar import json_schema

    text = json_schema(args.kind) + "\n"
    if args.output:
        from ..report.output import write_text

        print(f"wrote {write_text(Path(args.output), text)}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def cmd_algorithms(_args) -> int:
    from ..schedules import ALGORITHMS

    for algo in ALGORITHMS.values():
        opts = ", ".join(algo.options()) or "-"
        print(f"{algo.name:<20} {','.join(algo.collectives):<55} options: {opts}")
        print(f"{'':<20} {algo.summary}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="clustersim",
                     description="Flow-level simulator of gradient aggregation in distributed "
                                 "training: ring, trees, double binary tree, parameter servers.")
    parser.add_argument("--version", action="version", version=f"clustersim {__version__}")
    parser.add_argument("--max-memory", default=None, metavar="SIZE",
                        help="refuse requests estimated to need more memory than SIZE "
                             "(e.g. 8GiB; default half of this machine's RAM)")
    parser.add_argument("--time-budget", type=float, default=None, metavar="SECONDS",
                        help="stop any simulation after this much wall time, with a report")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    c = sub.add_parser("collective", help="simulate collectives and print nccl-tests style rows")
    c.add_argument("--topology", required=True, help="preset name, builder name or YAML file")
    c.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="override a topology builder parameter (repeatable)")
    c.add_argument("--gpus", type=int, default=None,
                   help="use the first N GPUs (hosts on star/fat_tree); default: all")
    c.add_argument("--collective", default="allreduce",
                   help="allreduce, reduce_scatter, allgather, broadcast, reduce, alltoall")
    c.add_argument("--algorithm", default=None,
                   help="a registered name, a comma-separated list, 'all' or 'auto' "
                        "(default: ring; auto for an all-to-all, which the ring does not do)")
    c.add_argument("--size", action="append", required=True,
                   help="message size with unit, e.g. 64MiB; a list 1MiB,16MiB; or a range "
                        "as nccl-tests sweeps: 8B:8GiB (doubling, -f 2), 8B:8GiB:x4, "
                        "1MiB:8MiB:+1MiB (repeatable)")
    c.add_argument("--slices", type=int, default=1,
                   help="FIFO slices per transfer; 1 (default) = step-synchronous alpha-beta; "
                        "K > 1 pipelines each step")
    c.add_argument("--ps-servers", type=int, default=1, help="parameter servers (default 1)")
    c.add_argument("--ps-placement", choices=["dedicated", "colocated"], default="dedicated",
                   help="dedicated: the hosts after the N workers; colocated: on the workers")
    c.add_argument("--ps-shards", default=None,
                   help="comma-separated shard fractions per server (uneven, hot shards)")
    c.add_argument("--ps-overlap", action="store_true",
                   help="pull each shard as soon as it is aggregated (default: BSP phases)")
    c.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="algorithm option, e.g. segments=16, segment_bytes=4MiB, root=3, "
                        "inner=ring, outer=double_binary_tree (repeatable)")
    c.add_argument("--free-reduce", action="store_true",
                   help="do not charge reduction compute on the receiving device")
    c.add_argument("--engine", choices=ENGINE_CHOICES, default=None,
                   help="auto (the default): the first exact fast method that applies "
                        "(engine/dispatch.py), else the event engine; fast: a fast method or "
                        "an error saying why none applies; event: the SimPy flow-level event "
                        "engine, the reference; a method's name forces that method (an error "
                        "if it does not apply). The row's engine column says which ran")
    add_library_arguments(c)
    add_channels_argument(c)
    c.add_argument("--format", choices=["table", "csv", "json"], default="table")
    c.add_argument("-v", "--verbose", action="store_true",
                   help="say on stderr which engine method answered each row, and why the "
                        "ones before it did not")
    c.set_defaults(func=cmd_collective)

    tr = sub.add_parser("train", help="simulate data-parallel training: speedup vs GPUs")
    tr.add_argument("--topology", required=True, help="preset name, builder name or YAML file")
    tr.add_argument("--param", action="append", default=[], metavar="KEY=VALUE")
    tr.add_argument("--model", required=True, help="model name(s), comma-separated "
                                                   "(resnet50, alexnet, vgg16, bert_base, ...)")
    tr.add_argument("--batch-per-gpu", type=int, default=32)
    tr.add_argument("--accumulation", type=int, default=1, metavar="STEPS",
                    help="gradient accumulation: micro-batches of --batch-per-gpu per optimizer "
                         "step, aggregated once from the last one's backward (DDP no_sync); "
                         "default 1")
    tr.add_argument("--gpus", default="1,2,4,8", help="comma-separated GPU counts")
    tr.add_argument("--aggregation", default="ring",
                    help="comma-separated: any all-reduce algorithm, or ps")
    tr.add_argument("--precision", default="fp32", help="fp32, fp16, amp or bf16")
    tr.add_argument("--gradient-dtype", default=None, choices=GRADIENT_DTYPES,
                    help=GRADIENT_DTYPE_HELP)
    tr.add_argument("--device", default=None, help="GPU preset (default: the topology's)")
    tr.add_argument("--bucket", default="25MiB", help="gradient bucket size (DDP: 25MiB)")
    tr.add_argument("--no-overlap", action="store_true",
                    help="aggregate only after backward ends (no compute/comm overlap)")
    tr.add_argument("--slices", type=int, default=1)
    tr.add_argument("--ps-servers", default="1",
                    help="number of parameter servers, or per_node (one per worker machine)")
    tr.add_argument("--ps-placement", choices=["dedicated", "colocated"], default="dedicated")
    tr.add_argument("--ps-sharding", choices=["round_robin", "greedy", "even"],
                    default="round_robin")
    tr.add_argument("--consistency", default="bsp",
                    help="bsp, ssp:K, async, or easgd:TAU (elastic averaging: exchange with the "
                         "center every TAU local iterations) (PS only)")
    tr.add_argument("--ps-hierarchy", choices=["none", "machine", "rack"], default="none",
                    help="aggregators between workers and servers: each machine's GPUs, or "
                         "each leaf switch's workers, reduce to one that pushes and pulls")
    tr.add_argument("--ps-impl", default="ideal",
                    help="parameter-server implementation: ideal (bare wires), tf-grpc, "
                         "mxnet-kvstore or byteps (transport framing and host copies)")
    tr.add_argument("--ps-local-aggregation", action="store_true",
                    help="reduce inside each machine first, one push/pull per machine "
                         "(TensorFlow distributed_replicated)")
    tr.add_argument("--compute", default=None, metavar="CSV",
                    help="measured per-layer times (clustersim measure kernels) instead of the "
                         "roofline model")
    tr.add_argument("--compression", default=None, metavar="FORMAT",
                    help="gradient compression: none, fp16, bf16, topk:FRACTION (e.g. "
                         "topk:0.01) or onebit")
    tr.add_argument("--framework", default=None,
                    help="how gradients become calls: ddp, apex-ddp, apex-ddp-bert, horovod, "
                         "horovod-0.21, tf-per-variable, per_layer, size:BYTES or "
                         "cycle:BYTES:TIME (default: buckets of --bucket)")
    tr.add_argument("--overlap-slowdown", type=float, default=None, metavar="FRACTION",
                    help="how much slower backward computes while the library's collective "
                         "kernels run beside it (default 0.189: arXiv:2507.03114's average; "
                         "0 for none)")
    tr.add_argument("--single-gpu-throughput", default=None, metavar="RATE",
                    help="measured throughput of one GPU (e.g. 134img/s): fixes one "
                         "iteration's compute; the compute model only splits it over layers")
    tr.add_argument("--jitter-cv", type=float, default=0.0, metavar="CV",
                    help="per-step compute jitter of each worker (coefficient of variation); "
                         "a synchronous step waits for the slowest of N (0.01: the sourced "
                         "Horovod value; default 0)")
    tr.add_argument("--step-overhead", default="0s", metavar="TIME",
                    help="framework time per iteration outside the GPU (e.g. 2ms; default 0)")
    tr.add_argument("--decode-per-sample", default="0s", metavar="TIME",
                    help="host CPU time per sample of the input pipeline (real data; default "
                         "0: synthetic data; measure it with 'clustersim measure input')")
    tr.add_argument("--host-cores", type=int, default=None, metavar="CORES",
                    help="host cores per machine for the input pipeline (default: the "
                         "topology's CPU)")
    add_library_arguments(tr)
    tr.add_argument("--format", choices=["table", "csv", "json"], default="table")
    tr.add_argument("-o", "--output", default=None, help="folder for results.csv and plots")
    tr.set_defaults(func=cmd_train)

    r = sub.add_parser("run", help="run a scenario YAML: table, results.csv, plots")
    r.add_argument("scenario", help="scenario YAML file (see scenarios/)")
    r.add_argument("-o", "--output", default=None,
                   help="output folder (default: out/<scenario name>)")
    r.add_argument("--trace", action="store_true",
                   help="also write Chrome traces (Perfetto), link heatmaps and Gantt charts of "
                        "each algorithm at one representative point")
    r.set_defaults(func=cmd_run)

    sw = sub.add_parser("sweep", help="run a scenario's sweep in parallel, resumable, to one CSV")
    sw.add_argument("scenario", help="scenario YAML file")
    sw.add_argument("-o", "--output", required=True, help="results CSV (resumed if it exists)")
    sw.add_argument("--workers", type=int, default=None,
                    help="local worker processes (default: CPU count; 1 = in-process)")
    sw.add_argument("--scheduler", default=None,
                    help="Dask scheduler tcp://HOST:PORT, or local to start a LocalCluster")
    sw.add_argument("--quiet", action="store_true", help="no progress bar")
    sw.set_defaults(func=cmd_sweep)

    t = sub.add_parser("topology", help="list or show topologies")
    t.add_argument("action", choices=["list", "show"])
    t.add_argument("name", nargs="?", help="preset name, builder name or YAML file")
    t.add_argument("--param", action="append", default=[], metavar="KEY=VALUE")
    t.set_defaults(func=cmd_topology)

    sc = sub.add_parser("schema", help="print the JSON Schema of scenario or topology files "
                                       "(for editors: completion and checks as you type)")
    sc.add_argument("kind", choices=["scenario", "topology"])
    sc.add_argument("-o", "--output", default=None, help="write it to this file instead")
    sc.set_defaults(func=cmd_schema)

    a = sub.add_parser("algorithms", help="list registered algorithms")
    a.set_defaults(func=cmd_algorithms)
    from ..measure.cli import add_measure_parser
    add_measure_parser(sub)
    from .compare import add_compare_parsers
    add_compare_parsers(sub)
    from .llm import add_llm_parser
    add_llm_parser(sub)
    from .validate import add_validate_parser
    add_validate_parser(sub)
    return parser


def _terminate(_signum, _frame):
    """SIGTERM ends a run as Ctrl-C does: files being written are removed, none is left half
    written (every output is written to a temporary name and renamed into place)."""
    raise KeyboardInterrupt


def main(argv=None) -> int:
    """The command line; SIGTERM ends it as Ctrl-C does while it runs (unless the process
    ignores SIGTERM), and the caller's handler is put back when it returns."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return _main(argv)
    previous = signal.getsignal(signal.SIGTERM)
    if previous is signal.SIG_IGN:
        return _main(argv)
    signal.signal(signal.SIGTERM, _terminate)
    try:
        return _main(argv)
    finally:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


def _main(argv) -> int:
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        from ..engine.runner import wall_budget
        from ..guard import memory_limit
    except KeyboardInterrupt:
        print("clustersim: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    try:
        limit = (None if args.max_memory is None
                 else parse_size(args.max_memory, what="--max-memory"))
        with memory_limit(limit), wall_budget(args.time_budget):
            return args.func(args)
    except ClusterSimError as exc:
        print(f"clustersim: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except MemoryError:
        # the guard's estimates (guard.py) refuse the known big allocations before they are
        # made; this is what one they do not cover ends as
        from ..guard import memory_limit_bytes

        print(f"clustersim: error: out of memory: this request needs more memory than this "
              f"machine could give (the guard's limit is "
              f"{format_size(memory_limit_bytes())}, --max-memory); ask for fewer ranks, "
              f"slices or sizes, or use --engine auto", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("clustersim: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # the reader of the printed table went away (`clustersim ... | head`): stop quietly,
        # as Unix tools do, with the shell's status for SIGPIPE; the output is sent to
        # /dev/null so that Python's final flush does not fail again
        import os

        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 141


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
