"""``python -m simulator``: the ``clustersim`` program (:mod:`simulator.program`)."""

from .program import run

run()
