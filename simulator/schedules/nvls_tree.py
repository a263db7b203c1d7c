"""NVLink SHARP across machines (NCCL's NVLS tree): the NVSwitch reduces inside each machine.

On NVSwitch machines of Hopper and later the switch itself sums and multicasts (NVLink SHARP:
``multimem.ld_reduce`` / ``multimem.st``); across machines NCCL joins the machines' results
over their NICs (``NCCL_ALGO=NVLSTree``, NCCL 2.18 and later). With ``L`` GPUs per machine, GPU
``i`` of a machine owns block ``i``:

1. every GPU sends each block to its machine's switch, which sums them (the switch is a helper
   rank, one per machine);
2. the switch returns block ``i``'s machine sum to GPU ``i``;
3. the GPUs ``i`` of all machines all-reduce block ``i`` over their NICs: each half of the
   block reduced up and broadcast down one of NCCL's two complementary binary trees over the
   machines (:func:`~simulator.schedules.double_tree.double_trees`), as NCCL's NVLS tree does;
4. GPU ``i`` writes the total of block ``i`` to its switch, which multicasts it to the
   machine's other GPUs.

A GPU's NVLink carries about ``n (1 + 1/L)`` each way (as single-machine NVLS, against a ring's
``2 (L-1)/L n``), and its NIC about ``2 n/L``, as in NCCL's double binary tree. With ``local_ranks`` unset the ranks form one
machine: NVLS on one machine. Block ``i`` travels on channel ``i``: the blocks proceed side by
side, as NVLS's per-GPU reductions do, each pipelined on its own FIFO connections (its
multicast on channel ``L + i``, each tree's reduce and broadcast on channels of their own),
and ``loops`` cuts the
blocks into pieces that go through all phases one after another, as NCCL's kernels loop over
chunks, so that the phases overlap across loops.
"""

from __future__ import annotations

import numpy as np

from ..errors import ScheduleError
from .base import Schedule, ScheduleBuilder, split_bytes
from .double_tree import double_trees
from .tree import positive_int


def nvls_tree(collective: str, ranks: int, size_bytes: int,
              local_ranks: int | None = None, loops: int = 1) -> Schedule:
    """NVLS inside machines, a ring of each block across machines (see the module docstring).

    ``loops`` cuts every block into that many pieces run one after another through all four
    phases, as NCCL's kernels loop over chunks: each FIFO connection carries loop ``k``'s
    transfers before loop ``k+1``'s, so the phases overlap across loops.
    """
    p = ranks
    local = p if local_ranks is None else positive_int("local_ranks", local_ranks)
    loops = positive_int("loops", loops)
    if p % local:
        raise ScheduleError(f"nvls_tree needs whole machines: {p} ranks are not a multiple of "
                            f"local_ranks={local}")
    machines = p // local
    # chunk (i, k, q): half q of loop k of block i (one half per tree across machines);
    # block i is owned by local rank i
    halves = 2 if machines > 1 else 1
    chunk_bytes = [int(x) for block in split_bytes(size_bytes, local)
                   for part in split_bytes(int(block), loops)
                   for x in split_bytes(int(part), halves)]
    trees = double_trees(machines) if machines > 1 else ()
    b = ScheduleBuilder(collective, "nvls_tree", p, chunk_bytes, helper_ranks=machines)

    def rank(m: int, i: int) -> int:
        return m * local + i

    def switch(m: int) -> int:
        return p + m

    def chunk(i: int, k: int, q: int = 0) -> int:
        return (i * loops + k) * halves + q

    span = max((int(t.up_step.max()) + 1 for t in trees), default=0)
    for k in range(loops):
        base = 0
        for m in range(machines):                   # 1. every block into the switch
            for j in range(local):
                for i in range(local):
                    b.send(rank(m, j), switch(m), chunk(i, k), nchunks=halves, reduce=True,
                           step=base, phase="switch-reduce", channel=i)
        for m in range(machines):                   # 2. machine sums to the blocks' owners
            for i in range(local):
                b.send(switch(m), rank(m, i), chunk(i, k), nchunks=halves, reduce=False,
                       step=base + 1, phase="switch-reduce", channel=i)
        for q, tree in enumerate(trees):            # 3. half q of block i up and down a
            for up in (True, False):                #    binary tree of the machines
                label = tree.up_step if up else tree.down_step
                kids = np.flatnonzero(tree.parent >= 0)
                for c in kids[np.lexsort((kids, label[kids]))].tolist():
                    parent = int(tree.parent[c])
                    for i in range(local):
                        src, dst = (rank(c, i), rank(parent, i)) if up else \
                            (rank(parent, i), rank(c, i))
                        b.send(src, dst, chunk(i, k, q), reduce=up,
                               step=base + 2 + int(label[c]) + (0 if up else span),
                               channel=(2 + 2 * q + (0 if up else 1)) * local + i,
                               phase="inter-tree-reduce" if up else "inter-tree-broadcast")
        step = base + 2 + 2 * span + 1
        for m in range(machines):                   # 4. totals into the switch, multicast
            for i in range(local):
                b.send(rank(m, i), switch(m), chunk(i, k), nchunks=halves, reduce=False,
                       step=step, phase="switch-multicast", channel=local + i)
        for m in range(machines):
            for i in range(local):
                for j in range(local):
                    if j != i:
                        b.send(switch(m), rank(m, j), chunk(i, k), nchunks=halves,
                               reduce=False, step=step + 1, phase="switch-multicast",
                               channel=local + i)
    b.notes.update(local_ranks=local, machines=machines, loops=loops)
    return b.build()
