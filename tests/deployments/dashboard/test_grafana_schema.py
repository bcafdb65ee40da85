"""The dashboard against Grafana's own published schema: every rendered variant type-checked by the TypeScript
compiler against `@grafana/schema` (the types Grafana generates from its CUE kinds: the dashboard kind and each panel
plugin's options), with the versions tools/grafana-schema/package-lock.json pins (`make dashboard-schema`)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import pytest

from deployments.kserve.render import render_kserve
from slipway.paths import PROJECT_ROOT
from tests.deployments.rendering import rendering

SCHEMA_DIR = PROJECT_ROOT / "tools" / "grafana-schema"
CHECK = SCHEMA_DIR / "check.mjs"


def _pinned(package: str) -> str:
    lock = json.loads((SCHEMA_DIR / "package-lock.json").read_text())
    return lock["packages"][f"node_modules/{package}"]["version"]


@pytest.fixture(scope="module")
def grafana_schema():
    """Runs check.mjs on dashboard JSON files; skips where `make dashboard-schema` has not installed it."""
    node = shutil.which("node")
    if node is None or not (SCHEMA_DIR / "node_modules" / ".installed").is_file():
        pytest.skip(f"the Grafana schema check is not installed in {SCHEMA_DIR}: run `make dashboard-schema` (make test does)")

    def check(*paths) -> subprocess.CompletedProcess:
        return subprocess.run(
            [node, str(CHECK), *map(str, paths)], cwd=SCHEMA_DIR, capture_output=True, text=True, timeout=180, check=False
        )

    return check


def _dashboard(rendered) -> dict:
    (configmap,) = [doc for doc in rendered.docs if doc["kind"] == "ConfigMap"]
    (text,) = configmap["data"].values()
    return json.loads(text)


@pytest.fixture(scope="module")
def dashboards(main_version, canary_version) -> dict[str, dict]:
    """Every variant render writes: Seldon's (one JSON for any overlay, names filled per model) and KServe's (its
    model container's name and description)."""
    return {
        "seldon-cpu": _dashboard(rendering()("cpu", model=main_version, namespace="ml", dashboard=True)),
        "seldon-canary": _dashboard(rendering()("canary", model=main_version, canary=canary_version, dashboard=True)),
        "kserve-cpu": _dashboard(rendering(render_kserve)("cpu", model=main_version, dashboard=True)),
    }


def _write(folder, dashboards: dict[str, dict]) -> list:
    paths = []
    for name, dashboard in dashboards.items():
        path = folder / f"{name}.json"
        path.write_text(json.dumps(dashboard, indent=2))
        paths.append(path)
    return paths


def test_the_variants_differ_where_render_fills_them(dashboards):
    assert dashboards["seldon-cpu"] != dashboards["kserve-cpu"]  # so each is checked, not one for all
    assert "kserve-container" in json.dumps(dashboards["kserve-cpu"])


def test_every_rendered_dashboard_matches_grafanas_published_schema(grafana_schema, dashboards, tmp_path):
    result = grafana_schema(*_write(tmp_path, dashboards))
    assert result.returncode == 0, result.stdout + result.stderr
    schema, typescript = _pinned("@grafana/schema"), _pinned("typescript")
    assert (
        f"3 dashboard(s) match @grafana/schema {schema}: Dashboard, and the options of timeseries panels "
        f"(TypeScript {typescript}, strict)"
    ) in result.stdout
    assert "no published options schema" not in result.stdout  # every panel's plugin has its kind


def test_a_broken_panel_is_refused_with_grafanas_message(grafana_schema, dashboards, tmp_path):
    """A check that cannot fail proves nothing: a field of the wrong type, a misspelled one and values outside an
    enum (at the top level and in a collapsed row) are each refused, at their JSON path, with the compiler's message
    naming Grafana's type."""
    broken = json.loads(json.dumps(dashboards["seldon-cpu"]))
    panels = broken["panels"]
    assert panels[1]["type"] == "timeseries" and panels[3]["type"] == "timeseries"
    panels[1]["gridPos"] = "x"
    panels[2]["titel"] = panels[2].pop("title")
    panels[3]["options"]["legend"]["displayMode"] = "lst"
    broken["templating"]["list"][1]["refresh"] = 7
    hidden = json.loads(json.dumps(panels[4]))  # a panel in a collapsed row is read with its plugin's kind too
    hidden["options"]["tooltip"]["mode"] = "multiple"
    panels[0].update(collapsed=True, panels=[hidden])
    (path,) = _write(tmp_path, {"broken": broken})
    result = grafana_schema(path)
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    expected = [
        f"{path}: panels[1].gridPos: Type 'string' is not assignable to type 'GridPos'. (TS2322)",
        f"{path}: panels[2].titel: Object literal may only specify known properties, and '\"titel\"' does not exist "
        "in type 'Panel'. (TS2353)",
        f"{path}: panels[3].options.legend.displayMode: Type '\"lst\"' is not assignable to type 'LegendDisplayMode'. "
        "Did you mean '\"list\"'? (TS2820)",
        f"{path}: templating.list[1].refresh: Type '7' is not assignable to type 'VariableRefresh'. (TS2322)",
        f"{path}: panels[0].panels[0].options.tooltip.mode: Type '\"multiple\"' is not assignable to type "
        "'TooltipDisplayMode'. (TS2322)",
    ]
    for line in expected:
        assert line in lines, result.stdout
    assert lines[-1] == f"5 error(s) against @grafana/schema {_pinned('@grafana/schema')} (TypeScript {_pinned('typescript')})"


@pytest.mark.parametrize(
    ("tools", "found"),
    [({}, "no node, no npm"), ({"node": "v16.20.2", "npm": "8.19.4"}, "v16.20.2")],
    ids=["no-node", "node-16"],
)
def test_make_dashboard_schema_says_in_one_line_what_node_it_needs(tmp_path, tools, found):
    """Without Node.js 18+ and npm on the path, `make dashboard-schema` (which `make test` runs) says what it needs
    in one line instead of failing inside npm; it never reaches npm here (the stamp is a file of the test's own)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "make").symlink_to(shutil.which("make") or pytest.skip("make is not installed"))
    for name, version in tools.items():  # stand-ins: node answers --version and fails its version check, as 16 does
        script = bin_dir / name
        script.write_text(f'#!{sys.executable}\nimport sys\nprint("{version}") if "--version" in sys.argv else sys.exit(1)\n')
        script.chmod(0o755)
    result = subprocess.run(
        ["make", "--no-print-directory", "dashboard-schema", f"GRAFANA_SCHEMA_STAMP={tmp_path / 'installed'}"],
        cwd=PROJECT_ROOT,
        env={"PATH": str(bin_dir), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if not re.match(r"make(\[\d+\])?: \*\*\* ", line)]
    assert lines == [
        f"make dashboard-schema: Node.js 18+ with npm is needed (found: {found}): "
        "install nodejs and npm with your package manager"
    ]
    assert not (tmp_path / "installed").exists() and result.stdout == ""
