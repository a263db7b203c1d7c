"""In-network all-reduce (NCCL CollNet Direct over InfiniBand SHARP).

SHARP-capable InfiniBand switches sum the data that passes through them (Graham et al.,
"Scalable Hierarchical Aggregation Protocol (SHArP)", COMHPC 2016); NCCL drives them with its
CollNet algorithms (the ``nccl-rdma-sharp-plugins``, ``NCCL_COLLNET_ENABLE=1``). In CollNet
Direct every GPU of a machine owns one block of the message:

1. inside every machine, each GPU sends block ``i`` to the machine's GPU ``i``, which sums
   them (a direct reduce-scatter over NVLink);
2. GPU ``i`` of every machine sends its machine's sum of block ``i`` through its own NIC to the
   switch, which sums the machines' contributions (the *helper rank*: one rank standing for the
   switch's aggregation, placed on the fabric switch);
3. the switch returns the total of block ``i`` to GPU ``i`` of every machine;
4. inside every machine, GPU ``i`` sends the total of block ``i`` to the others (direct
   all-gather).

Each NIC carries ``n / L`` bytes each way whatever the number of machines, where a ring's
carries ``2(p-1)/p·n``: the reason in-network reduction wins at scale. With ``local_ranks``
unset, every rank is its own machine (the switch reduces the whole message from every rank).
"""

from __future__ import annotations

from ..errors import ScheduleError
from .base import Schedule, ScheduleBuilder, split_bytes
from .tree import positive_int


def collnet(collective: str, ranks: int, size_bytes: int,
            local_ranks: int | None = None) -> Schedule:
    """CollNet Direct all-reduce: intra-machine reduce-scatter, in-switch all-reduce of every
    block, intra-machine all-gather (see the module docstring)."""
    p = ranks
    local = 1 if local_ranks is None else positive_int("local_ranks", local_ranks)
    if p % local:
        raise ScheduleError(f"collnet needs whole machines: {p} ranks are not a multiple of "
                            f"local_ranks={local}")
    machines = p // local
    switch = p                                      # the helper rank
    b = ScheduleBuilder(collective, "collnet", p, split_bytes(size_bytes, local),
                        helper_ranks=1, block_of_chunk=None)
    node = [[m * local + i for i in range(local)] for m in range(machines)]
    for ranks_of in node:                           # 1. reduce-scatter inside each machine
        for j, src in enumerate(ranks_of):
            for i, dst in enumerate(ranks_of):
                if i != j:
                    b.send(src, dst, i, reduce=True, step=0, phase="intra-reduce-scatter")
    for ranks_of in node:                           # 2. every machine's blocks to the switch
        for i, src in enumerate(ranks_of):
            b.send(src, switch, i, reduce=True, step=1, phase="switch-reduce")
    for ranks_of in node:                           # 3. the totals back to each block's owner
        for i, dst in enumerate(ranks_of):
            b.send(switch, dst, i, reduce=False, step=2, phase="switch-broadcast")
    for ranks_of in node:                           # 4. all-gather inside each machine
        for i, src in enumerate(ranks_of):
            for j, dst in enumerate(ranks_of):
                if i != j:
                    b.send(src, dst, i, reduce=False, step=3, phase="intra-all-gather")
    b.notes.update(local_ranks=local, machines=machines)
    return b.build()
