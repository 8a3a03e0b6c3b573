"""Ctrl-C and SIGTERM: one line, not the traceback of whatever the command was doing.

A recipe imports torch, transformers and TRL before its `main` runs (seconds); a Ctrl-C
then lands inside an import, and Python prints the stack of that import (or, later in the
interpreter's teardown, `Exception ignored ... lost sys.stderr`). `quiet_start` (the first
line a recipe runs, before those imports) ends such an interrupt with one line and exit code
130 (143 for SIGTERM); `started` (called where `main` begins: `exits_on_config_error`,
`run_recipe`) hands Ctrl-C back to Python, whose KeyboardInterrupt each command reports in
its own line, and makes SIGTERM (what `scancel`, a SLURM preemption and most schedulers
send) raise `Terminated`, a KeyboardInterrupt, so it ends the same way: what is kept, the
same command resumes. Only the standard library is imported here, so the guard is in place
before anything heavy.

A KeyboardInterrupt raised inside a library can be lost there (measured: 1 Ctrl-C in 4 sent
as the miniature's warm start began, on a loaded machine, never stopped it), so the handlers
`started` installs also remember the signal, and a long loop calls `stop_if_interrupted`
at each step: the command still stops, at most one step later.
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType

INTERRUPTED_EXIT_CODE = 130  # 128 + SIGINT, as config.INTERRUPTED_EXIT_CODE
TERMINATED_EXIT_CODE = 143  # 128 + SIGTERM
_quiet: list[object] = []  # the handler quiet_start installed, while it is installed
_received: list[int] = []  # the signals `started`'s handlers took, in order


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C's KeyboardInterrupt would be."""


def how_interrupted(err: BaseException | None) -> tuple[str, int]:
    """The words for what stopped a command and its exit code: Ctrl-C 130, SIGTERM 143."""
    if isinstance(err, Terminated):
        return "SIGTERM", TERMINATED_EXIT_CODE
    return "Ctrl-C", INTERRUPTED_EXIT_CODE


def quiet_start(module_name: str, prog: str) -> None:
    """In a recipe run as a script (`module_name == "__main__"`): until `started`, Ctrl-C
    prints `prog: interrupted (Ctrl-C) while starting; nothing was done` and exits 130
    (SIGTERM likewise, exit 143). Imported (by a test, another module) it does nothing."""
    if module_name != "__main__" or signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        return  # imported, or started with Ctrl-C ignored (a background job): left as it is

    def on_interrupt(signum: int, frame: FrameType | None) -> None:
        how, code = how_interrupted(Terminated() if signum == signal.SIGTERM else None)
        sys.stderr.write(f"\n{prog}: interrupted ({how}) while starting; nothing was done\n")
        sys.stderr.flush()
        # Nothing is written before `started`: no clean-up to run, and exiting at once keeps
        # a half-imported module's teardown from printing its own lines.
        os._exit(code)

    signal.signal(signal.SIGINT, on_interrupt)
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, on_interrupt)
    _quiet[:] = [on_interrupt]


def _raise_interrupted(signum: int, frame: FrameType | None) -> None:
    _received.append(signum)
    raise KeyboardInterrupt


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    _received.append(signum)
    raise Terminated  # no words: the command says what it kept


def stop_if_interrupted() -> None:
    """At a long loop's step: Ctrl-C (SIGTERM) received since `started`, even one whose
    KeyboardInterrupt a library swallowed, raises KeyboardInterrupt (Terminated) here."""
    if _received:
        raise Terminated if _received[0] == signal.SIGTERM else KeyboardInterrupt


def interrupt_reported() -> None:
    """The KeyboardInterrupt (Terminated) of the signals received so far was caught and
    said: a later run in the same process (a test, a notebook) is not stopped by them."""
    _received.clear()


def started() -> None:
    """The command's `main` runs: Ctrl-C raises KeyboardInterrupt again (Python's default),
    SIGTERM raises Terminated (where nobody else handles SIGTERM)."""
    if _quiet and signal.getsignal(signal.SIGINT) is _quiet[0]:  # nobody else's handler
        signal.signal(signal.SIGINT, _raise_interrupted)
    term = signal.getsignal(signal.SIGTERM)
    if term is signal.SIG_DFL or (_quiet and term is _quiet[0]):
        signal.signal(signal.SIGTERM, _raise_terminated)
    _quiet.clear()
