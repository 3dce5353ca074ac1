"""A combination's patched files for a wheel, without a work tree.

A scratch work tree checks out all ~6,400 files of upstream for every build,
the slowest step of an overlay build after validation. A wheel only needs the
files the patches change, so here git applies the combination's patches to a
private index (`git apply --cached --3way`, one patch after the other, as
`git am -3` would: same patches, same 3-way fallback on the whole series'
blobs, never fuzz) and the changed blobs are read from the resulting tree.

Trees are kept per patch-list prefix for the life of the process: the
combinations of a matrix or a bisect share prefixes, and each one applies only
the patches after the longest prefix already applied.

A combination whose patches do not all apply here gets None: the caller falls
back to the strict work-tree apply, which reports the failure with its reasons.
"""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

from forkbuild.apply import ensure_series_blobs, plan_variant
from forkbuild.cache import UpstreamCache
from forkbuild.context import Context
from forkbuild.guards_module import generated_files
from forkbuild.matrix.combination import Combination
from forkbuild.wheel.plan import OverlayChanges, WheelLayout, collect_changes

# (cache repository, upstream commit, sha256 of each patch applied so far) -> tree
_PREFIX_TREES: dict[tuple[str, str, tuple[str, ...]], str] = {}


def patched_changes(*, context: Context, combination: Combination, layout: WheelLayout) -> OverlayChanges | None:
    plan = plan_variant(context.series, combination)  # checks every patch's path safety
    cache = UpstreamCache(context.cache_dir, reporter=context.reporter)
    base = cache.ensure(context.series.upstream)
    if plan.left_out and plan.entries:
        ensure_series_blobs(context=context, cache=cache, base=base)
    git = cache.git()
    digests = tuple(hashlib.sha256(entry.path.read_bytes()).hexdigest() for entry in plan.entries)
    repository = str(git.git_dir)
    done = max((length for length in range(len(digests) + 1)
                if (repository, base, digests[:length]) in _PREFIX_TREES), default=0)
    tree = _PREFIX_TREES.get((repository, base, digests[:done]), base)
    with tempfile.TemporaryDirectory(prefix="forkbuild-index-") as scratch:
        index = Path(scratch) / "index"
        if done < len(digests):
            git.read_tree(tree, index=index)
        for length in range(done + 1, len(digests) + 1):
            applied = git.apply_cached(plan.entries[length - 1].path, index=index)
            if applied is None:
                return None
            tree = applied
            _PREFIX_TREES[(repository, base, digests[:length])] = tree
    changed = git.changed_files(base, tree) if plan.entries else []
    # What apply commits last in a work tree: the build's guards, generated from series.toml.
    generated = generated_files(context.series, plan.features) if plan.entries else {}
    changed = [change for change in changed if change[1] not in generated]
    changed += [("A", path) for path in generated]

    def read(path: str) -> tuple[bytes, bool]:
        return (generated[path], False) if path in generated else git.blob(tree, path)

    return collect_changes(changed=changed, layout=layout, read=read)
