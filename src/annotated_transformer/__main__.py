"""``python -m annotated_transformer TASK {train,evaluate,predict}`` (see ``cli``).

SIGTERM (what schedulers and ``docker stop`` send) is Ctrl-C here, from the first
moment: a training run abandons its step and keeps its last checkpoint (``runner``).
"""

import signal
import sys

signal.signal(signal.SIGTERM, signal.default_int_handler)  # KeyboardInterrupt
try:
    from annotated_transformer.cli import main
except KeyboardInterrupt:  # while the libraries load: nothing has started yet
    print("interrupted before the command started: nothing done", file=sys.stderr)
    sys.exit(130)

sys.exit(main())
