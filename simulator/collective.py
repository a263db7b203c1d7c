"""Run one collective on a topology and summarise it the way nccl-tests does.

This is the layer the CLI, scenarios and notebooks call: it places ranks on the topology's
endpoints, builds the schedule, runs it on the engine, and returns one result row.

Result columns (one row per collective, algorithm, size):
``collective, algorithm, gpus, size_bytes, slices, time_s, time_us, algbw_GBps, busbw_GBps,
bottleneck_link, bottleneck_utilisation, ps_servers, ps_placement, topology, engine``.

``algbw_GBps`` = size / time and ``busbw_GBps`` = algbw x the nccl-tests bus factor (all-reduce
2(n-1)/n; reduce-scatter, all-gather, all-to-all (n-1)/n; broadcast, reduce 1), GB = 1e9 bytes.

``engine`` says which engine produced the row: ``event`` (the flow-level event engine) or
``fast`` (:mod:`simulator.engine.dispatch`: the same times, computed without events where that is
provably exact). ``run_collective(..., engine="auto")`` uses the fast path when it applies and
the event engine otherwise. With the fast path there are no per-transfer or per-link-timeline
records; ``bottleneck_link`` is still computed from the bytes each link carries over the run.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from .engine.common import FastResult, NotApplicable
from .engine.dispatch import METHOD_NAMES, fast_collective
from .engine.runner import Engine, ScheduleRun
from .errors import ConfigError, unknown_name
from .guard import check_event_run
from .library import Plan, resolve_library
from .records import bottleneck, links_frame
from .schedules import get_algorithm, make_schedule
from .schedules.base import Schedule
from .schedules.registry import estimated_transfers
from .schedules.ring import explicit_orders
from .topology import endpoints, local_ranks, ps_endpoints  # noqa: F401 (local_ranks: re-export)
from .topology.rings import ring_orders

#: Engines ``run_collective`` (and ``clustersim collective --engine``) accepts.
ENGINES = ("event", "fast", "auto") + METHOD_NAMES

RESULT_COLUMNS = ("collective", "algorithm", "gpus", "size_bytes", "slices", "time_s", "time_us",
                  "algbw_GBps", "busbw_GBps", "bottleneck_link", "bottleneck_utilisation",
                  "ps_servers", "ps_placement", "topology", "engine", "library", "protocol",
                  "channels")


def bus_factor(collective: str, ranks: int) -> float:
    """nccl-tests bus bandwidth factor (busbw = algbw x factor)."""
    if ranks <= 1:
        return 0.0 if collective != "broadcast" and collective != "reduce" else 1.0
    if collective == "allreduce":
        return 2.0 * (ranks - 1) / ranks
    if collective in ("reduce_scatter", "allgather", "alltoall"):
        return (ranks - 1) / ranks
    return 1.0


@dataclass
class CollectiveRun:
    """Everything one collective simulation produced.

    With the fast path (``row["engine"] == "fast"``) ``run`` and ``engine`` are None,
    ``schedule`` is None when the fast path never built it (the symmetric ring), and ``fast``
    holds its :class:`~simulator.engine.common.FastResult`.
    """

    row: dict
    run: ScheduleRun | None
    engine: Engine | None
    schedule: Schedule | None
    fast: FastResult | None = None
    plan: Plan | None = None
    declined: tuple = ()       # the fast methods that did not answer, and why (engine auto)

    @property
    def method(self) -> str:
        """What timed it: a fast method's name, or ``event``."""
        return self.fast.method if self.fast is not None and self.fast.applicable else "event"

    def why_not_others(self) -> tuple:
        """The methods tried or skipped before the one that answered, with their reasons."""
        return self.fast.declined if self.fast is not None and self.fast.applicable \
            else self.declined


def nics_per_machine(graph: nx.DiGraph, gpus: int) -> int:
    """NICs of the first worker's machine, when the first ``gpus`` endpoints span machines."""
    eps = endpoints(graph)[:gpus]
    machines = {graph.nodes[e].get("node_index", 0) for e in eps}
    if len(machines) < 2:
        return 0
    first = graph.nodes[eps[0]].get("node_index", 0)
    return sum(1 for _n, a in graph.nodes(data=True)
               if a.get("kind") == "nic" and a.get("node_index") == first)


