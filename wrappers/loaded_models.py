"""Which models a process-wide switch is on for, counted by loaded instance, not by name.

MLServer reloads a model by loading the new instance before it unloads the old one, under the
same name: a switch kept by name alone would be turned off by the old instance's unload, under
the new one (the raw gRPC path, and shared memory with every registered region).
"""

from __future__ import annotations


class LoadedModels:
    """Model names with at least one loaded instance that turned the switch on."""

    def __init__(self) -> None:
        self._instances: dict[str, set[int]] = {}

    def add(self, model) -> None:
        self._instances.setdefault(model.name, set()).add(id(model))

    def discard(self, model) -> None:
        instances = self._instances.get(model.name, set())
        instances.discard(id(model))
        if not instances:
            self._instances.pop(model.name, None)

    def __contains__(self, name: str) -> bool:
        return name in self._instances

    def __bool__(self) -> bool:
        return bool(self._instances)
