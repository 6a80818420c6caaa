"""Checks the invariants of an HLO module, like XLA's HloVerifier (a subset).

Run after every pass that changed something: it names the instruction that is
wrong, says why, and shows the printed lines around it.
"""

from __future__ import annotations

from .checks import attribute_problems, instruction_problems, module_problems
from .errors import VerificationError
from .ir import Computation, Instruction, Module
from .opcode import BINARY_ELEMENTWISE, TERNARY_ELEMENTWISE, UNARY_ELEMENTWISE, HloOpcode
from .printer import print_instruction
from .shape import PrimitiveType
from .shape_inference import ShapeInferenceError, infer_shape

_FIXED_ARITY = {
    **{op: 1 for op in UNARY_ELEMENTWISE},
    **{op: 2 for op in BINARY_ELEMENTWISE},
    **{op: 3 for op in TERNARY_ELEMENTWISE},
    HloOpcode.PARAMETER: 0,
    HloOpcode.CONSTANT: 0,
    HloOpcode.IOTA: 0,
    HloOpcode.GET_TUPLE_ELEMENT: 1,
    HloOpcode.BROADCAST: 1,
    HloOpcode.RESHAPE: 1,
    HloOpcode.TRANSPOSE: 1,
    HloOpcode.BITCAST: 1,
    HloOpcode.SLICE: 1,
    HloOpcode.REVERSE: 1,
    HloOpcode.DOT: 2,
    HloOpcode.PAD: 2,
    HloOpcode.WHILE: 1,
    # counts XLA's parser enforces ("expects N operands")
    HloOpcode.ADD_DEPENDENCY: 2,
    HloOpcode.ALL_GATHER_DONE: 1,
    HloOpcode.ALL_REDUCE_DONE: 1,
    HloOpcode.COLLECTIVE_PERMUTE_DONE: 1,
    HloOpcode.COPY_DONE: 1,
    HloOpcode.COPY_START: 1,
    HloOpcode.DOMAIN: 1,
    HloOpcode.GET_DIMENSION_SIZE: 1,
    HloOpcode.INFEED: 1,
    HloOpcode.OUTFEED: 2,
    HloOpcode.PARTITION_ID: 0,
    HloOpcode.RECV: 1,
    HloOpcode.RECV_DONE: 1,
    HloOpcode.REPLICA_ID: 0,
    HloOpcode.RNG_BIT_GENERATOR: 1,
    HloOpcode.SEND: 2,
    HloOpcode.SEND_DONE: 1,
    HloOpcode.TOP_K: 1,
}
_SHAPE_CHECKED = frozenset(_FIXED_ARITY) | {HloOpcode.TUPLE, HloOpcode.CONCATENATE, HloOpcode.REDUCE, HloOpcode.DYNAMIC_SLICE, HloOpcode.DYNAMIC_UPDATE_SLICE}


def _context(comp: Computation, instr: Instruction, radius: int = 2) -> str:
    order = comp.instructions
    try:
        i = next(k for k, x in enumerate(order) if x is instr)
    except StopIteration:
        return ""
    lines = []
    for x in order[max(0, i - radius) : i + radius + 1]:
        mark = ">>" if x is instr else "  "
        try:
            text = print_instruction(x, is_root=x is comp.root)[2:][:200]
        except Exception:  # noqa: BLE001 - context is best effort; the problem itself is reported
            text = f"%{x.name} = ... {x.opcode_text}(...)"
        lines.append(mark + text)
    return f"in computation %{comp.name}:\n" + "\n".join(lines)


