"""A combination's patched files without a work tree: the apply engine's index-only mode
commits the patches in the cache; the changed files are read from its blobs. None when a
patch does not apply there (the builder's work-tree apply then says why)."""

from __future__ import annotations

from forkbuild.apply import apply_in_index, plan_variant
from forkbuild.combination import Combination
from forkbuild.context import Context
from forkbuild.wheel.plan import OverlayChanges, WheelLayout, collect_changes

EXECUTABLE = "100755"


def patched_changes(*, context: Context, combination: Combination, layout: WheelLayout) -> OverlayChanges | None:
    applied = apply_in_index(context=context, plan=plan_variant(context.series, combination))
    if applied is None:
        return None
    git = context.upstream.git()
    changed = git.changed_blobs(*applied)
    blobs = {path: (blob, mode == EXECUTABLE) for _, path, mode, blob in changed}
    return collect_changes(changed=[(status, path) for status, path, _, _ in changed], layout=layout,
                           read=lambda path: (git.blob_content(blobs[path][0]), blobs[path][1]))
