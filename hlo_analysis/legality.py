"""Fusion legality: which instructions may be fused, and with what; the rules of
xla/service/cpu/cpu_instruction_fusion.cc and xla/service/instruction_fusion.cc.

The rules and the public API: docs/fusion_passes.md#fusion-legality
"""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from hlo_tools import HloOpcode, Instruction
from hlo_tools.ir import Computation
from hlo_tools.attributes import parse_int_list
from hlo_tools.opcode import ELEMENTWISE
from hlo_tools.outline import path_around

from hlo_tools.side_effects import NON_DETERMINISTIC, SideEffects, side_effects


@dataclass(frozen=True)
class Decision:
    """A fusion verdict with its reason (XLA's FusionDecision); ``consumer``: the
    member that refused, when a whole region was asked (``can_join``)."""

    ok: bool
    reason: str = ""
    consumer: Instruction | None = field(default=None, compare=False, repr=False)

    def __bool__(self) -> bool:
        return self.ok

    @staticmethod
    def forbid(reason: str) -> "Decision":
        return Decision(False, reason)


ALLOW = Decision(True, "")

#: Non-elementwise opcodes XLA:CPU's elemental emitter handles inside a loop
#: fusion (CanBeLoopFused in cpu_instruction_fusion.cc).
LOOP_FUSIBLE = frozenset(
    {
        HloOpcode.BITCAST,
        HloOpcode.BROADCAST,
        HloOpcode.CONCATENATE,
        HloOpcode.DYNAMIC_SLICE,
        HloOpcode.DYNAMIC_UPDATE_SLICE,
        HloOpcode.GATHER,
        HloOpcode.IOTA,
        HloOpcode.PAD,
        HloOpcode.REDUCE,
        HloOpcode.RESHAPE,
        HloOpcode.REVERSE,
        HloOpcode.SLICE,
        HloOpcode.TRANSPOSE,
    }
)

#: Cheap opcodes (never "expensive", XLA:CPU's IsExpensive returns false).
_CHEAP = frozenset(
    HloOpcode[n]
    for n in (
        "ADD AND BITCAST BITCAST_CONVERT BROADCAST CEIL CLAMP CLZ COMPARE COMPLEX CONCATENATE CONSTANT COPY "
        "DYNAMIC_SLICE DYNAMIC_UPDATE_SLICE FLOOR FMA GET_TUPLE_ELEMENT IMAG IOTA IS_FINITE MAXIMUM MINIMUM "
        "MULTIPLY NEGATE NOT OR PAD POPCNT REAL REDUCE_PRECISION RESHAPE REVERSE ROUND_NEAREST_AFZ "
        "ROUND_NEAREST_EVEN SELECT SHIFT_LEFT SHIFT_RIGHT_ARITHMETIC SHIFT_RIGHT_LOGICAL SLICE "
        "STOCHASTIC_CONVERT SUBTRACT TRANSPOSE TUPLE XOR"
    ).split()
)
_CHEAP_UNLESS_COMPLEX = frozenset({HloOpcode.ABS, HloOpcode.SIGN, HloOpcode.COSINE, HloOpcode.SINE, HloOpcode.TAN})

#: Opcodes that read each operand element once per output element.
_NO_REUSE = ELEMENTWISE | frozenset(
    {
        HloOpcode.BITCAST,
        HloOpcode.RESHAPE,
        HloOpcode.TRANSPOSE,
        HloOpcode.SLICE,
        HloOpcode.DYNAMIC_SLICE,
        HloOpcode.DYNAMIC_UPDATE_SLICE,
        HloOpcode.CONCATENATE,
        HloOpcode.PAD,
        HloOpcode.REVERSE,
        HloOpcode.REDUCE,
        HloOpcode.COPY,
    }
)

def _is_complex(instr: Instruction) -> bool:
    return instr.shape.element_type.is_complex


def _is_integral(instr: Instruction) -> bool:
    return instr.shape.element_type.is_integral


