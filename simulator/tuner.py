"""Pick an algorithm the way NCCL's tuner does: the lowest predicted time.

NCCL predicts each (algorithm, protocol) with a latency + size/bandwidth model and runs the
fastest. Our prediction is the simulator itself: every candidate that implements the collective
is simulated step-synchronously on the actual topology, and the fastest wins (ties go to the
earlier candidate). Parameter servers are not candidates: they need extra hosts and are a
training-system choice, not a collective-library one.
"""

from __future__ import annotations

CANDIDATES = ("ring", "double_binary_tree", "tree", "halving_doubling", "direct", "hierarchical")


def choose_algorithm(graph, collective: str, size_bytes: int, gpus: int | None = None, *,
                     simulate) -> str:
    """Name of the fastest candidate algorithm for ``collective`` of ``size_bytes``;
    ``simulate(graph, collective, algorithm, size_bytes, gpus=n)`` times one candidate
    (:func:`simulator.collective.run_collective`, which calls this: passed in, not imported)."""
    from .errors import ClusterSimError
    from .schedules import ALGORITHMS
    from .topology import endpoints, local_ranks

    n = gpus or len(endpoints(graph))
    best, best_time = None, float("inf")
    for name in CANDIDATES:
        algo = ALGORITHMS.get(name)
        if algo is None or collective not in algo.collectives:
            continue
        if name == "hierarchical" and local_ranks(graph, n) in (1, n):
            continue  # one level only: same as its inner or outer algorithm
        try:
            t = simulate(graph, collective, name, size_bytes, gpus=n).row["time_s"]
        except ClusterSimError:
            continue
        if t < best_time:
            best, best_time = name, t
    if best is None:
        raise ClusterSimError(f"no algorithm can run {collective} on {n} ranks")
    return best
