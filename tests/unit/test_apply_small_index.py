"""The grouping both small-index users share (the apply engine's fast rung, import --quilt)."""

from __future__ import annotations

from collections.abc import Iterator

from forkbuild.worktree.smallindex import disjoint_run, parents


def named(*paths: str) -> frozenset[str]:
    return frozenset(paths)


def test_a_run_ends_at_the_first_patch_naming_a_file_named_before() -> None:
    patches = [named("a"), named("b", "c"), named("c"), named("d")]
    assert disjoint_run(patches, lambda paths: paths) == [named("a"), named("b", "c")]


def test_directories_end_a_run_at_a_file_below_or_above_one_named_before() -> None:
    below = [named("sub"), named("sub/new.txt")]
    above = [named("sub/x/y.c"), named("sub/x")]
    for patches in (below, above):
        assert disjoint_run(patches, lambda paths: paths) == patches  # names alone are disjoint
        assert disjoint_run(patches, lambda paths: paths, directories=True) == patches[:1]
    # Siblings in one directory share a run.
    siblings = [named("sub/a"), named("sub/b")]
    assert disjoint_run(siblings, lambda paths: paths, directories=True) == siblings


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
