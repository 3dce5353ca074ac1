"""Local base images, made without a registry, per platform: `python` (an mmdebstrap of bookworm with
Python 3.11 for the platform's Debian architecture, plus docker/base/python.Dockerfile) and `stock`
(plus the platform's pinned sglang wheel: what `delta` images build on). Each tag hashes its recipe:
an image of the same recipe is reused. A platform not this machine's is made under emulation
(binfmt_misc + qemu-user-static: `.ci/dockerd.sh start` registers it)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from forkbuild.console import Reporter
from forkbuild.context import Context
from forkbuild.image.docker import Docker, require, run_program
from forkbuild.io.fsutil import flocked, link_or_copy
from forkbuild.series.config import WheelPin, arch_of

# mmdebstrap leaves out apt's package lists, its downloaded .debs and the logs (~100 MB).
ROOTFS_RECIPE: dict[str, Any] = {"tool": "mmdebstrap", "suite": "bookworm", "variant": "minbase",
                                 "mirror": "http://deb.debian.org/debian",
                                 "include": ["python3", "python3-pip", "python3-venv"]}


def _digest(*parts: bytes | str) -> str:
    hasher = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        hasher.update(len(data).to_bytes(8, "big") + data)
    return hasher.hexdigest()[:12]


# Turns the mmdebstrap tarball into an image of its platform (`docker import` ignores --platform).
ROOTFS_DOCKERFILE = "FROM scratch\nADD rootfs.tar /\n"


def rootfs_key(platform: str) -> str:
    return _digest(json.dumps({**ROOTFS_RECIPE, "arch": arch_of(platform)}, sort_keys=True), ROOTFS_DOCKERFILE)


def python_base_tag(docker_dir: Path, platform: str) -> str:
    recipe = (docker_dir / "base" / "python.Dockerfile").read_bytes()
    return f"forkbuild-base/python:3.11-{arch_of(platform)}-{_digest(rootfs_key(platform), recipe)}"


def stock_base_tag(*, docker_dir: Path, python_base: str, pin: WheelPin, version: str) -> str:
    recipe = (docker_dir / "base" / "stock.Dockerfile").read_bytes()
    return (f"forkbuild-base/sglang:{version}-{pin.python_tag}-{arch_of(pin.platform)}-"
            f"{_digest(python_base, pin.sha256, recipe)}")


def rootfs_tarball(cache_dir: Path, platform: str, *, reporter: Reporter) -> Path:
    """The mmdebstrap tarball of ROOTFS_RECIPE for `platform` in `<cache>/docker/`, made once."""
    directory = cache_dir / "docker"
    directory.mkdir(parents=True, exist_ok=True)
    tarball = directory / f"rootfs-{rootfs_key(platform)}.tar"
    with flocked(directory / "rootfs.lock"):
        if not tarball.is_file():
            with reporter.step(f"mmdebstrap {ROOTFS_RECIPE['suite']} ({ROOTFS_RECIPE['variant']}, "
                               f"{arch_of(platform)}) -> {tarball.name}"):
                _mmdebstrap_to(tarball, platform, reporter=reporter)
    return tarball


def _mmdebstrap_to(tarball: Path, platform: str, *, reporter: Reporter) -> None:
    # Under rootfs.lock no other run is live: a rootfs-* folder is a killed run's (its mounts died with it).
    mounts = Path("/proc/self/mountinfo").read_text().split() if Path("/proc/self/mountinfo").exists() else []
    for stale in tarball.parent.glob("rootfs-*"):
        if stale.is_dir() and not any(word.startswith(f"{stale}/") for word in mounts):
            shutil.rmtree(stale, ignore_errors=True)
    mmdebstrap = require("mmdebstrap", hint="apt-get install mmdebstrap")
    with tempfile.TemporaryDirectory(dir=tarball.parent, prefix="rootfs-") as work:
        partial = Path(work) / "rootfs.tar"
        # A mount namespace of its own: the chroot's mounts (proc, sys, dev) go with it, also on kill -9;
        # TMPDIR: its scratch folder inside `work`. force-unsafe-io: no fsync per file of a throwaway root.
        run_program(["unshare", "--mount", "--propagation", "private", mmdebstrap, "--quiet",
                     f"--arch={arch_of(platform)}", f"--variant={ROOTFS_RECIPE['variant']}", f"--include={','.join(ROOTFS_RECIPE['include'])}",
                     "--dpkgopt=force-unsafe-io", ROOTFS_RECIPE["suite"], str(partial), ROOTFS_RECIPE["mirror"]],
                    reporter=reporter, missing_hint="apt-get install util-linux", env={"TMPDIR": work}, stream=True)
        os.replace(partial, tarball)


def ensure_bases(*, context: Context, docker: Docker, stock: bool, platform: str,
                 python_tag: str = "cp311") -> tuple[str, ...]:
    """The local base tags for `platform`, (python,) or (python, stock), each built if this daemon lacks it."""
    reporter, docker_dir = context.reporter, context.docker_dir
    python_base = python_base_tag(docker_dir, platform)
    if docker.image_exists(python_base):
        reporter.info(f"python base: {python_base} (present)")
    else:
        tarball = rootfs_tarball(context.cache_dir, platform, reporter=reporter)
        rootfs = f"forkbuild-base/rootfs:{rootfs_key(platform)}"
        with reporter.step(f"python base {python_base}"):
            if not docker.image_exists(rootfs):
                with tempfile.TemporaryDirectory(dir=tarball.parent, prefix="context-") as work:
                    link_or_copy(tarball, Path(work) / "rootfs.tar")
                    (Path(work) / "Dockerfile").write_text(ROOTFS_DOCKERFILE)
                    docker.build(context=Path(work), tag=rootfs, platform=platform)
            docker.build(context=docker_dir / "base", dockerfile=docker_dir / "base" / "python.Dockerfile",
                         tag=python_base, platform=platform, build_args={"ROOTFS": rootfs})
    if not stock:
        return (python_base,)
    upstream = context.series.upstream
    pin = upstream.wheel_for(python_tag, platform)
    stock_base = stock_base_tag(docker_dir=docker_dir, python_base=python_base, pin=pin, version=upstream.version)
    if docker.image_exists(stock_base):
        reporter.info(f"stock base: {stock_base} (present)")
        return python_base, stock_base
    with reporter.step(f"stock base {stock_base}"), tempfile.TemporaryDirectory(prefix="forkbuild-stock-") as work:
        link_or_copy(context.upstream.wheel(pin), Path(work) / pin.filename)
        docker.build(context=Path(work), dockerfile=docker_dir / "base" / "stock.Dockerfile", tag=stock_base,
                     platform=platform, build_args={"PYTHON_BASE": python_base, "WHEEL": pin.filename})
    return python_base, stock_base
