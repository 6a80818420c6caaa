"""A status line on stderr while a command compiles or times (30-60 s on a real
train step): a spinner, what the XLA worker is doing now ("compiling jit_step
(B, as-written)", "running ...") and the time elapsed.  Shown only when stderr
is a terminal and the command is neither ``-q`` nor ``--json``: in a pipe, a log
or a test nothing is drawn, so the output stays what it was."""

from __future__ import annotations

import contextlib
import sys
from typing import Callable, Iterator

from xla_bridge import xla_worker


def wanted(args) -> bool:
    """Whether ``args`` (a command's namespace) asks for a status line: not quiet,
    not JSON, and stderr is a terminal."""
    return not getattr(args, "quiet", False) and not getattr(args, "json", False) and sys.stderr.isatty()


@contextlib.contextmanager
def status(what: str, enabled: bool) -> Iterator[Callable[[str], None]]:
    """A context giving ``say(text)`` (a new description); while it is open the
    line follows the XLA worker's notes.  A no-op when not ``enabled``."""
    if not enabled:
        yield lambda _text: None
        return
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(what, total=None)
        current = [what]

        def say(text: str) -> None:
            current[0] = text
            bar.update(task, description=text)

        def heard(phase: str, module: str) -> None:
            bar.update(task, description=f"{current[0]}: {phase} {module}"[:100])

        with xla_worker.listening(heard):
            yield say
