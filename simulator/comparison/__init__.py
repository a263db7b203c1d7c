"""Simulated against measured: comparison, calibration and the published validation cases.

* :mod:`.collective`: nccl-tests style points, simulated beside measured, with MAPE and signed
  bias per size band;
* :mod:`.training`: training throughput and speedup tables against simulated training;
* :mod:`.llm`: published LLM training runs (tokens/s, TFLOP/s, MFU, step time) against
  simulated steps;
* :mod:`.layer`: one layer or block timed on its own (a framework's layer benchmark) against
  :func:`simulator.workload.llm.layer.simulate_layer`;
* :mod:`.calibrate`: fit a preset's link constants to a user's own measured file;
* :mod:`.calibrate_library`: fit the collective library's launch and latency scales;
* :mod:`.validation`: the published comparisons, run with the settings their sources state.

Nothing here parses the command line; :mod:`simulator.cli.compare` does.
"""
