"""``python -m annotated_transformer.launch``: torchrun for this package's command
line, whose failures are the program's one line and an exit status.

    python -m annotated_transformer.launch --nproc_per_node=4 translate train \\
        --preset base --out runs/b

The options before the task name are torchrun's (``--nproc_per_node``,
``--standalone``, ``--nnodes``, ...); from the task name on, the command line is
``python -m annotated_transformer``'s. Plain ``torchrun`` answers a process that
exits with an error by raising its launcher's ``ChildFailedError``: forty lines of
traceback and failure table under the program's own line. Here the launcher's
logs stay quiet and its failure becomes the exit status of the first process that
failed (1 for an error, 130 for Ctrl-C), the program having said why; a process
killed by a signal, which could say nothing, is named in one line.
"""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Sequence

from annotated_transformer.tasks import TASKS

COMMANDS = (*TASKS, "record")  # where the program's command line starts


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (torchrun's options, then the program's) and
    return the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    start = next((i for i, arg in enumerate(argv) if arg in COMMANDS), None)
    if start is None:
        print(
            "error: name a task after torchrun's options: "
            f"{', '.join(COMMANDS)} (e.g. --nproc_per_node=2 lm train --out x)",
            file=sys.stderr,
        )
        return 2
    from torch.distributed import run as torchrun
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    launcher = [*argv[:start], "-m", "annotated_transformer", *argv[start:]]
    args = torchrun.parse_args(launcher)
    for name in list(logging.root.manager.loggerDict):
        if name.startswith("torch.distributed"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
    try:
        torchrun.run(args)
    except ChildFailedError as failed:
        rank, failure = failed.get_first_failure()
        if failure.exitcode > 0:  # the program said why, in one line
            return failure.exitcode
        name = signal.Signals(-failure.exitcode).name
        print(f"error: process {rank} was killed by {name}", file=sys.stderr)
        return 128 - failure.exitcode
    except SignalException as stopped:  # Ctrl-C or SIGTERM: the processes said so
        return 128 + stopped.sigval
    return 0


if __name__ == "__main__":
    sys.exit(main())
