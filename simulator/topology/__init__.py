"""Topologies: devices and directed links as a networkx graph, builders, presets, and routing.

The graph schema (attributes and units) is documented in :mod:`simulator.topology.graph`;
builders in :mod:`~simulator.topology.builders`; YAML presets of real machines in
:mod:`~simulator.topology.presets` (files in the ``topologies`` package); GPU and CPU presets in
:mod:`~simulator.topology.devices`; deterministic shortest-path routing with ECMP in
:mod:`~simulator.topology.routing`; topology-aware ring channel orders (NCCL's ring search) in
:mod:`~simulator.topology.rings`. Nothing here knows about time or SimPy.
"""

from simulator.topology.builders import (
    BUILDERS, build, fat_tree, gpu_cluster, parameter_names, star,
)
from simulator.topology.devices import DEVICES, Device, get_device
from simulator.topology.fabrics import (  # registers its builders in BUILDERS
    bisection, dragonfly, multi_plane, rail_optimised, three_tier,
)
from simulator.topology.graph import (
    EDGE_KINDS, NODE_KINDS, describe, endpoints, local_ranks, owned_nics, place_ranks,
    ps_endpoints, validate,
)
from simulator.topology.presets import list_topologies, load_topology, preset_names, read_preset
from simulator.topology.rings import RingPlan, ring_orders
from simulator.topology.routing import Path, Router

__all__ = [
    "BUILDERS", "DEVICES", "Device", "EDGE_KINDS", "NODE_KINDS", "Path", "Router", "bisection",
    "build", "describe", "dragonfly", "endpoints", "fat_tree", "multi_plane", "rail_optimised",
    "three_tier", "get_device", "gpu_cluster", "list_topologies",
    "load_topology", "local_ranks", "owned_nics", "parameter_names", "place_ranks",
    "preset_names", "ps_endpoints", "read_preset",
    "RingPlan", "ring_orders", "star", "validate",
]
