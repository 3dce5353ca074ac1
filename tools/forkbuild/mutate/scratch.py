"""The scratch folder of a `forkbuild mutate` run (forkbuild-mutate-* in the temp dir),
and the clearing of those that killed runs left.

The folder is removed when the run ends, but a kill -9 leaves it behind. So each run
writes its owner (worktrees.Owner: pid and process start time, so that a recycled pid
is not taken for the owner) into its folder, and first removes every folder whose
owner is gone. A folder whose owner is alive is a concurrent run's: it is never touched.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from forkbuild.fsutil import write_atomic
from forkbuild.worktrees import Owner

PREFIX = "forkbuild-mutate-"
OWNER_FILE = "owner.json"
# A folder with no owner record is a run's that has made it and not yet written the
# record (a moment), or one a forkbuild from before these records made, alive or not.
# Its age says which: a live run makes a folder in it for every mutant (each is stopped
# at 4x its baseline, a baseline at 15 min), so it is never left untouched for a day.
UNRECORDED_MAX_AGE_S = 24 * 3600


@contextmanager
def scratch_dir() -> Iterator[Path]:
    """A new scratch folder owned by this process, removed afterwards; the folders that
    dead runs left are removed first."""
    root = Path(tempfile.gettempdir())
    remove_dead(root)
    with tempfile.TemporaryDirectory(prefix=PREFIX, dir=root) as scratch:
        path = Path(scratch)
        # Atomic: a concurrent run never reads half a record. Not fsynced: after a
        # crash of the machine no owner is alive anyway.
        owner = Owner.me("mutate", children=False)
        write_atomic(path / OWNER_FILE, json.dumps(owner._asdict()), durable=False)
        yield path


def remove_dead(root: Path) -> list[Path]:
    """Remove the scratch folders in `root` that runs no longer alive left; which ones."""
    removed = []
    for folder in sorted(root.glob(f"{PREFIX}*")):
        if _left_by_dead_run(folder):
            _remove(folder)
            removed.append(folder)
    return removed


def _remove(folder: Path) -> None:
    # The owner record goes last: a cleanup killed part way leaves a folder that still
    # names its dead owner, so the next run removes the rest (without the record it
    # would wait for the one-day rule). Another run may be clearing the same folder:
    # what it removed first is fine.
    try:
        children = [child for child in folder.iterdir() if child.name != OWNER_FILE]
    except FileNotFoundError:
        return
    for child in children:
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, onerror=_unless_gone)
        else:
            child.unlink(missing_ok=True)
    (folder / OWNER_FILE).unlink(missing_ok=True)
    try:
        folder.rmdir()
    except FileNotFoundError:
        pass


def _left_by_dead_run(folder: Path) -> bool:
    try:
        info = folder.lstat()
    except FileNotFoundError:
        return False  # another run has just removed it
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        return False  # not a run's folder, or another user's: not ours to judge (nor to remove)
    try:
        owner = Owner.parse((folder / OWNER_FILE).read_text())
    except OSError:
        owner = None
    if owner is None:
        return time.time() - info.st_mtime > UNRECORDED_MAX_AGE_S
    return not owner.alive()


def _unless_gone(function: object, path: str, error: tuple) -> None:
    if not isinstance(error[1], FileNotFoundError):
        raise error[1]
