"""The Git methods export, import and the cache use (named, returning data or raising)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fixtures import commit_all, edit, make_upstream_repo
from forkbuild.io.git import Git, GitFailed


@pytest.fixture
def repo(tmp_path: Path) -> Git:
    return make_upstream_repo(tmp_path / "repo")[0]


def test_commit_keeps_the_message_verbatim_and_log_reads_it_back(repo: Git) -> None:
    edit(repo.path, "python/pkg/core.py", "value * 2", "value * 4")
    repo.run("add", "--all")
    message = "core: four\n\n\nTwo blank lines kept.\n\nFeature: alpha\nGuard: DSV41_ALPHA\n"
    head = repo.commit(message, env={"GIT_AUTHOR_DATE": "1700000000 +0100", "GIT_COMMITTER_DATE": "1700000000 +0100"})
    assert head == repo.head()
    assert repo.log1("%B") == message.rstrip("\n")
    assert repo.log1("%s", head) == "core: four"
    assert repo.log1("%ad") == "1700000000 +0100"
    amended = repo.commit(message + "Reviewed-by: R <r@example.com>\n", amend=True)
    assert repo.log1("%B", amended).endswith("Guard: DSV41_ALPHA\nReviewed-by: R <r@example.com>")


def test_merge_commits_lists_only_merges(repo: Git) -> None:
    base = repo.head()
    repo.run("checkout", "--quiet", "-b", "side")
    edit(repo.path, "python/pkg/util.py", "ceiling=100", "ceiling=90")
    commit_all(repo, "util: side")
    repo.run("checkout", "--quiet", "main")
    edit(repo.path, "python/pkg/core.py", "value * 2", "value * 4")
    commit_all(repo, "core: main")
    assert repo.merge_commits(base, "HEAD") == []
    repo.run("merge", "--quiet", "--no-edit", "side")
    assert repo.merge_commits(base, "HEAD") == [repo.head()]


def test_fetch_brings_a_commit_from_another_repository(repo: Git, tmp_path: Path) -> None:
    bare = Git.init(tmp_path / "cache.git", bare=True)
    assert not bare.has_object(repo.head())
    bare.fetch(str(repo.path), repo.head())
    assert bare.has_object(repo.head())
    with pytest.raises(GitFailed):
        bare.fetch(str(tmp_path / "nowhere"), "main")


def test_head_and_the_git_dirs_are_what_git_says_on_a_branch_detached_and_in_a_linked_tree(repo: Git,
                                                                                          tmp_path: Path) -> None:
    def git_says(git: Git, *args: str) -> str:
        return git.run("rev-parse", *args).stdout.strip()

    assert repo.head() == git_says(repo, "HEAD")  # on a branch: through rev-parse
    first = repo.head()
    edit(repo.path, "python/pkg/core.py", "value * 2", "value * 3")
    commit_all(repo, "three")
    repo.checkout_detached(first)
    assert repo.head() == first == git_says(repo, "HEAD")  # detached: HEAD's file
    linked = repo.add_worktree(tmp_path / "linked", repo.rev("main") or "")
    assert linked.head() == git_says(linked, "HEAD") != first
    assert linked.git_dir == Path(git_says(linked, "--absolute-git-dir"))
    assert repo.git_dir == (repo.path / ".git").resolve()
    with pytest.raises(Exception, match="is not a git repository"):
        Git(tmp_path / "linked" / "python")
