"""Local base images, made without a registry and cached by content.

- the root file system: `debootstrap --variant=minbase` of Debian bookworm
  with Python 3.11, pip and venv, kept as a tarball in the forkbuild cache;
- `python` base: that tarball `docker import`ed, plus a venv (docker/base/python.Dockerfile);
- `stock` base: the python base with the pinned sglang wheel installed
  --no-deps (docker/base/stock.Dockerfile): what `delta` images build on.

Each tag carries a hash of its recipe (and inputs), so an existing image of
the same recipe is reused and a changed recipe gets a new tag.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from filelock import FileLock

from forkbuild.config import WheelPin
from forkbuild.console import Reporter
from forkbuild.errors import ToolMissing
from forkbuild.image import process
from forkbuild.image.context import link_or_copy
from forkbuild.image.docker import Docker

ROOTFS_RECIPE: dict[str, Any] = {
    "suite": "bookworm",
    "variant": "minbase",
    "include": ["python3", "python3-pip", "python3-venv"],
    "mirror": "http://deb.debian.org/debian",
}
PYTHON_BASE_REPO = "forkbuild-base/python"
STOCK_BASE_REPO = "forkbuild-base/sglang"
ROOTFS_REPO = "forkbuild-base/rootfs"
HASH_DIGITS = 12
# apt's package lists and downloaded .debs are not needed at run time (~100 MB).
ROOTFS_CLEAN = ("var/lib/apt/lists", "var/cache/apt/archives", "var/cache/apt/pkgcache.bin",
                "var/cache/apt/srcpkgcache.bin", "var/log")


def _digest(*parts: bytes | str) -> str:
    hasher = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        hasher.update(len(data).to_bytes(8, "big") + data)
    return hasher.hexdigest()[:HASH_DIGITS]


def rootfs_key() -> str:
    return _digest(json.dumps(ROOTFS_RECIPE, sort_keys=True))


def python_base_tag(docker_dir: Path) -> str:
    recipe = (docker_dir / "base" / "python.Dockerfile").read_bytes()
    return f"{PYTHON_BASE_REPO}:3.11-{_digest(rootfs_key(), recipe)}"


def stock_base_tag(*, docker_dir: Path, python_base: str, pin: WheelPin, version: str) -> str:
    recipe = (docker_dir / "base" / "stock.Dockerfile").read_bytes()
    return f"{STOCK_BASE_REPO}:{version}-{pin.python_tag}-{_digest(python_base, pin.sha256, recipe)}"


def rootfs_tarball(cache_dir: Path, *, reporter: Reporter) -> Path:
    """The debootstrap tarball of ROOTFS_RECIPE in `<cache>/docker/`, made once."""
    directory = cache_dir / "docker"
    directory.mkdir(parents=True, exist_ok=True)
    tarball = directory / f"rootfs-{rootfs_key()}.tar"
    with FileLock(str(directory / "rootfs.lock")):
        if tarball.is_file():
            return tarball
        with reporter.step(f"debootstrap {ROOTFS_RECIPE['suite']} ({ROOTFS_RECIPE['variant']}) -> {tarball.name}"):
            _debootstrap_to(tarball, reporter=reporter)
    return tarball


def _debootstrap_to(tarball: Path, *, reporter: Reporter) -> None:
    debootstrap = shutil.which("debootstrap") or ("/usr/sbin/debootstrap" if os.path.exists("/usr/sbin/debootstrap") else None)
    if not debootstrap:
        raise ToolMissing("debootstrap is not installed", hint="apt-get install debootstrap (or run .ci/dockerd.sh start)")
    # Found before debootstrap's minutes of work, not after.
    tar = process.require("tar", hint="apt-get install tar")
    with tempfile.TemporaryDirectory(dir=tarball.parent, prefix="rootfs-") as work:
        root = Path(work) / "root"
        command = [debootstrap, f"--variant={ROOTFS_RECIPE['variant']}",
                   f"--include={','.join(ROOTFS_RECIPE['include'])}",
                   ROOTFS_RECIPE["suite"], str(root), ROOTFS_RECIPE["mirror"]]
        process.run(command, reporter=reporter, missing_hint="apt-get install debootstrap", stream=True)
        for relative in ROOTFS_CLEAN:
            target = root / relative
            children = list(target.iterdir()) if target.is_dir() else [target] if target.exists() else []
            for child in children:
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child)
                else:
                    child.unlink()
        partial = Path(work) / "rootfs.tar"
        process.run([tar, "--numeric-owner", "-C", str(root), "-cf", str(partial), "."], reporter=reporter,
                    missing_hint="apt-get install tar")
        os.replace(partial, tarball)


def ensure_python_base(*, docker: Docker, docker_dir: Path, cache_dir: Path, reporter: Reporter) -> str:
    """The tag of the python base, built if this daemon does not have it."""
    tag = python_base_tag(docker_dir)
    if docker.image_exists(tag):
        reporter.info(f"python base: {tag} (present)")
        return tag
    tarball = rootfs_tarball(cache_dir, reporter=reporter)
    rootfs = f"{ROOTFS_REPO}:{rootfs_key()}"
    with reporter.step(f"python base {tag}"):
        if not docker.image_exists(rootfs):
            docker.import_tarball(tarball, tag=rootfs)
        docker.build(context=docker_dir / "base", dockerfile=docker_dir / "base" / "python.Dockerfile",
                     tag=tag, build_args={"ROOTFS": rootfs})
    return tag


def ensure_stock_base(*, docker: Docker, docker_dir: Path, python_base: str, pin: WheelPin, wheel: Path,
                      version: str, reporter: Reporter) -> str:
    """The tag of the python base plus the pinned stock wheel, built if missing."""
    tag = stock_base_tag(docker_dir=docker_dir, python_base=python_base, pin=pin, version=version)
    if docker.image_exists(tag):
        reporter.info(f"stock base: {tag} (present)")
        return tag
    with reporter.step(f"stock base {tag}"), tempfile.TemporaryDirectory(prefix="forkbuild-stock-") as work:
        context = Path(work)
        link_or_copy(wheel, context / pin.filename)
        docker.build(context=context, dockerfile=docker_dir / "base" / "stock.Dockerfile", tag=tag,
                     build_args={"PYTHON_BASE": python_base, "WHEEL": pin.filename})
    return tag
