"""build_wheels end to end on a fixture series: apply, overlay, validate, skip when unchanged."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

from forkbuild import cli
from forkbuild.console import Reporter
from forkbuild.context import Context
from forkbuild.errors import BuildError
from forkbuild.series.combination import of_variant
from forkbuild.wheel import manifest as manifest_module
from forkbuild.wheel.builder import WheelRequest, build_wheels, variant_version
from forkbuild.wheel.validate import validate_wheel
from wheelkit import BASE_EDITS, make_patch, wheel_series


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


def platform_series(tmp_path, *, aarch64_core: str | None = None) -> tuple[Context, Path]:
    """The fixture series pinning an x86_64 wheel (imported: the first pin) and an aarch64 one,
    whose demo/core.py is `aarch64_core` where given (else the same files)."""
    series_dir, cache, wheel = wheel_series(tmp_path)
    pins = ""
    for arch in ("x86_64", "aarch64"):
        name = wheel.name.replace("-any.whl", f"-manylinux_2_34_{arch}.whl")
        with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(cache / "wheels" / name, "w") as target:
            for info in source.infolist():
                data = source.read(info)
                if arch == "aarch64" and info.filename == "demo/core.py" and aarch64_core is not None:
                    data = aarch64_core.encode()
                target.writestr(info, data)
        sha = hashlib.sha256((cache / "wheels" / name).read_bytes()).hexdigest()
        pins += f'[[upstream.wheels]]\npython_tag = "py3"\nfilename = "{name}"\nsha256 = "{sha}"\n\n'
    toml = series_dir / "series.toml"
    text = toml.read_text()
    start = text.index("[[upstream.wheels]]")
    end = text.index("[", text.index("sha256", start))
    toml.write_text(text[:start] + pins + text[end:])
    return Context.create(series_dir=series_dir, cache_dir=cache, reporter=Reporter()), tmp_path / "dist"


def test_every_platform_gets_the_one_plan_and_platform_picks_one(tmp_path):
    context, out = platform_series(tmp_path)
    assert context.series.variants["full"].platforms == ("linux/amd64", "linux/arm64")
    wheels = build(context, out)
    assert [wheel.path.name.rsplit("-", 1)[-1] for wheel in wheels] == ["manylinux_2_34_x86_64.whl",
                                                                        "manylinux_2_34_aarch64.whl"]
    contents = []
    for wheel in wheels:
        validate_wheel(wheel.path)
        with zipfile.ZipFile(wheel.path) as archive:
            contents.append(archive.read("demo/core.py"))
    assert contents == [b"def answer():\n    return 42  # fast\n"] * 2
    (only,) = build(context, tmp_path / "arm", platforms=("linux/arm64",))
    assert only.path.name.endswith("_aarch64.whl")


def test_a_platform_wheel_whose_original_differs_is_refused_naming_it(tmp_path):
    context, out = platform_series(tmp_path, aarch64_core="def answer():\n    return 40\n")
    with pytest.raises(BuildError, match=r"manylinux_2_34_aarch64.whl: 1 file\(s\) the series changes differ "
                                         r"from upstream as imported .*: demo/core.py"):
        build(context, out)
    assert not list(out.glob("*aarch64*.whl"))


def test_a_patch_adding_a_top_level_package_outside_the_wheel_stops_the_build(tmp_path):
    series_dir, cache, _ = wheel_series(tmp_path)
    files = {path.relative_to(tmp_path / "work-base").as_posix(): path.read_bytes()
             for path in (tmp_path / "work-base").rglob("*") if path.is_file() and ".git" not in path.parts}
    (series_dir / "patches" / "base.patch").write_text(make_patch(
        tmp_path / "work-new", base=files, subject="demo: add base", feature="base",
        edits={**BASE_EDITS, "python/newpkg/__init__.py": b"NEW = 1\n"}))
    context = Context.create(series_dir=series_dir, cache_dir=cache, reporter=Reporter())
    with pytest.raises(BuildError, match=r"adds python/newpkg/__init__.py, outside the release wheel's packages"):
        build(context, tmp_path / "dist", variant="full")
    assert not list(tmp_path.glob("dist/*.whl"))


def test_a_dist_wheel_changed_since_its_build_is_rebuilt_not_up_to_date(fixture):
    context, out = fixture
    (first,) = build(context, out)
    assert (out / f"{first.path.name}.sha256").read_text().split() == [
        hashlib.sha256(first.path.read_bytes()).hexdigest(), first.path.name]
    good = first.path.read_bytes()
    with zipfile.ZipFile(first.path, "a") as archive:  # its manifest untouched, a payload added
        archive.writestr("demo/payload.py", "print('not what forkbuild built')\n")
    (again,) = build(context, out)
    assert again.rebuilt and again.path.read_bytes() == good
    (third,) = build(context, out)
    assert not third.rebuilt
    # A damaged record (not UTF-8: a disk error, an editor): rebuilt, no UnicodeDecodeError traceback.
    (out / f"{first.path.name}.sha256").write_bytes(b"\xff\xfe")
    (fourth,) = build(context, out)
    assert fourth.rebuilt and fourth.path.read_bytes() == good
