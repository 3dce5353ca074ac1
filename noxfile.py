"""The front door. Sessions stay thin: they install forkbuild and call its CLI."""

from __future__ import annotations

import ctypes
import hashlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import nox
from nox.virtualenv import find_uv

ROOT = Path(__file__).parent
nox.options.sessions = ["lint", "tests", "check", "variants"]
nox.options.reuse_venv = "yes"
# uv makes and fills every session's venv (several times faster than virtualenv + pip);
# virtualenv where uv is missing. README's command installs uv beside nox.
nox.options.default_venv_backend = "uv|virtualenv"


def _variants() -> list[str]:
    """The variants as forkbuild resolves them (its config module: the standard library only). A
    series.toml it refuses gives none here: `nox -s check` then says what is wrong."""
    sys.path.insert(0, str(ROOT / "tools"))
    from forkbuild.errors import ForkbuildError
    from forkbuild.series.config import load_series

    try:
        return list(load_series(ROOT / "series.toml").variants)
    except ForkbuildError:
        return []


VARIANTS = [nox.param(name, id=name) for name in _variants()]


def _install_forkbuild(session: nox.Session) -> None:
    session.install("-e", f"{ROOT}[test]")


# Debian tools some unit tests use, and the tests that skip without them.
TEST_TOOLS = {"quilt": "tests/unit/test_quilt_interop.py",
              "docker-compose": "tests/unit/test_launch.py's compose check"}


def _ensure_test_tools(session: nox.Session) -> None:
    """CI runs as root on a fresh machine: install the missing TEST_TOOLS there from Debian
    (as .ci/dockerd.sh installs docker.io), so a fresh machine runs the tests a warm one
    does; elsewhere say what will skip."""
    missing = [tool for tool in TEST_TOOLS if not shutil.which(tool)]
    if not missing:
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        for tool in missing:
            session.warn(f"{tool} is not installed: {TEST_TOOLS[tool]} will skip (apt-get install {tool})")
        return
    command = ["apt-get", "install", "-y", "--no-install-recommends", *missing]
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
    _ensure_test_tools(session)
    # One worker per core; the integration tests share the repository's upstream cache,
    # so they stay in one worker, in order (tests/integration/conftest.py). `-- -n 0`: no workers.
    session.run("pytest", "-n", "auto", *session.posargs)


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


@nox.session(name="launch", python="3.11", default=False)
def launch(session: nox.Session) -> None:
    """One compose file per node of a cluster (docs/cluster.md):
    `nox -s launch -- --variant tp4 --env .env --nodes h1,h2,h3,h4 [--dry-run]`."""
    _install_forkbuild(session)
    session.run("forkbuild", "launch", *session.posargs)


@nox.session(name="image-tests", python="3.11", default=False)
def image_tests(session: nox.Session) -> None:
    """Every variant's image in both modes, built and checked inside, on a private
    docker daemon that .ci/docker-tests.sh installs, starts and stops (needs root)."""
    _install_forkbuild(session)
    command, env = _docker_tests(session)
    session.run(*command, env=env, external=True)


def _docker_tests(session: nox.Session) -> tuple[list[str], dict[str, str]]:
    """.ci/docker-tests.sh's command line and environment, with the session's forkbuild."""
    return ["bash", str(ROOT / ".ci" / "docker-tests.sh"), *session.posargs], {"PYTHON": str(Path(session.bin) / "python")}


@nox.session(name="variants", python="3.11")
def variants(session: nox.Session) -> None:
    """test-patch of every variant, and image-tests beside it in the background.

    The image side mostly waits (apt, mmdebstrap, docker) while test-patch keeps the cores
    busy (docs/benchmarks.md, "Test command wall time"). Its output goes to
    build/image-tests.log and is shown when both are done."""
    _install_forkbuild(session)
    log = ROOT / "build" / "image-tests.log"
    command, env = _docker_tests(session)
    with _beside(session, command, env=env, log=log, name="image-tests"):
        python = _test_venv(session)
        for variant in _variants():
            _test_patch(session, python, variant)


