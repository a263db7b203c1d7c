"""The event engine's flow network with its rate solves compiled: same answers, for big components.

Why: :class:`~.network.FlowNetwork` re-solves, in Python, the whole connected component of
the flows a change touches. Parameter servers connect everything: every worker pushes to
every server, so each drained push re-solves every flow in flight (a 64-worker InceptionV3
step has ~190 of them, ~1.8 ms a solve, ~100,000 solves a training point: minutes).

What this module does: :class:`CompiledFlowNetwork` keeps the flows' state in the arrays of
the compiled kernels (:mod:`._flow_kernel`) and runs *their* solve, drain and completion
queue, which the compiled engines already run against the event engine to 1e-9
(``tests/test_compiled.py``): a departure dirties only the resources where some flow had its
bottleneck, and the dirty resources' component is re-solved by progressive filling, compiled.
(The kernels' local re-solve, which grows a region around the change until the max-min
condition is proven on it, is switched off: where every worker pushes to every server the
region ends up the component anyway, and a 64-worker parameter-server point took 1.7x longer
with it: 116 against 67 us a solve.) The allocation is unique, so the rates are the Python
network's to rounding. SimPy still drives time; the Python side keeps what the records read
(bytes carried, busy time, the flows on each resource).

The compiled kernels know their connections (FIFO: one flow on the wire each) and paths
before they start; here flows arrive with any path, so the structures grow as they come:

* a *path* is a distinct tuple of resource ids; flows on one path share a rate;
* a *connection* is a lane of a path: a flow takes a free lane of its path or opens a new one
  (at most as many lanes as flows ever in flight on that path at once);
* every resource lists the connections with a flow on it (the kernels' ``user_ptr``/
  ``user_idx``; the compiled engines list every connection that ever crosses it, here the
  lanes would pile up), first in a region with room to spare: the unused places hold -1, where
  the kernel's scans stop, so a solve reads the flows in flight, not the room. A flow joins
  the lists when it enters the kernel and leaves them when it drains; a full region is
  rebuilt with twice the room;
* arrays grow by doubling (the completion queue is rebuilt with the flows it holds).

Flows that start at one instant enter the kernel together, at the solve; one kernel call per
solve and per wake-up keeps the Python-to-compiled crossing (~60 arrays) off the per-flow path.
Per-resource rate timelines (``record_rates``) are not kept: the engine uses
:class:`~.network.FlowNetwork` when asked for them.
"""

from __future__ import annotations

import numpy as np
import simpy

from . import _flow_kernel as fk
from .network import Flow, FlowNetwork
from .waves import ragged_arange

#: Fill values of the per-connection (``flow_state``), per-resource (``resource_state``) and
#: per-path (``instant_state``, first five) arrays, for growing them.
_FL_FILL = (False, 0.0, 0.0, 0.0, np.inf, 0, 0, 0.0, False, False, False, 0, 0.0)
_RS_FILL = (0, 0.0, False, False, False, 0.0, 0.0, 0.0, 0, 0.0, -1, 0)
_PATH_FILL = (0, 0.0, 0, False, 0)


def _grown(a: np.ndarray, n: int, fill) -> np.ndarray:
    """``a`` extended to length ``n`` with ``fill``."""
    out = np.full(n, fill, dtype=a.dtype)
    out[:len(a)] = a
    return out


