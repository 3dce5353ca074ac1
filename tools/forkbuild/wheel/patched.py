"""A combination's patched files for a wheel, without a work tree.

A scratch work tree checks out all ~6,400 files of upstream for every build,
the slowest step of an overlay build after validation. A wheel only needs the
files the patches change, so here git applies the combination's patches to a
private index and the changed blobs are read from the resulting tree.

Two ways, the cheap one first:

1. One `git apply --cached` of all the combination's patches, in order, on an
   index of upstream (git applies each onto the result of the ones before,
   exact context, offsets allowed, all or nothing). When every patch applies
   this way, `git am -3` would never have needed its 3-way rung either, so the
   result is the strict work-tree apply's. Three git processes (apply,
   write-tree, diff-tree), whatever the number of patches; the index of
   upstream is read once per process and copied (no read-tree per build).
   git applies a patch file by file, so a file's result depends only on the
   patches that touch it: it is kept per (file, those patches), and a later
   combination whose every file has a kept result needs no git process at all
   (a matrix's combinations differ in a few files each).
2. Otherwise (a patch whose context comes from a left-out patch): patch after
   patch with `git apply --cached --3way` on the whole series' blobs, as
   `git am -3` would, never fuzz. These trees are kept per patch-list prefix
   for the life of the process: the combinations of a matrix or a bisect share
   prefixes, and each one applies only the patches after the longest prefix
   already applied.

Which way a combination takes depends only on its patches, never on what was
built before in the process: the same combination gives the same tree in a
matrix and in its own `build-wheel --features`.

A combination whose patches do not all apply either way gets None: the caller
falls back to the strict work-tree apply, which reports the failure with its reasons.
"""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

from forkbuild.apply import ensure_series_blobs, plan_variant
from forkbuild.combination import Combination
from forkbuild.context import Context
from forkbuild.git import Git
from forkbuild.guards_module import generated_files
from forkbuild.wheel.plan import OverlayChanges, WheelLayout, collect_changes

_Key = tuple[str, str, tuple[str, ...]]  # (cache repository, upstream commit, sha256 of each patch in order)
_Change = tuple[str, str, str, str]  # git's (status, path, new mode, new blob) against upstream
# Way 1, per file: (cache repository, upstream commit, path, sha256 of each patch touching it, in order)
# -> the file's change after them, None when they leave it as upstream has it
_FILE_RESULTS: dict[tuple[str, str, str, tuple[str, ...]], _Change | None] = {}
# Patches whose changed files git reported beyond those their diff names (a mode-only
# change, a rename): a combination holding one always asks git.
_NOT_PER_FILE: set[str] = set()
# Way 2: `git apply --cached --3way` patch by patch, per prefix of the list -> tree
_PREFIX_TREES: dict[_Key, str] = {}
# (cache repository, upstream commit) -> the bytes of a private index read from upstream's tree
_UPSTREAM_INDEXES: dict[tuple[str, str], bytes] = {}

# blob id -> its bytes (the patched files of a matrix are the same few blobs again and again;
# the same bytes object also finds its deflated form in zipraw's cache without hashing anew)
_BLOB_CONTENTS: dict[str, bytes] = {}
BLOBS_KEPT = 512  # a bound on memory for an `all` matrix of thousands

EXECUTABLE = "100755"


