"""``python -m annotated_transformer TASK {train,evaluate,predict}`` (see ``cli``).

SIGTERM (what schedulers and ``docker stop`` send) is Ctrl-C here, from the first
moment: a training run abandons its step and keeps its last checkpoint (``runner``).
Only the first signal counts: one pressed again, however soon, while the process
ends (a progress bar closing, a checkpoint named) changes nothing, so the process
still says its one line and exits with 130.
"""

import signal
import sys

interrupted = False


def interrupt(signum: int, frame: object) -> None:
    """Ctrl-C or SIGTERM: remembered, then raised as a KeyboardInterrupt. The
    next ones are ignored, by the OS (SIG_IGN): Python puts its default handlers
    back while it shuts down, and one of those would kill the process after
    its line."""
    global interrupted
    for each in (signal.SIGINT, signal.SIGTERM):
        signal.signal(each, signal.SIG_IGN)
    if interrupted:
        return
    interrupted = True
    raise KeyboardInterrupt


signal.signal(signal.SIGINT, interrupt)
signal.signal(signal.SIGTERM, interrupt)
try:
    from annotated_transformer.cli import main

    # A library that catches everything while it loads can swallow the
    # KeyboardInterrupt; the flag still says that the signal came.
    if interrupted:
        raise KeyboardInterrupt
except KeyboardInterrupt:  # while the libraries load: nothing has started yet
    print("interrupted before the command started: nothing done", file=sys.stderr)
    sys.exit(130)

sys.exit(main())