def is_scalar_constant(instr: Instruction) -> bool:
    """A constant with one element (XLA fuses only effective scalars)."""
    return instr.opcode is HloOpcode.CONSTANT and instr.shape.is_array and instr.shape.num_elements == 1


def is_expensive(instr: Instruction) -> bool:
    """XLA:CPU's CpuInstructionFusion::IsExpensive: worth computing once, not per use."""
    op = instr.opcode
    if op in _CHEAP:
        return False
    if op in _CHEAP_UNLESS_COMPLEX:
        return _is_complex(instr)
    if op is HloOpcode.CONVERT:
        # f32 -> bf16 rounds with NaN checks; the other direction is a shift
        return instr.shape.element_type.value == "bf16" and instr.operand(0).shape.element_type.value == "f32"
    if op in (HloOpcode.DIVIDE, HloOpcode.REMAINDER):
        return not _is_integral(instr)
    return True


def reuses_operand_elements(consumer: Instruction, index: int) -> bool:
    """Does ``consumer`` read an element of operand ``index`` more than once?
    (InstructionFusion::ReusesOperandElements: a broadcast or gather that grows
    its input, a reduce-window, a dot.)"""
    op = consumer.opcode
    operand = consumer.operand(index)
    if op is HloOpcode.FUSION:
        body = consumer.fused_computation
        param = _fused_parameters(body).get(index)
        if param is None:
            return False
        return reused_within(param, body)
    if op in (HloOpcode.BROADCAST, HloOpcode.GATHER):
        return consumer.shape.num_elements > operand.shape.num_elements
    return op not in _NO_REUSE


def _fused_parameters(body: Computation) -> dict[int, Instruction]:
    """Parameter number -> parameter of a fused computation (one walk of the body
    per ``legality_memo`` block, not one per question)."""
    memo = _MEMO.get()
    params = memo.parameters.get(id(body)) if memo is not None else None
    if params is None:
        params = {p.parameter_number: p for p in body if p.opcode is HloOpcode.PARAMETER}
        if memo is not None:
            memo.parameters[id(body)] = params
    return params


def reused_within(value: Instruction, members: Iterable[Instruction] | Computation) -> bool:
    """Would a fusion of ``members`` read an element of ``value`` more than once?
    Elements flow through members that read each element once (elementwise ops,
    bitcasts, slices); the first member on such a path that reuses its operand
    (a broadcast, a gather) makes the whole fusion recompute ``value`` per reuse.
    Checking only the direct users misses ``broadcast(bitcast(rsqrt(x)))``.
    ``members`` may be a fused computation: all of it, asked of each user's
    parent (no set of its members made per question)."""
    body = members if isinstance(members, Computation) else None
    inside = {id(m) for m in members} if body is None else None
    stack, seen = [value], set()
    while stack:
        v = stack.pop()
        for u, index in v.uses():
            if (u.parent is not body if body is not None else id(u) not in inside) or (id(u), index) in seen:
                continue
            seen.add((id(u), index))
            if reuses_operand_elements(u, index):
                return True
            stack.append(u)
    return False


def shape_key(instr: Instruction) -> tuple:
    """What must agree for outputs to share one loop on XLA:CPU: dimensions and
    layout (a kLoop fusion walks one index space; measured: outputs of another
    shape crash XLA:CPU). Multi-output, horizontal and priority fusion use it."""
    s = instr.shape
    layout = s.layout.minor_to_major if s.layout is not None else None
    return (tuple(s.dims), tuple(layout) if layout is not None else None)


@dataclass
class _Answers:
    """Per-instruction answers kept for one block of ``legality_memo``, keyed by id."""

    fusible: dict[int, Decision] = field(default_factory=dict)
    expensive: dict[int, bool] = field(default_factory=dict)  # is_expensive_producer
    parameters: dict[int, dict[int, Instruction]] = field(default_factory=dict)  # _fused_parameters


_MEMO: contextvars.ContextVar[_Answers | None] = contextvars.ContextVar("hlo_legality_memo", default=None)


