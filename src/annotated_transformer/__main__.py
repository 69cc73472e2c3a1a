"""``python -m annotated_transformer TASK {train,evaluate,predict}`` (see ``cli``).

SIGTERM (what schedulers and ``docker stop`` send) is Ctrl-C here, from the first
moment: a training run abandons its step and keeps its last checkpoint (``runner``).
"""

import signal
import sys

interrupted = False


def interrupt(signum: int, frame: object) -> None:
    """Ctrl-C or SIGTERM: remembered, then raised as a KeyboardInterrupt."""
    global interrupted
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
