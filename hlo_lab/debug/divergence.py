"""``hlo divergence A B``: the first instruction whose value differs between two
modules run on the same inputs.

Both modules' entry ``call``s are inlined (the call's value keeps the call's
name), their entry instructions are matched (``match``), and the matched values
are read by making them outputs (``hlo_tools.expose``), in batches in A's post
order, compiled and run in the XLA worker.  The first matched instruction whose
value differs beyond tolerance (``runner.diff_output``) is the divergence: every
value it depends on comes earlier in post order, so its read operands agree.

    d = first_divergence(a, b, pipeline_b="as-written")
    d.name, d.stats.max_abs, [s.name for s in d.path]
"""

from __future__ import annotations

import time
from collections import defaultdict, deque
from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np

from hlo_tools.errors import HloError
from hlo_tools.expose import expose, readable
from hlo_tools.ir import Computation, Instruction, Module
from hlo_tools.opcode import HloOpcode
from hlo_tools.rewriter import Rewriter
from xla_bridge import make_inputs
from xla_bridge.compiler import compile
from xla_bridge.runner import Comparison, OutputDiff, compare_outputs, entry_parameter_shapes, labels, run
from xla_bridge.worker import contained

#: Attributes that do not say what an instruction computes: ignored when
#: instructions are matched by structure (a renamed module's callees have other names).
_NOT_SEMANTIC = frozenset({"metadata", "to_apply", "calls", "condition", "body", "branch_computations",
                           "true_computation", "false_computation", "control-predecessors", "frontend_attributes",
                           "statistics_viz", "origin"})

#: Values read per compiled pair of modules, at most (``--batch``), and their bytes.
DEFAULT_BATCH = 500
_BATCH_BYTES = 1 << 30

#: Outputs listed in the report; beyond that only differing ones, this many.
_OUTPUT_LINES = 8

#: Instructions whose called computations run inside them: their values are read
#: whole (a fusion, a loop), never the values inside.
_UNITS = frozenset({HloOpcode.FUSION, HloOpcode.WHILE, HloOpcode.CONDITIONAL, HloOpcode.CUSTOM_CALL,
                    HloOpcode.CALL})


class DivergenceError(HloError):
    """A and B cannot be run on the same inputs (their parameters differ)."""


# -- preparing: inline the entry's calls -----------------------------------------------------


@dataclass
class Prepared:
    """A module with its entry's calls inlined; ``origin`` maps an inlined
    instruction's name to where the user's file has it: (the entry's call it
    came from, its name in the callee, the callee)."""

    module: Module
    calls_inlined: int
    origin: dict[str, tuple[str, str, str]]


def prepare(module: Module) -> Prepared:
    """A copy of ``module`` whose entry has no ``call``s (nested ones too), so that
    values computed inside them can be read.  The inlined root takes the call's
    name, so the call's value keeps the name it has in the file; the other
    inlined instructions keep their callee names (``.N`` added where taken),
    deterministically, so A and a rewrite of A get the same names."""
    from passes.dce import remove_unreachable_computations  # lazy: the passes layer, ~80 ms on each hlo start (measured)
    from passes.fusion.call_inliner import inlinable_calls, inline_call  # lazy: as above

    copy = module.clone()
    rw = Rewriter()
    origin: dict[str, tuple[str, str, str]] = {}
    count = 0
    while True:
        calls = inlinable_calls(copy.entry)
        if not calls:
            break
        for call in calls:
            callee, name = call.to_apply, call.name
            members = [i for i in callee.post_order() if i.opcode is not HloOpcode.PARAMETER]
            root = next((n for n, i in enumerate(members) if i is callee.root), None)  # None: it returns a parameter
            outer = origin.pop(name, None)  # the call was itself inlined from an outer one
            clones = inline_call(call, rw)
            for clone, member in zip(clones, members):
                origin[clone.name] = (outer[0] if outer else name, member.name, callee.name)
            if root is not None:
                del origin[clones[root].name]
                rw.rename(clones[root], name)
                if outer:
                    origin[name] = outer
            count += 1
    if count:
        remove_unreachable_computations(copy, rw)
    return Prepared(copy, count, origin)


