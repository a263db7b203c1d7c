"""Cross-checks against other simulators.

:mod:`.simgrid` replays the collectives of one or several jobs on SimGrid (an optional
dependency, imported only there) and compares its times with the event engine's, flow by flow.
"""

from simulator.validation.simgrid import (
    Comparison, ReplayJob, Timeline, compare, load_simgrid, replay_jobs, run_engine,
    run_simgrid,
)

__all__ = ["Comparison", "ReplayJob", "Timeline", "compare", "load_simgrid", "replay_jobs",
           "run_engine", "run_simgrid"]