@contextlib.contextmanager
def legality_memo() -> Iterator[None]:
    """Within the block ``fusible``, ``is_expensive_producer`` and a fused body's
    parameters are found once per instruction: for analyses that ask about one
    module without changing it (opportunities asks per edge, and a fusion on many
    edges had its body walked for each)."""
    token = _MEMO.set(_Answers())
    try:
        yield
    finally:
        _MEMO.reset(token)


def fusible(instr: Instruction) -> Decision:
    """May ``instr`` live inside a loop (or input) fusion? The reason reads after
    the instruction's role: "producer " + "is a dot".  A fusion is fusible when
    everything inside it is, nested fusions included (an explicit stack: fusion
    chains of any depth); the reason then names the path to the first that is not:
    "is a fusion whose %g is a fusion whose %x has a side effect"."""
    return _asked_once("fusible", instr, _fusible)


def _asked_once(table: str, instr: Instruction, answer: Callable[[Instruction], Any]) -> Any:
    """``answer(instr)``, kept in ``table`` of the enclosing ``legality_memo`` block (if any)."""
    memo = _MEMO.get()
    if memo is None:
        return answer(instr)
    known = getattr(memo, table)
    r = known.get(id(instr))
    if r is None:
        r = known[id(instr)] = answer(instr)
    return r


def _fusible(instr: Instruction) -> Decision:
    effects = side_effects()  # one memo for the whole walk (for the pass run, in a PassManager)
    d = _fusible_here(instr, effects)
    if d is not _LOOK_INSIDE:
        return d
    stack: list[Iterator[Instruction]] = [iter(instr.fused_computation)]
    path: list[str] = []  # the inner fusions entered, by name
    while stack:
        for inner in stack[-1]:
            op = inner.opcode
            if op is HloOpcode.PARAMETER or op is HloOpcode.TUPLE:
                continue
            if op in _PLAIN_CALLS_NOTHING and inner.shape.is_array and not inner.called_computations:
                continue  # _fusible_here's first answer, asked without the call (most of every body)
            d = _fusible_here(inner, effects)
            if d is _LOOK_INSIDE:
                path.append(inner.name)
                stack.append(iter(inner.fused_computation))
                break  # on inside it; this body's walk resumes after
            if not d:
                whose = "".join(f"is a fusion whose %{n} " for n in [*path, inner.name])
                return Decision.forbid(whose + d.reason)
        else:
            stack.pop()
            if path:
                path.pop()
    return ALLOW


#: ``_fusible_here``'s answer for a kLoop/kInput fusion: fusible if its members are.
_LOOK_INSIDE = Decision.forbid("look inside")


#: Opcodes fusible whenever the instruction calls nothing, has an array shape and
#: no control edges: most of every fusion body, answered without the checks below.
_PLAIN = (ELEMENTWISE | LOOP_FUSIBLE) - {HloOpcode.REDUCE, HloOpcode.GATHER} - NON_DETERMINISTIC
#: The ones of them that never call a computation.
_PLAIN_CALLS_NOTHING = _PLAIN - {HloOpcode.MAP, HloOpcode.REDUCE_WINDOW, HloOpcode.SCATTER, HloOpcode.SELECT_AND_SCATTER,
                                 HloOpcode.SORT, HloOpcode.CUSTOM_CALL, HloOpcode.CALL, HloOpcode.FUSION}


