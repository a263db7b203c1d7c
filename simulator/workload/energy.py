"""Energy of a training iteration: GPUs busy or waiting, and bits moved over links.

GPU energy
    Every worker GPU draws ``P_busy`` while it computes and ``P_idle`` while it waits::

        E_gpu = sum over GPUs of  busy_s * P_busy + (iteration_s - busy_s) * P_idle

    ``busy_s`` is the GPU's forward, backward and optimizer time (the row's ``compute_s``, times
    the straggler factor on slowed workers) plus every kernel the engine ran on it per iteration
    (reductions of incoming data, gradient (de)compression: ``engine.compute_log``), capped at
    the iteration. ``P_busy`` is the device preset's TDP (``Device.tdp_watts``): an upper bound,
    since training kernels run at 60-100 % of TDP. ``P_idle`` is :data:`IDLE_POWER_FRACTION` of
    TDP. *Assumption*: a GPU waiting inside a training job is not idle in the data-centre sense
    (clocks stay up, NCCL kernels spin); nvidia-smi shows datacentre GPUs at 10-20 % of TDP
    when nothing runs, while telemetry of GPUs "executing but idle" in a production cluster
    (arXiv:2604.04745, "The Energy Cost of Execution-Idle in GPU Clusters", 2026: 19.7 % of
    in-execution time, 10.7 % of energy, i.e. about 0.54 x the mean in-execution power) puts
    it near 30-45 % of TDP. 30 % is used; pass another ``idle_fraction`` to change it.

Network energy
    Each directed link charges energy per bit carried (``bytes_carried * 8 * J/bit`` by link
    kind, :data:`LINK_JOULES_PER_BIT`), so a path of several hops pays each hop; a device that
    only caps throughput (a NIC or host-bridge node) charges nothing of its own. The values are
    energy per bit at line rate (link power / bandwidth), i.e. a fully energy-proportional
    network. *Assumptions*, order-of-magnitude: board-level SerDes links (NVLink, an NVSwitch
    port, PCIe, a CPU socket link) about 5 pJ/bit per hop (NVIDIA's Hot Chips 2022 Grace-Hopper talk compares
    NVLink-C2C at 1.3 pJ/bit with about 5.5 pJ/bit for conventional 112G SerDes); a network hop
    (NIC or switch port, cable) 7.5 pJ/bit for InfiniBand and 10 pJ/bit for Ethernet, i.e. 15
    to 20 pJ/bit from NIC to NIC through one switch. Optical modules and switch cores at low
    load cost more per bit: ``static_fraction`` > 0 adds that share of every used link's
    full-rate power for the whole iteration (links sit at idle symbols, not off).

Columns (:data:`ENERGY_COLUMNS`): ``gpu_joules`` and ``network_joules`` per iteration (all GPUs,
all links), ``joules_per_iteration`` their sum, ``joules_per_sample`` that over the iteration's
samples (``gpus x batch_per_gpu x accumulation``). Host CPUs, parameter-server hosts, memory,
fans and cooling (PUE) are left out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType

from ..topology import endpoints
from ..topology.devices import Device, get_device

__all__ = ["ENERGY_COLUMNS", "IDLE_POWER_FRACTION", "LINK_JOULES_PER_BIT", "EnergyModel",
           "energy_columns"]

ENERGY_COLUMNS = ("joules_per_iteration", "joules_per_sample", "gpu_joules", "network_joules")

#: Power of a GPU waiting inside a job, as a fraction of its TDP (see the module notes).
IDLE_POWER_FRACTION = 0.30

#: Energy per bit carried, per directed link (hop), by link kind, J/bit (assumptions: module
#: notes).
LINK_JOULES_PER_BIT = MappingProxyType({
    "loopback": 0.0, "nvlink": 5e-12, "nvswitch": 5e-12, "pcie": 5e-12, "smp": 5e-12, "ib": 7.5e-12,
    "ethernet": 10e-12,
})


@dataclass(frozen=True)
class EnergyModel:
    """Power and per-bit energy assumptions (defaults: the module constants)."""

    idle_fraction: float = IDLE_POWER_FRACTION
    joules_per_bit: MappingProxyType = field(default_factory=lambda: LINK_JOULES_PER_BIT)
    static_fraction: float = 0.0

    def __post_init__(self):
        if not 0 <= self.idle_fraction <= 1:
            raise ValueError(f"idle_fraction must be in [0, 1], got {self.idle_fraction!r}")
        if not 0 <= self.static_fraction <= 1:
            raise ValueError(f"static_fraction must be in [0, 1], got {self.static_fraction!r}")


def gpu_busy_seconds(row: dict, engine, gpus: int, iterations: int = 1) -> list[float]:
    """Busy seconds per iteration of each worker GPU (module notes), capped at the iteration."""
    workers = list(endpoints(engine.graph)[:gpus])
    logged = dict.fromkeys(workers, 0.0)
    for device, _label, start, end in engine.compute_log:
        if device in logged:
            logged[device] += end - start
    factor = float(row.get("straggler_factor", 1.0) or 1.0)
    slowed = int(row.get("stragglers", 0) or 0) if factor != 1.0 else 0
    compute = float(row["compute_s"])
    iteration = float(row["iteration_s"])
    busy = []
    for k, w in enumerate(workers):
        own = compute * (factor if k < slowed else 1.0)   # which ones are slowed: energy-neutral
        busy.append(min(iteration, own + logged[w] / iterations))
    return busy


def energy_columns(row: dict, engine, device: Device | str, gpus: int, iterations: int = 1,
                   model: EnergyModel = EnergyModel()) -> dict:
    """The :data:`ENERGY_COLUMNS` of one training row.

    Parameters
    ----------
    row : dict
        A training row (``iteration_s``, ``compute_s``, ``batch_per_gpu``; optionally
        ``straggler_factor`` and ``stragglers``).
    engine : Engine
        The engine that simulated it (compute records and per-link bytes).
    device : Device or str
        The worker GPUs' preset (its ``tdp_watts``).
    gpus : int
        Worker GPUs: the first ``gpus`` endpoints of the engine's topology.
    iterations : int
        Iterations the engine simulated (``TrainingResult.iterations``); bytes and logged
        kernels are averaged over them.
    """
    device = get_device(device) if isinstance(device, str) else device
    iteration = float(row["iteration_s"])
    p_busy = float(device.tdp_watts)
    p_idle = model.idle_fraction * p_busy
    gpu_j = sum(b * p_busy + max(0.0, iteration - b) * p_idle
                for b in gpu_busy_seconds(row, engine, gpus, iterations))
    net_j = 0.0
    for key, capacity, carried, _busy in engine.network.link_table():
        if not (isinstance(key, tuple) and len(key) == 2 and key[0] != "node"):
            continue   # a throughput-capped device, not a wire
        kind = engine.graph.edges[key].get("kind", "")
        per_bit = model.joules_per_bit.get(kind, 0.0)
        net_j += carried * 8 * per_bit / iterations
        net_j += model.static_fraction * per_bit * capacity * 8 * iteration
    total = gpu_j + net_j
    samples = gpus * int(row["batch_per_gpu"]) * int(row.get("accumulation", 1) or 1)
    return {"joules_per_iteration": total, "joules_per_sample": total / samples,
            "gpu_joules": gpu_j, "network_joules": net_j}
