"""Transports: how much of a network link's line rate carries payload.

A NIC's nominal rate (``100 Gbps`` EDR InfiniBand, ``25 Gbps`` Ethernet) is its data rate after
line coding (64b/66b). What a transport delivers of it is less, by its per-packet framing: every
packet of ``payload`` bytes occupies ``payload + overhead`` bytes of wire time. The frame formats
are fixed by the standards, so these fractions are facts, not fits:

=========================  =======  ===========================================================
transport                  payload  per-packet overhead on the wire
=========================  =======  ===========================================================
InfiniBand RC (RDMA)       4096     LRH 8 + BTH 12 + ICRC 4 + VCRC 2 = 26 B (IBTA spec vol. 1,
                                    ch. 5 and 7; 4096 B path MTU)
RoCEv2 (RDMA, Ethernet)    4096     preamble+SFD 8 + MAC header 14 + IPv4 20 + UDP 8 + BTH 12 +
                                    ICRC 4 + FCS 4 + inter-frame gap 12 = 82 B (IEEE 802.3;
                                    IBTA RoCEv2 annex A17; 4096 B RoCE MTU)
TCP over Ethernet          1448     1500 B MTU less IPv4 20 + TCP 20 + timestamps option 12
                                    (RFC 791, RFC 9293, RFC 7323: Linux default), plus
                                    preamble+SFD 8 + MAC header 14 + FCS 4 + gap 12 = 90 B
TCP over InfiniBand        65468    IPoIB connected mode, 65520 B MTU less IPv4 20 + TCP 20 +
(IPoIB)                             timestamps 12 (RFC 4755), carried in 4096 B IB packets of
                                    26 B overhead each, plus the 4 B IPoIB header
=========================  =======  ===========================================================

What a transport costs besides framing (host copies of socket stacks, per-message software
overheads) depends on the software above it: see :mod:`simulator.workload.ps_impls` for the
parameter-server implementations and :mod:`simulator.library.nccl` for NCCL.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Framing:
    """One transport's packet format: payload and wire overhead per packet, bytes."""

    name: str
    payload_bytes: int
    overhead_bytes: float

    @property
    def efficiency(self) -> float:
        """Fraction of the line rate that carries payload."""
        return self.payload_bytes / (self.payload_bytes + self.overhead_bytes)


_IB_PACKET_OVERHEAD = 8 + 12 + 4 + 2            # LRH, BTH, ICRC, VCRC
_ETH_WIRE_OVERHEAD = 8 + 14 + 4 + 12            # preamble+SFD, MAC header, FCS, gap
_IPOIB_PAYLOAD = 65520 - 20 - 20 - 12           # connected-mode MTU less IPv4, TCP, timestamps

#: (network kind, transport) -> framing. ``network`` is the topology's ``network`` parameter
#: (``ib`` or ``ethernet``), ``transport`` its ``transport`` parameter (``rdma`` or ``tcp``;
#: the named transports of :mod:`simulator.library.netplugins` are resolved by :func:`framing`).
FRAMINGS = {
    ("ib", "rdma"): Framing("InfiniBand RC", 4096, _IB_PACKET_OVERHEAD),
    ("ethernet", "rdma"): Framing("RoCEv2", 4096, _ETH_WIRE_OVERHEAD + 20 + 8 + 12 + 4),
    ("ethernet", "tcp"): Framing("TCP/Ethernet", 1448, _ETH_WIRE_OVERHEAD + 20 + 20 + 12),
    ("ib", "tcp"): Framing("TCP/IPoIB", _IPOIB_PAYLOAD,
                           4 + 20 + 20 + 12
                           + math.ceil((65520 + 4) / 4096) * _IB_PACKET_OVERHEAD),
}

#: Link kinds that are network links (the NIC's port and the fabric behind it).
NETWORK_LINK_KINDS = ("ib", "ethernet")


def framing(network: str, transport: str) -> Framing:
    """The framing of ``transport`` on a ``network`` fabric (unknown pairs: lossless).

    ``rdma`` and ``tcp`` are the table above; the named transports of
    :mod:`simulator.library.netplugins` (``ib``, ``roce``, ``efa``, ``efa2``, ``tcpxo``,
    ``tcpx``, ``socket``) carry their own MTU and headers (``socket`` on InfiniBand is
    TCP/IPoIB, as ``tcp``).
    """
    key = (str(network), str(transport))
    if key in FRAMINGS:
        return FRAMINGS[key]
    from .netplugins import ALIASES, TRANSPORTS

    legacy = {"ib": "rdma", "roce": "rdma", "socket": "tcp"}.get(str(transport))
    if legacy is not None and ALIASES.get((str(network), legacy)) == str(transport):
        return FRAMINGS[(str(network), legacy)]
    plugin = TRANSPORTS.get(str(transport))
    if plugin is None:
        return Framing("ideal", 1, 0.0)
    return Framing(plugin.label, plugin.payload_bytes,
                   plugin.mtu_bytes + plugin.wire_overhead_bytes - plugin.payload_bytes)


def link_framing(graph, kind: str, transport: str | None = None) -> float:
    """Payload fraction of a link of ``kind`` in ``graph`` under its (or the given)
    transport; 1.0 for links inside a machine."""
    if kind not in NETWORK_LINK_KINDS:
        return 1.0
    params = graph.graph.get("params") or {}
    return framing(kind, transport or params.get("transport", "rdma")).efficiency
