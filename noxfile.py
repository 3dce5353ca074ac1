"""The front door. Sessions stay thin: they install forkbuild and call its CLI."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tomllib
from pathlib import Path

import nox

ROOT = Path(__file__).parent
nox.options.sessions = ["lint", "tests", "check", "test-patch", "image-tests"]
nox.options.reuse_venv = "yes"


def _variants() -> list[str]:
    with open(ROOT / "series.toml", "rb") as handle:
        return list(tomllib.load(handle)["variants"])


VARIANTS = [nox.param(name, id=name) for name in _variants()]


def _install_forkbuild(session: nox.Session) -> None:
    session.install("-e", f"{ROOT}[test]")


def _ensure_quilt(session: nox.Session) -> None:
    """quilt for tests/unit/test_quilt_interop.py, which skips without it. CI runs as root on a fresh machine:
    install it there from Debian (as .ci/dockerd.sh installs docker.io); elsewhere say what will skip."""
    if shutil.which("quilt"):
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        session.warn("quilt is not installed: tests/unit/test_quilt_interop.py will skip (apt-get install quilt)")
        return
    command = ["apt-get", "install", "-y", "--no-install-recommends", "quilt"]
    env = {"DEBIAN_FRONTEND": "noninteractive"}
    if subprocess.run(command, env={**os.environ, **env}, capture_output=True).returncode != 0:
        # a dpkg killed mid-install must be finished first; a fresh machine's package lists may be empty
        session.run("dpkg", "--configure", "-a", external=True, silent=True, env=env)
        session.run("apt-get", "update", external=True, silent=True)
        session.run(*command, external=True, silent=True, env=env)


@nox.session(python="3.11")
def tests(session: nox.Session) -> None:
    """forkbuild's own tests: unit (fixture repos) and integration (real sglang wheels)."""
    _install_forkbuild(session)
    _ensure_quilt(session)
    session.run("pytest", *session.posargs)


@nox.session(python="3.11")
def lint(session: nox.Session) -> None:
    """ruff (pyflakes, import order, bugbear, pyupgrade; config in pyproject.toml) and mypy on tools/."""
    _install_forkbuild(session)
    session.run("ruff", "check", "tools", *session.posargs)
    session.run("mypy")


@nox.session(name="apply", python="3.11", default=False)
@nox.parametrize("variant", VARIANTS)
def apply(session: nox.Session, variant: str) -> None:
    """Fetch upstream and apply the variant's patches into .forkbuild-work/<variant>."""
    _install_forkbuild(session)
    session.run("forkbuild", "apply", "--variant", variant, "--dir", str(ROOT / ".forkbuild-work" / variant), *session.posargs)


@nox.session(name="build-wheel", python="3.11", default=False)
@nox.parametrize("variant", VARIANTS)
def build_wheel(session: nox.Session, variant: str) -> None:
    """The variant's patched wheels (one per pinned Python tag) in dist/; kept when up to date."""
    _install_forkbuild(session)
    session.run("forkbuild", "build-wheel", "--variant", variant, *session.posargs)


@nox.session(name="build-image", python="3.11", default=False)
@nox.parametrize("variant", VARIANTS)
def build_image(session: nox.Session, variant: str) -> None:
    """The variant's docker image in both modes (wheel, delta), or in the one `--mode` given.

    Needs a daemon (`.ci/dockerd.sh start`) and a base: posargs go to every
    build, e.g. `nox -s build-image -- --local-base` or `-- --base IMAGE`.
    """
    _install_forkbuild(session)
    chosen = any(arg.startswith("--mode") for arg in session.posargs)
    for mode in [[]] if chosen else [["--mode", "wheel"], ["--mode", "delta"]]:
        session.run("forkbuild", "build-image", "--variant", variant, *mode, *session.posargs)


@nox.session(name="image-tests", python="3.11", default=False)
def image_tests(session: nox.Session) -> None:
    """Every variant's image in both modes, built and checked inside, on a private
    docker daemon that .ci/docker-tests.sh installs, starts and stops (needs root)."""
    _install_forkbuild(session)
    session.run("bash", str(ROOT / ".ci" / "docker-tests.sh"), *session.posargs,
                env={"PYTHON": str(Path(session.bin) / "python")}, external=True)


