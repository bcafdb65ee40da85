"""mypy checks every package; the modules it excuses ([[tool.mypy.overrides]] ignore_errors) are a list that only
shrinks: each names a module that exists, so a module moved or deleted leaves no stale excuse behind."""

import tomllib

from slipway.paths import PROJECT_ROOT


def test_mypy_checks_every_package_and_excuses_only_modules_that_exist():
    config = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert set(config["files"]) == {
        "slipway",
        "engine",
        "wrappers",
        "export",
        "loadtest",
        "deployments",
        "benchmarks",
        "localcluster",
    }
    excused = [
        module for override in config.get("overrides", []) if override.get("ignore_errors") for module in override["module"]
    ]
    assert excused == sorted(excused) and len(excused) == len(set(excused))
    missing = [module for module in excused if not (PROJECT_ROOT / (module.replace(".", "/") + ".py")).is_file()]
    assert not missing, f"excused modules that no longer exist (remove them from pyproject.toml): {missing}"
    assert not any(module.startswith("slipway.") for module in excused), "the core is checked whole"
    assert not any(module.startswith("engine.") for module in excused), "the engine is checked whole"


def test_the_core_and_the_engine_are_checked_strictly():
    overrides = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["overrides"]
    strict = [override for override in overrides if {"slipway.*", "engine.*"} <= set(override["module"])]
    assert strict, "an override holding slipway.* and engine.* checks them as --strict would"
    flags = {"disallow_untyped_defs", "disallow_any_generics", "disallow_untyped_calls", "warn_return_any", "strict_equality"}
    assert all(strict[0].get(flag) is True for flag in flags), strict[0]
