"""What the CLI and the offline commands share about their output: a leaf, so that the tools
need not import the CLI that imports them."""

from __future__ import annotations

import os
import sys

# A process whose reader went away ends as if SIGPIPE had ended it: the shells' 128 + 13.
EXIT_BROKEN_PIPE = 141


def quiet_stdout() -> None:
    """stdout pointed at the null device: Python's flush at exit finds no broken pipe."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
