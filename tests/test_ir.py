"""The mutation API keeps use-def consistent (and refuses what would break it)."""

from __future__ import annotations

import pytest

import hlo_tools
from hlo_tools import HloOpcode, Instruction, IrError, parse_shape, verify
from tests.conftest import corpus_stage_texts

TEXT = """HloModule m

ENTRY main {
  p0 = f32[4]{0} parameter(0)
  p1 = f32[4]{0} parameter(1)
  a = f32[4]{0} add(p0, p1)
  m = f32[4]{0} multiply(a, a)
  ROOT t = (f32[4]{0}, f32[4]{0}) tuple(m, a)
}
"""


@pytest.fixture
def module():
    return hlo_tools.parse(TEXT)


def names(instrs):
    return [i.name for i in instrs]


def test_users_and_operands_agree(module):
    c = module.entry
    a, m, t = (c.get_instruction(n) for n in ("a", "m", "t"))
    assert names(a.users) == ["m", "t"]
    assert m.operands == (a, a)
    assert a.uses() == [(m, 0), (m, 1), (t, 1)]
    assert t.is_root and c.root is t


def test_operands_are_read_only(module):
    a = module.entry.get_instruction("a")
    with pytest.raises(AttributeError, match="replace_operand"):
        a.operands = ()


def test_replace_operand_moves_one_use(module):
    c = module.entry
    p0, p1, m = (c.get_instruction(n) for n in ("p0", "p1", "m"))
    a = c.get_instruction("a")
    m.replace_operand(0, p0)
    assert m.operands == (p0, a)
    assert m in p0.users and m in a.users  # a is still used once by m
    m.replace_operand(1, p1)
    assert m not in a.users and names(a.users) == ["t"]
    verify(module)


def test_replace_operand_checks_shapes(module):
    c = module.entry
    m = c.get_instruction("m")
    s = c.add_instruction(Instruction.create("constant", "f32[]", name="s"))
    s.literal = "1"
    with pytest.raises(IrError, match="incompatible shape"):
        m.replace_operand(0, s)


def test_replace_all_uses_with_updates_users_and_root(module):
    c = module.entry
    a, p0, t = (c.get_instruction(n) for n in ("a", "p0", "t"))
    a.replace_all_uses_with(p0)
    assert a.users == ()
    assert t.operands[1] is p0
    c.remove_instruction(a)
    assert c.get_instruction("a") is None
    verify(module)
    new_root = c.add_instruction(Instruction.create("negate", "f32[4]{0}", [p0], name="n"))
    t.replace_all_uses_with(new_root, allow_different_shape=True)
    assert c.root is new_root


def test_replace_all_uses_with_refuses_other_shapes(module):
    c = module.entry
    with pytest.raises(IrError, match="allow_different_shape"):
        c.get_instruction("a").replace_all_uses_with(c.get_instruction("t"))


def test_remove_instruction_refuses_while_used(module):
    c = module.entry
    with pytest.raises(IrError, match="still has users"):
        c.remove_instruction(c.get_instruction("a"))
    with pytest.raises(IrError, match="root"):
        c.remove_instruction(c.root)


def test_add_instruction_positions_and_unique_names(module):
    c = module.entry
    a, m = c.get_instruction("a"), c.get_instruction("m")
    neg = Instruction.create("negate", "f32[4]{0}", [a], name="a")
    c.add_instruction(neg, after=a)
    assert neg.name == "a.1"  # uniquified
    assert names(c.instructions)[:4] == ["p0", "p1", "a", "a.1"]
    assert neg in a.users
    first = c.add_instruction(Instruction.create("negate", "f32[4]{0}", [m.operands[0]], name="early"), before=m)
    assert names(c.instructions).index("early") == names(c.instructions).index("m") - 1
    with pytest.raises(IrError, match="already belongs"):
        c.add_instruction(first)
    verify(module)
    assert hlo_tools.parse(module.to_text()).instruction_count == 7


def test_add_instruction_refuses_foreign_operands(module):
    other = hlo_tools.parse(TEXT)
    with pytest.raises(IrError, match="not in computation"):
        module.entry.add_instruction(Instruction.create("negate", "f32[4]{0}", [other.entry.get_instruction("a")]))


