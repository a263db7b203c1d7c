"""The typed grammar (simulator/grammar.py): it accepts every shipped file, its keys are the
loaders' keys, ``clustersim schema`` prints it as JSON Schema, and scenarios generated from it
(hypothesis strategies over the models' fields) never crash the loader."""

import json
import subprocess
import sys
import typing
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings, strategies as st
from pydantic import BaseModel

from simulator import grammar
from simulator.errors import ClusterSimError
from simulator.scenario import read_scenario
from simulator.topology.presets import read_preset

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))
PRESETS = sorted((ROOT / "topologies").glob("*.yaml"))
GENERATED = {"cases": 0, "loaded": 0, "refused": 0}


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.name)
def test_every_shipped_scenario_fits_the_typed_grammar(path):
    grammar.Scenario.model_validate(yaml.safe_load(path.read_text()))


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.name)
def test_every_preset_fits_the_typed_grammar(path):
    grammar.TopologyFile.model_validate(yaml.safe_load(path.read_text()))


@pytest.mark.parametrize("text, message", [
    ("name: x\nbuilder: stars\n", "p.yaml:2: builder: expected one of star, fat_tree, gpu_cluster, rail_optimised, multi_plane, three_tier, dragonfly, got 'stars'"),
    ("name: x\nbuilder: star\nparams: {hostz: 4}\n",
     "p.yaml:3: params.hostz: unknown parameter 'hostz' for builder 'star'; valid: hosts"),
    ("name: x\nbuilder: star\nsources: [a, 3]\n", "p.yaml:3: sources.1: expected a string, "
                                                      "got 3"),
    ("name: x\nbuilder: star\nlibrary: {scale: {latency: 0}}\n",
     "p.yaml:3: library.scale.latency: must be > 0, got 0"),
    ("name: x\nbuilder: star\nlibrary: {costs: {launch: 1}}\n",
     "library.costs.launch: unknown key 'launch'; valid: kernel_launch_s, call_overhead_s"),
    ("name: x\nbuilder: star\nlibrary: {costs: {python_call_s: .nan}}\n",
     "library.costs.python_call_s: expected a finite number"),
    ("builder: star\n", "p.yaml: missing required key 'name'"),
    ("name: x\nbuilder: star\ncolour: red\n", "p.yaml:3: colour: unknown key 'colour'"),
    ("# empty\n", "p.yaml: the file is empty"),
])
def test_presets_are_validated_by_their_typed_model(text, message):
    with pytest.raises(ClusterSimError) as err:
        read_preset(text, "p.yaml")
    assert message in str(err.value)


def test_preset_library_settings_reach_the_spec():
    spec = read_preset("name: x\nbuilder: star\nlibrary: {version: 2.18, scale: {latency: 1.5},"
                       " costs: {kernel_launch_s: 4.0e-6}}\n", "p.yaml")
    assert spec.library == {"name": "nccl", "version": "2.18", "scale": {"latency": 1.5},
                            "costs": {"kernel_launch_s": 4e-6}}


def test_the_grammar_rejects_what_it_must():
    from pydantic import ValidationError

    good = yaml.safe_load((ROOT / "scenarios" / "quickstart.yaml").read_text())
    for change in ({"seed": -1}, {"nonsense": 1}, {"collective": {**good["collective"],
                                                                   "slices": 0}}):
        with pytest.raises(ValidationError):
            grammar.Scenario.model_validate({**good, **change})


