"""HEAD's tree as the engine's fast rung knows it without asking git per patch: every file's
mode and blob, updated with each patch's changes; and whether what git did in a small index
is what it would have done on the full one."""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Mapping

from forkbuild.git import PathChange, TreeEntry
from forkbuild.worktree.smallindex import parents


class TreeListing:
    """`entries` (a base's listing, shared, not copied) with the changes made on top."""

    def __init__(self, entries: Mapping[str, TreeEntry]) -> None:
        self._base = entries
        self._changed: dict[str, TreeEntry | None] = {}  # path -> its entry now; None: deleted
        self._sorted = sorted(entries)

    def _get(self, path: str) -> TreeEntry | None:
        if path in self._changed:
            return self._changed[path]
        return self._base[path] if path in self._base else None

    def entries_for(self, paths: Iterable[str]) -> dict[str, TreeEntry]:
        """The files among `paths` that the tree holds: what the small index starts from."""
        found = {path: self._get(path) for path in paths}
        return {path: entry for path, entry in found.items() if entry is not None}

    def changes(self, before: Mapping[str, TreeEntry], after: Mapping[str, TreeEntry]) -> tuple[PathChange, ...] | None:
        """What git changed in the small index, or None when git would have refused it on the full
        index (a file created where the tree has one, a directory, or below a file kept)."""
        deleted = {path for path in before if path not in after}
        for path in after.keys() - before.keys():
            at = bisect_left(self._sorted, path + "/")  # a directory of the tree is there
            if self._get(path) is not None or (at < len(self._sorted) and self._sorted[at].startswith(path + "/")):
                return None
            if any(self._get(parent) is not None and parent not in deleted for parent in parents(path)):
                return None
        changed = [PathChange(path=path, mode=0) for path in sorted(deleted)]
        changed += [PathChange(path=path, mode=entry.mode, blob=entry.blob) for path, entry in sorted(after.items())
                    if before.get(path) != entry]
        return tuple(changed)

    def update(self, changes: Iterable[PathChange]) -> None:
        for change in changes:
            held = self._get(change.path) is not None
            if not change.mode:
                self._changed[change.path] = None
                at = bisect_left(self._sorted, change.path)
                if held and at < len(self._sorted) and self._sorted[at] == change.path:
                    del self._sorted[at]
            else:
                if not held:
                    insort(self._sorted, change.path)
                self._changed[change.path] = TreeEntry(change.mode, change.blob)
