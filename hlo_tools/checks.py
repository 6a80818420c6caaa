"""Attribute and opcode rules that XLA's parser enforces beyond the grammar
(xla/hlo/parser/hlo_parser.cc), run by the verifier.  Each returns problems as
messages naming the instruction."""

from __future__ import annotations

import re

from .ir import Instruction, Module
from .opcode import HloOpcode
from .shape import INT64_MAX, PrimitiveType, ShapeError, parse_shape_prefix
from .text import split_top_level

_PADDING = re.compile(r"-?[0-9]+_-?[0-9]+(?:_-?[0-9]+)?(?:x-?[0-9]+_-?[0-9]+(?:_-?[0-9]+)?)*")
_WINDOW_PAD = re.compile(r"pad=(\S+)")
_API_VERSIONS = {"API_VERSION_ORIGINAL", "API_VERSION_STATUS_RETURNING", "API_VERSION_STATUS_RETURNING_UNIFIED", "API_VERSION_TYPED_FFI"}
_ACCURACY_MODES = {"DEFAULT", "HIGHEST", "TOLERANCE"}
_SHAPE_INDEX = r"\{\s*(?:\d+\s*(?:,\s*\d+\s*)*)?\}"
_ALIAS_ENTRY = re.compile(r"\s*" + _SHAPE_INDEX + r"\s*:\s*\(\s*\d+\s*,\s*" + _SHAPE_INDEX + r"\s*(?:,\s*(?:may-alias|must-alias)\s*)?\)\s*")
_DONOR_ENTRY = re.compile(r"\s*\(\s*\d+\s*,\s*" + _SHAPE_INDEX + r"\s*\)\s*")


#: Attributes XLA's parser requires per opcode ("attribute X is expected but not
#: seen"), found by removing each attribute from XLA's own test modules and the
#: corpus and asking XLA's parser (bench/fuzz_campaign.py --required re-derives it).
#: The conditional's two forms are checked in _conditional.
REQUIRED_ATTRIBUTES: dict[HloOpcode, tuple[str, ...]] = {
    HloOpcode.ALL_GATHER: ("dimensions",),
    HloOpcode.ALL_GATHER_START: ("dimensions",),
    HloOpcode.ALL_REDUCE: ("to_apply",),
    HloOpcode.ALL_REDUCE_START: ("to_apply",),
    HloOpcode.ASYNC_START: ("calls",),
    HloOpcode.BATCH_NORM_GRAD: ("epsilon", "feature_index"),
    HloOpcode.BATCH_NORM_INFERENCE: ("epsilon", "feature_index"),
    HloOpcode.BATCH_NORM_TRAINING: ("epsilon", "feature_index"),
    HloOpcode.CALL: ("to_apply",),
    HloOpcode.COLLECTIVE_PERMUTE: ("source_target_pairs",),
    HloOpcode.COLLECTIVE_PERMUTE_START: ("source_target_pairs",),
    HloOpcode.COMPARE: ("direction",),
    HloOpcode.CONCATENATE: ("dimensions",),
    HloOpcode.CONVOLUTION: ("dim_labels",),
    HloOpcode.CUSTOM_CALL: ("custom_call_target",),
    HloOpcode.DOMAIN: ("domain",),
    HloOpcode.DYNAMIC_SLICE: ("dynamic_slice_sizes",),
    HloOpcode.FFT: ("fft_type", "fft_length"),
    HloOpcode.FUSION: ("kind", "calls"),
    HloOpcode.GATHER: ("offset_dims", "collapsed_slice_dims", "start_index_map", "index_vector_dim", "slice_sizes"),
    HloOpcode.GET_TUPLE_ELEMENT: ("index",),
    HloOpcode.IOTA: ("iota_dimension",),
    HloOpcode.MAP: ("to_apply",),
    HloOpcode.PAD: ("padding",),
    HloOpcode.REDUCE: ("dimensions", "to_apply"),
    HloOpcode.REDUCE_PRECISION: ("exponent_bits", "mantissa_bits"),
    HloOpcode.REDUCE_SCATTER: ("dimensions", "to_apply"),
    HloOpcode.REDUCE_WINDOW: ("to_apply",),
    HloOpcode.REVERSE: ("dimensions",),
    HloOpcode.RNG: ("distribution",),
    HloOpcode.RNG_BIT_GENERATOR: ("algorithm",),
    HloOpcode.RNG_GET_AND_UPDATE_STATE: ("delta",),
    HloOpcode.SCAN: ("dimensions", "num_carries", "to_apply"),
    HloOpcode.SCATTER: ("update_window_dims", "inserted_window_dims", "scatter_dims_to_operand_dims", "index_vector_dim", "to_apply"),
    HloOpcode.SELECT_AND_SCATTER: ("select", "scatter"),
    HloOpcode.SLICE: ("slice",),
    HloOpcode.SORT: ("dimensions", "to_apply"),
    HloOpcode.TOP_K: ("k",),
    HloOpcode.TRANSPOSE: ("dimensions",),
    HloOpcode.WHILE: ("condition", "body"),
}