@nox.session(name="check", python="3.11", default=False)
def check(session: nox.Session) -> None:
    """Every variant applies strictly; patches/ is what export would write."""
    _install_forkbuild(session)
    session.run("forkbuild", "check", *session.posargs)
    session.run("forkbuild", "export", "--check")
    # Hashes only, no mutant runs: mutation/results.json is current for every
    # patch and every survivor has a reason (`nox -s mutate` refreshes it).
    session.run("forkbuild", "mutate", "--check")


TEST_VENV = ROOT / ".nox" / "test-patch-venv"
TEST_VENV_INPUTS = ("constraints/test-patch.txt", "constraints/test-patch.in", "pyproject.toml")


@nox.session(name="test-patch", python=False)
@nox.parametrize("variant", VARIANTS)
def test_patch(session: nox.Session, variant: str) -> None:
    """Prove a variant: structure checks, then tests/patches against its wheel in the test venv (CPU)."""
    python = _test_venv(session)
    session.run(str(python), "-m", "forkbuild", "test-patch", "--variant", variant, *session.posargs)


@nox.session(name="test-patch-matrix", python=False, default=False)
def test_patch_matrix(session: nox.Session) -> None:
    """test-patch over a matrix of feature combinations, in the one test venv, with one
    summary table and build/test-patch/matrix-<strategy>.json:
    `nox -s test-patch-matrix -- --strategy pairwise` (each, all, variants; --structure-only)."""
    python = _test_venv(session)
    session.run(str(python), "-m", "forkbuild", "matrix", "--test-patch", *(session.posargs or ["--strategy", "pairwise"]))


@nox.session(name="mutate", python=False, default=False)
def mutate(session: nox.Session) -> None:
    """Hunk-revert mutation testing of the default variant's patches in the test venv;
    re-runs only patches whose results are stale. `nox -s mutate -- --patch F --jobs N`."""
    python = _test_venv(session)
    session.run(str(python), "-m", "forkbuild", "mutate", *session.posargs)


def _test_venv(session: nox.Session) -> Path:
    """One test venv for every variant, reused between runs: pinned deps (torch
    alone is ~5.5 GB; a venv per variant would cost minutes of CI each), then
    forkbuild; forkbuild installs each variant's sglang wheel --no-deps itself.
    Re-synced when the constraints or forkbuild's own requirements change."""
    python = TEST_VENV / "bin" / "python"
    if not python.exists():
        session.run("python3.11", "-m", "venv", str(TEST_VENV), external=True)
    stamp = TEST_VENV / "forkbuild-inputs.sha256"
    digest = hashlib.sha256(b"".join((ROOT / name).read_bytes() for name in TEST_VENV_INPUTS)).hexdigest()
    if not stamp.is_file() or stamp.read_text() != digest:
        constraints = str(ROOT / "constraints" / "test-patch.txt")
        session.run(str(python), "-m", "pip", "install", "--quiet", "-c", constraints, "-r", str(ROOT / "constraints" / "test-patch.in"), external=True)
        session.run(str(python), "-m", "pip", "install", "--quiet", "-c", constraints, "-e", str(ROOT), external=True)
        stamp.write_text(digest)
    return python


@nox.session(name="rebase", python="3.11", default=False)
def rebase(session: nox.Session) -> None:
    """Move the series onto a new upstream: `nox -s rebase -- 0.5.24` (or a commit with --version X);
    after a stop: `nox -s rebase -- --continue` / `--skip` / `--abort`."""
    if not session.posargs:
        session.error("name the target: nox -s rebase -- VERSION   (or -- --continue / --skip / --abort)")
    _install_forkbuild(session)
    first, rest = session.posargs[0], session.posargs[1:]
    if first.startswith("--"):
        session.run("forkbuild", "rebase", first, *rest)
    else:
        session.run("forkbuild", "rebase", "--onto", first, *rest)


@nox.session(name="chaos", python="3.11", default=False)
def chaos(session: nox.Session) -> None:
    """kill -9 at every step of every command (tests/unit/test_chaos.py, the full matrix)."""
    _install_forkbuild(session)
    session.run("pytest", "tests/unit/test_chaos.py", "-q", *session.posargs, env={"FORKBUILD_CHAOS_ALL": "1"})
