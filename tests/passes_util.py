"""What the pass tests share: modules they all use, and a pass that never settles."""

from __future__ import annotations

from passes import ComputationPass


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


class Flipper(ComputationPass):
    """A pass that always changes the module: reverses the root's dimensions."""
    name = "flipper"

    def run_on_computation(self, comp):
        r = comp.root
        r.dimensions = tuple(reversed(r.dimensions))  # never converges
        return True
