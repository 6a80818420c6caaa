"""visualize: see its issue; empty until it lands."""