class CompiledFlowNetwork(FlowNetwork):
    """:class:`~.network.FlowNetwork` whose solves, drains and completion queue run compiled
    (numba). Same interface, same event order; rates equal to rounding. No rate timelines."""

    def __init__(self, env: simpy.Environment):
        super().__init__(env, record_rates=False)
        self._pid: dict[tuple, int] = {}            # path -> path id
        self._lanes: list[list[int]] = []           # per path: free connections
        self._flow_at: list[Flow | None] = []       # per connection: its flow in flight
        self._pending: list[Flow] = []              # started since the last solve
        self._n_conn, self._n_path, self._n_idx = 0, 0, 0
        n_conn, n_res, n_path = 64, 64, 64
        self._path_of = np.zeros(n_conn, dtype=np.int64)
        self._res_ptr = np.zeros(n_path + 1, dtype=np.int64)
        self._res_idx = np.zeros(256, dtype=np.int64)
        self._latency = np.zeros(n_path)
        self._caps = np.ones(n_res)
        self._user_ptr = np.zeros(n_res + 1, dtype=np.int64)
        self._user_idx = np.zeros(0, dtype=np.int64)
        self._user_len = np.zeros(n_res, dtype=np.int64)
        self._fl = fk.flow_state(n_conn)
        self._rs = fk.resource_state(n_res)
        self._inst = fk.instant_state(n_conn, n_res, n_path)
        self._flows = fk.flow_heap(n_conn)
        self._ic = np.zeros(13, dtype=np.int64)
        self._ic[fk._LOCAL_LIMIT] = 0        # no local re-solves (see the module docstring)
        self._fc = np.array([np.inf, -np.inf])
        self._net = None
        self._pack()

    def _pack(self) -> None:
        self._net = (self._path_of, self._res_ptr, self._res_idx, self._caps, self._user_ptr,
                     self._user_idx, self._latency)

    # -- growth -------------------------------------------------------------------------------
    def resource(self, key, capacity_bytes_per_s: float) -> int:
        idx = super().resource(key, capacity_bytes_per_s)
        n = len(self._caps)
        if idx >= n:
            m = 2 * n
            while idx >= m:
                m *= 2
            self._caps = _grown(self._caps, m, 1.0)
            self._user_ptr = _grown(self._user_ptr, m + 1, self._user_ptr[-1])
            self._user_len = _grown(self._user_len, m, 0)
            self._rs = tuple(_grown(a, m, f) for a, f in zip(self._rs, _RS_FILL))
            self._grow_instant()
            self._pack()
        self._caps[idx] = self.capacity[idx]
        return idx

    def _grow_instant(self) -> None:
        """Instant-state arrays at the current sizes, keeping what this instant holds."""
        n_conn, n_res, n_path = len(self._path_of), len(self._caps), len(self._res_ptr) - 1
        old = self._inst
        per_path = tuple(_grown(a, n_path, f) for a, f in zip(old[:5], _PATH_FILL))
        self._inst = per_path + (
            _grown(old[5], n_conn, 0), _grown(old[6], n_res, 0), _grown(old[7], n_conn, 0),
            _grown(old[8], n_res, 0), _grown(old[9], n_conn, 0),
            np.empty((4, max(n_conn, n_res)), dtype=np.int64))

    def _path(self, res: tuple) -> int:
        pid = self._pid.get(res)
        if pid is not None:
            return pid
        pid = self._pid[res] = self._n_path
        self._n_path += 1
        self._lanes.append([])
        if pid + 1 >= len(self._res_ptr):
            m = 2 * (len(self._res_ptr) - 1)
            self._res_ptr = _grown(self._res_ptr, m + 1, 0)
            self._latency = _grown(self._latency, m, 0.0)
            self._grow_instant()
        start, end = self._n_idx, self._n_idx + len(res)
        if end > len(self._res_idx):
            self._res_idx = _grown(self._res_idx, max(2 * len(self._res_idx), end), 0)
        self._res_idx[start:end] = res
        self._res_ptr[pid + 1] = end
        self._n_idx = end
        self._pack()
        return pid

    def _connection(self, pid: int) -> int:
        """A free lane of path ``pid``, opened if there is none."""
        lanes = self._lanes[pid]
        if lanes:
            return lanes.pop()
        c = self._n_conn
        self._n_conn += 1
        self._flow_at.append(None)
        if c >= len(self._path_of):
            self._grow_connections(2 * len(self._path_of))
        self._path_of[c] = pid
        return c

    def _grow_connections(self, m: int) -> None:
        self._path_of = _grown(self._path_of, m, 0)
        self._fl = tuple(_grown(a, m, f) for a, f in zip(self._fl, _FL_FILL))
        old, self._flows = self._flows, fk.flow_heap(m)
        f_finish, f_fid = self._fl[4], self._fl[6]
        for c in np.flatnonzero(old[0] >= 0).tolist():      # queued flows, into the new queue
            fk.flow_heap_set(c, self._flows, f_finish, f_fid)
        self._grow_instant()
        self._pack()

    def _make_room(self, res: tuple) -> None:
        """Rebuild the resources' lists of active connections with room for twice what each
        holds (one more on ``res``)."""
        length = self._user_len
        need = length.copy()
        np.add.at(need, list(res), 1)
        room = np.maximum(4, 2 * need)
        ptr = np.zeros(len(room) + 1, dtype=np.int64)
        np.cumsum(room, out=ptr[1:])
        idx = np.full(int(ptr[-1]), -1, dtype=np.int64)
        offsets = ragged_arange(length)
        idx[np.repeat(ptr[:-1], length) + offsets] = \
            self._user_idx[np.repeat(self._user_ptr[:-1], length) + offsets]
        self._user_ptr, self._user_idx = ptr, idx
        self._pack()

    # -- flows --------------------------------------------------------------------------------
    def _arrive(self, flow: Flow) -> None:
        pid = self._path(flow.res)
        c = flow.conn = self._connection(pid)
        self._flow_at[c] = flow
        self._pending.append(flow)

    def _solve(self, _event=None) -> None:
        now = self._begin_solve()
        pending = self._pending
        if pending:
            conns = np.fromiter((f.conn for f in pending), dtype=np.int64, count=len(pending))
            sizes = np.fromiter((f.size for f in pending), dtype=np.float64,
                                count=len(pending))
            n, done = len(pending), 0
            while True:
                done = fk.enter_flows(conns, sizes, done, n, now, self._net, self._fl, self._rs,
                                      self._inst, self._ic, self._user_len)
                if done == n:
                    break
                self._make_room(pending[done].res)
            pending.clear()
        fk.solve_rates(now, self._net, self._fl, self._rs, self._inst, self._ic, self._flows)
        self._arm()

    def _arm(self) -> None:
        now = self.env.now
        if fk.arm_due(self._flows, now, self._ic, self._fc):
            gen = self._wake_generation = int(self._ic[fk._WAKE_GEN])
            ev = self.env.timeout(max(0.0, float(self._fc[fk._T_WAKE]) - now))
            ev.callbacks.append(lambda _e: self._wake(gen))

    def _take_due(self, now: float) -> list[Flow]:
        n_done, _due = fk.drain_flows(now, self._net, self._fl, self._rs, self._inst,
                                      self._ic, self._fc, self._flows)
        dep_rate, flow_at, path_of, lanes = self._inst[1], self._flow_at, self._path_of, \
            self._lanes
        fk.leave_users(self._inst[7], n_done, self._net, self._user_len)
        done = []
        for c in self._inst[7][:n_done].tolist():
            f = flow_at[c]
            flow_at[c] = None
            pid = int(path_of[c])
            f.rate = float(dep_rate[pid])     # the rate it drained at (one per path)
            lanes[pid].append(c)
            done.append(f)
        return done

    def _changed(self) -> bool:
        return bool(self._ic[fk._N_DIRTY])

    def abort(self, flow: Flow) -> None:
        if flow.remaining <= 0 or flow not in self.flows_on[flow.res[0]]:
            return
        now = self.env.now
        c = flow.conn
        sent = 0.0
        if flow in self._pending:           # never entered the kernel: nothing sent
            self._pending.remove(flow)
        else:
            rate, left, t_last = (float(self._fl[1][c]), float(self._fl[2][c]),
                                  float(self._fl[3][c]))
            if rate > 0:
                sent = flow.size - max(0.0, left - rate * (now - t_last))
            fk.abort_flow(c, self._net, self._fl, self._rs, self._inst, self._ic, self._flows)
            fk.leave_users(np.array([c], dtype=np.int64), 1, self._net, self._user_len)
        self._flow_at[c] = None
        self._lanes[self._path_of[c]].append(c)
        self._leave(flow, sent, now)
