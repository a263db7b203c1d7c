"""Compiled event simulation of any schedule: the event engine's answer at compiled speed.

Why: the step-level shortcuts of :mod:`.fast` apply only where steps run in lockstep or rates
are fixed. Where flows of different steps share links at the same time (pipelined slices, a
hierarchical all-reduce whose outer rings share a machine's NIC over unequal paths) only event
simulation is exact, and the Python event engine pays ~3-8 us per transfer: a hierarchical
all-reduce over 1,024 GPUs (~300,000 transfers) takes seconds per gradient bucket.

What this module does: it runs *the event engine's own algorithm* -- the schedule's data-flow
dependencies and barrier epochs, FIFO connections, the same coalesced max-min solves, drained-
flow rate takeover, delivery batching and FIFO reduction queues, in the same event order --
compiled with numba (:mod:`._schedule_kernel` on the flow network of :mod:`._flow_kernel`).
Memory is ``O(transfers + dependencies)`` (arrays, no Python objects per transfer).

Exactness is by construction, and checked: ``tests/test_compiled.py`` compares the time,
per-link bytes and reduction totals with the event engine for every registered algorithm,
pipelined and not, on uncontended and contended topologies, to 1e-9.

numba is a base dependency; where it cannot be imported, :func:`compiled_time` reports that
it does not apply and ``--engine auto`` uses the event engine.
"""

from __future__ import annotations

import math

import networkx as nx
import numpy as np

from ..schedules.base import Schedule, connection_caps
from ..schedules.deps import dependencies, epochs
from .common import (FastResult, _reduce_totals, drop_stale_kernel_caches, interrupts_deferred,
                     numba_available, placed, with_connection_caps)

METHOD = "compiled-events"


#: The last few schedules' structure (:func:`_structure`), most recently used last: a training
#: iteration times one all-reduce per gradient bucket, on the same ranks with the same
#: transfers where only the chunk sizes differ; their dependency graph (~0.3-0.5 s at 280,000
#: transfers) is derived once. At most ``_STRUCTURES_KEPT`` entries of ``_STRUCTURES_BYTES``
#: in all (a larger schedule's structure is not kept).
_STRUCTURES: list = []
_STRUCTURES_KEPT = 2
_STRUCTURES_BYTES = 256 * 2 ** 20
#: The columns a schedule's dependencies, epochs and FIFO connections are derived from.
STRUCTURE_COLUMNS = ("src", "dst", "src_chunk", "dst_chunk", "nchunks", "reduce", "sync",
                     "channel")


def _structure(schedule: Schedule) -> tuple:
    """What the kernel needs of ``schedule`` besides its bytes: ``(waits, dep_ptr, dep_owner,
    epoch, epoch_size, conn_of, heads, members, conn_ptr)``.

    It depends only on :data:`STRUCTURE_COLUMNS`, the chunk count and the rank count (not on
    chunk sizes), so it is remembered for the last few schedules (``_STRUCTURES``) and reused
    when a schedule's columns equal one of theirs element for element (kept as copies, so a
    caller changing its arrays afterwards cannot alias an entry). The kernel only reads
    these arrays (it copies those it counts down)."""
    from .runner import _connections

    shape = (len(schedule), len(schedule.chunk_bytes), schedule.total_ranks)
    for k, (key, columns, derived, _size) in enumerate(_STRUCTURES):
        if key == shape and all(np.array_equal(getattr(schedule, name), col)
                                for name, col in zip(STRUCTURE_COLUMNS, columns)):
            _STRUCTURES.append(_STRUCTURES.pop(k))      # most recently used last
            return derived
    n = len(schedule)
    # dependencies, reversed: who waits for whom (as runner._Prepared)
    indptr, indices = dependencies(schedule)
    waits = np.diff(indptr).astype(np.int64)
    dep_ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(indices, minlength=n), out=dep_ptr[1:])
    dep_owner = np.repeat(np.arange(n, dtype=np.int64), waits)[np.argsort(indices,
                                                                           kind="stable")]
    epoch = epochs(schedule).astype(np.int64)
    epoch_size = np.bincount(epoch).astype(np.int64)
    # FIFO connections, numbered as the engine numbers them; members in list order
    conn_of, heads = _connections(schedule)
    members = np.argsort(conn_of, kind="stable").astype(np.int64)
    conn_ptr = np.zeros(len(heads) + 1, dtype=np.int64)
    np.cumsum(np.bincount(conn_of, minlength=len(heads)), out=conn_ptr[1:])
    derived = (waits, dep_ptr, dep_owner, epoch, epoch_size, conn_of.astype(np.int64), heads,
               members, conn_ptr)
    columns = tuple(getattr(schedule, name) for name in STRUCTURE_COLUMNS)
    size = sum(a.nbytes for a in columns + derived)
    if size <= _STRUCTURES_BYTES:
        _STRUCTURES.append((shape, tuple(np.array(a) for a in columns), derived, size))
        while (len(_STRUCTURES) > _STRUCTURES_KEPT
               or sum(entry[3] for entry in _STRUCTURES) > _STRUCTURES_BYTES):
            _STRUCTURES.pop(0)
    return derived


def compiled_time(schedule: Schedule, graph: nx.DiGraph, placement,
                  reduce_compute: bool = True):
    """Time ``schedule`` (rank ``r`` on ``placement[r]``) with the compiled event simulation.

    Returns a :class:`~simulator.engine.common.FastResult` with ``method="compiled-events"``;
    not applicable (with the reason) when numba is missing.
    """
    if not numba_available():
        return FastResult(math.nan, False, "numba is not installed (pip install "
                          "'clustersim[fast]')", METHOD)
    n = len(schedule)
    nodes = list(placement)[:schedule.total_ranks]
    if n == 0:
        return FastResult(0.0, True, "", METHOD)
    waits, dep_ptr, dep_owner, epoch, epoch_size, conn_of, heads, members, conn_ptr = \
        _structure(schedule)
    # routes of the connections; device and reduction rate of every rank
    paths, path_of, res_ptr, res_idx, latency, devices, rank_device, rate = placed(
        graph, nodes, schedule.src[heads], schedule.dst[heads], reduce_compute)
    nbytes = schedule.transfer_bytes.astype(np.float64)
    dst = schedule.dst.astype(np.int64)
    with np.errstate(divide="ignore", invalid="ignore"):
        reduce_s = np.where(schedule.reduce & np.isfinite(rate[dst]), nbytes / rate[dst], 0.0)
    drop_stale_kernel_caches()
    from ._schedule_kernel import simulate_schedule

    caps = paths.caps()
    n_links = len(caps)
    path_of, res_ptr, res_idx, latency, caps = with_connection_caps(
        path_of, res_ptr, res_idx, latency, caps,
        connection_caps(schedule.notes, schedule.src[heads], schedule.dst[heads]))
    with interrupts_deferred():
        time_s, carried, _dev_s, solves, _t_done = simulate_schedule(
            conn_ptr, members, conn_of, path_of, res_ptr, res_idx, latency,
            caps, nbytes, reduce_s, rank_device[dst], len(devices), waits,
            dep_ptr, dep_owner, epoch, epoch_size)
    if not math.isfinite(time_s):
        return FastResult(math.nan, False, "the compiled simulation made no progress (a "
                          "dependency never arrived)", METHOD)
    return FastResult(float(time_s), True, "", METHOD, steps=int(schedule.step.max()) + 1,
                      solves=int(solves), links=paths.table(carried[:n_links]),
                      bytes_sent=float(nbytes.sum()),
                      reduce_s=_reduce_totals(nodes, dst, reduce_s))
