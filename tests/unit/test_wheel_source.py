"""Source mode on a fixture git upstream: a tiny pure-Python project built with
`python -m build`, then stamped with the local version and the manifest."""

from __future__ import annotations

import zipfile

import pytest

from forkbuild.console import Reporter
from forkbuild.context import Context
from forkbuild.errors import BuildError
from forkbuild.series.combination import of_variant
from forkbuild.wheel import manifest as manifest_module
from forkbuild.wheel.builder import WheelRequest, build_wheels, variant_version
from forkbuild.wheel.validate import validate_wheel
from wheelkit import VERSION_MODULE, git, make_series, write_tree

PYPROJECT = b"""\
[build-system]
requires = ["setuptools>=61", "wheel"]
build-backend = "setuptools.build_meta"

[project]
name = "demo"
version = "1.0"

[tool.setuptools.packages.find]
include = ["demo*"]
"""
PROJECT = {
    "pyproject.toml": PYPROJECT,
    "demo/__init__.py": b"from demo._version import __version__\n",
    "demo/core.py": b"def answer():\n    return 41\n",
    "demo/extra.py": b"EXTRA = True\n",
    "demo/_version.py": VERSION_MODULE.format(version="1.0").encode(),
}


@pytest.fixture
def git_series(tmp_path):
    upstream = tmp_path / "upstream-repo"
    upstream.mkdir()
    git(upstream, "init", "-q", "-b", "main")
    write_tree(upstream / "python", PROJECT)
    git(upstream, "add", "-A")
    git(upstream, "commit", "-q", "-m", "demo 1.0")
    commit = git(upstream, "rev-parse", "HEAD").strip()
    extra = f'[upstream.git]\nurl = "{upstream}"\nref = "v1.0"\ncommit = "{commit}"\n'
    series_dir = make_series(tmp_path / "series", source="git", upstream_extra=extra, base_files=PROJECT)
    return Context.create(series_dir=series_dir, cache_dir=tmp_path / "cache", reporter=Reporter())


def test_source_mode_builds_the_patched_checkout_with_the_local_version(git_series, tmp_path):
    out = tmp_path / "dist"
    (wheel,) = build_wheels(context=git_series, request=WheelRequest(variant=of_variant(git_series.series, "full"), out_dir=out, isolation=False))
    version = variant_version(git_series.series, of_variant(git_series.series, "full"))
    assert wheel.path.name == f"demo-{version}-py3-none-any.whl"
    validate_wheel(wheel.path)
    with zipfile.ZipFile(wheel.path) as archive:
        assert archive.read("demo/core.py") == b"def answer():\n    return 42  # fast\n"
        assert "demo/extra.py" not in archive.namelist()
        assert f"__version__ = version = '{version}'" in archive.read("demo/_version.py").decode()
        metadata = archive.read(f"demo-{version}.dist-info/METADATA").decode()
    assert f"\nVersion: {version}\n" in metadata
    manifest = manifest_module.read_wheel(wheel.path)
    assert manifest.upstream.source == "git" and manifest.upstream.commit
    assert manifest.upstream.wheel == ""
    (again,) = build_wheels(context=git_series, request=WheelRequest(variant=of_variant(git_series.series, "full"), out_dir=out, isolation=False))
    assert not again.rebuilt


def test_overlay_mode_needs_a_release_wheel(git_series, tmp_path):
    with pytest.raises(BuildError, match="pins none"):
        build_wheels(context=git_series, request=WheelRequest(variant=of_variant(git_series.series, "full"), out_dir=tmp_path, mode="overlay"))


def test_source_mode_builds_only_for_the_running_python(git_series, tmp_path):
    with pytest.raises(BuildError, match="running interpreter"):
        build_wheels(context=git_series, request=WheelRequest(variant=of_variant(git_series.series, "full"), out_dir=tmp_path,
                                                               python_tags=("cp27",)))
