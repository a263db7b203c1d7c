"""A resource guard: refuse, before allocating, what would not fit in memory.

A request is cheap to state and can be ruinous to build: ``--param hosts=10000000000`` asks for
ten billion graph nodes, ``--slices 100000`` a hundred thousand transfers for every one of the
schedule's. Each big allocation is estimated from the request first, and refused with the
estimate, the limit and what to do instead when it exceeds the limit: ``--max-memory`` (any
size, e.g. ``8GiB``), by default half of this machine's RAM.

* :func:`check_topology`: nodes and links from the builder's parameters (a ``networkx`` node
  with its attribute dict takes about 1.5 KB, a directed link about 1 KB);
* :func:`check_schedule`: a schedule's transfers (its columns keep 60 bytes per transfer;
  building peaks near 360), before it is built or sliced;
* :func:`check_event_run`: what the SimPy event engine keeps per transfer (about 570 bytes) and
  per chunk access of its dependency graph;
* :func:`check_gpus` and :func:`check_servers`: a GPU or parameter-server count is checked
  against the built topology before anything is sized by it (``--gpus 1000000000`` on an
  8-GPU machine is one line at once, never a billion-entry list).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os

from .errors import ConfigError, ResourceError
from .units import format_size

#: Bytes per topology node and per directed link of a built graph (networkx dicts and the
#: attribute dicts the builders set), measured on gpu_cluster graphs of 10^4-10^5 nodes.
NODE_BYTES = 1536
LINK_BYTES = 1024
#: Bytes per transfer while a schedule is built or sliced: its ten columns keep 60 (eight int64,
#: an int16 and two bools), and building peaks higher with numpy's temporaries: 348 for the
#: double binary tree over 4,096 ranks, 265 for the ring over 1,024 (tracemalloc peaks).
SCHEDULE_BYTES = 360
#: Bytes the event engine keeps per transfer (flows, timestamps, records): ring all-reduce over
#: 1,024 ranks, 2.1 M transfers, peaks at 1.2 GiB (benchmarks/README.md, bench_scale).
EVENT_BYTES = 570
#: Bytes per chunk access of the event engine's dependency derivation (a packed int64 code, its
#: sort permutation and the CSR it becomes).
ACCESS_BYTES = 32

_limit: int | None = None


@functools.lru_cache(maxsize=1)
def machine_memory_bytes() -> int:
    """This machine's RAM (``/proc/meminfo`` or sysconf), 8 GiB when neither tells; read once
    per process (every check of a run asks, a training run thousands of times)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 << 30


def memory_limit_bytes() -> int:
    """The limit in force: ``--max-memory`` if given, else half of the machine's RAM."""
    return _limit if _limit is not None else machine_memory_bytes() // 2


def set_memory_limit(limit_bytes: int | None) -> None:
    """Set the limit (``None``: back to half of the machine's RAM)."""
    global _limit
    if limit_bytes is not None and limit_bytes <= 0:
        raise ConfigError(f"--max-memory must be positive, got {limit_bytes}")
    _limit = limit_bytes


@contextlib.contextmanager
def memory_limit(limit_bytes: int | None):
    """:func:`set_memory_limit` for the length of a block (a command), then the limit that was
    in force before it, even when the new one is refused."""
    global _limit
    previous = _limit
    try:
        set_memory_limit(limit_bytes)
        yield
    finally:
        _limit = previous


def _int(params: dict, defaults: dict, key: str) -> int:
    value = params.get(key, defaults.get(key))
    try:
        number = int(str(value).strip())
    except (TypeError, ValueError):
        return 0                      # the builder reports the bad value itself
    return max(number, 0)


def topology_size(builder, params: dict) -> tuple[int, int]:
    """Estimated ``(nodes, directed links)`` of ``builder(**params)`` without building it."""
    defaults = {k: p.default for k, p in inspect.signature(builder).parameters.items()}
    name = builder.__name__
    if name == "star":
        hosts = _int(params, defaults, "hosts")
        return hosts + 1, 2 * hosts
    if name == "fat_tree":
        per_leaf, leaves = _int(params, defaults, "hosts_per_leaf"), _int(params, defaults,
                                                                          "leaves")
        spines = _int(params, defaults, "spines")
        return per_leaf * leaves + leaves + spines, 2 * (per_leaf * leaves + leaves * spines)
    if name == "gpu_cluster":
        nodes, gpus = _int(params, defaults, "nodes"), _int(params, defaults, "gpus_per_node")
        switches, nics = _int(params, defaults, "pcie_switches"), _int(params, defaults,
                                                                      "nics_per_node")
        per_machine = gpus + switches + nics + 3
        links = 2 * (gpus * 3 + switches + nics * 2 + 1)
        return nodes * per_machine + 1, nodes * links
    return 0, 0


