"""NCCL's data path inside one ring call: channels, chunks, slices and the syncs they cost.

NCCL's tuner prices a call as ``latency + bytes / bandwidth`` (``src/graph/tuning.cc``): the
per-step latency is paid once per ring step, and every channel is there from the first byte.
The kernels do something else (NVIDIA/nccl ``src/device/all_reduce.h``, ``prims_simple.h``,
``prims_ll.h``, ``prims_ll128.h``, ``src/enqueue.cc``; the same from 2.5 to 2.30):

Channels
    A call runs on ``nc`` channels, one thread block each. ``nc`` starts at the
    communicator's channel count (the graph search's channels, doubled by ``connect.cc``:
    ``nChannels = min(MAXCHANNELS, nChannels*2)``) and drops by one while
    ``bytes < nc x threads x threadThreshold`` (``enqueue.cc``, ring/tree channel tuning;
    Simple 512 threads x 64 B = 32 KiB per channel, LL 512 x 8 x ranks, LL128 640 x 8). NCCL
    2.30's planner also keeps at least ``MinTrafficPerChannel`` (32 KiB) of traffic on each.
    A channel is one thread block with its own share of the bandwidth: fewer channels move
    the bytes at ``nc / channels`` of the rate (``tuning.cc`` 2.10-2.2x:
    ``bw = bw / comm->nChannels * info->nChannels``), on one machine or across machines.
Chunks and loops
    Each channel moves its share of the message in chunks of ``chunkSteps`` FIFO steps: the
    FIFO has ``NCCL_STEPS`` = 8 slots of ``buffSize / 8`` bytes (Simple 4 MiB / 8 = 512 KiB; LL
    64 KiB of lines carrying 32 KiB; LL128 614,400 B carrying 576,000 B). Ring all-reduce,
    all-gather and reduce-scatter on Simple take ``ALLREDUCE_CHUNKSTEPS`` = 4 steps per chunk
    (2 MiB), in slices of ``ALLREDUCE_SLICESTEPS`` = 2 steps: 2 slices per chunk; LL and LL128
    one step per chunk, one slice. A channel's ring loop moves ``ranks`` chunks; a message
    needing more than one loop repeats the ``2(ranks-1)`` ring steps per loop
    (``for (gridOffset ...; gridOffset += loopSize)``), smaller messages shrink the chunk
    instead (``chunkCount = divUp(remCount, nranks)``).
Synchronisation
    Every slice, empty or not, is one wait -> copy -> barrier -> fence -> post round
    (``prims_simple.h`` ``genericOp``: ``waitPeer``, ``subBarrier``, ``reduceCopy``,
    ``barrier``, ``postPeer`` with ``fence_acq_rel_sys``; "Non-workers ... and empty slices"
    still wait and post). A thread block does these one after the other, and in a ring every
    rank waits on the flag its neighbour posted for the same slice one step earlier, so the
    synchronisation is not hidden behind the copy: each of a step's slices costs the step
    latency the tuner names (``hwLat[link][ring][protocol]``, "per-step latency") besides its
    bytes.

So one ring step of a call costs ``syncs x hwLat + bytes_per_channel / channel_rate`` with
``syncs = loops x busy slices``, where the tuner's line charges ``hwLat + bytes / rate``. A
step's slices are sized to its data, at least 1/32 of a full slice (:func:`busy_slices`): a
small message rides in one slice a step and pays the tuner's latency; from a few MiB (a
channel's step above 32 KiB with the default buffer) to a few hundred MiB (one loop, two busy
slices) the per-step latency is paid twice per step; and small messages run on fewer channels,
each at one channel's rate. The
:func:`ring_datapath` numbers are data: :meth:`simulator.library.nccl.NcclLibrary.plan`
writes ``syncs x hwLat`` into the links' per-step latency and caps every link out of a GPU at
``channels x`` one channel's rate, so every engine method times the same thing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .nccl_env import bounded_channels
from .nccl_constants import (BUFFSIZE, NCCL_STEPS, PAYLOAD_FRACTION, PCI_BW, RING_STEPS,
                             NcclVersion, ll_traffic_factor, min_traffic_per_channel)

#: Threads per channel by protocol (``NCCL_SIMPLE_MAX_NTHREADS`` 512, ``NCCL_LL_MAX_NTHREADS``
#: 512, ``NCCL_LL128_MAX_NTHREADS`` 640; ``src/include/device.h``).
THREADS = {"LL": 512, "LL128": 640, "Simple": 512}
#: Bytes per thread below which a channel is dropped (``NCCL_LL_THREAD_THRESHOLD`` 8, x ranks
#: for rings; ``NCCL_LL128_THREAD_THRESHOLD`` 8; ``NCCL_SIMPLE_THREAD_THRESHOLD`` 64;
#: ``src/include/comm.h``, ``tuning.cc``).
THREAD_THRESHOLD = {"LL": 8, "LL128": 8, "Simple": 64}
#: All-reduce traffic per byte in NCCL's planner (``ncclFuncTrafficPerByte``: 2 for
#: all-reduce, ranks for all-gather and reduce-scatter, 1 otherwise).
TRAFFIC_PER_BYTE = {"allreduce": 2}


def release_of(version) -> tuple:
    """(major, minor) of an NCCL release: a table's own, or the tuple given."""
    return version.number if isinstance(version, NcclVersion) else tuple(version)


