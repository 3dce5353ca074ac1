"""The one writer of series.toml and patches/: each series-changing command is one
transaction under the series lock, from its first read (`series_transaction`) to its
write, refused if a file changed since the read. Crash-safe: a journal is renamed into
place before any file changes; `recover_series` rolls it forward (never over a file
changed since) or deletes an uncommitted one."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from forkbuild.errors import DirtyTreeError, ForkbuildError, LockTimeout
from forkbuild.io.chaos import chaos_point
from forkbuild.io.fsutil import flocked, fsync_directory, link_or_copy, sync_files, write_atomic_many
from forkbuild.series.layout import PATCHES_DIR as PATCHES
from forkbuild.series.layout import SERIES_FILE as SERIES_TOML
from forkbuild.series.layout import WORK_DIR

JOURNAL = "series-transaction"
MANIFEST = "manifest.json"
NEW_DATA = "new.data"  # the new files' bytes, one after the other; the manifest says where each is
LOCK = "series.lock"
LOCK_WAIT_S = 120
_HELD: set[Path] = set()  # the series directories whose lock this process holds
QUILT_SERIES = "patches/series"
STEPS = ("series:prepared", "series:committed", "series:applied-one", "series:applied", "series:done")
# fsutil.write_atomic's temporary files (`.<name>.<8 random>.tmp`) and a rollback's link.
ATOMIC_LEFTOVER = re.compile(r"^\..+\.(?:[A-Za-z0-9_]{8}\.tmp|rollback)$")


@dataclass(frozen=True, kw_only=True)
class SeriesChange:
    """New texts (None: unchanged), patch files to write (name -> data) and to delete."""

    series_toml: str | None = None
    quilt_series: str | None = None
    patches: Mapping[str, bytes | str] = field(default_factory=dict)
    removed: tuple[str, ...] = ()

    def writes(self) -> dict[str, bytes]:
        out = {f"{PATCHES}/{name}": _bytes(data) for name, data in self.patches.items()}
        if self.series_toml is not None:
            out[SERIES_TOML] = _bytes(self.series_toml)
        if self.quilt_series is not None:
            out[QUILT_SERIES] = _bytes(self.quilt_series)
        return out


def _bytes(data: bytes | str) -> bytes:
    return data if isinstance(data, bytes) else data.encode("utf-8", errors="surrogateescape")


def _sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


class SeriesTransaction:
    """`write` refuses when series.toml or a patch file changed since the lock was taken."""

    def __init__(self, series_dir: Path) -> None:
        self.series_dir = Path(series_dir)
        self._seen = _snapshot(self.series_dir)

    def write(self, change: SeriesChange) -> None:
        writes, removals = change.writes(), [f"{PATCHES}/{name}" for name in change.removed]
        if not writes and not removals:
            return
        for relative in [*writes, *removals]:
            parts = Path(relative).parts
            if relative.startswith("/") or ".." in parts or len(parts) != (1 if relative == SERIES_TOML else 2):
                raise ForkbuildError(f"refusing to write {relative!r}: not series.toml or a file directly in patches/")
        now = _snapshot(self.series_dir)
        changed = sorted(path for path in {*now, *self._seen} if now.get(path) != self._seen.get(path))
        if changed:
            raise DirtyTreeError(f"series changed since read: {', '.join(changed)} changed while this command "
                                 "worked on it (outside forkbuild's series lock); nothing was written",
                                 hint="re-run the command: it reads the series anew")
        chaos_point("series:verified")
        journal = _prepare(self.series_dir, writes, removals)
        try:
            _apply(self.series_dir, journal)
        except OSError:  # a full or read-only disk: the old files back (links: no new space)
            _roll_back(self.series_dir, journal)
            raise
        remove_dir(journal, step="series:done")
        self._seen = _snapshot(self.series_dir)


@contextmanager
def series_transaction(series_dir: Path) -> Iterator[SeriesTransaction]:
    """Hold the series lock (a pending journal finished first) for one command's read-plan-write."""
    series_dir = Path(series_dir).resolve()
    if series_dir in _HELD:
        raise ForkbuildError(f"internal error: the series lock of {series_dir} is taken twice in one process",
                             hint="pass the open transaction on instead")
    with series_lock(series_dir):
        _HELD.add(series_dir)
        try:
            _recover_locked(series_dir)
            yield SeriesTransaction(series_dir)
        finally:
            _HELD.discard(series_dir)