def refuse_over_limit(what: str, estimate_bytes: int, instead: str) -> None:
    """Raise :class:`ResourceError` when ``estimate_bytes`` exceeds :func:`memory_limit_bytes`:
    ``what`` would take about that much, and ``instead`` says what to ask for instead."""
    limit = memory_limit_bytes()
    if estimate_bytes > limit:
        raise ResourceError(
            f"{what} would take about {format_size(estimate_bytes)} of memory, more than the "
            f"limit of {format_size(limit)} (--max-memory, default half of this machine's "
            f"RAM); {instead}, or raise --max-memory")


def check_topology(builder, params: dict) -> None:
    """Refuse a topology whose estimated memory exceeds :func:`memory_limit_bytes`."""
    nodes, links = topology_size(builder, params)
    refuse_over_limit(f"topology {builder.__name__} with {nodes:,} nodes and {links:,} links",
                      nodes * NODE_BYTES + links * LINK_BYTES,
                      "ask for fewer hosts, nodes or GPUs")


def check_schedule(algorithm: str, collective: str, ranks: int, transfers: int) -> None:
    """Refuse to build (or slice into) a schedule of ``transfers`` transfers that would not fit."""
    refuse_over_limit(f"{algorithm} {collective} over {ranks:,} ranks has {transfers:,} "
                      f"transfers; its schedule", transfers * SCHEDULE_BYTES,
                      "ask for fewer ranks or slices (or larger segments)")


def check_event_run(transfers: int, chunk_accesses: int) -> None:
    """Refuse an event-engine run of ``transfers`` transfers whose state would not fit."""
    refuse_over_limit(f"the event engine on {transfers:,} transfers",
                      transfers * EVENT_BYTES + chunk_accesses * ACCESS_BYTES,
                      "use --engine auto (the exact fast methods keep far less), fewer ranks "
                      "or fewer slices")


def grow_hint(graph, scenario: bool = False) -> str:
    """How to ask for a larger topology of ``graph``'s builder: the parameter to raise, as a
    command-line ``--param`` (or, with ``scenario``, a scenario's ``topology.params``)."""
    params = graph.graph.get("params") or {}
    builder = graph.graph.get("builder")
    if builder == "gpu_cluster":
        key, per = "nodes", f", {params.get('gpus_per_node', '?')} GPUs per node"
    elif builder == "star":
        key, per = "hosts", ""
    elif builder == "fat_tree":
        key, per = "leaves", f", {params.get('hosts_per_leaf', '?')} hosts per leaf"
    else:
        return "or a larger topology"
    where = f"topology.params.{key}: N" if scenario else f"--param {key}=N"
    return f"or a larger topology ({where}{per})"


def check_gpus(graph, gpus, what: str = "--gpus", scenario: bool = False) -> int:
    """``gpus`` as an int, refused (one line, nothing allocated) unless ``1 <= gpus <=`` the
    topology's GPUs (its endpoints); the message says how many it has and how to get more."""
    from .topology.graph import endpoints

    if isinstance(gpus, bool) or not isinstance(gpus, int):
        try:
            gpus = int(gpus)
        except (TypeError, ValueError):
            raise ConfigError(f"{what} must be a whole number of GPUs, got {gpus!r}") from None
    if gpus < 1:
        raise ConfigError(f"{what} must be >= 1, got {gpus}")
    eps = endpoints(graph)
    if gpus > len(eps):
        raise ConfigError(f"{what} {gpus:,} is more than the {_count(graph, eps)} of topology "
                          f"{graph.graph.get('name', '')!r}; ask for at most {len(eps):,}, "
                          f"{grow_hint(graph, scenario)}")
    return gpus


def _count(graph, eps) -> str:
    """``8 GPUs`` (or ``8 hosts`` on a topology without GPUs)."""
    kind = graph.nodes[eps[0]].get("kind", "gpu") if eps else "gpu"
    return f"{len(eps):,} {'GPUs' if kind == 'gpu' else 'hosts'}"


def check_servers(graph, servers: int, what: str = "--ps-servers") -> None:
    """Refuse more colocated parameter servers than the topology has GPUs (more than one per
    GPU beside the workers means nothing), before anything is sized by the count. (Dedicated
    servers are counted against the free hosts where they are placed.)"""
    from .topology.graph import endpoints

    eps = endpoints(graph)
    if servers > len(eps):
        raise ConfigError(f"{what} {servers:,} is more than the {_count(graph, eps)} of "
                          f"topology {graph.graph.get('name', '')!r}; ask for at most "
                          f"{len(eps):,}")
