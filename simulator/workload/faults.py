"""Failures over a training job: checkpoint-restart, elastic shrink, asynchronous PS; goodput.

Throughput counts samples processed; *goodput* counts samples whose progress survives. A node
failure aborts a synchronous collective: every worker waits on the dead one, so the job stops.
What happens next decides the goodput over a window of ``horizon_s`` seconds of wall time:

* ``checkpoint_restart``: the job writes a checkpoint every ``checkpoint_interval_s`` of work,
  each costing ``checkpoint_cost_s``. On failure everything since the last checkpoint is lost,
  the job restarts after ``restart_s`` (detect, reschedule, reload) on a replacement node and
  continues at the full rate.
* ``elastic``: the survivors re-form the ring without the failed rank after ``reform_s`` (losing
  the iteration in flight) and continue with N-1 workers at the N-1 rate (per-GPU batch kept, so
  the global batch shrinks by 1/N). Checkpoints are still written.
* ``async_ps``: workers never wait for each other; the failed worker's in-flight iteration is
  lost and the others carry on at the N-1 rate without any pause.

The rates come from simulating the training iteration at N and N-1 workers (see
:mod:`.training`); this module is the bookkeeping on top: pure functions, no engine.
"""

from __future__ import annotations

from dataclasses import dataclass

POLICIES = ("none", "checkpoint_restart", "elastic", "async_ps")


@dataclass(frozen=True)
class FailurePlan:
    """One failure in a job window, and the recovery parameters."""

    at_s: float = 1800.0                 # failure time into the window
    horizon_s: float = 3600.0            # window of wall time evaluated
    checkpoint_interval_s: float = 600.0  # work between checkpoints
    checkpoint_cost_s: float = 30.0      # time to write one checkpoint
    restart_s: float = 300.0             # checkpoint-restart: detect + reschedule + reload
    reform_s: float = 30.0               # elastic: re-form the communicator


def _work_done(wall_s: float, plan: FailurePlan) -> tuple[float, float]:
    """Work seconds done in ``wall_s`` of running with checkpoints, and the work seconds
    covered by the last completed checkpoint."""
    cycle = plan.checkpoint_interval_s + plan.checkpoint_cost_s
    full, rest = divmod(wall_s, cycle)
    work = full * plan.checkpoint_interval_s + min(rest, plan.checkpoint_interval_s)
    saved = full * plan.checkpoint_interval_s
    return work, saved


def goodput(policy: str, rate_n: float, rate_n1: float, iteration_s: float,
            plan: FailurePlan) -> dict:
    """Goodput (samples/s over the window) under ``policy``.

    Parameters
    ----------
    rate_n, rate_n1 : float
        Training throughput (samples/s) with N and with N-1 workers.
    iteration_s : float
        Iteration time with N workers (the work in flight at the failure).

    Returns
    -------
    dict with ``goodput_samples_s``, ``lost_s`` (work seconds thrown away), ``stalled_s``
    (wall seconds without progress: restart or re-form) and ``policy``.
    """
    if policy not in POLICIES:
        raise ValueError(f"unknown failure policy {policy!r}; valid: {', '.join(POLICIES)}")
    horizon, t_f = plan.horizon_s, min(plan.at_s, plan.horizon_s)
    if policy == "none" or t_f >= horizon:
        work, _ = _work_done(horizon, plan)
        return {"policy": policy, "goodput_samples_s": rate_n * work / horizon,
                "lost_s": 0.0, "stalled_s": 0.0}
    before, saved = _work_done(t_f, plan)
    if policy == "async_ps":
        lost = min(iteration_s, before)
        after, _ = _work_done(horizon - t_f, plan)
        samples = rate_n * (before - lost) + rate_n1 * after
        return {"policy": policy, "goodput_samples_s": samples / horizon, "lost_s": lost,
                "stalled_s": 0.0}
    if policy == "checkpoint_restart":
        lost = before - saved
        resume = min(horizon, t_f + plan.restart_s)
        after, _ = _work_done(horizon - resume, plan)
        samples = rate_n * (saved + after)
        return {"policy": policy, "goodput_samples_s": samples / horizon, "lost_s": lost,
                "stalled_s": resume - t_f}
    # elastic
    lost = min(iteration_s, before)
    resume = min(horizon, t_f + plan.reform_s)
    after, _ = _work_done(horizon - resume, plan)
    samples = rate_n * (before - lost) + rate_n1 * after
    return {"policy": policy, "goodput_samples_s": samples / horizon, "lost_s": lost,
            "stalled_s": resume - t_f}