def _fusible_here(instr: Instruction, effects: SideEffects) -> Decision:
    """``fusible`` for ``instr`` itself; ``_LOOK_INSIDE`` for a kLoop/kInput fusion."""
    op = instr.opcode
    if op is HloOpcode.COPY and instr.has_control_dependencies:
        # copy insertion's: the copy is what lets the loop state be written in place
        return Decision.forbid("is a copy ordered by control edges")
    if op in _PLAIN and not instr.called_computations and instr.shape.is_array:
        return ALLOW  # control edges move to the fusion (``Clusters.would_cycle`` checks them)
    if op is HloOpcode.FUSION and instr.fusion_kind in ("kLoop", "kInput") and instr.fused_computation is not None:
        # XLA:CPU wraps lone ops (scatter, sort...) in kLoop fusions: look inside;
        # the walk inside asks each member for side effects (one walk, not two)
        return _LOOK_INSIDE
    if op is HloOpcode.PARAMETER:
        return Decision.forbid("is a parameter")
    if op in NON_DETERMINISTIC or effects.instruction(instr):
        return Decision.forbid("has a side effect")
    if op in (HloOpcode.DOT, HloOpcode.CONVOLUTION, HloOpcode.RAGGED_DOT, HloOpcode.SCALED_DOT):
        # XLA:CPU calls Eigen/oneDNN (or its own tiled emitter) for these
        return Decision.forbid(f"is a {op.value}")
    if op is HloOpcode.FUSION:
        kind = instr.fusion_kind
        if kind not in ("kLoop", "kInput"):
            return Decision.forbid(f"is a {kind} fusion")
        return Decision.forbid("is a fusion without a body")  # a kLoop/kInput one with a body was looked inside above
    if op is HloOpcode.CONSTANT:
        return ALLOW if is_scalar_constant(instr) else Decision.forbid("is a non-scalar constant")
    if op is HloOpcode.REDUCE and instr.operand_count != 2:
        # an argmax: XLA's reduction emitters take it as a fusion's root, with its
        # inputs (the convert, the iota) fused in; its tuple is read by get-tuple-elements
        return ALLOW if all(s.is_array for s in instr.shape.tuple_shapes) else Decision.forbid("is a variadic reduce")
    if not instr.shape.is_array:
        return Decision.forbid("is tuple-shaped")
    if op is HloOpcode.GATHER and not is_simplified_gather(instr):
        # XLA:CPU's indexing analysis CHECK-fails on other gathers inside a fusion
        return Decision.forbid("is a gather not in GatherSimplifier's canonical form")
    if op in ELEMENTWISE or op in LOOP_FUSIBLE:
        return ALLOW
    return Decision.forbid(f"is a {op.value} (not loop-fusible)")


def is_simplified_gather(instr: Instruction) -> bool:
    """GatherSimplifier::IsSimplifiedGather (xla/service/gather_simplifier.cc):
    rank-2 indices with index_vector_dim=1, identity start_index_map, nothing
    collapsed, offset dims 1..n. The only gathers XLA's fusion emitters take."""
    def dims(key: str) -> list[int]:
        text = instr.attribute(key)
        return list(parse_int_list(text)) if text else []

    offset = dims("offset_dims")
    return (
        instr.operand(1).shape.rank == 2
        and instr.attribute("index_vector_dim") == "1"
        and dims("start_index_map") == list(range(len(dims("start_index_map"))))
        and not dims("collapsed_slice_dims")
        and not dims("operand_batching_dims")
        and bool(offset)
        and offset == list(range(1, len(offset) + 1))
    )


def is_fusible(instr: Instruction) -> bool:
    """True when ``instr`` may be part of a fusion (see ``fusible`` for why not)."""
    return fusible(instr).ok


def _is_costly_concatenate(instr: Instruction) -> bool:
    """cpu_instruction_fusion.cc: more than 8 operands, or a large concatenate on
    the minor dimension, is faster as a plain copy loop than fused."""
    if instr.opcode is not HloOpcode.CONCATENATE:
        return False
    if instr.operand_count > 8:
        return True
    dims = instr.shape.dims
    if len(dims) <= 1:
        return False
    cdim = instr.dimensions[0]
    layout = instr.shape.layout
    minor = layout.minor_to_major[0] if layout is not None and layout.minor_to_major else len(dims) - 1
    size = instr.shape.element_type.byte_width
    return cdim == minor and dims[cdim] * size >= 64 and instr.shape.byte_size >= 2048


