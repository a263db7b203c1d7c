"""Topology-aware ring construction: which order each ring channel visits the GPUs in.

A ring all-reduce is only as fast as the slowest hop of its cycle. Visiting a machine's GPUs in
index order is right when a switch joins them all (NVSwitch: every hop is one GPU-switch-GPU
route) but badly wrong on a machine whose GPUs are joined by point-to-point NVLinks, such as the
DGX-1's hybrid cube-mesh: GPUs do not forward for each other, so a hop between two GPUs without
a direct NVLink (3 -> 4 and 7 -> 0 on a DGX-1) falls back to PCIe through the host bridge.

NCCL avoids this by searching the machine's link graph for rings (NVIDIA/nccl
``src/graph/search.cc``): it looks for cycles through every GPU over links of the best class
with bandwidth left, takes one, subtracts its bandwidth from every link it uses, and searches
again until no further ring fits; each found ring is a channel (the "several rings on a DGX-1"
that concurrently move parts of the data to use every NVLink, as NCCL's developers explain in
NVIDIA/nccl issue #299). This module does the same, purely on the graph (no time, no SimPy):

* **One machine** (:func:`machine_rings`): Hamiltonian cycles over direct GPU-GPU links of the
  best class (NVLink). A link's capacity is counted in *ring units*: its per-direction bandwidth
  divided by the narrowest such link's (a DGX-1 pair joined by two NVLinks has 2 units each
  way, so it can carry two rings in each direction). Every chosen cycle is used in both
  directions (the cycle and its reverse are two channels, one unit of each direction of each
  link). The cycles are enumerated by depth-first search from the lowest GPU and packed to the
  largest count the capacities allow; 8 GPUs make both exhaustive and cheap, and a step
  budget bounds them on larger machines (the best found within the budget is kept; with none
  found, index order stays).
* **Several machines** (:func:`machine_paths`): one channel per NIC (as NCCL opens one per
  NIC so that every rail carries traffic); machines are visited in order 0, 1, 2, ...; inside
  every machine the channel's path is a Hamiltonian path over the best links with capacity
  left (one unit of the travelled direction) that starts at a GPU local to (fewest hops from)
  the channel's NIC and ends at another GPU local to it if possible, else the nearest: the
  ring enters and leaves each machine through that NIC and travels NVLink inside.
* **Machines whose GPUs have no direct link** (NVSwitch systems such as DGX A100 and HGX H100,
  PCIe-only boxes, single-GPU hosts): nothing to search; :func:`ring_orders` answers
  ``orders=None`` and the ring schedule keeps its index order (machines in order, each
  machine's ranks rotated per channel), so those results are unchanged.

Everything is deterministic: candidates are tried in sorted order, never in hash order.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from simulator.topology.graph import endpoints
from simulator.topology.routing import LINK_CLASS, Router

__all__ = ["RingPlan", "SEARCH_STEPS", "machine_paths", "machine_rings", "ring_orders",
           "ring_units"]

#: Depth-first search steps allowed per search (cycle enumeration, packing, one path).
SEARCH_STEPS = 200_000
#: At most this many distinct cycles are kept for packing.
_MAX_CYCLES = 64


@dataclass(frozen=True)
class RingPlan:
    """The ring channels found for the first ``gpus`` endpoints of a topology.

    Attributes
    ----------
    orders : tuple of tuple of int, or None
        Per channel, the ranks (0..gpus-1) in the order the ring visits them; None when the
        topology gives nothing to search (switch-joined or single-GPU machines, or no ring over
        the best links exists) and the schedule's index order applies.
    channels : int
        ``len(orders)``, or 0 with ``orders=None`` (the caller keeps its own default).
    method : str
        ``"nvlink-rings"`` (one machine), ``"nic-paths"`` (several machines) or
        ``"index-order"``.
    """

    orders: tuple[tuple[int, ...], ...] | None
    channels: int
    method: str


# --- link capacities in ring units --------------------------------------------------------------

def ring_units(graph: nx.DiGraph, gpus: list[str]) -> dict[tuple[str, str], int]:
    """Per-direction capacity of the direct best-class links among ``gpus``, in ring units.

    Only GPU-to-GPU edges whose kind is of the best class present (NVLink before PCIe, see
    :data:`~simulator.topology.routing.LINK_CLASS`) count. One unit is the bandwidth of the
    narrowest such edge, so a pair of NVLinks bonded into one 50 GB/s edge next to 25 GB/s
    single links is 2 units: two rings may cross it in each direction at full speed. Empty when
    the GPUs share no direct link (NVSwitch, PCIe only, one GPU).
    """
    members = set(gpus)
    direct = [(u, v, a) for u in gpus for v, a in graph.succ[u].items() if v in members]
    if not direct:
        return {}
    best = min(LINK_CLASS.get(a["kind"], len(LINK_CLASS)) for _, _, a in direct)
    direct = [(u, v, a) for u, v, a in direct if LINK_CLASS.get(a["kind"]) == best]
    unit_bytes_per_s = min(a["bandwidth_bytes_per_s"] for _, _, a in direct)
    return {(u, v): int(a["bandwidth_bytes_per_s"] / unit_bytes_per_s + 1e-9)
            for u, v, a in direct}


def _neighbours(units: dict[tuple[str, str], int], order: dict[str, int]) -> dict[str, list]:
    """Out-neighbours of every GPU over links with capacity, in GPU order (deterministic)."""
    result: dict[str, list] = {n: [] for n in order}
    for (u, v), cap in units.items():
        if cap > 0:
            result[u].append(v)
    for n in result:
        result[n].sort(key=order.__getitem__)
    return result


class _Budget:
    """A count of depth-first search steps; ``spend`` is False once it is used up."""

    def __init__(self, steps: int):
        self.left = steps

    def spend(self) -> bool:
        self.left -= 1
        return self.left >= 0


# --- one machine: Hamiltonian cycles, packed ------------------------------------------------------

def _hamiltonian_cycles(gpus: list[str], units, budget: _Budget,
                        limit: int = _MAX_CYCLES) -> list[tuple[str, ...]]:
    """Up to ``limit`` distinct Hamiltonian cycles over links with capacity, each listed once.

    A cycle starts at ``gpus[0]`` and is kept in the direction whose second GPU comes before its
    last (its reverse is the same cycle). Both directions of every hop must have capacity.
    """
    order = {g: i for i, g in enumerate(gpus)}
    nbrs = _neighbours({e: c for e, c in units.items() if units.get(e[::-1], 0) > 0}, order)
    start, n = gpus[0], len(gpus)
    found: list[tuple[str, ...]] = []
    path, seen = [start], {start}

    def extend() -> bool:
        if not budget.spend() or len(found) >= limit:
            return False
        last = path[-1]
        if len(path) == n:
            if start in nbrs[last] and (n == 2 or order[path[1]] < order[path[-1]]):
                found.append(tuple(path))
            return True
        for nxt in nbrs[last]:
            if nxt not in seen:
                path.append(nxt)
                seen.add(nxt)
                going = extend()
                seen.discard(nxt)
                path.pop()
                if not going:
                    return False
        return True

    extend()
    return found


def _cycle_edges(cycle: tuple[str, ...]) -> list[tuple[str, str]]:
    """The undirected hops of a cycle as (a, b) pairs in cycle order (a two-GPU cycle: one)."""
    if len(cycle) == 2:
        return [cycle]
    return list(zip(cycle, cycle[1:] + cycle[:1]))


def _pack_cycles(cycles, units, budget: _Budget) -> list[int]:
    """The largest multiset of cycles (indices, non-decreasing) the link capacities allow.

    Each chosen cycle takes one unit of both directions of each of its hops (the cycle runs
    forwards and backwards). Depth-first branch and bound: a branch is cut when even taking
    every remaining GPU's spare units two at a time could not beat the best count found.
    """
    residual = {frozenset(e): min(cap, units[e[::-1]]) for e, cap in units.items()
                if units.get(e[::-1], 0) > 0}
    needs = [[frozenset(e) for e in _cycle_edges(c)] for c in cycles]
    gpus = cycles[0] if cycles else ()
    best: list[int] = []
    chosen: list[int] = []

    def bound() -> int:
        spare = min(sum(cap for e, cap in residual.items() if g in e) for g in gpus)
        return spare if len(gpus) == 2 else spare // 2

    def fits(i: int) -> bool:
        want: dict = {}
        for e in needs[i]:
            want[e] = want.get(e, 0) + 1
        return all(residual[e] >= k for e, k in want.items())

    def search(first: int) -> None:
        nonlocal best
        if len(chosen) > len(best):
            best = list(chosen)
        if not budget.spend() or len(chosen) + bound() <= len(best):
            return
        for i in range(first, len(cycles)):
            if fits(i):
                for e in needs[i]:
                    residual[e] -= 1
                chosen.append(i)
                search(i)
                chosen.pop()
                for e in needs[i]:
                    residual[e] += 1

    search(0)
    return best


def _greedy_cycles(gpus: list[str], units, budget: _Budget) -> list[tuple[str, ...]]:
    """NCCL's way: find a cycle in what capacity is left, take its units, search again."""
    residual = dict(units)
    cycles: list[tuple[str, ...]] = []
    while True:
        found = _hamiltonian_cycles(gpus, residual, budget, limit=1)
        if not found:
            return cycles
        cycles.append(found[0])
        for a, b in _cycle_edges(found[0]):
            residual[a, b] -= 1
            residual[b, a] -= 1


