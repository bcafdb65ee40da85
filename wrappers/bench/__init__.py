"""`make bench` and `make bench-gpu`: how fast the runtime serves, measured side by side.

Benchmark code only: nothing here is imported by the runtime. The load generators
import `tritonclient`'s protos, so this process never imports MLServer; servers always
run as their own processes (`wrappers.server.LocalServer`).
"""