def test_mutation_while_iterating_is_safe(module):
    c = module.entry
    for instr in c:  # iteration over a snapshot-safe linked list
        if instr.opcode is HloOpcode.MULTIPLY:
            b = c.add_instruction(Instruction.create("add", instr.shape, instr.operands, name="b"), before=instr)
            instr.replace_all_uses_with(b)
            c.remove_instruction(instr)
    assert "m" not in names(c.instructions) and "b" in names(c.instructions)
    verify(module)


def test_clone_and_post_order(module):
    c = module.entry
    a = c.get_instruction("a")
    copy = a.clone()
    assert copy.name == "a.clone" and copy.parent is None and copy.operands == a.operands
    assert copy in a.operands[0].users  # a clone is a user of its operands
    c.add_instruction(copy, before=c.get_instruction("m"))
    # XLA's order: depth-first from the instructions nothing uses, in list order
    assert names(c.post_order()) == ["p0", "p1", "a.clone", "a", "m", "t"]
    twin = module.clone()
    assert twin.to_text() == module.to_text() and twin.entry is not c


def test_control_dependencies(module):
    c = module.entry
    a, m = c.get_instruction("a"), c.get_instruction("m")
    p1 = c.get_instruction("p1")
    m.add_control_predecessor(p1)
    assert m.control_predecessors == (p1,) and p1.control_successors == (m,)
    assert "control-predecessors={%p1}" in module.to_text()
    b = c.add_instruction(Instruction.create("negate", "f32[4]{0}", [a], name="b"))
    b.add_control_predecessor(m)
    c.root.replace_all_uses_with(c.root)  # no-op
    # removing m hands its predecessor to its successor
    m.replace_all_uses_with(a)
    c.remove_instruction(m)
    assert b.control_predecessors == (p1,)
    verify(module)
    assert "control-predecessors={%p1}" in hlo_tools.parse(module.to_text()).to_text()


def test_typed_attributes_read_and_write_xla_spelling():
    m = hlo_tools.parse(
        "HloModule m\nENTRY e {\n  p = f32[2,3]{1,0} parameter(0)\n"
        "  t = f32[3,2]{1,0} transpose(p), dimensions={1,0}\n"
        "  s = f32[3,1]{1,0} slice(t), slice={[0:3], [0:2:2]}\n"
        '  ROOT d = f32[3,3]{1,0} dot(s, s), lhs_contracting_dims={1}, rhs_contracting_dims={1}, metadata={op_name="jit(f)/dot" source_line=7}\n}\n'
    )
    c = m.entry
    t, s, d = (c.get_instruction(n) for n in "tsd")
    assert t.dimensions == (1, 0)
    assert s.slice == ((0, 3, 1), (0, 2, 2))
    dn = d.dot_dimension_numbers
    assert dn.lhs_contracting_dims == (1,) and dn.rhs_batch_dims == ()
    assert d.metadata == {"op_name": "jit(f)/dot", "source_line": 7}
    t.dimensions = (0, 1)
    assert "dimensions={0,1}" in t.to_text()
    d.metadata = {"op_name": 'say "hi"'}
    assert 'metadata={op_name="say \\"hi\\""}' in d.to_text()
    s.slice = ((0, 3, 1), (0, 1, 1))
    assert "slice={[0:3], [0:1]}" in s.to_text()


def test_untouched_attributes_print_verbatim():
    line = '  ROOT %c = f32[] constant(1), metadata={op_name="x"  source_line=1}, backend_config={"a":{"b":[1,2]}}'
    m = hlo_tools.parse("HloModule m\nENTRY e {\n" + line + "\n}\n")
    assert line in m.to_text()
    assert m.entry.root.backend_config == {"a": {"b": [1, 2]}}


def test_shape_compatibility_ignores_layout():
    assert parse_shape("f32[2,3]{1,0}").compatible(parse_shape("f32[2,3]{0,1}"))
    assert not parse_shape("f32[2,3]").compatible(parse_shape("f32[3,2]"))


