"""HLO tools: parse, inspect, rewrite and print XLA's HLO modules in Python.

    import hlo_tools
    module = hlo_tools.load("module_0001.jit_step.before_optimizations.txt")
    print(module.entry.root)
    text = module.to_text()          # XLA's parser accepts this
"""

from .errors import HloError, HloParseError, IrError, VerificationError
from .ir import Computation, Instruction, Module
from .opcode import HloOpcode
from .parser import load, parse
from .shape import Layout, PrimitiveType, Shape, parse_shape
from .stablehlo import from_jax
from .verifier import verify
from .xla import XlaCompileError

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
    "Shape",
    "VerificationError",
    "XlaCompileError",
    "from_jax",
    "load",
    "parse",
    "parse_shape",
    "verify",
]