def machine_rings(graph: nx.DiGraph, gpus: list[str],
                  steps: int = SEARCH_STEPS) -> list[tuple[str, ...]]:
    """Ring channels inside one machine over its best direct links (empty if none exists).

    Two searches, the larger result wins (the packing on a tie): the best packing of the first
    cycles enumerated (optimal when the enumeration is complete, as on 8 GPUs), and the greedy
    search of :func:`_greedy_cycles` (which still finds disjoint cycles on dense machines whose
    cycles are too many to enumerate). Every chosen Hamiltonian cycle gives two channels, itself
    and its reverse (a cycle of two GPUs is its own reverse: one channel per unit of their link).
    """
    if len(gpus) < 2:
        return []
    units = ring_units(graph, gpus)
    if not units:
        return []
    cycles = _hamiltonian_cycles(gpus, units, _Budget(steps))
    packed = [cycles[i] for i in _pack_cycles(cycles, units, _Budget(steps))] if cycles else []
    greedy = _greedy_cycles(gpus, units, _Budget(steps))
    channels: list[tuple[str, ...]] = []
    for cycle in packed if len(packed) >= len(greedy) else greedy:
        channels.append(cycle)
        if len(cycle) > 2:
            channels.append((cycle[0],) + tuple(reversed(cycle[1:])))
    return channels


