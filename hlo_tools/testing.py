"""Pass tests as HLO text in, FileCheck lines out: XLA's ``RunAndFilecheckHloRewrite``.

    from hlo_tools.testing import assert_rewrite

    assert_rewrite(HLO, MyPass(), '''
    CHECK:      %[[EXP:[^ ]+]] = f32[8]{0} exponential(
    CHECK-NEXT: ROOT {{.*}} negate(%[[EXP]])
    ''')
    assert_rewrite(OTHER_HLO, MyPass(), None)   # the pass must leave it alone

The check lines are LLVM FileCheck's (CHECK, CHECK-NEXT, CHECK-SAME, CHECK-NOT,
CHECK-DAG, ``[[NAME:regex]]`` captures, ``{{regex}}``), matched in-process by the
``filecheck`` package, so a test says what the pass must have written and nothing
about the rest of the module.

One difference from LLVM's FileCheck (filecheck 1.0.6): a CHECK-NOT is searched
up to the end of the next positive match, not its start, so the excluded text
must not occur in the line matched next (check that line with CHECK-NEXT instead).
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from typing import Callable, Protocol

from filecheck.finput import FInput
from filecheck.matcher import Matcher
from filecheck.options import Options
from filecheck.parser import Parser, pattern_for_opts

from .ir import Module
from .parser import parse
from .scanner import matching_paren
from .text import split_top_level
from .verifier import verify

__all__ = ["FileCheckResult", "HloPassLike", "assert_rewrite", "check_lines", "run_filecheck"]


class HloPassLike(Protocol):
    """Anything with XLA's ``HloPassInterface::Run`` shape: a pass or a pipeline."""

    def run(self, module: Module) -> bool: ...


@dataclass(frozen=True)
class FileCheckResult:
    """Whether the checks matched, and FileCheck's diagnostic when they did not."""

    matched: bool
    diagnostic: str

    def __bool__(self) -> bool:
        return self.matched


def run_filecheck(text: str, checks: str) -> FileCheckResult:
    """Matches ``text`` against the FileCheck directives in ``checks`` (the
    ``CHECK`` prefix, LLVM's defaults), like XLA's ``RunFileCheck``."""
    opts = Options(match_filename="<checks>", input_file="<hlo>")
    matcher = Matcher(opts, FInput(opts.input_file, FInput.canonicalize_line_ends(text)),
                      Parser(opts, io.StringIO(checks), *pattern_for_opts(opts)))
    matcher.stderr = io.StringIO()  # the diagnostic belongs in the result, not on the terminal
    code = matcher.run()
    return FileCheckResult(code == 0, matcher.stderr.getvalue())


def _name(pass_: HloPassLike) -> str:
    return getattr(pass_, "name", None) or type(pass_).__name__


def assert_rewrite(hlo_in: str | Module, pass_: HloPassLike, expected: str | None, *,
                   accepted_by: Callable[[str], object] | None = None) -> bool:
    """Runs ``pass_`` on ``hlo_in`` (HLO text, or a module, which is rewritten in
    place so the caller can look further) and verifies the result.

    ``expected=None``: the pass must report no change and leave the printed
    module as it was; returns False.  Otherwise it must report a change and its
    printed result must match the FileCheck lines ``expected``; returns True.
    Either way the pass's ``changed`` must agree with the text, and
    ``accepted_by`` (for instance XLA's parser, ``xla_bridge.jax_internals.xla_module_from_text``)
    is called on the printed result.  Failures show the printed module and
    FileCheck's diagnostic.
    """
    module = parse(hlo_in) if isinstance(hlo_in, str) else hlo_in
    before = module.to_text()
    changed = bool(pass_.run(module))
    after = module.to_text()
    name = _name(pass_)
    assert changed == (before != after), (
        f"{name} returned changed={changed} but the printed module {'changed' if before != after else 'did not change'}:\n{after}")
    verify(module)
    if accepted_by is not None:
        accepted_by(after)
    if expected is None:
        assert not changed, f"{name} was expected to leave the module unchanged; it wrote:\n{after}"
        return False
    assert changed, f"{name} did not change the module:\n{after}"
    result = run_filecheck(after, expected)
    assert result, f"{name} wrote:\n{after}\nFileCheck:\n{result.diagnostic}"
    return True


_NAME = re.compile(r"%?[A-Za-z_][\w.\-]*")


def _head_and_operands(rhs: str) -> tuple[str, list[str]]:
    """``rhs`` of an instruction line split into its shape and opcode (a tuple
    shape's parentheses kept whole) and its operands as printed."""
    shape_end = matching_paren(rhs, 0, len(rhs)) + 1 if rhs.startswith("(") else 0
    paren = rhs.index("(", shape_end)
    close = matching_paren(rhs, paren, len(rhs))
    inner = rhs[paren + 1 : close if close >= 0 else len(rhs)]
    return rhs[:paren], [o.strip() for o, _ in split_top_level(inner) if o.strip()]


def _literal(operand: str) -> str:
    """An operand that is not a name (a constant's literal) as FileCheck text:
    as written, unless it holds FileCheck's own ``{{``/``[[`` (then any text)."""
    return "{{.*}}" if "{{" in operand or "[[" in operand else operand


def check_lines(before: Module, after: Module, *, limit: int = 12, prefix: str = "") -> str:
    """FileCheck directives that the rewrite ``before`` -> ``after`` must satisfy: one
    ``CHECK:`` per instruction line of ``after`` that ``before`` does not have (its
    shape, opcode and operands; the names of instructions the pass made are left
    to a regex, since a pass may pick others), in printed order, at most ``limit``; a fusion's kind is checked on the same line
    (``CHECK-SAME``).  Lines of computations ``before`` already had come first (the
    fusions a pass wrote, not the bodies it outlined into new computations: those
    are checked only when nothing else changed).  ``prefix`` starts each line
    (``"// "`` in an HLO test file).  What ``hlo upstream`` writes into its test."""
    old = {line.strip() for line in before.to_text().splitlines()}
    known = {c.name for c in before.computations}
    lines: list[tuple[bool, str]] = []  # (in a computation before had, line)
    here = ""
    for line in after.to_text().splitlines():
        text = line.strip()
        if text.endswith("{") and " = " not in text:  # a computation's header
            here = text.removeprefix("ENTRY ").split(" ", 1)[0].lstrip("%")
            continue
        if text not in old and " = " in text and not text.startswith("HloModule"):
            lines.append((here in known, text))
    chosen = [t for old_comp, t in lines if old_comp] or [t for _, t in lines]
    names = {i.name for i in before.instructions()}
    out: list[str] = []
    for text in chosen[:limit]:
        lhs, rhs = text.split(" = ", 1)
        head, operands = _head_and_operands(rhs)  # "f32[8]{0} exponential" or "(f32[], s32[]) tuple", operands
        shown = ", ".join(o if o.lstrip("%") in names else "%{{[^ ,)]+}}" if _NAME.fullmatch(o) else _literal(o)
                          for o in operands)
        out.append(f"{prefix}CHECK: {'ROOT {{.*}} = ' if lhs.startswith('ROOT ') else '= '}{head}({shown})")
        kind = next((a for a in rhs.split(", ") if a.startswith("kind=")), None)
        if kind:
            out.append(f"{prefix}CHECK-SAME: {kind.rstrip(')')}")
    return "\n".join(out) + ("\n" if out else "")
