"""What each patch of a quilt series does to the tree, found with few `git apply`
processes: a patch is applied to a private index of just the files it names
(worktree/smallindex.py), and consecutive patches of disjoint files share one process.
Where that could differ from applying to the whole tree (names unknown, a file/directory
clash, git touching a name the diff spells otherwise) the patch goes to a full index.
A file a patch leaves empty is removed, as GNU patch -E (dpkg-source, quilt) does.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from forkbuild.errors import ApplyError
from forkbuild.git import Git, TreeEntry
from forkbuild.quiltdiff import EMPTY_BLOB
from forkbuild.worktree.smallindex import apply_small, disjoint_run, parents

# Patches per `git apply` process: a group that fails is redone one by one, so not unbounded.
GROUP_MAX = 24

Changes = dict[str, TreeEntry | None]  # path -> its new entry; None: deleted
REGULAR_MODES = (0o100644, 0o100755)


@dataclass(frozen=True, kw_only=True)
class Applied:
    """What one patch did: its changes ({}: nothing), and the files it left empty, removed."""

    changes: Changes
    emptied: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Applicable:
    """One patch, ready for `git apply`."""

    source: Path  # the quilt file, for messages
    patch: Path  # the git-ready diff (quiltdiff.git_ready), written out
    strip: int
    unidiff_zero: bool
    paths: frozenset[str] | None  # every path it names; None: not known


class Applier:
    """What each patch changes, applied in order on the commit `start` (`items`: its files,
    Git.tree_entries); ApplyError for the first patch that does not apply."""

    def __init__(self, git: Git, *, start: str, items: Mapping[str, TreeEntry], scratch: Path) -> None:
        self.git, self.start = git, start
        self.small_index, self.full_index = scratch / "small.index", scratch / "full.index"
        self.base = dict(items)
        self.state = dict(self.base)  # the tree after the patches so far
        self.directories = {parent for path in self.state for parent in parents(path)}

    def run(self, patches: Sequence[Applicable]) -> list[Applied]:
        out: list[Applied] = []
        at = 0
        while at < len(patches):
            group = self._group(patches, at)
            found = self._apply_small(group) if len(group) > 1 else None
            if found is None:
                found = [self._apply_one(patch) for patch in (group or patches[at:at + 1])]
            out += found
            at += max(len(group), 1)
        return out

    def _group(self, patches: Sequence[Applicable], at: int) -> list[Applicable]:
        """The patches from `at` on that can share one small index: [] when the one at `at`
        needs the whole tree."""
        first = patches[at]

        def alike() -> Iterator[Applicable]:  # one `git apply` has one -p level and --unidiff-zero
            for patch in patches[at:]:
                if (patch.paths is None or patch.strip != first.strip or patch.unidiff_zero != first.unidiff_zero
                        or self._needs_whole_tree(patch.paths)):
                    return
                yield patch

        return disjoint_run(alike(), lambda patch: patch.paths or frozenset(), limit=GROUP_MAX, directories=True)

    def _needs_whole_tree(self, paths: frozenset[str]) -> bool:
        """A name that is a directory of the tree, or under one of its files: how git
        settles that depends on the entries around it."""
        return any(path in self.directories or any(parent in self.state for parent in parents(path))
                   for path in paths)

    def _apply_one(self, patch: Applicable) -> Applied:
        if patch.paths is not None and not self._needs_whole_tree(patch.paths):
            found = self._apply_small([patch])
            if found is not None:
                return found[0]
        return self._apply_whole(patch)

    def _apply_small(self, group: list[Applicable]) -> list[Applied] | None:
        """Each patch's changes, from one `git apply` on an index of just the files they
        name; None when that does not settle it (the caller goes patch by patch)."""
        named = frozenset().union(*(patch.paths or () for patch in group))
        applied = apply_small(self.git, [patch.patch for patch in group], index=self.small_index,
                              entries={path: self.state[path] for path in named if path in self.state},
                              strip=group[0].strip, unidiff_zero=group[0].unidiff_zero)
        if applied is None or not applied[0].keys() <= named:  # or git patched a name the diff spells otherwise
            return None
        return [self._record({path: applied[0].get(path) for path in sorted(patch.paths or ())}) for patch in group]

    def _apply_whole(self, patch: Applicable) -> Applied:
        self.git.read_tree(self.start, index=self.full_index)
        so_far = {path: self.state.get(path) for path in self.base.keys() | self.state.keys()
                  if self.base.get(path) != self.state.get(path)}
        if so_far:
            self.git.update_index(self.full_index, so_far)
        applied = self.git.apply_to_index(patch.patch, index=self.full_index, strip=patch.strip,
                                          unidiff_zero=patch.unidiff_zero)
        if applied.status != 0:
            raise ApplyError(f"{patch.source} does not apply on top of the series: {applied.stderr or applied.stdout}",
                             hint="refresh it against the series first (quilt push/refresh), "
                                  "or fix its -p level in `series`")
        after = self.git.tree_entries(self.git.write_tree(index=self.full_index))
        return self._record({path: after.get(path) for path in sorted(after.keys() | self.state.keys())})

    def _record(self, after: Changes) -> Applied:
        """The patch's entries `after` it (of the paths it may have changed) into the state,
        a file it left empty removed; what changed."""
        changed = {path: item for path, item in after.items() if item != self.state.get(path)}
        emptied = tuple(path for path, item in changed.items()
                        if item and item.blob == EMPTY_BLOB and item.mode in REGULAR_MODES)
        changed.update(dict.fromkeys(emptied))
        # A new file left empty is not made at all (GNU patch -E): no change.
        changes = {path: item for path, item in changed.items() if item != self.state.get(path)}
        for path, item in changes.items():
            if item is None:
                self.state.pop(path, None)
            else:
                self.state[path] = item
                self.directories.update(parents(path))  # a deleted file's directories stay: at worst a whole-tree apply
        return Applied(changes=changes, emptied=emptied)
