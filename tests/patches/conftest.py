"""Runs the per-feature tests against the installed (patched) sglang.

Which features are built in comes from the installed wheel's manifest; a tree
without one (a developer's PYTHONPATH checkout) falls back to the guards its
environ.py declares, mapped to features through series.toml.
"""

from __future__ import annotations

import importlib.resources
import json
import os
import tomllib
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
CHECK_MARKERS = ("guard_off", "guard_on", "absent")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "guard_off: the feature's guards unset; asserts stock behaviour")
    config.addinivalue_line("markers", "guard_on: the test turns the guard on; asserts the feature")
    config.addinivalue_line("markers", "absent: the feature is not built in; asserts it is absent")


def _installed_manifest() -> dict | None:
    resource = importlib.resources.files("sglang") / "_forkbuild_manifest.json"
    if not resource.is_file():
        return None
    return json.loads(resource.read_text())


def _features_from_declared_guards() -> set[str]:
    from sglang.srt import environ

    declared = {name for name in vars(environ.Envs) if name.startswith("DSV41_")}
    series = tomllib.loads((REPO_ROOT / "series.toml").read_text())
    built = set()
    for name, feature in series["features"].items():
        guards = {guard["env"] for guard in feature.get("guards", [])}
        if guards and guards <= declared:
            built.add(name)
    if "EnvSwitch" in vars(environ):
        built.add("guards")
    return built


@pytest.fixture(scope="session")
def built_features() -> frozenset[str]:
    # FORKBUILD_TEST_FEATURES=a,b overrides detection: the harness uses it to
    # prove guard_on tests fail on an sglang that lacks the patch.
    override = os.environ.get("FORKBUILD_TEST_FEATURES")
    if override is not None:
        return frozenset(name for name in override.split(",") if name)
    manifest = _installed_manifest()
    if manifest is not None:
        return frozenset(manifest["features"])
    return frozenset(_features_from_declared_guards())


def _check_of(item: pytest.Item) -> str:
    checks = [name for name in CHECK_MARKERS if item.get_closest_marker(name)]
    if len(checks) != 1:
        raise pytest.UsageError(f"{item.nodeid}: needs exactly one of the markers {CHECK_MARKERS}, has {checks}")
    return checks[0]


def _feature_of(item: pytest.Item) -> str:
    feature = getattr(item.module, "FEATURE", None)
    if not feature:
        raise pytest.UsageError(f"{item.module.__file__}: set FEATURE = '<feature name>' at module level")
    return feature


@pytest.fixture(autouse=True)
def _feature_gate(request: pytest.FixtureRequest, built_features, monkeypatch) -> None:
    """Skip what does not apply to this build; start every test with no DSV41_* set."""
    for name in list(os.environ):
        if name.startswith("DSV41_"):
            monkeypatch.delenv(name)
    feature, check = _feature_of(request.node), _check_of(request.node)
    built = feature in built_features
    if check == "absent" and built:
        pytest.skip(f"{feature} is built into this variant")
    if check != "absent" and not built:
        pytest.skip(f"{feature} is not built into this variant")