# -- matching ------------------------------------------------------------------------------


def _meta_key(instr: Instruction) -> tuple | None:
    raw = instr.attribute("metadata")
    if not raw:
        return None
    meta = instr.metadata or {}
    key = (meta.get("op_name"), meta.get("source_file"), meta.get("source_line"))
    return key if any(k is not None for k in key) else None


def _signature(instr: Instruction) -> tuple:
    """What an instruction computes given its operands: opcode, shape, literal and
    the attributes that matter (not names of called computations, not metadata)."""
    attrs = tuple(sorted((k, v) for k, v in instr.attributes.items() if k not in _NOT_SEMANTIC))
    return instr.opcode, instr.shape.without_layout(), instr.literal, instr.parameter_number, attrs


@dataclass(frozen=True)
class Matching:
    """Entry instructions of A paired with B's: ``pairs`` A name -> (B name, how:
    "parameter", "name", "metadata", "structure" or "name, opcode differs")."""

    pairs: dict[str, tuple[str, str]]
    unmatched_a: tuple[str, ...]
    unmatched_b: tuple[str, ...]


def match(a: Computation, b: Computation) -> Matching:
    """Pairs A's instructions (in post order) with B's: parameters by number, then
    the first unpaired B instruction with the same opcode and shape (layout aside)
    found by name, then by metadata (op_name, source file and line), then by
    structure (same signature, paired operands in place, else in any order).
    A name or metadata candidate must be consistent: the B images of A's paired
    operands are B's operands (in any order: a rewrite may swap them).  Last resort: same name and shape whatever
    the opcode or operands (a rewrite that replaced the instruction)."""
    b_by_name = {i.name: i for i in b}
    b_by_meta: dict[tuple, list[Instruction]] = defaultdict(list)
    b_leaves: dict[tuple, list[Instruction]] = defaultdict(list)
    for i in b.post_order():
        key = _meta_key(i)
        if key is not None:
            b_by_meta[key].append(i)
        if not i.operands:
            b_leaves[_signature(i)].append(i)
    b_params = {p.parameter_number: p for p in b.parameters}
    image: dict[int, Instruction] = {}
    taken: set[int] = set()
    pairs: dict[str, tuple[str, str]] = {}

    def same_kind(x: Instruction, y: Instruction) -> bool:
        return (id(y) not in taken and x.opcode is y.opcode
                and x.shape.without_layout() == y.shape.without_layout())

    def consistent(x: Instruction, y: Instruction) -> bool:
        if x.operand_count != y.operand_count:
            return False
        pool = [id(o) for o in y.operands]
        for o in x.operands:
            img = image.get(id(o))
            if img is None:
                continue
            if id(img) not in pool:
                return False
            pool.remove(id(img))
        return True

    def in_place(x: Instruction, y: Instruction) -> bool:
        """B's operands are the images of A's, position by position (A's
        unpaired operands aside; at least one paired)."""
        if x.operand_count != y.operand_count:
            return False
        imgs = [image.get(id(o)) for o in x.operands]
        return any(i is not None for i in imgs) and all(i is None or i is p for i, p in zip(imgs, y.operands))

    for x in a.post_order():
        found: tuple[Instruction, str] | None = None
        if x.opcode is HloOpcode.PARAMETER:
            y = b_params.get(x.parameter_number)
            if y is not None and same_kind(x, y):
                found = (y, "parameter")
        else:
            cands: list[tuple[Instruction, str]] = []
            if x.name in b_by_name:
                cands.append((b_by_name[x.name], "name"))
            key = _meta_key(x)
            if key is not None:
                cands += [(y, "metadata") for y in b_by_meta.get(key, ())]
            for y, how in cands:
                if same_kind(x, y) and consistent(x, y):
                    found = (y, how)
                    break
            if found is None:
                sig = _signature(x)
                if not x.operands:
                    structural = b_leaves.get(sig, [])
                else:
                    users = {id(u): u for o in x.operands if id(o) in image for u in image[id(o)].users}
                    structural = list(users.values())
                for test in (in_place, consistent):  # operands in place first, then in any order
                    for y in structural:
                        if same_kind(x, y) and _signature(y) == sig and (not x.operands or test(x, y)):
                            found = (y, "structure")
                            break
                    if found is not None:
                        break
            if found is None:
                y = b_by_name.get(x.name)
                if (y is not None and id(y) not in taken
                        and x.shape.without_layout() == y.shape.without_layout()):
                    found = (y, "name" if x.opcode is y.opcode else "name, opcode differs")
        if found is not None:
            y, how = found
            image[id(x)] = y
            taken.add(id(y))
            pairs[x.name] = (y.name, how)
    unmatched_a = tuple(i.name for i in a.post_order() if i.name not in pairs)
    unmatched_b = tuple(i.name for i in b.post_order() if id(i) not in taken)
    return Matching(pairs, unmatched_a, unmatched_b)


