"""Fusion: outlining regions into fusion instructions, and the fusion passes."""

from .outline import FusionError, inline_fusion, outline_fusion

__all__ = ["FusionError", "inline_fusion", "outline_fusion"]
