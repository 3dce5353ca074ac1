"""The grouping both small-index users share (the apply engine's fast rung, import --quilt), and
the listing of HEAD's tree the fast rung keeps up to date on top of a base's listing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from fixtures import commit_all
from forkbuild.io.git import Git, PathChange, TreeEntry
from forkbuild.worktree.smallindex import TreeListing, disjoint_run, parents


def named(*paths: str) -> frozenset[str]:
    return frozenset(paths)


def test_a_run_ends_at_the_first_patch_naming_a_file_named_before() -> None:
    patches = [named("a"), named("b", "c"), named("c"), named("d")]
    assert disjoint_run(patches, lambda paths: paths) == [named("a"), named("b", "c")]


def test_candidates_are_read_lazily_and_at_most_limit() -> None:
    read: list[int] = []

    def candidates() -> Iterator[frozenset[str]]:
        for number in range(10):
            read.append(number)
            yield named(f"f{number}")

    assert len(disjoint_run(candidates(), lambda paths: paths, limit=3)) == 3
    assert read == [0, 1, 2]  # a caller's generator computes nothing past the limit
    read.clear()
    clash = iter([named("x"), named("x"), named("never read")])
    assert disjoint_run(clash, lambda paths: paths) == [named("x")]
    assert next(clash) == named("never read")  # one past the last taken, not more


def test_parents_are_the_directories_a_path_is_in() -> None:
    assert parents("a/b/c") == ["a", "a/b"]
    assert parents("top") == []


# -- the listing the fast rung keeps of HEAD's tree ------------------------------------


def base_tree(tmp_path: Path) -> tuple[Git, str, dict[str, TreeEntry]]:
    """A commit of a.txt, d/x.py (executable), f, [a]x and the symbolic link ln -> d; its files' entries."""
    repo = Git.init(tmp_path / "repo")
    for name, text in (("a.txt", "a\n"), ("d/x.py", "x = 1\n"), ("f", "f\n"), ("[a]x", "glob\n")):
        (repo.path / name).parent.mkdir(parents=True, exist_ok=True)
        (repo.path / name).write_text(text)
    (repo.path / "d/x.py").chmod(0o755)
    (repo.path / "ln").symlink_to("d")
    commit = commit_all(repo, "base")
    return repo, commit, repo.tree_entries(commit)


def test_changes_go_on_top_of_the_base_which_is_not_changed(tmp_path: Path) -> None:
    repo, commit, base = base_tree(tmp_path)
    listing = TreeListing(repo, commit)
    listing.update([PathChange(path="a.txt", mode=0), PathChange(path="new/y.py", mode=0o100644, blob="4" * 40),
                    PathChange(path="f", mode=0o100755, blob="5" * 40)])
    assert listing.entries_for(["a.txt", "new/y.py", "f", "d/x.py", "d"]) == {
        "new/y.py": TreeEntry(0o100644, "4" * 40), "f": TreeEntry(0o100755, "5" * 40), "d/x.py": base["d/x.py"]}
    assert TreeListing(repo, commit).entries_for(["a.txt", "f"]) == {"a.txt": base["a.txt"], "f": base["f"]}
    blob = base["a.txt"].blob
    # A deleted file may come back; one made on top is there for the next patch's checks.
    assert listing.changes({}, {"a.txt": TreeEntry(0o100644, blob)}) == (
        PathChange(path="a.txt", mode=0o100644, blob=blob),)
    assert listing.changes({}, {"new/y.py": TreeEntry(0o100644, "6" * 40)}) is None  # "already exists"
    assert listing.changes({}, {"new": TreeEntry(0o100644, blob)}) is None  # a directory there now
    assert listing.changes({}, {"d": TreeEntry(0o100644, blob)}) is None  # the commit's directory
    assert listing.changes({}, {"f/below": TreeEntry(0o100644, blob)}) is None  # below a file
    listing.update([PathChange(path="new/y.py", mode=0)])
    assert listing.changes({}, {"new": TreeEntry(0o100644, blob)}) == (PathChange(path="new", mode=0o100644, blob=blob),)


def test_the_symbolic_links_are_those_among_the_paths_asked_about(tmp_path: Path) -> None:
    repo, commit, _ = base_tree(tmp_path)
    listing = TreeListing(repo, commit)
    listing.learn(["d/x.py", "f"])
    assert listing.symlinks() == frozenset()
    listing.learn(["ln/x.py"])  # a path through the link: its directories are asked about too
    assert listing.symlinks() == {"ln"}
    entries = repo.tree_entries(commit)
    # Exactly the paths asked about: "[a]x" is itself, and the file ls-tree adds beside it is not an answer.
    assert listing.entries_for(["ln/x.py", "[a]x", "a.txt"]) == {"[a]x": entries["[a]x"], "a.txt": entries["a.txt"]}
