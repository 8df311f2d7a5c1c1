"""Operating plateau serve: metrics, health and readiness, the stall detector, the workers'
status files, and the `status` and `check` commands."""

# How long `check` and `status` wait for what they ask over the network before saying it
# did not answer: a cluster across a WAN or busy with a rebalance can take seconds.
ANSWER_TIMEOUT_S = 10.0
