"""What upstream's new release says about a patch: where its tree already carries each
hunk's result (the evidence for a drop), and upstream's own hunks that collided with
a patch that stopped."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import unidiff

from forkbuild.io.git import Git
from forkbuild.series.patchfile import parse_diff

# Lines around a patch hunk that still count as its region: earlier fork patches shift lines a little.
MARGIN = 10


@dataclass(frozen=True, kw_only=True)
class HunkEvidence:
    file: str
    hunk: int  # 1-based, in the patch
    found: bool
    start: int = 0  # 1-based lines of the new tree that carry the hunk's added lines
    end: int = 0
    how: str = ""  # "post-image" | "added lines" | "file identical" | "file absent" | "not found"

    def describe(self) -> str:
        if not self.found:
            return f"{self.file} hunk {self.hunk}: not in upstream"
        if self.start:
            return f"{self.file}:{self.start}-{self.end} (hunk {self.hunk}, {self.how})"
        return f"{self.file} ({self.how})"


def _find(haystack: list[str], needle: list[str]) -> int:
    return next((index for index in range(len(haystack) - len(needle) + 1)
                 if haystack[index:index + len(needle)] == needle), -1) if needle else -1


def _hunk_evidence(path: str, number: int, hunk: unidiff.Hunk, lines: list[str]) -> HunkEvidence:
    post = [line.value for line in hunk.target_lines()]
    added = [line.value for line in hunk if line.is_added]
    at = _find(lines, post)
    if at >= 0:
        # Point at the added lines inside the post-image (or the whole of it for pure removals).
        first = next((i for i, line in enumerate(hunk.target_lines()) if line.is_added), 0)
        length = len(added) or len(post)
        return HunkEvidence(file=path, hunk=number, found=True, start=at + first + 1, end=at + first + length,
                            how="post-image")
    at = _find(lines, added)
    if at >= 0:
        return HunkEvidence(file=path, hunk=number, found=True, start=at + 1, end=at + len(added), how="added lines")
    return HunkEvidence(file=path, hunk=number, found=False, how="not found")


def evidence(repo: Git, *, commit: str, patch_text: str) -> list[HunkEvidence]:
    """For each hunk of `patch_text`: where `commit`'s tree already has its result."""
    found = []
    for patched in parse_diff(patch_text):
        path = patched.path
        text = repo.file_at(commit, path)
        present = text is not None
        if patched.is_removed_file or text is None:
            found.append(HunkEvidence(file=path, hunk=0, found=patched.is_removed_file and not present,
                                      how="file absent" if patched.is_removed_file else "not found"))
            continue
        lines = text.splitlines(keepends=True)
        if patched.is_added_file:
            wanted = [line.value for hunk in patched for line in hunk.target_lines()]
            found.append(HunkEvidence(file=path, hunk=0, found=wanted == lines, how="file identical"))
            continue
        found += [_hunk_evidence(path, number, hunk, lines) for number, hunk in enumerate(patched, start=1)]
    return found


def upstream_collisions(repo: Git, *, old_base: str, new_base: str, renamed: Mapping[str, str], patch: Path,
                        files: tuple[str, ...]) -> str:
    """Upstream's hunks (old_base -> new_base) near the patch's hunks in `files`, as diff text ("" if none);
    a file upstream renamed (`renamed`: old path -> new path) is shown against its new name."""
    if not files:
        return ""
    ours = {renamed.get(patched.path, patched.path): [(hunk.source_start, hunk.source_start + hunk.source_length)
                                                       for hunk in patched]
            for patched in parse_diff(patch.read_text(encoding="utf-8", errors="surrogateescape"))}
    before = {new: old for old, new in renamed.items() if new in files}
    shown = []
    for patched in parse_diff(repo.diff_between(old_base, new_base, [*files, *before.values()], renames=bool(before))):
        if patched.is_removed_file and patched.path in ours:  # its lines say nothing the file's absence does not
            shown.append(f"{patched.path}: removed upstream (all {patched.removed} lines)")
            continue
        near = [hunk for hunk in patched if any(hunk.source_start <= end + MARGIN
                                                and start <= hunk.source_start + hunk.source_length + MARGIN
                                                for start, end in ours.get(patched.path, []))]
        if near:
            shown.append(f"{patched.path}:")
            shown += [str(hunk).rstrip("\n") for hunk in near]
    return "\n".join(shown)
