"""The packages' boundaries, read from their source: the serving package (what the images carry) imports the
shared core and itself only, never `export`, `benchmarks`, `loadtest` or `deployments`; the shared core imports
none of the packages built on it; and the images copy the core and the serving package, nothing else."""

from __future__ import annotations

import ast
import re

import pytest

from slipway.paths import PROJECT_ROOT

FIRST_PARTY = {"slipway", "wrappers", "export", "loadtest", "deployments", "benchmarks", "tests"}


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


@pytest.mark.parametrize(("package", "allowed"), [("wrappers", {"slipway", "wrappers"}), ("slipway", {"slipway"})])
def test_a_package_imports_only_what_it_sits_on(package, allowed):
    imports = _first_party_imports(package)
    assert imports, f"no Python files found under {package}/"
    crossing = {path: sorted(names - allowed) for path, names in imports.items() if names - allowed}
    assert not crossing, f"{package}/ may import only {sorted(allowed)}: {crossing}"


def test_the_serving_images_copy_the_core_and_the_serving_package_only():
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
        assert packages == {"slipway", "wrappers"}, (dockerfile.name, sorted(copied))
