"""Attribute and opcode rules that XLA's parser enforces beyond the grammar
(xla/hlo/parser/hlo_parser.cc), run by the verifier.  Each returns problems as
messages naming the instruction."""

from __future__ import annotations

import re

from .ir import Instruction, Module
from .opcode import HloOpcode
from .shape import PrimitiveType, parse_shape_prefix
from .text import split_top_level

_PADDING = re.compile(r"-?\d+_-?\d+(?:_-?\d+)?(?:x-?\d+_-?\d+(?:_-?\d+)?)*")
_WINDOW_PAD = re.compile(r"pad=(\S+)")
_API_VERSIONS = {"API_VERSION_ORIGINAL", "API_VERSION_STATUS_RETURNING", "API_VERSION_STATUS_RETURNING_UNIFIED", "API_VERSION_TYPED_FFI"}
_ACCURACY_MODES = {"DEFAULT", "HIGHEST", "TOLERANCE"}
_SHAPE_INDEX = r"\{\s*(?:\d+\s*(?:,\s*\d+\s*)*)?\}"
_ALIAS_ENTRY = re.compile(r"\s*" + _SHAPE_INDEX + r"\s*:\s*\(\s*\d+\s*,\s*" + _SHAPE_INDEX + r"\s*(?:,\s*(?:may-alias|must-alias)\s*)?\)\s*")
_DONOR_ENTRY = re.compile(r"\s*\(\s*\d+\s*,\s*" + _SHAPE_INDEX + r"\s*\)\s*")


def module_problems(module: Module) -> list[str]:
    problems = []
    for key, entry_re, what in (("input_output_alias", _ALIAS_ENTRY, "{output index}: (parameter, {index}[, may-alias|must-alias])"),
                                ("buffer_donor", _DONOR_ENTRY, "(parameter, {index})")):
        raw = module.attributes.get(key)
        if raw is None:
            continue
        body = raw.strip()
        if not (body.startswith("{") and body.endswith("}")):
            problems.append(f"module {module.name}: {key} must be braced, got {raw[:60]!r}")
            continue
        for entry, _ in split_top_level(body[1:-1]):
            if not entry.strip():
                continue
            if not entry_re.fullmatch(entry):
                problems.append(f"module {module.name}: {key} entry {entry.strip()!r} is not {what}")
    return problems


def instruction_problems(instr: Instruction, where: str) -> list[str]:
    """Rules for one instruction (``where`` names it in messages)."""
    out: list[str] = []
    attrs = instr.attributes
    op = instr.opcode
    pad = attrs.get("padding")
    if pad is not None and op is HloOpcode.PAD and not _PADDING.fullmatch(pad.strip()):
        out.append(f"{where}: padding={pad} must be low_high[_interior] per dimension, joined by 'x'")
    window = attrs.get("window")
    if window is not None:
        m = _WINDOW_PAD.search(window)
        if m and not re.fullmatch(r"-?\d+_-?\d+(?:x-?\d+_-?\d+)*", m.group(1).rstrip("}")):
            out.append(f"{where}: window pad={m.group(1)} must be low_high per dimension, joined by 'x'")
    api = attrs.get("api_version")
    if api is not None and api not in _API_VERSIONS:
        out.append(f"{where}: api_version={api} is not one of {', '.join(sorted(_API_VERSIONS))}")
    acc = attrs.get("result_accuracy")
    if acc is not None:
        m = re.search(r"mode\s*=\s*(\w+)", acc)
        if m and m.group(1).upper() not in _ACCURACY_MODES:
            out.append(f"{where}: result_accuracy mode {m.group(1)} is not one of {', '.join(sorted(_ACCURACY_MODES))}")
    if op is HloOpcode.INFEED:
        s = instr.shape
        if not s.is_tuple or not s.tuple_shapes:
            out.append(f"{where}: infeed must have a non-empty tuple shape (data, token), has {s.to_text(False)}")
    if op is HloOpcode.CUSTOM_CALL and "operand_layout_constraints" in attrs:
        out.extend(_layout_constraints(instr, attrs["operand_layout_constraints"], where))
    if op is HloOpcode.CONDITIONAL:
        out.extend(_conditional(instr, where))
    if op in (HloOpcode.ASYNC_START, HloOpcode.ASYNC_UPDATE):
        s = instr.shape
        if not (s.is_tuple and len(s.tuple_shapes) >= 2 and s.tuple_shapes[0].is_tuple):
            out.append(f"{where}: async-start/update shapes are ((operand shapes...), output shape, ...), got {s.to_text(False)}")
    if op in (HloOpcode.ASYNC_UPDATE, HloOpcode.ASYNC_DONE) and instr.operands:
        start = instr.operands[0]
        if start.opcode in (HloOpcode.ASYNC_START, HloOpcode.ASYNC_UPDATE):
            if instr.async_wrapped_opcode is not None and start.async_wrapped_opcode is not None and instr.async_wrapped_opcode is not start.async_wrapped_opcode:
                out.append(f"{where}: wraps {instr.async_wrapped_opcode.value} but %{start.name} wraps {start.async_wrapped_opcode.value}")
            mine, theirs = instr.called_computation("calls"), start.called_computation("calls")
            if mine is not None and theirs is not None and mine is not theirs:
                out.append(f"{where}: calls %{mine.name} but %{start.name} calls %{theirs.name}")
            t1, t2 = attrs.get("async_execution_thread"), start.attributes.get("async_execution_thread")
            if t1 is not None and t1 != (t2 or '"main"'):  # unset: inherits the start's thread
                out.append(f"{where}: async_execution_thread={t1 or 'main'} differs from %{start.name}'s ({t2 or 'main'})")
    return out


def _layout_constraints(instr: Instruction, raw: str, where: str) -> list[str]:
    body = raw.strip()[1:-1]
    shapes = []
    pos = 0
    while pos < len(body):
        while pos < len(body) and body[pos] in " ,":
            pos += 1
        if pos >= len(body):
            break
        try:
            s, pos = parse_shape_prefix(body, pos)
        except ValueError:
            return [f"{where}: operand_layout_constraints={raw} is not a list of shapes"]
        shapes.append(s)
    if len(shapes) != instr.operand_count:
        return [f"{where}: expected {instr.operand_count} operand layout constraints, {len(shapes)} given"]
    return [
        f"{where}: operand layout constraint {s.to_text()} for operand {i} does not fit operand shape {o.shape.to_text()}"
        for i, (s, o) in enumerate(zip(shapes, instr.operands))
        if not s.compatible(o.shape)
    ]


def _conditional(instr: Instruction, where: str) -> list[str]:
    out = []
    called = instr.called_computation_map
    if "branch_computations" in called and ("true_computation" in called or "false_computation" in called):
        out.append(f"{where}: give either branch_computations or true_computation/false_computation, not both")
    if not instr.operands:
        return out + [f"{where}: needs a branch index or predicate operand"]
    sel = instr.operands[0].shape
    if not sel.is_scalar:
        out.append(f"{where}: the first operand must be a scalar, got {sel.to_text(False)}")
    elif sel.element_type not in (PrimitiveType.PRED, PrimitiveType.S32):
        out.append(f"{where}: the first operand must be a scalar of PRED or S32, got {sel.to_text(False)}")
    branches = called.get("branch_computations") or tuple(c for k in ("true_computation", "false_computation") for c in called.get(k, ()))
    if branches and len(branches) + 1 != instr.operand_count:
        out.append(f"{where}: {len(branches)} branches need {len(branches) + 1} operands, got {instr.operand_count}")
    return out
