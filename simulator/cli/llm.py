"""``clustersim llm``: one training step of a hybrid-parallel transformer on a topology.

Prints the step's row (time, tokens/s, TFLOP/s per GPU, MFU) and where the critical rank's step
went (compute, exposed TP/CP/EP/PP/DP communication, bubble, optimizer) as tables; ``-o DIR``
writes ``step.csv``, ``breakdown.csv`` (per simulated rank), ``traffic.csv`` and ``links.csv``;
``--trace FILE`` a Chrome trace with one track per rank and stream. A step of many
micro-batches is extended from three short steps once they prove a steady state
(:mod:`simulator.workload.llm.steady`, said in a note); ``--every-micro-batch`` (or ``--trace``)
simulates all of them; ``--steady-tolerance`` extends a step that is periodic only to that
relative tolerance (the note then says how far the step time may be off).

``clustersim llm --search``: the layout search (:mod:`simulator.workload.llm.search`): every
layout that fits memory, simulated fastest-bound first on local processes (``--workers``) or
Dask (``--scheduler``), pruned by a compute-only lower bound; prints the top ``--top`` layouts
and the counts, ``-o DIR`` writes ``search.csv`` (as rows finish; ``--resume`` skips rows
already there) and ``search.png``. ``--tp``, ``--cp``, ``--pp``, ``--virtual-stages``,
``--micro-batch`` (comma lists) and ``--recompute`` restrict the search to the values given.
"""

from __future__ import annotations

import json

from ..errors import ConfigError
from ..workload.llm.layout import DISPATCHERS, FP8_RECIPES, MAIN_GRADS

PIPELINES = ("1f1b", "gpipe", "interleaved")


