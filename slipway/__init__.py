"""Slipway's common core: paths, atomic writes, JSON reports and terminal output.

Every other package may import this one; it needs only the standard library,
pydantic and rich, so it also fits in the serving image.
"""
