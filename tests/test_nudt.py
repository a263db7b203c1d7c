"""The NUDT study (Zhang et al. 2021) from the presets: ring 31x +- 1 and PS 24x +- 2 at 32 GPUs.

Golden summary compared as data: the scenario file is run as users run it; nothing is tuned in
the test. Reported by the study for ResNet-50 on 32 K80 GPUs: PS 24x (78 %), ring 31x (97.2 %),
PS linear only up to about 8 GPUs, per-GPU throughput falling under PS and flat under ring.
"""

from pathlib import Path

import pytest

from simulator.scenario import load_scenario, run_scenario

SCENARIO = Path(__file__).parent.parent / "scenarios" / "nudt_ps_vs_ring.yaml"


@pytest.fixture(scope="module")
def resnet():
    frame = run_scenario(load_scenario(str(SCENARIO)))
    return frame[frame["model"] == "resnet50"].set_index(["aggregation", "gpus"])


def test_speedups_at_32_gpus(resnet):
    assert abs(resnet.loc[("ring", 32), "speedup"] - 31) <= 1
    assert abs(resnet.loc[("ps", 32), "speedup"] - 24) <= 2


def test_ps_linear_to_about_8_gpus_then_falls_behind(resnet):
    eff = resnet.loc["ps", "efficiency"]
    assert (eff.loc[[1, 2, 4]] > 0.95).all()
    assert eff.loc[8] > 0.85
    assert eff.loc[32] < eff.loc[16] < eff.loc[8]


def test_per_gpu_throughput_flat_for_ring_falling_for_ps(resnet):
    ring = resnet.loc["ring", "per_gpu_samples_s"]
    ps = resnet.loc["ps", "per_gpu_samples_s"]
    assert ring.min() > 0.97 * ring.max()
    assert ps.is_monotonic_decreasing
