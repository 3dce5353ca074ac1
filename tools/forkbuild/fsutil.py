"""Writing files so that a reader (or a crash) never sees half of one."""

from __future__ import annotations

import ctypes
import os
import sys
import tempfile
from collections.abc import Callable, Mapping
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


# Above this many files a batch is made durable with one syncfs of their file system
# instead of one fsync each (each fsync is a journal commit: ~5 ms here, 1 s for 200 files).
SYNCFS_FROM = 8


def write_atomic_many(files: Mapping[Path, bytes], *, after_first: Callable[[], None] | None = None) -> None:
    """write_atomic of every file, the durability paid once for all of them: each written
    to its temporary file, all of them flushed to disk (one syncfs, or an fsync each when
    few), then each renamed over its path, then each directory fsynced once.

    A crash leaves every path whole, old or new (the data is on disk before any rename);
    an error leaves the paths renamed so far new, the rest old, and no temporary file.
    `after_first`: called after the first rename (a crash-test hook)."""
    staged: list[tuple[Path, Path]] = []
    try:
        for path, data in files.items():
            staged.append((Path(path), _stage(Path(path), data)))
        sync_files([temporary for _, temporary in staged])
        for number, (path, temporary) in enumerate(staged):
            os.replace(temporary, path)
            if number == 0 and after_first:
                after_first()
    except BaseException:
        for _, temporary in staged:
            temporary.unlink(missing_ok=True)  # those not renamed yet
        raise
    for directory in sorted({path.parent for path, _ in staged}):
        fsync_directory(directory)


def _stage(path: Path, data: bytes) -> Path:
    """`data` in a new temporary file beside `path` (not yet flushed), with the mode
    write_atomic gives."""
    handle, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    temporary = Path(name)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.chmod(temporary, path.stat().st_mode & 0o7777 if path.exists() else NEW_FILE_MODE)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return temporary


def sync_files(paths: list[Path]) -> None:
    """Every file's data on disk: an fsync each, or for many, one syncfs per file system
    (Linux; elsewhere an fsync each)."""
    syncfs = _syncfs() if len(paths) >= SYNCFS_FROM else None
    if syncfs is None:
        for path in paths:
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())
        return
    devices: dict[int, Path] = {}
    for path in paths:
        devices.setdefault(os.stat(path).st_dev, path)
    for path in devices.values():
        descriptor = os.open(path, os.O_RDONLY)
        try:
            if syncfs(descriptor) != 0:
                code = ctypes.get_errno()
                raise OSError(code, os.strerror(code), str(path))
        finally:
            os.close(descriptor)


def _syncfs() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None
