"""Which well-known LLM pattern an instruction belongs to, from the module's
structure alone (no instruction or op names: XLA renames, users name freely).

The rule for each pattern: docs/analysis.md#patterns-patterns
"""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable, Iterator

from hlo_tools.ir import Computation, Instruction, Module
from hlo_tools.opcode import HloOpcode

_H = HloOpcode

KV_CACHE, MOE, GQA, SOFTMAX = "KV-cache update", "MoE routing", "GQA attention", "softmax"
LAYERNORM, RMSNORM, GELU, SWIGLU, ROPE, OPTIMIZER = "LayerNorm", "RMSNorm", "GELU", "SwiGLU", "RoPE", "optimizer update"
#: Every label, most specific first: an instruction in two patterns takes the first.
LABELS = (KV_CACHE, MOE, GQA, SOFTMAX, LAYERNORM, RMSNORM, GELU, SWIGLU, ROPE, OPTIMIZER)

#: Ops that move or re-type data without computing: walks look through them.
_MOVE = frozenset({_H.BITCAST, _H.RESHAPE, _H.BROADCAST, _H.CONVERT, _H.COPY, _H.TRANSPOSE, _H.GET_TUPLE_ELEMENT})
_BUFFER = _MOVE | {_H.SLICE, _H.DYNAMIC_SLICE}
_DISPATCH = frozenset({_H.GATHER, _H.SCATTER, _H.DYNAMIC_SLICE, _H.DYNAMIC_UPDATE_SLICE})


class Flow:
    """Data flow of a module across fusion and ``call`` boundaries."""

    def __init__(self, module: Module):
        self.caller: dict[int, Instruction] = {}  # called computation -> its only fusion/call site
        self.sites: dict[int, list[Instruction]] = defaultdict(list)
        sites = self.sites
        for instr in module.instructions():
            if instr.opcode in (_H.FUSION, _H.CALL):
                for comp in instr.called_computations:
                    sites[id(comp)].append(instr)
        for key, callers in sites.items():
            if len(callers) == 1:
                self.caller[key] = callers[0]

    @staticmethod
    def _body(instr: Instruction) -> Computation | None:
        if instr.opcode in (_H.FUSION, _H.CALL) and instr.called_computations:
            return instr.called_computations[0]
        return None

    def value(self, instr: Instruction) -> Instruction:
        """The instruction that computes ``instr``'s value: a fused parameter
        becomes the fusion's operand, a fusion or call its root, a tuple
        projection the tuple's element."""
        for _ in range(64):
            if instr.opcode is _H.PARAMETER and instr.parent is not None:
                site = self.caller.get(id(instr.parent))
                if site is None or instr.parameter_number is None or instr.parameter_number >= len(site.operands):
                    return instr
                instr = site.operands[instr.parameter_number]
            elif (body := self._body(instr)) is not None and body.root is not None:
                instr = body.root
            elif instr.opcode is _H.GET_TUPLE_ELEMENT and instr.operands:
                src = self.value(instr.operands[0])
                if src.opcode is not _H.TUPLE or instr.tuple_index is None or instr.tuple_index >= len(src.operands):
                    return instr
                instr = src.operands[instr.tuple_index]
            else:
                return instr
        return instr

    def inputs(self, instr: Instruction) -> list[Instruction]:
        return [self.value(o) for o in instr.operands]

    def users(self, instr: Instruction) -> list[Instruction]:
        """Who reads ``instr``'s value, inside the fusions and calls it feeds and,
        for a fused root, after the fusion."""
        out: list[Instruction] = []
        stack: list[tuple[Instruction, Instruction | None]] = [(instr, None)]
        seen: set[tuple[int, int]] = set()
        while stack:
            node, site = stack.pop()
            if (id(node), id(site)) in seen:
                continue
            seen.add((id(node), id(site)))
            if node.is_root and node.parent is not None:  # a shared body: every call site reads it
                stack.extend((s, None) for s in ([site] if site is not None else self.sites.get(id(node.parent), ())))
            for u in node.users:
                body = self._body(u)
                if body is not None:
                    stack.extend((p, u) for p in body.parameters if p.parameter_number is not None
                                 and p.parameter_number < len(u.operands) and u.operands[p.parameter_number] is node)
                elif u.opcode is _H.TUPLE and u.is_root and u.parent is not None and \
                        (site is not None or self.sites.get(id(u.parent))):
                    stack.append((u, site))
                else:
                    out.append(u)
        return out

    def through(self, instr: Instruction, ops: frozenset[HloOpcode] = _MOVE) -> Instruction:
        """Back through data movement to what computed the value."""
        instr = self.value(instr)
        while instr.opcode in ops and instr.operands:
            instr = self.value(instr.operands[0])
        return instr

    def downstream(self, instr: Instruction, ops: frozenset[HloOpcode] = _MOVE, depth: int = 8) -> Iterator[Instruction]:
        """Readers of ``instr``'s value, looking forward through ``ops``."""
        frontier, seen = [instr], {id(instr)}
        for _ in range(depth):
            nxt = []
            for node in frontier:
                for u in self.users(node):
                    if id(u) in seen:
                        continue
                    seen.add(id(u))
                    if u.opcode in ops:
                        nxt.append(u)
                    else:
                        yield u
            frontier = nxt