@contextmanager
def reading_series(series_dir: Path) -> Iterator[None]:
    """Hold the series lock while a command reads series.toml and patches/ over time (apply: its plan,
    then each patch as git applies it): a concurrent drop or export waits instead of pulling a patch
    from under it. Nothing when this process holds it already."""
    series_dir = Path(series_dir).resolve()
    if series_dir in _HELD:
        yield
        return
    with series_lock(series_dir):
        _HELD.add(series_dir)
        try:
            _recover_locked(series_dir)
            yield
        finally:
            _HELD.discard(series_dir)


def write_series(series_dir: Path, change: SeriesChange) -> None:
    """One transaction of one write, for a caller that read nothing of the series first."""
    with series_transaction(series_dir) as transaction:
        transaction.write(change)


def recover_series(series_dir: Path) -> bool:
    """Finish or undo a transaction a killed process left; True when there was one."""
    work = Path(series_dir) / WORK_DIR
    if not work.is_dir() or not ((work / JOURNAL).exists() or any(work.glob(f".{JOURNAL}.*"))):
        return False
    with series_lock(series_dir):
        return _recover_locked(series_dir)


def _snapshot(series_dir: Path) -> dict[str, str | None]:
    patches = series_dir / PATCHES
    names = sorted(path.name for path in patches.iterdir() if path.is_file()) if patches.is_dir() else []
    return {relative: _sha256(series_dir / relative) for relative in [SERIES_TOML, *(f"{PATCHES}/{n}" for n in names)]}


@contextmanager
def series_lock(series_dir: Path) -> Iterator[None]:
    """One writer at a time; an flock, so a killed writer leaves no lock behind."""
    busy = LockTimeout(f"another forkbuild has been working on {series_dir}/series.toml and patches/ for over "
                       f"{LOCK_WAIT_S} s", hint="wait for it to finish, then run the command again")
    with flocked(Path(series_dir) / WORK_DIR / LOCK, wait_s=LOCK_WAIT_S, busy=busy,
                 waiting=lambda: chaos_point("series:waiting")):  # another forkbuild holds it: wait
        yield


def _prepare(series_dir: Path, writes: dict[str, bytes], removals: list[str]) -> Path:
    work = series_dir / WORK_DIR
    scratch = Path(tempfile.mkdtemp(dir=work, prefix=f".{JOURNAL}."))
    try:
        entries: list[dict[str, str | int | None]] = []
        offset = 0
        for relative, data in sorted(writes.items()):
            entries.append({"path": relative, "offset": offset, "size": len(data),
                            "before": _sha256(series_dir / relative), "after": hashlib.sha256(data).hexdigest()})
            offset += len(data)
        for relative in sorted(removals):
            entries.append({"path": relative, "before": _sha256(series_dir / relative), "after": None})
        new_data = scratch / NEW_DATA
        new_data.write_bytes(b"".join(data for _, data in sorted(writes.items())))
        sync_files([new_data])
        for number, entry in enumerate(entries):
            if entry["before"] is not None:
                entry["backup"] = backup = f"{number}.old"
                link_or_copy(series_dir / str(entry["path"]), scratch / backup)
        manifest = scratch / MANIFEST
        manifest.write_text(json.dumps({"entries": entries}, indent=1) + "\n")
        sync_files([manifest])
        fsync_directory(scratch)
        chaos_point("series:prepared")
        journal = work / JOURNAL
        os.rename(scratch, journal)  # the commit point
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    fsync_directory(work)
    chaos_point("series:committed")
    return journal


