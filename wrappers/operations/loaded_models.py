"""Which models a process-wide switch is on for, counted by loaded instance, not by name.

MLServer reloads a model by loading the new instance before it unloads the old one, under the
same name: a switch kept by name alone would be turned off by the old instance's unload, under
the new one (the raw gRPC path, and shared memory with every registered region).
"""

from __future__ import annotations

from collections.abc import Callable


class LoadedModels:
    """Model names with at least one loaded instance that turned the switch on.

    `install` runs at each `add`, before the model counts: it puts the switch's machinery in
    place in the server (once; it must do nothing when it is there already). `uninstall` runs
    when the last instance of the last model leaves.
    """

    def __init__(self, install: Callable[[], None] | None = None, uninstall: Callable[[], None] | None = None) -> None:
        self._instances: dict[str, set[int]] = {}
        self._install = install
        self._uninstall = uninstall

    def add(self, model) -> None:
        if self._install is not None:
            self._install()
        self._instances.setdefault(model.name, set()).add(id(model))

    def discard(self, model) -> None:
        instances = self._instances.get(model.name)
        if instances is None or id(model) not in instances:
            return
        instances.discard(id(model))
        if not instances:
            del self._instances[model.name]
            if not self._instances and self._uninstall is not None:
                self._uninstall()

    def __contains__(self, name: str) -> bool:
        return name in self._instances

    def __bool__(self) -> bool:
        return bool(self._instances)


class Switches:
    """The process's switches, by name: the process state's (`wrappers.process_state`), each made the first time
    a module asks for it with its `install` and `uninstall`."""

    def __init__(self) -> None:
        self._by_name: dict[str, LoadedModels] = {}

    def named(
        self, name: str, install: Callable[[], None] | None = None, uninstall: Callable[[], None] | None = None
    ) -> LoadedModels:
        switch = self._by_name.get(name)
        if switch is None:
            switch = self._by_name[name] = LoadedModels(install, uninstall)
        return switch
