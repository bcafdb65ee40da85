"""`make bench` and `make bench-gpu` (`python -m benchmarks serving`, `gpu`): how fast the runtime serves,
measured side by side.

Benchmark code only, outside the serving package: the serving images carry `wrappers` and the
core, never this. The load generators import `tritonclient`'s protos, so this process never
imports MLServer; servers always run as their own processes (`slipway.local_server.LocalServer`).
"""
