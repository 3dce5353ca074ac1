"""Behaviour: tests/patches under pytest against the variant's sglang (its wheel installed in a
test Python, or an applied tree on PYTHONPATH), each test's outcome a record."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from forkbuild.context import Context
from forkbuild.errors import BuildError
from forkbuild.io import process
from forkbuild.series.combination import Combination
from forkbuild.series.config import native_platform
from forkbuild.wheel import manifest as manifest_module
from forkbuild.wheel.builder import WheelRequest, build_wheels

TESTS_DIR = "tests/patches"
RESULTS_ENV = "FORKBUILD_TEST_RESULTS"  # tests/patches/conftest.py writes each test's outcome there
FEATURES_ENV = "FORKBUILD_TEST_FEATURES"  # and takes the built-in features from here when set
# pytest: 0 all passed, 1 some failed, 5 nothing collected; anything else means
# the run itself broke (usage error, internal error, interrupted).
PYTEST_RAN = (0, 1, 5)


@dataclass(frozen=True, kw_only=True)
class TestPython:
    """The interpreter the tests run with, and how it finds sglang."""

    executable: Path
    env: Mapping[str, str]


def _probe(python: Path, code: str) -> str:
    done = process.run([str(python), "-c", code])
    if done.status != 0:
        raise BuildError(f"{python} failed to run: {done.stderr.strip()}")
    return done.stdout.strip()


def require_torch(python: Path) -> None:
    found = _probe(python, "import importlib.util; print(importlib.util.find_spec('torch') is not None)")
    if found != "True":
        raise BuildError(f"{python} has no torch: the behaviour tests need the test venv",
                         hint="run `nox -s test-patch`, or pass --python <venv>/bin/python of a venv made from "
                              "constraints/test-patch.txt (pip install -c constraints/test-patch.txt -r constraints/test-patch.in)")


def install_variant_wheel(*, context: Context, variant: Combination, python: Path) -> Path:
    """Build (or reuse) the variant's wheel for `python` and install it there --no-deps,
    unless exactly that build is installed already."""
    request = WheelRequest(variant=variant, out_dir=context.dist_dir, platforms=(native_platform(),), python_tags=(
        _probe(python, "import sys; print(f'cp{sys.version_info[0]}{sys.version_info[1]}')"),))
    (wheel,) = build_wheels(context=context, request=request)
    wanted = manifest_module.read_wheel(wheel.path)
    try:
        installed = installed_manifest(python)
    except BuildError:
        installed = None  # an unreadable manifest there: the wheel is installed over it
    if installed == wanted:
        context.reporter.info(f"{wheel.path.name} is installed already")
        return wheel.path
    # uv where there is one (nox passes its own as UV); not byte-compiled: the tests compile what they import.
    uv = os.environ.get("UV") or shutil.which("uv")
    installer = [uv, "pip", "install", "--python", str(python), "--reinstall"] if uv else \
        [str(python), "-m", "pip", "install", "--force-reinstall", "--no-compile", "--disable-pip-version-check"]
    with context.reporter.step(f"Installing {wheel.path.name} --no-deps ({'uv' if uv else 'pip'})"):
        done = process.run([*installer, "--no-deps", "--quiet", str(wheel.path)])
        context.reporter.detail(done.stdout + done.stderr)
        if done.status != 0:
            raise BuildError(f"could not install {wheel.path.name} into {python}:\n{done.stderr.strip()}")
    return wheel.path


# Reads the installed manifest without importing sglang (its __init__ takes seconds).
_READ_INSTALLED = f"""
import importlib.util, json, pathlib
spec = importlib.util.find_spec("sglang")
path = spec and pathlib.Path(list(spec.submodule_search_locations)[0], {manifest_module.PACKAGE_FILE!r})
print(path.read_text() if path and path.is_file() else "null")
"""


def installed_manifest(python: Path) -> manifest_module.Manifest | None:
    """The manifest of the sglang `python` imports; None for a stock install (or none)."""
    text = _probe(python, _READ_INSTALLED)
    return None if text == "null" else manifest_module.parse(text, source=f"sglang's manifest under {python}")


def run_tests(*, context: Context, python: TestPython, features: str | None = None,
              markers: str = "", shards: int = 1) -> list[dict]:
    """tests/patches' records from the conftest. `features`: FORKBUILD_TEST_FEATURES (None: the
    installed manifest decides); `shards` pytest processes side by side, the files dealt out."""
    tests = context.series_dir / TESTS_DIR
    files = sorted({*tests.glob("test_*.py"), *tests.glob("*_test.py")})  # pytest's default python_files
    groups = [files[number::shards] for number in range(min(shards, len(files)))] if shards > 1 and files \
        else [[tests]]
    with ThreadPoolExecutor(max_workers=len(groups)) as pool:
        runs = [pool.submit(_pytest, context, python, group, features=features, markers=markers) for group in groups]
        return [record for run in runs for record in run.result()]


def _pytest(context: Context, python: TestPython, paths: list[Path], *, features: str | None,
            markers: str) -> list[dict]:
    env: dict[str, str | None] = {**python.env, FEATURES_ENV: features}
    with tempfile.TemporaryDirectory(prefix="forkbuild-pytest-") as scratch:
        results = Path(scratch) / "results.json"
        env[RESULTS_ENV] = str(results)
        # -v: pytest names each test as it ends, so a run cut off shows how far it got.
        live = context.reporter.verbose
        command = [str(python.executable), "-m", "pytest", "-p", "no:cacheprovider", "-v" if live else "-q", "-rfE",
                   "--rootdir", str(context.series_dir), *(str(path) for path in paths)]
        if markers:
            command += ["-m", markers]
        done = process.run(command, cwd=context.series_dir, env=env, capture=not live)
        if done.status not in PYTEST_RAN or not results.is_file():
            output = "its output is above" if live else (done.stdout + done.stderr)[-4000:]
            raise BuildError(f"pytest did not run (exit {done.status}):\n{output}")
        return json.loads(results.read_text())


def exception_text(item: dict) -> str:
    """'<type>: <message>' of what a failed test raised, as the conftest recorded it."""
    exception = item.get("exception")
    return f"{exception['type']}: {exception['message']}" if exception else ""


def installed_package_dir(python: Path, package: str) -> Path:
    """Where `package` is installed for `python` (found without importing it)."""
    found = _probe(python, f"import importlib.util; spec = importlib.util.find_spec({package!r}); "
                           "print(list(spec.submodule_search_locations)[0] if spec else '')")
    if not found:
        raise BuildError(f"{python}: {package} is not installed")
    return Path(found)