# Attribute values XLA's parser reads as integers or lists of them.
_INT_LIST_ATTRS = frozenset({
    "dimensions", "dynamic_slice_sizes", "lhs_batch_dims", "lhs_contracting_dims", "rhs_batch_dims",
    "rhs_contracting_dims", "offset_dims", "collapsed_slice_dims", "start_index_map",
    "update_window_dims", "inserted_window_dims", "scatter_dims_to_operand_dims", "fft_length",
    "operand_batching_dims", "start_indices_batching_dims", "input_batching_dims", "scatter_indices_batching_dims",
})
_INT_ATTRS = frozenset({"index", "iota_dimension", "index_vector_dim", "feature_index", "exponent_bits",
                        "mantissa_bits", "k", "num_carries", "channel_id", "tuple_index"})
_INT_LIST = re.compile(r"\{[ \t]*(?:-?[0-9]+[ \t]*(?:,[ \t]*-?[0-9]+[ \t]*)*)?\}")
_INT = re.compile(r"-?[0-9]+")
_SLICE = re.compile(r"\{[ \t]*(?:\[[ \t]*-?[0-9]+[ \t]*:[ \t]*-?[0-9]+[ \t]*(?::[ \t]*-?[0-9]+[ \t]*)?\][ \t]*"
                    r"(?:,[ \t]*\[[ \t]*-?[0-9]+[ \t]*:[ \t]*-?[0-9]+[ \t]*(?::[ \t]*-?[0-9]+[ \t]*)?\][ \t]*)*)?\}")
_DIGITS = re.compile(r"[0-9]+")
_BOOL_ATTRS = frozenset({"is_stable", "constrain_layout", "use_global_device_ids", "indices_are_sorted",
                         "unique_indices", "largest", "is_host_transfer"})
_STRING_VALUE = re.compile(r'"(?:[^"\\\n]|\\.)*"')
_DIRECTIONS = frozenset({"EQ", "NE", "GE", "GT", "LE", "LT"})
_FUSION_KINDS = frozenset({"kLoop", "kInput", "kOutput", "kCustom"})


