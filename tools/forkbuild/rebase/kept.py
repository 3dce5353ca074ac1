"""Nothing of a feature is lost silently: after the replay, every line a kept patch added on the
old release (and the old series still had at its end) must be in the rebased series' file, followed
through upstream's renames. A merge that put a patch's lines nowhere, or a later patch that took
them out, stops the rebase for review with the lines named."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from functools import cache

from forkbuild.io.git import Git
from forkbuild.rebase.journal import RebaseState
from forkbuild.series.patchfile import added_lines
from forkbuild.worktree.engine import Outcome


def with_lost_lines(repo: Git, state: RebaseState, *, renamed: Mapping[str, str], old_head: str,
                    new_head: str) -> RebaseState:
    """`state` with each kept patch's `lost`: the lines it added that the rebased series lacks
    (`renamed`: upstream's renames, old path -> new path)."""

    @cache
    def lines_at(commit: str, path: str) -> frozenset[str]:
        return frozenset(line.rstrip() for line in (repo.file_at(commit, path) or "").splitlines())

    patches = []
    for patch in state.patches:
        lost: list[str] = []
        # Left out with consent: up front (--accept-moot), or the porter's proposal accepted as staged.
        consented = state.accept_moot or patch.outcome is Outcome.PORTED
        moot = consented and any(hunk.status == "moot" for hunk in patch.port)
        if patch.old_commit and patch.commit and not moot:
            for path, lines in added_lines(repo.diff_tree_patch(patch.old_commit)).items():
                target = renamed.get(path, path)
                for line in dict.fromkeys(line.rstrip() for line in lines if line.strip()):
                    if line in lines_at(old_head, path) and line not in lines_at(new_head, target):
                        lost.append(f"{target}: {line.strip()}")
        patches.append(replace(patch, lost=tuple(lost)))
    return replace(state, patches=tuple(patches))
