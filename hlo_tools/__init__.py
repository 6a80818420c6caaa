"""HLO tools: parse, inspect, rewrite and print XLA's HLO modules in Python.

    import hlo_tools
    module = hlo_tools.load("module_0001.jit_step.before_optimizations.txt")
    print(module.entry.root)
    text = module.to_text()          # XLA's parser accepts this

The IR and everything that reads and writes it; no jax.  Compiling, running and
timing a module with XLA is the ``xla_bridge`` package, one layer up.
"""

from .errors import HloError, HloParseError, IrError, VerificationError
from .ir import Computation, Instruction, Module
from .opcode import HloOpcode
from .parser import load, parse
from .rewriter import Rewriter
from .shape import Layout, PrimitiveType, Shape, parse_shape
from .verifier import verify

__all__ = [
    "Computation",
    "HloError",
    "HloOpcode",
    "HloParseError",
    "Instruction",
    "IrError",
    "Layout",
    "Module",
    "PrimitiveType",
    "Rewriter",
    "Shape",
    "VerificationError",
    "load",
    "parse",
    "parse_shape",
    "verify",
]