def default_options(graph: nx.DiGraph, algorithm: str, gpus: int, options: dict) -> dict:
    """Fill the options an algorithm derives from the topology, unless the user set them.

    ``local_ranks`` (ranks per machine) for hierarchical algorithms and multi-channel rings;
    ``channels`` for the ring across machines: one ring per NIC of a machine, as NCCL opens one
    channel per NIC so that every rail carries traffic.

    ``orders`` for the ring on machines whose GPUs are joined by point-to-point links (DGX-1's
    NVLink cube-mesh): the topology-aware ring channels of
    :func:`simulator.topology.rings.ring_orders`, with ``channels`` their count. Not when the
    user set ``channels`` or ``orders`` (``channels=1`` keeps the textbook single ring in index
    order), and never on switch-joined or single-GPU machines, whose rings stay in index order.
    """
    opts = dict(options)
    accepted = get_algorithm(algorithm).options()
    if "local_ranks" in accepted and opts.get("local_ranks") is None:
        opts["local_ranks"] = local_ranks(graph, gpus)
    if "orders" in accepted and opts.get("orders") is not None:
        opts.setdefault("channels", len(explicit_orders(opts["orders"], gpus)))
    elif "orders" in accepted and "channels" not in opts:
        plan = ring_orders(graph, gpus)
        if plan.orders is not None:
            opts.update(orders=plan.orders, channels=plan.channels)
    if "channels" in accepted and "channels" not in opts and "segment_bytes" not in accepted:
        opts["channels"] = max(1, nics_per_machine(graph, gpus))
    return opts


def sharp_switch(graph: nx.DiGraph) -> str:
    """The switch that reduces in-network (``collnet``): the first spine of a leaf-spine fabric,
    else the (first) switch of the fabric."""
    switches = sorted(n for n, kind in graph.nodes(data="kind") if kind == "switch")
    spines = [n for n in switches if n.startswith("spine")]
    if not switches:
        raise ConfigError(f"collnet needs a fabric switch to reduce in; topology "
                          f"{graph.graph.get('name', '')!r} has none")
    return (spines or switches)[0]


def nvswitches(graph: nx.DiGraph, gpus: int) -> list[str]:
    """The NVSwitch of every machine the first ``gpus`` endpoints span, in machine order
    (the helper ranks of ``nvls_tree``)."""
    eps = endpoints(graph)[:gpus]
    machines = list(dict.fromkeys(graph.nodes[e].get("node_index", 0) for e in eps))
    found = {a.get("node_index"): n for n, a in graph.nodes(data=True)
             if a.get("kind") == "nvswitch"}
    missing = [m for m in machines if m not in found]
    if missing:
        raise ConfigError(f"nvls_tree reduces in NVSwitches; machine {missing[0]} of topology "
                          f"{graph.graph.get('name', '')!r} has none")
    return [found[m] for m in machines]


def helper_ranks(graph: nx.DiGraph, plan, algorithm: str, gpus: int) -> list[str]:
    """The nodes a planned call's schedule runs on after its ``gpus`` GPUs: the library
    plan's own helpers, else the switch that reduces a ``collnet`` call, else the NVSwitches
    of an ``nvls_tree`` call (one per machine); none for the other algorithms."""
    if plan is not None and plan.helper_nodes:
        return list(plan.helper_nodes)
    if algorithm == "collnet":
        return [sharp_switch(graph)]
    if algorithm == "nvls_tree":
        return nvswitches(graph, gpus)
    return []


def missing_hardware(graph: nx.DiGraph, algorithm: str) -> str:
    """Why ``algorithm`` cannot run on ``graph`` for want of hardware, or ``""``."""
    kinds = {kind for _n, kind in graph.nodes(data="kind")}
    if algorithm == "nvls_tree" and "nvswitch" not in kinds:
        return "no NVSwitch"
    if algorithm == "collnet" and "switch" not in kinds:
        return "no fabric switch"
    return ""


def free_hosts(graph: nx.DiGraph, gpus: int | None) -> int:
    """Hosts available for dedicated parameter servers beside ``gpus`` workers."""
    eps = endpoints(graph)
    n = len(eps) if gpus is None else gpus
    return len(ps_endpoints(graph) or eps[n:])


