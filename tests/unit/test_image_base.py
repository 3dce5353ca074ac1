"""Base images are cached by content: their tags follow their recipes, and the
mmdebstrap tarball is made once per recipe."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from forkbuild.console import Reporter
from forkbuild.image import base
from forkbuild.series.config import WheelPin

DOCKER_DIR = Path(__file__).parents[2] / "docker"
PIN = WheelPin(python_tag="cp311", filename="sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl", sha256="aa" * 32)


@pytest.fixture
def docker_dir(tmp_path: Path) -> Path:
    shutil.copytree(DOCKER_DIR / "base", tmp_path / "base")
    return tmp_path


def test_python_base_tag_follows_its_recipe_and_platform(docker_dir):
    before = base.python_base_tag(docker_dir, "linux/amd64")
    assert before == base.python_base_tag(docker_dir, "linux/amd64")
    assert before.startswith("forkbuild-base/python:3.11-amd64-")
    assert base.python_base_tag(docker_dir, "linux/arm64").startswith("forkbuild-base/python:3.11-arm64-")
    with open(docker_dir / "base" / "python.Dockerfile", "a") as handle:
        handle.write("RUN true\n")
    assert base.python_base_tag(docker_dir, "linux/amd64") != before


def test_stock_base_tag_follows_the_python_base_and_the_pinned_wheel(docker_dir):
    tag = base.stock_base_tag(docker_dir=docker_dir, python_base="p:1", pin=PIN, version="0.5.23")
    assert tag.startswith("forkbuild-base/sglang:0.5.23-cp311-amd64-")
    assert tag != base.stock_base_tag(docker_dir=docker_dir, python_base="p:2", pin=PIN, version="0.5.23")
    other = WheelPin(python_tag="cp311", filename=PIN.filename, sha256="bb" * 32)
    assert tag != base.stock_base_tag(docker_dir=docker_dir, python_base="p:1", pin=other, version="0.5.23")


def test_rootfs_tarball_of_the_same_recipe_is_reused(tmp_path, monkeypatch):
    cached = tmp_path / "docker" / f"rootfs-{base.rootfs_key('linux/arm64')}.tar"
    cached.parent.mkdir()
    cached.write_bytes(b"tar")

    def no_mmdebstrap(*args, **kwargs):
        raise AssertionError("mmdebstrap ran although the tarball is cached")

    monkeypatch.setattr(base, "_mmdebstrap_to", no_mmdebstrap)
    assert base.rootfs_tarball(tmp_path, "linux/arm64", reporter=Reporter()) == cached


def test_rootfs_key_follows_the_recipe(monkeypatch):
    before = base.rootfs_key("linux/amd64")
    assert base.rootfs_key("linux/arm64") != before  # mmdebstrap --arch
    monkeypatch.setitem(base.ROOTFS_RECIPE, "suite", "trixie")
    assert base.rootfs_key("linux/amd64") != before
