"""Parameter server all-reduce: push gradients to servers, pull the aggregate back.

The model is split into ``S`` shards, shard ``k`` owned by server ``k`` (Li et al., "Scaling
Distributed Machine Learning with the Parameter Server", OSDI 2014). *Push*: every worker sends
each shard to its server, which adds it into its buffer. *Pull*: every server sends its aggregated
shard to every worker, which overwrites its copy. Push is step 0, pull step 1.

Placement (BytePS, Jiang et al., OSDI 2020, compares both):

* ``dedicated``: servers are extra helper ranks ``N .. N+S-1`` whose buffers start at zero. Each
  worker sends and receives ``n``; server ``k`` receives and sends ``N·shard_k``, so
  ``2·alpha + 2·max(n·beta_w, N·n·beta_s/S)`` with even shards; one server is the classic hotspot,
  linear in ``N``.
* ``colocated``: server ``k`` is worker ``k`` (``S <= N``); a worker sends nothing to itself. With
  ``S = N`` even shards every rank sends ``2(N-1)/N·n``, like the ring.

``shards`` gives uneven ("hot") shards as fractions of the model, one per server, summing to 1;
shard sizes are the floors of ``fraction·n`` with the left-over bytes given to the largest
remainders (ties to the lower shard). ``phased=True`` is bulk-synchronous: a ``sync`` barrier
makes every pull wait for every push. ``phased=False`` lets shard ``k``'s pulls start as soon as
shard ``k`` is aggregated (data flow alone), overlapping push and pull.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import ConfigError
from .base import Schedule, ScheduleBuilder, split_bytes
from .tree import positive_int

PLACEMENTS = ("dedicated", "colocated")


def shard_bytes(size_bytes: int, servers: int, shards=None) -> np.ndarray:
    """Bytes of every shard: even (``shards=None``) or by validated fractions."""
    if shards is None:
        return split_bytes(size_bytes, servers)
    try:
        frac = np.array([float(f) for f in shards])
    except (TypeError, ValueError):
        raise ConfigError(f"option shards must be a list of {servers} fractions, "
                          f"got {shards!r}") from None
    if len(frac) != servers:
        raise ConfigError(f"option shards has {len(frac)} fractions for {servers} server(s); "
                          f"give one per server")
    if not np.all(np.isfinite(frac)) or np.any(frac <= 0):
        raise ConfigError(f"option shards must be positive fractions, got {list(shards)}")
    if not math.isclose(frac.sum(), 1.0, rel_tol=0, abs_tol=1e-9):
        raise ConfigError(f"option shards must sum to 1, got {frac.sum():.12g}")
    exact = frac / frac.sum() * size_bytes
    out = np.floor(exact).astype(np.int64)
    left = int(size_bytes - out.sum())
    out[np.argsort(-(exact - out), kind="stable")[:left]] += 1
    return out


def ps(collective: str, ranks: int, size_bytes: int, servers: int = 1,
       placement: str = "dedicated", shards=None, phased: bool = True) -> Schedule:
    """Push every shard to its server, then pull the aggregates back to every worker."""
    n_workers = ranks
    servers = positive_int("servers", servers)
    if placement not in PLACEMENTS:
        raise ConfigError(f"option placement must be one of {', '.join(PLACEMENTS)}, "
                          f"got {placement!r}")
    if not isinstance(phased, (bool, np.bool_)):
        raise ConfigError(f"option phased must be true or false, got {phased!r}")
    if placement == "colocated" and servers > n_workers:
        raise ConfigError(f"colocated placement puts server k on worker k: servers ({servers}) "
                          f"must not exceed ranks ({n_workers})")
    dedicated = placement == "dedicated"
    server = np.arange(servers) + (n_workers if dedicated else 0)
    b = ScheduleBuilder(collective, "ps", n_workers, shard_bytes(size_bytes, servers, shards),
                        helper_ranks=servers if dedicated else 0)
    for w in range(n_workers):
        for k in range(servers):
            if server[k] != w:
                b.send(w, int(server[k]), k, reduce=True, step=0, phase="push")
    first = True
    for k in range(servers):
        for w in range(n_workers):
            if server[k] != w:
                b.send(int(server[k]), w, k, reduce=False, step=1, phase="pull",
                       sync=bool(phased) and first)
                first = False
    b.notes.update(servers=servers, placement=placement, phased=bool(phased))
    return b.build()
