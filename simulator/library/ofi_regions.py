"""aws-ofi-nccl's region tuner: the (algorithm, protocol) it makes NCCL use on p5 machines.

AWS's network plugin for NCCL ships a tuner plugin. On p5/p5e (``p5.48xlarge``,
``p5e.48xlarge``) it is the *region* tuner (``src/tuner/nccl_ofi_regions.cpp``; the same
p5/p5e regions from v1.15.0 to v1.17.1, June - October 2025): for a call of ``nBytes`` on a
communicator of ``num_ranks`` ranks, the point ``(nBytes, num_ranks)`` is tested against a list
of polygons, each labelled with an (algorithm, protocol); the first polygon that holds the point
(inside or on an edge) wins, and the tuner sets that pair's cost to 0 so NCCL takes it
(``region_get_coll_info_internal_v3``). A pair NCCL cannot run for the call is skipped, and a
point no polygon holds, or a communicator of two machines or fewer, is left to NCCL's own
tuner. The channels stay NCCL's (only p6 changes them).

The polygons are data, copied with their vertices from the source; :func:`is_inside` is the
plugin's ray-casting test (``is_inside_region``, with its edge distance and ``eps``), so a point
on a boundary goes where the plugin sends it. ``region_choice`` is what the ``nccl`` library
asks (``simulator.library.nccl``).
"""

from __future__ import annotations

import math

#: ``TUNER_MAX_SIZE`` and ``TUNER_MAX_RANKS`` (include/tuner/nccl_ofi_tuner_region.h).
TUNER_MAX_SIZE = 100.0 * 1024 * 1024 * 1024
TUNER_MAX_RANKS = 1024.0 * 1024
#: ``eps`` of ``is_inside_region``.
EPS = 1e-10
#: The plugin releases whose p5/p5e regions these are (identical in each).
RELEASES = "aws-ofi-nccl v1.15.0 - v1.17.1 (src/tuner/nccl_ofi_regions.cpp, region_init_internal_p5_p5e)"


def _sub(a, b):
    return (a[0] - b[0], a[1] - b[1])


def _cross(a, b):
    return a[0] * b[1] - a[1] * b[0]


def _intersect(x0, x1, y0, y1, eps=EPS):
    """``intersect``: 1 if segment x0->x1 crosses y0->y1, -1 if not, 0 if the crossing is
    within ``eps`` of y0 or y1 (or the segments are parallel); and the crossing point."""
    dx, dy = _sub(x1, x0), _sub(y1, y0)
    d = _cross(dy, dx)
    if abs(d) < eps:
        return 0, None
    a = (_cross(x0, dx) - _cross(y0, dx)) / d
    sect = (y0[0] + a * dy[0], y0[1] + a * dy[1])
    if a < -eps or a > 1 + eps:
        return -1, sect
    if a < eps or a > 1 - eps:
        return 0, sect
    a = (_cross(x0, dy) - _cross(y0, dy)) / d
    if a < 0 or a > 1:
        return -1, sect
    return 1, sect


def _distance(x, y0, y1, eps=EPS) -> float:
    """``distance``: from ``x`` to the nearest point of segment y0->y1 along its normal,
    infinity where the normal misses the segment."""
    dy = _sub(y1, y0)
    result, sect = _intersect(x, (x[0] + dy[1], x[1] - dy[0]), y0, y1, eps)
    if result == -1 or sect is None:
        return math.inf
    return math.hypot(sect[0] - x[0], sect[1] - x[1])


def is_inside(point, vertices) -> int:
    """``is_inside_region``: 1 inside the polygon, 0 on an edge, -1 outside."""
    n = len(vertices)
    for i in range(n):
        if _distance(point, vertices[i], vertices[(i + 1) % n]) < EPS:
            return 0
    xs = [v[0] for v in vertices]
    ys = [v[1] for v in vertices]
    if not (min(xs) <= point[0] <= max(xs) and min(ys) <= point[1] <= max(ys)):
        return -1
    far = (2.0 * TUNER_MAX_SIZE, 2.0 * TUNER_MAX_RANKS)
    crosses = sum(1 for i in range(n)
                  if _intersect(point, far, vertices[i], vertices[(i + 1) % n])[0] == 1)
    return 1 if crosses % 2 else -1