# -- guarded fields: a plain assignment keeps the computation's indexes right ----------
def test_assigning_a_name_renames_through_the_computation(module):
    c = module.entry
    a = c.get_instruction("a")
    a.name = "sum"
    assert c.get_instruction("sum") is a and c.get_instruction("a") is None
    assert "%sum = f32[4]{0} add" in module.to_text()
    # the module's unique-name cache follows: "a" is free again, "sum" is not
    assert c.unique_name("a") == "a" and c.unique_name("sum") == "sum.1"
    with pytest.raises(IrError, match="already has an instruction named %m"):
        a.name = "m"
    assert c.get_instruction("sum") is a and a.name == "sum"


def test_opcode_and_parent_are_read_only(module):
    a = module.entry.get_instruction("a")
    with pytest.raises(AttributeError):
        a.opcode = HloOpcode.SUBTRACT
    with pytest.raises(AttributeError):
        a.parent = None
    assert a.opcode is HloOpcode.ADD and a.parent is module.entry


def test_assigning_the_root_goes_through_set_root(module):
    c = module.entry
    m = c.get_instruction("m")
    c.root = m
    assert c.root is m and m.is_root
    stranger = Instruction.create("constant", "f32[]", name="k")
    with pytest.raises(IrError, match="not in computation"):
        c.root = stranger
    with pytest.raises(IrError, match="not in computation"):
        c.set_root(hlo_tools.parse(TEXT).entry.get_instruction("m"))
    assert c.root is m


def test_literal_and_shape_setters_check_what_they_store(module):
    c = module.entry
    k = c.add_instruction(Instruction.create("constant", "s32[2]", name="k"))
    k.literal = "{1, 2}"
    assert "constant({1, 2})" in k.to_text()
    with pytest.raises(IrError, match="does not fit"):
        k.literal = "{1, 2, 3}"
    with pytest.raises(IrError, match="not a constant"):
        c.get_instruction("a").literal = "1"
    assert k.literal == "{1, 2}"
    with pytest.raises(IrError, match="must be a Shape"):
        k.shape = "s32[3]"
    k.shape = parse_shape("s32[2]{0}")
    assert k.shape == parse_shape("s32[2]{0}")


def test_set_attribute_refuses_what_objects_hold():
    m = hlo_tools.parse(
        "HloModule m\nadd {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n"
        "ENTRY e {\n  p = f32[4]{0} parameter(0)\n  z = f32[] constant(0)\n"
        "  ROOT r = f32[] reduce(p, z), dimensions={0}, to_apply=add\n}\n"
    )
    r = m.entry.root
    with pytest.raises(IrError, match="set_called_computations"):
        r.set_attribute("to_apply", "%add")
    with pytest.raises(IrError, match="add_control_predecessor"):
        r.set_attribute("control-predecessors", "{%p}")
    r.set_attribute("dimensions", (0,))
    assert r.to_text().endswith("dimensions={0}, to_apply=%add")


# -- Module.clone: a deep copy, not a print and re-parse --------------------------------
def _small_corpus_modules(n: int = 3) -> list[tuple[str, str]]:
    """A few of the smallest corpus stages (every stage kind: before and after XLA)."""
    texts = corpus_stage_texts()
    by_stage: dict[str, tuple[str, str]] = {}
    for label, text in sorted(texts, key=lambda lt: len(lt[1])):
        by_stage.setdefault(label.split(":")[1], (label, text))
    return list(by_stage.values())[:n]


def test_clone_prints_byte_identical_on_corpus_modules():
    for label, text in _small_corpus_modules():
        module = hlo_tools.parse(text)
        copy = module.clone()
        assert copy.to_text() == module.to_text(), label
        originals = {id(i) for i in module.instructions()} | {id(c) for c in module.computations}
        assert not any(id(i) in originals for i in copy.instructions()), label
        assert not any(id(c) in originals for c in copy.computations), label
        for comp in copy.computations:
            for instr in comp:
                assert instr.parent is comp and comp.get_instruction(instr.name) is instr
                assert all(op.parent is comp and instr in op.users for op in instr.operands)
                assert all(id(c) not in originals for c in instr.called_computations)
        verify(copy)


def test_mutating_the_clone_leaves_the_original_untouched(module):
    before = module.to_text()
    copy = module.clone()
    c = copy.entry
    a, p0 = c.get_instruction("a"), c.get_instruction("p0")
    a.name = "renamed"
    a.replace_all_uses_with(p0)
    c.remove_instruction(a)
    c.get_instruction("m").set_attribute("metadata", {"op_name": "x"})
    assert module.to_text() == before
    assert module.entry.get_instruction("a").users == (module.entry.get_instruction("m"),) * 1 + (module.entry.root,)
    assert "renamed" not in copy.to_text() and "%a" not in copy.to_text()
    verify(copy)


