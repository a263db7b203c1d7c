"""Algorithms on the engine equal their closed forms on uncontended topologies."""

import math

import pytest

from simulator import theory
from simulator.collective import run_collective
from simulator.topology import load_topology

BW = 12.5e9
LAT = 1e-6


def star(hosts, **extra):
    params = {"hosts": str(hosts), "link_bandwidth": "12.5GB/s", "link_latency": "1us"}
    params.update(extra)
    return load_topology("star", params)


@pytest.mark.parametrize("p", [2, 3, 8, 64])
@pytest.mark.parametrize("size", [1024, 1000, 1 << 20, 256 << 20, 4 << 30])
def test_ring_allreduce_on_star(p, size):
    row = run_collective(star(p), "allreduce", "ring", size).row
    want = theory.ring_allreduce(p, size, 2 * LAT, 1 / BW)
    assert math.isclose(row["time_s"], want, rel_tol=1e-9)


def test_ring_allreduce_1024_ranks_256MiB():
    row = run_collective(star(1024), "allreduce", "ring", 256 << 20).row
    want = theory.ring_allreduce(1024, 256 << 20, 2 * LAT, 1 / BW)
    assert math.isclose(row["time_s"], want, rel_tol=1e-9)


@pytest.mark.parametrize("collective,formula", [
    ("reduce_scatter", lambda p, n: theory.ring_reduce_scatter(p, n, 2 * LAT, 1 / BW)),
    ("allgather", lambda p, n: theory.ring_allgather(p, n, 2 * LAT, 1 / BW)),
])
@pytest.mark.parametrize("p", [2, 5, 16])
def test_ring_halves_on_star(collective, formula, p):
    row = run_collective(star(p), collective, "ring", 3 << 20).row
    assert math.isclose(row["time_s"], formula(p, 3 << 20), rel_tol=1e-9)


@pytest.mark.parametrize("p", [2, 4, 9])
def test_ring_reduction_compute_charged(p):
    """A finite reduce rate adds (p-1) c gamma: one summation per reduce-scatter step."""
    size = 96 << 20
    g = star(p, reduce_bandwidth="50GB/s")
    row = run_collective(g, "allreduce", "ring", size).row
    want = theory.ring_allreduce(p, size, 2 * LAT, 1 / BW, 1 / 50e9)
    assert math.isclose(row["time_s"], want, rel_tol=1e-9)
    free = run_collective(g, "allreduce", "ring", size, reduce_compute=False).row
    assert math.isclose(free["time_s"], theory.ring_allreduce(p, size, 2 * LAT, 1 / BW),
                        rel_tol=1e-9)


def test_pipelined_ring_is_faster_for_large_messages_and_result_depends_on_slices():
    g = star(8)
    one = run_collective(g, "allreduce", "ring", 64 << 20, slices=1).row["time_s"]
    four = run_collective(g, "allreduce", "ring", 64 << 20, slices=4).row["time_s"]
    # bandwidth term unchanged; pipelining hides latency only partially -> close but different
    assert four != one
    assert four < one * 1.05


def test_ring_time_changes_with_bandwidth_and_latency():
    base = run_collective(star(8), "allreduce", "ring", 1 << 20).row["time_s"]
    slower = run_collective(star(8, link_bandwidth="6.25GB/s"), "allreduce", "ring",
                            1 << 20).row["time_s"]
    later = run_collective(star(8, link_latency="10us"), "allreduce", "ring",
                           1 << 20).row["time_s"]
    assert slower > base and later > base
