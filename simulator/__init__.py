"""clustersim: a flow-level discrete-event simulator of gradient aggregation.

Layers, imported one way only::

    units -> topology -> schedules (pure) -> engine (the only SimPy code) -> records -> report

See README.md for the tour and DESIGN notes for the reasoning.
"""

__version__ = "0.1.0"