def test_deep_clone_computation_copies_callees_once_with_unique_names():
    src = hlo_tools.parse(
        "HloModule m\nadd {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n"
        "ENTRY e {\n  p = f32[4,2]{1,0} parameter(0)\n  z = f32[] constant(0)\n"
        "  r0 = f32[4]{0} reduce(p, z), dimensions={1}, to_apply=add\n"
        "  ROOT r1 = f32[] reduce(r0, z), dimensions={0}, to_apply=add\n}\n"
    )
    into = hlo_tools.parse("HloModule n\nadd {\n  ROOT k = f32[] constant(1)\n}\nENTRY e {\n  ROOT q = f32[] parameter(0)\n}\n")
    memo: dict = {}
    copy = into.deep_clone_computation(src.entry, memo)
    assert copy.name == "e.1" and not copy.is_entry and into.entry.name == "e"
    reducer = copy.root.to_apply
    assert reducer.name == "add.1" and copy.get_instruction("r0").to_apply is reducer  # copied once
    assert reducer is not src.get_computation("add") and reducer.parent is into
    assert into.deep_clone_computation(src.get_computation("add"), memo) is reducer
    assert [c.name for c in into.computations] == ["add", "add.1", "e.1", "e"]


def test_strip_source_locations_drops_local_paths_and_keeps_op_names():
    # the layout of an XLA dump from jax 0.12: a stack-frame table before the entry,
    # metadata naming frames by id (and older dumps' source_file/source_line)
    text = """HloModule m, entry_computation_layout={(f32[2]{0})->f32[2]{0}}

FileNames
1 "/home/someone/project/train.py"

FunctionNames
1 "loss_fn"

FileLocations
1 {file_name_id=1 function_name_id=1 line=12 end_line=12 column=4 end_column=20}

StackFrames
1 {file_location_id=1 parent_frame_id=0}

ENTRY %e (p: f32[2]) -> f32[2] {
  %p = f32[2]{0} parameter(0)
  %n = f32[2]{0} negate(%p), metadata={op_name="jit(f)/neg" stack_frame_id=1}
  ROOT %a = f32[2]{0} add(%n, %n), metadata={source_file="/home/someone/project/train.py" source_line=12}
}
"""
    m = hlo_tools.parse(text)
    assert m.stack_frames and "/home/someone" in m.to_text()
    m.strip_source_locations()
    out = m.to_text()
    assert "/home/someone" not in out and "FileNames" not in out and "stack_frame_id" not in out
    assert 'metadata={op_name="jit(f)/neg"}' in out  # what the op is stays
    assert "metadata" not in out.splitlines()[-2]  # nothing left of the add's: no empty braces
    assert hlo_tools.parse(out).to_text() == out


def test_release_frees_the_module_without_a_cyclic_collection():
    """``Module.release`` breaks the module's cycles: its instructions (fused bodies,
    called computations included) are freed by reference counting alone."""
    import gc
    import weakref

    import corpus

    entry = next(e for e in corpus.load() if e.name == "llama3-tiny-train-f32")
    m = hlo_tools.parse(entry.text("cpu_after_optimizations"))
    assert any(i.opcode is HloOpcode.FUSION for i in m.instructions())
    refs = [weakref.ref(i) for i in m.instructions()]
    refs += [weakref.ref(c) for c in m.computations]
    assert len(refs) > 100
    gc.disable()
    try:
        m.release()
        assert m.computations == [] and m.entry is None
        del m
        alive = sum(r() is not None for r in refs)
    finally:
        gc.enable()
    assert alive == 0


def test_release_frees_control_edges():
    import gc
    import weakref

    m = hlo_tools.parse(TEXT)
    a, mul = m.entry.get_instruction("a"), m.entry.get_instruction("m")
    mul.add_control_predecessor(a)
    refs = [weakref.ref(i) for i in m.instructions()]
    del a, mul
    gc.disable()
    try:
        m.release()
        del m
        assert all(r() is None for r in refs)
    finally:
        gc.enable()