@dataclass(frozen=True)
class DataPath:
    """How one ring call moves its bytes (see the module docstring).

    Attributes
    ----------
    protocol : str
    channels_max : int
        The communicator's channels (runtime: twice the graph search's, at most MAXCHANNELS).
    channels : int
        Channels this call runs on.
    threads : int
        Threads per channel before the channel tuning.
    chunk_bytes : int
        Payload bytes of one chunk (one channel, one ring step, one loop) at full size.
    slices_per_chunk : int
        Slices (wait/post rounds) per chunk.
    loops : int
        Ring loops a channel runs.
    syncs_per_step : int
        ``loops x slices_per_chunk``: wait/post rounds per ring step.
    rate_fraction : float
        ``channels / channels_max``: the share of the bandwidth the call's channels carry.
    """

    protocol: str
    channels_max: int
    channels: int
    threads: int
    chunk_bytes: int
    slices_per_chunk: int
    loops: int
    syncs_per_step: int
    rate_fraction: float

    def as_notes(self) -> dict:
        return {"dp_channels_max": self.channels_max, "dp_channels": self.channels,
                "dp_chunk_bytes": self.chunk_bytes, "dp_slices_per_chunk":
                self.slices_per_chunk, "dp_loops": self.loops,
                "dp_syncs_per_step": self.syncs_per_step,
                "dp_rate_fraction": self.rate_fraction}


#: What one LL128 ring channel moves on one machine, as a fraction of the rate NCCL's tuner
#: gives it (``CHANNEL_SPEED`` / 2 x ``120/128``, at most ``perChMaxRingLL128Bw``), by GPU
#: generation. NCCL's tuner keeps its own figure (it picks LL128 up to 16 MiB on 8 A100);
#: only the call's execution runs at this share. No source states it: it is **fitted** (least
#: |signed bias|, grid 0.01) on the three LL128 rows (4, 8, 16 MiB) of the one-process-per-GPU
#: run in ``tests/data/measurements/nccl_thanos_a100sxm80_1node.csv`` (``thanos_a100_mpi``:
#: 8 x A100-SXM4-80GB, NVSwitch, ``mpirun -np 8 ... -g 1``), where 1.0 left them 15.4 % too
#: fast; 0.77 leaves -0.1 %. Checked on the files it was not fitted to (the same machine's
#: ``-g 8`` run, the dkh and OCI DGX-A100 tables): docs/validation/sources.md, "LL128 rings on
#: one A100 machine". Other generations keep the tuner's rate (no single-machine LL128 table).
LL128_RING_CHANNEL_RATE = {"ampere": 0.77}


