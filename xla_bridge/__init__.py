"""The XLA bridge: compile, run, compare, time and trace HLO modules with the XLA
that jaxlib ships, and convert to and from StableHLO.  The only package that
imports jax; jax itself is imported when first needed, so importing the bridge
is cheap.

    from xla_bridge import compile, compare, benchmark
    result = compile(module, backend="cpu", pipeline="stock")

To measure a pass against XLA (stock, as written, or with the pass hooked in at a
stage of XLA's pipeline), one object: ``Measurement`` with ``XlaPipeline``s
(``measure``), hook stages spelled ``HookStage``.

The pieces: ``jax_internals`` (every ``jax._src`` access but StableHLO's, one small
function each), ``errors``, ``hook_stage``, ``measure``, ``compiler``, ``runner``,
``bench``, ``trace``, ``results`` (the SQLite history), ``inputs``, ``targets`` (GPU
target descriptions), ``worker`` (the child process that contains XLA aborts;
``worker_main`` starts it), ``versions`` and ``sides`` (other jax releases),
``collective_estimates`` (XLA:GPU's own collective latencies), ``kernel_alone`` (one
kernel compiled alone), ``proto`` (module files in any form), ``display`` (speedup
verdicts), ``examples`` (jax-made sample modules), ``stablehlo``, ``fidelity``.
"""

from .errors import XlaAbortError, XlaCompileError
from .hook_stage import HookStage
from .measure import AS_WRITTEN, FUSION_MODES, STOCK, Measurement, XlaPipeline
from .stablehlo import from_jax
from .bench import BenchResult, benchmark
from .compiler import AS_WRITTEN_DISABLED_PASSES, REPLACE_DISABLED_PASSES, CompileResult, Hook, compile
from .inputs import make_inputs
from .proto import load, read_text
from .runner import Comparison, compare, compare_outputs, run, run_module
from .worker import contained

__all__ = [
    "AS_WRITTEN", "AS_WRITTEN_DISABLED_PASSES", "FUSION_MODES", "REPLACE_DISABLED_PASSES", "BenchResult", "CompileResult", "Comparison", "Hook", "HookStage",
    "Measurement", "XlaPipeline", "STOCK", "XlaAbortError",
    "XlaCompileError", "benchmark", "compare", "compare_outputs", "compile", "contained", "from_jax", "load",
    "make_inputs", "read_text", "run", "run_module",
]