def test_cli_prints_json_schema_that_validates_the_shipped_files(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    for kind, files in (("scenario", SCENARIOS), ("topology", PRESETS)):
        done = subprocess.run([sys.executable, "-m", "simulator", "schema", kind],
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        schema = json.loads(done.stdout)
        assert schema["title"] == f"clustersim {kind} file"
        for path in files:
            jsonschema.validate(yaml.safe_load(path.read_text()), schema)
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({"name": "x", "nonsense": 1}, schema)


# -- scenarios generated from the grammar -------------------------------------------------------

NAMES = ["ring", "ps", "tree", "double_binary_tree", "resnet50", "vgg16", "dgx-a100", "star",
         "fp32", "amp", "horovod", "ddp", "bsp", "easgd", "rack", "", "x", "64MiB", "1 us",
         "100 Gbps", "per_node", "auto", "nccl", "1e999", "-3"]


def _values(annotation, depth: int):
    """A strategy for a value of ``annotation``: mostly well typed, sometimes not."""
    origin = typing.get_origin(annotation)
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return sections(annotation, depth + 1)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        return st.one_of(*[_values(a, depth) for a in args]) if args else st.none()
    if origin is typing.Literal:
        return st.sampled_from(list(typing.get_args(annotation)) + ["bogus"])
    if origin is list:
        return st.lists(_values(args[0], depth), max_size=3) if depth < 3 else st.just([])
    if origin is dict:
        return st.dictionaries(st.sampled_from(["nodes", "hosts", "gpu", "bogus"]),
                               st.one_of(st.integers(-1, 4), st.sampled_from(NAMES)),
                               max_size=2)
    if annotation is bool:
        return st.booleans()
    if annotation is int:
        return st.integers(-2, 64)
    if annotation is float:
        return st.floats(-1, 4, allow_nan=False)
    if annotation is str:
        return st.sampled_from(NAMES)
    return st.one_of(st.integers(-1, 8), st.sampled_from(NAMES))


@st.composite
def sections(draw, model, depth: int = 0):
    fields = model.model_fields
    required = [k for k, f in fields.items() if f.is_required()]
    optional = [k for k in fields if k not in required]
    chosen = required + draw(st.lists(st.sampled_from(optional), unique=True, max_size=4)) \
        if optional else required
    if draw(st.integers(0, 9)) == 0 and chosen:
        chosen = chosen[1:]                       # sometimes a required key is missing
    return {k: draw(st.one_of(st.sampled_from(GOOD[k]), _values(fields[k].annotation, depth))
                    if k in GOOD else _values(fields[k].annotation, depth)) for k in chosen}


#: Values the loader accepts for common keys, so that generated scenarios also load.
GOOD = {
    "collective": ["allreduce"], "algorithms": [["ring", "tree"], "ring"],
    "aggregations": [["ring", "ps"], "ring"], "models": [["resnet50"], "alexnet"],
    "model": ["resnet50", "gpt2_xl"], "sizes": [["1MiB", 4096], "64KiB"], "gpus": [[2, 4], 4],
    "precision": ["fp32", "fp16"], "bucket": ["25MiB"], "batch_per_gpu": [8, 32],
    "stages": [2, 4], "micro_batches": [[1, 2], 4], "schedules": [["gpipe"], "1f1b"],
    "device": ["a100-sxm4-80gb"], "optimizers": [["sgd"]], "rows": [1000],
    "bottom_mlp": [[13, 64]], "top_mlp": [[64, 1]], "tables": [2], "dim": [16],
    "framework": ["horovod", "ddp"], "single_gpu_throughput": ["100 img/s"],
}


@st.composite
def scenarios(draw):
    doc = {"name": "generated", "topology": draw(st.sampled_from(
        ["star", "dgx-a100", {"name": "star", "params": {"hosts": 4}}, "nope"]))}
    workload = draw(st.sampled_from(["collective", "training", "zero", "pipeline", "hybrid",
                                     "time_to_train"]))
    doc[workload] = draw(sections(grammar.Scenario.model_fields[workload].annotation
                                  .__args__[0]))
    if draw(st.booleans()):
        doc["library"] = draw(st.sampled_from(["nccl", "ideal", {"name": "nccl",
                                                                  "launch": "torch"}]))
    return yaml.safe_dump(doc)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_generated_scenarios_load_or_fail_with_one_line(text):
    GENERATED["cases"] += 1
    try:
        read_scenario(text, "generated.yaml", ROOT / "scenarios")
        GENERATED["loaded"] += 1
    except ClusterSimError as exc:
        GENERATED["refused"] += 1
        message = str(exc)
        assert message.startswith("generated.yaml") and "\n" not in message.strip()


def test_generated_corpus_size(record_property):
    """Runs after the generated cases in this module: how many, loaded and refused."""
    record_property("generated_scenarios", GENERATED)
    print(f"generated scenarios: {GENERATED}, 0 tracebacks")
    if GENERATED["cases"]:
        assert GENERATED["cases"] >= 100


# -- the grammar is the validator ---------------------------------------------------------------

BASE = "topology: star\n"


@pytest.mark.parametrize("body, message", [
    # strict types: a quoted number is not a count, 4.0 is not an integer, 1 is not true
    ("collective: {sizes: 1MiB, gpus: ['4']}", "s.yaml:2: collective.gpus.0: expected an "
                                               "integer, got '4'"),
    ("collective: {sizes: 1MiB, gpus: [4.0]}", "collective.gpus.0: expected an integer, got 4.0"),
    ("collective: {sizes: 1MiB, free_reduce: 1}", "collective.free_reduce: expected true or "
                                                  "false, got 1"),
    # ranges, with the bound
    ("collective: {sizes: 1MiB, slices: 0}", "collective.slices: must be >= 1, got 0"),
    ("training: {models: resnet50, gpus: 8, aggregations: ps, ps: {iterations: 1}}",
     "training.ps.iterations: must be >= 2, got 1"),
    ("training: {models: resnet50, gpus: 8, aggregations: ring, accumulation: 0}",
     "training.accumulation: must be >= 1, got 0"),
    # finite numbers
    ("hybrid: {alpha: .inf}", "hybrid.alpha: expected a finite number, got inf"),
    # choices, listed
    ("collective: {sizes: 1MiB, ps: {placement: near}}",
     "collective.ps.placement: expected one of dedicated, colocated, got 'near'"),
    ("training: {models: resnet5, gpus: 8, aggregations: ring}",
     "training.models.0: expected one of alexnet, vgg11, vgg13, vgg16, vgg19, resnet18"),
    ("zero: {model: gpt3_6.7b, device: a100}", "zero.device: expected one of k80-gk210"),
    # units, parsed at the edge
    ("collective: {sizes: [1MiB, 3 parsecs]}", "collective.sizes.1: cannot parse size '3 parsecs'"),
    ("training: {models: resnet50, gpus: 8, aggregations: ring, failure: {at: soon, "
     "policies: elastic}}", "training.failure.at: cannot parse duration 'soon'"),
    # checks that span keys name the key they blame
    ("training: {models: resnet50, gpus: 8, aggregations: ring, ps: {staleness: 2}}",
     "training.ps.staleness: only meaningful with consistency: ssp (here bsp)"),
    ("collective: {collective: broadcast, algorithms: [ring, ps], sizes: 1MiB}",
     "collective.algorithms.1: ps does not implement broadcast"),
    ("training: {models: resnet50, gpus: 8, aggregations: ring, compression: "
     "{kind: fp16, fraction: 0.5}}", "training.compression.fraction: fraction applies to topk"),
    ("training: {models: resnet50, gpus: 8, aggregations: ring, compression: "
     "[fp16, {kind: topk, frac: 0.1}]}", "training.compression.1.frac: unknown key 'frac'"),
    ("hybrid: {rows: [10, 0]}", "hybrid.rows.1: expected a row count >= 1, got 0"),
    ("time_to_train: {studies: [{model: bert_large, gpus: 8, optimizers: sgd}]}",
     "time_to_train.studies.0.optimizers.0: the sgd convergence model is measured on "
     "resnet50"),
    # shapes
    ("collective:", "s.yaml:2: collective: expected the workload's settings, got nothing"),
    ("collective: [1MiB]", "collective: expected a mapping with keys collective, algorithms"),
    ("collective: {sizes: 1MiB}\nlibrary: [nccl]", "library: expected a name or a mapping"),
    # the loosest steady-state tolerance a step may be extended to
    ("llm: {model: llama2-7b, global_batch: 64, steady_tolerance: 0.5}",
     "llm.steady_tolerance: must be <= 0.001, got 0.5"),
    ("llm: {model: llama2-7b, global_batch: 64, steady_tolerance: 1e-5, search: {gpus: 8}}",
     "llm.steady_tolerance: not used with search"),
    # every problem counted, the first one shown
    ("collective: {sizes: 1MiB, gpus: [0, x], slices: -1}",
     "collective.gpus.0: must be >= 1, got 0 (and 2 more problems)"),
])
def test_the_grammar_validates_scenarios_with_file_line_key_messages(body, message):
    with pytest.raises(ClusterSimError) as err:
        read_scenario(BASE + body + "\n", "s.yaml")
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_numbers_in_exponent_form_are_numbers():
    """YAML 1.1 reads ``1e-5`` as text; the scenario and ``--param`` readers take it for the
    number a user means (YAML 1.2), and leave text that only looks like one alone."""
    from simulator.config import read_yaml, yaml_value
    from simulator.topology.presets import param_value

    data, _ = read_yaml("a: 1e-5\nb: -2E+3\nc: 1.0e-5\nd: 1e5x\ne: 64MiB\nf: 7\n", "t.yaml")
    assert data == {"a": 1e-5, "b": -2000.0, "c": 1e-5, "d": "1e5x", "e": "64MiB", "f": 7}
    assert yaml_value("3e2") == 300.0 and param_value("1e-3") == 1e-3
    # a number key written in exponent form (YAML 1.1 would hand the grammar '1e-3', text)
    scenario = read_scenario(BASE + "training: {models: resnet50, gpus: 8, aggregations: ring, "
                                    "compression: [{kind: topk, fraction: 1e-3}]}\n", "s.yaml")
    assert scenario.training.compressions[0].fraction == 1e-3


def test_the_llm_sections_steady_tolerance_reaches_the_study():
    from simulator.workload.llm.steady import TOLERANCE

    study = read_scenario(BASE + "llm: {model: llama2-7b, global_batch: 64, "
                                 "steady_tolerance: 1e-5}\n", "s.yaml").study
    assert study.steady_tolerance == 1e-5
    default = read_scenario(BASE + "llm: {model: llama2-7b, global_batch: 64}\n",
                            "s.yaml").study
    assert default.steady_tolerance == TOLERANCE


def test_validated_values_reach_the_run_parsed_and_defaulted():
    scenario = read_scenario(BASE + "training: {models: resnet50, gpus: [8, 16], aggregations: "
                                    "[ring, ps-ssp2], bucket: 10MiB, ps: {consistency: ssp, "
                                    "staleness: 3}, compression: [fp16, {kind: topk, "
                                    "fraction: 0.01}], single_gpu_throughput: 390 img/s}\n",
                             "s.yaml")
    spec = scenario.training
    assert spec.bucket_bytes == 10 * 2**20 and spec.gpus == (8, 16)
    assert spec.ps.staleness == 3 and spec.ps.easgd_tau is None
    assert [c.kind for c in spec.compressions] == ["fp16", "topk"]
    assert spec.compressions[1].fraction == 0.01
    assert spec.single_gpu_throughput == 390.0
    easgd = read_scenario(BASE + "training: {models: resnet50, gpus: 8, aggregations: ps, "
                                 "ps: {consistency: easgd}}\n", "s.yaml").training.ps
    assert easgd.easgd_tau == 1 and easgd.staleness is None
    one = read_scenario(BASE + "hybrid: {rows: 1000, tables: 2, bottom_mlp: [13, 128]}\n",
                        "s.yaml").study
    assert one.spec.rows == 1000 and one.spec.tables == 2 and one.shardings == ("hash", "range")
    listed = read_scenario(BASE + "hybrid: {rows: [10, 20], tables: 2, bottom_mlp: [13, 128]}\n",
                           "s.yaml").study
    assert listed.spec.rows == (10, 20)


def test_schema_lists_registry_names_for_editors():
    schema = json.loads(grammar.json_schema("scenario"))
    training = schema["$defs"]["TrainingSection"]["properties"]
    assert "resnet50" in training["models"]["anyOf"][0]["enum"]
    assert "a100-sxm4-80gb" in training["device"]["anyOf"][0]["enum"]
    assert schema["$defs"]["CollectiveSection"]["properties"]["collective"]["enum"][0] == \
        "allreduce"


def test_empty_scenario_file_says_so():
    with pytest.raises(ClusterSimError, match="s.yaml: the file is empty"):
        read_scenario("# nothing here\n", "s.yaml")
