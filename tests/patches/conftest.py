"""Runs the per-feature tests against the installed (patched) sglang.

Which features are built in comes from the installed wheel's manifest; a tree
without one (a developer's PYTHONPATH checkout) falls back to the guards its
environ.py declares, mapped to features through series.toml.
FORKBUILD_TEST_FEATURES=a,b overrides both.

With FORKBUILD_TEST_RESULTS=<path>, the outcome of every test is written there
as JSON (one record per test: feature, check, test, outcome, reason, and for a
failure the exception: type, message, and the missing name of an ImportError
or AttributeError) for `forkbuild test-patch` to summarise.
"""

from __future__ import annotations

import importlib.resources
import json
import os
import re
import subprocess
import tomllib
import types
from functools import cache
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
CHECK_MARKERS = ("guard_off", "guard_on", "absent")
RESULTS_ENV = "FORKBUILD_TEST_RESULTS"
FEATURES_ENV = "FORKBUILD_TEST_FEATURES"
DEVICE_ENV = "FORKBUILD_TEST_DEVICE"  # set by `forkbuild test-patch --device`
RECORDER = "forkbuild-recorder"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "guard_off: the feature's guards unset; asserts stock behaviour")
    config.addinivalue_line("markers", "guard_on: the test turns the guard on; asserts the feature")
    config.addinivalue_line("markers", "absent: the feature is not built in; asserts it is absent")
    config.addinivalue_line("markers", "cuda: GPU-only; runs under `test-patch --device cuda`, skipped on a CPU run")
    config.addinivalue_line("markers", "gb10(kernels): needs a GB10 (SM12x) GPU for the named kernels; skipped elsewhere")
    config.pluginmanager.register(_Recorder(), RECORDER)


# -- which features are built in -----------------------------------------------

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
    # The override lets the harness prove guard_on tests fail on an sglang that
    # lacks the patch.
    override = os.environ.get(FEATURES_ENV)
    if override is not None:
        return frozenset(name for name in override.split(",") if name)
    manifest = _installed_manifest()
    if manifest is not None:
        return frozenset(manifest["features"])
    return frozenset(_features_from_declared_guards())


# -- feature and check of each test -------------------------------------------

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


_CLASSIFIED = pytest.StashKey[tuple[str, str]]()
_SKIPPED = pytest.StashKey[bool]()  # the test skipped in its setup or its call


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Checked at collection, so a test without FEATURE or with the wrong
    # markers stops the run before anything executes.
    recorder = config.pluginmanager.get_plugin(RECORDER)
    for item in items:
        item.stash[_CLASSIFIED] = (_feature_of(item), _check_of(item))
        recorder.classify(item.nodeid, *item.stash[_CLASSIFIED])


@pytest.fixture(autouse=True)
def _feature_gate(request: pytest.FixtureRequest, built_features, monkeypatch):
    """Skip what does not apply to this build; start every test with no DSV41_* set;
    afterwards, hold the test to its marker (see _guard_discipline)."""
    for name in list(os.environ):
        if name.startswith("DSV41_"):
            monkeypatch.delenv(name)
    feature, check = request.node.stash[_CLASSIFIED]
    built = feature in built_features
    if check == "absent" and built:
        pytest.skip(f"{feature} is built into this variant")
    if check != "absent" and not built:
        pytest.skip(f"{feature} is not built into this variant")
    _device_gate(request.node)
    seen = _watch_guards(monkeypatch)
    yield
    # A test that skipped (from a fixture or its body, once the watch began) proved nothing either
    # way: it is reported as skipped, not held to its marker.
    if not request.node.stash.get(_SKIPPED, False):
        _guard_discipline(request.node.nodeid, feature, check, seen)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    if report.when in ("setup", "call") and report.skipped:
        item.stash[_SKIPPED] = True
    return report


def _device_gate(item: pytest.Item) -> None:
    """GPU-only tests run under --device cuda; GB10-only ones only on an SM12x GPU."""
    device = os.environ.get(DEVICE_ENV, "cpu")
    gb10 = item.get_closest_marker("gb10")
    if (gb10 or item.get_closest_marker("cuda")) and device != "cuda":
        pytest.skip("GPU-only: runs under `forkbuild test-patch --device cuda` on a machine with a CUDA GPU")
    if gb10:
        import torch

        major, minor = torch.cuda.get_device_capability()
        if major != 12:
            pytest.skip(f"needs a GB10 (SM12x) for {', '.join(gb10.args)}; "
                        f"this GPU is {torch.cuda.get_device_name()} (SM {major}.{minor})")


@pytest.fixture(scope="session")
def test_device() -> str:
    """Where the tests' tensors live: 'cuda' under `test-patch --device cuda`, else 'cpu'."""
    return os.environ.get(DEVICE_ENV, "cpu")


# -- guard discipline -----------------------------------------------------------

@cache
def _feature_guards() -> dict[str, dict[str, str]]:
    """series.toml: each feature's guard variables and their (off) defaults."""
    series = tomllib.loads((REPO_ROOT / "series.toml").read_text())
    return {name: {guard["env"]: str(guard.get("default", "")) for guard in feature.get("guards", [])}
            for name, feature in series["features"].items()}


_OFF = {"", "0", "off", "false", "no", "n"}


def _is_off(value: str, default: str) -> bool:
    """The guard's off spelling, or its default (the default of every guard is off)."""
    if value.strip().lower() in _OFF or value == default:
        return True
    try:
        return float(value) == float(default)
    except ValueError:
        return False


