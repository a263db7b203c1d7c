"""``clustersim measure``: take real measurements on this machine.

::

    clustersim measure kernels --model resnet50 --device cpu --batch 8 -o layers.csv
    clustersim measure collectives --network shaped --ranks 4 --bandwidth 1Gbps \\
        --sizes 1MiB,4MiB,16MiB --algorithms library,ring,tree,ps -o measured.csv \\
        --topology-out shaped.yaml
    clustersim measure training --network shaped --bandwidth 200Mbps --ranks 1,2,4 \\
        --aggregation ddp,ps -o training.csv --topology-out shaped.yaml
    clustersim measure input --images ~/imagenet/train --workers 1,8 -o input.csv

``kernels`` writes the per-layer CSV that ``clustersim train --compute`` reads; ``collectives``
writes measurement rows and, on a shaped network, the topology preset of the network it built, so
``clustersim collective --topology shaped.yaml`` simulates the same thing. Needs the
``[measure]`` extra (PyTorch); a shaped network needs root and iproute2. ``input`` times the
host's input pipeline (CPU-seconds per sample, what ``clustersim train --decode-per-sample``
takes) with Pillow and numpy only.
"""

from __future__ import annotations

import sys

from simulator.errors import ConfigError
from simulator.units import format_duration, format_size, parse_bandwidth, parse_size

__all__ = ["add_measure_parser"]


def _names(text: str, what: str) -> list[str]:
    names = [s.strip() for s in text.split(",") if s.strip()]
    if not names:
        raise ConfigError(f"{what} is empty")
    return names


def _positive(value: int | None, what: str) -> None:
    if value is not None and value < 1:
        raise ConfigError(f"{what} must be >= 1, got {value}")


def cmd_llm_kernels(args) -> int:
    """``measure kernels --llm``: the kernels of one transformer layout, timed, as the
    ``op, shape, time_s`` table that ``clustersim llm --kernels`` reads."""
    import functools
    from pathlib import Path

    from ..report.output import write_csv
    from ..workload.llm.costs import step_work
    from ..workload.llm.layout import Layout
    from ..workload.llm.registry import get_llm_model
    from .llm_kernels import measure_llm_kernels

    for value, what in ((args.tp, "--tp"), (args.cp, "--cp"), (args.ep, "--ep"),
                        (args.batch, "--batch"), (args.iterations, "--iterations")):
        _positive(value, what)
    layout = Layout(tp=args.tp, cp=args.cp, ep=args.ep, dp=args.ep, micro_batch=args.batch,
                    global_batch=args.batch * args.ep, sequence_parallel=args.sequence_parallel,
                    recompute=args.recompute, precision=args.precision)
    model = get_llm_model(args.model)
    frame = measure_llm_kernels(functools.partial(step_work, model, layout, args.gpu),
                                device=args.device, iterations=args.iterations,
                                warmup=args.warmup, threads=args.threads, limit=args.limit)
    path = write_csv(Path(args.output), frame)
    print(f"{args.model} tp {args.tp} cp {args.cp} ep {args.ep}, micro-batch {args.batch} on "
          f"{frame['device'].iloc[0] if len(frame) else args.device}: {len(frame)} kernels, "
          f"{format_duration(frame['time_s'].sum())} in all (one of each)")
    print(f"wrote {path}", file=sys.stderr)
    return 0


def cmd_kernels(args) -> int:
    if args.llm:
        return cmd_llm_kernels(args)
    from .kernels import measure_kernels, write_kernels_csv

    _positive(args.batch, "--batch")
    _positive(args.iterations, "--iterations")
    _positive(args.threads, "--threads")
    if args.warmup < 0:
        raise ConfigError(f"--warmup must be >= 0, got {args.warmup}")
    frame = measure_kernels(args.model, device=args.device, batch=args.batch,
                            iterations=args.iterations, warmup=args.warmup, threads=args.threads)
    path = write_kernels_csv(frame, args.output)
    forward, backward = frame["forward_s"].sum(), frame["backward_s"].sum()
    print(f"{args.model} on {frame['device'].iloc[0]}, batch {args.batch}, "
          f"{frame['threads'].iloc[0]} thread(s): {len(frame)} layers, forward "
          f"{format_duration(forward)}, backward {format_duration(backward)} "
          f"(sum of per-layer medians of {args.iterations})")
    print(f"wrote {path}", file=sys.stderr)
    return 0


