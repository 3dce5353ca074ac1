"""Patches applied in a small private index holding only the files they name (the engine's
fast rung, `import --quilt`): one `git apply --cached` takes a run of patches on disjoint
files, and each file's entry afterwards is its one patch's result."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import islice
from pathlib import Path
from typing import NamedTuple, TypeVar

from forkbuild.git import Git, TreeEntry

T = TypeVar("T")


def parents(path: str) -> list[str]:
    """The directories `path` is in ("a/b/c" -> "a", "a/b")."""
    parts = path.split("/")
    return ["/".join(parts[:depth]) for depth in range(1, len(parts))]


def disjoint_run(candidates: Iterable[T], paths_of: Callable[[T], frozenset[str]], *, limit: int | None = None,
                 directories: bool = False) -> list[T]:
    """The leading candidates (at most `limit`, read lazily) that name no file one before names;
    directories: nor a file where one before has a directory, or the other way round."""
    run: list[T] = []
    named: set[str] = set()
    named_dirs: set[str] = set()
    for candidate in islice(candidates, limit):
        paths = paths_of(candidate)
        if not paths.isdisjoint(named):
            break
        if directories:
            above = {parent for path in paths for parent in parents(path)}
            if not paths.isdisjoint(named_dirs) or not above.isdisjoint(named):
                break
            named_dirs |= above
        run.append(candidate)
        named |= paths
    return run


class SmallApply(NamedTuple):
    """What one `git apply --cached -v` made of a small index."""

    before: Mapping[str, TreeEntry]  # the entries it started from
    after: dict[str, TreeEntry]  # every entry afterwards
    report: str  # git's stdout and stderr (-v: the offsets, for read_report)


def apply_small(git: Git, patches: Sequence[Path], *, index: Path, entries: Mapping[str, TreeEntry], strip: int = 1,
                unidiff_zero: bool = False, written: bool = False) -> SmallApply | None:
    """`patches` strictly into `index`, written to hold `entries` (unless `written`: it does
    already), all or nothing; None when they do not apply there."""
    if not written:
        git.write_index(index, entries)
    applied = git.apply_to_index(list(patches), index=index, strip=strip, unidiff_zero=unidiff_zero)
    if applied.status != 0:
        return None
    return SmallApply(before=entries, after=git.read_index(index), report=applied.stdout + applied.stderr)
