"""The engine: the only SimPy code in clustersim.

:mod:`.network` shares link bandwidth among flows max-min fairly, event by event;
:mod:`.runner` runs schedules (and compute) on a topology through it and keeps the records;
:mod:`.fast` gives the same times without events where that is provably exact.
"""
