"""Layering: pure layers never import SimPy (or later layers)."""

import subprocess
import sys

import pytest


@pytest.mark.parametrize("module", ["simulator.units", "simulator.topology",
                                    "simulator.schedules", "simulator.schedules.execute",
                                    "simulator.theory", "simulator.workload.models"])
def test_pure_layers_do_not_import_simpy(module):
    code = (f"import sys, {module}; "
            "bad = [m for m in ('simpy', 'simulator.engine', 'matplotlib') if m in sys.modules]; "
            "print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
