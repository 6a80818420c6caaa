"""assert_rewrite: the clearest pass test, like XLA's RunAndFilecheckHloRewrite."""

from __future__ import annotations

import hashlib

import hlo_tools
from xla_bridge import xla


def assert_rewrite(hlo_in: str, pass_, expected: str | None) -> hlo_tools.Module:
    """Runs ``pass_`` on ``hlo_in``. ``expected=None``: the pass must report
    unchanged and leave the text alone; otherwise it must report changed and
    print exactly ``expected`` (after our parse/print), verify, and XLA must
    accept it."""
    module = hlo_tools.parse(hlo_in)
    before = hashlib.sha256(module.to_text().encode()).hexdigest()
    changed = pass_.run(module)
    after = hashlib.sha256(module.to_text().encode()).hexdigest()
    assert changed == (before != after), f"{pass_.name} said changed={changed} but the text {'changed' if before != after else 'did not'}"
    if expected is None:
        assert not changed, f"{pass_.name} was expected to leave the module unchanged:\n{module.to_text()}"
        return module
    assert changed, f"{pass_.name} did not change the module"
    hlo_tools.verify(module)
    want = hlo_tools.parse(expected).to_text()
    assert module.to_text() == want, f"got:\n{module.to_text()}\nwant:\n{want}"
    xla.xla_module_from_text(module.to_text())
    return module


#: The scalar add reducer most hand-written test modules need.
ADD_REDUCER = """add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
"""

#: A softmax-like chain for the fusion tests: the exp feeds a reduce and a
#: subtract, the multiply feeds the exp and a negate, a dot and the root read results.
SOFTMAX_CHAIN = "HloModule m\n\n" + ADD_REDUCER + """
ENTRY e {
  x = f32[4,8]{1,0} parameter(0)
  y = f32[4,8]{1,0} parameter(1)
  m = f32[4,8]{1,0} multiply(x, y)
  n = f32[4,8]{1,0} exponential(m)
  z = f32[] constant(0)
  r = f32[4]{0} reduce(n, z), dimensions={1}, to_apply=add
  b = f32[4,8]{1,0} broadcast(r), dimensions={0}
  k = f32[4,8]{1,0} subtract(n, b)
  c = f32[4,8]{1,0} negate(m)
  d = f32[4,4]{1,0} dot(k, c), lhs_contracting_dims={1}, rhs_contracting_dims={1}
  ROOT t = (f32[4,4]{1,0}, f32[4,8]{1,0}) tuple(d, k)
}
"""
