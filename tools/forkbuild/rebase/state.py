"""A rebase's state as its journal records it: frozen dataclasses, its phases, and the
JSON form (`state.json`, schema 2). Keys that early schema-2 writers did not write read
as their defaults, so a rebase stopped by them goes on with this one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

from forkbuild.config import GitPin, Upstream, WheelPin
from forkbuild.rebase.upstreamed import HunkEvidence
from forkbuild.statefile import Fields
from forkbuild.worktree.engine import Outcome

# 2: cache refs recorded in the state as the rebase makes them (1 snapshotted all of them).
SCHEMA = 2


class Phase(StrEnum):
    """Where the rebase is (rebase/engine.py's docstring says what each means)."""

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


@dataclass(frozen=True, kw_only=True)
class RebaseState:
    id: str  # names the rebase's own cache refs: two checkouts may rebase against one cache at once
    phase: Phase
    step: str  # the last step journaled, the kill hook's name for it: "applying:a.patch"
    worktree: Path  # where patches are replayed and conflicts resolved
    accept_drops: bool
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

    def as_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)  # enums are str: they dump as their values
        data.update({key: data[key] or None for key in ("old_base", "new_base", "head_before", "tip")},
                    schema=SCHEMA, worktree=str(self.worktree), report=self.report and str(self.report))
        return data

    @classmethod
    def from_dict(cls, data: object) -> RebaseState:
        """ValueError (statefile.UnknownSchema for another schema) when `data` is no rebase state of schema 2."""
        fields = Fields(data)
        fields.schema((SCHEMA,))
        report = fields.text_or_empty("report")
        return cls(
            id=fields.text("id"), phase=_enum(Phase, fields, "phase"), step=fields.text("step"),
            worktree=Path(fields.text("worktree")), accept_drops=fields.flag("accept_drops"),
            old=_upstream(fields.object("old")), target=_upstream(fields.object("target")),
            old_base=fields.text_or_empty("old_base"), new_base=fields.text_or_empty("new_base"),
            patches=tuple(_patch(item) for item in fields.objects("patches")),
            cursor=fields.integer("cursor"), head_before=fields.text_or_empty("head_before"),
            tip=fields.text_or_empty("tip"),
            refs={ref: RefMove(before=move.text_or_empty("before") or None, after=move.text_or_empty("after") or None)
                  for ref, move in fields.object_map("refs").items()},
            written=fields.text_map("written", {}), writing=fields.flag("writing", False),
            timings=fields.number_map("timings", {}), report=Path(report) if report else None,
            unported=fields.texts("unported", ()))


def _patch(fields: Fields) -> PatchState:
    outcome = fields.text_or_empty("outcome")
    return PatchState(
        file=fields.text("file"), feature=fields.text("feature"), old_commit=fields.text("old_commit", ""),
        outcome=_enum(Outcome, fields, "outcome") if outcome else None, commit=fields.text("commit", ""),
        detail=fields.text("detail", ""), conflicts=fields.texts("conflicts", ()), collided=fields.text("collided", ""),
        evidence=tuple(HunkEvidence(file=item.text("file"), hunk=item.integer("hunk"), found=item.flag("found"),
                                    start=item.integer("start", 0), end=item.integer("end", 0), how=item.text("how", ""))
                       for item in fields.objects("evidence", ())))


def _upstream(fields: Fields) -> Upstream:
    git = fields.optional_object("git")
    return Upstream(
        name=fields.text("name"), version=fields.text("version"), package_root=fields.text("package_root"),
        source=fields.text("source"),
        git=None if git is None else GitPin(url=git.text("url"), ref=git.text("ref", ""),
                                            commit=git.text("commit", "")),
        wheels=tuple(WheelPin(python_tag=pin.text("python_tag"), filename=pin.text("filename"),
                              sha256=pin.text("sha256"), url=pin.text("url", ""))
                     for pin in fields.objects("wheels", ())),
        empty_dirs=fields.texts("empty_dirs", ()))


E = TypeVar("E", bound=StrEnum)


def _enum(kind: type[E], fields: Fields, key: str) -> E:
    value = fields.text(key)
    try:
        return kind(value)
    except ValueError:
        raise ValueError(f"{fields.where + '.' if fields.where else ''}{key}: unknown {kind.__name__.lower()} "
                         f"{value!r}") from None