def add_llm_parser(subparsers) -> None:
    p = subparsers.add_parser("llm", help="simulate one training step of a hybrid-parallel "
                                          "transformer (tp x cp x ep x pp x dp)")
    p.add_argument("--model", required=True, help="registered model name (e.g. gpt3-175b)")
    p.add_argument("--topology", required=True, help="preset name, builder name or YAML file")
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="override a topology builder parameter (repeatable), e.g. nodes=128")
    for name in ("tp", "cp", "ep", "pp", "dp"):
        p.add_argument(f"--{name}", default=None, metavar="N",
                       help=f"{name} degree (default 1; with --search a comma list to try)")
    p.add_argument("--expert-tp", type=int, default=None, metavar="N",
                   help="tensor parallelism of the expert layers (Megatron-Core's "
                        "expert_tensor_parallel_size; default tp). 1 with tp > 1 folds the "
                        "expert groups across tensor-parallel ranks")
    p.add_argument("--dispatcher", default=None, choices=DISPATCHERS,
                   help="MoE token dispatcher: alltoall (Megatron-Core's default, NCCL "
                        "all-to-all of every token-expert copy), hybridep (the flex "
                        "dispatcher's Hybrid-EP: a token crosses to another machine once and "
                        "is forwarded over NVLink) or deepep (DeepEP's normal kernels: the "
                        "same, without Hybrid-EP's buffer copy); default alltoall")
    p.add_argument("--ep-overlap", action="store_true",
                   help="hide the expert all-to-alls behind other compute (Megatron-Core's "
                        "overlap_moe_expert_parallel_comm, Megatron-Bridge's moe_a2a_overlap)")
    p.add_argument("--virtual-stages", default=None, metavar="N",
                   help="model chunks per pipeline stage (interleaved schedule)")
    p.add_argument("--pp-layout", default=None, metavar="LAYOUT",
                   help="decoder layers of each pipeline chunk as Megatron-Core's "
                        "pipeline_model_parallel_layout, e.g. 'Et*4|(t*4|)*14tmL' (E embedding, "
                        "t layer, m multi-token prediction, L loss, | between chunks; chunk k "
                        "on stage k %% pp); default: even chunks")
    p.add_argument("--micro-batch", default=None, metavar="N",
                   help="micro-batch size (default 1; with --search a list, default 1,2,4)")
    p.add_argument("--global-batch", type=int, required=True)
    p.add_argument("--pipeline", default=None, choices=PIPELINES,
                   help="pipeline schedule (default 1f1b, interleaved with --virtual-stages > 1)")
    p.add_argument("--sequence-parallel", action="store_true")
    p.add_argument("--zero-stage", type=int, default=0, choices=(0, 1, 2, 3))
    p.add_argument("--fsdp", action="store_true")
    p.add_argument("--distributed-optimizer", action="store_true")
    p.add_argument("--recompute", default=None,
                   help="none, selective or full (default none; with --search a comma list, "
                        "default all three)")
    p.add_argument("--recompute-modules", default=None, metavar="LIST",
                   help="what --recompute selective recomputes (Megatron-Core's "
                        "recompute_modules), a comma list of core_attn, mla_up_proj, mlp, "
                        "moe_act, layernorm, shared_experts, moe (default core_attn)")
    p.add_argument("--precision", default="bf16", choices=("bf16", "fp16", "fp8"))
    p.add_argument("--fp8-recipe", default=None, choices=FP8_RECIPES,
                   help="how fp8 operands are scaled (Megatron-Core's fp8_recipe): delayed "
                        "(its default), tensorwise (per-tensor current scaling), blockwise, "
                        "mxfp8 (Blackwell only); needs --precision fp8")
    p.add_argument("--main-grads", default=None, choices=MAIN_GRADS,
                   help="precision the gradients are accumulated and reduced over data "
                        "parallelism in: auto (Megatron's default: fp32 for bf16, fp16 for "
                        "fp16), fp32, bf16 (grad_reduce_in_fp32 = False, as NVIDIA's MoE "
                        "recipes set it) or fp16")
    p.add_argument("--bucket-size", default=None, metavar="SIZE",
                   help="gradient bucket size (e.g. 160MB; default Megatron-Core's max(40M, 1M x dp) "
                        "parameters of fp32 gradients)")
    p.add_argument("--order", default="tp-cp-ep-dp-pp", help="rank order, fastest first")
    p.add_argument("--library", default="default",
                   help="collective library: default (nccl on GPU clusters), nccl or ideal")
    p.add_argument("--trace", default=None, metavar="FILE", help="write a Chrome trace")
    p.add_argument("--kernels", default=None, metavar="CSV",
                   help="measured kernel times (op,shape,time_s, as `clustersim measure kernels "
                        "--llm` writes them) instead of the roofline; a kernel missing from it "
                        "is an error unless --kernels-fallback")
    p.add_argument("--kernels-fallback", action="store_true",
                   help="kernels missing from --kernels take the roofline time")
    p.add_argument("--every-micro-batch", action="store_true",
                   help="simulate every micro-batch of the step (default: a step of many is "
                        "extended from three short ones once they prove a steady state; the "
                        "same numbers to 1e-9, several times faster)")
    p.add_argument("--steady-tolerance", type=float, default=None, metavar="REL",
                   help="extend a step whose increments per period agree only to REL of its "
                        "span (1e-9, exact, to 1e-3; default exact): for steps with no exact "
                        "period, such as overlapped expert all-to-alls; the note says how far "
                        "the step time may then be off")
    p.add_argument("-o", "--output", default=None, metavar="DIR",
                   help="write step.csv, breakdown.csv, traffic.csv, links.csv there "
                        "(--search: search.csv and search.png)")
    s = p.add_argument_group("layout search")
    s.add_argument("--search", action="store_true",
                   help="search the layouts that fit memory and rank them by step time")
    s.add_argument("--gpus", default=None, metavar="LIST",
                   help="cluster sizes to search (e.g. 256,512,1024; built with nodes = GPUs / "
                        "GPUs per machine); default: the topology's")
    s.add_argument("--top", type=int, default=10, metavar="K", help="layouts shown (default 10)")
    s.add_argument("--optimizers", default="none,distopt,zero3", metavar="LIST",
                   help="optimizer-state sharding to try: none, distopt, zero1, zero2, zero3 "
                        "(default none,distopt,zero3)")
    s.add_argument("--workers", type=int, default=None,
                   help="local worker processes (default: one per CPU)")
    s.add_argument("--scheduler", default=None, metavar="ADDR",
                   help="run on Dask: tcp://HOST:PORT, or local for a LocalCluster")
    s.add_argument("--resume", action="store_true",
                   help="keep the rows of DIR/search.csv and simulate only the others")
    s.add_argument("--no-prune", action="store_true",
                   help="simulate every layout that fits (exhaustive)")
    s.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    s.add_argument("--time-limit", type=float, default=None, metavar="S",
                   help="start no layout after S seconds (the rest is reported as unresolved; "
                        "-o DIR --resume continues)")
    p.set_defaults(func=cmd_llm)


