"""Simulated against measured: comparison, calibration and the published validation cases.

* :mod:`.collective`: nccl-tests style points, simulated beside measured, with MAPE and signed
  bias per size band;
* :mod:`.training`: training throughput and speedup tables against simulated training;
* :mod:`.calibrate`: fit a preset's link constants to a user's own measured file;
* :mod:`.calibrate_library`: fit the collective library's launch and latency scales;
* :mod:`.validation`: the published comparisons, run with the settings their sources state.

Nothing here parses the command line; :mod:`simulator.cli.compare` does.
"""
