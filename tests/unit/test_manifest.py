"""The runtime manifest: built from the series, serialised stably, read back."""

from __future__ import annotations

import hashlib
import json
import zipfile

import pytest
from wheelkit import wheel_series

from forkbuild import manifest
from forkbuild.config import load_series
from forkbuild.errors import BuildError


@pytest.fixture
def series(tmp_path):
    series_dir, _, _ = wheel_series(tmp_path)
    return load_series(series_dir / "series.toml")


def test_manifest_describes_the_variant(series):
    pin = series.upstream.wheels[0]
    built = manifest.build_manifest(series=series, variant="full", version="1.0+full.x", pin=pin)
    assert list(built) == list(manifest.KEYS)
    assert built["series"] == "demo-series" and built["variant"] == "full" and built["version"] == "1.0+full.x"
    assert built["series_hash"] == series.content_hash("full")
    assert built["upstream"] == {"name": "demo", "version": "1.0", "source": "wheel", "wheel": pin.filename,
                                 "sha256": pin.sha256, "git_url": "", "commit": ""}
    assert built["features"] == ["base", "fast"]
    assert built["guards"] == [{"env": "DSV41_FAST", "feature": "fast", "type": "switch", "default": "0"}]
    assert built["series_guards"] == built["guards"]
    assert built["runtime_settings"] == ["MODEL_PATH", "TP_SIZE"]
    assert built["env_defaults"] == {"MODEL_PATH": "/models/demo", "DSV41_FAST": "1", "TP_SIZE": "4"}
    fast = series.patches_dir / "fast.patch"
    assert built["patches"][1] == {"file": "fast.patch", "feature": "fast",
                                   "sha256": hashlib.sha256(fast.read_bytes()).hexdigest()}


def test_variant_without_features_still_lists_the_series_guards(series):
    built = manifest.build_manifest(series=series, variant="stock", version="1.0+stock.x", pin=None)
    assert built["features"] == [] and built["guards"] == [] and built["patches"] == []
    assert [guard["env"] for guard in built["series_guards"]] == ["DSV41_FAST"]
    assert built["upstream"]["wheel"] == "" and built["upstream"]["sha256"] == ""


def test_dumps_is_stable_and_parses_back(series):
    built = manifest.build_manifest(series=series, variant="full", version="1.0+full.x", pin=None)
    again = manifest.build_manifest(series=series, variant="full", version="1.0+full.x", pin=None)
    assert manifest.dumps(built) == manifest.dumps(again)
    assert manifest.parse(manifest.dumps(built), source="m") == built


@pytest.mark.parametrize("data, message", [
    (b"not json", "not a JSON manifest"),
    (b'{"schema": 2}', "schema 1"),
    (b'{"schema": 1, "series": "x"}', "lacks variant"),
])
def test_parse_rejects_what_is_not_a_manifest(data, message):
    with pytest.raises(BuildError, match=message):
        manifest.parse(data, source="somewhere.json")


def test_read_wheel(tmp_path, series):
    built = manifest.build_manifest(series=series, variant="full", version="1.0+full.x", pin=None)
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


def test_read_installed(tmp_path, monkeypatch, series):
    package = tmp_path / "site" / "demo_installed"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert manifest.read_installed("demo_installed") is None
    built = manifest.build_manifest(series=series, variant="full", version="1.0+full.x", pin=None)
    (package / manifest.PACKAGE_FILE).write_bytes(manifest.dumps(built))
    assert manifest.read_installed("demo_installed") == json.loads(manifest.dumps(built))