# -- reading values --------------------------------------------------------------------------


def _read_batch(a: Module, b: Module, inputs: list[np.ndarray], pipeline_a: str, pipeline_b: str,
                rtol: float | None, atol: float | None, originals: tuple[int, int]) -> tuple[Comparison, Comparison]:
    """Runs in the XLA worker: compiles and runs the two exposed modules on
    ``inputs``; returns (the original outputs' Comparison, the probes' Comparison)."""
    names = labels(a.name, b.name, pipeline_a, pipeline_b)
    with np.errstate(all="ignore"):  # inf - inf in the error arrays: diff_output handles it
        out_a = run(compile(a, "cpu", pipeline_a), inputs)
        out_b = run(compile(b, "cpu", pipeline_b), inputs)
        na, nb = originals
        outputs = compare_outputs(out_a[:na], out_b[:nb], rtol=rtol, atol=atol, names=names)
        probes = compare_outputs(out_a[na:], out_b[nb:], rtol=rtol, atol=atol, names=names)
    return outputs, probes


def _batches(values: list[Instruction], size: int) -> list[list[Instruction]]:
    out: list[list[Instruction]] = [[]]
    nbytes = 0
    for v in values:
        b = v.shape.byte_size
        if out[-1] and (len(out[-1]) >= size or nbytes + b > _BATCH_BYTES):
            out.append([])
            nbytes = 0
        out[-1].append(v)
        nbytes += b
    return [b for b in out if b]


# -- the result ------------------------------------------------------------------------------


@dataclass(frozen=True)
class DivergenceStep:
    """One instruction on the path from the inputs, or one operand of the
    divergence, and what is known of its value (``status``: an input, agrees,
    differs, not read, unmatched)."""

    name: str
    opcode: str
    shape: str
    status: str
    stats: OutputDiff | None = None  # when read
    inlined_from: tuple[str, str, str] | None = None  # (the call in A, the name in its callee, the callee)

    def line(self) -> str:
        detail = _stats_text(self.stats) if self.stats is not None else self.status
        return f"%{_written(self.name, self.inlined_from)} = {self.shape} {self.opcode}{_where(self.inlined_from)}: {detail}"

    def as_dict(self) -> dict:
        d = dict(name=_written(self.name, self.inlined_from), computation=_computation(self.inlined_from),
                 opcode=self.opcode, shape=self.shape, status=self.status,
                 inlined_as=self.name if self.inlined_from else None, inlined_from=_origin_dict(self.inlined_from))
        d["stats"] = _stats_dict(self.stats) if self.stats is not None else None
        return d


def _written(name: str, origin: tuple[str, str, str] | None) -> str:
    """The instruction's name as the user's file has it (not its inlined clone's)."""
    return origin[1] if origin else name


def _computation(origin: tuple[str, str, str] | None) -> str | None:
    """The computation the user's file has it in (None: the entry)."""
    return origin[2] if origin else None


def _where(origin: tuple[str, str, str] | None) -> str:
    return f" in computation %{origin[2]} (called by %{origin[0]}; inlined to read it)" if origin else ""


