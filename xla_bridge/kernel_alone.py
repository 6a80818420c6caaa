"""One kernel of an optimized module compiled as its own module, so that XLA runs exactly
that kernel (what the cost model's per-kernel checks time)."""

from __future__ import annotations

from dataclasses import dataclass

from hlo_analysis.kernels import extract_kernel, kernels_of, stand_in
from hlo_tools.ir import Instruction, Module
from hlo_tools.shape import Shape

from .hook_stage import HookStage
from .measure import Measurement, XlaPipeline
from .compiler import CompileResult


class NotAlone(RuntimeError):
    """XLA compiled an extracted kernel into something other than that one kernel."""


@dataclass
class SwapIn:
    """The hooked "pass" of ``compile_alone``: hands XLA ``exact`` in place of the
    module it compiles, but only a module with ``exact``'s signature (XLA:GPU's
    autotuner compiles its own sub-modules through the same hook)."""

    exact: Module

    def run(self, module: Module) -> Module | None:
        return self.exact if _signature(module) == _signature(self.exact) else None


def compile_alone(kernel: Instruction, backend: str = "cpu", *,
                  target: str | None = None) -> tuple[Module, CompileResult]:
    """Compiles ``kernel`` as its own module so that XLA runs exactly it: returns the
    extracted module and XLA's ``CompileResult``.

    The StableHLO route loses the layouts inside fusion bodies, so XLA compiles
    ``stand_in`` (same signature) "as written" and the exact module is handed over
    in a hook (``SwapIn``) at ``HookStage.for_fusion``: XLA:CPU's pre-scheduler one;
    on XLA:GPU the post-scheduler one (it rejects fusion bodies before layout
    assignment), with the module marked scheduled. Raises ``NotAlone`` when the
    result is not that one kernel."""
    exact = extract_kernel(kernel)
    if backend != "cpu":
        exact.is_scheduled = True
    pipeline = XlaPipeline.as_written().hooked(SwapIn(exact), HookStage.for_fusion(backend))
    res = Measurement(backend, target=target).compile(stand_in(exact), pipeline)
    hook = res.hook
    ran = kernels_of(res.optimized_module)
    if hook.changed != 1 or len(ran) != 1 or ran[0].opcode_text != kernel.opcode_text:
        raise NotAlone(f"XLA did not run {kernel.name} alone: hook used {hook.changed}x, "
                       f"kernels {[k.opcode_text for k in ran]}")
    return exact, res


def _signature(module: Module) -> tuple:
    """Entry parameter and result shapes, layouts aside."""
    def key(shape: Shape) -> tuple:
        if shape.is_tuple:
            return tuple(key(s) for s in shape.tuple_shapes)
        return (str(shape.element_type), tuple(shape.dims))

    params = sorted(module.entry.parameters, key=lambda p: p.parameter_number)
    return tuple(key(p.shape) for p in params), key(module.entry.root.shape)