def verify(module: Module, *, raise_on_error: bool = True) -> list[str]:
    """Returns the list of problems (empty when the module is valid); by default
    raises VerificationError on the first one, with context."""
    problems: list[tuple[str, Computation | None, Instruction | None]] = []

    def bad(msg: str, comp: Computation | None = None, instr: Instruction | None = None) -> None:
        problems.append((msg, comp, instr))

    for msg in module_problems(module):
        bad(msg)
    comps = set(map(id, module.computations))
    if module.entry is None or id(module.entry) not in comps:
        bad(f"module {module.name} has no entry computation among its computations")
    names = set()
    for comp in module.computations:
        if comp.name in names:
            bad(f"computation name %{comp.name} is used twice", comp)
        names.add(comp.name)
        _verify_computation(module, comp, comps, bad)
    cycle = call_cycle(module)
    if cycle:
        chain = " -> ".join("%" + c.name for c in cycle)
        bad(f"computation %{cycle[0].name} is on a call cycle ({chain}); XLA rejects recursive call graphs", cycle[0])
    if raise_on_error and problems:
        msg, comp, instr = problems[0]
        more = f" (and {len(problems) - 1} more problem{'s' if len(problems) > 2 else ''})" if len(problems) > 1 else ""
        raise VerificationError(
            msg + more,
            instruction_name=instr.name if instr else "",
            context=_context(comp, instr) if comp is not None and instr is not None else "",
            problems=tuple(p[0] for p in problems),
        )
    return [p[0] for p in problems]


#: names XLA's parser takes for element types (checked against it: "tuple" is not one)
_TYPE_NAMES = frozenset(t.value for t in PrimitiveType) - {"tuple"}


def _verify_computation(module: Module, comp: Computation, comps: set[int], bad) -> None:
    members = set()
    count = 0
    for instr in comp:
        members.add(id(instr))
        count += 1
        if instr.parent is not comp:
            bad(f"%{instr.name} is listed in %{comp.name} but its parent is {instr.parent and instr.parent.name}", comp, instr)
        if comp.get_instruction(instr.name) is not instr:
            bad(f"%{instr.name} is not registered under its name in %{comp.name}", comp, instr)
        if instr.name in _TYPE_NAMES:
            # HloInstruction::SetAndSanitizeName renames these, so XLA's parser rejects them
            bad(f"%{instr.name}: an element type's name cannot name an instruction (XLA's parser rejects it; "
                f"rename it, e.g. %{instr.name}_)", comp, instr)
    if count != comp.instruction_count:
        bad(f"%{comp.name} counts {comp.instruction_count} instructions but lists {count}", comp)
    if comp.root is None or id(comp.root) not in members:
        bad(f"computation %{comp.name} has no root in its instruction list", comp)
    seen: set[int] = set()
    for instr in comp:
        where = f"%{instr.name} ({instr.opcode_text})"
        for i, op in enumerate(instr.operands):
            if id(op) not in members:
                bad(f"{where}: operand {i} %{op.name} is not an instruction of %{comp.name}", comp, instr)
            elif instr not in op._users:
                bad(f"{where}: uses %{op.name} but is missing from its users", comp, instr)
            elif id(op) not in seen and module.is_scheduled:
                bad(f"{where}: operand %{op.name} comes later in the schedule", comp, instr)
        for user, n in instr._users.items():
            if sum(1 for o in user.operands if o is instr) != n:
                bad(f"{where}: users say %{user.name} uses it {n} times, its operands disagree", comp, instr)
        for pred in instr.control_predecessors:
            if instr not in pred._control_successors:
                bad(f"{where}: control predecessor %{pred.name} does not list it as successor", comp, instr)
        seen.add(id(instr))
        for callee in instr.called_computations:
            if id(callee) not in comps:
                bad(f"{where}: calls %{callee.name}, which is not in the module", comp, instr)
        try:
            attr_problems = attribute_problems(instr, where)
            for msg in attr_problems:
                bad(msg, comp, instr)
            if not attr_problems:  # the checks below read these attributes
                _verify_shapes(instr, where, comp, bad)
                for msg in instruction_problems(instr, where):
                    bad(msg, comp, instr)
        except Exception as e:  # noqa: BLE001 - verify reports, it never crashes
            bad(f"{where}: internal error while checking it ({type(e).__name__}: {e})", comp, instr)
    if len(comp.post_order()) != count or _has_cycle(comp):
        bad(f"computation %{comp.name} has a cycle", comp)