def patched_changes(*, context: Context, combination: Combination, layout: WheelLayout) -> OverlayChanges | None:
    plan = plan_variant(context.series, combination)  # checks every patch's path safety
    cache = context.upstream
    base = cache.ensure(context.series.upstream)
    git = cache.git()
    digests = tuple(hashlib.sha256(entry.path.read_bytes()).hexdigest() for entry in plan.entries)
    key = (str(git.git_dir), base, digests)
    patches = [entry.path for entry in plan.entries]
    touched = [tuple(change.path for change in info.files) for info in plan.infos]
    changed = _in_order_changes(git, key, patches, touched)
    if changed is None:
        if plan.left_out and plan.entries:
            ensure_series_blobs(context=context, cache=cache, base=base)
        tree = _three_way_tree(git, key, patches)
        if tree is None:
            return None
        changed = git.changed_blobs(base, tree) if plan.entries else []
    # What apply commits last in a work tree: the build's guards, generated from series.toml.
    generated = generated_files(context.series, plan.features) if plan.entries else {}
    blobs = {path: (blob, mode == EXECUTABLE) for status, path, mode, blob in changed if path not in generated}
    statuses = [(status, path) for status, path, _, _ in changed if path not in generated]
    statuses += [("A", path) for path in generated]

    def read(path: str) -> tuple[bytes, bool]:
        if path in generated:
            return generated[path], False
        blob, executable = blobs[path]
        if blob not in _BLOB_CONTENTS:
            if len(_BLOB_CONTENTS) >= BLOBS_KEPT:
                _BLOB_CONTENTS.clear()
            _BLOB_CONTENTS[blob] = git.blob_content(blob)
        return _BLOB_CONTENTS[blob], executable

    return collect_changes(changed=statuses, layout=layout, read=read)


def _upstream_index(git: Git, base: str, index: Path) -> None:
    """Write a private index of upstream's tree to `index`: read-tree once per process, a copy after."""
    known = (str(git.git_dir), base)
    if known not in _UPSTREAM_INDEXES:
        git.read_tree(base, index=index)
        _UPSTREAM_INDEXES[known] = index.read_bytes()
    else:
        index.write_bytes(_UPSTREAM_INDEXES[known])


def _in_order_changes(git: Git, key: _Key, patches: list[Path],
                      touched: list[tuple[str, ...]]) -> list[_Change] | None:
    """Way 1 (see the module's docstring): the changed files against upstream; None when
    some patch does not apply so."""
    repository, base, digests = key
    if not digests:
        return []
    chains: dict[str, list[str]] = {}
    for digest, paths in zip(digests, touched, strict=True):
        for path in dict.fromkeys(paths):
            chains.setdefault(path, []).append(digest)
    keys = {path: (repository, base, path, tuple(chain)) for path, chain in chains.items()}
    if _NOT_PER_FILE.isdisjoint(digests) and not _nested(chains) and all(k in _FILE_RESULTS for k in keys.values()):
        return sorted(change for k in keys.values() if (change := _FILE_RESULTS[k]) is not None)
    with tempfile.TemporaryDirectory(prefix="forkbuild-index-") as scratch:
        index = Path(scratch) / "index"
        _upstream_index(git, base, index)
        tree = git.apply_cached_in_order(patches, index=index)
    if tree is None:
        return None
    changed = git.changed_blobs(base, tree)
    by_path = {change[1]: change for change in changed}
    if set(by_path) - set(chains):
        _NOT_PER_FILE.update(digests)
    else:
        for path, k in keys.items():
            _FILE_RESULTS[k] = by_path.get(path)
    return changed


def _nested(paths: dict[str, list[str]]) -> bool:
    """Whether one path is a directory of another (a file/directory clash git judges across files)."""
    directories = {"/".join(path.split("/")[:depth]) for path in paths for depth in range(1, path.count("/") + 1)}
    return not directories.isdisjoint(paths)


def _three_way_tree(git: Git, key: _Key, patches: list[Path]) -> str | None:
    """Way 2 (see the module's docstring); None when some patch does not apply even so."""
    repository, base, digests = key
    done = max((length for length in range(len(digests) + 1)
                if (repository, base, digests[:length]) in _PREFIX_TREES), default=0)
    tree = _PREFIX_TREES.get((repository, base, digests[:done]), base)
    with tempfile.TemporaryDirectory(prefix="forkbuild-index-") as scratch:
        index = Path(scratch) / "index"
        if done < len(digests):
            git.read_tree(tree, index=index)
        for length in range(done + 1, len(digests) + 1):
            applied = git.apply_cached(patches[length - 1], index=index)
            if applied is None:
                return None
            tree = applied
            _PREFIX_TREES[(repository, base, digests[:length])] = tree
    return tree
