"""The ONNX Runtime engine that export, the benchmarks and the server share: sessions, providers, runs.

No MLServer and no serving here: a session built for a benchmark is the one the server builds.
"""
