"""Error types.  Each carries where the problem is and what was expected."""

from __future__ import annotations


class HloError(Exception):
    """Base class of the errors this package raises on bad input."""


class HloParseError(HloError):
    """HLO text that does not parse.

    ``line`` and ``column`` are 1-based positions in ``source``; ``line_text`` is the
    offending line so that ``str(err)`` can show it with a caret under the column.
    """

    def __init__(
        self,
        message: str,
        source: str = "<string>",
        line: int = 1,
        column: int = 1,
        line_text: str = "",
        expected: tuple[str, ...] = (),
    ):
        self.message = message
        self.source = source
        self.line = line
        self.column = column
        self.line_text = line_text
        self.expected = tuple(expected)
        super().__init__(self.format())

    def format(self, caret: bool = True) -> str:
        head = f"{self.source}:{self.line}:{self.column}: {self.message}"
        if self.expected:
            exp = ", ".join(sorted(self.expected)[:12])
            head += f" (expected one of: {exp})"
        if caret and self.line_text:
            shown = self.line_text.rstrip("\n")
            col = self.column - 1
            if len(shown) > 160:  # long metadata lines: show a window around the column
                start = max(0, col - 80)
                shown = ("..." if start else "") + shown[start : start + 160]
                col = col - start + (3 if start else 0)
            head += "\n" + shown + "\n" + " " * max(col, 0) + "^"
        return head


class VerificationError(HloError):
    """An IR that breaks an HLO invariant; names the instruction and shows context."""

    def __init__(self, message: str, instruction_name: str = "", context: str = "", problems: tuple[str, ...] = ()):
        self.instruction_name = instruction_name
        self.context = context
        self.problems = problems or (message,)
        text = message + (("\n" + context) if context else "")
        super().__init__(text)


class IrError(HloError):
    """A mutation that would leave the IR inconsistent (e.g. removing a used value)."""
