"""Network transports as NCCL runs them: its own (InfiniBand verbs, sockets) and the plugins'.

NCCL moves bytes between machines through a *net* transport: its built-in InfiniBand verbs
transport (``src/transport/net_ib.cc``, also RoCE), its socket transport
(``src/transport/net_socket.cc``), or an external plugin loaded as ``libnccl-net.so``: AWS's
aws-ofi-nccl over libfabric (EFA's SRD protocol; HPE Slingshot's Cassini NIC through the ``cxi``
provider), Google's GPUDirect-TCPX/TCPXO plugins. What a
transport changes, and what this module records as data with a source for every number:

payload fraction of the line rate
    its packet framing (MTU and headers) - :class:`~simulator.library.transport.Framing`;
per-message latency
    the time one network step costs beyond what NCCL's tuner assumes for its own InfiniBand
    transport (``hwLat[NET][Ring][LL]`` = 2.7 us, identical in NCCL 2.10 to 2.30,
    ``src/graph/tuning.cc``); a plugin whose own cost model states its per-message latency
    (aws-ofi-nccl's model tuner: ``net_lat``) gives it, first-generation EFA's (p4d) is a named
    fit (:data:`EFA_P4D_MESSAGE_LATENCY_US`), and NCCL's own transports add nothing;
latency reported to NCCL
    ``ncclNetProperties_t.latency`` (``props->latency``): NCCL >= 2.18 adds it to every network
    step of its tuner's model (``interLat = hwLat[NET] + graph->latencyInter``, twice for
    Simple, ``tuning.cc``; ``latencyInter = net->net.latency``, ``search.cc``). It steers NCCL's
    choice of algorithm and protocol; it is a tuning figure, not a measurement (aws-ofi-nccl
    commit d87d61e0: "a value below 75us is slightly better for large deployments, but makes
    NCCL choose the wrong algorithm for the 2 nodes case");
receiver-first handshake
    aws-ofi-nccl's RDMA protocol (p5) writes a message larger than its eager limit (8 KiB)
    into the receiver's buffer only after the receiver's control message has given its
    address: the call's first such message waits one more message latency, less what the
    sender does before it (:func:`handshake_latency_us`);
per-connection limits
    flows (sockets, queue pairs) per NCCL connection and what one flow may carry;
protocols, algorithms and buffers
    what the platform's documented NCCL environment sets (``NCCL_PROTO``, ``NCCL_ALGO``,
    ``NCCL_NVLS_ENABLE``, ``NCCL_BUFFSIZE``): :class:`NcclSettings`, per release of the platform's
    stack where its documentation changed them, chosen by the NCCL version in use (GPUDirect-
    TCPXO ran Simple only on rings and trees with NCCL 2.21, added LL128 with 2.23 and NVLS
    trees with 2.26).

:func:`network_step_latency_us`, :func:`reported_latency_us`, :func:`handshake_latency_us`,
:func:`enabled_protocols` and :func:`nccl_settings` are the hooks the ``nccl`` library calls with the topology's ``transport`` parameter;
:func:`describe` lists everything with its source.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..errors import ConfigError

#: NCCL's per-step latency of a network step for its own InfiniBand transport, Ring/LL, us:
#: ``hwLat[NCCL_HW_NET][NCCL_ALGO_RING][NCCL_PROTO_LL] = 2.7`` (NVIDIA/nccl src/graph/tuning.cc,
#: v2.10.3-1:63-70 through v2.30.7-1:157-175). A plugin's per-message latency replaces it.
NCCL_NET_LL_LATENCY_US = 2.7

#: Ethernet bytes on the wire per frame besides the IP packet: preamble+SFD 8, MAC header 14,
#: FCS 4, inter-frame gap 12 (IEEE 802.3).
ETH_L2_OVERHEAD = 8 + 14 + 4 + 12


@dataclass(frozen=True)
class NcclSettings:
    """The NCCL environment a platform's documentation sets for one release of its stack.

    Attributes
    ----------
    release : str
        Which releases document it (and the NCCL they ship).
    protocols : tuple of str or None
        ``NCCL_PROTO`` (None: NCCL's defaults).
    algorithms : tuple of str or None
        The library's algorithm names ``NCCL_ALGO`` and ``NCCL_NVLS_ENABLE`` leave enabled
        (``tree``, ``ring``, ``nvls``, ``nvls_tree``, ``collnet_direct``; None: all).
    simple_buffer_bytes : int or None
        ``NCCL_BUFFSIZE``: one connection's Simple FIFO (None: NCCL's 4 MiB).
    source : str
        Where the settings are written.
    """

    release: str
    protocols: tuple | None = None
    algorithms: tuple | None = None
    simple_buffer_bytes: int | None = None
    source: str = ""


@dataclass(frozen=True)
class NetTransport:
    """One network transport as NCCL runs it (see the module docstring).

    Attributes
    ----------
    name : str
        The topology's ``transport`` value.
    label : str
        What NCCL logs (``NET/IB``, ``NET/AWS Libfabric``, ``NET/FasTrak``, ``NET/Socket``).
    networks : tuple of str
        Link kinds (``ib``, ``ethernet``) it runs on.
    mtu_bytes : int
        IP MTU (Ethernet) or path MTU (InfiniBand) of the fabric as the platform configures it.
    header_bytes : int
        Headers inside the MTU (IP, UDP/TCP, transport header, CRC).
    wire_overhead_bytes : int
        Bytes per packet outside the MTU (Ethernet L2 framing; InfiniBand LRH/VCRC).
    message_latency_us : float or None
        The transport's own per-message latency of a network step, us (None: NCCL's own figure,
        ``NCCL_NET_LL_LATENCY_US``, stands).
    simple_extra_us : float
        Extra per network step for the Simple protocol (completion handling by the host).
    reported_latency_us : float
        ``props->latency`` reported to NCCL.
    flows_per_connection : int
        Flows (sockets, TCP flows) one NCCL connection opens.
    flow_bytes_per_s : float
        Most one flow may carry, bytes/s (``inf``: no per-flow limit).
    protocols : tuple of str or None
        Protocols the platform's documented NCCL settings enable (None: NCCL's defaults).
    handshake_above_bytes : int or None
        A network message larger than this cannot leave before the receiver's control
        message (its buffer's address) has arrived: the call's first such message waits one
        more message latency (None: the receiver never has to speak first).
    rendezvous_above_bytes : int or None
        A message larger than this goes by rendezvous: its first ``rendezvous_eager_bytes``
        travel with the header, the receiver reads the rest with an RDMA read (None: the
        transport's ``message_latency_us`` stands for every size).
    rendezvous_eager_bytes : int
        Payload a rendezvous message carries with its header.
    rendezvous_extra_us : float
        What a rendezvous message costs beyond NCCL's own network latency, us.
    host_copy_above_bytes : int or None
        The eager payload of every message lands in a host buffer and the receiver's CPU
        copies it into the GPU's buffer; above this size with the slow copy (None: payloads
        land in the GPU's buffer directly).
    host_copy_us : float
        One slow copy into GPU memory, us.
    proxy_posts_per_step : float
        What a network step on the call's latency path costs beyond ``hwLat[NET]``, in units
        of NCCL's own "network post overhead" of the host's CPU (:func:`net_post_overhead_us`:
        1 us Intel, 2 us AMD); 0 for transports whose per-message cost is given otherwise.
    host_buffers_only : bool
        The transport moves bytes only from and to host memory (``props->ptrSupport =
        NCCL_PTR_HOST``): every connection's buffers are staged there
        (:func:`host_staged`).
    settings : tuple of (tuple, NcclSettings)
        The platform's documented NCCL environment by the NCCL release it ships with:
        ``((major, minor), settings)`` pairs, oldest first; the last whose version is not newer
        than the NCCL in use applies, and replaces ``protocols``. Empty: ``protocols`` only.
    sources : dict
        Constant name -> source.
    """

    name: str
    label: str
    networks: tuple
    mtu_bytes: int
    header_bytes: int
    wire_overhead_bytes: int
    message_latency_us: float | None = None
    simple_extra_us: float = 0.0
    reported_latency_us: float = 0.0
    flows_per_connection: int = 1
    flow_bytes_per_s: float = math.inf
    protocols: tuple | None = None
    handshake_above_bytes: int | None = None
    rendezvous_above_bytes: int | None = None
    rendezvous_eager_bytes: int = 0
    rendezvous_extra_us: float = 0.0
    host_copy_above_bytes: int | None = None
    host_copy_us: float = 0.0
    proxy_posts_per_step: float = 0.0
    host_buffers_only: bool = False
    settings: tuple = ()
    sources: dict = field(default_factory=dict)

    def settings_for(self, version: tuple = (2, 30)) -> NcclSettings:
        """The documented NCCL environment for NCCL ``version`` ((major, minor))."""
        chosen = None
        for since, entry in self.settings:
            if chosen is None or tuple(version) >= tuple(since):
                chosen = entry
        return chosen or NcclSettings("NCCL's defaults", protocols=self.protocols)

    @property
    def payload_bytes(self) -> int:
        return self.mtu_bytes - self.header_bytes

    @property
    def efficiency(self) -> float:
        """Fraction of the line rate that carries payload (framing only)."""
        return self.payload_bytes / (self.mtu_bytes + self.wire_overhead_bytes)

    def step_latency_us(self, protocol: str = "LL") -> float:
        """Latency this transport adds to each network step beyond NCCL's own figure, us."""
        extra = 0.0
        if self.message_latency_us is not None:
            extra = max(0.0, self.message_latency_us - NCCL_NET_LL_LATENCY_US)
        if protocol == "Simple":
            extra += self.simple_extra_us
        return extra

    def handshake_us(self, message_bytes: float) -> float:
        """The wait of a call's first network message of ``message_bytes`` for the
        receiver's control message, us (0 below the eager limit or without a handshake)."""
        if self.handshake_above_bytes is None or message_bytes <= self.handshake_above_bytes:
            return 0.0
        return self.message_latency_us if self.message_latency_us is not None else \
            NCCL_NET_LL_LATENCY_US

    def _rendezvous(self, message_bytes: float) -> bool:
        return (self.rendezvous_above_bytes is not None
                and message_bytes > self.rendezvous_above_bytes)

    def message_extra_us(self, message_bytes: float) -> float:
        """The latency one network message of ``message_bytes`` adds beyond its step latency,
        us: the rendezvous read of a message above the eager limit (0 below it, and for
        transports without one)."""
        return self.rendezvous_extra_us if self._rendezvous(message_bytes) else 0.0

    def host_copy_us_for(self, message_bytes: float) -> float:
        """The receiving CPU's copy of one message's eager payload into the GPU, us: the slow
        copy when the payload that lands in a host buffer (all of an eager message, the eager
        part of a rendezvous) exceeds ``host_copy_above_bytes`` (0 without software
        matching)."""
        if self.host_copy_above_bytes is None:
            return 0.0
        eager = (min(message_bytes, self.rendezvous_eager_bytes)
                 if self._rendezvous(message_bytes) else message_bytes)
        return self.host_copy_us if eager > self.host_copy_above_bytes else 0.0

    def proxy_step_us(self, cpu_vendor: str, cpu_family: str = "x86") -> float:
        """What one network step on the latency path costs the hosts' proxies beyond
        ``hwLat[NET]``, us (:attr:`proxy_posts_per_step` network post overheads)."""
        if not self.proxy_posts_per_step:
            return 0.0
        return self.proxy_posts_per_step * net_post_overhead_us(cpu_vendor, cpu_family)

    def connection_bytes_per_s(self, line_bytes_per_s: float) -> float:
        """What one NCCL connection can carry on a NIC of ``line_bytes_per_s``."""
        return min(line_bytes_per_s * self.efficiency,
                   self.flows_per_connection * self.flow_bytes_per_s)


_IB_LRH_BTH_ICRC_VCRC = 8 + 12 + 4 + 2
_IPV4, _UDP, _TCP, _TCP_TS = 20, 8, 20, 12
_ROCE_BTH_ICRC = 12 + 4

_AWS_OFI = "aws/aws-ofi-nccl @2daf7d303aa139a03140aa530957d10521e4478d"
_TCPXO = "google/nccl-plugin-gpudirect-tcpxo @04815d1bb89971577c7330f9873b70644b3a5934"
_NCCL = "NVIDIA/nccl v2.21.5-1 (ab2b89c4c339bd7f816fbc114a4b05d386b66290)"

#: GPUDirect-TCPXO's own cost of one NCCL network message beyond NCCL's figure, us: none.
#: Google publishes none and its plugin reports 0 to NCCL. An earlier round fitted 43 us on the
#: 8 B - 32 KiB rows of ``tests/data/measurements/nccl_a3mega_2node_tcpxo.csv``, taking them for
#: LL128 trees; that run used the plugin release whose documented environment is
#: ``NCCL_PROTO=Simple`` on rings and trees (:data:`TCPXO_SETTINGS`), and its Simple ring with
#: NCCL's own network latency is within 7 % of those rows, so no extra latency is charged
#: (docs/validation/sources.md, "GPUDirect-TCPXO settings").
TCPXO_MESSAGE_LATENCY_US = None


def net_post_overhead_us(cpu_vendor: str, cpu_family: str = "x86") -> float:
    """NCCL's "Network post overhead" of the host CPU, us: 1.0 on x86 Intel, 2.0 on x86 AMD,
    1.0 on anything else (``getNetOverhead``, NVIDIA/nccl v2.23.4-1 ``src/graph/tuning.cc``
    :117-125, the same through v2.30; ``NCCL_NET_OVERHEAD`` overrides it in NCCL). NCCL's
    tuner charges it to every step of a ring across machines (three times for Simple); the
    ``ib`` and ``roce`` transports on every network step (:data:`IB_PROXY_POSTS_PER_STEP`)."""
    return 2.0 if cpu_vendor == "amd" and cpu_family != "arm" else 1.0


#: What one network step of NCCL's own InfiniBand verbs transport (InfiniBand and RoCE) costs
#: beyond NCCL's ``hwLat[NET]``, in network post overheads (:func:`net_post_overhead_us`), on
#: every network step of the call's latency path (a tree's 2 log2(nodes); a ring's 2(nodes - 1)
#: for all-reduce before NCCL 2.19, whose later tuner charges every ring step the overhead).
#: NCCL prices a tree's network hop at ``hwLat[NET]`` alone (5 us for LL); at 8 B - 32 KiB the
#: machines took 1.1-2.0x NCCL's line on ten public two- and four-machine InfiniBand / RoCE
#: tables, more on AMD hosts (NCCL's own 2:1). **Fitted** (docs/validation/sources.md, "A
#: network step's proxy cost"): the integer count with the least mean MAPE below 64 KiB over
#: those tables (0: 29.1 %, 1: 25.1 %, 2: 23.2 %, 3: 23.3 %; leaving one table out picks 2
#: six times, 3 four times); read as the sending proxy's post and the receiving side's
#: completion, one overhead each.
IB_PROXY_POSTS_PER_STEP = 2.0

#: Every transport by the topology's ``transport`` value.
TRANSPORTS: dict[str, NetTransport] = {}


def _add(t: NetTransport) -> None:
    TRANSPORTS[t.name] = t


_add(NetTransport(
    "ib", "NET/IB", ("ib",), 4096, 0, _IB_LRH_BTH_ICRC_VCRC,
    sources={"framing": "IBTA spec vol. 1 ch. 5/7: 4096 B path MTU; LRH 8 + BTH 12 + ICRC 4 + "
                        "VCRC 2 per packet",
             "reported_latency_us": f"{_NCCL} src/transport/net_ib.cc:620 "
                                    "'props->latency = 0; // Not set'",
             "message_latency_us": "none: NCCL's hwLat[NET] is its own IB figure",
             "proxy_posts_per_step": "fitted, IB_PROXY_POSTS_PER_STEP (docs/validation/"
                                     "sources.md, 'A network step's proxy cost')"},
    proxy_posts_per_step=IB_PROXY_POSTS_PER_STEP))
_add(NetTransport(
    "roce", "NET/IB (RoCE)", ("ethernet",), 4096 + _IPV4 + _UDP + _ROCE_BTH_ICRC,
    _IPV4 + _UDP + _ROCE_BTH_ICRC,
    ETH_L2_OVERHEAD,
    sources={"framing": "IBTA RoCEv2 annex A17 (IPv4 20 + UDP 8 + BTH 12 + ICRC 4 around 4096 B of "
                        "payload, the RoCE MTU) + IEEE 802.3 L2 38 B",
             "reported_latency_us": f"{_NCCL} src/transport/net_ib.cc:620",
             "proxy_posts_per_step": "fitted, IB_PROXY_POSTS_PER_STEP (as ib)"},
    proxy_posts_per_step=IB_PROXY_POSTS_PER_STEP))
#: What one network message costs over first-generation EFA (p4d/p4de) with aws-ofi-nccl's
#: SENDRECV protocol, us. No source gives it: the 75 us the plugin reports to NCCL is a tuning
#: figure (aws/aws-ofi-nccl d87d61e0: "a value below 75us is slightly better for large
#: deployments, but makes NCCL choose the wrong algorithm for the 2 nodes case") and stays
#: what NCCL's tuner sees (``reported_latency_us``). **Fitted** (docs/validation/sources.md,
#: "EFA on p4d runs Simple"): the least |mean signed error| on a 1 us grid over the 8 B - 8 KiB
#: rows of ``tests/data/measurements/nccl_awsome_p4de_2node_efa.csv`` (-0.2 %); checked on
#: ``nccl_awsdocs_dlami_p4d_2node_efa.csv`` (-8.5 %).
EFA_P4D_MESSAGE_LATENCY_US = 36.0
#: Largest message libfabric's EFA provider sends eagerly from GPU memory: for CUDA buffers it
#: switches to a read-based protocol (the receiver reads the payload with RDMA) from
#: ``efa_max_eager_msg_size_with_largest_header() + 1`` (ofiwg/libfabric v1.20.0
#: ``prov/efa/src/efa_hmem.c``:85, ``rdm/efa_rdm_msg.c``:95); one packet of EFA's 8 KiB-class
#: MTU, taken as 8 KiB.
EFA_EAGER_MAX_BYTES = 8192
#: What the read-based protocol adds to a message above :data:`EFA_EAGER_MAX_BYTES`, us. No
#: source gives it. **Fitted**: least |mean signed error| on a 1 us grid over the 16 KiB -
#: 512 KiB rows of the same p4de file, with :data:`EFA_P4D_MESSAGE_LATENCY_US` fixed (-0.2 %);
#: the DLAMI table's same rows check it (-6.1 %). Refitted by the same rule when a channel's
#: rate came to cap a GPU's links across machines (27 -> 25 us), when a tree's transfers
#: inside a machine came to move at one channel's speed (25 -> 23 us), and when the channels
#: came from NCCL's graph search (23 -> 20 us: -0.3 %, the DLAMI check -6.3 %;
#: docs/validation/sources.md).
EFA_P4D_READ_EXTRA_US = 20.0
#: EFA on p4d/p4de runs NCCL's Simple protocol only. aws-ofi-nccl's SENDRECV protocol (the
#: p4d default) asks libfabric for 128-byte-aligned in-order delivery
#: (``FI_OPT_EFA_SENDRECV_IN_ORDER_ALIGNED_128_BYTES``), which LL and LL128 need; libfabric
#: grants it only where the EFA device reports in-order 128-byte RDMA reads
#: (``efa_base_ep_support_op_in_order_aligned_128_bytes(..., IBV_WR_RDMA_READ)``, v1.20.0
#: ``prov/efa/src/efa_base_ep.c``:363; since libfabric f08ec6a6c, 2025-11-12, never), and the
#: plugin otherwise sets ``NCCL_PROTO=simple`` itself (``configure_nccl_proto``, aws-ofi-nccl
#: v1.7.0 to v1.14.0 ``src/platform-aws.c``, later ``platform-aws.cpp``). p5 with the RDMA
#: protocol skipped the check from PR #280 (2023-09-29) until v1.11.0-aws, where ece41f0c
#: (2024-08-06) removed the skip because "EFA now reports WRITE_IN_ORDER_ALIGNED_128_BYTES for
#: this platform": p5 passes the check and keeps LL and LL128 (``efa2``); only p5en skips it
#: (ef08e658, the same day, to v1.18.0). Before the plugin did
#: it, AWS told users to: "NCCL_PROTO=simple is a must to ensure data consistency when using
#: EFA as a network provider. EFA doesn't support LL and LL128 variants" (aws/aws-ofi-nccl
#: issue #76, 2021-12-17). A p4d.24xlarge log with aws-ofi-nccl 1.16.2 and libfabric 2.1
#: prints "Setting FI_OPT_EFA_SENDRECV_IN_ORDER_ALIGNED_128_BYTES not supported. Need to force
#: simple protocol: byte delivery ordering not supported ... Adding NCCL_PROTO=simple". The plugin
#: also sets ``NCCL_BUFFSIZE=8388608`` on p4d/p4de from v1.16.0 (``platform_data_map``
#: ``.env``), the release that ships with NCCL 2.27; before it NCCL's 4 MiB stands unless the
#: harness sets it (aws-samples/awsome-distributed-training's ``nccl-tests.sbatch`` does: a
#: measured file's harness, not the platform's default).
EFA_P4D_SETTINGS = (
    ((2, 0), NcclSettings(
        "aws-ofi-nccl on p4d/p4de (SENDRECV: no 128-byte ordering, NCCL_PROTO=simple)",
        protocols=("Simple",),
        source=f"{_AWS_OFI} and v1.8.1-aws src/platform-aws.c configure_nccl_proto; "
               "ofiwg/libfabric v1.20.0 prov/efa/src/efa_base_ep.c:363; aws/aws-ofi-nccl "
               "issue #76 and PR #280")),
    ((2, 27), NcclSettings(
        "aws-ofi-nccl >= 1.16.0 on p4d/p4de (NCCL 2.27 on): NCCL_PROTO=simple, "
        "NCCL_BUFFSIZE=8388608",
        protocols=("Simple",), simple_buffer_bytes=8 << 20,
        source="aws/aws-ofi-nccl v1.16.0 src/platform-aws.cpp platform_data_map p4d/p4de .env "
               "(commit f3f5c40b, 2025-05-21); a p4d log of aws-ofi-nccl 1.16.2 with NCCL 2.27.3 "
               "prints 'Adding NCCL_BUFFSIZE=8388608 to environment'")),
)

_add(NetTransport(
    "efa", "NET/AWS Libfabric (EFA, p4d/p4de)", ("ethernet",), 9001,
    _IPV4 + _UDP + _ROCE_BTH_ICRC, ETH_L2_OVERHEAD,
    message_latency_us=EFA_P4D_MESSAGE_LATENCY_US, simple_extra_us=3.0,
    reported_latency_us=75.0, rendezvous_above_bytes=EFA_EAGER_MAX_BYTES,
    rendezvous_extra_us=EFA_P4D_READ_EXTRA_US, settings=EFA_P4D_SETTINGS,
    sources={"framing": "AWS EC2 jumbo frames, 9001 B MTU inside a VPC (AWS EC2 User Guide, "
                        "'Network MTU for your EC2 instance'); SRD's own header is not public: "
                        "taken as IPv4+UDP+12+4 B like RoCEv2 (assumption)",
             "message_latency_us": "EFA_P4D_MESSAGE_LATENCY_US: fitted on the 8 B - 8 KiB rows "
                                   "of nccl_awsome_p4de_2node_efa.csv (AWS publishes no "
                                   "per-message figure for p4d's EFA; the plugin's 75 us is a "
                                   "tuning value and stays reported_latency_us)",
             "rendezvous": "EFA_EAGER_MAX_BYTES (libfabric v1.20.0 efa_hmem.c:85, CUDA buffers "
                           "read-based above one packet) and EFA_P4D_READ_EXTRA_US (fitted on "
                           "the 16 KiB - 512 KiB rows of the same file)",
             "simple_extra_us": f"{_AWS_OFI} include/nccl_ofi_param.h TUNER_NET_COMP_OVERHEAD "
                                "default 3: 'With EFA, we expect a ~2usec cost in the device "
                                "and ~1usec cost to write that completion up to the host stack'",
             "reported_latency_us": f"{_AWS_OFI} src/platform-aws.cpp p4d '.latency = 75.0'; "
                                    "commit d87d61e0 (2023-05-31) 'reduced to 75us for p4d, "
                                    "p4de and p5'",
             "protocol": f"{_AWS_OFI} src/platform-aws.cpp p4d '.default_protocol = "
                         "PROTOCOL::SENDRECV'",
             "settings": "EFA_P4D_SETTINGS: Simple only (no 128-byte ordering on SENDRECV); "
                         "the plugin's 8 MiB Simple buffer from NCCL 2.27 (aws-ofi-nccl 1.16.0)"}))
_add(NetTransport(
    "efa2", "NET/AWS Libfabric (EFAv2, p5/p5e)", ("ethernet",), 9001,
    _IPV4 + _UDP + _ROCE_BTH_ICRC, ETH_L2_OVERHEAD,
    message_latency_us=20.0, simple_extra_us=3.0, reported_latency_us=75.0,
    handshake_above_bytes=8192,
    sources={"framing": "as efa",
             "handshake_above_bytes": f"{_AWS_OFI} include/nccl_ofi_param.h EAGER_MAX_SIZE "
                                      "8192 ('Message sizes greater than this limit will "
                                      "always be sent using RDMA write instead of eagerly'); "
                                      "aws/aws-ofi-nccl v1.8.1-aws src/nccl_ofi_rdma.c send(): "
                                      "without the receiver's RDMA control message a larger "
                                      "send is queued 'so that we are able to send RDMA write "
                                      "as soon as we receive the RDMA control message'",
             "message_latency_us": f"{_AWS_OFI} src/tuner/nccl_ofi_model.cpp "
                                   "model_platform_params P5 & P5e '.net_lat = 20.0' "
                                   "(include/tuner/nccl_ofi_tuner_model.h: 'net_lat; /* 2 nodes, "
                                   "8B RDMA w/imm lat */'); P5en 18.0",
             "simple_extra_us": f"{_AWS_OFI} include/nccl_ofi_param.h TUNER_NET_COMP_OVERHEAD 3",
             "reported_latency_us": f"{_AWS_OFI} src/platform-aws.cpp 'p5/p5e' "
                                    "'.latency = 75.0'",
             "rails": f"{_AWS_OFI} tuner model P5 '.num_rails = 4' (four 100 Gbps EFA per GPU, "
                      "one NCCL device); MIN_STRIPE_SIZE 128 KiB: smaller messages use one rail "
                      "(include/nccl_ofi_param.h)",
             "protocol": f"{_AWS_OFI} src/platform-aws.cpp p5 '.default_protocol = "
                         "PROTOCOL::RDMA'"}))
#: GPUDirect-TCPXO's documented NCCL environment by plugin release, with the NCCL it ships
#: (GoogleCloudPlatform/container-engine-accelerators ``gpudirect-tcpxo/README.md``, the
#: release notes, @992db812): every release sets ``NCCL_BUFFSIZE=8388608`` and
#: ``NCCL_MIN_NCHANNELS=4`` and loads Google's tuner plugin (its config is not public).
_TCPXO_NOTES = "GoogleCloudPlatform/container-engine-accelerators @992db812 gpudirect-tcpxo/README.md"
TCPXO_SETTINGS = (
    ((2, 21), NcclSettings(
        "plugin v1.0.1-v1.0.8 (May 2024 - Feb 2025), NCCL 2.21.5",
        protocols=("Simple",), algorithms=("ring", "tree"), simple_buffer_bytes=8 << 20,
        source=f"{_TCPXO_NOTES}, releases of May 20 2024 to Feb 06 2025: 'NCCL_ALGO=Ring,Tree', "
               "'NCCL_PROTO=Simple', 'NCCL_NVLS_ENABLE=0', 'NCCL_BUFFSIZE=8388608'; "
               "compatible NCCL 'nccl-2.21.5' (v1.0.8: 2.21.5-2.23.4, LL128 only in a second "
               "profile)")),
    ((2, 23), NcclSettings(
        "plugin v1.0.9-v1.0.11 (May - Jun 2025), NCCL 2.23",
        protocols=("LL128", "Simple"), algorithms=("ring", "tree"), simple_buffer_bytes=8 << 20,
        source=f"{_TCPXO_NOTES}, May 01 2025 ('this release now makes LL128 the default') and "
               "Jun 27 2025: 'NCCL_ALGO=Ring,Tree', 'NCCL_PROTO=Simple,LL128', "
               "'NCCL_NVLS_ENABLE=0', 'NCCL_BUFFSIZE=8388608'; default NCCL 2.23")),
    ((2, 26), NcclSettings(
        "plugin v1.0.12 and later (Aug 2025 -), NCCL 2.26 / 2.28",
        protocols=("LL128", "Simple"), algorithms=None, simple_buffer_bytes=8 << 20,
        source=f"{_TCPXO_NOTES}, Aug 21 2025 ('This release now incorporates NVLSTree into the "
               "default configuration'; NCCL_ALGO and NCCL_NVLS_ENABLE removed, "
               "'NCCL_NVLSTREE_MAX_CHUNKSIZE=131072', 'NCCL_BUFFSIZE=8388608'); default "
               f"NCCL 2.26, later 2.28.7; {_TCPXO} tcpxo_scripts/nccl-env-profile.sh")),
)

_add(NetTransport(
    "tcpxo", "NET/FasTrak (GPUDirect-TCPXO)", ("ethernet",), 8244, _IPV4 + _TCP + _TCP_TS,
    ETH_L2_OVERHEAD, reported_latency_us=0.0, flows_per_connection=2,
    settings=TCPXO_SETTINGS, message_latency_us=TCPXO_MESSAGE_LATENCY_US,
    sources={"framing": "GPU-NIC VPCs created with '--mtu=8244' (Google xpk cluster network; "
                        "dstackai/dstack examples/clusters/a3mega); TCP/IPv4 with timestamps "
                        "(RFC 791, 9293, 7323) + IEEE 802.3 L2",
             "reported_latency_us": f"{_TCPXO} tcpdirect_plugin/fastrak_offload/nccl_shim.cc:966 "
                                    "'props.latency = 0'",
             "flows_per_connection": f"{_TCPXO} tcpdirect_plugin/fastrak_offload/const_params.h"
                                     ":103 FASTRAK_NUM_FLOWS default 2 (max kFastrakMaxNumFlows "
                                     "8); tcpxo_scripts/nccl-env-profile-comma.sh "
                                     "NCCL_FASTRAK_NUM_FLOWS=2",
             "settings": "TCPXO_SETTINGS: by the NCCL release the plugin ships with",
             "message_latency_us": "none published; NCCL's own figure stands (the 43 us "
                                   "fitted before assumed LL128 on a Simple-only run: "
                                   "TCPXO_MESSAGE_LATENCY_US)"}))
_add(NetTransport(
    "tcpx", "NET/GPUDirectTCPX", ("ethernet",), 8244, _IPV4 + _TCP + _TCP_TS, ETH_L2_OVERHEAD,
    sources={"framing": "GPU-NIC VPCs 'tcpx-net-$N --mtu=8244' (GPUDirect-TCPX setup guides)",
             "message_latency_us": "not published (no source found): NCCL's figure stands"}))
_add(NetTransport(
    "socket", "NET/Socket", ("ethernet", "ib"), 1500, _IPV4 + _TCP + _TCP_TS, ETH_L2_OVERHEAD,
    host_buffers_only=True,
    sources={"host_buffers_only": "NVIDIA/nccl v2.27.3-1 src/transport/net_socket.cc:108 "
                                  "'props->ptrSupport = NCCL_PTR_HOST'",
             "framing": "1500 B Ethernet MTU, TCP/IPv4 with timestamps (RFC 791, 9293, 7323) + "
                        "IEEE 802.3 L2",
             "reported_latency_us": f"{_NCCL} src/transport/net_socket.cc:101 "
                                    "'props->latency = 0; // Not set'",
             "flows_per_connection": f"{_NCCL} src/transport/net_socket.cc:246-272: "
                                     "NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD, default 0 "
                                     "helper threads and 1 socket (AWS vendor 0x1d0f: 2 x 8; "
                                     "GCP 0x1ae0: 4 x 1); MAX_SOCKETS 64, MAX_THREADS 16; a "
                                     "request is split in tasks of at least MIN_CHUNKSIZE 64 KiB "
                                     "(l.115, 498)"}))

# -- HPE Slingshot-11: aws-ofi-nccl over libfabric's ``cxi`` provider (Cassini NIC) ---------------
# NCCL reaches Slingshot through the same aws-ofi-nccl plugin as EFA (HPE's application note
# names it the required backend), over libfabric's ``cxi`` provider. The plugin has no platform
# file for CXI, so it reports OFI_NCCL_NET_LATENCY's default to NCCL and runs its SENDRECV
# protocol (tagged send/recv; RDMA is chosen only for several NICs per NCCL device). What one
# NCCL message costs depends on the libfabric settings a site documents:
#
# * ``slingshot``: libfabric's default rendezvous threshold (16 KiB) with hardware matching,
#   as NERSC's settings and HPE's current ccl_env.sh (shs-ccl-docs @b1502307) keep it: the
#   small messages of latency-bound calls go eagerly, one send each;
# * ``slingshot-sw``: the same thresholds with software message matching
#   (FI_CXI_RX_MATCH_MODE=software, CSCS's NCCL settings until June 2026): libfabric posts no
#   receive to the NIC, so every eager payload lands in a host request buffer and the
#   receiving CPU copies it into the GPU's buffer, a CPU store through the GPU mapping up to
#   4 KiB and a cudaMemcpy above;
# * ``slingshot-rdzv``: HPE's NCCL environment at shs-ccl-docs @438fccea
#   (FI_CXI_RDZV_THRESHOLD=0, ..._GET_MIN=0, ..._EAGER_SIZE=0, FI_CXI_RDZV_PROTO=alt_read;
#   CSCS listed it as the workaround for NCCL hangs and made it the default in June 2026;
#   Isambard-AI's and Sigma2 Olivia's NCCL modules set it): every non-empty message by
#   rendezvous, a header and then an RDMA Get of the payload.
#
# Above the eager limit (threshold plus FI_CXI_RDZV_GET_MIN) a message goes by rendezvous in
# every setting: its first FI_CXI_RDZV_THRESHOLD bytes with the header, the rest by a Get.
_SHS_DOCS = "HewlettPackard/shs-docs @ef07c6cef0f065741e0ca35ac796a22eb8574578"
_SHS_CCL = "HewlettPackard/shs-ccl-docs @438fcceae02ef00292a72d3ae47d4d090b0b9215"
_CXI_DRIVER = "HewlettPackard/shs-cxi-driver @9ce667e4cfe8f3a6dc6d36a98bc2ad4c9e29c6ad"
_LIBFABRIC = "ofiwg/libfabric @af8ddbe92f033b7deb9c4e4f47197d1fd4bcf150"
_CSCS = "eth-cscs/cscs-docs @80abed138e7cc52ebf6703b82ed02520ab9bf92f"
_CSCS_2025 = "eth-cscs/cscs-docs @a186743fdcde7a6fea819fb56358c34b889cc022"

#: Payload of one Slingshot (Portals, "HPC Ethernet") packet and the largest header around it:
#: "HPC MTU is fixed at 2k. The largest HPC header is 64 bytes." -> C_MAX_HPC_MTU = 2048 + 64
#: (HewlettPackard/shs-cxi-driver drivers/net/ethernet/hpe/ss1/cass_core.h:69-70); ``cxi_stat``
#: prints "Link MTU: 2112" (HewlettPackard/shs-docs fabric_validation/concepts.md).
CXI_PACKET_PAYLOAD_BYTES = 2048
CXI_MAX_HEADER_BYTES = 64

#: Two-sided 8-byte message latency between two Cassini NICs, half the round trip, us: mean of
#: ``cxi_send_lat`` (eager send, IDC, host memory) in HPE's example, 1.64 us (HewlettPackard/
#: shs-docs troubleshoot/cxi/cxi_diags_latency.md, "cxi_send_lat").
CXI_SEND_LATENCY_US = 1.64

#: 64-byte RDMA read (Get) round trip, us: mean of ``cxi_read_lat`` in the same HPE page (2.70 us;
#: client and server on one NIC there, so the two switch traversals of a real Get are missing:
#: a lower bound).
CXI_READ_LATENCY_US = 2.70

#: libfabric's default rendezvous threshold of the cxi provider, bytes: sends up to it go
#: eagerly (ofiwg/libfabric prov/cxi/include/cxip.h ``CXIP_RDZV_THRESHOLD 16384``; man/fi_cxi.7.md
#: "FI_CXI_RDZV_THRESHOLD ... The default is 16384").
CXI_RDZV_THRESHOLD_BYTES = 16384

#: One rendezvous message: the header (a send) plus the receiver's Get round trip, us.
CXI_RENDEZVOUS_MESSAGE_US = CXI_SEND_LATENCY_US + CXI_READ_LATENCY_US

#: libfabric's default FI_CXI_RDZV_GET_MIN, bytes ("Avoid single packet Gets": ofiwg/libfabric
#: @af8ddbe9 prov/cxi/src/cxip_info.c:622 ``.rdzv_get_min = 2049``): a send up to the
#: threshold plus this goes eagerly (man/fi_cxi.7.md:1005-1011, FI_CXI_RDZV_GET_MIN). NERSC
#: sets 0.
CXI_RDZV_GET_MIN_BYTES = 2049

#: Largest copy into GPU memory libfabric's cxi provider does with CPU stores through the GPU's
#: registered mapping; a larger one takes the HMEM copy functions (ofiwg/libfabric @af8ddbe9
#: prov/cxi/include/cxip.h:2113-2135 ``cxip_copy_to_md``: "Favor dev reg access instead of
#: relying on HMEM copy functions"; ``CXIP_SAFE_DEVMEM_COPY_THRESH`` 4096 at cxip.h:134,
#: FI_CXI_SAFE_DEVMEM_COPY_THRESHOLD), which for CUDA is a cudaMemcpy (src/hmem_cuda.c:455-459
#: ``cuda_copy_to_dev``). Older releases say it more plainly ("the slow HMEM copy routines",
#: ``cxip_rxc_copy_to_hmem``).
CXI_SAFE_DEVMEM_COPY_BYTES = 4096

#: The fixed cost of one small cudaMemcpy, us: "currently a cudaMemcpy can incur in a 6-7us
#: overhead" (NVIDIA/gdrcopy @00cf81f3 README.md, "What is inside"); the middle of the stated
#: range.
CUDA_MEMCPY_US = 6.5

_CXI_SOURCES = {
    "framing": f"{_CXI_DRIVER} drivers/net/ethernet/hpe/ss1/cass_core.h:69-70 'HPC MTU is fixed "
               "at 2k. The largest HPC header is 64 bytes' (C_MAX_HPC_MTU = 2048 + 64); 'Link "
               f"MTU: 2112' ({_SHS_DOCS} fabric_validation/concepts.md). Every packet is charged "
               "the largest header and no bytes outside it (Slingshot's HPC Ethernet framing, "
               "'ifg-hpc' in the driver's README.eth; assumption) -> 2048/2112 = 0.9697. "
               "Cross-check, not fitted: osu_bw 4 MiB between two Perlmutter GPU nodes "
               "24,256 MB/s = 0.970 of 25 GB/s (dingp/communication-libraries-image "
               "benchmarks/reports/perlmutter-20260426T072155Z.md)",
    "simple_extra_us": "none: aws-ofi-nccl's TUNER_NET_COMP_OVERHEAD (3 us) is stated for EFA "
                       "only (include/nccl_ofi_param.h)",
    "reported_latency_us": f"{_AWS_OFI} include/nccl_ofi_param.h:218-221 OFI_NCCL_NET_LATENCY "
                           "default 0.0 ('unless the configured platform sets a specific "
                           "value'); src/nccl_ofi_net.cpp:481 'props->latency = "
                           "ofi_nccl_net_latency.get()'; only src/platform-aws.cpp sets one",
    "flows_per_connection": f"{_AWS_OFI} src/nccl_ofi_net.cpp:244-330: SENDRECV (one libfabric "
                            "endpoint per NIC) unless RDMA reports several NICs per device; "
                            "'NET/OFI Using transport protocol SENDRECV' with 'Selected provider "
                            "is cxi ... (found 4 nics)' on Perlmutter (dingp/communication-"
                            "libraries-image benchmarks/reports/nccl-host-aws-ofi-1.19.0-"
                            "libfabric-2.1.0-20260508.md)",
    "connection_limits": f"{_LIBFABRIC} man/fi_cxi.7.md: FI_TAGGED rendezvous messages have "
                         "32K-256 ID mappings (outstanding rendezvous sends); "
                         f"FI_CXI_DEFAULT_TX_SIZE 2048 ({_SHS_CCL} ccl_env.sh) or 16384 "
                         f"({_CSCS} docs/software/communication/nccl_env_vars): far above "
                         "NCCL's 8 in-flight slices per connection, so no rate limit is charged",
    "protocols": f"{_CSCS} docs/software/communication/nccl_env_vars 'export "
                 "NCCL_PROTO=^LL128' ('Starting with nccl 2.27 ... LL128 ... typically performs "
                 "worse on Slingshot'); HPE's ccl_env.sh leaves NCCL_PROTO unset",
    "nccl_settings": f"{_SHS_CCL} nccl/nccl_tuning_guide.md: NCCL_CROSS_NIC=1, "
                     "NCCL_NET_GDR_LEVEL=PHB ('Required to enable RDMA between GPUs'), "
                     "NCCL_NET='AWS Libfabric'",
    "tuner": f"none: {_AWS_OFI} tuners cover AWS platforms only (is_region_supported, "
             "is_model_supported)",
}


#: Where a message above the eager limit, and its cost beyond NCCL's network latency, come from.
_CXI_RENDEZVOUS_SOURCE = (
    f"{_LIBFABRIC} man/fi_cxi.7.md FI_CXI_RDZV_GET_MIN: 'A Send with length less than or equal "
    "to FI_CXI_RDZV_THRESHOLD plus FI_CXI_RDZV_GET_MIN will be performed using the eager "
    "protocol. Larger Sends will be performed using the rendezvous protocol with "
    "FI_CXI_RDZV_THRESHOLD bytes of payload sent eagerly and the remainder of the payload read "
    "from the source using a Get'; threshold 16384 (prov/cxi/include/cxip.h), GET_MIN 2049 by "
    "default (prov/cxi/src/cxip_info.c), 0 with NERSC's settings; the Get adds cxi_read_lat "
    f"2.70 us to the header's 1.64 ({_SHS_DOCS} troubleshoot/cxi/cxi_diags_latency.md): "
    "4.34 us, 1.64 beyond NCCL's 2.7")


def _slingshot(name: str, label: str, message_us: float, message_source: str,
               eager_bytes: int | None = None, host_copy: bool = False,
               extra_sources: dict | None = None) -> NetTransport:
    """A Slingshot transport; ``eager_bytes``: the eager limit (None: every message is a
    rendezvous, priced by ``message_us``); ``host_copy``: software matching."""
    rendezvous = {} if eager_bytes is None else dict(
        rendezvous_above_bytes=eager_bytes, rendezvous_eager_bytes=CXI_RDZV_THRESHOLD_BYTES,
        rendezvous_extra_us=max(0.0, CXI_RENDEZVOUS_MESSAGE_US - NCCL_NET_LL_LATENCY_US))
    copy = {} if not host_copy else dict(host_copy_above_bytes=CXI_SAFE_DEVMEM_COPY_BYTES,
                                         host_copy_us=CUDA_MEMCPY_US)
    return NetTransport(
        name, label, ("ethernet",), CXI_PACKET_PAYLOAD_BYTES + CXI_MAX_HEADER_BYTES,
        CXI_MAX_HEADER_BYTES, 0, message_latency_us=message_us, simple_extra_us=0.0,
        reported_latency_us=0.0, flows_per_connection=1, protocols=("LL", "Simple"),
        **rendezvous, **copy,
        sources={**_CXI_SOURCES, "message_latency_us": message_source,
                 **({"rendezvous": _CXI_RENDEZVOUS_SOURCE} if rendezvous else {}),
                 **(extra_sources or {})})


_add(_slingshot(
    "slingshot", "NET/AWS Libfabric (CXI, HPE Slingshot-11)", CXI_SEND_LATENCY_US,
    f"{_SHS_DOCS} troubleshoot/cxi/cxi_diags_latency.md: cxi_send_lat 8 B mean 1.64 us (eager "
    "send between two NICs); messages up to FI_CXI_RDZV_THRESHOLD (default 16384 B, "
    f"{_LIBFABRIC} prov/cxi/include/cxip.h) go eagerly, as with NERSC's settings "
    "(FI_CXI_RDZV_GET_MIN=0 only; docs.nersc.gov Perlmutter known issues, quoted in "
    "PRONTOLab/GB-25 README) and HPE's current ccl_env.sh (HewlettPackard/shs-ccl-docs "
    "@b1502307: no threshold, FI_CXI_RX_MATCH_MODE=hybrid). Below NCCL's 2.7 us: nothing is "
    "added",
    eager_bytes=CXI_RDZV_THRESHOLD_BYTES))
_add(_slingshot(
    "slingshot-sw", "NET/AWS Libfabric (CXI, HPE Slingshot-11, software matching)",
    CXI_SEND_LATENCY_US,
    "as slingshot: eager sends 1.64 us (cxi_send_lat) up to FI_CXI_RDZV_THRESHOLD + "
    "FI_CXI_RDZV_GET_MIN = 16384 + 2049 B (libfabric defaults, no FI_CXI_RDZV_* in CSCS's "
    f"nccl_env_vars at {_CSCS_2025})",
    eager_bytes=CXI_RDZV_THRESHOLD_BYTES + CXI_RDZV_GET_MIN_BYTES, host_copy=True,
    extra_sources={
        "host_copy": f"{_CSCS_2025} docs/software/communication/nccl_env_vars "
                     "'FI_CXI_RX_MATCH_MODE=software' (until the 2026-06-17 change in "
                     f"docs/clusters/daint.md at {_CSCS}); {_LIBFABRIC} man/fi_cxi.7.md "
                     "FI_CXI_RX_MATCH_MODE (l.1151) 'software - Message matching is fully "
                     "onloaded', eager request buffers 'to handle incoming unmatched "
                     "messages'; prov/cxi/include/cxip.h:2056 'User posted requests are queued "
                     "here instead of on hardware if the RXC is in software endpoint mode' and "
                     "cxip_copy_to_md (l.2113-2135): a store through the registered mapping up "
                     "to FI_CXI_SAFE_DEVMEM_COPY_THRESHOLD (4096 B, l.134), else the HMEM copy "
                     "(src/hmem_cuda.c:455-459: cudaMemcpy); 'a cudaMemcpy can incur in a "
                     "6-7us overhead' (NVIDIA/gdrcopy @00cf81f3 README.md): 6.5 us per message "
                     "whose eager payload exceeds 4 KiB"}))
_add(_slingshot(
    "slingshot-rdzv", "NET/AWS Libfabric (CXI, HPE Slingshot-11, rendezvous)",
    CXI_RENDEZVOUS_MESSAGE_US,
    f"{_SHS_DOCS} troubleshoot/cxi/cxi_diags_latency.md: cxi_send_lat 8 B mean 1.64 us + "
    "cxi_read_lat 64 B mean 2.70 us (loopback on one NIC: a lower bound) = 4.34 us, one "
    f"rendezvous message (header + Get) under {_SHS_CCL} ccl_env.sh FI_CXI_RDZV_THRESHOLD=0, "
    "FI_CXI_RDZV_GET_MIN=0, FI_CXI_RDZV_EAGER_SIZE=0, FI_CXI_RDZV_PROTO=alt_read; "
    f"{_LIBFABRIC} man/fi_cxi.7.md (rendezvous: header, then RDMA Get of the payload)"))


#: The topology's legacy ``transport`` values: ``rdma`` is NCCL's IB verbs transport on either
#: fabric; ``tcp`` is NCCL's socket transport.
ALIASES = {("ib", "rdma"): "ib", ("ethernet", "rdma"): "roce", ("ib", "tcp"): "socket",
           ("ethernet", "tcp"): "socket"}

#: NCCL's socket transport flows per connection by cloud (``net_socket.cc`` autodetection).
SOCKET_FLOWS = {"default": 1, "aws": 2 * 8, "gcp": 4 * 1}


def transport_names() -> tuple:
    """Every ``transport`` value a topology may name (legacy ``rdma``/``tcp`` included)."""
    return ("rdma", "tcp") + tuple(TRANSPORTS)


def get_transport(name: str, network: str = "ib") -> NetTransport:
    """The :class:`NetTransport` a topology's ``transport`` (and ``network``) name."""
    key = str(name)
    if key in TRANSPORTS:
        return TRANSPORTS[key]
    alias = ALIASES.get((str(network), key))
    if alias is None:
        raise ConfigError(f"unknown transport {name!r}; known: {', '.join(transport_names())}")
    return TRANSPORTS[alias]


def graph_transport(graph) -> NetTransport:
    """The transport of a topology graph (its ``transport`` and ``network`` parameters)."""
    params = graph.graph.get("params") or {}
    return get_transport(params.get("transport", "rdma"), params.get("network", "ib"))


def _resolve(transport, network: str = "ib") -> NetTransport:
    if isinstance(transport, NetTransport):
        return transport
    return get_transport(transport, network)


#: What one NCCL network connection (one channel to one peer) carries when its buffers are
#: in host memory, bytes/s: the GPU's thread block writes the bytes it sends into host memory
#: and reads the bytes it receives from there, across PCIe, and the transport moves them
#: between the hosts (NCCL's net transport without GPUDirect RDMA: ``sendSetup`` /
#: ``recvSetup`` place every protocol's buffer in host memory when ``useGdr`` is 0).
#: No source gives this rate. FITTED (docs/validation/sources.md, "Channels staged through host
#: memory"): the one value, on a 0.25 GB/s grid, with the least mean absolute error of the
#: >= 1 MiB rows of the two published two-machine runs that stage every channel through host
#: memory, Red Hat's L40S pair over NCCL's sockets (8.0 GB/s on two channels) and over RoCE
#: with GPUDirect RDMA off by NCCL's distance rule (9.6 GB/s on two channels);
#: ``tests/data/measurements/nccl_redhat_l40s_2x1_socket.csv``, ``..._2x2_roce.csv``.
HOST_STAGED_CHANNEL_BYTES_PER_S = 4.75e9

#: NCCL enables GPUDirect RDMA between a GPU and a NIC no farther apart than this path type
#: (``NCCL_NET_GDR_LEVEL``'s default, ``PATH_PXB``: through PCIe switches only; NVIDIA/nccl
#: v2.27.3-1 src/graph/paths.cc ``ncclTopoCheckGdr``: "GPU Direct RDMA Disabled for GPU %d /
#: HCA %lx (distance %d > %d)"). A path across the host bridge (``phb``) stages through host
#: memory.
GDR_PATHS = ("pxb",)


def host_staged(transport, network: str = "ib", gpu_nic_path: str = "pxb") -> bool:
    """Whether NCCL stages a network connection's bytes through host memory on ``transport``:
    always for a transport of host buffers only (sockets), and without GPUDirect RDMA, which
    NCCL turns off when the GPU-NIC path (``pxb`` or ``phb``, :class:`~simulator.library.
    machine.MachineFacts`) is longer than :data:`GDR_PATHS` allows."""
    return _resolve(transport, network).host_buffers_only or gpu_nic_path not in GDR_PATHS


# -- hooks for the nccl library -------------------------------------------------------------
def network_step_latency_us(transport, protocol: str, network: str = "ib") -> float:
    """Latency (us) a transport adds to every network step of ``protocol`` beyond NCCL's
    ``hwLat[NET]`` (0 for NCCL's own IB and socket transports)."""
    return _resolve(transport, network).step_latency_us(protocol)


def handshake_latency_us(transport, message_bytes: float, network: str = "ib") -> float:
    """How long a call's first network message of ``message_bytes`` waits for the receiver's
    control message on ``transport``, us (see :class:`NetTransport`)."""
    return _resolve(transport, network).handshake_us(message_bytes)


def message_extra_us(transport, message_bytes: float, network: str = "ib") -> float:
    """The latency one network message of ``message_bytes`` adds on ``transport`` beyond its
    step latency, us (see :meth:`NetTransport.message_extra_us`)."""
    return _resolve(transport, network).message_extra_us(message_bytes)


def proxy_step_us(transport, cpu_vendor: str, cpu_family: str = "x86",
                  network: str = "ib") -> float:
    """What one network step on a call's latency path costs the proxies on ``transport``
    beyond NCCL's ``hwLat[NET]``, us (see :attr:`NetTransport.proxy_posts_per_step`)."""
    return _resolve(transport, network).proxy_step_us(cpu_vendor, cpu_family)


def host_copy_us(transport, message_bytes: float, network: str = "ib") -> float:
    """The receiving CPU's copy of one network message of ``message_bytes`` into the GPU on
    ``transport``, us (see :meth:`NetTransport.host_copy_us_for`)."""
    return _resolve(transport, network).host_copy_us_for(message_bytes)


def reported_latency_us(transport, protocol: str, network: str = "ib",
                        version: tuple = (2, 30)) -> float:
    """What NCCL's tuner adds to each network step for the latency the transport reports
    (``props->latency``): NCCL >= 2.18 adds it once, twice for Simple (tuning.cc)."""
    if tuple(version) < (2, 18):
        return 0.0
    value = _resolve(transport, network).reported_latency_us
    return value * (2 if protocol == "Simple" else 1)


def nccl_settings(transport, network: str = "ib", version: tuple = (2, 30)) -> NcclSettings:
    """The NCCL environment the transport's platform documents for NCCL ``version``."""
    return _resolve(transport, network).settings_for(version)


def enabled_protocols(transport, network: str = "ib", version: tuple = (2, 30)) -> tuple | None:
    """Protocols the platform's documented NCCL settings enable (None: all of NCCL's)."""
    return nccl_settings(transport, network, version).protocols


#: Plugins that ship a tuner (``NCCL_TUNER_PLUGIN``), and when it overrides NCCL's own choice.
#: aws-ofi-nccl's region and model tuners cover p5/p5e/p5en/p6 only (``is_region_supported``,
#: ``is_model_supported``) and return NCCL's own choice for ``num_nodes <= 2``
#: (src/tuner/nccl_ofi_regions.cpp:2013, 2096; src/tuner/nccl_ofi_model.cpp); its p5/p5e
#: regions are :mod:`.ofi_regions`, which the ``nccl`` library follows from three machines on.
#: Google's TCPXO tuner ships as a closed binary with ``a3plus_tuner_config.textproto`` (not
#: public).
PLUGIN_TUNERS = {"efa2": ("aws-ofi-nccl region tuner", 3), "tcpxo": ("GCP NCCL tuner (closed)",
                                                                      None)}


def plugin_tuner_applies(transport, nodes: int, network: str = "ib") -> bool:
    """Whether the transport's plugin tuner, not NCCL's, picks the algorithm for ``nodes``
    machines (False where its rules are not public or it defers to NCCL)."""
    entry = PLUGIN_TUNERS.get(_resolve(transport, network).name)
    return bool(entry and entry[1] is not None and nodes >= entry[1])


def describe() -> list[dict]:
    """One row per transport: its numbers and their sources."""
    rows = []
    for t in TRANSPORTS.values():
        rows.append({"transport": t.name, "label": t.label, "efficiency": t.efficiency,
                     "step_latency_LL_us": t.step_latency_us("LL"),
                     "step_latency_Simple_us": t.step_latency_us("Simple"),
                     "reported_latency_us": t.reported_latency_us,
                     "flows_per_connection": t.flows_per_connection,
                     "handshake_above_bytes": t.handshake_above_bytes,
                     "rendezvous_above_bytes": t.rendezvous_above_bytes,
                     "rendezvous_extra_us": t.rendezvous_extra_us,
                     "host_copy_above_bytes": t.host_copy_above_bytes,
                     "host_copy_us": t.host_copy_us,
                     "proxy_posts_per_step": t.proxy_posts_per_step,
                     "host_buffers_only": t.host_buffers_only,
                     "host_staged_channel_GBps": (HOST_STAGED_CHANNEL_BYTES_PER_S / 1e9
                                                  if t.host_buffers_only else None),
                     "protocols": t.settings_for().protocols,
                     "settings": [(".".join(map(str, since)), entry.release, entry.protocols,
                                   entry.algorithms, entry.simple_buffer_bytes)
                                  for since, entry in t.settings],
                     "sources": dict(t.sources)})
    return rows
