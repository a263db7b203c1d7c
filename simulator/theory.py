"""Closed-form (alpha-beta-gamma) costs of the aggregation algorithms.

``p`` ranks, ``n`` message bytes, ``alpha`` the latency of one message (seconds), ``beta`` seconds
per byte of the bottleneck link on a rank's path, ``gamma`` seconds per byte of the receiver's
reduction. These are the formulas of Thakur, Rabenseifner and Gropp (2005), Patarasuk and Yuan
(2009) and, for parameter servers, the BytePS paper (Jiang et al., OSDI 2020); DESIGN.md section 4
tabulates them. On an uncontended topology (a ``star`` switch, an NVSwitch node) the event engine
must reproduce them exactly with ``--slices 1``; ``tests/test_exactness.py`` checks that.

Integer chunking is exact here: where a message does not split evenly the largest chunk sets the
pace of a step, as it does in the engine.
"""

from __future__ import annotations

import math


def ceil_div(a: int, b: int) -> int:
    return -(-int(a) // int(b))


def ring_allreduce(p: int, n: int, alpha: float, beta: float, gamma: float = 0.0) -> float:
    """2(p-1)(alpha + c beta) + (p-1) c gamma, c = ceil(n/p) the largest chunk."""
    if p == 1:
        return 0.0
    c = ceil_div(n, p)
    return 2 * (p - 1) * (alpha + c * beta) + (p - 1) * c * gamma


def ring_reduce_scatter(p: int, n: int, alpha: float, beta: float, gamma: float = 0.0) -> float:
    if p == 1:
        return 0.0
    c = ceil_div(n, p)
    return (p - 1) * (alpha + c * beta + c * gamma)


def ring_allgather(p: int, n: int, alpha: float, beta: float) -> float:
    if p == 1:
        return 0.0
    return (p - 1) * (alpha + ceil_div(n, p) * beta)


def halving_doubling_allreduce(p: int, n: int, alpha: float, beta: float,
                               gamma: float = 0.0) -> float:
    """Rabenseifner, p = 2^d: 2 lg p alpha + 2 (p-1)/p n beta + (p-1)/p n gamma."""
    if p == 1:
        return 0.0
    d = int(math.log2(p))
    if 2 ** d != p:
        raise ValueError("closed form stated for powers of two")
    return 2 * d * alpha + 2 * (p - 1) / p * n * beta + (p - 1) / p * n * gamma


def binomial_allreduce(p: int, n: int, alpha: float, beta: float, gamma: float = 0.0) -> float:
    """Binomial-tree reduce then broadcast, whole message: 2 ceil(lg p)(alpha + n beta) + ..."""
    if p == 1:
        return 0.0
    h = math.ceil(math.log2(p))
    return 2 * h * (alpha + n * beta) + h * n * gamma


def direct_allreduce(p: int, n: int, alpha: float, beta: float, gamma: float = 0.0) -> float:
    """Pairwise reduce-scatter + all-gather with p-1 concurrent peers (full bisection)."""
    if p == 1:
        return 0.0
    c = ceil_div(n, p)
    return 2 * alpha + 2 * (p - 1) * c * beta + (p - 1) * c * gamma


def ps_allreduce(workers: int, n: int, alpha: float, beta_worker: float, beta_server: float,
                 servers: int = 1, gamma_server: float = 0.0) -> float:
    """Dedicated servers, even shards, push then pull (BSP):
    2 alpha + 2 max(n beta_w, N n beta_s / S) + N (n/S) gamma_s."""
    shard = ceil_div(n, servers)
    per_phase = max(n * beta_worker, workers * shard * beta_server)
    return 2 * alpha + 2 * per_phase + workers * shard * gamma_server


def hierarchical_ring(p1: int, p2: int, n: int, alpha1: float, beta1: float, alpha2: float,
                      beta2: float) -> float:
    """2D ring: p1 ranks per node (alpha1, beta1), p2 nodes (alpha2, beta2), no reduction cost."""
    return (2 * (p1 - 1) * alpha1 + 2 * (p1 - 1) / p1 * n * beta1
            + 2 * (p2 - 1) * alpha2 + 2 * (p2 - 1) / p2 * (n / p1) * beta2)


def chain_broadcast(p: int, n: int, alpha: float, beta: float, segments: int = 1) -> float:
    """Pipelined chain (ring broadcast) of k segments: (p-1)(alpha + n beta/k) + (k-1) n beta/k.

    Segment s leaves hop h at s·tau + h·(tau + alpha) with tau = n beta / k: the first segment
    pays every hop, the others follow one drain time apart.
    """
    if p == 1:
        return 0.0
    tau = n * beta / segments
    return (p - 1) * (alpha + tau) + (segments - 1) * tau