def _watch_guards(monkeypatch) -> list[tuple[str, str]]:
    """Every DSV41_* value the test sets, in os.environ (monkeypatch.setenv,
    os.environ[...] =) or in the env of a process it starts."""
    seen: list[tuple[str, str]] = []
    set_item = os._Environ.__setitem__
    popen_init = subprocess.Popen.__init__

    def recording_set_item(environ, key, value):
        if isinstance(key, str) and key.startswith("DSV41_"):
            seen.append((key, value))
        set_item(environ, key, value)

    def recording_popen_init(process, *args, **kwargs):
        env = kwargs.get("env")
        seen.extend((key, value) for key, value in (env or {}).items()
                    if isinstance(key, str) and key.startswith("DSV41_") and os.environ.get(key) != value)
        popen_init(process, *args, **kwargs)

    monkeypatch.setattr(os._Environ, "__setitem__", recording_set_item)
    monkeypatch.setattr(subprocess.Popen, "__init__", recording_popen_init)
    return seen


def _guard_discipline(nodeid: str, feature: str, check: str, seen: list[tuple[str, str]]) -> None:
    """A guard_on test must set one of its feature's guards (a test that only
    calls a helper proves nothing about the switch); a guard_off test must leave
    them off, so that what it asserts is the stock behaviour the proof
    (forkbuild test-patch on stock + declarations) checks it against."""
    guards = _feature_guards().get(feature, {})
    if not guards:
        return  # `guards` itself: the machinery, no switch of its own
    mine = [(key, value) for key, value in seen if key in guards]
    if check == "guard_on" and not mine:
        pytest.fail(f"{nodeid}: marked guard_on but never set {' or '.join(sorted(guards))}; set the guard "
                    "(monkeypatch.setenv) and test through the code that reads it", pytrace=False)
    if check == "guard_off":
        on = [f"{key}={value!r}" for key, value in mine if not _is_off(value, guards[key])]
        if on:
            pytest.fail(f"{nodeid}: marked guard_off but sets {', '.join(on)}; a guard_off test asserts stock "
                        "behaviour with the feature's guards off", pytrace=False)


# -- recording outcomes --------------------------------------------------------

_RANK = {"pass": 0, "skip": 1, "fail": 2}


class _Recorder:
    """A plugin keeping one record per test; the worst phase (setup, call,
    teardown) decides its outcome. Written at the end of the session."""

    def __init__(self) -> None:
        self.classified: dict[str, tuple[str, str]] = {}
        self.records: dict[str, dict] = {}

    def classify(self, nodeid: str, feature: str, check: str) -> None:
        self.classified[nodeid] = (feature, check)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        report = yield
        # The report keeps only the formatted traceback; the harness needs the
        # exception itself (type, missing name) to judge why a test failed.
        if report.failed and call.excinfo is not None:
            report.forkbuild_exception = _describe(call.excinfo.value)
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        feature, check = self.classified.get(report.nodeid, ("", "collect"))
        outcome, reason = _outcome_of(report)
        current = self.records.get(report.nodeid)
        if current is not None and _RANK[current["outcome"]] >= _RANK[outcome]:
            return
        self.records[report.nodeid] = {"feature": feature, "check": check, "test": report.nodeid,
                                       "outcome": outcome, "reason": reason,
                                       "exception": getattr(report, "forkbuild_exception", None)}

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.records[report.nodeid] = {"feature": "", "check": "collect", "test": report.nodeid,
                                           "outcome": "fail", "reason": _first_line(str(report.longrepr))}

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        target = os.environ.get(RESULTS_ENV)
        if target:
            _write_json(Path(target), list(self.records.values()))


def _write_json(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(temporary, path)


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


_CANNOT_IMPORT = re.compile(r"cannot import name '(?P<name>\w+)'(?: from '(?P<owner>[\w.]+)')?")
# AttributeError's own wording, and monkeypatch.setattr's "<repr> has no attribute 'x'"
# (a module's repr: <module 'a.b' from '...'>).
_NO_ATTRIBUTE = re.compile(r"(?:<?module '(?P<module>[\w.]+)'(?: from '[^']*'>)?|type object '(?P<cls>\w+)'"
                           r"|'(?P<type>\w+)' object|<(?:[\w.]+\.)?(?P<repr>\w+) object at 0x[0-9a-f]+>)"
                           r" has no attribute '(?P<name>\w+)'")


def _describe(error: BaseException) -> dict:
    """Type and first message line of `error`; for an import or attribute
    error also the name that is missing and what it is missing from."""
    described = {"type": type(error).__name__, "message": _first_line(str(error))}
    described.update(_missing(error))
    return described


def _missing(error: BaseException) -> dict:
    if isinstance(error, ModuleNotFoundError) and error.name:
        return {"missing": error.name, "owner": ""}
    if isinstance(error, ImportError):
        match = _CANNOT_IMPORT.search(str(error))
        return {"missing": match["name"], "owner": match["owner"] or error.name or ""} if match else {}
    if isinstance(error, AttributeError):
        match = _NO_ATTRIBUTE.search(str(error))
        name = getattr(error, "name", None) or (match["name"] if match else None)
        if name is None:
            return {}
        return {"missing": name, "owner": _owner(getattr(error, "obj", None), match)}
    return {}


def _owner(obj, match: re.Match | None) -> str:
    if isinstance(obj, types.ModuleType):
        return obj.__name__
    if isinstance(obj, type):
        return obj.__name__
    if obj is not None:
        return type(obj).__name__
    if match is None:
        return ""
    return match["module"] or match["cls"] or match["type"] or match["repr"] or ""


def _outcome_of(report: pytest.TestReport) -> tuple[str, str]:
    if report.passed:
        return "pass", ""
    if report.skipped:
        # A skip's longrepr is (file, line, "Skipped: reason").
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        return "skip", reason.removeprefix("Skipped: ")
    crash = getattr(report.longrepr, "reprcrash", None)
    message = crash.message if crash is not None else str(report.longrepr)
    return "fail", f"{report.when}: {_first_line(message)}"