def call_cycle(module: Module) -> list[Computation] | None:
    """A recursive call chain (``[f, g, f]``), or None.  Iterative, so a long
    chain of calls cannot exhaust Python's stack."""
    state: dict[int, int] = {}  # 1: on the current path, 2: done

    def callees(comp: Computation):
        return (c for instr in comp for c in instr.called_computations)

    for start in module.computations:
        if id(start) in state:
            continue
        path, stack = [start], [callees(start)]
        state[id(start)] = 1
        while stack:
            callee = next(stack[-1], None)
            if callee is None:
                state[id(path.pop())] = 2
                stack.pop()
            elif state.get(id(callee)) == 1:
                return path[path.index(callee):] + [callee]
            elif id(callee) not in state:
                state[id(callee)] = 1
                path.append(callee)
                stack.append(callees(callee))
    return None


def _has_cycle(comp: Computation) -> bool:
    state: dict[int, int] = {}
    for start in comp:
        if state.get(id(start)):
            continue
        stack = [(start, iter(start.operands + start.control_predecessors))]
        state[id(start)] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[id(node)] = 2
                stack.pop()
                continue
            s = state.get(id(nxt), 0)
            if s == 1:
                return True
            if s == 0:
                state[id(nxt)] = 1
                stack.append((nxt, iter(nxt.operands + nxt.control_predecessors)))
    return False