def _entries(journal: Path) -> list[dict]:
    """The journal's record of the write: every file, its hashes before and after, where its bytes are."""
    try:
        entries = json.loads((journal / MANIFEST).read_text())["entries"]
        for entry in entries:
            needed = {"path", "before", "after"} | ({"offset", "size"} if entry["after"] is not None else set())
            if missing := needed - entry.keys():
                raise KeyError(", ".join(sorted(missing)))
        return entries
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ForkbuildError(f"{journal}: the record of an interrupted write of the series is damaged ({error})",
                             hint=f"series.toml and patches/ may be half written: compare them with your git history "
                                  f"(`git status`, `git diff`) and restore what is wrong, then delete {journal}") from None


def _apply(series_dir: Path, journal: Path) -> None:
    entries = _entries(journal)
    foreign = [entry["path"] for entry in entries
               if _sha256(series_dir / entry["path"]) not in (entry["before"], entry["after"])]
    if foreign:
        raise ForkbuildError(
            f"an interrupted forkbuild write of the series is pending in {journal}, but "
            + ", ".join(foreign) + " changed since: finishing it would overwrite that",
            hint=f"keep your version: delete {journal} (the interrupted write is then dropped; "
                 "re-run the command that was killed); take forkbuild's: undo your edit and run any forkbuild command")
    (series_dir / PATCHES).mkdir(exist_ok=True)
    new_data = (journal / NEW_DATA).read_bytes() if (journal / NEW_DATA).is_file() else b""
    pending = {series_dir / entry["path"]: new_data[entry["offset"]:entry["offset"] + entry["size"]]
               for entry in entries if entry["after"] is not None and _sha256(series_dir / entry["path"]) != entry["after"]}
    write_atomic_many(pending, after_first=lambda: chaos_point("series:applied-one"))
    for entry in entries:
        if entry["after"] is None:
            (series_dir / entry["path"]).unlink(missing_ok=True)
    fsync_directory(series_dir / PATCHES)
    fsync_directory(series_dir)
    chaos_point("series:applied")


def _roll_back(series_dir: Path, journal: Path) -> None:
    entries = _entries(journal)
    for entry in entries:
        target = series_dir / entry["path"]
        if entry.get("backup"):
            if _sha256(target) != entry["before"]:
                temporary = target.with_name(f".{target.name}.rollback")
                temporary.unlink(missing_ok=True)
                link_or_copy(journal / entry["backup"], temporary)
                os.replace(temporary, target)
        else:
            target.unlink(missing_ok=True)
    _remove_atomic_leftovers(series_dir)
    remove_dir(journal, step="series:done")


def remove_dir(path: Path, *, step: str = "") -> None:
    """Rename, then delete: a kill mid-delete leaves a scratch name (dropped by recovery), never half of `path`."""
    trash = path.with_name(f".{path.name}.done")
    shutil.rmtree(trash, ignore_errors=True)
    os.rename(path, trash)
    fsync_directory(path.parent)
    if step:
        chaos_point(step)
    shutil.rmtree(trash, ignore_errors=True)


def _recover_locked(series_dir: Path) -> bool:
    work = series_dir / WORK_DIR
    found = False
    for scratch in work.glob(f".{JOURNAL}.*"):  # uncommitted, or finished: nothing to redo
        shutil.rmtree(scratch, ignore_errors=True)
        found = True
    journal = work / JOURNAL
    if (journal / MANIFEST).is_file():
        _apply(series_dir, journal)
        remove_dir(journal, step="series:done")
        found = True
    elif journal.exists():
        shutil.rmtree(journal, ignore_errors=True)
        found = True
    if found:
        _remove_atomic_leftovers(series_dir)
    return found


def _remove_atomic_leftovers(series_dir: Path) -> None:
    for directory in (series_dir, series_dir / PATCHES):
        if directory.is_dir():
            for path in directory.iterdir():
                if ATOMIC_LEFTOVER.match(path.name) and path.is_file():
                    path.unlink(missing_ok=True)