def can_fuse(producer: Instruction, consumer: Instruction, *, check_cycle: bool = True, reuse: bool = True) -> Decision:
    """May ``producer`` be fused into its user ``consumer`` (loop fusion)?

    The producer must be fusible and not a reduction unless the consumer is
    elementwise-compatible epilogue code (a reduce is only fused as a fusion root
    or followed by elementwise/broadcast ops, as XLA:CPU's emitter can handle it
    inside a loop). Expensive producers are refused where the consumer reuses
    their elements (unless ``reuse`` is off: see ``can_join``); costly concatenates
    are refused; and no cycle may result.
    """
    if producer not in consumer.operands:
        return Decision.forbid(f"%{producer.name} is not an operand of %{consumer.name}")
    for side, instr in (("producer", producer), ("consumer", consumer)):
        d = fusible(instr)
        if not d:
            return Decision.forbid(f"{side} {d.reason}")
    if _is_costly_concatenate(producer) or _is_costly_concatenate(consumer):
        return Decision.forbid("concatenate fusion is inefficient")
    if reuse and is_expensive_producer(producer):
        idx = [i for i, o in enumerate(consumer.operands) if o is producer]
        if any(reuses_operand_elements(consumer, i) for i in idx):
            return Decision.forbid("expensive producer would be recomputed per reused element")
    if check_cycle and creates_cycle(producer, consumer):
        return Decision.forbid("would create a cycle")
    return ALLOW


def loop_state_writers(comp) -> dict[int, Instruction]:
    """For a while body: tuple index -> the instruction the root writes there, for
    every element of the loop state the body updates (not passed through as its
    own get-tuple-element); empty for any other computation."""
    module, root = comp.parent, comp.root
    if module is None or root is None or root.opcode is not HloOpcode.TUPLE or len(comp.parameters) != 1:
        return {}
    if not any(i.opcode is HloOpcode.WHILE and i.called_computation("body") is comp for i in module.instructions()):
        return {}
    param = comp.parameters[0]
    return {k: w for k, w in enumerate(root.operands)
            if not (w.opcode is HloOpcode.GET_TUPLE_ELEMENT and w.operand(0) is param and w.tuple_index == k)}


def _reaches(sources: Iterable[Instruction], target: Instruction) -> bool:
    """Is ``target`` one of ``sources`` or used, directly or not, by one of them?"""
    seen: set[int] = set()
    stack = list(sources)
    while stack:
        i = stack.pop()
        if i is target:
            return True
        if id(i) in seen:
            continue
        seen.add(id(i))
        stack.extend(i.users)
        stack.extend(i.control_successors)
    return False


def keeps_in_place_order(a: Sequence[Instruction], b: Sequence[Instruction]) -> bool:
    """May regions ``a`` and ``b`` become one kernel though control edges join them?

    After copy insertion (the hooked route on XLA:GPU), a control edge orders the
    readers of a buffer before the instruction that overwrites it in place (a
    while body's loop state, the threefry rounds of ``jax.random``).  Inside one
    kernel that order holds only element for element: every value an edge's
    reader takes from outside must reach the kernel's outputs through
    elementwise ops on its own dimensions, as XLA requires before a loop fusion
    writes over its operand (``CanShareOperandBufferWithUser``)."""
    a_ids = {id(m) for m in a}
    b_ids = {id(m) for m in b}
    edges = [(m, s) for m in a if m.has_control_dependencies for s in m.control_successors if id(s) in b_ids]
    edges += [(m, s) for m in b if m.has_control_dependencies for s in m.control_successors if id(s) in a_ids]
    inside = a_ids | b_ids
    for reader, writer in edges:
        # only a buffer the writer's output can take (as many bytes) is overwritten in place
        sizes = {s.byte_size for s in (writer.shape.tuple_shapes if writer.shape.is_tuple else (writer.shape,))
                 if s.is_array}
        for x in reader.operands:
            if (id(x) not in inside and (not x.shape.is_array or x.shape.byte_size in sizes)
                    and not _elementwise_to_outputs(x, inside)):
                return False
    return True