def _bitcast_convert_problem(src, dst) -> str | None:
    """XLA's rule (ShapeInference::InferBitcastConvertShape): equal widths keep the
    dims; wide to narrow appends a last dimension of the width ratio; narrow to wide
    needs that last dimension on the operand and drops it.  None when the shapes obey."""
    a, b = src.element_type.bit_width, dst.element_type.bit_width
    sd, dd = list(src.dims), list(dst.dims)
    if a == b or not a or not b:
        expected = sd
    elif a > b:
        if a % b:
            return f"cannot bitcast-convert {src.element_type.value} to {dst.element_type.value}: widths {a} and {b} do not divide"
        expected = sd + [a // b]
    else:
        if b % a:
            return f"cannot bitcast-convert {src.element_type.value} to {dst.element_type.value}: widths {a} and {b} do not divide"
        if not sd or sd[-1] != b // a:
            return (f"bitcast-convert from {src.element_type.value} to the wider {dst.element_type.value} needs an operand "
                    f"whose last dimension is {b // a}, has dims {sd}")
        expected = sd[:-1]
    if dd != expected:
        return f"result dims {dd} differ from {expected}, which a bitcast-convert of {src.to_text(False)} gives"
    return None


#: XLA sizes arrays in int64: ShapeUtil::ValidateShape rejects a shape whose element
#: count or byte size does not fit.
_INT64_MAX = 2**63 - 1


def _short(shape) -> str:
    text = shape.to_text(False)
    return text if len(text) <= 80 else text[:77] + "..."


def _size_problem(shape) -> str | None:
    for _, leaf in shape.leaves():
        if not leaf.is_array:
            continue
        n = leaf.num_elements
        if n > _INT64_MAX:
            return f"shape {_short(leaf)} has more elements than int64 holds (XLA rejects it)"
        if n * max(leaf.element_type.byte_width, 1) > _INT64_MAX:
            return f"shape {_short(leaf)} is more bytes than int64 holds (XLA rejects it)"
    return None


def _verify_shapes(instr: Instruction, where: str, comp: Computation, bad) -> None:
    size = _size_problem(instr.shape)
    if size:
        bad(f"{where}: {size}", comp, instr)
        return
    op = instr.opcode
    if op is HloOpcode.CONVOLUTION and instr.operand_count < 2:
        # XLA's parser: "expects at least 2 operands" (it checks dim_labels= first,
        # like attribute_problems before this); a third operand it lets through
        bad(f"{where}: takes at least 2 operands (lhs, rhs), has {instr.operand_count}", comp, instr)
        return
    n = _FIXED_ARITY.get(op)
    if n is not None and instr.operand_count != n:
        bad(f"{where}: takes {n} operand{'s' if n != 1 else ''}, has {instr.operand_count}", comp, instr)
        return
    if op in _SHAPE_CHECKED:
        try:
            expected = infer_shape(op, [o.shape for o in instr.operands], instr.attributes)
        except ShapeInferenceError as e:
            bad(f"{where}: {e}", comp, instr)
            return
        except (ValueError, TypeError) as e:
            bad(f"{where}: malformed attributes ({e})", comp, instr)
            return
        if expected is not None and op is HloOpcode.DOT:
            # a dot may accumulate into another element type (preferred_element_type)
            expected = expected.with_layout(None)
            if expected.dims != instr.shape.dims:
                bad(f"{where}: result shape is {instr.shape.to_text(False)}, operands give dims {list(expected.dims)}", comp, instr)
        elif expected is not None and not expected.compatible(instr.shape):
            bad(f"{where}: result shape is {instr.shape.to_text(False)}, operands give {expected.to_text(False)}", comp, instr)
    if op is HloOpcode.BROADCAST:
        src = instr.operands[0].shape
        dims = instr.dimensions or ()
        if len(dims) != src.rank or any(not 0 <= d < instr.shape.rank or instr.shape.dims[d] != src.dims[i] for i, d in enumerate(dims)):
            bad(f"{where}: dimensions={list(dims)} do not map {src.to_text(False)} into {instr.shape.to_text(False)}", comp, instr)
    elif op is HloOpcode.RESHAPE:
        src = instr.operands[0].shape
        if src.num_elements != instr.shape.num_elements or src.element_type is not instr.shape.element_type:
            bad(f"{where}: reshape of {src.to_text(False)} to {instr.shape.to_text(False)} changes the element count or type", comp, instr)
    elif op is HloOpcode.BITCAST_CONVERT:
        if instr.operands:
            problem = _bitcast_convert_problem(instr.operands[0].shape, instr.shape)
            if problem:
                bad(f"{where}: {problem}", comp, instr)
    elif op is HloOpcode.CONVERT or op in UNARY_ELEMENTWISE:
        if instr.operands and instr.operands[0].shape.dims != instr.shape.dims:
            bad(f"{where}: result dims {list(instr.shape.dims)} differ from the operand's {list(instr.operands[0].shape.dims)}", comp, instr)
    elif op in (HloOpcode.FUSION, HloOpcode.CALL):
        callee = instr.fused_computation if op is HloOpcode.FUSION else instr.to_apply
        if callee is None:
            bad(f"{where}: has no called computation", comp, instr)
            return
        params = callee.parameters
        if len(params) != instr.operand_count:
            bad(f"{where}: passes {instr.operand_count} operands to %{callee.name}, which has {len(params)} parameters", comp, instr)
        for p, o in zip(params, instr.operands):
            if not p.shape.compatible(o.shape):
                bad(f"{where}: operand %{o.name} {o.shape.to_text(False)} does not match parameter %{p.name} {p.shape.to_text(False)} of %{callee.name}", comp, instr)
        if callee.root is not None and not callee.root.shape.compatible(instr.shape):
            bad(f"{where}: result {instr.shape.to_text(False)} differs from the root of %{callee.name} ({callee.root.shape.to_text(False)})", comp, instr)
    elif op is HloOpcode.WHILE:
        body, cond = instr.called_computation("body"), instr.called_computation("condition")
        if body is None or cond is None:
            bad(f"{where}: needs body= and condition=", comp, instr)
            return
        if body.root is not None and not body.root.shape.compatible(instr.shape):
            bad(f"{where}: body root {body.root.shape.to_text(False)} differs from the loop state {instr.shape.to_text(False)}", comp, instr)
        if cond.root is not None and not (cond.root.shape.element_type is PrimitiveType.PRED and cond.root.shape.rank == 0):
            bad(f"{where}: condition %{cond.name} must return pred[], returns {cond.root.shape.to_text(False)}", comp, instr)
    elif op is HloOpcode.REDUCE:
        fn = instr.to_apply
        if fn is not None and len(fn.parameters) != instr.operand_count:
            bad(f"{where}: reducer %{fn.name} takes {len(fn.parameters)} parameters, reduce has {instr.operand_count} operands", comp, instr)
