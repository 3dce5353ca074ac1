"""One patch onto the new base, up the ladder: already upstream? -> exact ->
offset -> 3-way merge -> stop with conflict markers.

git is the patch engine throughout: `git apply --reverse --check` (is the
change there already?), `git apply --check` + `git am` (exact or offset; git
never fuzzes unless asked, and we never ask), `git am -3` (merge with the
preimage blobs named by the patch's full index lines, present in the cache
because the old series was applied there first).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from forkbuild.errors import RebaseStopped
from forkbuild.git import Git
from forkbuild.patchfile import check_safe, hunk_offsets
from forkbuild.rebase.upstreamed import HunkEvidence, evidence

INDEX_LINE = re.compile(r"^index ([0-9a-f]+)\.\.[0-9a-f]+", re.MULTILINE)
ZERO_BLOB = re.compile(r"^0+$")


@dataclass(frozen=True, kw_only=True)
class Step:
    """What happened to one patch. outcome: clean | offset | 3way | upstreamed | conflict |
    resolved | emptied | dropped."""

    outcome: str
    commit: str = ""
    detail: str = ""
    evidence: tuple[HunkEvidence, ...] = field(default_factory=tuple)
    conflicts: tuple[str, ...] = ()


def _patch_text(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="surrogateescape")


def missing_preimages(worktree: Git, patch_text: str) -> list[str]:
    """Preimage blobs a 3-way merge needs but the repository lacks (git would not merge then)."""
    return [sha for sha in INDEX_LINE.findall(patch_text)
            if not ZERO_BLOB.match(sha) and not worktree.has_object(sha)]


def replay(worktree: Git, patch: Path, *, upstream: str) -> Step:
    """Apply one patch on top of the work tree's HEAD; a conflict leaves `git am` stopped there.

    Evidence for an upstreamed patch points into `upstream` (the new release's
    commit), not HEAD, whose line numbers the earlier fork patches shift."""
    check_safe(patch, tree=worktree.path)
    text = _patch_text(patch)
    head = worktree.head()
    if worktree.apply_check(patch, reverse=True):
        return Step(outcome="upstreamed", detail="the new upstream already holds the patch's result (it reverse-applies)",
                    evidence=tuple(evidence(worktree, commit=upstream, patch_text=text)))
    if worktree.apply_check(patch):
        result = worktree.am([patch], three_way=False, committer_date_is_author_date=True)
        if result.status != 0:
            worktree.am_abort()
            raise RebaseStopped(f"{patch.name}: `git apply --check` passed but `git am` failed:\n{result.stderr}")
        commit = worktree.head()
        moved = hunk_offsets(text, worktree.diff_tree_patch(commit))
        return Step(outcome="offset" if moved else "clean", commit=commit, detail="; ".join(moved))
    missing = missing_preimages(worktree, text)
    result = worktree.am([patch], three_way=True, committer_date_is_author_date=True)
    if result.status == 0:
        if worktree.head() == head:
            return Step(outcome="upstreamed", detail="a 3-way merge left nothing to change (upstream already has it)",
                        evidence=tuple(evidence(worktree, commit=upstream, patch_text=text)))
        return Step(outcome="3way", commit=worktree.head(), detail="merged with the old series' blobs")
    reason = next((line.strip() for line in (result.stdout + "\n" + result.stderr).splitlines()
                   if line.startswith(("error:", "CONFLICT"))), "does not apply")
    if missing:
        reason += f"; no 3-way merge possible: preimage blob(s) {', '.join(s[:12] for s in missing)} are not in the cache"
    return Step(outcome="conflict", detail=reason, conflicts=tuple(worktree.unmerged_paths()))


def settle(worktree: Git, *, patch: Path, head_before: str) -> Step:
    """After the user dealt with a conflict: resolved (a commit), or emptied (nothing left)."""
    if worktree.am_in_progress():
        unmerged = worktree.unmerged_paths()
        if unmerged:
            raise RebaseStopped(f"{patch.name}: still unmerged: {', '.join(unmerged)}",
                                hint=f"resolve the conflict markers in {worktree.path}, `git add` the files, "
                                     "then `forkbuild rebase --continue`")
        _refuse_unstaged(worktree, patch)
        if worktree.has_staged_changes():
            worktree.am_continue()
            return _settled(worktree, patch=patch, head_before=head_before)
        # Nothing staged: either the user committed by hand, or the resolution kept upstream's side everywhere.
        worktree.am_skip()
    else:
        _refuse_unstaged(worktree, patch)
    return _settled(worktree, patch=patch, head_before=head_before)


def _refuse_unstaged(worktree: Git, patch: Path) -> None:
    dirty = [line for line in worktree.status_porcelain().splitlines() if line[1:2] not in (" ", "")]
    if dirty:
        raise RebaseStopped(f"{patch.name}: the work tree has changes that are not staged:\n" + "\n".join(dirty),
                            hint=f"`git -C {worktree.path} add` what belongs to the patch and remove the rest, "
                                 "then `forkbuild rebase --continue`")


def _settled(worktree: Git, *, patch: Path, head_before: str) -> Step:
    made = worktree.commits(head_before, worktree.head())
    if len(made) > 1:
        raise RebaseStopped(f"{patch.name}: {len(made)} commits were made for one patch",
                            hint=f"squash them into one (git -C {worktree.path} reset --soft {head_before[:12]} && git commit)")
    if not made:
        return Step(outcome="emptied", detail="your conflict resolution kept upstream's side: nothing of the patch is left")
    return Step(outcome="resolved", commit=made[0], detail="conflict resolved by hand")


def skip(worktree: Git, *, head_before: str) -> None:
    """Leave the stopped patch out: the tree goes back to before it."""
    worktree.am_abort()
    worktree.reset_hard(head_before)
    worktree.clean_untracked()