def _elementwise_to_outputs(value: Instruction, inside: set[int]) -> bool:
    """Does every member reading ``value``, and every member after them, compute
    element i from element i of its operands (``value``'s dimensions)?"""
    if not value.shape.is_array:
        return False
    dims = shape_key(value)  # dimensions and layout: element i at one address on both sides
    stack = [u for u in value.users if id(u) in inside]
    seen: set[int] = set()
    while stack:
        u = stack.pop()
        if id(u) in seen:
            continue
        seen.add(id(u))
        if not _index_preserving(u, dims):
            return False
        stack.extend(v for v in u.users if id(v) in inside)
    return True


def _index_preserving(instr: Instruction, key: tuple) -> bool:
    """Computes element i from element i (``key``: dimensions and layout), alone or
    as a loop fusion of such ops, scalars spread over the elements and tuples."""
    op = instr.opcode
    if op is HloOpcode.GET_TUPLE_ELEMENT:
        return instr.shape.is_array and shape_key(instr) == key
    if op is HloOpcode.TUPLE:
        return all(o.shape.is_array and shape_key(o) == key for o in instr.operands)
    if op in ELEMENTWISE:
        return instr.shape.is_array and shape_key(instr) == key
    body = instr.fused_computation if op is HloOpcode.FUSION and instr.fusion_kind == "kLoop" else None
    if body is None:
        return False
    for inner in body:
        iop = inner.opcode
        if iop is HloOpcode.TUPLE or (iop is HloOpcode.CONSTANT and inner.shape.is_array and inner.shape.num_elements == 1):
            continue
        if iop is HloOpcode.PARAMETER or (iop is HloOpcode.BROADCAST and inner.operand(0).shape.num_elements == 1):
            if inner.shape.is_array and (inner.shape.num_elements == 1 or shape_key(inner) == key):
                continue  # an operand on the same elements, or a scalar spread over them
            return False
        if not (iop in ELEMENTWISE and inner.shape.is_array and shape_key(inner) == key):
            return False
    return True


def keeps_loop_state_order(producer: Instruction, consumers: Iterable[Instruction], *, moved: bool,
                           writers: dict[int, Instruction] | None = None) -> Decision:
    """May ``producer`` be moved (``moved``) or copied into a fusion with
    ``consumers`` without reading the loop state after the body updated it in place?

    Fusions made inside XLA's pipeline after copy insertion (the hooked route)
    must keep its guarantee: in a while body, every read of an element of the
    loop state happens before the instruction that writes that element's new
    value (which shares its buffer).  A producer that reads such an element
    reads it, once fused, where the fusion runs; that is safe only if the
    writer depends on the fusion, or is the producer itself, moved into it.  Measured on a dumped train step: a loop
    counter's increment duplicated into a later fusion read the incremented
    counter, and the RNG key the loop computed came out different.

    ``writers``: ``loop_state_writers`` of the producer's computation, when the
    caller keeps it (it scans the module for the loops that call it).  Before
    copy insertion (``hlo opt`` on a pre-optimization module) the rule is only
    conservative.  Not covered: a fusion whose writer is itself a member and
    reads the element other than elementwise (XLA's in-place
    dynamic-update-slice fusions do, by design)."""
    reads = []
    for o in producer.operands:
        while o.opcode is HloOpcode.BITCAST:  # a view of the same buffer
            o = o.operand(0)
        if o.opcode is HloOpcode.GET_TUPLE_ELEMENT and o.operand(0).opcode is HloOpcode.PARAMETER:
            reads.append(o)
    if not reads or producer.parent is None:
        return ALLOW
    if writers is None:
        writers = loop_state_writers(producer.parent)
    consumers = list(consumers)
    for r in reads:
        w = writers.get(r.tuple_index)
        if w is None or r.operand(0) is not producer.parent.parameters[0] or (moved and w is producer):
            continue
        if not _reaches(consumers, w):
            return Decision.forbid(f"would read loop state element {r.tuple_index} (%{r.name}) after %{w.name} "
                                   "updated it in place")
    return ALLOW


def is_expensive_producer(instr: Instruction) -> bool:
    """``is_expensive`` extended to fusions: a fusion is expensive if anything in it is."""
    return _asked_once("expensive", instr, _is_expensive_producer)