# --- several machines: a path per NIC from and to GPUs near it ---------------------------------

def _hamiltonian_path(gpus: list[str], units, start: str, end: str,
                      budget: _Budget) -> tuple[str, ...] | None:
    """A path through every GPU from ``start`` to ``end`` over directed links with capacity."""
    order = {g: i for i, g in enumerate(gpus)}
    nbrs = _neighbours(units, order)
    path, seen = [start], {start}

    def extend() -> bool | None:
        if not budget.spend():
            return None
        last = path[-1]
        if len(path) == len(gpus):
            return last == end
        for nxt in nbrs[last]:
            if nxt in seen or (nxt == end and len(path) < len(gpus) - 1):
                continue
            path.append(nxt)
            seen.add(nxt)
            done = extend()
            if done:
                return True
            seen.discard(nxt)
            path.pop()
            if done is None:
                return None
        return False

    return tuple(path) if extend() else None


def _nearest_first(router: Router, gpus: list[str], nic: str) -> list[str]:
    """The machine's GPUs sorted by hops to ``nic`` (GPUs on its PCIe switch first)."""
    return sorted(gpus, key=lambda g: (router.path(g, nic).hops, gpus.index(g)))


def machine_paths(graph: nx.DiGraph, gpus: list[str], nics: list[str],
                  router: Router | None = None,
                  steps: int = SEARCH_STEPS) -> list[tuple[str, ...] | None]:
    """Per NIC, the order a ring channel visits this machine's GPUs (None: no path found).

    The path enters at a GPU nearest the NIC and leaves at the next nearest one it can reach
    through every other GPU over best-class links with a unit of capacity left in the
    travelled direction; each found path takes those units, so later channels route around it.
    """
    if len(gpus) == 1:
        return [tuple(gpus) for _ in nics]
    units = ring_units(graph, gpus)
    if not units:
        return [None for _ in nics]
    router = router or Router(graph)
    result: list[tuple[str, ...] | None] = []
    for nic in nics:
        near = _nearest_first(router, gpus, nic)
        rank = {g: i for i, g in enumerate(near)}
        pairs = sorted(((s, e) for s in near for e in near if s != e),
                       key=lambda se: (rank[se[0]] + rank[se[1]], rank[se[0]]))
        budget, found = _Budget(steps), None
        for start, end in pairs:
            found = _hamiltonian_path(gpus, units, start, end, budget)
            if found is not None or budget.left <= 0:
                break
        if found is not None:
            for hop in zip(found, found[1:]):
                units[hop] -= 1
        result.append(found)
    return result


