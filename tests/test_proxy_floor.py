"""A ring step across machines lasts at least what one proxy thread needs to post its sends.

NCCL drives a process's network operations from one proxy thread (``src/proxy.cc``), and its
tuner charges every step of a ring across machines at least one "network post overhead" (1 us
on Intel hosts, 2 us on AMD: ``getNetOverhead``). With more channels than ranks on a machine,
one thread launches ``ceil(channels / ranks)`` sends a round, so the round lasts at least that
many overheads; the floor bounds the round, it is not added to its transfer
(docs/validation/sources.md, "A proxy thread launches its channels' sends one by one")."""

from __future__ import annotations

import pytest

from simulator.collective import run_collective
from simulator.library import get_library
from simulator.library.datapath import proxy_round_floor_us, proxy_sends_per_round
from simulator.topology import load_topology

A100 = load_topology("dgx-a100", {})                 # one machine: no proxy on the ring
A100_2 = load_topology("dgx-a100-2node", {})         # AMD EPYC hosts: 2 us a post


@pytest.mark.parametrize("channels, ranks, sends", [(1, 8, 1), (8, 8, 1), (16, 8, 2),
                                                    (24, 8, 3), (4, 1, 4), (3, 2, 2)])
def test_a_proxy_launches_its_share_of_the_channels(channels, ranks, sends):
    assert proxy_sends_per_round(channels, ranks) == sends
    assert proxy_round_floor_us(channels, ranks, 2.0) == 2.0 * sends


def _ring(graph, size, protocol, gpus):
    return run_collective(graph, "allreduce", "ring", size, gpus=gpus, library="nccl",
                          protocol=protocol, launch="none", engine="event")


def _nccl_round_us(graph, size, protocol, gpus):
    """NCCL's own per-step latency of the ring candidate (its line: at least one overhead)."""
    return next(c for c in get_library("nccl").candidates(graph, "allreduce", size, gpus)
                if (c.algorithm, c.protocol) == ("ring", protocol)).intra_latency_us


def test_a_latency_bound_ring_across_machines_takes_its_proxies_posts():
    """1 MiB LL128 over two DGX A100: 16 channels on 8 ranks a machine, two sends a round at
    2 us each; the 30 steps (one round each) last 4 us, not NCCL's 2 us plus the bytes."""
    run = _ring(A100_2, 1 << 20, "LL128", 16)
    notes = run.plan.notes
    assert (notes["dp_channels"], notes["dp_syncs_per_step"]) == (16, 1)
    assert notes["proxy_floor_us"] == 4.0
    nccl = _nccl_round_us(A100_2, 1 << 20, "LL128", 16)
    assert nccl == 2.0 and notes["intra_step_us"] > nccl
    steps = run.row["time_s"] - run.plan.fixed_time_s
    assert steps == pytest.approx(30 * 4.0e-6, rel=0.02)


def test_one_channel_per_proxy_is_nccls_own_line():
    """64 KiB LL runs on one channel: one send a round, NCCL's own overhead, nothing more."""
    run = _ring(A100_2, 64 << 10, "LL", 16)
    assert run.plan.notes["dp_channels"] == 1
    assert run.plan.notes["proxy_floor_us"] == 2.0
    assert run.plan.notes["intra_step_us"] == _nccl_round_us(A100_2, 64 << 10, "LL", 16)


def test_the_floor_leaves_bandwidth_bound_steps_alone():
    """1 GiB Simple: a round's bytes take far longer than 4 us of posts, so each of its 4
    rounds a step keeps NCCL's latency."""
    run = _ring(A100_2, 1 << 30, "Simple", 16)
    syncs = run.plan.notes["dp_syncs_per_step"]
    assert syncs == 4 and run.plan.notes["proxy_floor_us"] == 4.0
    assert run.plan.notes["intra_step_us"] == pytest.approx(
        syncs * _nccl_round_us(A100_2, 1 << 30, "Simple", 16), rel=1e-12)


def test_one_machine_has_no_proxy_on_its_ring():
    run = _ring(A100, 1 << 20, "LL128", 8)
    assert "proxy_floor_us" not in run.plan.notes


def test_the_hosts_cpu_prices_a_post():
    """The same call on Intel hosts: 1 us a post, so a 2 us floor."""
    intel = load_topology("dgx-a100-2node", {"cpu": "cpu-xeon-8480c-2s"})
    run = _ring(intel, 1 << 20, "LL128", 16)
    assert run.plan.notes["proxy_floor_us"] == 2.0
