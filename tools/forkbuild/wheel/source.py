"""Source mode: `python -m build --wheel` in the patched checkout of a git upstream; the
overlay writer (no file changes) then stamps the local version, manifest and RECORD."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from forkbuild import process
from forkbuild.console import Reporter
from forkbuild.errors import BuildError, ToolMissing

PROJECT_FILES = ("pyproject.toml", "setup.py")


def build_from_checkout(*, project: Path, out_dir: Path, upstream_version: str, epoch: int,
                        isolation: bool, reporter: Reporter) -> Path:
    """Build one wheel of the project in `project` into `out_dir` and return it."""
    if not any((project / name).is_file() for name in PROJECT_FILES):
        raise BuildError(f"{project} has no {' or '.join(PROJECT_FILES)}: nothing to build from source",
                         hint="source mode needs a git upstream ([upstream] source = \"git\"); "
                              "a release-wheel upstream builds by overlay")
    if importlib.util.find_spec("build") is None:
        raise ToolMissing("source mode needs the `build` package in forkbuild's environment",
                          hint=f"{sys.executable} -m pip install build")
    command = [sys.executable, "-m", "build", "--wheel", "--outdir", str(out_dir), str(project)]
    if not isolation:
        command.insert(4, "--no-isolation")
    # setuptools-scm cannot read the version in a forkbuild tree: pin it; the epoch fixes zip times.
    env = {"SETUPTOOLS_SCM_PRETEND_VERSION": upstream_version, "SOURCE_DATE_EPOCH": str(epoch)}
    reporter.detail(" ".join(command))
    completed = process.run(command, env=env)
    reporter.detail(completed.stdout + completed.stderr)
    if completed.status != 0:
        tail = "\n".join((completed.stdout + completed.stderr).strip().splitlines()[-20:])
        raise BuildError(f"`python -m build` failed in {project} (exit {completed.status}):\n{tail}")
    built = sorted(out_dir.glob("*.whl"))
    if len(built) != 1:
        raise BuildError(f"`python -m build` in {project} made {len(built)} wheels, expected one: {built}")
    return built[0]
