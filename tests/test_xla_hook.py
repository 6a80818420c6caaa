"""A Python pass inside XLA's own pipeline (jax.extend.xla's HLO module hook)."""

from __future__ import annotations

import pytest


from hlo_tools import parse
from hlo_tools.opcode import HloOpcode
from xla_bridge.jax_internals import XlaCompileError, hook_supported
from xla_bridge.compiler import Hook, compile
from xla_bridge.examples import TWO_BRANCHES, UNFUSED
from xla_bridge.inputs import make_inputs
from xla_bridge.runner import compare_outputs, run

pytestmark = pytest.mark.skipif(not hook_supported(), reason="this jax has no HLO module transformation hook (jax >= 0.12)")


def entry_order(res) -> list[str]:
    return [i.name for i in res.optimized_module.entry]


def swap_first_independent_pair(module) -> bool:
    """Moves the first instruction that does not use its predecessor before it:
    a schedule change (the entry's order is its schedule once is_scheduled)."""
    order = [i for i in module.entry if i.opcode is not HloOpcode.PARAMETER and not i.is_root]
    for prev, ins in zip(order, order[1:]):
        if prev not in ins.operands and not ins.control_predecessors:
            moved = ins.clone("moved")
            module.entry.add_instruction(moved, before=prev)
            ins.replace_all_uses_with(moved)
            module.entry.remove_instruction(ins)
            return True
    return False


def test_post_scheduler_reprint_through_our_ir_changes_nothing():
    m = parse(TWO_BRANCHES)
    hook = Hook(lambda module: False, "post-scheduler", reprint=True)
    hooked, plain = compile(m, hook=hook), compile(m)
    assert hook.calls >= 1 and hook.seen and "is_scheduled=true" in hook.seen[0]
    assert entry_order(hooked) == entry_order(plain)
    x = make_inputs(m)[0]
    assert compare_outputs(run(plain, x), run(hooked, x)).verdict == "exact"


def test_post_scheduler_schedule_change_is_visible_in_xlas_final_module():
    m = parse(TWO_BRANCHES)
    plain = compile(m)
    hook = Hook(swap_first_independent_pair, "post-scheduler")
    hooked = compile(m, hook=hook)
    assert hook.changed == 1
    order = entry_order(hooked)
    moved = [n for n in order if n.endswith(".moved")]
    assert len(moved) == 1
    original = moved[0].removesuffix(".moved")
    plain_order = [n for n in entry_order(plain)]
    assert plain_order.index(original) > 0
    # the moved instruction now runs before the one it followed
    assert order.index(moved[0]) < order.index(plain_order[plain_order.index(original) - 1])
    x = make_inputs(m)[0]
    assert compare_outputs(run(plain, x), run(hooked, x)).ok


def test_pre_scheduler_hook_sees_xlas_fused_module():
    hook = Hook(lambda module: False, "pre-scheduler")
    compile(UNFUSED, hook=hook)
    assert hook.calls >= 1
    seen = parse(hook.seen[0])
    assert any(i.opcode is HloOpcode.FUSION for i in seen.entry)  # after XLA:CPU's fusion


def test_hook_error_is_typed_and_the_hook_is_cleared():
    def boom(module):
        raise RuntimeError("pass bug")

    with pytest.raises(XlaCompileError, match="hooked pass raised RuntimeError: pass bug") as info:
        compile(UNFUSED, hook=(boom, "post-scheduler"))
    assert info.value.stage == "hook"
    # cleared: a later plain compile does not call it
    again = Hook(lambda module: False, "post-scheduler")
    compile(UNFUSED)
    assert again.calls == 0
    counting = Hook(lambda module: False, "post-scheduler")
    compile(UNFUSED, hook=counting)
    n = counting.calls
    compile(UNFUSED)
    assert counting.calls == n


def test_unknown_stage_is_refused():
    with pytest.raises(ValueError, match="unknown hook stage 'middle'"):
        compile(UNFUSED, hook=(lambda m: False, "middle"))
