"""Fusion passes. Outlining a region into a fusion is ``hlo_tools.outline``."""
