"""Schedules executed on numbers: every algorithm computes its collective exactly, moves the bytes
its formula says, in the number of steps its formula says (DESIGN.md sections 4 and 8)."""

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from simulator.errors import ConfigError, ScheduleError
from simulator.schedules import ALGORITHMS, make_schedule
from simulator.schedules.deps import dependencies
from simulator.schedules.double_tree import double_trees
from simulator.schedules.execute import verify
from simulator.schedules.hierarchical import refine
from simulator.schedules.tree import binomial, btree, ceil_lg

RANKS = list(range(1, 65))
SLICED_RANKS = set(range(1, 18)) | {24, 31, 32, 33, 48, 63, 64}   # slices=3 too (runtime)
SIZES = [1, 5, 64, 1000]
ROOTED = ("broadcast", "reduce")
# Algorithms with their own tests below (options that need a shape, or an alias).
COMPOSED = ("hierarchical", "ps", "two_tree")


def assert_correct(schedule):
    problems = verify(schedule)
    assert not problems, f"{schedule.algorithm} {schedule.collective} p={schedule.ranks} " \
                         f"n={schedule.size_bytes}: {problems[:3]}"


def option_sets(algorithm, collective, p):
    """Option variants worth executing for one (algorithm, collective, p)."""
    roots = sorted({0, p // 2, p - 1}) if collective in ROOTED else [None]
    segments = {"tree": [1, 3], "double_binary_tree": [1, 2, 8]}.get(algorithm, [None])
    for root in roots:
        for seg in segments:
            opts = {}
            if root is not None:
                opts["root"] = root
            if seg is not None:
                opts["segments"] = seg
            yield opts


PAIRS = [(name, coll) for name, algo in ALGORITHMS.items() if name not in COMPOSED
         for coll in algo.collectives]


# -- correctness: every rank ends with exactly what the collective defines ------------------------
@pytest.mark.parametrize("algorithm,collective", PAIRS)
@pytest.mark.parametrize("p", RANKS)
def test_every_algorithm_computes_its_collective(algorithm, collective, p):
    sizes = [p * k for k in (1, 3, 40)] if collective == "alltoall" else SIZES
    for opts in option_sets(algorithm, collective, p):
        for size in sizes:
            for slices in (1, 3) if p in SLICED_RANKS else (1,):
                assert_correct(make_schedule(algorithm, collective, p, size, slices=slices,
                                             **opts))


def test_alias_two_tree_is_the_double_binary_tree():
    a = make_schedule("two_tree", "allreduce", 12, 1000)
    b = make_schedule("double_binary_tree", "allreduce", 12, 1000)
    assert np.array_equal(a.src, b.src) and np.array_equal(a.dst, b.dst)
    assert_correct(a)


SHAPES = [(1, 1), (1, 5), (4, 1), (2, 3), (3, 2), (4, 4), (8, 2), (3, 5), (8, 8)]
LEVELS = ["ring", "halving_doubling", "direct"]
OUTERS = LEVELS + ["tree", "binomial_tree", "double_binary_tree"]


@pytest.mark.parametrize("local,nodes", SHAPES)
@pytest.mark.parametrize("inner", LEVELS)
def test_hierarchical_computes_allreduce(local, nodes, inner):
    for outer in OUTERS:
        for size in (1, 5, 1000):
            assert_correct(make_schedule("hierarchical", "allreduce", local * nodes, size,
                                         local_ranks=local, inner=inner, outer=outer))
    assert_correct(make_schedule("hierarchical", "allreduce", local * nodes, 777, slices=3,
                                 local_ranks=local, inner=inner, outer="ring"))


PS_LAYOUTS = [(1, None), (2, None), (3, None), (2, [0.5, 0.5]), (3, [0.7, 0.2, 0.1])]


@pytest.mark.parametrize("servers,shards", PS_LAYOUTS)
@pytest.mark.parametrize("placement", ["dedicated", "colocated"])
@pytest.mark.parametrize("phased", [True, False])
def test_ps_computes_allreduce(servers, shards, placement, phased):
    for n in [1, 2, 3, 5, 8, 16, 17, 33]:
        if placement == "colocated" and servers > n:
            continue
        for size in SIZES:
            for slices in (1, 2):
                assert_correct(make_schedule("ps", "allreduce", n, size, slices=slices,
                                             servers=servers, placement=placement,
                                             shards=shards, phased=phased))


# -- step counts --------------------------------------------------------------------------------
@pytest.mark.parametrize("p", RANKS)
def test_step_counts(p):
    lg, lg_up = p.bit_length() - 1, ceil_lg(p)
    steps = lambda algo, coll="allreduce", **o: make_schedule(algo, coll, p, 64 * p, **o).steps
    assert steps("ring") == 2 * (p - 1)
    assert steps("ring", "reduce_scatter") == steps("ring", "allgather") == p - 1
    assert steps("ring", "broadcast") == steps("ring", "reduce") == p - 1
    assert steps("binomial_tree") == 2 * lg_up
    assert steps("binomial_tree", "reduce") == steps("binomial_tree", "broadcast") == lg_up
    assert steps("tree") == 2 * lg_up                       # NCCL's btree is ceil(lg p) high
    if p > 1:
        assert steps("tree", segments=4) == 2 * (lg_up + 3)
        assert steps("direct") == 2
        assert steps("direct", "alltoall") == 1
        assert steps("ps") == 2
    extra = 0 if p == 1 << lg else 2                         # fold and unfold
    assert steps("halving_doubling") == 2 * lg + extra
    assert steps("halving_doubling", "reduce_scatter") == lg + extra


@pytest.mark.parametrize("p", range(2, 65))
def test_btree_matches_nccl(p):
    """Children and parent of every rank as NCCL's ncclGetBtree computes them."""
    tree = btree(p)
    for rank in range(p):
        bit = 1
        while bit < p and not bit & rank:
            bit <<= 1
        if rank == 0:
            up, down = -1, [bit >> 1]
        else:
            up = (rank ^ bit) | (bit << 1)
            up = rank ^ bit if up >= p else up
            low = bit >> 1
            down = [rank - low, rank + low] if low else []
            while low and down[1] >= p:
                low >>= 1
                down = [down[0]] + ([rank + low] if low else [])
        assert tree.parent[rank] == up
        assert sorted(np.flatnonzero(tree.parent == rank).tolist()) == sorted(down)
    assert tree.children().max() <= 2
    assert tree.height() == ceil_lg(p)


# -- the complementary double binary tree ---------------------------------------------------------
@pytest.mark.parametrize("p", range(2, 65))
def test_double_trees_are_complementary(p):
    """What NCCL guarantees: every rank is interior in at least one tree, and in at most one --
    except rank 0 for odd p (root of tree 0 with one child, and the shift of interior p-1)."""
    t0, t1 = double_trees(p)
    both = np.flatnonzero(t0.interior() & t1.interior()).tolist()
    assert both == ([0] if p % 2 else [])
    assert (t0.interior() | t1.interior()).all()
    assert t0.children().max() <= 2 and t1.children().max() <= 2
    assert (t0.root, t1.root) == (0, 1 if p % 2 else p - 1)
    if p % 2 == 0:   # mirror: odd ranks are tree 0's leaves and tree 1's interior
        assert np.array_equal(t0.interior(), np.arange(p) % 2 == 0)


# -- bytes per rank against the formulas ----------------------------------------------------------
POW2 = [1, 2, 4, 8, 16, 32, 64]


@pytest.mark.parametrize("algorithm,p", [(a, p) for a in ("ring", "halving_doubling", "direct")
                                          for p in POW2 + [3, 6, 12, 24]
                                          if a != "halving_doubling" or p in POW2])
def test_bandwidth_optimal_bytes(algorithm, p):
    """2(p-1)/p·n per rank for all-reduce, half that per phase (halving-doubling: p = 2^d)."""
    n = p * 1000
    for coll, factor in (("allreduce", 2), ("reduce_scatter", 1), ("allgather", 1)):
        s = make_schedule(algorithm, coll, p, n, slices=2)
        want = factor * (p - 1) * n // p
        assert (s.bytes_sent() == want).all() and (s.bytes_received() == want).all()


@pytest.mark.parametrize("p", [1, 2, 5, 8, 13])
def test_alltoall_bytes(p):
    s = make_schedule("direct", "alltoall", p, p * 48)
    net = s.src != s.dst                                  # local copies cross no link
    sent = np.bincount(s.src[net], weights=s.transfer_bytes[net], minlength=p)
    assert (sent == (p - 1) * 48).all()
    assert (s.src == s.dst).sum() == p


def tree_bytes(trees, parts):
    """Per rank: every non-root sends its part up once, every parent sends it to each child."""
    out = np.zeros(trees[0].size, dtype=np.int64)
    for tree, part in zip(trees, parts):
        out += part * ((tree.parent >= 0) + tree.children())
    return out


@pytest.mark.parametrize("p", range(1, 65))
def test_double_tree_bytes(p):
    n = 2 * 8 * 1000
    s = make_schedule("double_binary_tree", "allreduce", p, n)
    want = tree_bytes(double_trees(p), [n // 2, n // 2])
    assert np.array_equal(s.bytes_sent(), want) and np.array_equal(s.bytes_received(), want)
    assert s.bytes_sent().sum() == 2 * (p - 1) * n
    assert s.bytes_sent().max() <= 2 * n          # a single tree's interior ranks send 3n
    assert set(s.channel.tolist()) <= {0, 1}


@pytest.mark.parametrize("p", [2, 3, 7, 8, 33, 64])
def test_single_tree_bytes(p):
    n = 3000
    s = make_schedule("tree", "allreduce", p, n, segments=3)
    assert np.array_equal(s.bytes_sent(), tree_bytes([btree(p)], [n]))
    if p > 3:
        assert s.bytes_sent().max() == 3 * n      # interior: up once, down to two children
    b = make_schedule("binomial_tree", "allreduce", p, n)
    assert np.array_equal(b.bytes_sent(), tree_bytes([binomial(p)], [n]))
    assert b.bytes_received()[0] == ceil_lg(p) * n                  # root: one per child
    chain = make_schedule("ring", "broadcast", p, n, root=p - 1)
    assert chain.bytes_sent()[p - 1] == n and chain.bytes_received()[p - 1] == 0
    assert chain.bytes_sent().sum() == (p - 1) * n


@pytest.mark.parametrize("servers,shards", PS_LAYOUTS)
def test_ps_dedicated_bytes(servers, shards):
    N, n = 6, 6000
    s = make_schedule("ps", "allreduce", N, n, servers=servers, shards=shards)
    shard = (np.full(servers, n // servers) if shards is None
             else np.round(np.array(shards) * n).astype(np.int64))
    assert s.helper_ranks == servers
    assert (s.bytes_sent()[:N] == n).all() and (s.bytes_received()[:N] == n).all()
    assert np.array_equal(s.bytes_received()[N:], N * shard)
    assert np.array_equal(s.bytes_sent()[N:], N * shard)


@pytest.mark.parametrize("N", [2, 4, 7])
def test_ps_colocated_even_is_like_ring(N):
    n = N * 100
    s = make_schedule("ps", "allreduce", N, n, servers=N, placement="colocated")
    assert s.helper_ranks == 0 and (s.src != s.dst).all()
    assert (s.bytes_sent() == 2 * (N - 1) * n // N).all()


def test_ps_uneven_shard_sizes_round_to_the_size():
    s = make_schedule("ps", "allreduce", 2, 10, servers=3, shards=[0.7, 0.2, 0.1])
    assert s.chunk_bytes.tolist() == [7, 2, 1]
    # 3.5, 1.75, 1.75: floors 3, 1, 1; the two bytes left go to the largest remainders
    s = make_schedule("ps", "allreduce", 2, 7, servers=3, shards=[0.5, 0.25, 0.25])
    assert s.chunk_bytes.tolist() == [3, 2, 2]


@pytest.mark.parametrize("phased", [True, False])
def test_ps_phases(phased):
    """Phased: one barrier before the first pull. Not phased: a pull waits only for its shard."""
    s = make_schedule("ps", "allreduce", 5, 1000, servers=2, phased=phased)
    pulls = np.flatnonzero(s.step == 1)
    assert s.sync.sum() == (1 if phased else 0)
    if phased:
        assert s.sync[pulls[0]]
    indptr, indices = dependencies(s)
    for i in pulls:
        deps = indices[indptr[i]:indptr[i + 1]]
        assert (s.src_chunk[deps] == s.src_chunk[i]).all()
        assert len(deps) == 5          # the five pushes of this shard


@pytest.mark.parametrize("local,nodes", [(2, 2), (4, 2), (8, 4), (3, 5)])
def test_hierarchical_2d_ring_bytes_and_steps(local, nodes):
    p, n = local * nodes, local * nodes * 120
    s = make_schedule("hierarchical", "allreduce", p, n, local_ranks=local)
    inter = (s.src // local) != (s.dst // local)
    tb = s.transfer_bytes
    intra_sent = np.bincount(s.src[~inter], weights=tb[~inter], minlength=p)
    inter_sent = np.bincount(s.src[inter], weights=tb[inter], minlength=p)
    assert (intra_sent == 2 * (local - 1) * n // local).all()
    assert (inter_sent == 2 * (nodes - 1) * (n // local) // nodes).all()
    assert s.steps == 2 * (local - 1) + 2 * (nodes - 1)


def test_pipelined_segments_wait_only_for_their_own_segment():
    for name, opts in (("tree", {"segments": 4}), ("double_binary_tree", {})):
        s = make_schedule(name, "allreduce", 13, 4000, **opts)
        indptr, indices = dependencies(s)
        owner = np.repeat(np.arange(len(s)), np.diff(indptr))
        assert (s.src_chunk[indices] == s.src_chunk[owner]).all()
        assert len(np.unique(s.src_chunk)) == len(s.chunk_bytes)


def test_binomial_tree_runs_in_rounds():
    """One barrier per step: a rank serves its children one round after another (MPICH)."""
    for p in (2, 5, 8, 13):
        s = make_schedule("binomial_tree", "allreduce", p, 1000)
        assert (np.diff(s.step) >= 0).all()
        assert np.array_equal(np.flatnonzero(s.sync), np.flatnonzero(np.diff(s.step)) + 1)
        assert s.sync.sum() == 2 * ceil_lg(p) - 1


def test_halving_doubling_fold_barrier():
    for p, barriers in ((8, 0), (6, 1), (7, 1)):
        for coll in ("allreduce", "reduce_scatter", "allgather"):
            s = make_schedule("halving_doubling", coll, p, 1000)
            assert s.sync.sum() == barriers
            if barriers:
                assert s.phase_of(int(np.flatnonzero(s.sync)[0] - 1)) == "fold"


@pytest.mark.parametrize("inner,outer", [("ring", "binomial_tree"), ("halving_doubling", "ring"),
                                         ("halving_doubling", "halving_doubling")])
def test_hierarchical_copies_share_barriers(inner, outer):
    """The per-node and per-block copies of a phase share its barriers instead of queueing."""
    local, nodes = 3, 5
    s = make_schedule("hierarchical", "allreduce", local * nodes, 999, local_ranks=local,
                      inner=inner, outer=outer)
    one = sum(int(make_schedule(algo, coll, k, 999).sync.sum()) for algo, coll, k in (
        (inner, "reduce_scatter", local), (outer, "allreduce", nodes),
        (inner, "allgather", local)))
    assert s.sync.sum() == one
    assert_correct(s)


# -- errors ---------------------------------------------------------------------------------------
def test_unsupported_combination_names_the_supporting_algorithms():
    with pytest.raises(ScheduleError, match="algorithms for alltoall: direct"):
        make_schedule("halving_doubling", "alltoall", 4, 400)
    with pytest.raises(ScheduleError, match="binomial_tree, ring, tree"):
        make_schedule("double_binary_tree", "broadcast", 4, 400)
    with pytest.raises(ScheduleError, match="does not implement reduce_scatter"):
        make_schedule("hierarchical", "allreduce", 4, 400, local_ranks=2, inner="tree")


@pytest.mark.parametrize("algorithm,collective,options,error,match", [
    ("ring", "allreduce", {"segments": 2}, ConfigError, "accepts: root"),
    ("ring", "allreduce", {"root": 1}, ConfigError, "broadcast and reduce only"),
    ("tree", "broadcast", {"root": 4}, ConfigError, r"0\.\.3"),
    ("tree", "allreduce", {"segments": 0}, ConfigError, "segments must be an integer"),
    ("double_binary_tree", "allreduce", {"segments": 1.5}, ConfigError, "segments"),
    ("direct", "alltoall", {}, ScheduleError, "divisible"),
    ("hierarchical", "allreduce", {}, ScheduleError, "needs option local_ranks"),
    ("hierarchical", "allreduce", {"local_ranks": 3}, ScheduleError, "divisor"),
    ("hierarchical", "allreduce", {"local_ranks": 2, "outer": "nope"}, ConfigError,
     "unknown algorithm"),
    ("hierarchical", "allreduce", {"local_ranks": 2, "outer": "ps"}, ScheduleError,
     "helper ranks"),
    ("ps", "allreduce", {"servers": 0}, ConfigError, "servers"),
    ("ps", "allreduce", {"placement": "nearby"}, ConfigError, "dedicated, colocated"),
    ("ps", "allreduce", {"placement": "colocated", "servers": 5}, ConfigError, "exceed"),
    ("ps", "allreduce", {"servers": 2, "shards": [1.0]}, ConfigError, "one per server"),
    ("ps", "allreduce", {"servers": 2, "shards": [0.6, 0.6]}, ConfigError, "sum to 1"),
    ("ps", "allreduce", {"servers": 2, "shards": [1.2, -0.2]}, ConfigError, "positive"),
    ("ps", "allreduce", {"shards": "all"}, ConfigError, "fractions"),
    ("ps", "allreduce", {"phased": "yes"}, ConfigError, "phased"),
])
def test_invalid_options_rejected(algorithm, collective, options, error, match):
    with pytest.raises(error, match=match):
        make_schedule(algorithm, collective, 4, 1001, **options)


# -- helpers ---------------------------------------------------------------------------------------
partition = st.lists(st.integers(0, 6), min_size=1, max_size=8)


@settings(max_examples=200, deadline=None)
@given(partition, partition)
def test_refine_is_a_common_refinement(a, b):
    total = max(sum(a), sum(b))
    a[-1] += total - sum(a)
    b[-1] += total - sum(b)
    fine, ba, bb = refine(a, b)
    off = np.concatenate(([0], np.cumsum(fine)))
    for part, bounds in ((a, ba), (b, bb)):
        assert bounds[0] == 0 and bounds[-1] == len(fine)
        assert (np.diff(bounds) >= 1).all()                      # no chunk maps to nothing
        assert np.array_equal(off[bounds], np.concatenate(([0], np.cumsum(part))))


def test_schedules_import_no_simpy():
    code = "import sys, simulator.schedules; sys.exit('simpy' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_registry_lists_collectives_correctly():
    for algo in ALGORITHMS.values():
        for coll in ("allreduce", "reduce_scatter", "allgather", "broadcast", "reduce",
                     "alltoall"):
            if coll in algo.collectives:
                continue
            with pytest.raises(ScheduleError):
                make_schedule(algo.name, coll, 4, 400)
    assert all("allreduce" in algo.collectives for algo in ALGORITHMS.values())


@pytest.mark.parametrize("p", [1, 5, 8])
def test_every_schedule_runs_to_completion_on_the_engine(p):
    """FIFO connections, data flow and barriers never deadlock (smoke test; timings are
    checked against the closed forms in test_exactness.py)."""
    from simulator.engine.runner import simulate
    from simulator.topology import endpoints, load_topology

    graph = load_topology("star", {"hosts": str(p + 3), "link_bandwidth": "10GB/s",
                                   "link_latency": "1us"})
    hosts = endpoints(graph)
    for name, algo in ALGORITHMS.items():
        opts = {"local_ranks": 4 if p % 4 == 0 else 1} if name == "hierarchical" else {}
        if name == "ps":
            opts = {"servers": 2, "phased": p == 5}
        for coll in algo.collectives:
            s = make_schedule(name, coll, p, 64 * p * 6, slices=2, **opts)
            run, _ = simulate(s, graph, hosts[: s.total_ranks])
            assert np.isfinite(run.t_done).all()
            assert (run.time_s > 0) == (s.transfer_bytes[s.src != s.dst].sum() > 0)


def _random_schedule(data):
    from simulator.schedules.base import ScheduleBuilder

    ranks = data.draw(st.integers(1, 5))
    chunks = data.draw(st.integers(1, 6))
    b = ScheduleBuilder("allreduce", "random", ranks, [3] * chunks)
    for _ in range(data.draw(st.integers(0, 30))):
        m = data.draw(st.integers(1, chunks))
        c1 = data.draw(st.integers(0, chunks - m))
        c2 = data.draw(st.integers(0, chunks - m))
        b.send(data.draw(st.integers(0, ranks - 1)), data.draw(st.integers(0, ranks - 1)), c1,
               dst_chunk=c2, nchunks=m, reduce=data.draw(st.booleans()), step=0, phase="x")
    return b.build()


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_vectorised_dependencies_equal_the_reference_walk(data):
    from simulator.schedules.deps import dependencies, dependencies_reference

    schedule = _random_schedule(data)
    a, b = dependencies(schedule), dependencies_reference(schedule)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])


@pytest.mark.parametrize("name,opts", [("ring", {"channels": 2, "local_ranks": 3}),
                                       ("double_binary_tree", {}), ("halving_doubling", {}),
                                       ("ps", {"servers": 2}), ("hierarchical",
                                                                {"local_ranks": 3})])
def test_vectorised_dependencies_on_real_schedules(name, opts):
    from simulator.schedules.deps import dependencies, dependencies_reference

    schedule = make_schedule(name, "allreduce", 6, 1000, slices=2, **opts)
    a, b = dependencies(schedule), dependencies_reference(schedule)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])


def test_packed_sort_orders_pairs_and_declines_what_does_not_fit():
    """The packed sort behind the dependency derivation and the runner's stable order: pairs in
    (high, low) order, None where high << low_bits passes 62 bits (callers then fall back)."""
    import numpy as np

    from simulator.engine.runner import _stable_order
    from simulator.schedules.deps import packed_sort

    rng = np.random.default_rng(5)
    high = rng.integers(0, 50, 1000)
    low = rng.integers(0, 1 << 10, 1000)
    code = packed_sort(high, low, 10)
    order = np.lexsort((low, high))
    assert (code >> 10).tolist() == high[order].tolist()
    assert (code & 1023).tolist() == low[order].tolist()
    assert packed_sort(np.array([1 << 60]), np.array([0]), 10) is None
    for key in (high, np.array([1 << 60, 3, 1 << 60, 3, 0])):       # packed, and the fallback
        assert _stable_order(key).tolist() == np.argsort(key, kind="stable").tolist()
