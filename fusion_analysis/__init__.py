"""fusion_analysis: see its issue; empty until it lands."""
