"""Patches applied in a private index of only the files they name (the engine's fast rung):
one `git apply --cached` per run of patches on disjoint files.
`TreeListing`: HEAD's tree as the fast rung knows it: the paths the patches name, asked of git once."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import islice
from pathlib import Path
from typing import TypeVar

from forkbuild.io.git import Git, PathChange, TreeEntry
from forkbuild.series.patchfile import S_IFDIR, S_IFLNK

T = TypeVar("T")


def parents(path: str) -> list[str]:
    """The directories `path` is in ("a/b/c" -> "a", "a/b")."""
    parts = path.split("/")
    return ["/".join(parts[:depth]) for depth in range(1, len(parts))]


def disjoint_run(candidates: Iterable[T], paths_of: Callable[[T], frozenset[str]], *,
                 limit: int | None = None) -> list[T]:
    """The leading candidates (at most `limit`, read lazily) that name no file one before names
    (a file below or above one named before is TreeListing.changes' to judge)."""
    run: list[T] = []
    named: set[str] = set()
    for candidate in islice(candidates, limit):
        paths = paths_of(candidate)
        if not paths.isdisjoint(named):
            break
        run.append(candidate)
        named |= paths
    return run


def apply_small(git: Git, patches: Sequence[Path], *, index: Path, entries: Mapping[str, TreeEntry], strip: int = 1,
                unidiff_zero: bool = False, written: bool = False) -> tuple[dict[str, TreeEntry], str] | None:
    """`patches` strictly into `index`, written to hold `entries` (unless `written`: it does
    already), all or nothing: every entry afterwards and git's -v report; None when they do not apply."""
    if not written:  # a private index of exactly `entries` (no stat data: only for --cached)
        index.unlink(missing_ok=True)
        git.update_index(index, entries)
    applied = git.apply_to_index(list(patches), index=index, strip=strip, unidiff_zero=unidiff_zero)
    if applied.status != 0:
        return None
    return git.read_index(index), applied.stdout + applied.stderr


class TreeListing:
    """A commit's tree as the fast rung knows it: the entries of the paths asked about (of git, in
    one `ls-tree` per batch, each path with the directories above it), and the changes made on top."""

    def __init__(self, git: Git, commit: str) -> None:
        self._git, self._commit = git, commit
        self._base: dict[str, TreeEntry | None] = {}  # each path asked about: its entry, None when absent
        self._changed: dict[str, TreeEntry | None] = {}  # path -> its entry now; None: deleted

    def learn(self, paths: Iterable[str]) -> None:
        """Ask git, at once, about `paths` and the directories above them (those not asked yet)."""
        wanted = {asked for path in paths for asked in (path, *parents(path))} - self._base.keys()
        if wanted:
            found = self._git.tree_entries(self._commit, wanted)
            self._base.update((path, found.get(path)) for path in wanted)

    def symlinks(self) -> frozenset[str]:
        """The symbolic links among the paths asked about (in the commit's own tree)."""
        return frozenset(path for path, entry in self._base.items() if entry is not None and entry.mode == S_IFLNK)

    def _get(self, path: str) -> TreeEntry | None:
        """The file, symlink or gitlink at `path` now (None: nothing, or a directory)."""
        entry = self._changed[path] if path in self._changed else self._base[path]
        return None if entry is None or entry.mode == S_IFDIR else entry

    def entries_for(self, paths: Iterable[str]) -> dict[str, TreeEntry]:
        """The files among `paths` that the tree holds: what the small index starts from."""
        paths = list(paths)
        self.learn(paths)
        found = {path: self._get(path) for path in paths}
        return {path: entry for path, entry in found.items() if entry is not None}

    def changes(self, before: Mapping[str, TreeEntry], after: Mapping[str, TreeEntry]) -> tuple[PathChange, ...] | None:
        """What git changed in the small index, or None when git would have refused it on the full
        index (a file created where the tree has one, a directory, or below a file kept)."""
        deleted = {path for path in before if path not in after}
        created = after.keys() - before.keys()
        self.learn(created)
        for path in created:
            # A directory there: the commit's (even one the changes emptied: the full rungs tell), or a change's.
            held = self._base[path]
            if self._get(path) is not None or (held is not None and held.mode == S_IFDIR) or \
                    any(name.startswith(path + "/") and entry for name, entry in self._changed.items()):
                return None
            if any(self._get(parent) is not None and parent not in deleted for parent in parents(path)):
                return None
        changed = [PathChange(path=path, mode=0) for path in sorted(deleted)]
        changed += [PathChange(path=path, mode=entry.mode, blob=entry.blob) for path, entry in sorted(after.items())
                    if before.get(path) != entry]
        return tuple(changed)

    def update(self, changes: Iterable[PathChange]) -> None:
        for change in changes:
            self._changed[change.path] = TreeEntry(change.mode, change.blob) if change.mode else None