def cmd_collectives(args) -> int:
    from . import MeasurementError
    from .collectives import measure_collectives, write_measured_csv

    sizes = [parse_size(s, what="--sizes") for s in _names(args.sizes, "--sizes")]
    bandwidth = (parse_bandwidth(args.bandwidth, what="--bandwidth")
                 if args.bandwidth is not None else None)
    _positive(args.iterations, "--iterations")
    if args.warmup < 0:
        raise ConfigError(f"--warmup must be >= 0, got {args.warmup}")
    if args.topology_out and args.network != "shaped":
        raise ConfigError("--topology-out needs --network shaped")
    if args.bandwidth is not None and args.network != "shaped":
        raise ConfigError("--bandwidth needs --network shaped (loopback is not shaped)")
    frame = measure_collectives(args.ranks, sizes, _names(args.algorithms, "--algorithms"),
                                backend=args.backend, network=args.network,
                                bandwidth=bandwidth, iterations=args.iterations,
                                warmup=args.warmup, device=args.device,
                                timeout_s=args.timeout, topology_out=args.topology_out)
    for _, row in frame.iterrows():
        spread = row["time_std_us"] / row["time_us"] if row["time_us"] > 0 else 0.0
        print(f"{row['algorithm']:<8} {format_size(row['size_bytes']):>10} "
              f"{format_duration(row['time_us'] * 1e-6):>12} +-{spread:6.1%}  "
              f"busbw {row['busbw_GBps']:8.4f} GB/s  correct={bool(row['correct'])}")
    if args.output:
        print(f"wrote {write_measured_csv(frame, args.output)}", file=sys.stderr)
    if args.topology_out:
        print(f"wrote {args.topology_out}", file=sys.stderr)
    if not frame["correct"].all():
        raise MeasurementError("an algorithm produced a wrong sum (see correct=False rows)")
    return 0


def _rank_counts_named(text: str, flag: str) -> list[int]:
    counts = []
    for item in _names(text, flag):
        if not item.isdigit() or int(item) < 1:
            raise ConfigError(f"{flag} expects comma-separated integers >= 1, got {item!r}")
        counts.append(int(item))
    return counts


def _rank_counts(text: str) -> list[int]:
    return _rank_counts_named(text, "--ranks")


def cmd_training(args) -> int:
    from .training import measure_training, write_training_csv

    ranks = _rank_counts(args.ranks)
    bandwidth = (parse_bandwidth(args.bandwidth, what="--bandwidth")
                 if args.bandwidth is not None else None)
    bucket_bytes = parse_size(args.bucket, what="--bucket")
    for flag, value in (("--batch-per-rank", args.batch_per_rank),
                        ("--iterations", args.iterations), ("--threads", args.threads),
                        ("--repeats", args.repeats), ("--bucket", bucket_bytes)):
        _positive(value, flag)
    if args.warmup < 0:
        raise ConfigError(f"--warmup must be >= 0, got {args.warmup}")
    if args.timeout is not None and args.timeout <= 0:
        raise ConfigError(f"--timeout must be > 0 seconds, got {args.timeout:g}")
    if args.topology_out and args.network != "shaped":
        raise ConfigError("--topology-out needs --network shaped")
    if args.bandwidth is not None and args.network != "shaped":
        raise ConfigError("--bandwidth needs --network shaped (loopback is not shaped)")
    frame = measure_training(ranks, _names(args.aggregation, "--aggregation"), args.model,
                             batch=args.batch_per_rank, iterations=args.iterations,
                             warmup=args.warmup, threads=args.threads, network=args.network,
                             bandwidth=bandwidth, timeout_s=args.timeout,
                             topology_out=args.topology_out, bucket_bytes=bucket_bytes,
                             repeats=args.repeats)
    for _, row in frame.iterrows():
        spread = row["iteration_std_s"] / row["iteration_s"]
        print(f"{row['arch']:<9} {row['gpus']:>2} rank(s)  iteration "
              f"{format_duration(row['iteration_s']):>10} +-{spread:6.1%}  "
              f"{row['throughput_img_s']:9.1f} samples/s  speedup {row['speedup']:5.2f}  "
              f"compute {format_duration(row['compute_s'])} (1 rank alone "
              f"{format_duration(row['compute_1rank_s'])}), comm "
              f"{format_duration(row['comm_s'])}")
    if args.output:
        print(f"wrote {write_training_csv(frame, args.output)}", file=sys.stderr)
    if args.topology_out:
        print(f"wrote {args.topology_out}", file=sys.stderr)
    return 0


