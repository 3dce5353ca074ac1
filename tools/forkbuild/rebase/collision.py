"""The upstream change a stopped patch collided with: the hunks of upstream's own
diff (old release -> new release) in the conflicted files that overlap the
patch's hunks, so the person resolving sees why the patch no longer fits."""

from __future__ import annotations

from pathlib import Path

import unidiff

from forkbuild.git import Git

# Lines around a patch hunk that still count as "its region": fork patches earlier in the
# series shift line numbers a little, and a change just outside the context still explains it.
MARGIN = 10


def upstream_collisions(repo: Git, *, old_base: str, new_base: str, patch: Path, files: tuple[str, ...]) -> str:
    """Upstream's hunks near the patch's hunks in `files`, as diff text ("" if none)."""
    if not files:
        return ""
    ours: dict[str, list[tuple[int, int]]] = {}
    for patched in unidiff.PatchSet(patch.read_text(encoding="utf-8", errors="surrogateescape")):
        ours[patched.path] = [(hunk.source_start, hunk.source_start + hunk.source_length) for hunk in patched]
    upstream = unidiff.PatchSet(repo.diff_between(old_base, new_base, files))
    shown = []
    for patched in upstream:
        regions = ours.get(patched.path, [])
        near = [hunk for hunk in patched if any(_overlaps(hunk, start, end) for start, end in regions)]
        if near:
            shown.append(f"{patched.path}:")
            shown += [str(hunk).rstrip("\n") for hunk in near]
    return "\n".join(shown)


def _overlaps(hunk: unidiff.Hunk, start: int, end: int) -> bool:
    return hunk.source_start <= end + MARGIN and start <= hunk.source_start + hunk.source_length + MARGIN
