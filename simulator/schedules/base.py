"""Schedules: collective algorithms as data.

A *schedule* is what an algorithm produces: an ordered list of transfers between ranks, with no
notion of links, time or SimPy. Each rank owns one buffer cut into *chunks* (the finest partition
the algorithm needs); chunk sizes are in bytes. A transfer copies a contiguous run of chunks from
the sender's buffer into the receiver's buffer, either overwriting (``reduce=False``) or adding
into what is there (``reduce=True``).

The list order is the *semantics*: executing the transfers one after another, in order, on real
arrays (:mod:`simulator.schedules.execute`) defines what the algorithm computes. The engine runs
transfers concurrently, so it needs to know which orderings matter; those are derived from data
flow (:func:`simulator.schedules.deps.dependencies`), so a schedule can never declare a dependency
that disagrees with what it computes.

Three extra ordering tools exist for what data flow does not capture:

* ``channel``: transfers with the same ``(src, dst, channel)`` share one FIFO connection, like the
  slices of one NCCL channel to one peer. Only the head of a connection is on the wire.
* ``sync``: a transfer flagged ``sync`` waits for every transfer listed before it (a barrier, e.g.
  the bulk-synchronous boundary between a parameter server's push and pull phases).
* ``step`` and ``phase`` label transfers for reports; they do not order anything.

Buffers may be larger than the message: chunk ids ``< message_chunks`` hold the input message,
later ids are scratch or output space (all-to-all needs a separate output area). Ranks ``>=
ranks`` are helper ranks (parameter servers) whose buffers start as zeros.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import ConfigError

#: Collective names, in the spelling users type.
COLLECTIVES = ("allreduce", "reduce_scatter", "allgather", "broadcast", "reduce", "alltoall")
#: The schedule note of a rate cap on transfers inside one machine: ``(cap_bytes_per_s,
#: local_ranks)``. A transfer between ranks ``a`` and ``b`` with ``a // local_ranks == b //
#: local_ranks`` moves at most ``cap_bytes_per_s``, whatever its links leave it: the engines
#: give each such FIFO connection a private resource of that capacity. Set by
#: :func:`~.double_tree.double_binary_tree` (``local_flow_cap_bytes_per_s``).
LOCAL_FLOW_CAP_NOTE = "local_flow_cap"
#: The schedule note of a rate cap on transfers *between* machines: ``(cap_bytes_per_s,
#: local_ranks)``. A transfer between ranks ``a`` and ``b`` with ``a // local_ranks !=
#: b // local_ranks`` moves at most ``cap_bytes_per_s`` (a private resource per FIFO
#: connection, as for :data:`LOCAL_FLOW_CAP_NOTE`). Set by :func:`~.registry.make_schedule`'s
#: ``network_flow_cap`` option for every algorithm: what one network connection carries when
#: its bytes are staged through host memory (the ``nccl`` library's plans).
NETWORK_FLOW_CAP_NOTE = "network_flow_cap"
#: Both per-connection cap notes, as the engines look for them.
FLOW_CAP_NOTES = (LOCAL_FLOW_CAP_NOTE, NETWORK_FLOW_CAP_NOTE)

_TRANSFER_FIELDS = ("src", "dst", "src_chunk", "dst_chunk", "nchunks", "reduce", "step",
                    "phase", "channel", "sync")
_DTYPES = {name: bool if name in ("reduce", "sync") else (np.int16 if name == "phase"
                                                           else np.int64)
           for name in _TRANSFER_FIELDS}


@dataclass(frozen=True)
class Schedule:
    """An algorithm's transfers as columns (numpy arrays of equal length, one row per transfer).

    Attributes
    ----------
    collective, algorithm : str
        What it computes and how.
    ranks : int
        Participating worker ranks (0 .. ranks-1).
    helper_ranks : int
        Extra ranks (parameter servers) numbered ranks .. ranks+helper_ranks-1.
    chunk_bytes : ndarray of int64
        Size of every chunk of the per-rank buffer, in bytes.
    message_chunks : int
        Chunks ``0 .. message_chunks-1`` are the message; the rest is scratch/output space.
    block_of_chunk : ndarray of int64
        For block-structured collectives (reduce-scatter, all-gather, all-to-all) the rank whose
        block each message chunk belongs to; -1 elsewhere.
    root : int
        Root rank for broadcast and reduce (0 otherwise).
    src, dst, src_chunk, dst_chunk, nchunks, step, channel : ndarray of int64
        Per-transfer columns.
    reduce, sync : ndarray of bool
        Per-transfer columns.
    phase : ndarray of int16
        Index into ``phase_names``.
    phase_names : tuple of str
    """

    collective: str
    algorithm: str
    ranks: int
    chunk_bytes: np.ndarray
    message_chunks: int
    src: np.ndarray
    dst: np.ndarray
    src_chunk: np.ndarray
    dst_chunk: np.ndarray
    nchunks: np.ndarray
    reduce: np.ndarray
    step: np.ndarray
    phase: np.ndarray
    channel: np.ndarray
    sync: np.ndarray
    phase_names: tuple = ()
    helper_ranks: int = 0
    block_of_chunk: np.ndarray | None = None
    root: int = 0
    notes: dict = field(default_factory=dict)

    # -- derived quantities -------------------------------------------------------------------
    @property
    def total_ranks(self) -> int:
        return self.ranks + self.helper_ranks

    @property
    def size_bytes(self) -> int:
        return int(self.chunk_bytes[: self.message_chunks].sum())

    def __len__(self) -> int:
        return int(self.src.shape[0])

    @property
    def chunk_offsets(self) -> np.ndarray:
        """Byte offset of each chunk inside the buffer (length ``len(chunk_bytes) + 1``)."""
        return np.concatenate(([0], np.cumsum(self.chunk_bytes, dtype=np.int64)))

    @property
    def transfer_bytes(self) -> np.ndarray:
        """Bytes carried by every transfer."""
        off = self.chunk_offsets
        return off[self.src_chunk + self.nchunks] - off[self.src_chunk]

    def bytes_sent(self) -> np.ndarray:
        """Bytes sent by each rank (length ``total_ranks``)."""
        return np.bincount(self.src, weights=self.transfer_bytes,
                           minlength=self.total_ranks).astype(np.int64)

    def bytes_received(self) -> np.ndarray:
        """Bytes received by each rank (length ``total_ranks``)."""
        return np.bincount(self.dst, weights=self.transfer_bytes,
                           minlength=self.total_ranks).astype(np.int64)

    @property
    def steps(self) -> int:
        """Number of algorithm steps (``max(step) + 1``)."""
        return int(self.step.max()) + 1 if len(self) else 0

    def phase_of(self, i: int) -> str:
        return self.phase_names[int(self.phase[i])] if self.phase_names else ""


class ScheduleBuilder:
    """Collects transfers row by row and freezes them into a :class:`Schedule`.

    Algorithms call :meth:`send` in the order that defines their semantics. Chunk arguments are
    chunk ids; ``nchunks`` sends a contiguous run starting there.
    """

    def __init__(self, collective: str, algorithm: str, ranks: int, chunk_bytes,
                 *, message_chunks: int | None = None, helper_ranks: int = 0,
                 block_of_chunk=None, root: int = 0):
        self.collective = collective
        self.algorithm = algorithm
        self.ranks = ranks
        self.helper_ranks = helper_ranks
        self.chunk_bytes = np.asarray(chunk_bytes, dtype=np.int64)
        self.message_chunks = len(self.chunk_bytes) if message_chunks is None else message_chunks
        self.block_of_chunk = None if block_of_chunk is None else np.asarray(block_of_chunk,
                                                                           dtype=np.int64)
        self.root = root
        self.rows: list[tuple] = []
        self.phases: dict[str, int] = {}
        self.notes: dict = {}
        self._blocks: list[dict] = []     # column blocks (:meth:`extend`), rows flushed in order

    def send(self, src: int, dst: int, chunk: int, *, reduce: bool, step: int, phase: str,
             nchunks: int = 1, dst_chunk: int | None = None, channel: int = 0,
             sync: bool = False) -> None:
        """Append one transfer (``dst_chunk`` defaults to ``chunk``)."""
        self.rows.append((src, dst, chunk, chunk if dst_chunk is None else dst_chunk, nchunks,
                          reduce, step, self.phase_code(phase), channel, sync))

    def extend(self, columns: dict) -> None:
        """Append many transfers at once, as :meth:`send` would one after another: ``columns``
        maps every name of ``_TRANSFER_FIELDS`` to an array of equal length, ``phase`` holding
        codes already registered in :attr:`phases` (:meth:`phase_code`)."""
        self._flush()
        self._blocks.append({name: np.asarray(columns[name], dtype=_DTYPES[name])
                             for name in _TRANSFER_FIELDS})

    def phase_code(self, phase: str) -> int:
        """The code of ``phase``, registered now if new (as :meth:`send` registers it)."""
        return self.phases.setdefault(phase, len(self.phases))

    def _flush(self) -> None:
        """Move the rows sent so far into a column block (keeps the list order)."""
        if self.rows:
            cols = list(zip(*self.rows))
            self._blocks.append({name: np.asarray(col, dtype=_DTYPES[name])
                                 for name, col in zip(_TRANSFER_FIELDS, cols)})
            self.rows = []

    def build(self) -> Schedule:
        self._flush()
        arrays = {name: np.concatenate([blk[name] for blk in self._blocks]
                                       + [np.zeros(0, dtype=_DTYPES[name])])
                  for name in _TRANSFER_FIELDS}
        return Schedule(collective=self.collective, algorithm=self.algorithm, ranks=self.ranks,
                        chunk_bytes=self.chunk_bytes, message_chunks=self.message_chunks,
                        phase_names=tuple(self.phases), helper_ranks=self.helper_ranks,
                        block_of_chunk=self.block_of_chunk, root=self.root, notes=self.notes,
                        **arrays)


def connection_caps(notes: dict, src, dst) -> np.ndarray:
    """The cap of each connection from rank ``src[i]`` to ``dst[i]`` under the schedule's
    :data:`LOCAL_FLOW_CAP_NOTE` (connections inside a machine) and
    :data:`NETWORK_FLOW_CAP_NOTE` (connections between machines), bytes/s (``inf``: none)."""
    src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
    caps = np.full(len(src), np.inf)
    for note, inside in ((LOCAL_FLOW_CAP_NOTE, True), (NETWORK_FLOW_CAP_NOTE, False)):
        found = notes.get(note)
        if found is None:
            continue
        cap, local = found
        same = src // int(local) == dst // int(local)
        caps = np.minimum(caps, np.where(same == inside, float(cap), np.inf))
    return caps


def positive_rate(value, where: str) -> float:
    """``value`` checked as a rate option: a positive number of bytes/s (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigError(f"{where}: expected a positive rate in bytes/s, got {value!r}")
    return float(value)


def network_flow_cap(value, schedule_channels: int = 1,
                     where: str = "option network_flow_cap") -> tuple[float, int]:
    """The :data:`NETWORK_FLOW_CAP_NOTE` of the option ``value``: ``(cap_bytes_per_s,
    local_ranks)``, each connection's cap, or ``(cap_bytes_per_s, local_ranks, channels)``, the
    cap of each of ``channels`` channels the call runs, shared by the schedule's
    ``schedule_channels`` channels (each of its connections gets ``cap x channels /
    schedule_channels``). Checked: positive rate, positive counts."""
    try:
        cap, local, *rest = value
        if len(rest) > 1:
            raise ValueError
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: expected (cap_bytes_per_s, local_ranks) or (cap_bytes_per_s, "
                          f"local_ranks, channels), got {value!r}") from None
    positive_rate(cap, where)
    for name, count in (("ranks per machine", local), ("channels", rest[0] if rest else 1)):
        if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 1:
            raise ConfigError(f"{where}: expected a positive count of {name}, got {count!r}")
    share = int(rest[0]) / max(1, int(schedule_channels)) if rest else 1.0
    return float(cap) * share, int(local)


def split_bytes(size_bytes: int, parts: int) -> np.ndarray:
    """Split ``size_bytes`` into ``parts`` near-equal integer pieces, larger ones first.

    This is how every algorithm cuts a message into per-rank chunks: when ``parts`` does not divide
    the size, the first ``size % parts`` pieces carry one extra byte, so the largest chunk is
    ``ceil(size / parts)``.
    """
    if parts <= 0:
        raise ValueError("parts must be positive")
    base, extra = divmod(int(size_bytes), parts)
    out = np.full(parts, base, dtype=np.int64)
    out[:extra] += 1
    return out
