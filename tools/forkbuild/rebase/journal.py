"""The rebase journal (`.forkbuild-work/rebase-journal/`): `state.json`, replaced atomically on every
step, and `backup/`, the series files before the rebase (sha256 in `backup/hashes.json`). A series
file matching neither the backup nor the state's `written` was edited while the rebase was stopped:
finishing refuses to overwrite it, --abort saves it aside first.

The state is frozen dataclasses (`RebaseState`, one `PatchState` a patch) in statefile.py's form,
schema 2; its phases are `Phase`."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path

from forkbuild.applier import file_hashes
from forkbuild.errors import ForkbuildError
from forkbuild.io import statefile
from forkbuild.io.chaos import chaos_point
from forkbuild.io.fsutil import fsync_directory, sync_files, write_atomic
from forkbuild.rebase.porter import HunkPort
from forkbuild.rebase.upstreamed import HunkEvidence
from forkbuild.series.config import Upstream
from forkbuild.series.layout import PATCHES_DIR, REBASE_JOURNAL, SERIES_FILE
from forkbuild.series.writer import SeriesChange, remove_dir
from forkbuild.worktree.engine import Outcome

JOURNAL_DIR = REBASE_JOURNAL.name
STATE_FILE = "state.json"

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


# The phases that go on from the work tree's commits (the check's make a scratch tree where it is gone).
TREE_PHASES = frozenset({Phase.REPLAY, Phase.APPLYING, Phase.CONFLICT, Phase.REPLAYED, Phase.REVIEW, Phase.FINALIZE})


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

    @property
    def tree_gone(self) -> bool:
        """Its work tree was removed while it waited, in a phase that goes on from the tree's commits."""
        return self.phase in TREE_PHASES and not (self.worktree / ".git").exists()

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


def checkpoint(step: str) -> None:
    """The chaos test's hook (chaos.py): die here, like kill -9, at "rebase:" + the step's name."""
    chaos_point(f"rebase:{step}")


def series_files(root: Path) -> list[str]:
    """The files a rebase rewrites, relative to `root`: series.toml and everything under patches/."""
    found = [SERIES_FILE] if (root / SERIES_FILE).is_file() else []
    if (root / PATCHES_DIR).is_dir():
        found += sorted(str(path.relative_to(root)) for path in (root / PATCHES_DIR).rglob("*") if path.is_file())
    return found


def _series_file(relative: str) -> bool:
    """Whether `relative` names series.toml or a file below patches/ (no way out of it)."""
    parts = relative.split("/")
    return relative == SERIES_FILE or (parts[0] == PATCHES_DIR and len(parts) > 1 and "\0" not in relative
                                       and all(part not in ("", ".", "..") for part in parts))


