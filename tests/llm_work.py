"""Hand-built StepWork for the step runner's tests (independent of the cost model)."""

from simulator.workload.llm.work import ChunkWork, Comm, Op, StepWork


def make_work(pp, v, m, *, fwd=1e-3, bwd=2e-3, tp_comm=0, act=1 << 20, grad=100 << 20,
              param=100 << 20, opt=5e-3, layers=2, extra=(), tokens=1000):
    chunks = {}
    C = pp * v
    for s in range(pp):
        for k in range(v):
            c = k * pp + s
            f, b = [], []
            for l in range(layers):
                f.append(Op(f"l{l}.fwd", "gemm", fwd / layers, flops=1e12))
                if tp_comm:
                    f.append(Op("tp.allreduce", "tp", comm=Comm("tp", "allreduce", tp_comm)))
                b.append(Op(f"l{l}.bwd", "gemm", bwd / layers, flops=2e12))
                if tp_comm:
                    b.append(Op("tp.allreduce", "tp", comm=Comm("tp", "allreduce", tp_comm)))
            f += list(extra)
            chunks[(s, k)] = ChunkWork(s, k, layers, tuple(f), tuple(b),
                                       act if c < C - 1 else 0, grad, param)
    return StepWork(chunks, pp, v, m, opt, 1e15, 1.2e15, tokens)
