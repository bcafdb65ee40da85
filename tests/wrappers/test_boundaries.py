"""The packages' boundaries, read from their source: the serving package (what the images carry) imports the
shared core, the ONNX Runtime engine and itself only, never `export`, `benchmarks`, `loadtest` or `deployments`; the
engine imports the core only; the shared core imports none of the packages built on it; and the images copy the core,
the engine and the serving package, nothing else."""

from __future__ import annotations

import ast
import re

import pytest

from slipway.paths import PROJECT_ROOT

FIRST_PARTY = {"slipway", "engine", "wrappers", "export", "loadtest", "deployments", "benchmarks", "tests"}


def _first_party_imports(package: str) -> dict[str, set[str]]:
    """Per file of the package, the first-party top-level packages it imports (inside functions too)."""
    found: dict[str, set[str]] = {}
    for path in sorted((PROJECT_ROOT / package).rglob("*.py")):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names.update(alias.name.partition(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.partition(".")[0])
        found[path.relative_to(PROJECT_ROOT).as_posix()] = names & FIRST_PARTY
    return found


@pytest.mark.parametrize(
    ("package", "allowed"),
    [("wrappers", {"slipway", "engine", "wrappers"}), ("engine", {"slipway", "engine"}), ("slipway", {"slipway"})],
)
def test_a_package_imports_only_what_it_sits_on(package, allowed):
    imports = _first_party_imports(package)
    assert imports, f"no Python files found under {package}/"
    crossing = {path: sorted(names - allowed) for path, names in imports.items() if names - allowed}
    assert not crossing, f"{package}/ may import only {sorted(allowed)}: {crossing}"


def test_the_serving_images_copy_the_core_the_engine_and_the_serving_package_only():
    dockerfiles = sorted((PROJECT_ROOT / "deployments" / "images").glob("*.Dockerfile"))
    assert dockerfiles
    for dockerfile in dockerfiles:
        copied = set()
        for line in dockerfile.read_text().splitlines():
            match = re.match(r"COPY\s+(?!--from)(.*)$", line.strip())
            if match:
                *sources, _ = match.group(1).split()
                copied.update(source.rstrip("/").partition("/")[0] for source in sources)
        packages = copied & FIRST_PARTY
        assert packages == {"slipway", "engine", "wrappers"}, (dockerfile.name, sorted(copied))


def _gc_calls(path) -> set[str]:
    """The `gc` functions a file names: `gc.NAME` or `from gc import NAME`."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names = {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "gc"
    }
    return names | {
        alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module == "gc" for alias in node.names
    }


def test_the_serving_package_never_walks_the_heap_and_thaws_it_only_at_unload():
    """The launcher hands MLServer's servers over (issue 29): no `gc.get_objects` walks, and no thaw at each load,
    only `wrappers.operations.heap`'s at unload (an unloaded model must be freed)."""
    calls = {path.relative_to(PROJECT_ROOT).as_posix(): _gc_calls(path) for path in (PROJECT_ROOT / "wrappers").rglob("*.py")}
    walking = sorted(path for path, names in calls.items() if {"get_objects", "get_referrers", "get_referents"} & names)
    thawing = sorted(path for path, names in calls.items() if "unfreeze" in names)
    assert not walking, f"heap walks in {walking}: take what MLServer built from wrappers.mlserver_compat.running"
    assert thawing == ["wrappers/operations/heap.py"], thawing


def _wrappers_modules(package: str) -> dict[str, set[str]]:
    """Per file of the package, the `wrappers` modules it imports by full name (`from wrappers import x`: wrappers.x)."""
    found: dict[str, set[str]] = {}
    for path in sorted((PROJECT_ROOT / package).rglob("*.py")):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.update(
                    [f"{node.module}.{alias.name}" for alias in node.names] if node.module == "wrappers" else [node.module]
                )
        found[path.relative_to(PROJECT_ROOT).as_posix()] = {name for name in names if name.startswith("wrappers.")}
    return found


# What load generators may take from the serving package: the runtime's settings schema the tuner writes
# model-settings.json with (and reads busy waiting from, a rule of that schema). Requests are built with the core's
# `slipway.v2_requests`, servers started with the core's `slipway.local_server`.
LOADTEST_MAY_USE = {"slipway.runtime_settings"}
# The serving side of the V2 wire format: no client builds its requests from these.
SERVING_WIRE = {
    "wrappers.request_bodies",
    "wrappers.protocol.tensors",
    "wrappers.shm.regions",
    "wrappers.protocol.binary_data",
    "wrappers.transport.body_rules",
    "wrappers.transport.body_layer",
    "wrappers.protocol.v2_codec",
    "wrappers.transport.grpc_raw",
}


def test_load_generators_build_requests_from_the_core_not_the_serving_package():
    loadtest = {
        path: sorted(names - LOADTEST_MAY_USE)
        for path, names in _wrappers_modules("loadtest").items()
        if names - LOADTEST_MAY_USE
    }
    assert not loadtest, f"loadtest/ may import only {sorted(LOADTEST_MAY_USE)} of wrappers/: {loadtest}"
    benchmarks = {
        path: sorted(names & SERVING_WIRE) for path, names in _wrappers_modules("benchmarks").items() if names & SERVING_WIRE
    }
    assert not benchmarks, f"benchmarks/ builds V2 requests with slipway.v2_requests, not {benchmarks}"


# The serving package's side of starting a server (the launcher, the command serving in the foreground, the modules
# they read settings with): a client that starts a server from outside needs none of them (issue 29).
SERVER_SIDE = {
    "wrappers.server",
    "wrappers.launch",
    "wrappers.__main__",
    "wrappers.cli",
    "wrappers.model_repository",
    "slipway.repository_access",
}
# What starting a server from outside takes, defined once in the core (`slipway.local_server`, `slipway.server_process`).
LAUNCHING = {
    "LocalServer",
    "ServerError",
    "model_names",
    "server_env",
    "launcher_command",
    "mlserver_command",
    "failure_reason",
    "stop_process_group",
    "HOOK",
    "HOOK_ENV",
}


def test_load_generators_and_benchmarks_start_servers_with_the_core_alone():
    """`LocalServer` and what it needs (a folder's model names, the server's command and environment, stopping its
    process group) live in the core: loadtest/ and benchmarks/ import none of the serving side's modules to start
    one, and nothing outside the core defines those names again."""
    for package in ("loadtest", "benchmarks"):
        crossing = {
            path: sorted(names & SERVER_SIDE) for path, names in _wrappers_modules(package).items() if names & SERVER_SIDE
        }
        assert not crossing, f"{package}/ starts servers with slipway.local_server, not {crossing}"
    core = {
        name
        for module in ("local_server", "server_process")
        for name in _top_level_names(PROJECT_ROOT / "slipway" / f"{module}.py")
    }
    assert LAUNCHING <= core, sorted(LAUNCHING - core)
    files = [
        path
        for package in ("wrappers", "loadtest", "benchmarks", "deployments")
        for path in (PROJECT_ROOT / package).rglob("*.py")
    ]
    again = {path.relative_to(PROJECT_ROOT).as_posix(): sorted(_top_level_names(path) & LAUNCHING) for path in files}
    again = {path: names for path, names in again.items() if names}
    assert not again, f"defined again outside slipway/local_server.py and slipway/server_process.py: {again}"


def _top_level_names(path) -> set[str]:
    """The names a module defines at its top level (assignments, functions, classes), imports aside."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(), filename=str(path)).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(name.id for target in targets for name in ast.walk(target) if isinstance(name, ast.Name))
    return names


def test_the_wire_format_is_defined_once_in_the_core():
    """Client and server must agree byte for byte: no other package defines a name `slipway.v2_wire` defines."""
    wire = {name for name in _top_level_names(PROJECT_ROOT / "slipway" / "v2_wire.py") if not name.startswith("_")}
    assert {"V2_TO_NUMPY", "TensorError", "Location", "REGION", "BINARY_HEADER", "to_raw", "from_raw"} <= wire
    files = [path for package in ("wrappers", "loadtest", "benchmarks") for path in (PROJECT_ROOT / package).rglob("*.py")]
    again = {path.relative_to(PROJECT_ROOT).as_posix(): sorted(_top_level_names(path) & wire) for path in files}
    again = {path: names for path, names in again.items() if names}
    assert not again, f"defined again outside slipway/v2_wire.py (import them from there): {again}"
