"""Measures the host's per-opcode elementwise costs (``Device.op_seconds``, priced by
``hlo_analysis.op_profile.compute_seconds``): each opcode is timed in a chain of that
opcode on a cache-resident f32 array, compiled by stock XLA:CPU and timed by XLA's
trace events."""

from __future__ import annotations

from .host_bench import best_of_passes, compiled_kernel

N = 8192  # elements per micro-kernel: 32 KiB of f32, cache-resident
STEPS = 16

#: opcode -> (the step applied to %y, a helper step before it or None). ``%q`` is
#: a second parameter in [0.5, 1.0], ``%c`` a small constant, ``%one`` 1.0001.
#: Each chain keeps its values in a normal float range (no inf, NaN or denormals,
#: which take other paths) and survives XLA's algebraic simplifier (which folds
#: ``negate(negate(y))``, ``max(max(y, c), c)``, ``a / (b / y)``, turns a divide by a
#: constant into a multiply and a subtract of one into an add); ``measure`` checks
#: that the compiled kernel still holds all the steps. XLA:CPU expands logistic
#: and erf before codegen, so they never reach a kernel and are not profiled.
_CHAINS: dict[str, tuple[str, str | None]] = {
    "add": ("add(%y, %c)", None),
    "subtract": ("subtract(%y, %q)", None),
    "multiply": ("multiply(%y, %one)", None),
    "divide": ("divide(%q, %y)", "add(%y, %q)"),        # q / (y + q) stays in (0.3, 0.8)
    "maximum": ("maximum(%y, %q)", "add(%y, %c)"),
    "minimum": ("minimum(%y, %q)", "add(%y, %c)"),
    "negate": ("negate(%y)", "add(%y, %c)"),
    "abs": ("abs(%y)", "add(%y, %c)"),
    "sqrt": ("sqrt(%y)", None),                        # -> 1
    "rsqrt": ("rsqrt(%y)", None),                      # -> 1
    "tanh": ("tanh(%y)", None),
    "exponential": ("exponential(%y)", "negate(%y)"),   # exp(-y) stays in (0.4, 0.8)
    "log": ("log(%y)", "add(%y, %two)"),               # log(y + 2) stays in (0.6, 1.1)
    "power": ("power(%y, %y)", None),                  # y^y stays in (0.69, 1)
}


def _chain_module(op: str) -> str:
    step, helper = _CHAINS[op]
    t = f"f32[{N}]{{0}}"
    lines = [f"HloModule profile_{op}", "", "ENTRY %main {", f"  %p0 = {t} parameter(0)", f"  %q = {t} parameter(1)",
             "  %k1 = f32[] constant(1.0001)", "  %k2 = f32[] constant(2)", "  %kc = f32[] constant(0.001)",
             f"  %one = {t} broadcast(%k1), dimensions={{}}", f"  %two = {t} broadcast(%k2), dimensions={{}}",
             f"  %c = {t} broadcast(%kc), dimensions={{}}"]
    y = "%p0"
    for i in range(STEPS):
        if helper:
            lines.append(f"  %helper{i} = {t} {helper.replace('%y', y)}")
            y = f"%helper{i}"
        lines.append(f"  %step{i} = {t} {step.replace('%y', y)}")
        y = f"%step{i}"
    lines[-1] = "  ROOT" + lines[-1][1:]
    return "\n".join(lines) + "\n}\n"


def _reduce_module(rows: int = 64, cols: int = 128) -> str:
    return f"""HloModule profile_reduce

%add (a: f32[], b: f32[]) -> f32[] {{
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}}

ENTRY %main {{
  %p0 = f32[{rows},{cols}]{{1,0}} parameter(0)
  %z = f32[] constant(0)
  ROOT %r = f32[{rows}]{{0}} reduce(%p0, %z), dimensions={{1}}, to_apply=%add
}}
"""


def measure(*, launch_s: float) -> dict[str, float]:
    """Seconds per element for every profiled opcode whose chain XLA keeps whole,
    plus ``reduce`` (seconds per reduced element of a row reduction), with
    ``launch_s`` and the helper steps' own time taken out. Sixteen steps on 32 KiB
    make every chain compute-bound: its reads and write take about 1 us here."""
    texts = {}
    for op in _CHAINS:
        text = _chain_module(op)
        _, kernel = compiled_kernel(text)
        kept = sum(1 for i in (kernel.fused_computation or ()) if i.opcode_text == op)
        if kept == STEPS:  # otherwise XLA rewrote the chain: it would not time this op
            texts[op] = (text, [(N,), (N,)])
    rows, cols = 64, 128
    texts["reduce"] = (_reduce_module(rows, cols), [(rows, cols)])
    us = best_of_passes(texts, {key: 30 for key in texts})
    raw = {op: us[op] * 1e-6 for op in _CHAINS if op in us}
    out: dict[str, float] = {}
    for op, seconds in raw.items():  # a helper's own opcode comes earlier in _CHAINS
        helper = _CHAINS[op][1]
        helper_op = helper.split("(")[0] if helper else None
        if helper_op and helper_op not in out:
            continue
        helper_s = out[helper_op] * STEPS * N if helper_op else 0.0
        body_s = seconds - launch_s - helper_s
        out[op] = max(body_s, 0.05 * (seconds - launch_s)) / (STEPS * N)
    out["reduce"] = max(us["reduce"] * 1e-6 - launch_s, 1e-9) / (rows * cols)
    return out
