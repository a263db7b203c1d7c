"""What a collective library sees of a topology: the facts NCCL's tuner reads off a machine.

NCCL's cost model does not look at every link; it looks at a handful of facts about the
communicator (``src/graph/tuning.cc``): the GPUs' compute capability (which picks the
generation's constants), the CPU vendor (inter-node LL limits and the network post overhead),
the number of nodes and ranks per node, whether GPUs inside a node talk over NVLink or PCIe, and
whether an NVSwitch is there (NVLS). :func:`machine_facts` reads them off a topology graph.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import networkx as nx

from ..topology.devices import socket_link
from ..topology.graph import endpoints

#: Compute capability by device-name prefix (NVIDIA CUDA GPUs list, developer.nvidia.com/
#: cuda-gpus): K80 3.7, P100 6.0, V100 7.0, RTX 2080 Ti 7.5, A100 8.0, RTX 3090 8.6, RTX 4090 and
#: L40S 8.9, H100/H200/GH200 9.0, B200/GB200 10.0, B300/GB300 10.3.
_COMPUTE_CAPABILITY = (("k80", 37), ("p100", 60), ("v100", 70), ("rtx-2080", 75), ("a100", 80),
                       ("rtx-3090", 86), ("rtx-4090", 89), ("l40", 89), ("h100", 90),
                       ("h200", 90), ("gh200", 90), ("b200", 100), ("gb200", 100),
                       ("b300", 103), ("gb300", 103))


def compute_capability(device: str | None) -> int:
    """Compute capability x 10 of a device preset name (80 for an unknown GPU: Ampere)."""
    name = (device or "").lower()
    for prefix, cc in _COMPUTE_CAPABILITY:
        if name.startswith(prefix):
            return cc
    return 80


def generation(cc: int) -> str:
    """NCCL's constant-table generation of a compute capability (``compCapIndex``)."""
    if cc >= 100:
        return "blackwell"
    if cc >= 90:
        return "hopper"
    if cc >= 80:
        return "ampere"
    return "volta"


@dataclass(frozen=True)
class MachineFacts:
    """The communicator as NCCL's tuner sees it.

    Attributes
    ----------
    ranks, nodes : int
        Ranks in the communicator and machines they span.
    ranks_per_node : float
        ``ranks / nodes`` (NCCL's ``ppn``).
    local_ranks_min : int
        The fewest ranks on any one machine: the GPUs in the smallest machine's NCCL topology
        (``ncclTopoGetGpuCount``), which decides whether NVLink SHARP can run.
    compute_capability : int
        x 10 (A100: 80).
    generation : str
        ``volta``, ``ampere``, ``hopper`` or ``blackwell``.
    cpu_vendor : str
        ``intel`` or ``amd``.
    intra_hw : str
        ``nvlink`` or ``pci``: how GPUs of one machine reach each other.
    nvswitch : bool
        The machine's GPUs hang on an NVSwitch.
    transport : str
        ``rdma`` or ``tcp``: how the NICs move bytes (the topology's ``transport`` parameter).
    gpu_nic_path : str
        ``pxb`` when each NIC shares a PCIe switch with GPUs, ``phb`` when traffic between GPU
        and NIC crosses the host bridge (NCCL disables LL128 beyond PXB).
    nics : int
        NICs of a machine.
    sharp : bool
        The fabric reduces in-network (the topology's ``sharp`` parameter).
    cpu_family : str
        The host CPU's class as NCCL's topology code sees it (``bdw``, ``skl``, ``srp``,
        ``erp``, ``amd``, ``arm``): it sets NCCL's rate between sockets
        (:func:`~simulator.library.nccl_constants.inter_cpu_GBps`).
    tree_pattern : str
        The tree pattern NCCL's topology search ends on for these machines: ``balanced``
        (``NCCL INFO Pattern 1``) or ``tree`` (``Pattern 3``; the topology's ``tree_pattern``
        parameter).
    """

    ranks: int
    nodes: int
    ranks_per_node: float
    compute_capability: int
    generation: str
    cpu_vendor: str
    intra_hw: str
    nvswitch: bool
    transport: str
    gpu_nic_path: str
    nics: int = 0
    sharp: bool = False
    network: str = "ib"
    local_ranks_min: int = 0
    cpu_family: str = ""
    tree_pattern: str = "balanced"


def machine_facts(graph: nx.DiGraph, gpus: int) -> MachineFacts:
    """Read :class:`MachineFacts` for the first ``gpus`` endpoints of ``graph``."""
    eps = endpoints(graph)[:gpus]
    machines = sorted({graph.nodes[e].get("node_index", 0) for e in eps})
    nodes = max(1, len(machines))
    per_machine = Counter(graph.nodes[e].get("node_index", 0) for e in eps)
    devices = [graph.nodes[e].get("device") for e in eps]
    cc = min(compute_capability(d) for d in devices) if devices else 80
    first = machines[0] if machines else 0
    machine_nodes = [n for n, a in graph.nodes(data=True) if a.get("node_index") == first]
    kinds = {graph.nodes[n].get("kind") for n in machine_nodes}
    cpu = next((graph.nodes[n].get("device", "") for n in machine_nodes
                if graph.nodes[n].get("kind") == "cpu"), "")
    gpu_links = {graph.edges[e, v].get("kind") for e in eps[:1] for v in graph.successors(e)}
    intra = "nvlink" if gpu_links & {"nvlink", "nvswitch"} else "pci"
    params = graph.graph.get("params", {}) or {}
    nic_attach = params.get("nic_attach") or []
    path = "phb" if any(a == "bridge" for a in nic_attach) else "pxb"
    return MachineFacts(
        ranks=len(eps), nodes=nodes, ranks_per_node=len(eps) / nodes,
        compute_capability=cc, generation=generation(cc),
        cpu_vendor="amd" if "epyc" in str(cpu).lower() or "amd" in str(cpu).lower() else "intel",
        intra_hw=intra, nvswitch="nvswitch" in kinds, transport=str(params.get("transport",
                                                                                "rdma")),
        gpu_nic_path=path, nics=sum(1 for n in machine_nodes
                                    if graph.nodes[n].get("kind") == "nic"),
        sharp=bool(params.get("sharp", False)), network=str(params.get("network", "ib")),
        local_ranks_min=min(per_machine.values(), default=0), cpu_family=cpu_family(cpu),
        tree_pattern=str(params.get("tree_pattern", "balanced")))


def cpu_family(cpu: str) -> str:
    """NCCL's class of CPU preset ``cpu`` (see :class:`MachineFacts`)."""
    link = socket_link(cpu)
    text = str(cpu).lower()
    if link is not None:
        return link.family
    if "epyc" in text or "amd" in text:
        return "amd"
    if "grace" in text or "arm" in text:
        return "arm"
    return ""


def node_index_slot(nodes: int) -> int:
    """NCCL's node-count index into its (N1, N2, N4) tables."""
    return min(nodes, 3) - 1 if nodes <= 2 else 2


def log2i(n: int) -> int:
    """NCCL's ``log2i``: floor(log2(n)) for n >= 1."""
    return int(math.floor(math.log2(n))) if n >= 1 else 0
