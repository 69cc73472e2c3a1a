"""Printed text that fits the page: the book's column of code and output holds
:data:`WIDTH` characters, the chapters' line length, and a longer line would
scroll sideways. :func:`wrap` breaks long lines at spaces; :func:`print_log`
prints a run's ``train.log`` with each entry's continued lines under its message.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

WIDTH = 84


def wrap(text: str, width: int = WIDTH, indent: str = "") -> str:
    """``text`` with each line longer than ``width`` broken at spaces, its
    continued lines starting with ``indent``; line breaks and blank lines are
    kept as they are."""
    return "\n".join(
        textwrap.fill(line, width, subsequent_indent=indent)
        if line.strip()
        else line
        for line in text.split("\n")
    )


def print_log(path: str | Path, width: int = WIDTH) -> None:
    """Print a run's ``train.log`` (one ``time  message`` line per entry), a
    long entry continued in the message's column."""
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        stamp, gap, message = line.partition("  ")
        if not gap:  # a line without a time: wrapped from its first column
            stamp, message = "", line
        head = stamp + gap
        print(
            textwrap.fill(
                message,
                width,
                initial_indent=head,
                subsequent_indent=" " * len(head),
            )
            if message.strip()
            else line
        )
