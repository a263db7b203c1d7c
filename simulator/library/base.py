"""The library layer's contract: a *plan* is what a collective library makes of one call.

Between an algorithm's schedule and the wires sits the collective library (NCCL, or nothing:
``ideal``). It decides the protocol and the number of channels, and it costs what the wires do
not show: a base latency per (algorithm, protocol), a per-step latency per link class, the
payload fraction of each protocol, per-channel bandwidth limits, and the host's time to launch
the call. A :class:`Plan` carries all of that **as data** that the engine consumes unchanged:

* ``graph``: the topology with the library's link rates and per-step latencies written into
  its edges (every engine method reads the same graph, so each keeps equalling the event
  engine);
* ``algorithm`` and ``options``: the schedule the engine runs (channels, pipeline segment size,
  helper ranks such as the NVSwitch that reduces in NVLS);
* ``fixed_time_s``: the base latency added once per call;
* ``host_time_s``: the host's enqueue time per call. A benchmark that issues calls back to back
  (nccl-tests, a training loop) measures ``max(device time, host time)`` per call: launches
  overlap the previous call's kernels, so the slower of the two paces the loop.

A library is a registered object with ``name``, ``plan(...)`` and ``describe()``; see
:mod:`simulator.library` for the registry.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import networkx as nx


@dataclass(frozen=True)
class Plan:
    """One collective call as the library will run it.

    Attributes
    ----------
    library : str
        Registered library name.
    algorithm : str
        The registered schedule the engine runs (NVLS runs ``ps`` with the NVSwitch as server).
    label : str
        The algorithm as the library names it (``ring``, ``tree``, ``nvls``), for rows.
    protocol : str
        ``LL``, ``LL128``, ``Simple``, or ``""`` (ideal).
    channels : int
        Channels the call uses (0: the algorithm's own default).
    graph : networkx.DiGraph
        Topology with the library's link rates and latencies.
    options : dict
        Schedule options the library sets.
    helper_nodes : tuple of str
        Topology nodes for the schedule's helper ranks, when the library places them itself.
    fixed_time_s : float
        Added once to the engine's time (base latency).
    host_time_s : float
        Host enqueue time per call; the reported time is ``max(device, host)``.
    predicted_time_s : float
        The library's own cost-model prediction (what its tuner compared), or NaN.
    notes : dict
        Named numbers that explain the plan (for ``-v`` and tests).
    slices : int or None
        Pipelining slices the library sets (NVLS chunks), else the caller's.
    reduce_compute : bool or None
        ``False`` where the library's kernels fuse the reduction into the copy (NCCL), so it
        costs no time of its own; ``None`` leaves the caller's choice.
    """

    library: str
    algorithm: str
    label: str
    protocol: str
    channels: int
    graph: nx.DiGraph
    options: dict = field(default_factory=dict)
    helper_nodes: tuple = ()
    fixed_time_s: float = 0.0
    host_time_s: float = 0.0
    predicted_time_s: float = float("nan")
    notes: dict = field(default_factory=dict)
    slices: int | None = None
    reduce_compute: bool | None = None

    def total_time_s(self, device_time_s: float) -> float:
        """The call's time from the engine's time: ``max(device + fixed, host)``."""
        return max(device_time_s + self.fixed_time_s, self.host_time_s)