def _image_size(text: str) -> tuple[int, int]:
    parts = text.lower().split("x")
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise ConfigError(f"--size expects WIDTHxHEIGHT in pixels (e.g. 500x375), got {text!r}")
    return int(parts[0]), int(parts[1])


def cmd_input(args) -> int:
    from .input_pipeline import (available_cpus, load_images, measure_input_pipeline,
                                 suggested_row, synthetic_jpegs, write_input_csv)

    workers = (_rank_counts_named(args.workers, "--workers") if args.workers
               else sorted({1, available_cpus()}))
    _positive(args.limit, "--limit")
    if args.images and args.synthetic is not None:
        raise ConfigError("give --images DIR or --synthetic N, not both")
    if args.images:
        images = load_images(args.images, limit=args.limit)
    else:
        width, height = _image_size(args.size)
        images = synthetic_jpegs(args.synthetic if args.synthetic is not None else 64,
                                 width, height, quality=args.quality, seed=args.seed)
    frame = measure_input_pipeline(images, args.pipeline, workers, samples=args.samples,
                                   seed=args.seed, timeout_s=args.timeout)
    first = frame.iloc[0]
    print(f"{args.pipeline} on {first['images']}: mean {first['mean_image_bytes'] / 1e3:.0f} kB, "
          f"{first['mean_width_px']:.0f}x{first['mean_height_px']:.0f} px; "
          f"{first['cpus']} CPUs ({first['cpu_model']})")
    for _, row in frame.iterrows():
        print(f"  {row['workers']:>3} worker(s)  {row['samples_per_s']:9.1f} samples/s  "
              f"{format_duration(row['cpu_s_per_sample']):>10} CPU per sample")
    best = suggested_row(frame)
    print(f"simulate with: clustersim train ... --decode-per-sample "
          f"{format_duration(best['cpu_s_per_sample']).replace(' ', '')} --host-cores "
          f"{best['cpus']}")
    if args.output:
        print(f"wrote {write_input_csv(frame, args.output)}", file=sys.stderr)
    return 0