def _origin_dict(origin: tuple[str, str, str] | None) -> dict | None:
    return {"call": origin[0], "name_in_callee": origin[1], "computation": origin[2]} if origin else None


def _stats_text(diff: OutputDiff) -> str:
    return str(diff).split(": ", 1)[1]


def _stats_dict(diff: OutputDiff) -> dict:
    d = asdict(diff)
    d.pop("index")
    d["shape"], d["worst"] = list(d["shape"]), list(d["worst"])
    return d


@dataclass
class Divergence:
    """What ``first_divergence`` found.  ``name`` is None when no matched value
    differs (then ``outputs.ok`` says whether the outputs agree)."""

    a_name: str
    b_name: str
    pipelines: tuple[str, str]
    seed: int
    name: str | None
    name_b: str | None
    opcode: str | None
    shape: str | None
    matched_by: str | None
    stats: OutputDiff | None  # the divergence's
    operands: list[DivergenceStep]
    path: list[DivergenceStep]
    position: int | None      # 1-based, among the values read in A's post order
    compared: int
    readable: int
    batches: int
    matching: Matching
    calls_inlined: tuple[int, int]
    outputs: Comparison  # the original outputs
    seconds: float
    inlined_from: tuple[str, str, str] | None = None
    entry: str = ""  # A's entry computation
    note: str = ""

    @property
    def found(self) -> bool:
        return self.name is not None

    @property
    def outputs_differ(self) -> bool:
        return not self.outputs.ok

    @property
    def exit_code(self) -> int:
        return 1 if self.found or self.outputs_differ else 0

    def as_dict(self) -> dict:
        m = self.matching
        return {
            "a": self.a_name, "b": self.b_name, "pipeline_a": self.pipelines[0], "pipeline_b": self.pipelines[1],
            "seed": self.seed,
            "first_divergence": _written(self.name, self.inlined_from) if self.name else None,
            "computation": (_computation(self.inlined_from) or self.entry) if self.name else None,
            "inlined_as": self.name if self.inlined_from else None,
            "first_divergence_b": self.name_b, "opcode": self.opcode,
            "shape": self.shape, "matched_by": self.matched_by, "inlined_from": _origin_dict(self.inlined_from),
            "stats": _stats_dict(self.stats) if self.stats is not None else None,
            "position": self.position,
            "operands": [s.as_dict() for s in self.operands],
            "path": [s.as_dict() for s in self.path],
            "compared": self.compared, "readable": self.readable, "batches": self.batches,
            "matched": len(m.pairs), "matched_by_kind": _count_by(m),
            "unmatched_a": list(m.unmatched_a), "unmatched_b": list(m.unmatched_b),
            "calls_inlined": {"a": self.calls_inlined[0], "b": self.calls_inlined[1]},
            "outputs": {"verdict": self.outputs.verdict, "message": self.outputs.message or None,
                        "diffs": [dict(_stats_dict(o), index=o.index) for o in self.outputs.outputs]},
            "note": self.note or None,
            "seconds": round(self.seconds, 3),
        }

    def summary_line(self) -> str:
        """The last line: the name as the user's file has it, and where."""
        comp = _computation(self.inlined_from) or self.entry
        return f"first_divergence=%{_written(self.name or '', self.inlined_from)} computation=%{comp}"

    def report(self) -> str:
        m = self.matching
        kinds = ", ".join(f"{n} by {k}" for k, n in _count_by(m).items())
        lines = [f"A: {self.a_name} ({self.pipelines[0]})   B: {self.b_name} ({self.pipelines[1]})   seed {self.seed}",
                 f"matched {len(m.pairs)} entry instructions ({kinds}); unmatched: {len(m.unmatched_a)} in A"
                 + _some(m.unmatched_a) + f", {len(m.unmatched_b)} in B" + _some(m.unmatched_b)
                 + f"; calls inlined: {self.calls_inlined[0]} in A, {self.calls_inlined[1]} in B",
                 f"compared {self.compared} of {self.readable} matched values in {self.batches} "
                 f"batch{'es' if self.batches != 1 else ''} (A's post order){' in ' + format(self.seconds, '.1f') + ' s'}"]
        if self.found:
            where = _where(self.inlined_from)
            twin = f"%{self.name_b} in B" if self.name_b != self.name else "same name in B"
            if self.inlined_from:
                twin += f", %{self.name} once inlined"
            lines += [f"first divergence: %{_written(self.name, self.inlined_from)} = {self.shape} {self.opcode}{where} "
                      f"(value #{self.position} in post order; matched by {self.matched_by}, {twin})",
                      f"  {_stats_text(self.stats)}"]
            if self.note:
                lines.append(f"  note: {self.note}")
            if self.operands:
                lines.append("its operands:")
                lines += ["  " + s.line() for s in self.operands]
            if self.path:
                lines.append(f"path from the inputs ({len(self.path)} instructions, the shortest chain of "
                             f"operands from an entry parameter):")
                lines += ["  " + line for line in _elide(self.path)]
            else:
                lines.append("path from the inputs: none (it depends on no entry parameter)")
        elif self.outputs_differ:
            lines.append(f"the outputs differ, with no intermediate divergence among the {self.compared} "
                         f"matched values compared")
        else:
            lines.append(f"no divergence: the outputs and all {self.compared} matched values agree")
        lines.append("outputs: " + self.outputs.verdict + (f" ({self.outputs.message})" if self.outputs.message else ""))
        outs = list(self.outputs.outputs)
        shown = outs if len(outs) <= _OUTPUT_LINES else [o for o in outs if not o.ok][:_OUTPUT_LINES]
        lines += ["  " + str(o) for o in shown]
        if not shown:
            lines.append(f"  all {len(outs)} outputs agree (--json has each)")
        elif len(shown) < len(outs):
            bad = sum(not o.ok for o in outs)
            lines.append(f"  ({len(outs) - len(shown)} more outputs not shown; {bad} of {len(outs)} differ: --json has all)")
        if self.found:
            lines.append(self.summary_line())
        return "\n".join(lines)


