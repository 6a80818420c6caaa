"""A status line on stderr while a command compiles or times (30-60 s on a real
train step): a spinner, what the XLA worker is doing now ("compiling jit_step
(B, as-written)", "running ...") and the time elapsed.  Shown only when stderr
is a terminal and the command is neither ``-q`` nor ``--json``: in a pipe, a log
or a test nothing is drawn, so the output stays what it was."""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator

from xla_bridge import worker


def wanted(args) -> bool:
    """Whether ``args`` (a command's namespace) asks for a status line: not quiet,
    not JSON, and stderr is a terminal (as rich sees it: ``FORCE_COLOR`` makes one)."""
    if getattr(args, "quiet", False) or getattr(args, "json", False):
        return False
    from rich.console import Console

    return Console(stderr=True).is_terminal


@contextlib.contextmanager
def line(what: str, enabled: bool, *, counts: bool = False) -> Iterator[Callable[..., None]]:
    """The one progress display of the ``hlo`` commands: a spinner, a description
    and the time elapsed on stderr (plus a bar and done/total when ``counts``).
    Gives ``update(text=None, done=None, total=None)``; a no-op when not ``enabled``."""
    if not enabled:
        yield lambda *_a, **_k: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    columns = [SpinnerColumn(), TextColumn("{task.description}")]
    columns += [BarColumn(), MofNCompleteColumn()] if counts else []
    with Progress(*columns, TimeElapsedColumn(), console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(what, total=None)

        def update(text: str | None = None, done: int | None = None, total: int | None = None) -> None:
            changes = {"description": text, "completed": done, "total": total}
            bar.update(task, **{k: v for k, v in changes.items() if v is not None})

        yield update


@contextlib.contextmanager
def status(what: str, enabled: bool) -> Iterator[Callable[[str], None]]:
    """A context giving ``say(text)`` (a new description); while it is open the
    line follows the XLA worker's notes.  A no-op when not ``enabled``."""
    with line(what, enabled) as update:
        if not enabled:
            yield update
            return
        current = [what]

        def say(text: str) -> None:
            current[0] = text
            update(text)

        def heard(phase: str, module: str) -> None:
            update(f"{current[0]}: {phase} {module}"[:100])

        with worker.listening(heard):
            yield say