@contextmanager
def _beside(session: nox.Session, command: list[str], *, env: dict[str, str], log: Path, name: str) -> Iterator[None]:
    """`command` runs in the background, in a process group of its own, while the block runs.
    Then: wait for it, show its output, fail the session if it failed. A command of the block
    that fails leaves it running, so both sides report; Ctrl-C stops it (its EXIT traps run),
    and so does nox's end, even by kill -9 (a re-run must not find it still using the daemon)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    log.unlink(missing_ok=True)  # a new file: what a killed run left writing keeps the old one
    with log.open("xb") as output:
        background = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, env={**os.environ, **env},
                                      start_new_session=True, preexec_fn=_terminated_with_parent)
    session.log(f"{name} runs beside this session; its output: {log}")
    try:
        yield
    except nox.command.CommandFailed:
        raise
    except BaseException:
        if background.poll() is None:
            os.killpg(background.pid, signal.SIGTERM)  # SIGINT may be ignored there (inherited)
        raise
    finally:
        status = background.wait()
        session.log(f"{name} ended (exit {status}); its output:")
        print(log.read_text(errors="replace"), end="", flush=True)
    if status != 0:
        session.error(f"{name} failed (exit {status}); its output is above ({log})")


def _terminated_with_parent() -> None:
    """In the child, before exec: SIGTERM when the process that started it ends (Linux)."""
    if sys.platform == "linux":
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


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
    _test_patch(session, _test_venv(session), variant)


def _test_patch(session: nox.Session, python: Path, variant: str) -> None:
    session.run(str(python), "-m", "forkbuild", "test-patch", "--variant", variant, *session.posargs, env=_uv_env(),
                external=True)


@nox.session(name="release", python=False, default=False)
def release(session: nox.Session) -> None:
    """Release day: `nox -s release -- latest|VERSION [--non-interactive]`: rebase (the porter on), every
    variant's wheel built and test-patch run in the test venv, build/release/<old>-to-<new>.md/.json."""
    if not session.posargs:
        session.error("name the release: nox -s release -- latest   (or -- 0.5.24 --non-interactive)")
    python = _test_venv(session)
    session.run(str(python), "-m", "forkbuild", "release", *session.posargs, "--python", str(python), env=_uv_env(),
                external=True)


@nox.session(name="test-patch-matrix", python=False, default=False)
def test_patch_matrix(session: nox.Session) -> None:
    """test-patch over a matrix of feature combinations, in the one test venv, with one
    summary table and build/test-patch/matrix-<strategy>.json:
    `nox -s test-patch-matrix -- --strategy pairwise` (each, all, variants; --structure-only)."""
    python = _test_venv(session)
    session.run(str(python), "-m", "forkbuild", "matrix", "--test-patch", *(session.posargs or ["--strategy", "pairwise"]),
                env=_uv_env())


@nox.session(name="mutate", python=False, default=False)
def mutate(session: nox.Session) -> None:
    """Hunk-revert mutation testing of the default variant's patches in the test venv;
    re-runs only patches whose results are stale. `nox -s mutate -- --patch F --jobs N`."""
    python = _test_venv(session)
    session.run(str(python), "-m", "forkbuild", "mutate", *session.posargs, env=_uv_env())


def _test_venv(session: nox.Session) -> Path:
    """One test venv for every variant, reused between runs: pinned deps (torch
    alone is ~5.5 GB; a venv per variant would cost minutes of CI each), then
    forkbuild; forkbuild installs each variant's sglang wheel --no-deps itself.
    Re-synced when the constraints or forkbuild's own requirements change.
    Made by uv where nox finds it (pip's own sources passed on, so both take the
    same files), else by venv + pip; either way it has pip (`--seed`)."""
    python = TEST_VENV / "bin" / "python"
    has_uv, uv, _ = find_uv()
    if not python.exists():
        make = [uv, "venv", "--quiet", "--seed", "--python", "3.11"] if has_uv else ["python3.11", "-m", "venv"]
        session.run(*make, str(TEST_VENV), external=True)
    stamp = TEST_VENV / "forkbuild-inputs.sha256"
    digest = hashlib.sha256(b"".join((ROOT / name).read_bytes() for name in TEST_VENV_INPUTS)).hexdigest()
    if not stamp.is_file() or stamp.read_text() != digest:
        install = [uv, "pip", "install", "--python", str(python), *_pip_sources()] if has_uv \
            else [str(python), "-m", "pip", "install"]
        constraints = ["--quiet", "-c", str(ROOT / "constraints" / "test-patch.txt")]
        session.run(*install, *constraints, "-r", str(ROOT / "constraints" / "test-patch.in"), external=True)
        session.run(*install, *constraints, "-e", str(ROOT), external=True)
        stamp.write_text(digest)
    return python


def _uv_env() -> dict[str, str]:
    """UV for forkbuild in the test venv: it installs each variant's wheel with it (nox's own uv)."""
    has_uv, uv, _ = find_uv()
    return {"UV": str(shutil.which(uv) or uv)} if has_uv else {}


# pip's configured sources and constraints (files, PIP_* variables) as uv's options: uv reads
# no pip configuration, and a machine's local wheels (torch) must win over a multi-GB download.
_PIP_TO_UV = {"index-url": "--index-url", "extra-index-url": "--extra-index-url", "find-links": "--find-links",
              "constraint": "--constraint"}


def _pip_sources() -> list[str]:
    # nox's own Python, else the system's (nox may live in a venv without pip)
    runs = (subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True)
            for python in (sys.executable, "python3"))
    listed = next((done.stdout for done in runs if done.returncode == 0), "")
    options: list[str] = []
    for line in listed.splitlines():
        key, _, value = line.partition("=")
        option = _PIP_TO_UV.get(key.rpartition(".")[2])
        for item in shlex.split(value)[0].split() if option and value else []:
            if item not in options:
                options += [option, item]
    # pip takes the best version from every source, uv by default only the first that has the package
    return [*options, "--index-strategy", "unsafe-best-match"] if options else []


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