def _count_by(m: Matching) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for _, how in m.pairs.values():
        counts[how] += 1
    return dict(counts)


def _some(names: tuple[str, ...], n: int = 4) -> str:
    if not names:
        return ""
    shown = ", ".join("%" + x for x in names[:n])
    return f" ({shown}{', ...' if len(names) > n else ''})"


def _elide(path: list[DivergenceStep], keep: int = 6) -> list[str]:
    """The path's lines, its middle elided when long."""
    lines = [s.line() for s in path]
    if len(lines) <= 2 * keep + 1:
        return lines
    return lines[:keep] + [f"... {len(lines) - 2 * keep} more ..."] + lines[-keep:]


# -- the search ------------------------------------------------------------------------------


def first_divergence(a: Module, b: Module, *, pipeline_a: str = "stock", pipeline_b: str = "stock", seed: int = 0,
                     rtol: float | None = None, atol: float | None = None, batch: int = DEFAULT_BATCH,
                     progress: Callable[[int, int], None] | None = None) -> Divergence:
    """Runs A and B (compiled under ``pipeline_a``/``pipeline_b`` in the XLA
    worker) on ``make_inputs(A, seed)`` and finds the first instruction, in A's
    post order, whose value differs beyond tolerance (``rtol``/``atol``, default
    ``runner.tolerance`` of the dtype) from its match in B.  Values are read
    ``batch`` at a time; the search stops after the first batch that holds a
    divergence.  ``progress(done, total)`` after each batch.  Raises
    ``DivergenceError`` when the parameters differ, ``XlaCompileError`` (or
    ``XlaAbortError``) when XLA refuses or aborts on either."""
    t0 = time.perf_counter()
    sa, sb = entry_parameter_shapes(a), entry_parameter_shapes(b)
    if sa != sb:
        raise DivergenceError(f"A and B take different parameters, so they cannot run on the same inputs: "
                              f"({', '.join(sa)}) vs ({', '.join(sb)})")
    inputs = make_inputs(a, seed=seed)[0]
    pa, pb = prepare(a), prepare(b)
    ea, eb = pa.module.entry, pb.module.entry
    matching = match(ea, eb)
    values = [x for x in ea.post_order()
              if x.name in matching.pairs and x.opcode is not HloOpcode.PARAMETER and readable(x)]
    batches = _batches(values, max(1, batch))
    diffs: dict[str, OutputDiff] = {}
    outputs: Comparison | None = None
    found: Instruction | None = None
    compared = 0
    done = 0
    for chunk in batches or [[]]:
        xa = expose(pa.module, [x.name for x in chunk])
        xb = expose(pb.module, [matching.pairs[x.name][0] for x in chunk])
        out, probes = contained(_read_batch, (xa.module, xb.module, inputs, pipeline_a, pipeline_b, rtol, atol,
                                              (xa.original_outputs, xb.original_outputs)),
                                phase="compiling", module=a.name)
        outputs = outputs or out
        for x, d in zip(chunk, probes.outputs):
            diffs[x.name] = d
            if found is None and not d.ok:
                found = x
        compared += len(chunk)
        done += 1
        if progress is not None:
            progress(done, len(batches))
        if found is not None:
            break
    common = dict(a_name=a.name, b_name=b.name, pipelines=(pipeline_a, pipeline_b), seed=seed, compared=compared,
                  readable=len(values), batches=done, matching=matching,
                  calls_inlined=(pa.calls_inlined, pb.calls_inlined), outputs=outputs, entry=a.entry.name)
    if found is None:
        return Divergence(**common, name=None, name_b=None, opcode=None, shape=None, matched_by=None, stats=None,
                          operands=[], path=[], position=None, seconds=time.perf_counter() - t0)
    step = _stepper(matching, diffs, pa)
    name_b, how = matching.pairs[found.name]
    return Divergence(**common, name=found.name, name_b=name_b, opcode=found.opcode_text,
                      shape=found.shape.to_text(print_layout=False), matched_by=how, stats=diffs[found.name],
                      operands=[step(o) for o in found.operands], path=[step(x) for x in path_from_inputs(found)],
                      position=values.index(found) + 1, seconds=time.perf_counter() - t0,
                      inlined_from=pa.origin.get(found.name), note=_unit_note(found))


