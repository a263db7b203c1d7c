"""The ``search:`` key of the ``llm:`` scenario section: the layout search, strictly validated."""

import math

import pytest

from simulator.errors import ConfigError
from simulator.scenario import read_scenario, result_columns, run_study

SEARCH = """
topology: {name: dgx-a100-2node, params: {nodes: 1}}
llm:
  model: gpt3-350m
  global_batch: 16
  search:
    top: 2
    tp: [2, 4]
    pp: [1, 2]
    cp: 1
    virtual_stages: 1
    micro_batch: [1, 2]
    optimizers: [none, distopt]
    recompute: none
    workers: 1
"""


def test_the_search_key_runs_the_layout_search():
    from simulator.workload.llm.search import SearchSpace, search_layouts

    scenario = read_scenario(SEARCH, "s.yaml")
    result = run_study(scenario)
    frame = result.frame
    direct = search_layouts("gpt3-350m", "dgx-a100-2node", {"nodes": 1}, global_batch=16,
                            space=SearchSpace(tp=(2, 4), pp=(1, 2), cp=(1,),
                                              virtual_stages=(1,), micro_batch=(1, 2),
                                              optimizers=("none", "distopt"),
                                              recompute=("none",)),
                            top=2, workers=1, progress=False)
    assert list(frame.columns) == result_columns(scenario)
    assert frame["label"].tolist() == direct.top["label"].tolist()
    assert len(frame) == 2 and frame["step_time_s"].is_monotonic_increasing
    assert all(math.isclose(a, b, rel_tol=1e-12)
               for a, b in zip(frame["step_time_s"], direct.top["step_time_s"]))
    # the space is honoured: only the listed degrees and options appear
    assert set(frame["tp"]) <= {2, 4} and set(frame["pp"]) <= {1, 2}
    assert set(frame["recompute"]) == {"none"}
    counts = result.extras["search"].counts
    assert counts["simulated"] >= 2 and counts["enumerated"] >= counts["simulated"]


@pytest.mark.parametrize("old, new, words", [
    ("  global_batch: 16\n", "  global_batch: 16\n  tp: [2]\n",
     r"s.yaml:\d+: llm.tp: not used with search: the search chooses it"),
    ("  global_batch: 16\n", "  global_batch: [16, 32]\n",
     r"llm.global_batch: one value with search, got 2"),
    ("  global_batch: 16\n", "  global_batch: 16\n  device: a100-sxm4-80gb\n",
     r"llm.device: not used with search: the search uses the topology's GPU"),
    ("[none, distopt]", "[none, zero9]",
     r"llm.search.optimizers.1: expected one of none, distopt, zero1, zero2, zero3, "
     r"got 'zero9'"),
    ("    top: 2\n", "    top: 0\n", r"llm.search.top: must be >= 1, got 0"),
    ("    top: 2\n", "    top: 2\n    time_limit: 0s\n", r"llm.search.time_limit: must be > 0"),
    ("    top: 2\n", "    top: 2\n    depth: 3\n", r"llm.search.depth: unknown key 'depth'; "
                                                   r"valid: top, gpus, tp"),
])
def test_a_bad_search_is_one_line_naming_file_and_key(old, new, words):
    assert old in SEARCH
    with pytest.raises(ConfigError, match=words) as caught:
        read_scenario(SEARCH.replace(old, new, 1), "s.yaml")
    assert "\n" not in str(caught.value)