def _ints(text, flag: str, single: bool = False):
    """A comma list of positive integers (one with ``single``); None stays None."""
    if text is None:
        return None
    out = []
    for part in str(text).split(","):
        part = part.strip()
        try:
            value = int(part)
        except ValueError:
            raise ConfigError(f"{flag}: expected {'an integer' if single else 'integers'} "
                              f"(comma-separated), got {text!r}") from None
        if value < 1:
            raise ConfigError(f"{flag} must be >= 1, got {value}")
        out.append(value)
    if single and len(out) != 1:
        raise ConfigError(f"{flag}: one value without --search, got {text!r}")
    return tuple(out)


def layout_from_args(args):
    from ..units import parse_size
    from ..workload.llm.layout import Layout

    v = {}
    for name in ("tp", "cp", "ep", "pp", "dp", "virtual_stages", "micro_batch"):
        got = _ints(getattr(args, name), f"--{name.replace('_', '-')}", single=True)
        v[name] = got[0] if got else 1
    if args.global_batch < 1:
        raise ConfigError(f"--global-batch must be >= 1, got {args.global_batch}")
    recompute = args.recompute or "none"
    if recompute not in ("none", "selective", "full"):
        raise ConfigError(f"--recompute: expected none, selective or full, got {recompute!r}")
    pipeline = args.pipeline or ("interleaved" if v["virtual_stages"] > 1 else "1f1b")
    extra = {}
    if args.bucket_size is not None:
        extra["bucket_bytes"] = int(parse_size(args.bucket_size, what="--bucket-size"))
    if args.global_batch % (v["dp"] * v["micro_batch"]):
        raise ConfigError(f"--global-batch {args.global_batch} is not a multiple of dp "
                          f"{v['dp']} x micro-batch {v['micro_batch']}")
    if getattr(args, "recompute_modules", None) is not None:
        from ..workload.llm.layout import parse_recompute_modules

        if recompute != "selective":
            raise ConfigError("--recompute-modules goes with --recompute selective")
        extra["recompute_modules"] = parse_recompute_modules(args.recompute_modules)
    if getattr(args, "pp_layout", None) is not None:
        from ..workload.llm.layout import parse_pipeline_layout
        from ..workload.llm.registry import get_llm_model

        model = get_llm_model(args.model)
        extra["pipeline_layout"] = parse_pipeline_layout(
            args.pp_layout, v["pp"], v["virtual_stages"], model.layers, model.mtp_layers)
    return Layout(**v, global_batch=args.global_batch, pipeline=pipeline,
                  sequence_parallel=args.sequence_parallel, zero_stage=args.zero_stage,
                  fsdp=args.fsdp, distributed_optimizer=args.distributed_optimizer,
                  recompute=recompute, precision=args.precision, order=args.order,
                  expert_tp=getattr(args, "expert_tp", None),
                  dispatcher=getattr(args, "dispatcher", None) or "alltoall",
                  ep_overlap=bool(getattr(args, "ep_overlap", False)),
                  fp8_recipe=getattr(args, "fp8_recipe", None) or "delayed",
                  main_grads=getattr(args, "main_grads", None) or "auto", **extra)


def format_row(row: dict) -> str:
    keys = [k for k in row if k not in ("busiest_link",)]
    width = max(len(k) for k in row)
    lines = []
    for k in list(keys) + ["busiest_link"]:
        v = row[k]
        text = f"{v:.6g}" if isinstance(v, float) else str(v)
        lines.append(f"{k:<{width}}  {text}")
    return "\n".join(lines)


#: Flags of one simulated layout that ``--search`` refuses, with why.
_ONE_LAYOUT_ONLY = (
    ("every_micro_batch", "is for one step; the search extends each layout's steady state"),
    ("steady_tolerance", "is for one step; the search extends each layout's steady state "
                         "exactly"),
    ("recompute_modules", "is for one layout; the search tries none, selective (the attention "
                          "core) and full"),
    ("pp_layout", "is for one layout; the search splits the layers evenly"),
    ("dispatcher", "is not searched: the search keeps Megatron's default (alltoall)"),
    ("fp8_recipe", "is not searched: the search keeps Megatron's default (delayed)"),
    ("expert_tp", "is not searched: the search keeps Megatron's default (expert_tp = tp)"),
)


