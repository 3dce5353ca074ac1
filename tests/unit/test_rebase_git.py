"""The rebase package (and the test-patch/wheel git call sites) talk to git only
through named Git methods, and those methods raise instead of ignoring failures."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import forkbuild
import forkbuild_runtime
from forkbuild.io.git import Git, GitFailed
from forkbuild.rebase.journal import RefMove
from forkbuild.rebase.phases import restore_refs

PACKAGE = Path(forkbuild.__file__).parent
# Every module but the gateways (git's, and docker's for its own client): no git or docker verb spelled out.
GATEWAYS = {PACKAGE / "io" / "git.py", PACKAGE / "image" / "docker.py"}
# forkbuild_runtime, the program inside an image, spells none either.
CALLERS = sorted(path for root in (PACKAGE, Path(forkbuild_runtime.__file__).parent) for path in root.rglob("*.py")
                 if path not in GATEWAYS)


def raw_git_calls(path: Path) -> list[str]:
    """`<x>.run("...")` / `<x>.out("...")`: a git command spelled out outside git.py."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("run", "out")
                and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            found.append(f"{path.name}:{node.lineno}: .{node.func.attr}({node.args[0].value!r}, ...)")
    return found


@pytest.mark.parametrize("path", CALLERS, ids=lambda path: str(path.relative_to(PACKAGE.parent)))
def test_no_raw_git_command_strings(path: Path) -> None:
    assert raw_git_calls(path) == []


@pytest.fixture
def repo(tmp_path: Path) -> Git:
    git = Git.init(tmp_path / "repo")
    (git.path / "f").write_text("a\n")
    git.run("add", "f")
    git.run("commit", "--quiet", "-m", "one")
    return git


def write_patch(path: Path, old: str, new: str) -> Path:
    path.write_text(f"--- a/f\n+++ b/f\n@@ -1 +1 @@\n-{old}\n+{new}\n")
    return path


def test_show_file_and_file_at(repo: Git) -> None:
    assert repo.show_file("HEAD", "f") == "a\n" == repo.file_at("HEAD", "f")
    assert repo.file_at("HEAD", "missing") is None
    with pytest.raises(GitFailed):
        repo.show_file("HEAD", "missing")
    with pytest.raises(GitFailed):  # no such commit: an error, not "no such file"
        repo.file_at("0" * 40, "f")


def test_remove_worktree_leaves_unknown_paths_alone(repo: Git, tmp_path: Path) -> None:
    stranger = tmp_path / "not-a-worktree"
    stranger.mkdir()
    repo.remove_worktree(stranger)
    assert stranger.is_dir()
    tree = repo.add_worktree(tmp_path / "tree", repo.head())
    repo.remove_worktree(tree.path)
    assert not tree.path.exists() and repo.worktrees() == [repo.path.resolve()]


def test_restore_puts_back_only_refs_still_where_the_rebase_put_them(repo: Git) -> None:
    first = repo.head()
    (repo.path / "f").write_text("b\n")
    repo.run("commit", "--quiet", "-am", "two")
    second = repo.head()
    recorded = {}
    made, moved, taken = "refs/tags/made", "refs/heads/moved", "refs/tags/taken-over"
    for ref, before in ((made, None), (moved, first), (taken, None)):
        recorded[ref] = RefMove(before=before, after=second)
        repo.update_ref(ref, second)
    repo.update_ref(taken, first)  # someone else re-pointed it after the rebase made it
    repo.update_ref("refs/tags/theirs", first)  # someone else's, never recorded
    assert restore_refs(repo, recorded) == [taken]
    current = repo.refs()
    assert made not in current and current[moved] == first
    assert current[taken] == first and current["refs/tags/theirs"] == first