# --- the plan for a collective's ranks ---------------------------------------------------------

def _by_machine(graph: nx.DiGraph, ranked: list[str]) -> list[tuple[int, list[str]]]:
    """``(machine index, its endpoints in rank order)`` for the ranked endpoints, in order."""
    machines: dict[int, list[str]] = {}
    for node in ranked:
        machines.setdefault(graph.nodes[node].get("node_index", 0), []).append(node)
    return sorted(machines.items())


def _nics_by_machine(graph: nx.DiGraph) -> dict[int, list[str]]:
    """Every machine's NICs, by local index (one pass over the graph)."""
    nics: dict[int, list[str]] = {}
    for n, a in graph.nodes(data=True):
        if a.get("kind") == "nic":
            nics.setdefault(a.get("node_index"), []).append(n)
    for members in nics.values():
        members.sort(key=lambda n: (graph.nodes[n].get("local_index", 0), n))
    return nics


def ring_orders(graph: nx.DiGraph, gpus: int, steps: int = SEARCH_STEPS) -> RingPlan:
    """Ring channels for ranks ``0..gpus-1`` placed on the first ``gpus`` endpoints.

    One machine: the packed NVLink rings of :func:`machine_rings`. Several machines: one channel
    per NIC of the first machine, each visiting machines in order and every machine along the
    NIC-local path of :func:`machine_paths` (a machine where no such path exists is visited in
    index order rotated by the channel, as the schedule's default does). ``orders=None`` when no
    machine has direct GPU-GPU links or no ring over them exists.
    """
    ranked = endpoints(graph)[:gpus]
    rank_of = {node: r for r, node in enumerate(ranked)}
    machines = _by_machine(graph, ranked)
    if gpus < 2 or not any(ring_units(graph, members) for _, members in machines):
        return RingPlan(None, 0, "index-order")
    if len(machines) == 1:
        rings = machine_rings(graph, machines[0][1], steps)
        if not rings:
            return RingPlan(None, 0, "index-order")
        orders = tuple(tuple(rank_of[g] for g in ring) for ring in rings)
        return RingPlan(orders, len(orders), "nvlink-rings")
    nics = _nics_by_machine(graph)
    channels = max(1, len(nics.get(machines[0][0], [])))
    router = Router(graph)
    per_channel: list[list[int]] = [[] for _ in range(channels)]
    for machine, members in machines:
        own = nics.get(machine, [])
        paths = machine_paths(graph, members, [own[c % len(own)] for c in range(channels)],
                              router, steps) if own else [None] * channels
        for c, path in enumerate(paths):
            if path is None:
                path = members[c % len(members):] + members[:c % len(members)]
            per_channel[c].extend(rank_of[g] for g in path)
    orders = tuple(tuple(order) for order in per_channel)
    return RingPlan(orders, len(orders), "nic-paths")