def _unit_note(x: Instruction) -> str:
    """What to say when the divergence is a value computed inside a fusion, loop
    or other called computation, which is read only as a whole."""
    unit = x.operand(0) if x.opcode is HloOpcode.GET_TUPLE_ELEMENT and x.operand_count else x
    if unit.opcode not in _UNITS or not unit.called_computations:
        return ""
    comps = ", ".join("%" + c.name for c in unit.called_computations)
    return (f"%{unit.name} ({unit.opcode_text}) is read as a unit: the difference arises inside {comps}, "
            f"whose values are not read one by one")


def _stepper(matching: Matching, diffs: dict[str, OutputDiff], prepared: Prepared) -> Callable[[Instruction], DivergenceStep]:
    def step(x: Instruction) -> DivergenceStep:
        d = diffs.get(x.name)
        if x.opcode is HloOpcode.PARAMETER:
            status = "input (the same in A and B)"
        elif x.name not in matching.pairs:
            status = "unmatched (not compared)"
        elif d is not None:
            status = "agrees" if d.ok else "differs"
        elif not readable(x):
            status = "not read (a tuple: read through its elements)"
        else:
            status = "not read"
        return DivergenceStep(x.name, x.opcode_text, x.shape.to_text(print_layout=False), status, d,
                    prepared.origin.get(x.name))

    return step


def path_from_inputs(target: Instruction) -> list[Instruction]:
    """The shortest chain of operands from an entry parameter to ``target``
    (parameter first, ``target`` last); empty when it depends on no parameter."""
    parent: dict[int, Instruction | None] = {id(target): None}
    queue = deque([target])
    while queue:
        x = queue.popleft()
        if x.opcode is HloOpcode.PARAMETER:
            chain = [x]
            while parent[id(chain[-1])] is not None:
                chain.append(parent[id(chain[-1])])
            return chain
        for o in x.operands:
            if id(o) not in parent:
                parent[id(o)] = x
                queue.append(o)
    return []
