"""The console a command prints its results on."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

#: Columns when stdout is not a terminal: rich would assume 80 and fold a wide
#: table's last column to one character per line.
REDIRECTED_WIDTH = 220


def stdout_console() -> "Console":
    """A terminal's own width (or ``$COLUMNS``); redirected to a file or a pipe
    without ``$COLUMNS``, ``REDIRECTED_WIDTH``."""
    from rich.console import Console  # lazy: rich costs every hlo start ~30 ms

    wide = not sys.stdout.isatty() and not os.environ.get("COLUMNS")
    return Console(width=REDIRECTED_WIDTH if wide else None)