def placement(graph: nx.DiGraph, gpus: int, servers: int = 0, dedicated: bool = True) -> list[str]:
    """Topology nodes for ``gpus`` worker ranks followed by ``servers`` dedicated PS ranks.

    Dedicated servers are the topology's PS hosts when it has them (``gpu_cluster`` with
    ``ps_hosts``), else the endpoints after the workers (``star``, ``fat_tree``).
    """
    eps = endpoints(graph)
    if gpus > len(eps):
        raise ConfigError(f"--gpus {gpus} is more than the {len(eps)} endpoints of topology "
                          f"{graph.graph.get('name', '')!r}")
    nodes = list(eps[:gpus])
    if servers and dedicated:
        extra = ps_endpoints(graph) or eps[gpus:]
        if servers > len(extra):
            raise ConfigError(
                f"{servers} dedicated PS server(s) need {servers} free hosts, topology "
                f"{graph.graph.get('name', '')!r} has {len(extra)} after the {gpus} workers "
                f"(star/fat_tree: set hosts >= gpus + servers; gpu_cluster: set ps_hosts)")
        nodes += list(extra[:servers])
    return nodes


_NUMBA_NOTICE = [False]


def default_engine() -> str:
    """``auto`` (the exact fast methods where they apply, else the event engine). Without
    numba the compiled methods decline and more cases fall back to the slower event engine;
    that is said once per process on stderr."""
    from .engine.common import numba_available

    if not numba_available() and not _NUMBA_NOTICE[0]:
        import sys

        _NUMBA_NOTICE[0] = True
        print("clustersim: numba cannot be imported; the compiled fast methods are off and "
              "more collectives run on the slower event engine (pip install numba)",
              file=sys.stderr)
    return "auto"


