"""``python -m simulator`` runs the command line; Ctrl-C or SIGTERM while it is still starting
ends it as it would end a run (one line, exit 130)."""

import signal
import sys


def _terminate(_signum, _frame):
    raise KeyboardInterrupt


if signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN:
    signal.signal(signal.SIGTERM, _terminate)
try:
    from .cli import main
except KeyboardInterrupt:
    print("clustersim: interrupted", file=sys.stderr)
    sys.exit(130)

try:
    code = main()
except KeyboardInterrupt:      # a signal in main()'s few lines around the run's own handling
    print("clustersim: interrupted", file=sys.stderr)
    code = 130
sys.exit(code)