def runtime_channels(version: NcclVersion, graph_channels: int, bounds=None) -> int:
    """The communicator's channels: the search's, doubled (``connect.cc``), at most
    ``MAXCHANNELS``; within the run's ``bounds`` (least, most) where it sets them
    (:func:`~simulator.library.nccl_env.bounded_channels`)."""
    doubled = max(1, min(version.max_channels, 2 * int(graph_channels)))
    return bounded_channels(doubled, bounds, version.max_channels)


def ring_threads(protocol: str, graph_busbw_GBps: float) -> int:
    """Threads per channel: Simple rings whose graph bandwidth is at most ``PCI_BW`` run 256."""
    if protocol == "Simple" and graph_busbw_GBps <= PCI_BW:
        return 256
    return THREADS[protocol]


def tuned_channels(channels: int, size_bytes: int, threads: int, threshold: int) -> int:
    """``channels`` less one while ``size_bytes < channels x threads x threshold``, at least
    one (``enqueue.cc``'s channel tuning: a channel is kept only for ``threshold`` bytes per
    thread)."""
    nc = int(channels)
    while size_bytes < nc * threads * threshold and nc >= 2:
        nc -= 1
    return nc


def planned_channels(release, collective: str, protocol: str, size_bytes: int, ranks: int,
                     channels: int) -> int:
    """The channels NCCL's kernel planner spreads a call over (``scheduleCollTasksToPlan``,
    ``src/enqueue.cc``, 2.22 on; applied here to rings and trees, NVLS calls being large): it
    cuts the call into cells of
    :func:`~simulator.library.nccl_constants.min_traffic_per_channel` traffic (bytes x
    ``ncclFuncTrafficPerByte``; LL's cells four times smaller from 2.27) and gives each
    channel at least one, so a call of few cells runs on as many channels as it has cells
    (``cellSize = divUp(divUp(MinTrafficPerChannel, trafficPerByte), 16) * 16``)."""
    release = release_of(release)
    minimum = min_traffic_per_channel(release)
    if not minimum:
        return channels
    per_byte = TRAFFIC_PER_BYTE.get(collective, ranks if collective in (
        "allgather", "reduce_scatter") else 1)
    if protocol == "LL":
        per_byte *= ll_traffic_factor(release)
    cell = 16 * math.ceil(math.ceil(minimum / per_byte) / 16)
    return max(1, min(channels, math.ceil(int(size_bytes) / cell)))


def ring_channels(version: NcclVersion, collective: str, protocol: str, size_bytes: int,
                  ranks: int, channels_max: int, threads: int, release=None) -> int:
    """Channels NCCL runs a ring call of ``size_bytes`` on (``enqueue.cc`` channel tuning,
    then the planner's cells: :func:`planned_channels` of ``release``, the table's own by
    default)."""
    threshold = THREAD_THRESHOLD[protocol] * (ranks if protocol == "LL" else 1)
    nc = tuned_channels(channels_max, size_bytes, threads, threshold)
    return planned_channels(release or version, collective, protocol, size_bytes, ranks, nc)


def fifo_step_bytes(protocol: str, simple_buffer_bytes: int | None = None) -> int:
    """Bytes of one FIFO slot: the protocol's buffer over ``NCCL_STEPS``; Simple's buffer is
    ``NCCL_BUFFSIZE`` where the platform sets it (``simple_buffer_bytes``)."""
    buffer = BUFFSIZE[protocol]
    if protocol == "Simple" and simple_buffer_bytes:
        buffer = int(simple_buffer_bytes)
    return buffer // NCCL_STEPS


