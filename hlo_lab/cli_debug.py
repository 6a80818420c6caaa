"""Registers the debugging commands of ``hlo_lab.debug`` (bisect, divergence,
reduce, upstream) with the ``hlo`` command line."""

from __future__ import annotations

import importlib

#: The modules of ``hlo_lab.debug`` that add a subcommand, in help order.
COMMANDS: tuple[str, ...] = ("bisect_cli", "divergence_cli", "reduce", "upstream_cli")


def register(sub) -> None:
    for name in COMMANDS:
        importlib.import_module(f"hlo_lab.debug.{name}").register(sub)
