"""The demo: a local broker, an application writing JSON log events, and plateau landing
them (`plateau demo`); the same producer on its own (`plateau demo-producer`); and the fast
bulk producer tests and benchmarks share."""