def chunk_bytes(collective: str, protocol: str,
                simple_buffer_bytes: int | None = None) -> tuple[int, int]:
    """(payload bytes per chunk, slices per chunk) of a ring collective."""
    step = fifo_step_bytes(protocol, simple_buffer_bytes)
    if protocol == "Simple":
        chunk_steps, slice_steps = RING_STEPS.get(collective, (1, 1))
    else:
        chunk_steps = slice_steps = 1
    payload = int(step * chunk_steps * PAYLOAD_FRACTION[protocol])
    return payload, max(1, chunk_steps // slice_steps)


def ring_datapath(version: NcclVersion, collective: str, protocol: str, size_bytes: int,
                  ranks: int, graph_channels: int, graph_busbw_GBps: float,
                  simple_buffer_bytes: int | None = None, release=None,
                  channel_bounds=None) -> DataPath:
    """The data path of one ring call (all-reduce, all-gather, reduce-scatter);
    ``simple_buffer_bytes`` is ``NCCL_BUFFSIZE`` where the platform sets it, ``release`` the
    NCCL release when it is not the table's own, ``channel_bounds`` the run's (least, most)
    channels (``NCCL_MIN_NCHANNELS`` ...)."""
    channels_max = runtime_channels(version, graph_channels, channel_bounds)
    threads = ring_threads(protocol, graph_busbw_GBps)
    used = ring_channels(version, collective, protocol, int(size_bytes), ranks, channels_max,
                         threads, release)
    chunk, slices = chunk_bytes(collective, protocol, simple_buffer_bytes)
    # size_bytes is the whole message (all-gather: the output, reduce-scatter: the input, as
    # nccl-tests counts them): a loop moves one chunk per rank and channel
    per_channel = math.ceil(int(size_bytes) / used)
    loops = max(1, math.ceil(per_channel / (ranks * chunk)))
    busy = busy_slices(math.ceil(per_channel / (ranks * loops)), chunk, slices)
    return DataPath(protocol=protocol, channels_max=channels_max, channels=used,
                    threads=threads, chunk_bytes=chunk, slices_per_chunk=slices, loops=loops,
                    syncs_per_step=loops * busy, rate_fraction=used / channels_max)


def proxy_sends_per_round(channels: int, ranks_per_node: float) -> int:
    """Network sends one rank's proxy thread posts in one wait/post round of a ring step across
    machines: the ``channels`` rings leave each machine once each, from ranks spread over the
    machine's ``ranks_per_node``, so a proxy serves ``ceil(channels / ranks_per_node)`` of
    them (at least one).

    NCCL drives every network operation of a process from one thread ("NCCL Progress":
    ``ncclProxyProgressCreate``, NVIDIA/nccl v2.26.2-1 ``src/proxy.cc``:972-979), which walks
    the active operations of all channels in turn (``progressOps``, :739-757). A send can only
    be posted once the GPU has filled its step, so the sends of a round queue on that thread;
    receives are posted ``NCCL_STEPS`` ahead (``recvProxyProgress``) and stay off that path."""
    return max(1, math.ceil(max(1, int(channels)) / max(1.0, float(ranks_per_node))))


def proxy_round_floor_us(channels: int, ranks_per_node: float, post_overhead_us: float) -> float:
    """The least time of one wait/post round of a ring step across machines, us: the
    :func:`proxy_sends_per_round` sends of one proxy thread, each at the host CPU's "network
    post overhead", NCCL's own price of launching a network step (``getNetOverhead``: 1 us on
    Intel, 2 us on AMD; ``tuning.cc`` v2.23.4-1:251-257: "Inter-node rings still have to
    launch nsteps * net overhead", ``intraLat = max(intraLat, netOverhead)``). NCCL's line
    charges one launch a step, the case of one channel per proxy (and three for Simple, a
    per-step cost it does not tie to the channels, which the ring keeps through NCCL's own
    latency); with more channels than ranks a machine a proxy launches several sends a round.
    A floor, not a cost added to the transfer: the thread posts while bytes move."""
    return proxy_sends_per_round(channels, ranks_per_node) * post_overhead_us


def busy_slices(step_bytes: int, chunk: int, slices: int) -> int:
    """Slices of a ring step that carry data: NCCL sizes a step's slices to its data,
    ``sliceSize = max(divUp(nelem, 16 x SlicePerChunk) x 16, stepSize x StepPerSlice / 32)``
    (``prims_simple.h`` ``genericOp``, v2.21.5-1:195-196), so a step of at most 1/32 of a full
    slice rides in its first slice. The empty slices after it still wait and post, but on
    flags their neighbour posts at once: those rounds pipeline along the ring instead of
    adding a step latency each."""
    if slices <= 1 or step_bytes <= 0:
        return 1
    full_slice = chunk / slices
    size = max(16 * math.ceil(step_bytes / (16 * slices)), full_slice / 32)
    return max(1, min(slices, math.ceil(step_bytes / size)))


# -- NVLS and NVLS tree ---------------------------------------------------------------------
#
# NVLS all-reduce (NVLink SHARP: the NVSwitch sums and multicasts) runs on its own channels,
# each with ``nHeads`` = local ranks heads; the call moves ``channels x heads x chunk`` bytes
# per loop. NCCL shrinks the chunk for smaller messages (``enqueue.cc``, chunk sizing for
# NCCL_ALGO_NVLS and NCCL_ALGO_NVLS_TREE, identical from 2.23 to 2.30.7; 2.18-2.21 had the
# same NVLS rule): the steady state is reached only at large sizes. The tuner's line
# (``latency + bytes / bandwidth``) has no term for that. What it costs is modelled as a
# pipeline fill of :data:`NVLS_FILL_CHUNKS` chunk-times per channel, the one constant here
# that no source gives (fitted, see below).

#: NVLS channels (``nvlsChannels``): ``NCCL_NVLS_NCHANNELS`` 16 up to 2.25
#: (``src/transport/nvls.cc`` v2.18.3-1:231, v2.23.4-1:145); from 2.26 by architecture:
#: ``NVLS_NCHANNELS_SM90`` 16, ``NVLS_NCHANNELS_SM100`` 32 (several machines), and from 2.27
#: ``NVLS_NCHANNELS_SM100_NVL`` 24 on one machine (v2.27.3-1:147-149, 2.30.7:155-157).
NVLS_CHANNELS_SM90 = 16
NVLS_CHANNELS_SM100 = 32
NVLS_CHANNELS_SM100_ONE_MACHINE = 24
#: ``NCCL_NVLS_CHUNKSIZE`` default (``src/transport/nvls.cc``, 2.21-2.30.7).
NVLS_MAX_CHUNK_BYTES = 128 * 1024

#: The pipeline fill of an NVLS call, in chunk-times of one channel: ``fill = NVLS_FILL_CHUNKS x
#: chunk x channels / algbw``. No source states it; it is fitted (least |signed bias|) on one
#: named file, ``tests/data/measurements/nccl_nccltests309_xe9680_h100_2node_ib.csv`` (2 x 8 H100,
#: NVLS tree over InfiniBand, NCCL 2.26.2, one process per GPU), and checked on the other NVLS
#: files (B200 one and two machines, p5 EFA): docs/validation/sources.md,
#: "NVLS pipeline fill". It is close to 2 x NCCL_STEPS (16), the slots of the two FIFOs a chunk
#: crosses (17 fitted), which is a plausibility remark, not a derivation.
NVLS_FILL_CHUNKS = 17.0


def nvls_channels(release, generation: str, nodes: int) -> int:
    """The channels an NVLS / NVLS-tree call runs on in NCCL ``release`` (a table or a
    (major, minor); see :data:`NVLS_CHANNELS_SM90`)."""
    release = release_of(release)
    if generation in ("hopper",) or release < (2, 26):
        return NVLS_CHANNELS_SM90
    if nodes > 1 or release < (2, 27):
        return NVLS_CHANNELS_SM100
    return NVLS_CHANNELS_SM100_ONE_MACHINE


def nvls_chunk_bytes(algorithm: str, size_bytes: int, channels: int, heads: int,
                     nodes: int) -> int:
    """NCCL's chunk for an NVLS (``nvls``) or NVLS-tree (``nvls_tree``) all-reduce of
    ``size_bytes`` (``enqueue.cc``): smaller messages get smaller chunks."""
    ops = max(1, channels * heads)
    size = int(size_bytes)
    if algorithm == "nvls":
        chunk = NVLS_MAX_CHUNK_BYTES
        for factor, limit in ((64, 65536), (8, 32768), (2, 16384)):
            if size < factor * ops * chunk and chunk > limit:
                chunk = limit
        return chunk
    # NVLS tree: NCCL_NVLSTREE_MAX_CHUNKSIZE is 64 KiB from 4 machines, else the NVLS chunk
    chunk = min(NVLS_MAX_CHUNK_BYTES, 65536 if nodes >= 4 else NVLS_MAX_CHUNK_BYTES)
    for factor, limit in ((32, 262144), (16, 131072), (4, 65536), (1, 32768)):
        if size < factor * ops * chunk and chunk > limit:
            chunk = limit
    return chunk


def nvls_fill_s(release, algorithm: str, generation: str, size_bytes: int,
                heads: int, nodes: int, algbw_bytes_per_s: float) -> float:
    """The pipeline fill of one NVLS / NVLS-tree call in NCCL ``release``, seconds (see
    :data:`NVLS_FILL_CHUNKS`)."""
    if algbw_bytes_per_s <= 0:
        return 0.0
    channels = nvls_channels(release, generation, nodes)
    chunk = nvls_chunk_bytes(algorithm, size_bytes, channels, heads, nodes)
    return NVLS_FILL_CHUNKS * chunk * channels / algbw_bytes_per_s


# -- tree ------------------------------------------------------------------------------------

#: Releases whose Simple tree chunks shrink with the tree's depth (``enqueue.cc``: present
#: from v2.6.4-1 to v2.19.3-1, absent in v2.5.6-1 and from v2.20.3-1).
SIMPLE_TREE_CHUNK_RELEASES = ((2, 6), (2, 20))


def tree_chunk_bytes(protocol: str, size_bytes: int, channels: int, nodes: int,
                     ranks_per_node: float, simple_buffer_bytes: int | None = None,
                     release=None) -> int:
    """NCCL's chunk for a tree all-reduce (``enqueue.cc``, ``computeColl`` / chunk sizing,
    v2.20.5-1 and 2.30.7): trees move one FIFO step per chunk (``chunkSteps = 1`` outside
    Simple rings): Simple 512 KiB, LL128 576,000 payload bytes, LL 32 KiB. LL128 halves it
    while a channel has fewer than ``nsteps x 64 / ppn`` chunks (down to 128 KiB) and fewer
    than ``nsteps x 16 / ppn`` (down to 32 KiB), ``nsteps = 1 + log2(nodes) + 0.1 ppn``.
    NCCL 2.6 to 2.19 (``release``; none: the newest) halve Simple's while a channel has
    fewer than ``depth x 8`` chunks (down to 128 KiB), ``depth x 4`` (64 KiB) and ``depth``
    (32 KiB), ``depth = ppn - 1 + log2(nodes)`` (``connect.cc``, "a good approximation").
    ``NCCL_BUFFSIZE`` (``simple_buffer_bytes``) scales Simple's chunk."""
    step = fifo_step_bytes(protocol, simple_buffer_bytes)
    chunk = int(step * PAYLOAD_FRACTION[protocol])
    first, last = SIMPLE_TREE_CHUNK_RELEASES
    if protocol == "Simple" and release is not None and first <= release_of(release) < last:
        depth = int(ranks_per_node) - 1 + int(math.log2(max(1, nodes)))
        total = int(size_bytes)
        for times, floor in ((8, 131072), (4, 65536), (1, 32768)):
            while total // (max(1, channels) * chunk) < depth * times and chunk > floor:
                chunk //= 2
    if protocol == "LL128":
        ppn = max(1.0, float(ranks_per_node))
        nsteps = 1 + int(math.log2(max(1, nodes))) + 0.1 * ppn
        total = int(size_bytes)
        while total // (max(1, channels) * chunk) < nsteps * 64 / ppn and chunk > 131072:
            chunk //= 2
        while total // (max(1, channels) * chunk) < nsteps * 16 / ppn and chunk > 32768:
            chunk //= 2
    return chunk
