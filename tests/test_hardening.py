"""Issue 18's kinds of bad input: each is one line on stderr, exit 2, no traceback, nothing
written."""

from __future__ import annotations

import time

import pytest

from simulator.cli import main

SCENARIO = "topology: star\ncollective: {collective: allreduce, sizes: [1MiB]}\n"


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(code, err, *needles):
    assert code == 2, err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    for needle in needles:
        assert needle in err, err


@pytest.mark.parametrize("content, needles", [
    (b"name: caf\xe9\n" + SCENARIO.encode(), ("s.yaml:1: not UTF-8 text", "0xE9", "column 10")),
    (bytes(range(128, 256)) * 3, ("s.yaml:1: not UTF-8 text",)),
    (("a: " + "[" * 5000 + "]" * 5000 + "\n").encode(), ("nested too deeply",)),
    (("a: " + "{x: " * 100 + "1" + "}" * 100 + "\n").encode(), ("nested too deeply",)),
    (b"a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
     b"c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
     b"e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\n",
     ("too large", "aliases")),
    (b"name: a\nname: b\n" + SCENARIO.encode(), ("s.yaml:2: duplicate key 'name'",
                                                 "first on line 1")),
    (b"topology: star\ncollective: {collective: allreduce, sizes: [1e400GiB]}\n",
     ("too large", "4 EiB")),
])
def test_bad_scenario_files(tmp_path, capsys, content, needles):
    path = tmp_path / "s.yaml"
    path.write_bytes(content)
    code, _out, err = run(capsys, "run", str(path), "-o", str(tmp_path / "out"))
    one_line_error(code, err, *needles)
    assert not (tmp_path / "out").exists()


def test_a_size_that_overflows(capsys):
    code, _out, err = run(capsys, "collective", "--topology", "star", "--size", "1e400GiB")
    one_line_error(code, err, "--size", "too large")


def test_ten_billion_hosts_refused_at_once(capsys):
    start = time.perf_counter()
    code, _out, err = run(capsys, "collective", "--topology", "star", "--param",
                          "hosts=10000000000", "--size", "1MiB")
    assert time.perf_counter() - start < 1.0
    one_line_error(code, err, "10,000,000,001 nodes", "--max-memory")


def test_max_memory_is_the_limit(capsys):
    code, _out, err = run(capsys, "--max-memory", "64KiB", "collective", "--topology", "star",
                          "--param", "hosts=512", "--size", "1MiB")
    one_line_error(code, err, "more than the limit of 64 KiB")
    code, _out, err = run(capsys, "--max-memory", "0", "collective", "--topology", "star",
                          "--size", "1MiB")
    one_line_error(code, err, "--max-memory must be positive")
    # the limit was this command's: the process's (here, later tests') is as before
    from simulator.guard import machine_memory_bytes, memory_limit_bytes

    assert memory_limit_bytes() == machine_memory_bytes() // 2


def test_slices_and_ranks_refused_before_the_schedule_is_built(capsys):
    """A request whose schedule or event-engine state would not fit is refused from its
    estimate, at once, naming the estimate, the limit and what to do instead."""
    start = time.perf_counter()
    code, _out, err = run(capsys, "collective", "--topology", "star", "--param", "hosts=1024",
                          "--size", "1GiB", "--slices", "100000", "--engine", "event")
    one_line_error(code, err, "209,510,400,000 transfers", "--max-memory", "fewer ranks")
    code, _out, err = run(capsys, "collective", "--topology", "star", "--param",
                          "hosts=65536", "--size", "256MiB", "--algorithm",
                          "double_binary_tree", "--engine", "event")
    one_line_error(code, err, "the event engine on 67,107,840 transfers", "--engine auto")
    assert time.perf_counter() - start < 10.0
    # the same ring fits the default limit, not 1 GiB: the limit is what decides
    code, _out, err = run(capsys, "--max-memory", "1GiB", "collective", "--topology", "star",
                          "--param", "hosts=1024", "--size", "256MiB", "--engine", "event")
    one_line_error(code, err, "the event engine on 2,095,104 transfers", "limit of 1 GiB")
    # options that blow up the schedule on any rank count are named as the cause
    code, _out, err = run(capsys, "collective", "--topology", "star", "--param", "hosts=8",
                          "--size", "1MiB", "--algorithm", "tree", "--option",
                          "segments=1000000000")
    one_line_error(code, err, "2,000,000,000 transfers", "the options alone")


