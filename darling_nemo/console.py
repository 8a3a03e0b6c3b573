"""Run-time lines that never share a line with a progress bar.

TRL's trainer draws a tqdm bar on stderr without a newline while it trains: a line printed
then lands after the bar's text, on the same line. `say` writes through tqdm (which clears
the bar, writes the line and redraws the bar below it) where tqdm is loaded, so only where a
bar can be; `close_bars` ends the open bars before a command's last line (otherwise they
redraw at exit, after it). Standard library only: tqdm is looked up, never imported (the
reward pool's workers and the NeMo-RL actors print through here too).
"""

from __future__ import annotations

import sys
from typing import TextIO


def say(line: str, file: TextIO | None = None) -> None:
    """`line` on a line of its own (stderr by default), below any open progress bar."""
    out = sys.stderr if file is None else file
    tqdm = getattr(sys.modules.get("tqdm"), "tqdm", None)
    if tqdm is not None and getattr(tqdm, "_instances", None):
        tqdm.write(line, file=out)
        out.flush()
    else:
        print(line, file=out, flush=True)


def close_bars() -> None:
    """Close every open progress bar (each ends its line), before a command's last line."""
    tqdm = getattr(sys.modules.get("tqdm"), "tqdm", None)
    for bar in list(getattr(tqdm, "_instances", ())):
        bar.close()