def cmd_search(args) -> int:
    from ..workload.llm.search import SearchSpace, format_search, plot_search, search_layouts
    from .args import _params

    for name in ("dp", "ep"):
        if getattr(args, name) is not None:
            raise ConfigError(f"--{name} is not searched over a list: dp is GPUs / (tp x cp x pp)"
                              f" and ep is tried for MoE models; leave --{name} out with --search")
    for attr, why in _ONE_LAYOUT_ONLY:
        value = getattr(args, attr, None)
        if value is not None and value is not False:
            raise ConfigError(f"--{attr.replace('_', '-')} {why} (leave it out with --search)")
    recompute = tuple(r.strip() for r in args.recompute.split(",")) if args.recompute else None
    space_args = {"optimizers": tuple(o.strip() for o in args.optimizers.split(",")),
                  "precision": args.precision}
    if recompute:
        space_args["recompute"] = recompute
    for name in ("tp", "cp", "pp", "virtual_stages", "micro_batch"):
        got = _ints(getattr(args, name), f"--{name.replace('_', '-')}")
        if got:
            space_args[name] = got
    space = SearchSpace(**space_args)
    gpus = list(_ints(args.gpus, "--gpus")) if args.gpus else None
    if args.workers is not None and args.workers < 1:
        raise ConfigError(f"--workers must be >= 1, got {args.workers}")
    result = search_layouts(args.model, args.topology, _params(args.param),
                            global_batch=args.global_batch, gpus=gpus, space=space,
                            top=args.top, out_dir=args.output, resume=args.resume,
                            workers=args.workers, scheduler=args.scheduler,
                            progress=not args.no_progress, library=args.library,
                            prune=not args.no_prune, time_limit=args.time_limit)
    print(format_search(result))
    if args.output and not result.rows.empty:
        from pathlib import Path

        for path in plot_search(result, Path(args.output) / "search"):
            print(f"wrote {path}")
        for path in result.files:
            print(f"wrote {path}")
    return 0


def steady_tolerance(args) -> dict:
    """``{"steady_tolerance": value}`` from ``--steady-tolerance`` (checked), or ``{}``."""
    value = getattr(args, "steady_tolerance", None)
    if value is None:
        return {}
    for flag, given in (("--every-micro-batch", getattr(args, "every_micro_batch", False)),
                        ("--trace", getattr(args, "trace", None) is not None)):
        if given:
            raise ConfigError(f"--steady-tolerance extends a step from its steady state; "
                              f"{flag} simulates every micro-batch: give one of them")
    from ..workload.llm.steady import check_tolerance

    return {"steady_tolerance": check_tolerance(value, "--steady-tolerance")}


def cmd_llm(args) -> int:
    if args.search:
        return cmd_search(args)
    if args.resume or args.gpus or args.scheduler:
        raise ConfigError("--resume, --gpus and --scheduler go with --search")
    from ..report.output import write_text
    from ..topology import load_topology
    from ..workload.llm.step import simulate_step
    from .args import _params

    layout = layout_from_args(args)
    graph = load_topology(args.topology, _params(args.param))
    kernels = None
    if args.kernels:
        from ..workload.llm.compute import KernelTable

        kernels = KernelTable.from_csv(args.kernels, fallback=args.kernels_fallback)
    result = simulate_step(graph, args.model, layout, library=args.library,
                           record_trace=args.trace is not None, kernels=kernels,
                           extrapolate=not args.every_micro_batch,
                           **steady_tolerance(args))
    print(format_row(result.row))
    print()
    print(result.summary().to_string(index=False, float_format=lambda x: f"{x:.6g}"))
    print()
    print("traffic per group (bytes):")
    print(result.traffic.to_string(index=False))
    for note in result.notes:
        print(f"note: {note}")
    if args.trace:
        write_text(args.trace, json.dumps(result.trace))
    if args.output:
        from pathlib import Path

        import pandas as pd

        out = Path(args.output)
        out.mkdir(parents=True, exist_ok=True)
        write_text(out / "step.csv", pd.DataFrame([result.row]).to_csv(index=False))
        write_text(out / "breakdown.csv", result.breakdown.to_csv(index=False))
        write_text(out / "traffic.csv", result.traffic.to_csv(index=False))
        write_text(out / "links.csv", result.links.to_csv(index=False))
    return 0
