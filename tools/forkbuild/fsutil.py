"""Writing files so that a reader (or a crash) never sees half of one."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

NEW_FILE_MODE = 0o644


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write `data` to `path` through a uniquely named temporary file in the same
    directory, flushed to disk, then renamed over `path`.

    Concurrent writers each get their own temporary file, so the last rename wins
    whole. An existing file keeps its mode; a new one is 0644 (mkstemp would make
    it 0600, and these files are read by other users: images, CI, reviewers).
    """
    path = Path(path)
    payload = data.encode() if isinstance(data, str) else data
    handle, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    temporary = Path(name)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(payload)
            out.flush()
            os.fsync(out.fileno())
        mode = path.stat().st_mode & 0o7777 if path.exists() else NEW_FILE_MODE
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    fsync_directory(path.parent)


def fsync_directory(directory: Path) -> None:
    # The rename is only durable once the directory entry is on disk too.
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