def extend_region(a, b, z):
    """``extend_region``: the point where the line through ``a`` and ``b`` leaves the box
    ending at ``z`` (``TUNER_MAX_SIZE``, ``TUNER_MAX_RANKS``)."""
    if a[0] == b[0]:
        return (a[0], z[1])
    if a[1] == b[1]:
        return (z[0], a[1])
    m = (a[1] - b[1]) / (a[0] - b[0])
    c = b[1] - m * b[0]
    projected = m * z[0] + c
    if projected < z[1]:
        return (z[0], projected)
    return ((z[1] - c) / m, z[1])


_Z = (TUNER_MAX_SIZE, TUNER_MAX_RANKS)


def _p5_eight_per_machine() -> dict:
    """``nRanks == 8 * nNodes``: all-reduce."""
    # the source extends these two lines twice each, under four names (extended_tree_ll128 =
    # extended_nvlstree_simple_2, extended_nvlstree_simple_1 = extended_ring_simple)
    tree_ll128 = nvlstree_2 = extend_region((402653184, 2048), (402653184, 4096), _Z)
    nvlstree_1 = ring_simple = extend_region((8053063680, 160), (9663676416, 192), _Z)
    return {"allreduce": [
        ("tree", "LL128", [(0, 16), (31457280, 16), (37748736, 32), (117440512, 64),
                           (301989888, 128), (301989888, 256), (335544320, 512),
                           (536870912, 1024), (402653184, 2048), (402653184, 4096),
                           tree_ll128, (0, tree_ll128[1])]),
        ("nvls_tree", "Simple", [(31457281, 16), (TUNER_MAX_SIZE, 16), (31457281, 16)]),
        ("ring", "LL128", [(31457280, 17), (1073741824, 17), (2147483648, 64),
                           (2147483648, 128), (1342177280, 160), (2147483648, 256),
                           (1074790400, 256), (444596224, 160), (301989888, 128),
                           (117440512, 64), (37748736, 32)]),
        ("nvls_tree", "Simple", [(2147483648, 128), (6442450944, 128), (8053063680, 160),
                                 (9663676416, 192), nvlstree_1, nvlstree_2, (402653184, 4096),
                                 (402653184, 2048), (536870912, 1024), (335544320, 512),
                                 (301989888, 256), (310378496, 160), (444596224, 160),
                                 (1074790400, 256), (2684354560, 256), (2147483648, 224),
                                 (1342177280, 160)]),
        ("ring", "Simple", [(1073741824, 17), (ring_simple[0], 17), ring_simple,
                            (9663676416, 192), (8053063680, 160), (2684354560, 64),
                            (1610612736, 32)]),
    ]}


