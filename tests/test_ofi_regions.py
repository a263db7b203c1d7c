"""aws-ofi-nccl's region tuner on p5 (simulator.library.ofi_regions): the plugin's geometry,
its regions as the source lists them, and the choice it makes NCCL take."""

from __future__ import annotations

import pytest

from simulator.library import get_library
from simulator.library.ofi_regions import (TUNER_MAX_RANKS, TUNER_MAX_SIZE, extend_region,
                                           is_inside, region_choice)
from simulator.topology import load_topology

MiB = 1 << 20
EVERYTHING = {(a, p) for a in ("tree", "ring", "nvls_tree") for p in ("LL", "LL128", "Simple")}


@pytest.mark.parametrize("point, expected", [
    ((5, 5), 1), ((0, 5), 0), ((10, 10), 0), ((5, 0), 0),      # inside, edge, corner
    ((11, 5), -1), ((5, -1), -1), ((-3, 12), -1)])
def test_ray_casting_says_inside_edge_or_outside(point, expected):
    square = [(0, 0), (10, 0), (10, 10), (0, 10)]
    assert is_inside(point, square) == expected


def test_a_degenerate_region_holds_exactly_its_line():
    """The plugin writes 'ranks == 16 above 30 MiB' as a triangle folded onto one line."""
    line = [(31457281, 16), (TUNER_MAX_SIZE, 16), (31457281, 16)]
    assert is_inside((64 * MiB, 16), line) == 0
    assert is_inside((64 * MiB, 17), line) == -1
    assert is_inside((16 * MiB, 16), line) == -1


def test_extend_region_runs_the_line_to_the_box():
    box = (TUNER_MAX_SIZE, TUNER_MAX_RANKS)
    assert extend_region((402653184, 2048), (402653184, 4096), box) == (402653184, box[1])
    assert extend_region((5, 2), (9, 2), box) == (box[0], 2)
    x, y = extend_region((8053063680, 160), (9663676416, 192), box)
    slope = (192 - 160) / (9663676416 - 8053063680)
    assert x == box[0] and y == pytest.approx(160 + slope * (box[0] - 8053063680))


@pytest.mark.parametrize("size, nodes, expected", [
    (32 * MiB, 32, ("tree", "LL128")),          # under the tree/LL128 boundary at 256 ranks
    (64 * MiB, 4, ("ring", "LL128")),           # 32 ranks: 37748736 < 64 MiB < 1 GiB
    (2048 * MiB, 4, ("ring", "Simple")),
    (512 * MiB, 32, ("nvls_tree", "Simple")),
    (64 * MiB, 2, None),                        # two machines: NCCL's own tuner
])
def test_the_p5_regions_pick_what_the_source_lists(size, nodes, expected):
    assert region_choice("allreduce", size, 8 * nodes, nodes, EVERYTHING) == expected


def test_a_pair_nccl_cannot_run_is_skipped_and_other_shapes_fall_back():
    # without LL128 the 64 MiB call on 4 machines falls through every region: NCCL decides
    no_ll128 = {pair for pair in EVERYTHING if pair[1] != "LL128"}
    assert region_choice("allreduce", 64 * MiB, 32, 4, no_ll128) is None
    assert region_choice("allreduce", 64 * MiB, 28, 4, EVERYTHING) is None      # 7 per machine
    assert region_choice("broadcast", 64 * MiB, 32, 4, EVERYTHING) is None
    assert region_choice("allgather", 64 * MiB, 4, 4, EVERYTHING) == ("ring", "Simple")


def test_the_nccl_library_takes_the_plugins_choice_on_p5_from_three_machines():
    graph = load_topology("aws-p5", {"nodes": 4})
    plugged = get_library("nccl").plan(graph, "allreduce", "auto", 64 * MiB, 32)
    assert (plugged.algorithm, plugged.protocol) == ("ring", "LL128")
    assert plugged.notes["tuner"] == "aws-ofi-nccl regions"
    own = get_library("nccl", version="2.18").plan(graph, "allreduce", "auto", 64 * MiB, 32)
    assert (own.algorithm, own.protocol) != ("ring", "LL128")     # before tuner plugins
    assert "tuner" not in own.notes
    two = get_library("nccl").plan(load_topology("aws-p5", {"nodes": 2}), "allreduce", "auto",
                                   64 * MiB, 16)
    assert "tuner" not in two.notes
    forced = get_library("nccl").plan(graph, "allreduce", "auto", 64 * MiB, 32,
                                      protocol="Simple")
    assert forced.protocol == "Simple" and "tuner" not in forced.notes
