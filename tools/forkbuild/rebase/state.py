"""A rebase's state as its journal records it (`state.json`, schema 2, statefile.py's form):
frozen dataclasses and its phases."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path

from forkbuild.rebase.porter import HunkPort
from forkbuild.rebase.upstreamed import HunkEvidence
from forkbuild.series.config import Upstream
from forkbuild.worktree.engine import Outcome

# 2: cache refs recorded in the state as the rebase makes them (1 snapshotted all of them).
SCHEMA = 2


class Phase(StrEnum):
    """Where the rebase is (rebase/phases.py's docstring says what each means)."""

    PREPARE = "prepare"
    REPLAY = "replay"
    APPLYING = "applying"
    CONFLICT = "conflict"
    REPLAYED = "replayed"
    REVIEW = "review"
    FINALIZE = "finalize"
    CHECKED = "checked"
    CHECK_FAILED = "check-failed"
    DONE = "done"  # not journaled (the journal is gone), as ABORTED: what start/resume return
    ABORTED = "aborted"


@dataclass(frozen=True, kw_only=True)
class RefMove:
    """A cache ref the rebase created or moved: --abort puts back exactly those."""

    before: str | None  # its object id before the rebase touched it; None: it did not exist
    after: str | None  # the object id the rebase set; None while an import has not said yet


@dataclass(frozen=True, kw_only=True)
class PatchState:
    """One patch of the series, as far as the rebase got with it."""

    file: str
    feature: str
    old_commit: str = ""  # its commit in the old series (the 3-way rung merges it)
    outcome: Outcome | None = None  # None: not replayed yet
    commit: str = ""  # its commit on the new upstream; "" when it has none (skipped, dropped)
    detail: str = ""
    evidence: tuple[HunkEvidence, ...] = ()  # for a drop proposal: where upstream has its hunks
    conflicts: tuple[str, ...] = ()  # the files it conflicted in (kept once resolved: the report says why)
    collided: str = ""  # the upstream change it collided with
    port: tuple[HunkPort, ...] = ()  # the porter's work on it, hunk by hunk (rebase/porter.py)
    port_tree: str = ""  # the tree the porter proposed: --continue with it unchanged makes the patch "ported"
    lost: tuple[str, ...] = ()  # "path: line" it added on the old release that the rebased series lacks (kept.py)


@dataclass(frozen=True, kw_only=True)
class RebaseState:
    id: str  # names the rebase's own cache refs: two checkouts may rebase against one cache at once
    phase: Phase
    step: str  # the last step journaled, the kill hook's name for it: "applying:a.patch"
    worktree: Path  # where patches are replayed and conflicts resolved
    accept_drops: bool
    accept_ported: bool = False  # a patch the porter placed whole goes in without a stop
    accept_moot: bool = False  # hunks (and patches) whose code the new release lacks are dropped without a stop
    old: Upstream
    target: Upstream
    old_base: str = ""  # the cache commits of old and target, once imported
    new_base: str = ""
    patches: tuple[PatchState, ...]
    cursor: int = 0  # patches[cursor] is the next (or the stopped) patch
    head_before: str = ""  # the work tree's HEAD before patches[cursor]
    tip: str = ""  # the work tree's HEAD after patches[:cursor]
    refs: Mapping[str, RefMove] = field(default_factory=dict)
    written: Mapping[str, str] = field(default_factory=dict)  # sha256 of each series file as forkbuild last wrote it
    writing: bool = False  # the finalize is rewriting the series files
    timings: Mapping[str, float] = field(default_factory=dict)  # seconds per part, summed over the runs
    report: Path | None = None  # the final report, once written
    unported: tuple[str, ...] = ()  # what the finalize did to features left without a patch, in words

    def own_ref(self, name: str) -> str:
        """A cache ref of this rebase alone: two checkouts may rebase against one cache at once."""
        return f"refs/forkbuild/rebase/{self.id}/{name}"

    def with_ref(self, ref: str, *, before: str | None, after: str | None) -> RebaseState:
        """The rebase moves cache `ref` to `after` (journaled first, for --abort); the first `before` stays."""
        first = self.refs[ref].before if ref in self.refs else before
        return replace(self, refs={**self.refs, ref: RefMove(before=first, after=after)})

    def with_patch(self, index: int, patch: PatchState) -> RebaseState:
        return replace(self, patches=(*self.patches[:index], patch, *self.patches[index + 1:]))

    def timed(self, what: str, seconds: float) -> RebaseState:
        """The state with `seconds` more spent in `what` (journaled with the next step, reported)."""
        return replace(self, timings={**self.timings, what: round(self.timings.get(what, 0.0) + seconds, 3)})