def _p5_two_per_machine() -> dict:
    """``nRanks == 2 * nNodes``: all-reduce."""
    tree_ll128 = extend_region((88160256, 128), (178163712, 256), _Z)
    # extended_tree_simple_1 and extended_nvlstree_simple extend the same line
    tree_simple_1 = nvlstree_simple = extend_region((787480576, 128), (1073741824, 256), _Z)
    tree_simple_2 = extend_region((257114112, 128), (269484032, 256), _Z)
    return {"allreduce": [
        ("tree", "LL128", [(0, 4), (1314816, 4), (1051648, 8), (1051648, 12), (2367488, 16),
                           (5525504, 32), (9473024, 64), (88160256, 128), (178163712, 256),
                           tree_ll128, (0, tree_ll128[1])]),
        ("ring", "LL128", [(1314816, 4), (19736576, 4), (41842688, 8), (296747008, 64),
                           (257114112, 128), (269484032, 256), (178163712, 256),
                           (88160256, 128), (9473024, 64), (5525504, 32), (2367488, 16),
                           (1051648, 12), (1051648, 8), (1314816, 4)]),
        ("nvls_tree", "Simple", [(19736576, 4), (81844224, 4), (275775488, 8),
                                 (275775488, 48), (296747008, 64), (41842688, 8)]),
        ("tree", "LL128", [(81844224, 4), (269484032, 4), (81844224, 4)]),
        ("tree", "Simple", [(269484032, 4), (TUNER_MAX_SIZE, 4), (269484032, 4)]),
        ("ring", "Simple", [(81844224, 5), (TUNER_MAX_SIZE, 5), (TUNER_MAX_SIZE, 32),
                            (1073741824, 40), (1073741824, 128), (787480576, 128),
                            (296747008, 64), (275775488, 48), (275775488, 8), (81844224, 5)]),
        ("tree", "Simple", [(296747008, 64), (787480576, 128), (1073741824, 256),
                            tree_simple_1, tree_simple_2, (269484032, 256), (257114112, 128)]),
        ("nvls_tree", "Simple", [nvlstree_simple, (1073741824, 256), (787480576, 128),
                                 (1073741824, 128), (1073741824, 40), (TUNER_MAX_SIZE, 32)]),
    ]}


def _p5_one_per_machine() -> dict:
    """``nRanks == nNodes``: all-reduce, all-gather, reduce-scatter."""
    tree_ll128 = extend_region((9999360, 64), (119477248, 128), _Z)
    ring_ll128 = extend_region((4736000, 2), (269484032, 128), _Z)
    allgather = extend_region((4194304, 2), (8589934592, 2048), _Z)
    reduce_scatter = extend_region((8388608, 2), (4294967296, 1024), _Z)
    return {
        "allreduce": [
            ("tree", "LL128", [(0, 16), (2367488, 16), (9999360, 64), (119477248, 128),
                               tree_ll128]),
            ("ring", "LL128", [(0, 2), (4736000, 2), (269484032, 128), ring_ll128, tree_ll128,
                               (119477248, 128), (9999360, 64), (2367488, 16), (0, 16)]),
            ("ring", "Simple", [(4736000, 2), (TUNER_MAX_SIZE, 2), ring_ll128,
                                (269484032, 128)]),
        ],
        "allgather": [("ring", "Simple", [(4194304, 2), (TUNER_MAX_SIZE, 2), allgather,
                                          (8589934592, 2048)])],
        "reduce_scatter": [("ring", "Simple", [(8388608, 2), (TUNER_MAX_SIZE, 2),
                                               reduce_scatter, (4294967296, 1024)])],
    }


#: Ranks per machine -> collective -> ordered (algorithm, protocol, polygon); other shapes fall
#: back to NCCL's tuner ("else { /* Fall back to NCCL's tuner, so no regions */ }").
P5_REGIONS = {8: _p5_eight_per_machine(), 2: _p5_two_per_machine(), 1: _p5_one_per_machine()}


def region_choice(collective: str, size_bytes: int, ranks: int, nodes: int,
                  available) -> tuple[str, str] | None:
    """The (algorithm, protocol) the p5/p5e region tuner makes NCCL run, or None where it
    leaves the choice to NCCL: two machines or fewer, a machine shape or collective it has no
    regions for, or a point no runnable region holds. ``available``: the (algorithm,
    protocol) pairs NCCL could run for this call (the others' regions are skipped)."""
    if nodes <= 2 or ranks % nodes:
        return None
    regions = P5_REGIONS.get(ranks // nodes, {}).get(collective)
    if not regions:
        return None
    point = (float(size_bytes), float(ranks))
    for algorithm, protocol, polygon in regions:
        if (algorithm, protocol) not in available:
            continue
        if is_inside(point, polygon) >= 0:
            return algorithm, protocol
    return None
