"""build_wheels end to end on a fixture series: apply, overlay, validate, skip when unchanged."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from wheelkit import wheel_series

from forkbuild import cli
from forkbuild import manifest as manifest_module
from forkbuild.combination import of_variant
from forkbuild.console import Reporter
from forkbuild.context import Context
from forkbuild.errors import BuildError
from forkbuild.wheel.builder import WheelRequest, build_wheels, variant_version
from forkbuild.wheel.validate import validate_wheel


@pytest.fixture
def fixture(tmp_path):
    series_dir, cache, wheel = wheel_series(tmp_path)
    context = Context.create(series_dir=series_dir, cache_dir=cache, reporter=Reporter())
    return context, tmp_path / "dist"


def build(context: Context, out: Path, variant: str = "full", **options):
    return build_wheels(context=context, request=WheelRequest(variant=of_variant(context.series, variant), out_dir=out,
                                                              **options))


def test_variant_wheel_carries_the_patches_and_the_manifest(fixture):
    context, out = fixture
    (wheel,) = build(context, out)
    version = variant_version(context.series, of_variant(context.series, "full"))
    assert wheel.rebuilt and wheel.path.name == f"demo-{version}-py3-none-any.whl"
    validate_wheel(wheel.path)
    with zipfile.ZipFile(wheel.path) as archive:
        names = set(archive.namelist())
        assert archive.read("demo/core.py") == b"def answer():\n    return 42  # fast\n"
        assert archive.read("demo/base.py") == b"BASE = 1\n"
        assert "demo/extra.py" not in names
    manifest = manifest_module.read_wheel(wheel.path)
    assert manifest.version == version
    assert manifest.series_hash == of_variant(context.series, "full").content_hash(context.series)
    assert [patch.file for patch in manifest.patches] == ["base.patch", "fast.patch"]


def test_stock_variant_changes_only_version_and_manifest(fixture):
    context, out = fixture
    (wheel,) = build(context, out, variant="stock")
    with zipfile.ZipFile(wheel.path) as archive:
        assert archive.read("demo/core.py") == b"def answer():\n    return 41\n"
        assert "demo/_forkbuild_manifest.json" in archive.namelist()


def test_unchanged_variant_is_not_rebuilt(fixture):
    context, out = fixture
    (first,) = build(context, out)
    stamp = first.path.stat().st_mtime_ns
    (second,) = build(context, out)
    assert not second.rebuilt and second.path == first.path
    assert second.path.stat().st_mtime_ns == stamp
    (forced,) = build(context, out, force=True)
    assert forced.rebuilt


def test_changed_series_content_gives_a_new_version(fixture):
    context, out = fixture
    (first,) = build(context, out)
    patch = context.series.patches_dir / "fast.patch"
    patch.write_text(patch.read_text().replace("Why it matters.", "Why it matters, said better."))
    changed = Context.create(series_dir=context.series_dir, cache_dir=context.cache_dir, reporter=Reporter())
    (second,) = build(changed, out)
    assert second.rebuilt and second.path != first.path


def test_compiled_source_refused_before_anything_is_applied(fixture):
    context, out = fixture
    patch = context.series.patches_dir / "fast.patch"
    patch.write_text(patch.read_text().replace("python/demo/extra.py", "python/demo/extra.rs"))
    with pytest.raises(BuildError, match="fast.patch: python/demo/extra.rs"):
        build(context, out)
    assert not out.exists()


def test_cli_prints_the_wheel_paths(fixture, capsys):
    context, out = fixture
    code = cli.main(["-C", str(context.series_dir), "--cache", str(context.cache_dir),
                     "build-wheel", "--variant", "full", "--out", str(out)])
    assert code == 0
    printed = capsys.readouterr().out.split()
    assert [Path(line).name for line in printed] == [path.name for path in out.glob("*.whl")]


def test_cli_unknown_python_tag_is_a_config_error(fixture):
    context, out = fixture
    code = cli.main(["-C", str(context.series_dir), "--cache", str(context.cache_dir),
                     "build-wheel", "--python-tag", "cp399", "--out", str(out)])
    assert code == 2
