"""The runtime manifest: built from the series, serialised stably, read back."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import sys
import zipfile
from pathlib import Path

import pytest

from forkbuild.errors import BuildError
from forkbuild.series.combination import of_variant
from forkbuild.series.config import load_series
from forkbuild.wheel import manifest
from wheelkit import wheel_series


@pytest.fixture
def series(tmp_path):
    series_dir, _, _ = wheel_series(tmp_path)
    return load_series(series_dir / "series.toml")


def _built(series, name: str, version: str, pin=None) -> manifest.Manifest:
    """build-wheel's way: the content hash once, then the manifest of each pinned wheel."""
    combination = of_variant(series, name)
    built = manifest.build_manifest(series=series, variant=combination, version=version,
                                    content_hash=combination.content_hash(series))
    return built.from_pin(pin) if pin else built


def test_manifest_describes_the_variant(series):
    pin = series.upstream.wheels[0]
    built = _built(series, "full", "1.0+full.x", pin)
    assert list(built.to_json()) == list(manifest.KEYS)
    assert built.series == "demo-series" and built.variant == "full" and built.version == "1.0+full.x"
    assert built.base_variant == "full"  # a named variant carries its own defaults
    assert built.series_hash == of_variant(series, "full").content_hash(series)
    assert built.upstream == manifest.UpstreamRecord(name="demo", version="1.0", source="wheel", wheel=pin.filename,
                                                     sha256=pin.sha256)
    assert built.to_json()["upstream"] == {"name": "demo", "version": "1.0", "source": "wheel", "wheel": pin.filename,
                                           "sha256": pin.sha256, "git_url": "", "commit": ""}
    assert built.features == ("base", "fast")
    assert built.to_json()["guards"] == [{"env": "DSV41_FAST", "feature": "fast", "type": "switch", "default": "0"}]
    assert built.series_guards == built.guards
    assert built.runtime_settings == ("MODEL_PATH", "TP_SIZE")
    assert built.env_defaults == {"MODEL_PATH": "/models/demo", "DSV41_FAST": "1", "TP_SIZE": "4"}
    fast = series.patches_dir / "fast.patch"
    assert built.patches[1] == manifest.PatchRecord(file="fast.patch", feature="fast",
                                                    sha256=hashlib.sha256(fast.read_bytes()).hexdigest())


def test_variant_without_features_still_lists_the_series_guards(series):
    built = _built(series, "stock", "1.0+stock.x")
    assert built.features == () and built.guards == () and built.patches == ()
    assert [guard.env for guard in built.series_guards] == ["DSV41_FAST"]
    assert built.upstream.wheel == "" and built.upstream.sha256 == ""


def test_dumps_is_stable_and_parses_back(series):
    built = _built(series, "full", "1.0+full.x")
    again = _built(series, "full", "1.0+full.x")
    assert manifest.dumps(built) == manifest.dumps(again)
    assert manifest.parse(manifest.dumps(built), source="m") == built
    assert manifest.dumps(manifest.parse(manifest.dumps(built), source="m")) == manifest.dumps(built)


def test_a_manifest_from_before_combinations_reads_without_base_variant(series):
    built = _built(series, "full", "1.0+full.x")
    older = {key: value for key, value in built.to_json().items() if key != "base_variant"}
    read = manifest.parse(json.dumps(older), source="old.json")
    assert read.base_variant == "" and read != built  # so a wheel with it is rebuilt, not taken as current
    assert dataclasses.replace(read, base_variant="full") == built


@pytest.mark.parametrize("data, message", [
    (b"not json", "not a JSON manifest"),
    (b'{"schema": 2}', "schema 1"),
    (b'{"schema": 1, "series": "x"}', "lacks variant"),
    (b'{"schema": 1, "series": "x", "variant": "v", "version": "1", "series_hash": "h", "upstream": {"name": "n"}, '
     b'"features": [], "guards": [], "series_guards": [], "runtime_settings": [], "env_defaults": {}, "patches": []}',
     "'upstream', entry 0: .*version"),
    (b'{"schema": 1, "series": "x", "variant": "v", "version": "1", "series_hash": "h", '
     b'"upstream": {"name": "n", "version": "1", "source": "wheel"}, "features": "base", "guards": [], '
     b'"series_guards": [], "runtime_settings": [], "env_defaults": {}, "patches": []}',
     "'features' is not a list of strings"),
    (b'{"schema": 1, "series": "x", "variant": "v", "version": "1", "series_hash": "h", '
     b'"upstream": {"name": "n", "version": "1", "source": "wheel"}, "features": [], '
     b'"guards": [{"env": "E", "feature": "f", "type": "switch", "default": "0", "extra": "?"}], '
     b'"series_guards": [], "runtime_settings": [], "env_defaults": {}, "patches": []}',
     "'guards', entry 0: not a GuardRecord"),
    (b'{"schema": 1, "series": 7, "variant": "v", "version": "1", "series_hash": "h", "upstream": {}, '
     b'"features": [], "guards": [], "series_guards": [], "runtime_settings": [], "env_defaults": {}, "patches": []}',
     "'series' is not a string"),
])
def test_parse_rejects_what_is_not_a_manifest(data, message):
    with pytest.raises(BuildError, match=message):
        manifest.parse(data, source="somewhere.json")


def test_read_wheel(tmp_path, series):
    built = _built(series, "full", "1.0+full.x")
    path = tmp_path / "demo-1.0+full.x-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("demo-1.0+full.x.dist-info/forkbuild_manifest.json", manifest.dumps(built))
    assert manifest.read_wheel(path) == built
    plain = tmp_path / "demo-1.0-py3-none-any.whl"
    with zipfile.ZipFile(plain, "w") as archive:
        archive.writestr("demo-1.0.dist-info/METADATA", "Version: 1.0\n")
    assert manifest.read_wheel(plain) is None
    (tmp_path / "broken.whl").write_bytes(b"PK nonsense")
    with pytest.raises(BuildError, match="cannot read the wheel"):
        manifest.read_wheel(tmp_path / "broken.whl")


def test_test_patch_reads_the_installed_manifest_typed(tmp_path, monkeypatch, series):
    """What `test-patch --installed` and the reinstall check read: the manifest of the sglang a Python
    imports, typed; None without one; an unreadable one is an error naming that Python."""
    from forkbuild.testpatch import behaviour

    package = tmp_path / "site" / "sglang"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    python = Path(sys.executable)
    assert behaviour.installed_manifest(python) is None
    built = _built(series, "full", "1.0+full.x")
    (package / manifest.PACKAGE_FILE).write_bytes(manifest.dumps(built))
    assert behaviour.installed_manifest(python) == built
    (package / manifest.PACKAGE_FILE).write_text('{"schema": 1, "series": "x"}')
    with pytest.raises(BuildError, match=f"sglang's manifest under {re.escape(str(python))}: manifest lacks variant"):
        behaviour.installed_manifest(python)
