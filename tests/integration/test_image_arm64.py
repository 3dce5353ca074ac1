"""The fleet's image: tp4 for linux/arm64 (a GB10 is a Grace CPU), built on this x86_64
machine under emulation (binfmt_misc + qemu-user-static) on the arm64 local base, and run
there: its architecture, the recipe's launch command, every tp4 guard, the pinned b12x.

Needs a daemon (FORKBUILD_DOCKER_HOST, as test_image_build.py) and the kernel's binfmt_misc
with qemu-aarch64 registered (`.ci/dockerd.sh binfmt`); skips naming whichever is missing.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from forkbuild.image import build
from forkbuild.image.base import ensure_bases
from forkbuild.image.build_context import prepare_context
from forkbuild.image.docker import Docker
from forkbuild.series.combination import of_variant

REPO = Path(__file__).resolve().parents[2]
HOST = os.environ.get("FORKBUILD_DOCKER_HOST", "")
PLATFORM = "linux/arm64"
VARIANT = "tp4"
QEMU = Path("/proc/sys/fs/binfmt_misc/qemu-aarch64")


def _emulation_refused() -> str:
    """Why arm64 binaries cannot run here ('' when they can)."""
    if not QEMU.parent.joinpath("register").exists():
        return f"the kernel has no binfmt_misc mounted at {QEMU.parent} (`.ci/dockerd.sh binfmt` mounts it)"
    text = QEMU.read_text() if QEMU.is_file() else ""
    if not text.startswith("enabled"):
        return f"{QEMU} is not registered and enabled (`.ci/dockerd.sh binfmt`; apt-get install qemu-user-static)"
    if "F" not in next((line for line in text.splitlines() if line.startswith("flags:")), ""):
        return f"{QEMU} lacks the F flag: containers cannot reach the emulator"
    return ""


pytestmark = [
    pytest.mark.integration,
    pytest.mark.docker,
    pytest.mark.skipif(not HOST, reason="FORKBUILD_DOCKER_HOST is not set: no docker daemon configured "
                                        "(run .ci/docker-tests.sh)"),
    pytest.mark.skipif(bool(_emulation_refused()), reason=_emulation_refused() or "-"),
]


@pytest.fixture(scope="module")
def image(context, docker):
    """tp4's wheel-mode image for linux/arm64 on the arm64 python base (no b12x in it)."""
    (python_base,) = ensure_bases(context=context, docker=docker, stock=False, platform=PLATFORM)
    image_context = prepare_context(context, variant=of_variant(context.series, VARIANT), platform=PLATFORM,
                                    python_tags=["cp311"])
    tag = build.default_tag(VARIANT, "wheel", PLATFORM, repository="forkbuild-test/sglang")
    build.build_image(docker=docker, context=image_context, mode="wheel", base=python_base, tag=tag)
    return tag, image_context.manifest


# Where sglang lies, found without importing it (`import sglang` needs torch).
PACKAGE = ("import importlib.util, pathlib\n"
           "package = pathlib.Path(importlib.util.find_spec('sglang').submodule_search_locations[0])\n")


def run(docker: Docker, image: str, *command: str, env: dict[str, str] = {}) -> str:
    return docker.run("run", "--rm", "--network", "none", "--platform", PLATFORM,
                      *(f"--env={key}={value}" for key, value in env.items()), image, *command).stdout


def test_the_image_is_arm64_and_runs_arm64_code(docker, image):
    tag, _ = image
    assert docker.run("image", "inspect", "--format", "{{.Architecture}}", tag).stdout.strip() == "arm64"
    machine = run(docker, tag, "python3", "-c", "import platform, sysconfig; "
                                                 "print(platform.machine(), sysconfig.get_platform())")
    assert machine.split() == ["aarch64", "linux-aarch64"]
    # the aarch64 wheel's Rust extensions are what got installed
    found = run(docker, tag, "python3", "-c", PACKAGE + "print(*sorted(p.name for p in package.rglob('*.so')))")
    assert found.split() and all(name.endswith("-aarch64-linux-gnu.so") for name in found.split())


def test_serve_dry_run_prints_the_recipes_command(docker, image):
    tag, _ = image
    command = run(docker, tag, "serve", "--dry-run", env={"TP_SIZE": "4"}).strip().splitlines()[-1]
    assert command.startswith("python3 -m sglang.launch_server --model-path /models/DeepSeek-V4.1-Flash")
    assert "--speculative-algorithm DSPARK" in command and "--tp-size 4" in command


def test_doctor_lists_every_tp4_guard_and_the_pinned_b12x(context, docker, image):
    tag, manifest = image
    report = run(docker, tag, "doctor", "--strict")
    assert f"variant:  {VARIANT} " in report
    series = context.series
    assert [guard.env for guard in manifest.guards] == [
        guard.env for guard in series.guards_for(series.variants[VARIANT].features)]
    for guard in manifest.guards:
        assert f"  {guard.env}=" in report
    assert "mxfp8:    b12x needs package b12x: b12x 1.5.1" in report


def test_the_patched_modules_load_under_emulation_and_declare_every_guard(docker, image):
    tag, manifest = image
    # environ.py (patched: the guard types and the hook) and the generated guards module,
    # loaded by path (`import sglang` needs torch, which the test base lacks).
    script = (PACKAGE + "spec = importlib.util.spec_from_file_location('environ', package / 'srt' / 'environ.py')\n"
              "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)\n"
              "print(*sorted(name for name in vars(module.Envs) if name.startswith('DSV41_')))\n")
    declared = run(docker, tag, "python3", "-c", script).split()
    assert declared == sorted(guard.env for guard in manifest.guards)
    check = run(docker, tag, "check", "--env-defaults")
    assert "files match their hashes" in check and f"guards declared: {len(manifest.guards)}" in check
