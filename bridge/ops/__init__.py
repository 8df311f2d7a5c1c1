"""Operating plateau serve: metrics, health and readiness, the stall detector, the workers'
status files, and the `status` and `check` commands."""
