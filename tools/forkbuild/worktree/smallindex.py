"""Patches applied in a small private index: one that holds only the files they name.

A tree has thousands of files and `git apply --cached` reads and writes the whole
index each time; a patch names a handful. The apply engine's fast rung and
`import --quilt` both put the files a run of patches names into a private index,
let one `git apply --cached` apply the run there (git applies them one after the
other, all or none), and read back what git made of each file. Patches that name
disjoint files can share that one process: each file's entry afterwards is what
its one patch made of it.

Each caller keeps its own policy on top: which patches may go (memo, strip level,
unidiff-zero), whether what git did there is what it would have done on the full
index, and what to do when a run does not apply (one by one, a full index).
"""

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
    """The leading candidates that one `git apply` can take together: each names no file another
    one before it names (so each file's result is its one patch's). directories: nor a file where
    one before has a directory, or the other way round. At most `limit`; `candidates` is read
    lazily, one past the last taken at most (a caller's generator ends the run where it stops)."""
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
    """`patches` in order into the private index `index`, written to hold exactly `entries` (the
    tree's entries of the files they name), strictly (no fuzz, no 3-way), all or nothing; None
    when they do not apply there (the index is as it was): the caller takes the patches another
    way. written: `index` holds `entries` already (what the caller's run before left there)."""
    if not written:
        git.write_index(index, entries)
    applied = git.apply_to_index(list(patches), index=index, strip=strip, unidiff_zero=unidiff_zero)
    if applied.status != 0:
        return None
    return SmallApply(before=entries, after=git.read_index(index), report=applied.stdout + applied.stderr)
