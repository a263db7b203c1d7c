"""A resource guard: refuse, before allocating, what would not fit in memory.

A request is cheap to state and can be ruinous to build: ``--param hosts=10000000000`` asks for
ten billion graph nodes. Before a topology is built, :func:`check_topology` estimates its nodes
and links from the builder's parameters and the memory they take (a ``networkx`` node with its
attribute dict takes about 1.5 KB, a directed link about 1 KB), and refuses with the estimate,
the limit and what to do instead when the estimate exceeds the limit: ``--max-memory`` (any
size, e.g. ``8GiB``), by default half of this machine's RAM.
"""

from __future__ import annotations

import inspect
import os

from .errors import ConfigError
from .units import format_size

#: Bytes per topology node and per directed link of a built graph (networkx dicts and the
#: attribute dicts the builders set), measured on gpu_cluster graphs of 10^4-10^5 nodes.
NODE_BYTES = 1536
LINK_BYTES = 1024

_limit: int | None = None


def machine_memory_bytes() -> int:
    """This machine's RAM (``/proc/meminfo`` or sysconf), 8 GiB when neither tells."""
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


def check_topology(builder, params: dict) -> None:
    """Refuse a topology whose estimated memory exceeds :func:`memory_limit_bytes`."""
    nodes, links = topology_size(builder, params)
    estimate = nodes * NODE_BYTES + links * LINK_BYTES
    limit = memory_limit_bytes()
    if estimate > limit:
        raise ConfigError(
            f"topology {builder.__name__} with {nodes:,} nodes and {links:,} links would take "
            f"about {format_size(estimate)} of memory, more than the limit of "
            f"{format_size(limit)} (--max-memory, default half of this machine's RAM); "
            f"ask for fewer hosts, nodes or GPUs, or raise --max-memory")