def _is_expensive_producer(instr: Instruction) -> bool:
    body = instr.fused_computation
    if body is not None:
        return any(i.opcode is not HloOpcode.PARAMETER and is_expensive(i) for i in body)
    return is_expensive(instr)


def _significant_reduce(instrs: Iterable[Instruction]) -> bool:
    """Does any of ``instrs`` (or a fusion body among them) reduce at least 16
    elements into each output element? (XLA:GPU emits smaller ones elementally.)"""
    for i in instrs:
        body = i.fused_computation
        for r in (body if body is not None else (i,)):
            if r.opcode is HloOpcode.REDUCE and r.operands and r.operands[0].shape.is_array:
                out = r.shape if r.shape.is_array else r.shape.tuple_shapes[0]
                if out.is_array and r.operands[0].shape.num_elements >= 16 * max(out.num_elements, 1):
                    return True
    return False


def can_join(producer: Instruction, members: Sequence[Instruction], *,
             producer_region: Sequence[Instruction] = (), reuse: bool = True) -> Decision:
    """May ``producer`` join the would-be fusion ``members``: ``can_fuse`` into every
    member that reads it, and (``reuse``) no expensive producer recomputed per element
    the fusion reuses (through pass-through members too: ``broadcast(bitcast(rsqrt(x)))``);
    ``producer_region``: the producer's own grown cluster, any expensive member of
    which counts. The one question every producer-consumer fusion pass asks. A pass
    that prices recomputation (XLA:GPU's priority fusion: its cost model counts each
    element's reads) asks without ``reuse``, and then, as XLA:GPU's ``CanFuse``, never
    joins a region that reduces into another that reduces."""
    readers = [m for m in members if producer in m.operands]
    for m in readers:
        d = can_fuse(producer, m, check_cycle=False, reuse=reuse)
        if not d:
            return Decision(False, d.reason, consumer=m)
    if not reuse and _significant_reduce(producer_region or (producer,)) and _significant_reduce(members):
        # XLA:GPU's CanFuse: its cost model does not see a reduce recomputed inside another
        return Decision(False, "both the producer and the consumer contain a reduce",
                        consumer=readers[0] if readers else None)
    if reuse and any(is_expensive_producer(i) for i in (producer_region or (producer,))) and reused_within(producer, members):
        return Decision(False, "expensive producer would be recomputed per reused element",
                        consumer=readers[0] if readers else None)
    return ALLOW


def fusion_operands(a: Iterable[Instruction], b: Iterable[Instruction]) -> int:
    """How many distinct values the fusion of regions ``a`` and ``b`` reads from outside both."""
    union = [*a, *b]
    inside = {id(i) for i in union}
    return len({id(o) for m in union for o in m.operands if id(o) not in inside})


def fits_in_budget(a: Iterable[Instruction], b: Iterable[Instruction], max_operands: int) -> Decision:
    """The operand cap of the fusion of regions ``a`` and ``b`` (0: no cap): XLA's
    ``FusionFitsInBudget``, asked alike by every fusion pass, so ``max_operands`` (which
    ``hlo tune`` searches) means one thing everywhere."""
    if not max_operands:
        return ALLOW
    n = fusion_operands(a, b)
    return Decision.forbid(f"fusion would have {n} operands > {max_operands}") if n > max_operands else ALLOW


def _as_set(x: Instruction | Iterable[Instruction]) -> list[Instruction]:
    return [x] if isinstance(x, Instruction) else list(x)


def creates_cycle(a: Instruction | Iterable[Instruction], b: Instruction | Iterable[Instruction],
                  position: Mapping[int, int] | None = None) -> bool:
    """Would merging ``a`` and ``b`` into one fusion create a cycle?

    True when some instruction outside both groups is reachable from the merged
    group and reaches it again (the merged node would then be both before and
    after it). Direct edges between the groups are fine. ``position``: see
    ``path_around`` (many questions about one unchanged computation)."""
    return path_around(_as_set(a) + _as_set(b), position) is not None