def add_measure_parser(subparsers) -> None:
    """Add ``measure kernels``, ``collectives``, ``training`` and ``input`` to the
    ``clustersim`` subparsers."""
    m = subparsers.add_parser("measure", help="measure this machine for real: per-layer "
                                              "compute, collectives, training steps (these "
                                              "need PyTorch) and the input pipeline")
    sub = m.add_subparsers(dest="measure_command", required=True, parser_class=type(m))

    k = sub.add_parser("kernels", help="per-layer forward/backward times of a model -> CSV")
    k.add_argument("--model", required=True,
                   help="alexnet, vgg16, resnet50, resnet101 or resnet152")
    k.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    k.add_argument("--batch", type=int, default=8, help="samples per forward (default 8)")
    k.add_argument("--iterations", type=int, default=20,
                   help="timed runs per layer and phase (default 20)")
    k.add_argument("--warmup", type=int, default=3, help="untimed runs first (default 3)")
    k.add_argument("--threads", type=int, default=None,
                   help="intra-op CPU threads (default: torch's current count)")
    k.add_argument("-o", "--output", required=True, help="per-layer CSV to write")
    k.add_argument("--llm", action="store_true",
                   help="--model is an LLM (clustersim llm's registry): time the kernels of "
                        "one step of the layout below and write the op,shape,time_s table "
                        "that clustersim llm --kernels reads (--batch: the micro-batch)")
    k.add_argument("--tp", type=int, default=1, help="--llm: tensor parallel degree")
    k.add_argument("--cp", type=int, default=1, help="--llm: context parallel degree")
    k.add_argument("--ep", type=int, default=1, help="--llm: expert parallel degree")
    k.add_argument("--sequence-parallel", action="store_true", help="--llm")
    k.add_argument("--recompute", default="none", choices=("none", "selective", "full"),
                   help="--llm")
    k.add_argument("--precision", default="bf16", choices=("bf16", "fp16", "fp8"),
                   help="--llm")
    k.add_argument("--gpu", default="h100-sxm5-80gb",
                   help="--llm: the device preset the cost model plans for (default "
                        "h100-sxm5-80gb); the kernels run on --device")
    k.add_argument("--limit", type=int, default=None,
                   help="--llm: time only the first N distinct kernels")
    k.set_defaults(func=cmd_kernels)

    c = sub.add_parser("collectives", help="all-reduce timings with torch.distributed -> CSV")
    c.add_argument("--network", choices=["loopback", "shaped"], default="loopback",
                   help="loopback, or shaped: one network namespace per rank on a tc-shaped "
                        "bridge (root)")
    c.add_argument("--ranks", type=int, default=4,
                   help="worker ranks (ps adds one server process)")
    c.add_argument("--bandwidth", default=None,
                   help="shaped link rate per direction, e.g. 1Gbps (default 1Gbps)")
    c.add_argument("--sizes", default="1MiB,4MiB,16MiB", help="comma-separated sizes")
    c.add_argument("--algorithms", default="library,ring,tree,ps",
                   help="comma-separated: library (gloo/nccl all_reduce), ring, tree, ps")
    c.add_argument("--iterations", type=int, default=10, help="timed iterations (default 10)")
    c.add_argument("--warmup", type=int, default=2, help="untimed iterations (default 2)")
    c.add_argument("--device", default="cpu", help="cpu (gloo) or cuda (nccl)")
    c.add_argument("--backend", default=None, help="torch.distributed backend override")
    c.add_argument("--timeout", type=float, default=None,
                   help="wall-clock limit in seconds (default: from sizes and bandwidth)")
    c.add_argument("-o", "--output", default=None, help="measurement CSV to write")
    c.add_argument("--topology-out", default=None,
                   help="shaped only: write the built network as a topology YAML")
    c.set_defaults(func=cmd_collectives)

    t = sub.add_parser("training", help="real data-parallel training steps (DDP, parameter "
                                        "server) with torch.distributed -> training CSV")
    t.add_argument("--model", default="small_cnn", help="small_cnn (the default) or mlp")
    t.add_argument("--ranks", default="1,2,4", help="comma-separated worker counts")
    t.add_argument("--aggregation", default="ddp,ps", help="comma-separated: ddp, ps")
    t.add_argument("--network", choices=["loopback", "shaped"], default="loopback",
                   help="loopback, or shaped: one network namespace per process on a "
                        "tc-shaped bridge (root)")
    t.add_argument("--bandwidth", default=None,
                   help="shaped link rate per direction, e.g. 200Mbps (default 1Gbps)")
    t.add_argument("--batch-per-rank", type=int, default=32,
                   help="samples per rank per step (default 32)")
    t.add_argument("--iterations", type=int, default=10, help="timed steps (default 10)")
    t.add_argument("--warmup", type=int, default=2, help="untimed steps first (default 2)")
    t.add_argument("--threads", type=int, default=1,
                   help="torch compute threads per rank (default 1)")
    t.add_argument("--bucket", default="25MiB",
                   help="DDP gradient bucket cap, e.g. 25MiB (DDP's default)")
    t.add_argument("--repeats", type=int, default=1,
                   help="runs of every configuration with fresh processes, timings pooled "
                        "(default 1)")
    t.add_argument("--timeout", type=float, default=600.0,
                   help="wall-clock limit of the whole measurement, seconds (default 600)")
    t.add_argument("-o", "--output", default=None, help="training CSV to write")
    t.add_argument("--topology-out", default=None,
                   help="shaped only: write the built network as a topology YAML")
    t.set_defaults(func=cmd_training)

    from .input_pipeline import PIPELINES

    i = sub.add_parser("input", help="the host's input pipeline: CPU-seconds per sample "
                                     "(decode, crop, flip, normalise) -> CSV")
    i.add_argument("--images", default=None, metavar="DIR",
                   help="a directory of your own .jpg/.jpeg/.png images (read recursively)")
    i.add_argument("--limit", type=int, default=256,
                   help="--images: at most this many files, in path order (default 256)")
    i.add_argument("--synthetic", type=int, default=None, metavar="N",
                   help="N synthetic JPEGs instead (default when no --images: 64)")
    i.add_argument("--size", default="500x375", metavar="WxH",
                   help="--synthetic: image size in pixels (default 500x375)")
    i.add_argument("--quality", type=int, default=90,
                   help="--synthetic: JPEG quality 1-95 (default 90)")
    i.add_argument("--pipeline", default="imagenet-train",
                   help=f"one of {', '.join(PIPELINES)} (default imagenet-train)")
    i.add_argument("--workers", default=None,
                   help="comma-separated worker-process counts (default: 1 and this "
                        "process's CPU count)")
    i.add_argument("--samples", type=int, default=256,
                   help="timed samples per worker count (default 256)")
    i.add_argument("--seed", type=int, default=0, help="seed of every random choice (default 0)")
    i.add_argument("--timeout", type=float, default=600.0,
                   help="wall-clock limit of each worker count's run, seconds (default 600)")
    i.add_argument("-o", "--output", default=None, help="CSV to write")
    i.set_defaults(func=cmd_input)
