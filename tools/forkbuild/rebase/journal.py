"""The rebase journal: what a rebase has done so far, on disk, so that a killed
process loses nothing.

Layout (`<series>/.forkbuild-work/rebase-journal/`):
- `state.json`: the rebase's state (rebase/state.py: its types and JSON form);
  replaced atomically (temp file, fsync, rename, fsync of the directory) on every step.
- `backup/series.toml`, `backup/patches/...`: the series exactly as it was
  before the rebase changed anything; `backup/hashes.json`: sha256 of each
  backed-up file. (The cache refs the rebase creates are recorded in the state
  as it goes: rebase/refs.py.)

The state's `written` holds the sha256 of each series file as forkbuild last
left it (the backup's at first, the rebased series' after the finalize), and
`writing` is set while the finalize rewrites them. A file matching neither the
backup nor `written` was edited by someone else while the rebase was stopped:
finishing refuses to overwrite it, and --abort saves it aside before restoring.

The journal directory is built under a temporary name and renamed into place
only once the backup is complete, so either there is no journal (nothing was
changed yet) or there is a full backup to go back to.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

from forkbuild import statefile
from forkbuild.chaos import chaos_point
from forkbuild.errors import ForkbuildError
from forkbuild.fsutil import fsync_directory, write_atomic
from forkbuild.layout import PATCHES_DIR, SERIES_FILE, WORK_DIR
from forkbuild.rebase.state import RebaseState, Step

JOURNAL_DIR = "rebase-journal"
STATE_FILE = "state.json"


def checkpoint(step: str) -> None:
    """The chaos test's hook (chaos.py): die here, like kill -9, at "rebase:" + the step's name."""
    chaos_point(f"rebase:{step}")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def series_files(root: Path) -> list[str]:
    """The files a rebase rewrites, relative to `root`: series.toml and everything under patches/."""
    found = [SERIES_FILE] if (root / SERIES_FILE).is_file() else []
    if (root / PATCHES_DIR).is_dir():
        found += sorted(str(path.relative_to(root)) for path in (root / PATCHES_DIR).rglob("*") if path.is_file())
    return found


class Journal:
    def __init__(self, series_dir: Path) -> None:
        self.series_dir = series_dir
        self.path = series_dir / WORK_DIR / JOURNAL_DIR
        self.backup = self.path / "backup"

    def exists(self) -> bool:
        return (self.path / STATE_FILE).is_file()

    # -- state ----------------------------------------------------------------
    def load(self) -> RebaseState:
        path = self.path / STATE_FILE
        try:
            return RebaseState.from_dict(statefile.load(path).data)
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

    def save(self, state: RebaseState, step: Step, *, at: str = "") -> RebaseState:
        """Record `state` at `step` durably, then honour the kill hook for it; returns the state recorded."""
        state = replace(state, step=f"{step}:{at}" if at else step.value)
        write_atomic(self.path / STATE_FILE, statefile.dump(state.as_dict()))
        checkpoint(state.step)
        return state

    # -- creation: the backup first, then the journal appears at once -----------
    def create(self, state: RebaseState) -> None:
        parent = self.path.parent
        parent.mkdir(parents=True, exist_ok=True)
        for stale in parent.glob(f".{JOURNAL_DIR}.*"):
            if stale.is_dir():  # a start killed before its journal appeared (not the lock file beside it)
                shutil.rmtree(stale, ignore_errors=True)
        scratch = Path(tempfile.mkdtemp(dir=parent, prefix=f".{JOURNAL_DIR}."))
        backup = scratch / "backup"
        hashes = {}
        for relative in series_files(self.series_dir):
            target = backup / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(self.series_dir / relative, target)
            hashes[relative] = _sha256(target)
        (backup / "hashes.json").write_text(statefile.dump(hashes))
        state = replace(state, step=Step.BEGUN.value, written=hashes, writing=False)
        (scratch / STATE_FILE).write_text(statefile.dump(state.as_dict()))
        for path in [*backup.rglob("*"), scratch / STATE_FILE]:
            if path.is_file():
                with path.open("rb") as handle:
                    os.fsync(handle.fileno())
        os.rename(scratch, self.path)
        fsync_directory(parent)
        checkpoint(Step.BEGUN)

    # -- going back -------------------------------------------------------------
    def backed_up_hashes(self) -> dict[str, str]:
        return json.loads((self.backup / "hashes.json").read_text())

    def series_hashes(self) -> dict[str, str]:
        """sha256 of series.toml and of every file under patches/, as they are now."""
        return {relative: _sha256(self.series_dir / relative)
                for relative in series_files(self.series_dir)}

    def foreign_edits(self, state: RebaseState) -> dict[str, str]:
        """Series files as neither the backup nor forkbuild's last write has them:
        path -> "changed" | "new" | "deleted"."""
        if state.writing:
            # Killed while the finalize rewrote them: the differences are forkbuild's own half-done writes.
            return {}
        backup, written, current = self.backed_up_hashes(), state.written, self.series_hashes()
        found = {}
        for relative in sorted(set(backup) | set(written) | set(current)):
            now = current.get(relative)
            if now in (backup.get(relative), written.get(relative)):
                continue
            known = relative in backup or relative in written
            found[relative] = "deleted" if now is None else "changed" if known else "new"
        return found

    def save_aside(self, edits: dict[str, str]) -> Path:
        """Copy the edited files that exist to a new directory beside the journal; returns it."""
        target = Path(tempfile.mkdtemp(dir=self.path.parent, prefix="rebase-edits-"))
        for relative, how in edits.items():
            if how != "deleted":
                (target / relative).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(self.series_dir / relative, target / relative)
        return target

    def restore_series(self) -> None:
        """Put series.toml and patches/ back exactly as they were (bytes and file set)."""
        hashes = self.backed_up_hashes()
        for relative in series_files(self.series_dir):
            if relative not in hashes:
                (self.series_dir / relative).unlink()
        for relative, digest in hashes.items():
            source, target = self.backup / relative, self.series_dir / relative
            if _sha256(source) != digest:
                raise ForkbuildError(f"the journal's backup of {relative} is damaged (sha256 mismatch)",
                                     hint=f"recover it by hand from {source} or from git")
            if target.is_file() and _sha256(target) == digest:
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(target, source.read_bytes())
            shutil.copystat(source, target)

    def remove(self) -> None:
        """Drop the journal: rename first so a kill mid-delete leaves no half journal."""
        trash = self.path.with_name(f".{JOURNAL_DIR}.done")
        shutil.rmtree(trash, ignore_errors=True)
        os.rename(self.path, trash)
        fsync_directory(self.path.parent)
        shutil.rmtree(trash, ignore_errors=True)