def attribute_problems(instr: Instruction, where: str) -> list[str]:
    """Attributes XLA's parser would not read: a required one missing, or a
    value that is not the integer (list) or keyword it must be.  The verifier
    runs the shape checks, which read these values, only when this is empty."""
    out: list[str] = []
    attrs = instr.attributes
    op = instr.opcode
    if op is HloOpcode.ASYNC_START and instr.async_wrapped_opcode is not None:
        op = instr.async_wrapped_opcode  # custom-call-start: the wrapped op's attributes
    for key in REQUIRED_ATTRIBUTES.get(op, ()):
        if key not in attrs:
            out.append(f"{where}: needs attribute {key}= (XLA's parser requires it for {op.value})")
    for key, raw in attrs.items():
        if raw is None:
            continue
        value = raw.strip()
        if key in _INT_LIST_ATTRS or key == "slice_sizes" and op is HloOpcode.GATHER:
            ok = _INT_LIST.fullmatch(value)
            what = "a braced list of integers like {0,1}"
        elif key in _INT_ATTRS:
            ok = _INT.fullmatch(value)
            what = "an integer"
        elif key == "slice" and op is HloOpcode.SLICE:
            ok = _SLICE.fullmatch(value)
            what = "ranges like {[0:4], [0:8:2]}"
        elif key in _BOOL_ATTRS:
            ok = value in ("true", "false")
            what = "true or false"
        elif key == "custom_call_target":
            ok = _STRING_VALUE.fullmatch(value)
            what = 'a quoted string like "my_target"'
        elif key == "padding" and op is HloOpcode.PAD:
            ok = _PADDING.fullmatch(value)
            what = "low_high[_interior] per dimension, joined by 'x'"
        elif key == "window":
            m = _WINDOW_PAD.search(value)
            ok = not m or re.fullmatch(r"-?[0-9]+_-?[0-9]+(?:x-?[0-9]+_-?[0-9]+)*", m.group(1).rstrip("}"))
            what = "a window whose pad= is low_high per dimension, joined by 'x'"
        elif key == "direction" and op is HloOpcode.COMPARE:
            ok = value in _DIRECTIONS
            what = "one of " + ", ".join(sorted(_DIRECTIONS))
        elif key == "kind" and op is HloOpcode.FUSION:
            ok = value in _FUSION_KINDS
            what = "one of " + ", ".join(sorted(_FUSION_KINDS))
        else:
            continue
        if not ok:
            out.append(f"{where}: {key}={value[:60]} is not {what}")
        elif (key in _INT_ATTRS or key in _INT_LIST_ATTRS or key in ("slice", "padding")) and any(len(d) > 19 or int(d) > INT64_MAX for d in _DIGITS.findall(value)):
            out.append(f"{where}: {key}={value[:60]} has a number past the int64 range XLA reads")
    return out


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
    api = attrs.get("api_version")
    if api is not None and api not in _API_VERSIONS:
        out.append(f"{where}: api_version={api} is not one of {', '.join(sorted(_API_VERSIONS))}")
    acc = attrs.get("result_accuracy")
    if acc is not None:
        m = re.search(r"mode\s*=\s*(\w+)", acc)
        if m and m.group(1).upper() not in _ACCURACY_MODES:
            out.append(f"{where}: result_accuracy mode {m.group(1)} is not one of {', '.join(sorted(_ACCURACY_MODES))}")
    # XLA's ShapeVerifier: after-all makes a token (of any operands);
    # add-dependency passes operand 0 on, ordered after the token in operand 1
    if op is HloOpcode.AFTER_ALL and not instr.shape.is_token:
        out.append(f"{where}: after-all produces token[], not {instr.shape.to_text(False)}")
    if op is HloOpcode.ADD_DEPENDENCY and instr.operand_count == 2:
        if not instr.operands[1].shape.is_token:
            out.append(f"{where}: operand 1 of add-dependency must be a token, is {instr.operands[1].shape.to_text(False)}")
        if not instr.shape.compatible(instr.operands[0].shape):
            out.append(f"{where}: add-dependency returns its operand 0 ({instr.operands[0].shape.to_text(False)}), not {instr.shape.to_text(False)}")
    if op in (HloOpcode.ALL_REDUCE, HloOpcode.ALL_REDUCE_START, HloOpcode.REDUCE_SCATTER, HloOpcode.ALL_GATHER, HloOpcode.ALL_GATHER_START):
        if attrs.get("use_global_device_ids", "").strip() == "true" and "channel_id" not in attrs:
            out.append(f"{where}: use_global_device_ids=true needs a channel_id (XLA's parser rejects it without)")
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
        except ShapeError:
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
    elif "branch_computations" not in called and not ("true_computation" in called and "false_computation" in called):
        out.append(f"{where}: needs branch_computations= or both true_computation= and false_computation=")
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
