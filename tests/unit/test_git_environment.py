"""git's environment does not leak into the git forkbuild runs (issue 38): a GIT_WORK_TREE,
GIT_INDEX_FILE or GIT_DIR set by a hook or a shell rc points no child at the user's
repository; and a value from series.toml never reaches git as an option."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures import SeriesFixture
from forkbuild.errors import ForkbuildError
from forkbuild.io import process
from forkbuild.io.git import Git

IDENTITY = ["-c", "user.name=someone", "-c", "user.email=someone@example.com"]


def git(repo: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *IDENTITY, *args], cwd=repo, env=env, capture_output=True, text=True, check=True)


def users_project(fx: SeriesFixture) -> None:
    """The series directory as the user's own repository: a README with an uncommitted edit and
    a staged change (what a pre-commit hook runs beside)."""
    git(fx.root, "init", "--quiet")
    (fx.root / "README.md").write_text("committed\n")
    (fx.root / "notes.txt").write_text("committed\n")
    git(fx.root, "add", "README.md", "notes.txt")
    git(fx.root, "commit", "--quiet", "-m", "project")
    (fx.root / "README.md").write_text("my uncommitted edit\n")
    (fx.root / "notes.txt").write_text("my staged change\n")
    git(fx.root, "add", "notes.txt")


def assert_project_untouched(fx: SeriesFixture) -> None:
    assert (fx.root / "README.md").read_text() == "my uncommitted edit\n"
    assert not (fx.root / "python").exists()  # upstream's files went into the series tree only
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=fx.root,
                            capture_output=True, text=True, env=process.environment())
    assert status.returncode == 0, status.stderr
    assert status.stdout.splitlines() == [" M README.md", "M  notes.txt"]
    assert Git(fx.root / ".forkbuild-work" / "series").status_porcelain() == ""


def forkbuild(fx: SeriesFixture, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "forkbuild", "-C", str(fx.root), "--cache", str(fx.cache), *args],
                          cwd=fx.root, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("variables", [
    pytest.param(("GIT_WORK_TREE",), id="work-tree"),
    pytest.param(("GIT_INDEX_FILE",), id="index"),
    pytest.param(("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"), id="all"),
])
def test_apply_all_with_gits_variables_set_leaves_the_users_repository_alone(series_fx: SeriesFixture,
                                                                             variables: tuple[str, ...]) -> None:
    users_project(series_fx)
    values = {"GIT_DIR": str(series_fx.root / ".git"), "GIT_WORK_TREE": str(series_fx.root),
              "GIT_INDEX_FILE": str(series_fx.root / ".git" / "index")}
    env = {**os.environ, **{name: values[name] for name in variables}}
    done = forkbuild(series_fx, "apply", "--all", env=env)
    assert done.returncode == 0, done.stderr
    assert_project_untouched(series_fx)
    checked = forkbuild(series_fx, "check", env=env)
    assert checked.returncode == 0, checked.stderr


def test_apply_all_from_a_pre_commit_hook_keeps_the_users_commit(series_fx: SeriesFixture) -> None:
    """git runs the hook with GIT_INDEX_FILE (and more) set: the commit goes through as staged."""
    users_project(series_fx)
    hook = series_fx.root / ".git" / "hooks" / "pre-commit"
    hook.write_text(f"#!/bin/sh\nexec {sys.executable} -m forkbuild -C {series_fx.root} --cache {series_fx.cache} "
                    "apply --all\n")
    hook.chmod(0o755)
    committed = subprocess.run(["git", *IDENTITY, "commit", "--quiet", "-m", "mine"], cwd=series_fx.root,
                               capture_output=True, text=True, timeout=300)
    assert committed.returncode == 0, committed.stderr
    assert git(series_fx.root, "show", "HEAD:notes.txt").stdout == "my staged change\n"
    assert (series_fx.root / "README.md").read_text() == "my uncommitted edit\n"
    assert (series_fx.root / ".forkbuild-work" / "series" / "python").is_dir()


def test_a_child_gets_no_variable_that_points_git_elsewhere(tmp_path: Path, monkeypatch) -> None:
    listed = subprocess.run(["git", "rev-parse", "--local-env-vars"], capture_output=True, text=True, check=True)
    assert set(listed.stdout.split()) <= process.GIT_LOCAL_ENV  # git's own list, all of it
    for name in process.GIT_LOCAL_ENV | {"GIT_CONFIG_KEY_0", "GIT_CONFIG_VALUE_0"}:
        monkeypatch.setenv(name, str(tmp_path / "elsewhere"))
    monkeypatch.setenv("GIT_AUTHOR_NAME", "kept")  # not about where the repository is
    seen = process.run([sys.executable, "-c", "import os; print(sorted(k for k in os.environ if k.startswith('GIT_')))"])
    names = set(eval(seen.stdout))  # noqa: S307 (our own child's repr of a list of names)
    assert "GIT_AUTHOR_NAME" in names and not names & (process.GIT_LOCAL_ENV | {"GIT_CONFIG_KEY_0", "GIT_CONFIG_VALUE_0"})
    repo = Git.init(tmp_path / "repo")
    assert Path(repo.out("rev-parse", "--absolute-git-dir")) == (tmp_path / "repo" / ".git").resolve()


@pytest.mark.parametrize(("url", "ref"), [("--upload-pack=touch {mark}", "HEAD"),
                                          ("{upstream}", "--upload-pack=touch {mark}")])
def test_a_fetch_never_reads_a_url_or_ref_as_an_option(git_series_fx: SeriesFixture, tmp_path: Path,
                                                       url: str, ref: str) -> None:
    """Called on the gateway itself: safe even where series.toml's validation were bypassed."""
    mark = tmp_path / "ran"
    cache = Git.init(tmp_path / "cache.git", bare=True)
    values = {"mark": mark, "upstream": git_series_fx.upstream_repo}
    with pytest.raises(ForkbuildError):
        cache.fetch(url.format(**values), ref.format(**values))
    assert not mark.exists()


def test_a_failed_git_command_is_shown_as_typed_without_the_pinned_config(tmp_path: Path) -> None:
    from forkbuild.errors import GitFailed

    repo = Git.init(tmp_path / "repo")
    with pytest.raises(GitFailed) as caught:
        repo.run("rev-parse", "--verify", "nope")
    assert caught.value.message.splitlines()[0] == "git failed (128): git rev-parse --verify nope"
