"""The machinery behind noxfile.py's sessions (they stay thin): the Debian tools the unit tests
use, the test venv test-patch, mutate, matrix and release run in, and a command run beside a
session (image-tests beside test-patch)."""

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

ROOT = Path(__file__).resolve().parents[1]


# Debian tools some unit tests use, and the tests that skip without them.
TEST_TOOLS = {"quilt": "tests/unit/test_quilt_interop.py",
              "docker-compose": "tests/unit/test_launch.py's compose check"}


def ensure_test_tools(session: nox.Session) -> None:
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

def docker_tests(session: nox.Session) -> tuple[list[str], dict[str, str]]:
    """.ci/docker-tests.sh's command line and environment, with the session's forkbuild."""
    return ["bash", str(ROOT / ".ci" / "docker-tests.sh"), *session.posargs], {"PYTHON": str(Path(session.bin) / "python")}

@contextmanager
def beside(session: nox.Session, command: list[str], *, env: dict[str, str], log: Path, name: str) -> Iterator[None]:
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

TEST_VENV = ROOT / ".nox" / "test-patch-venv"
TEST_VENV_INPUTS = ("constraints/test-patch.txt", "constraints/test-patch.in", "pyproject.toml")

def test_venv(session: nox.Session) -> Path:
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


def uv_env() -> dict[str, str]:
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