def _reducer(instr: Instruction) -> HloOpcode | None:
    """``add`` or ``maximum`` for a single-output reduce (or reduce-window: XLA:CPU
    splits a long reduction into one) with that reducer."""
    if instr.opcode not in (_H.REDUCE, _H.REDUCE_WINDOW) or instr.shape.is_tuple:
        return None
    comp = instr.to_apply
    return comp.root.opcode if comp is not None and comp.root is not None else None


def _constant(flow: Flow, instr: Instruction) -> bool:
    v = flow.through(instr)
    return v.opcode in (_H.CONSTANT, _H.IOTA) or (v.opcode is _H.PARAMETER and v.shape.is_scalar)


class Patterns:
    """Every pattern instance in a module: ``labels(instr)`` for any instruction,
    a fusion or call counting the patterns inside it."""

    def __init__(self, module: Module):
        self.flow = Flow(module)
        self._members: dict[int, set[str]] = defaultdict(set)
        self._marked: set[int] = set()  # computations with a member, or calling one that has (ids)
        self._cache: dict[int, tuple[str, ...]] = {}
        self._softmax_max: set[int] = set()
        self._softmax_out: list[Instruction] = []
        by_op: dict[HloOpcode, list[Instruction]] = defaultdict(list)
        for instr in module.instructions():
            by_op[instr.opcode].append(instr)
        self._softmax(by_op[_H.REDUCE] + by_op[_H.REDUCE_WINDOW])
        norms = self._norms(by_op[_H.RSQRT] + by_op[_H.SQRT])
        self._optimizer([s for s in by_op[_H.SQRT] + by_op[_H.RSQRT] if id(s) not in norms])
        self._gelu(by_op[_H.TANH], by_op[_H.ERF])
        self._swiglu(by_op[_H.LOGISTIC] + by_op[_H.EXPONENTIAL])
        self._rope(by_op[_H.SINE] + by_op[_H.COSINE])
        self._attention(by_op[_H.DOT])
        self._moe(by_op[_H.TOP_K] + by_op[_H.SORT] + by_op[_H.REDUCE] + by_op[_H.CUSTOM_CALL])
        self._kv_cache(by_op[_H.DYNAMIC_UPDATE_SLICE])

    # -- membership -----------------------------------------------------------------
    def _mark(self, label: str, instrs: Iterable[Instruction]) -> None:
        for i in instrs:
            self._members[id(i)].add(label)
            self._mark_callers(i.parent)

    def _mark_callers(self, comp: Computation | None) -> None:
        """Notes that ``comp`` and every computation that fuses or calls it, up the
        call graph, hold a member: ``labels`` walks only those bodies."""
        stack = [comp]
        while stack:
            c = stack.pop()
            if c is None or id(c) in self._marked:
                continue
            self._marked.add(id(c))
            stack.extend(site.parent for site in self.flow.sites.get(id(c), ()))

    def labels(self, instr: Instruction) -> tuple[str, ...]:
        """The patterns ``instr`` (or anything fused or called inside it) belongs to, most specific first."""
        key = id(instr)
        if key not in self._cache:
            found = set(self._members.get(key, ()))
            for comp in instr.called_computations if instr.opcode in (_H.FUSION, _H.CALL) else ():
                if id(comp) not in self._marked:
                    continue  # nothing in it or below it belongs to a pattern
                for inner in comp:  # a plain member's labels are its own: no call, no cache entry
                    if inner.opcode is _H.FUSION or inner.opcode is _H.CALL:
                        found.update(self.labels(inner))
                    else:
                        found.update(self._members.get(id(inner), ()))
            self._cache[key] = tuple(lab for lab in LABELS if lab in found)
        return self._cache[key]

    def found(self) -> set[str]:
        """Every label with at least one instance in the module."""
        return set().union(*self._members.values()) if self._members else set()

    # -- detectors ------------------------------------------------------------------
    def _softmax(self, reduces: list[Instruction]) -> None:
        f = self.flow
        for rmax in reduces:
            if _reducer(rmax) is not _H.MAXIMUM:
                continue
            for sub in f.downstream(rmax, _MOVE | {_H.MAXIMUM, _H.REDUCE, _H.REDUCE_WINDOW}):
                if sub.opcode is not _H.SUBTRACT:
                    continue
                for exp in f.downstream(sub, _MOVE, 3):
                    if exp.opcode is not _H.EXPONENTIAL:
                        continue
                    sums = [r for r in f.downstream(exp, _MOVE | {_H.REDUCE_WINDOW}, 4) if _reducer(r) is _H.ADD]
                    if sums:
                        outs = [u for u in f.downstream(exp, _MOVE, 4) if u.opcode in (_H.DIVIDE, _H.MULTIPLY)]
                        self._mark(SOFTMAX, [rmax, sub, exp, *sums, *outs])
                        self._softmax_max.add(id(rmax))
                        self._softmax_out.extend(outs or sums)

    def _norm_inputs(self, root: Instruction) -> tuple[list[Instruction], list[Instruction], bool]:
        """Back from a (r)sqrt through constant arithmetic: the reductions under it,
        the nodes walked, and whether a variance ``E[x^2] - E[x]^2`` was seen."""
        f = self.flow
        reduces, walked, fast_var = [], [], False
        frontier = [f.value(root.operands[0])]
        for _ in range(10):
            nxt = []
            for node in frontier:
                walked.append(node)
                if _reducer(node) is _H.ADD:
                    reduces.append(node)
                elif node.opcode in _MOVE:
                    nxt.append(f.value(node.operands[0]))
                elif node.opcode in (_H.ADD, _H.MULTIPLY, _H.DIVIDE, _H.MAXIMUM):
                    live = [o for o in f.inputs(node) if not _constant(f, o)]
                    if len(live) == 1 or (node.opcode is _H.MULTIPLY and len({id(f.through(o)) for o in live}) == 1):
                        nxt.append(live[0])
                elif node.opcode is _H.SUBTRACT and not any(_constant(f, o) for o in node.operands):
                    fast_var = True
                    nxt.extend(f.inputs(node))
            frontier = nxt
        return reduces, walked, fast_var

    def _mean_subtracted(self, value: Instruction) -> Instruction | None:
        """The ``subtract`` if ``value`` is ``x - mean(x)``."""
        f = self.flow
        v = f.through(value, frozenset({_H.CONVERT, _H.BITCAST, _H.RESHAPE, _H.COPY}))
        if v.opcode is not _H.SUBTRACT:
            return None
        for o in v.operands:
            node = f.through(o)
            for _ in range(3):
                if _reducer(node) is _H.ADD:
                    return v
                live = [i for i in f.inputs(node) if not _constant(f, i)] if node.opcode in (_H.MULTIPLY, _H.DIVIDE) else []
                if len(live) != 1:
                    break
                node = f.through(live[0])
        return None

    def _norms(self, roots: list[Instruction]) -> set[int]:
        f = self.flow
        done = set()
        for r in roots:
            if not r.operands:
                continue
            outs = list(f.downstream(r, _MOVE, 4))
            if r.opcode is _H.SQRT and not any(u.opcode is _H.DIVIDE for u in outs):
                continue
            reduces, walked, fast_var = self._norm_inputs(r)
            if not reduces:
                continue
            squares, subtracts = [], []
            for red in reduces:
                x = f.through(red.operands[0], frozenset({_H.CONVERT, _H.BITCAST, _H.RESHAPE, _H.COPY}))
                while _reducer(x) is _H.ADD:  # a reduce of XLA:CPU's partial sums
                    x = f.through(x.operands[0], frozenset({_H.CONVERT, _H.BITCAST, _H.RESHAPE, _H.COPY}))
                ins = [f.through(o) for o in x.operands]
                if (x.opcode is _H.MULTIPLY and len(ins) == 2 and ins[0] is ins[1]) or \
                        (x.opcode is _H.POWER and _constant(f, x.operands[1])):
                    squares.append(x)
                    sub = self._mean_subtracted(x.operands[0])
                    if sub is not None:
                        subtracts.append(sub)
            if not squares:
                continue
            for u in outs:  # (x - mean) * rsqrt(var + eps)
                for o in u.operands:
                    sub = self._mean_subtracted(o) if u.opcode in (_H.MULTIPLY, _H.DIVIDE) else None
                    if sub is not None:
                        subtracts.append(sub)
            label = LAYERNORM if subtracts or fast_var else RMSNORM
            self._mark(label, [r, *walked, *squares, *subtracts,
                               *(u for u in outs if u.opcode in (_H.MULTIPLY, _H.DIVIDE))])
            done.add(id(r))
        return done

    def _optimizer(self, roots: list[Instruction]) -> None:
        f = self.flow
        for s in roots:
            divs = [u for u in f.downstream(s, _MOVE | {_H.ADD, _H.MULTIPLY}, 3) if u.opcode is _H.DIVIDE]
            if s.opcode is _H.SQRT and divs:
                after = [u for d in divs for u in f.downstream(d, _MOVE, 2) if u.opcode in (_H.MULTIPLY, _H.SUBTRACT)]
                self._mark(OPTIMIZER, [s, *divs, *after])

    def _cube_of(self, value: Instruction, x: Instruction) -> bool:
        f = self.flow
        v = f.through(value)
        for _ in range(3):  # c * x^3: look through the constant factor
            if v.opcode is _H.POWER and f.through(v.operands[0]) is x and _constant(f, v.operands[1]):
                return True
            if v.opcode is not _H.MULTIPLY:
                return False
            ins = [f.through(o) for o in v.operands]
            if x in ins:
                other = ins[1] if ins[0] is x else ins[0]
                if other.opcode is _H.MULTIPLY and [f.through(o) for o in other.operands] == [x, x]:
                    return True
            live = [i for i in ins if not _constant(f, i)]
            if len(live) != 1:
                return False
            v = live[0]
        return False

    def _unscaled(self, value: Instruction) -> Instruction:
        """``value`` without constant factors: ``x`` for ``0.5 * x``."""
        f = self.flow
        v = f.through(value)
        for _ in range(3):
            live = [o for o in v.operands if not _constant(f, o)] if v.opcode in (_H.MULTIPLY, _H.DIVIDE) else []
            if len(live) != 1:
                return v
            v = f.through(live[0])
        return v

    def _gelu(self, tanhs: list[Instruction], erfs: list[Instruction]) -> None:
        f = self.flow
        for t in tanhs:  # tanh(c * (x + c' * x^3))
            v = f.through(t.operands[0])
            while v.opcode is _H.MULTIPLY and len([o for o in v.operands if not _constant(f, o)]) == 1:
                v = f.through(next(o for o in v.operands if not _constant(f, o)))
            if v.opcode is not _H.ADD:
                continue
            a, b = (f.through(o) for o in v.operands)
            if self._cube_of(b, a) or self._cube_of(a, b):
                outs = [u for u in f.downstream(t, _MOVE | {_H.ADD}, 3) if u.opcode is _H.MULTIPLY]
                self._mark(GELU, [t, v, *outs])
        for e in erfs:  # x * (1 + erf(x * c)) * 0.5
            v = f.through(e.operands[0])
            if v.opcode not in (_H.MULTIPLY, _H.DIVIDE):
                continue
            live = [f.through(o) for o in v.operands if not _constant(f, o)]
            if len(live) != 1:
                continue
            x = live[0]
            outs = [u for u in f.downstream(e, _MOVE | {_H.ADD}, 3)
                    if u.opcode is _H.MULTIPLY and x in [self._unscaled(o) for o in u.operands]]
            if outs:
                self._mark(GELU, [e, v, *outs])

    def _sigmoid_input(self, instr: Instruction) -> tuple[Instruction, list[Instruction]] | None:
        """``(x, ops)`` if ``instr`` is ``logistic(x)`` or the exp of ``1/(1+exp(-x))``."""
        f = self.flow
        if instr.opcode is _H.LOGISTIC:
            return f.through(instr.operands[0]), [instr]
        neg = f.through(instr.operands[0])
        if neg.opcode is not _H.NEGATE:
            return None
        for add in f.downstream(instr, _MOVE, 2):
            if add.opcode is _H.ADD and any(_constant(f, o) for o in add.operands):
                for div in f.downstream(add, _MOVE, 2):
                    if div.opcode is _H.DIVIDE and _constant(f, div.operands[0]):
                        return f.through(neg.operands[0]), [instr, neg, add, div]
        return None

    def _swiglu(self, candidates: list[Instruction]) -> None:
        f = self.flow
        for s in candidates:
            found = self._sigmoid_input(s)
            if found is None:
                continue
            x, ops = found
            for silu in f.downstream(ops[-1], _MOVE, 3):
                if silu.opcode is not _H.MULTIPLY or x not in [f.through(o) for o in silu.operands]:
                    continue
                gates = [g for g in f.downstream(silu, _MOVE, 3) if g.opcode is _H.MULTIPLY
                         and all(f.through(o) not in (x, silu) for o in g.operands if f.through(o) is not silu)
                         and not any(_constant(f, o) for o in g.operands)]
                if gates:
                    self._mark(SWIGLU, [*ops, silu, *gates])

    def _rope(self, trig: list[Instruction]) -> None:
        f = self.flow
        by_kind: dict[int, set[HloOpcode]] = defaultdict(set)  # combining add/subtract -> trig ops under it
        members: dict[int, list[Instruction]] = defaultdict(list)
        combines: dict[int, Instruction] = {}
        for t in trig:
            for m in f.downstream(t, _MOVE | {_H.SLICE, _H.CONCATENATE, _H.NEGATE}, 5):
                if m.opcode is not _H.MULTIPLY:
                    continue
                for c in f.downstream(m, _MOVE, 2):
                    if c.opcode in (_H.ADD, _H.SUBTRACT):
                        by_kind[id(c)].add(t.opcode)
                        members[id(c)] += [t, m]
                        combines[id(c)] = c
        for key, kinds in by_kind.items():
            if kinds == {_H.SINE, _H.COSINE}:
                self._mark(ROPE, [combines[key], *members[key]])

    def _repeated(self, operand: Instruction) -> list[Instruction]:
        """The chain from a dot operand back to a broadcast that adds a dimension
        to a non-scalar (K/V heads repeated for grouped-query attention)."""
        f = self.flow
        chain, node = [], f.value(operand)
        for _ in range(8):
            chain.append(node)
            if node.opcode is _H.BROADCAST and node.operands:
                src = f.value(node.operands[0])
                if not src.shape.is_scalar and src.shape.rank < node.shape.rank and \
                        src.shape.num_elements < node.shape.num_elements:
                    return chain
            if node.opcode not in _MOVE or not node.operands:
                return []
            node = f.value(node.operands[0])
        return []

    def _attention(self, dots: list[Instruction]) -> None:
        f = self.flow
        if not self._softmax_max:
            return
        pv_dots = {id(d): d for s in self._softmax_out
                   for d in f.downstream(s, _MOVE, 4) if d.opcode is _H.DOT}
        any_elementwise = frozenset(_MOVE | {_H.MULTIPLY, _H.ADD, _H.SELECT, _H.TANH, _H.DIVIDE, _H.CALL, _H.MAXIMUM})
        for d in dots:
            dn = d.dot_dimension_numbers
            if dn is None or not dn.lhs_batch_dims:
                continue
            qk = any(id(r) in self._softmax_max for r in f.downstream(d, any_elementwise, 8))
            if not (qk or id(d) in pv_dots):
                continue
            chains = [c for o in d.operands for c in [self._repeated(o)] if c]
            if chains:
                self._mark(GQA, [d, *(i for c in chains for i in c)])

    def _indices_dispatch(self, indices: Instruction) -> list[Instruction]:
        """What selects experts with ``indices``: a gather, scatter, dynamic slice or a one-hot."""
        f = self.flow
        picks = []
        for u in f.downstream(indices, _MOVE | {_H.ADD, _H.MULTIPLY, _H.SELECT, _H.CONCATENATE}, 6):
            if u.opcode in _DISPATCH:
                picks.append(u)
            elif u.opcode is _H.COMPARE and any(f.through(o).opcode is _H.IOTA for o in u.operands):
                picks.append(u)
        return picks

    def _moe(self, candidates: list[Instruction]) -> None:
        f = self.flow
        for c in candidates:
            if c.opcode is _H.CUSTOM_CALL and (c.custom_call_target or "").lower() != "topk":
                continue
            if c.opcode is _H.REDUCE and not (c.shape.is_tuple and len(c.operands) == 4):
                continue  # argmax: a variadic reduce of (values, iota)
            if not c.shape.is_tuple or len(c.shape.tuple_shapes) < 2:
                continue
            outputs = [u for u in f.users(c) if u.opcode is _H.GET_TUPLE_ELEMENT]
            index_outputs = [g for g in outputs if g.tuple_index == 1]
            picks = [p for g in index_outputs for p in self._indices_dispatch(g)]
            if picks:
                self._mark(MOE, [c, *outputs, *picks])

    def _kv_cache(self, updates: list[Instruction]) -> None:
        f = self.flow
        for u in updates:
            buffer = f.through(u.operands[0], _BUFFER)
            if buffer.opcode is not _H.PARAMETER or buffer.parent is None or not buffer.parent.is_entry \
                    or _constant(f, u.operands[1]):
                continue
            readers = list(f.downstream(u, _MOVE | {_H.CONCATENATE, _H.TUPLE}, 6))
            returned = any(r.is_root and r.parent is not None and r.parent.is_entry for r in [u, *readers]) or \
                any(r.opcode is _H.TUPLE and r.is_root for r in f.downstream(u, _MOVE | {_H.CONCATENATE}, 6))
            if returned or any(r.opcode is _H.DOT for r in readers):
                chain, node = [], f.value(u.operands[0])
                while node is not buffer and node.opcode in _BUFFER and node.operands:
                    chain.append(node)
                    node = f.value(node.operands[0])
                self._mark(KV_CACHE, [u, *chain])


def edge_label(patterns: Patterns, producer: Instruction, consumer: Instruction) -> str | None:
    """An edge's pattern: the one data flows into (the consumer's), else the one it
    comes out of (the producer's)."""
    for end in (consumer, producer):
        labels = patterns.labels(end)
        if labels:
            return labels[0]
    return None
