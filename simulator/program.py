"""The ``clustersim`` program (and ``python -m simulator``): the command line as a process.

:func:`simulator.cli.main` is the command line as a function, for callers in the same process;
this module makes it a program. It imports nothing heavy itself, so that a Ctrl-C or SIGTERM
while the command line is still importing ends the process as one during a run does: one line,
exit status 130, no traceback (:func:`simulator.errors.exit_interrupted` says why that exit is
immediate).
"""

import signal
import sys

from .errors import EXIT_INTERRUPTED, exit_interrupted

_signalled: list[int] = []


def _stop(signum, _frame):
    """SIGTERM (and, while the command line imports, SIGINT): note it, and stop as Ctrl-C."""
    _signalled.append(signum)
    raise KeyboardInterrupt


def _interrupted():
    print("clustersim: interrupted", file=sys.stderr)
    exit_interrupted()


def _quiet_interrupt(unraisable):
    """``sys.unraisablehook`` while importing: an interrupt raised where Python cannot
    propagate it (an import lock's callback) is noted by :func:`_stop` and handled after the
    import; anything else is reported as usual."""
    if not isinstance(unraisable.exc_value, KeyboardInterrupt):
        sys.__unraisablehook__(unraisable)


def _import_main():
    """``simulator.cli.main``, imported with stop signals noted. An interrupted import may
    surface as something else: an ``ImportError`` from a C extension (numpy's
    ``PyCapsule_Import`` of ``datetime``), or nothing at all where Python can only ignore the
    exception; with a signal noted, each ends as an interrupt."""
    previous = signal.getsignal(signal.SIGINT)
    if previous is signal.default_int_handler:
        signal.signal(signal.SIGINT, _stop)
    hook, sys.unraisablehook = sys.unraisablehook, _quiet_interrupt
    try:
        from .cli import main
    except KeyboardInterrupt:
        _interrupted()
    except Exception:
        if _signalled:
            _interrupted()
        raise
    finally:
        sys.unraisablehook = hook
        if previous is signal.default_int_handler:
            signal.signal(signal.SIGINT, previous)
    if _signalled:
        _interrupted()
    return main


def run() -> None:
    """Run the command line on ``sys.argv`` and exit with its status."""
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN:
        signal.signal(signal.SIGTERM, _stop)
    main = _import_main()
    try:
        code = main()
    except KeyboardInterrupt:      # a signal in main()'s few lines around the run's own handling
        _interrupted()
    if code == EXIT_INTERRUPTED:   # main() handled an interrupt and printed its line
        exit_interrupted()
    sys.exit(code)
