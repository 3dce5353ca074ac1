"""The front door. Sessions stay thin: they install forkbuild and call its CLI."""

from __future__ import annotations

import sys
from pathlib import Path

import nox

ROOT = Path(__file__).parent
sys.path[:0] = [str(ROOT / "tools"), str(ROOT / ".ci")]
import nox_support as support  # noqa: E402  (the sessions' machinery)

nox.options.sessions = ["lint", "tests", "check", "variants"]
nox.options.reuse_venv = "yes"
# uv makes and fills every session's venv (several times faster than virtualenv + pip);
# virtualenv where uv is missing. README's command installs uv beside nox.
nox.options.default_venv_backend = "uv|virtualenv"


def _variants() -> list[str]:
    """The variants as forkbuild resolves them (its config module: the standard library only). A
    series.toml it refuses gives none here: `nox -s check` then says what is wrong."""
    from forkbuild.errors import ForkbuildError
    from forkbuild.series.config import load_series

    try:
        return list(load_series(ROOT / "series.toml").variants)
    except ForkbuildError:
        return []


VARIANTS = [nox.param(name, id=name) for name in _variants()]


def _install_forkbuild(session: nox.Session) -> None:
    session.install("-e", f"{ROOT}[test]")


@nox.session(python="3.11")
def tests(session: nox.Session) -> None:
    """forkbuild's own tests: unit (fixture repos) and integration (real sglang wheels)."""
    _install_forkbuild(session)
    support.ensure_test_tools(session)
    # One worker per core; the integration tests share the repository's upstream cache,
    # so they stay in one worker, in order (tests/integration/conftest.py). `-- -n 0`: no workers.
    session.run("pytest", "-n", "auto", *session.posargs)


@nox.session(python="3.11")
def lint(session: nox.Session) -> None:
    """ruff (pyflakes, import order, bugbear, pyupgrade; config in pyproject.toml) and mypy on tools/ and bench/."""
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
    command, env = support.docker_tests(session)
    session.run(*command, env=env, external=True)


@nox.session(name="variants", python="3.11")
def variants(session: nox.Session) -> None:
    """test-patch of every variant, and image-tests beside it in the background.

    The image side mostly waits (apt, mmdebstrap, docker) while test-patch keeps the cores
    busy (docs/benchmarks.md, "Test command wall time"). Its output goes to
    build/image-tests.log and is shown when both are done."""
    _install_forkbuild(session)
    log = ROOT / "build" / "image-tests.log"
    command, env = support.docker_tests(session)
    with support.beside(session, command, env=env, log=log, name="image-tests"):
        python = support.test_venv(session)
        for variant in _variants():
            _test_patch(session, python, variant)


@nox.session(name="check", python="3.11", default=False)
def check(session: nox.Session) -> None:
    """Every variant applies strictly; patches/ is what export would write."""
    _install_forkbuild(session)
    session.run("forkbuild", "check", *session.posargs)
    session.run("forkbuild", "export", "--check")
    # Hashes only, no mutant runs: mutation/results.json is current for every
    # patch and every survivor has a reason (`nox -s mutate` refreshes it).
    session.run("forkbuild", "mutate", "--check")


@nox.session(name="test-patch", python=False)
@nox.parametrize("variant", VARIANTS)
def test_patch(session: nox.Session, variant: str) -> None:
    """Prove a variant: structure checks, then tests/patches against its wheel in the test venv (CPU)."""
    _test_patch(session, support.test_venv(session), variant)


def _test_patch(session: nox.Session, python: Path, variant: str) -> None:
    session.run(str(python), "-m", "forkbuild", "test-patch", "--variant", variant, *session.posargs, env=support.uv_env(),
                external=True)


@nox.session(name="release", python=False, default=False)
def release(session: nox.Session) -> None:
    """Release day: `nox -s release -- latest|VERSION [--non-interactive]`: rebase (the porter on), every
    variant's wheel built and test-patch run in the test venv, build/release/<old>-to-<new>.md/.json."""
    if not session.posargs:
        session.error("name the release: nox -s release -- latest   (or -- 0.5.24 --non-interactive)")
    python = support.test_venv(session)
    session.run(str(python), "-m", "forkbuild", "release", *session.posargs, "--python", str(python), env=support.uv_env(),
                external=True)


@nox.session(name="test-patch-matrix", python=False, default=False)
def test_patch_matrix(session: nox.Session) -> None:
    """test-patch over a matrix of feature combinations, in the one test venv, with one
    summary table and build/test-patch/matrix-<strategy>.json:
    `nox -s test-patch-matrix -- --strategy pairwise` (each, all, variants; --structure-only)."""
    python = support.test_venv(session)
    session.run(str(python), "-m", "forkbuild", "matrix", "--test-patch", *(session.posargs or ["--strategy", "pairwise"]),
                env=support.uv_env())


@nox.session(name="mutate", python=False, default=False)
def mutate(session: nox.Session) -> None:
    """Hunk-revert mutation testing of the default variant's patches in the test venv;
    re-runs only patches whose results are stale. `nox -s mutate -- --patch F --jobs N`."""
    python = support.test_venv(session)
    session.run(str(python), "-m", "forkbuild", "mutate", *session.posargs, env=support.uv_env())


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