class Journal:
    def __init__(self, series_dir: Path) -> None:
        self.series_dir = series_dir
        self.path = series_dir / REBASE_JOURNAL
        self.backup = self.path / "backup"

    def exists(self) -> bool:
        return (self.path / STATE_FILE).is_file()

    def load(self) -> RebaseState:
        path = self.path / STATE_FILE
        try:
            return statefile.load(path, RebaseState, (SCHEMA,))
        except FileNotFoundError:
            raise ForkbuildError("no rebase is in progress",
                                 hint="start one with `forkbuild rebase --onto VERSION|COMMIT`") from None
        except statefile.UnknownSchema as error:
            raise ForkbuildError(f"{path}: unknown journal schema {error.schema!r}",
                                 hint="finish or abort it with the forkbuild version that started it") from error
        except (OSError, ValueError) as error:
            raise ForkbuildError(f"{path}: the rebase journal's state is unreadable ({error})",
                                 hint=f"without it the rebase cannot go on or abort: series.toml and patches/ as they "
                                      f"were before it are in {self.backup}; put them back by hand, then remove "
                                      f"{self.path} (and the work tree it made)") from error

    def save(self, state: RebaseState, step: str, *, at: str = "") -> RebaseState:
        """Record `state` at `step` durably, then honour the kill hook for it; returns the state recorded."""
        state = replace(state, step=f"{step}:{at}" if at else step)
        write_atomic(self.path / STATE_FILE, statefile.dump(state, schema=SCHEMA))
        checkpoint(state.step)
        return state

    def create(self, state: RebaseState) -> None:
        """The backup first, in a scratch directory renamed into place: no journal, or a full backup."""
        parent = self.path.parent
        parent.mkdir(parents=True, exist_ok=True)
        for stale in parent.glob(f".{JOURNAL_DIR}.*"):
            if stale.is_dir():  # a start killed before its journal appeared (not the lock file beside it)
                shutil.rmtree(stale, ignore_errors=True)
        scratch = Path(tempfile.mkdtemp(dir=parent, prefix=f".{JOURNAL_DIR}."))
        backup = scratch / "backup"
        files = series_files(self.series_dir)
        for relative in files:
            (backup / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(self.series_dir / relative, backup / relative)
        hashes = file_hashes(backup, files)
        (backup / "hashes.json").write_text(statefile.dump(hashes))
        state = replace(state, step="begun", written=hashes, writing=False)
        (scratch / STATE_FILE).write_text(statefile.dump(state, schema=SCHEMA))
        sync_files([path for path in [*backup.rglob("*"), scratch / STATE_FILE] if path.is_file()])
        os.rename(scratch, self.path)
        fsync_directory(parent)
        checkpoint("begun")

    def backed_up_hashes(self) -> dict[str, str]:
        """The backup's file -> sha256, as `create` wrote it; a damaged record is an error naming it
        (its names become paths the abort writes: only series.toml and files under patches/)."""
        path = self.backup / "hashes.json"
        try:
            hashes = json.loads(path.read_text())
        except (OSError, ValueError):
            hashes = None
        if not isinstance(hashes, dict) or not all(isinstance(digest, str) and _series_file(relative)
                                                   for relative, digest in hashes.items()):
            raise ForkbuildError(f"{path}: the rebase journal's record of its backup is unreadable",
                                 hint=f"series.toml and patches/ as they were before the rebase are in {self.backup}: "
                                      f"put them back by hand, then remove {self.path} (and the work tree it made)")
        return hashes

    def series_hashes(self) -> dict[str, str]:
        return file_hashes(self.series_dir, series_files(self.series_dir))

    def foreign_edits(self, state: RebaseState) -> dict[str, str]:
        """Series files as neither the backup nor forkbuild's last write has them:
        path -> "changed" | "new" | "deleted"."""
        if state.writing:
            # Killed while the finalize rewrote them: the differences are forkbuild's own half-done writes.
            return {}
        backup, written, current = self.backed_up_hashes(), state.written, self.series_hashes()
        return {relative: "deleted" if now is None else "changed" if relative in backup or relative in written else "new"
                for relative in sorted({*backup, *written, *current})
                if (now := current.get(relative)) not in (backup.get(relative), written.get(relative))}

    def save_aside(self, edits: dict[str, str]) -> Path:
        """Copy the edited files that exist to a new directory beside the journal; returns it."""
        target = Path(tempfile.mkdtemp(dir=self.path.parent, prefix="rebase-edits-"))
        for relative, how in edits.items():
            if how != "deleted":
                (target / relative).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(self.series_dir / relative, target / relative)
        return target

    def restore_change(self) -> SeriesChange:
        """What puts series.toml and patches/ back exactly as they were (bytes and file set): for the
        series writer, computed under its lock."""
        hashes = self.backed_up_hashes()
        damaged = [relative for relative, digest in file_hashes(self.backup, hashes).items() if digest != hashes[relative]]
        if damaged:
            raise ForkbuildError(f"the journal's backup of {', '.join(damaged)} is damaged (sha256 mismatch)",
                                 hint=f"recover it by hand from {self.backup} or from git")
        current = self.series_hashes()
        differ = [relative for relative, digest in hashes.items() if current.get(relative) != digest]
        prefix = f"{PATCHES_DIR}/"
        return SeriesChange(
            series_toml=(self.backup / SERIES_FILE).read_bytes().decode("utf-8", "surrogateescape")
            if SERIES_FILE in differ else None,
            patches={relative.removeprefix(prefix): (self.backup / relative).read_bytes()
                     for relative in differ if relative != SERIES_FILE},
            removed=tuple(sorted(relative.removeprefix(prefix) for relative in current.keys() - hashes.keys()
                                 if relative != SERIES_FILE)))

    def remove(self) -> None:
        remove_dir(self.path)
