"""One error hierarchy. Each class carries the process exit code; only cli.main() exits."""

from __future__ import annotations

import contextlib
import errno
import re
import shlex
import shutil
import signal
from collections.abc import Sequence
from pathlib import Path


def quoted(path: object) -> str:
    """`path` as a hint writes it into a command: one shell word, safe to paste."""
    return shlex.quote(str(path))


class ForkbuildError(Exception):
    """Base of every error forkbuild reports. `hint` says what to do next."""

    return_code = 1
    label = "error"  # how the CLI introduces the message

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class ConfigError(ForkbuildError):
    """series.toml (or a patch it names) is invalid. Carries every problem found."""

    return_code = 2

    def __init__(self, problems: list[str], *, source: str = "series.toml", hint: str | None = None) -> None:
        self.problems = tuple(problems)
        lines = "\n".join(f"  - {problem}" for problem in problems)
        super().__init__(f"{source}: {len(problems)} problem(s)\n{lines}", hint=hint)


class UpstreamError(ForkbuildError):
    """Fetching or verifying the pinned upstream failed (download, sha256, git fetch)."""

    return_code = 3


class ApplyError(ForkbuildError):
    """One or more patches do not apply strictly."""

    return_code = 4


class DirtyTreeError(ForkbuildError):
    """A work tree holds work that is not in the series; nothing was touched."""

    return_code = 5


class ExportDriftError(ForkbuildError):
    """`export --check`: patches/ would change."""

    return_code = 6


class UnsafePatchError(ForkbuildError):
    """A patch is unsafe or unreadable: outside the tree, absolute, .git/, a symlink or gitlink, the generated guards module; empty or garbled."""

    return_code = 7


class BuildError(ForkbuildError):
    """A wheel or image could not be built or failed validation."""

    return_code = 8


class RebaseStopped(ForkbuildError):
    """A rebase stopped at a conflict; state is journaled, resume with --continue."""

    return_code = 9
    label = "stopped"


class LockTimeout(ForkbuildError):
    """Another forkbuild process holds the cache lock for too long."""

    return_code = 10


class ToolMissing(ForkbuildError):
    """An external program (git, quilt, docker) is not installed."""

    return_code = 11


class BisectError(ForkbuildError):
    """`forkbuild bisect` cannot start or go on: stock fails, the full set passes, or its probe log disagrees."""

    return_code = 15


class MutationError(ForkbuildError):
    """`forkbuild mutate`: mutants could not be made or run, or (--check) stale results or an unexplained survivor"""

    return_code = 14


class FleetError(ForkbuildError):
    """A node of the cluster failed: unreachable, shipping, the preflight rendezvous, starting or health (named)."""

    return_code = 16


class LockBusy(LockTimeout):
    """Another live forkbuild process is working in the same directory (a work tree, the series)."""


class GitFailed(ForkbuildError):
    """A git command failed; carries the command and its output."""

    return_code = 12

    def __init__(self, command: Sequence[str], status: int, stdout: str, stderr: str) -> None:
        self.stdout = stdout.strip()
        self.stderr = stderr.strip()
        super().__init__(f"git failed ({status}): {' '.join(command)}\n{self.stderr or self.stdout}".rstrip())


class DiskError(ForkbuildError):
    """The file system refused a write: full, read-only, no permission, or a path that is a file."""

    return_code = 13


_DISK_ERRORS = {
    "ENOSPC": ("the disk is full", "free some space and run the command again"),
    "EDQUOT": ("the disk quota is used up", "free some space and run the command again"),
    "EFBIG": ("the file would pass the file-size limit (ulimit -f)", "raise the limit (`ulimit -f unlimited`) and run "
              "the command again"),
    "EROFS": ("the file system is read-only", "use a writable location (see --cache / -C) or remount it"),
    "EACCES": ("permission denied", "fix the permissions or use a location you can write to"),
    "EPERM": ("operation not permitted", "fix the permissions or use a location you can write to"),
    "ENOTDIR": ("a part of the path is a file, not a directory", "point it at a directory (see --cache / -C)"),
    "EEXIST": ("a file is in the way", "move that file away or choose another location"),
    "EISDIR": ("a directory is in the way", "move that directory away or choose another location"),
}


FULL_BELOW = 1 << 20  # bytes free: a disk git could not write a file to is full
# What git writes when the file system refuses it, and the errno each means.
GIT_DISK_MESSAGES = {"No space left on device": "ENOSPC", "Disk quota exceeded": "EDQUOT", "File too large": "EFBIG"}


def git_disk_error(status: int, stderr: str, cwd: Path) -> ForkbuildError | None:
    """A git that failed for the disk's sake (full, quota, or killed by SIGXFSZ at ulimit -f) as a
    DiskError. git's checkout says only "unable to write file": then the disk it wrote to tells."""
    found = "EFBIG" if status == -signal.SIGXFSZ else next(
        (name for text, name in GIT_DISK_MESSAGES.items() if text in stderr), None)
    if found is None and "unable to write" in stderr:
        with contextlib.suppress(OSError):
            found = "ENOSPC" if shutil.disk_usage(cwd).free < FULL_BELOW else None
    if found is None:
        return None
    named = re.search(r"unable to write (?:new index )?(?:file )?'?([^'\n]+?)'?$", stderr, flags=re.MULTILINE)
    return disk_error(OSError(getattr(errno, found), found, str(cwd / named[1]) if named else f"in {cwd}"))


def disk_error(error: OSError) -> ForkbuildError | None:
    """The user-facing error for a file-system failure, or None for an OSError that is a bug."""
    name = errno.errorcode.get(error.errno or -1, "")
    if name not in _DISK_ERRORS:
        return None
    what, hint = _DISK_ERRORS[name]
    where = " -> ".join(str(part) for part in (error.filename, error.filename2) if part)
    return DiskError(f"cannot write {where or 'a file'}: {what} ({name}). forkbuild writes each file atomically "
                     "and series.toml + patches/ as one transaction, so nothing was left half-written",
                     hint=hint)