def test_schedule_guard_on_the_library_api():
    from simulator.errors import ConfigError
    from simulator.guard import set_memory_limit
    from simulator.schedules import make_schedule

    try:
        set_memory_limit(1 << 20)
        assert len(make_schedule("ring", "allreduce", 16, 1 << 20)) == 480   # 480 x 360 B fits
        with pytest.raises(ConfigError, match="ring allreduce over 16 ranks has 15,360 "
                                               "transfers; its schedule"):
            make_schedule("ring", "allreduce", 16, 1 << 20, slices=32)
        with pytest.raises(ConfigError, match="double_binary_tree allreduce over 64 ranks"):
            make_schedule("double_binary_tree", "allreduce", 64, 1 << 30)
    finally:
        set_memory_limit(None)


@pytest.mark.parametrize("algorithm, collective, options, size", [
    ("ring", "allreduce", {}, 1 << 20), ("ring", "reduce_scatter", {"channels": 2}, 1 << 20),
    ("ring", "allgather", {}, 1 << 20), ("direct", "allreduce", {}, 1 << 20),
    ("direct", "alltoall", {}, 1 << 20), ("tree", "allreduce", {"segments": 4}, 1 << 20),
    ("tree", "broadcast", {"segments": 3}, 1 << 20), ("tree", "reduce", {}, 1 << 20),
    ("double_binary_tree", "allreduce", {}, 1 << 24),
    ("double_binary_tree", "allreduce", {"channels": 2}, 1 << 24),
    ("two_tree", "allreduce", {"segment_bytes": 100_000}, 3 << 20),
    ("double_binary_tree", "allreduce", {"segments": 5}, 1 << 20),
])
def test_transfer_estimate_is_the_schedule_length(algorithm, collective, options, size):
    from simulator.schedules import make_schedule
    from simulator.schedules.registry import estimated_transfers

    for ranks in (1, 2, 4, 8, 16):
        built = make_schedule(algorithm, collective, ranks, size, **options)
        assert estimated_transfers(algorithm, collective, ranks, size, options) == len(built)


def test_out_of_memory_is_one_line(monkeypatch, capsys):
    """An allocation no estimate covers still ends as one line, not a traceback."""
    import simulator.cli.commands as cli

    def exhausted(_args):
        raise MemoryError

    parser = cli.build_parser
    monkeypatch.setattr(cli, "build_parser", lambda: _with_func(parser(), exhausted))
    code, _out, err = run(capsys, "collective", "--topology", "star", "--size", "1MiB")
    one_line_error(code, err, "out of memory", "--max-memory")


def _with_func(parser, func):
    parse = parser.parse_args

    def parse_args(argv=None):
        args = parse(argv)
        args.func = func
        return args

    parser.parse_args = parse_args
    return parser


def test_measurement_file_that_is_not_utf8(tmp_path, capsys):
    """compare and calibrate read CSV through the same strict decoder as YAML inputs."""
    path = tmp_path / "m.csv"
    path.write_bytes(b"source,topology\nnccl,caf\xe9\n")
    code, _out, err = run(capsys, "compare", str(path), "--topology", "star")
    one_line_error(code, err, "m.csv:2: not UTF-8 text", "0xE9", "column 9")


def test_output_under_a_regular_file(tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO)
    code, _out, err = run(capsys, "run", str(scenario), "-o", str(tmp_path / "afile" / "sub"))
    one_line_error(code, err, "cannot write", "a parent of it is a file")
    assert (tmp_path / "afile").read_text() == "x"


