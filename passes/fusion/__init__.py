"""Fusion: outlining regions into fusion instructions, and the fusion passes."""

from hlo_tools.outline import FusionError, inline_fusion

from .outline import outline_fusion

__all__ = ["FusionError", "inline_fusion", "outline_fusion"]
