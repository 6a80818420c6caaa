"""Pausing Python's cyclic garbage collector around work on a whole module.

Parsing or analysing a module allocates millions of small objects that stay
alive until the work ends; each full collection on the way walks all of them
and frees nothing. Paused, the work skips those walks; ``collect_after`` then
frees what the work dropped (a module is a graph of cycles: parent and user
links) at once, so a worker that handles many modules does not grow.
"""

from __future__ import annotations

import contextlib
import gc
from typing import Iterator


@contextlib.contextmanager
def collector_paused(*, collect_after: bool = False) -> Iterator[None]:
    """The block runs with the cyclic collector off (nesting is safe: only the
    outermost pause turns it back on)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
            if collect_after:
                # what the block made is all in the young generation (nothing was
                # collected during it): collecting that one frees it without walking
                # every older object of the process
                gc.collect(0)
