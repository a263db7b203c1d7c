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
    ``bw = bw / comm->nChannels * info->nChannels``).
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
``syncs = loops x slices_per_chunk``, where the tuner's line charges ``hwLat + bytes / rate``:
from 1 MiB to a few hundred MiB (one loop, two slices), the per-step latency is paid twice
per step, and small messages run on fewer channels at their share of the rate. The
:func:`ring_datapath` numbers are data: :meth:`simulator.library.nccl.NcclLibrary.plan`
writes ``syncs x hwLat`` into the links' per-step latency and ``channels / channels_max``
into their rates, so every engine method times the same thing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .nccl_constants import BUFFSIZE, NCCL_STEPS, PAYLOAD_FRACTION, PCI_BW, RING_STEPS, NcclVersion

#: Threads per channel by protocol (``NCCL_SIMPLE_MAX_NTHREADS`` 512, ``NCCL_LL_MAX_NTHREADS``
#: 512, ``NCCL_LL128_MAX_NTHREADS`` 640; ``src/include/device.h``).
THREADS = {"LL": 512, "LL128": 640, "Simple": 512}
#: Bytes per thread below which a channel is dropped (``NCCL_LL_THREAD_THRESHOLD`` 8, x ranks
#: for rings; ``NCCL_LL128_THREAD_THRESHOLD`` 8; ``NCCL_SIMPLE_THREAD_THRESHOLD`` 64;
#: ``src/include/comm.h``, ``tuning.cc``).
THREAD_THRESHOLD = {"LL": 8, "LL128": 8, "Simple": 64}
#: All-reduce traffic per byte in NCCL 2.30's planner (``ncclFuncTrafficPerByte``: 2 for
#: all-reduce, ranks for all-gather and reduce-scatter, 1 otherwise).
TRAFFIC_PER_BYTE = {"allreduce": 2}


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


def runtime_channels(version: NcclVersion, graph_channels: int) -> int:
    """The communicator's channels: the search's, doubled (``connect.cc``), at most
    ``MAXCHANNELS``."""
    return max(1, min(version.max_channels, 2 * int(graph_channels)))


def ring_threads(protocol: str, graph_busbw_GBps: float) -> int:
    """Threads per channel: Simple rings whose graph bandwidth is at most ``PCI_BW`` run 256."""
    if protocol == "Simple" and graph_busbw_GBps <= PCI_BW:
        return 256
    return THREADS[protocol]


def ring_channels(version: NcclVersion, collective: str, protocol: str, size_bytes: int,
                  ranks: int, channels_max: int, threads: int) -> int:
    """Channels NCCL runs a ring call of ``size_bytes`` on (``enqueue.cc`` channel tuning)."""
    threshold = THREAD_THRESHOLD[protocol] * (ranks if protocol == "LL" else 1)
    nc = channels_max
    while size_bytes < nc * threads * threshold and nc >= 2:
        nc -= 1
    if version.min_traffic_per_channel:
        traffic = size_bytes * TRAFFIC_PER_BYTE.get(collective, ranks if collective in (
            "allgather", "reduce_scatter") else 1)
        nc = max(1, min(nc, traffic // version.min_traffic_per_channel))
    return nc


def chunk_bytes(collective: str, protocol: str) -> tuple[int, int]:
    """(payload bytes per chunk, slices per chunk) of a ring collective."""
    step = BUFFSIZE[protocol] // NCCL_STEPS
    if protocol == "Simple":
        chunk_steps, slice_steps = RING_STEPS.get(collective, (1, 1))
    else:
        chunk_steps = slice_steps = 1
    payload = int(step * chunk_steps * PAYLOAD_FRACTION[protocol])
    return payload, max(1, chunk_steps // slice_steps)


def ring_datapath(version: NcclVersion, collective: str, protocol: str, size_bytes: int,
                  ranks: int, graph_channels: int, graph_busbw_GBps: float) -> DataPath:
    """The data path of one ring call (all-reduce, all-gather, reduce-scatter)."""
    channels_max = runtime_channels(version, graph_channels)
    threads = ring_threads(protocol, graph_busbw_GBps)
    used = ring_channels(version, collective, protocol, int(size_bytes), ranks, channels_max,
                         threads)
    chunk, slices = chunk_bytes(collective, protocol)
    # size_bytes is the whole message (all-gather: the output, reduce-scatter: the input, as
    # nccl-tests counts them): a loop moves one chunk per rank and channel
    per_channel = math.ceil(int(size_bytes) / used)
    loops = max(1, math.ceil(per_channel / (ranks * chunk)))
    return DataPath(protocol=protocol, channels_max=channels_max, channels=used,
                    threads=threads, chunk_bytes=chunk, slices_per_chunk=slices, loops=loops,
                    syncs_per_step=loops * slices, rate_fraction=used / channels_max)