def run_collective(graph: nx.DiGraph, collective: str, algorithm: str, size_bytes: int, *,
                   gpus: int | None = None, slices: int = 1, reduce_compute: bool = True,
                   record_rates: bool = False, sim_engine: Engine | None = None,
                   engine: str = "event", library=None, protocol: str | None = None,
                   launch=None, exclude: tuple = (), **options) -> CollectiveRun:
    """Simulate one collective alone on ``graph`` and return its result row and records.

    ``options`` go to the algorithm (e.g. ``servers``, ``placement``, ``shards``, ``phased``
    for ``ps``; ``local_ranks``, ``inner``, ``outer`` for ``hierarchical``; ``root``).

    ``library``: the collective library between the algorithm and the wires
    (:mod:`simulator.library`): ``"ideal"`` (the default here: bare wires), ``"nccl"``, a
    library object, or ``"default"`` (by topology: ``nccl`` on GPU clusters). The library turns
    the call into a :class:`~simulator.library.base.Plan` (schedule, costed topology, fixed and
    host times); ``protocol`` forces its protocol, ``launch`` says how calls are issued,
    ``exclude`` names library algorithms its tuner may not choose (``("nvls",)``).
    ``algorithm="auto"`` lets the library choose (NCCL's tuner; for ``ideal``, the fastest
    simulated candidate).

    ``engine``: ``"event"`` (default) runs the event engine (on ``sim_engine`` if given, where
    other traffic may share the links); ``"fast"`` the fast path of
    :mod:`simulator.engine.dispatch`, raising :class:`~simulator.engine.common.NotApplicable` with
    the reason when it cannot prove its answer equal to the event engine's; ``"auto"`` the fast
    path when it applies, else the event engine; a method's name (``ring``, ``tree-pipeline``,
    ``aligned-steps``, ``compiled``, ``step-sync``) forces that method, as ``"fast"`` does the
    fast path. The row's ``engine`` column says which ran.
    Every engine runs the plan's schedule on the plan's graph: the library's costs are data.
    """
    if engine not in ENGINES:
        raise unknown_name("engine", engine, ENGINES)
    from .guard import check_gpus

    n = len(endpoints(graph)) if gpus is None else check_gpus(graph, gpus)
    lib = resolve_library("ideal" if library is None else library, graph)
    requested = algorithm
    if algorithm == "auto" and lib.name == "ideal":
        from .tuner import choose_algorithm

        algorithm = choose_algorithm(graph, collective, size_bytes, gpus=n,
                                     simulate=run_collective)
    plan = lib.plan(graph, collective, algorithm, size_bytes, n, protocol=protocol,
                    launch=launch, exclude=exclude)
    source_graph, graph = graph, plan.graph
    slices = plan.slices or slices
    if plan.reduce_compute is not None:
        reduce_compute = reduce_compute and plan.reduce_compute
    algorithm = plan.algorithm
    # an option the library's plan sets is the library's (NCCL's chunks, channels, caps):
    # a different value from the user would be dropped silently, so it is an error
    overridden = [k for k in sorted(options)
                  if k in plan.options and options[k] != plan.options[k]]
    if overridden:
        given = ", ".join(f"{k}={options[k]!r}" for k in overridden)
        its = ", ".join(f"{k}={plan.options[k]!r}" for k in overridden)
        raise ConfigError(f"option(s) {given}: the {lib.name} library sets these for "
                          f"{plan.label} ({its}); drop them, or choose them yourself with "
                          "library ideal")
    options = {**options, **plan.options}
    options = default_options(graph, algorithm, n, options)
    servers = int(options.get("servers", 1)) if algorithm == "ps" else 0
    dedicated = options.get("placement", "dedicated") == "dedicated"
    schedule, fast = None, None
    if engine == "event":
        check_event_run(estimated_transfers(algorithm, collective, n, size_bytes, options)
                        * slices, 0)
        schedule = make_schedule(algorithm, collective, n, size_bytes, slices=slices, **options)
    helpers = helper_ranks(graph, plan, algorithm, n)
    nodes = (placement(graph, n) + helpers) if helpers else placement(graph, n, servers,
                                                                       dedicated)
    label = requested if requested != "auto" else f"auto:{plan.label}"
    if engine != "event":
        if sim_engine is not None or record_rates:
            if engine != "auto":
                raise ConfigError("the fast engine runs a collective alone and keeps no link "
                                  "timelines: use engine='event' with sim_engine or "
                                  "record_rates")
        else:
            fast, schedule = fast_collective(graph, collective, algorithm, size_bytes, n, nodes,
                                             slices=slices, reduce_compute=reduce_compute,
                                             options=options,
                                             only=engine if engine in METHOD_NAMES else None)
            if fast.applicable:
                link, util = fast.bottleneck(graph)
                row = _row(source_graph, collective, label, size_bytes, n, slices,
                           plan.total_time_s(fast.time_s), link, util, servers, options,
                           "fast", plan)
                return CollectiveRun(row=row, run=None, engine=None, schedule=schedule,
                                     fast=fast, plan=plan)
            if engine != "auto":
                what = "the fast engine" if engine == "fast" else f"method {engine!r}"
                raise NotApplicable(f"{what} does not apply to {algorithm} {collective} on "
                                    f"{n} ranks: {fast.reason}; use --engine auto or event")
    declined = fast.declined + ("all fast methods: the event engine runs",) \
        if engine == "auto" and fast is not None else ()
    if schedule is None:
        schedule = make_schedule(algorithm, collective, n, size_bytes, slices=slices, **options)
    sim_engine = sim_engine or Engine(graph, reduce_compute=reduce_compute,
                                      record_rates=record_rates)
    run = sim_engine.launch(schedule, nodes, label=f"{algorithm}:{collective}:{size_bytes}")
    sim_engine.run()
    time_s = run.time_s
    link, util = bottleneck(links_frame(sim_engine, time_s))
    row = _row(source_graph, collective, label, size_bytes, n, slices, plan.total_time_s(time_s),
               link, util, servers, options, "event", plan)
    return CollectiveRun(row=row, run=run, engine=sim_engine, schedule=schedule, plan=plan,
                         declined=declined)


def _row(graph, collective, algorithm, size_bytes, n, slices, time_s, link, util, servers,
         options, engine, plan: Plan) -> dict:
    algbw = size_bytes / time_s / 1e9 if time_s > 0 else float("inf")
    return {
        "collective": collective, "algorithm": algorithm, "gpus": n,
        "size_bytes": int(size_bytes), "slices": slices, "time_s": time_s,
        "time_us": time_s * 1e6, "algbw_GBps": algbw,
        "busbw_GBps": algbw * bus_factor(collective, n),
        "bottleneck_link": link, "bottleneck_utilisation": util,
        "ps_servers": servers if algorithm == "ps" else 0,
        "ps_placement": options.get("placement", "dedicated") if algorithm == "ps" else "",
        "topology": graph.graph.get("name", ""), "engine": engine,
        "library": plan.library, "protocol": plan.protocol, "channels": _channels(plan, options),
    }


def _channels(plan: Plan, options: dict) -> int:
    """Channels the call ran on: the library's count, else the schedule's ``channels``."""
    if plan.channels:
        return int(plan.channels)
    return int(options.get("channels") or 1)
