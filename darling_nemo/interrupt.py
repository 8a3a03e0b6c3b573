"""Ctrl-C while a command starts: one line, not the traceback of whatever import it hit.

A recipe imports torch, transformers and TRL before its `main` runs (seconds); a Ctrl-C
then lands inside an import, and Python prints the stack of that import (or, later in the
interpreter's teardown, `Exception ignored ... lost sys.stderr`). `quiet_start` (the first
line a recipe runs, before those imports) ends such an interrupt with one line and exit code
130; `started` (called where `main` begins: `exits_on_config_error`, `run_recipe`) hands
Ctrl-C back to Python, whose KeyboardInterrupt each command reports in its own line. Only
the standard library is imported here, so the guard is in place before anything heavy.
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType

INTERRUPTED_EXIT_CODE = 130  # 128 + SIGINT, as config.INTERRUPTED_EXIT_CODE
_quiet: list[object] = []  # the handler quiet_start installed, while it is installed


def quiet_start(module_name: str, prog: str) -> None:
    """In a recipe run as a script (`module_name == "__main__"`): until `started`, Ctrl-C
    prints `prog: interrupted (Ctrl-C) while starting; nothing was done` and exits 130.
    Imported (by a test, another module) it does nothing."""
    if module_name != "__main__" or signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        return  # imported, or started with Ctrl-C ignored (a background job): left as it is

    def on_interrupt(signum: int, frame: FrameType | None) -> None:
        sys.stderr.write(f"\n{prog}: interrupted (Ctrl-C) while starting; nothing was done\n")
        sys.stderr.flush()
        # Nothing is written before `started`: no clean-up to run, and exiting at once keeps
        # a half-imported module's teardown from printing its own lines.
        os._exit(INTERRUPTED_EXIT_CODE)

    signal.signal(signal.SIGINT, on_interrupt)
    _quiet[:] = [on_interrupt]


def started() -> None:
    """The command's `main` runs: Ctrl-C raises KeyboardInterrupt again (Python's default)."""
    if _quiet and signal.getsignal(signal.SIGINT) is _quiet[0]:  # nobody else's handler
        signal.signal(signal.SIGINT, signal.default_int_handler)
    _quiet.clear()
