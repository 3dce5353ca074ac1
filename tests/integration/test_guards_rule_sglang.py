"""One switch rule: forkbuild's validation of variant env values (forkbuild.series.guards)
and the patched sglang's EnvSwitch (patches/guards-env-switch.patch) agree.

The patched environ.py is stdlib-only: it is built from the pinned upstream's
environ.py (the real sglang wheel, cached) plus the guards patch (`git apply` in
tmp_path) and the generated guards module, and loaded by file path, without
sglang's package or torch. The rule's own table: tests/unit/test_guards_rule.py.
"""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

import pytest

from forkbuild.upstream.cache import UpstreamCache
from forkbuild.worktree.guards_module import write_module
from forkbuild.io.git import Git
from forkbuild.series.config import load_series
from forkbuild.series.guards import parse_switch

REPO = Path(__file__).resolve().parents[2]
ENVIRON = "python/sglang/srt/environ.py"
GUARDS_PATCH = REPO / "patches" / "guards-env-switch.patch"
UNSET = None
# The .env spellings of the issue, both cases of each word, padding, and garbage.
VALUES = ["0", "1", "off", "on", "false", "true", "", UNSET, "garbage",
          "OFF", "On", "TRUE", "no", "yes", "n", "y", " 1 ", "2", "-1", "enabled", "0.0"]


@pytest.fixture(scope="module")
def patched_environ(tmp_path_factory) -> object:
    """sglang's environ.py with the guards patch applied, loaded as a standalone module."""
    series = load_series(REPO / "series.toml")
    cache = UpstreamCache(REPO / ".cache" / "forkbuild")
    commit = cache.ensure(series.upstream)  # downloads the pinned wheel once; offline afterwards
    root = tmp_path_factory.mktemp("environ")
    target = root / ENVIRON
    target.parent.mkdir(parents=True)
    target.write_text(Git(cache.repo_path).out("show", f"{commit}:{ENVIRON}") + "\n")
    subprocess.run(["git", "apply", f"--include={ENVIRON}", str(GUARDS_PATCH)], cwd=root, check=True,
                   capture_output=True)
    # The patch's hook registers the guards forkbuild generates next to environ.py.
    write_module(root, series=series, features=series.features)
    spec = importlib.util.spec_from_file_location("patched_sglang_environ", target)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _envswitch_reads(module, value: str | None, monkeypatch, *, default: bool) -> bool | Exception:
    field = module.EnvSwitch(default)
    field.name = "DSV41_PARITY_PROBE"  # what __set_name__ sets; Envs is closed to new fields
    if value is None:
        monkeypatch.delenv(field.name, raising=False)
    else:
        monkeypatch.setenv(field.name, value)
    try:
        return field.get()
    except ValueError as error:
        return error


def _forkbuild_reads(value: str | None, *, default: str) -> bool | Exception:
    # An unset variable takes the guard's series.toml default.
    try:
        return parse_switch(default if value is None else value)
    except ValueError as error:
        return error


@pytest.mark.integration
@pytest.mark.parametrize("value", VALUES, ids=repr)
@pytest.mark.parametrize("default", ["0", "1"])
def test_envswitch_and_forkbuild_agree(patched_environ, monkeypatch, value, default):
    sglang_side = _envswitch_reads(patched_environ, value, monkeypatch, default=parse_switch(default))
    forkbuild_side = _forkbuild_reads(value, default=default)
    if isinstance(forkbuild_side, Exception):
        assert isinstance(sglang_side, ValueError), f"{value!r}: forkbuild rejects it, EnvSwitch reads {sglang_side!r}"
        assert "DSV41_PARITY_PROBE" in str(sglang_side), "EnvSwitch's error must name the variable"
    else:
        assert sglang_side == forkbuild_side, f"{value!r}: EnvSwitch {sglang_side!r}, forkbuild {forkbuild_side!r}"


@pytest.mark.integration
def test_the_rule_sets_are_the_same(patched_environ):
    from forkbuild.series import guards

    assert patched_environ._SWITCH_ON == guards.SWITCH_ON
    assert patched_environ._SWITCH_OFF == guards.SWITCH_OFF