def test_missing_and_directory_inputs(tmp_path, capsys):
    code, _out, err = run(capsys, "run", str(tmp_path))
    one_line_error(code, err)
    code, _out, err = run(capsys, "collective", "--topology", str(tmp_path / "t.yaml"),
                          "--size", "1MiB")
    one_line_error(code, err, "not found")


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_interrupted_run_leaves_complete_results_or_none(tmp_path, sig):
    """A run stopped by SIGTERM or Ctrl-C exits 130 with no half-written file."""
    import signal
    import subprocess
    import sys

    scenario = tmp_path / "s.yaml"
    # ~10 s of compiled-kernel runs (pipelined slices): the signal lands in one of them
    scenario.write_text("topology: {name: star, params: {hosts: 512}}\n"
                        "collective: {collective: allreduce, algorithms: [ring, "
                        "halving_doubling], sizes: [1GiB, 2GiB, 4GiB], slices: 8}\n")
    out = tmp_path / "out"

    def default_signals():   # the child's Ctrl-C as in a terminal, even if this process ignores it
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)

    proc = subprocess.Popen([sys.executable, "-m", "simulator", "run", str(scenario), "-o",
                             str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=default_signals)
    time.sleep(2.0)
    proc.send_signal(getattr(signal, sig))
    _out, err = proc.communicate(timeout=60)
    if proc.returncode == 0:          # finished before the signal: complete results
        assert (out / "results.csv").exists()
        return
    assert proc.returncode == 130, err.decode()
    assert b"Traceback" not in err and b"interrupted" in err
    leftovers = [p.name for p in out.rglob("*")] if out.exists() else []
    assert not [n for n in leftovers if n.endswith(".tmp")], leftovers
    assert "results.csv" not in leftovers or (out / "results.csv").read_text().count("\n") > 1


@pytest.fixture
def signal_handlers():
    """Sets SIGINT and SIGTERM to the given handlers for one test and puts back what the
    process had (a job started in the background by a shell begins with SIGINT ignored)."""
    import signal

    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

    def set_handlers(sigint, sigterm=signal.SIG_DFL):
        signal.signal(signal.SIGINT, sigint)
        signal.signal(signal.SIGTERM, sigterm)

    yield set_handlers
    for sig, handler in saved.items():
        signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


def test_a_signal_during_a_compiled_kernel_is_delivered_after_it(signal_handlers):
    """Ctrl-C inside a kernel call is held until its results are Python objects, then raised
    (raised while numba boxed them, it left a broken tuple: a segmentation fault)."""
    import os
    import signal

    from simulator.engine.common import interrupts_deferred

    signal_handlers(signal.default_int_handler)
    reached = []
    with pytest.raises(KeyboardInterrupt):
        with interrupts_deferred():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
            reached.append("after the signal")
    assert reached == ["after the signal"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_an_ignored_signal_stays_ignored_and_the_others_are_still_delivered(signal_handlers):
    """With Ctrl-C ignored from the start (a background job), a kernel call leaves it ignored,
    and a SIGTERM that arrives with it still reaches its handler (it was dropped behind the
    ignored Ctrl-C)."""
    import os
    import signal

    from simulator.engine.common import interrupts_deferred

    terms = []
    signal_handlers(signal.SIG_IGN, lambda signum, _frame: terms.append(signum))
    with interrupts_deferred():
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
        assert terms == []                    # held until the block ends
    assert terms == [signal.SIGTERM]
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN


def test_every_held_signal_is_delivered_even_when_the_first_raises(signal_handlers):
    import os
    import signal

    from simulator.engine.common import interrupts_deferred

    terms = []
    signal_handlers(signal.default_int_handler, lambda signum, _frame: terms.append(signum))
    with pytest.raises(KeyboardInterrupt):
        with interrupts_deferred():
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
    assert terms == [signal.SIGTERM]


def test_main_in_process_puts_back_the_signal_handlers(signal_handlers, capsys):
    """``main`` called from Python (tests, notebooks) leaves the caller's SIGTERM handler."""
    import signal

    def mine(_signum, _frame):
        pass

    signal_handlers(signal.default_int_handler, mine)
    code, _out, _err = run(capsys, "algorithms")
    assert code == 0
    assert signal.getsignal(signal.SIGTERM) is mine


def test_staged_output_is_all_or_nothing(tmp_path):
    from simulator.report.output import staged_output, write_text

    out = tmp_path / "out"
    with pytest.raises(RuntimeError):
        with staged_output(out) as stage:
            write_text(stage / "results.csv", "a\n1\n")
            raise RuntimeError("plotting failed")
    assert not out.exists()                    # nothing partial, not even the folder
    with staged_output(out) as stage:
        write_text(stage / "results.csv", "a\n1\n")
        write_text(stage / "sub" / "trace.json", "{}")
    assert sorted(p.name for p in out.rglob("*")) == ["results.csv", "sub", "trace.json"]


_ABSURD_COUNTS = r'''
import json, resource, sys, time
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))   # a wrong fix fails, not swaps
from simulator.cli import main
from simulator.errors import ConfigError
B = "1000000000"
scenario, out = sys.argv[1], sys.argv[2]
results = []
for argv in (["train", "--topology", "dgx-a100", "--model", "resnet50", "--gpus", B,
              "--aggregation", "ring"],
             ["train", "--topology", "dgx-a100", "--model", "resnet50", "--gpus", "100000",
              "--aggregation", "ring"],
             ["collective", "--topology", "dgx-a100", "--gpus", B, "--size", "1MiB"],
             ["train", "--topology", "star", "--device", "v100-sxm2-16gb", "--model",
              "resnet50", "--gpus", "2", "--aggregation", "ps", "--ps-servers", B,
              "--ps-placement", "colocated"],
             ["run", scenario, "-o", out + "/run"],
             ["sweep", scenario, "-o", out + "/sweep.csv"]):
    start = time.perf_counter()
    code = main(argv)
    results.append([argv[0], code, time.perf_counter() - start])
from simulator.topology import load_topology
from simulator.workload.sweep import TrainingSpec, run_training_point
start = time.perf_counter()
try:
    run_training_point(load_topology("dgx-a100"), TrainingSpec(models=("resnet50",),
                       batch_per_gpu=32, gpus=(10**9,), aggregations=("ring",)),
                       "resnet50", "ring", 10**9)
    results.append(["api", 0, 0.0])
except ConfigError as exc:
    results.append(["api: " + str(exc), 2, time.perf_counter() - start])
print(json.dumps(results))
'''


def test_absurd_gpu_counts_are_refused_at_once_on_every_command(tmp_path):
    """A count larger than the topology is one line naming how many it has and how to get
    more, before anything is sized by it: --gpus 1000000000 used to grow until the kernel
    killed it. Run under a 4 GiB address-space limit so a regression fails instead of
    swapping."""
    import json
    import subprocess
    import sys

    scenario = tmp_path / "s.yaml"
    scenario.write_text("topology: dgx-a100\ntraining:\n  models: resnet50\n"
                        "  gpus: [1, 1000000000]\n  aggregations: ring\n")
    proc = subprocess.run([sys.executable, "-c", _ABSURD_COUNTS, str(scenario), str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    errors = proc.stderr.strip().splitlines()
    assert "Traceback" not in proc.stderr
    assert [code for _name, code, _s in results] == [2] * 7, (results, errors)
    assert max(seconds for _name, _code, seconds in results) < 10, results
    assert len(errors) == 6, errors
    assert errors[0] == ("clustersim: error: --gpus 1,000,000,000 is more than the 8 GPUs of "
                         "topology 'dgx-a100'; ask for at most 8, or a larger topology "
                         "(--param nodes=N, 8 GPUs per node)")
    assert "--gpus 100,000 is more than the 8 GPUs" in errors[1]
    assert "--gpus 1,000,000,000 is more than the 8 GPUs" in errors[2]
    assert "--ps-servers 1,000,000,000 is more than the 8 hosts of topology 'star'" in errors[3]
    for line in errors[4:]:       # run and sweep: the file, the line, the scenario's key
        assert f"{scenario}:4: training.gpus 1,000,000,000 is more than the 8 GPUs" in line
        assert "topology.params.nodes: N" in line
    assert "gpus 1,000,000,000 is more than the 8 GPUs" in results[6][0]
    assert not (tmp_path / "run").exists() and not (tmp_path / "sweep.csv").exists()


def test_a_closed_pipe_ends_quietly():
    """`clustersim ... | head`: the reader goes away while the table is printed; the command
    stops with the shell's SIGPIPE status and no traceback."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "simulator", "algorithms"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()                         # the reader is gone before the first line
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 141, err.decode()
    assert b"Traceback" not in err and b"BrokenPipeError" not in err


def _program(code: str):
    """Run ``code`` in a fresh interpreter; (exit status, stdout, stderr)."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    return proc.returncode, proc.stdout.decode(), proc.stderr.decode()


def test_the_program_leaves_an_interrupt_at_once_with_130_and_its_output_flushed():
    """exit_interrupted skips the interpreter's exit (where a handled interrupt was seen to
    come back as SIGINT) but not the output written before it."""
    status, out, _err = _program(
        "import sys\n"
        "from simulator.errors import exit_interrupted\n"
        "print('partial', end='')\n"
        "sys.stderr.write('clustersim: interrupted')\n"
        "exit_interrupted()\n"
        "print('never')\n")
    assert status == 130 and out == "partial"


# The program's import of the command line, with a stand-in for `from .cli import main`:
# what an interrupt during that import can turn into, and a real import error.
_FAKE_IMPORT = (
    "import builtins, signal\n"
    "import simulator.program as program\n"
    "real = builtins.__import__\n"
    "def fake(name, globals=None, locals=None, fromlist=(), level=0):\n"
    "    if level == 1 and name == 'cli':\n"
    "{body}"
    "    return real(name, globals, locals, fromlist, level)\n"
    "builtins.__import__ = fake\n"
    "program.run()\n")


@pytest.mark.parametrize("body", [
    # a C extension interrupted while it imports reports an ImportError (numpy's datetime)
    "        program._signalled.append(signal.SIGTERM)\n"
    "        raise ImportError('PyCapsule_Import could not import module \"datetime\"')\n",
    # an interrupt raised where Python can only ignore it (an import lock's callback)
    "        program._signalled.append(signal.SIGINT)\n"
    "        return real(name, globals, locals, fromlist, level)\n",
])
def test_an_interrupted_start_ends_as_an_interrupt(body):
    status, _out, err = _program(_FAKE_IMPORT.format(body=body))
    assert status == 130, err
    assert err.strip() == "clustersim: interrupted"


def test_an_import_error_without_a_signal_keeps_its_traceback():
    status, _out, err = _program(_FAKE_IMPORT.format(
        body="        raise ImportError('a broken installation')\n"))
    assert status == 1 and "Traceback" in err and "a broken installation" in err
