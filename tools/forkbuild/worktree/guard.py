"""Work trees that survive a kill -9; forkbuild only clears what its own dead process left.
`tree_guard`: an flock beside the tree (a second run refuses) whose file names the owner; one
still named when the lock is free was killed (`guard.killed`). `temporary_worktree`: a scratch
tree recorded in the cache before git makes it, removed by a later call once its owner is dead.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from forkbuild.errors import ForkbuildError, LockBusy
from forkbuild.io import statefile
from forkbuild.io.childgroup import GROUP, proc_stat, process_exists, stop_orphans
from forkbuild.io.git import Git

if TYPE_CHECKING:
    from forkbuild.upstream.cache import UpstreamCache

OWNERS_DIR = "forkbuild-owners"


def _process_start(pid: int) -> str:
    """The start time of process `pid` ("" when gone): with the pid it names one process."""
    stat = proc_stat(pid)
    return str(stat.started) if stat else ""


class Owner(NamedTuple):
    """The forkbuild process that holds a work tree (or a scratch tree), as its lock records it."""

    pid: int
    host: str
    started: str
    command: str
    phase: str = "started"
    group: int = 0  # the process group its git children run in (childgroup.py); 0: none recorded

    @classmethod
    def me(cls, command: str, phase: str = "started") -> Owner:
        return cls(pid=os.getpid(), host=os.uname().nodename, started=_process_start(os.getpid()),
                   command=command, phase=phase, group=GROUP.id())

    @classmethod
    def parse(cls, text: str) -> Owner | None:
        try:
            return statefile.decode(cls, json.loads(text))
        except ValueError:
            return None

    def stop_orphans(self) -> list[str]:
        """Kill what this dead owner's git children left running (on this host); what was stopped."""
        return stop_orphans(self.group, started=self.started) if self.host == os.uname().nodename else []

    def alive(self) -> bool:
        if self.host != os.uname().nodename:
            return True  # another machine's process: we cannot tell, so never touch its work
        if not process_exists(self.pid):
            return False
        started = _process_start(self.pid)
        # The same pid with another start time is a new process: ours is gone.
        return not (started and self.started) or started == self.started

    def describe(self) -> str:
        return f"forkbuild {self.command} (pid {self.pid} on {self.host})"


class TreeGuard:
    def __init__(self, dest: Path, command: str) -> None:
        self.dest = Path(dest)
        self.command = command
        self.path = self.dest.parent / f".{self.dest.name}.forkbuild-lock"
        self.killed: Owner | None = None  # the previous owner, when it was killed while working here
        self._fd: int | None = None
        self._phase = ""

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                other = Owner.parse(os.pread(fd, 4096, 0).decode(errors="replace"))
                os.close(fd)
                who = other.describe() if other else "another forkbuild"
                raise LockBusy(f"{self.dest}: {who} is working in this tree right now",
                               hint="wait for it to finish, then run the command again") from None
            except BaseException:
                os.close(fd)
                raise
            try:  # the file a finished owner removed after we opened it: lock the new one
                if os.stat(self.path).st_ino == os.fstat(fd).st_ino:
                    break
            except FileNotFoundError:
                pass
            os.close(fd)
        self._fd = fd
        self.killed = Owner.parse(os.pread(fd, 4096, 0).decode(errors="replace"))
        if self.killed is not None:  # its git children would go on writing into the tree
            self.killed.stop_orphans()
        self._record(Owner.me(self.command))

    def changing(self) -> None:
        """From here the tree holds this command's half-done work: after a kill, the next run clears it."""
        self._record(Owner.me(self.command, "changing"))

    def release(self, *, interrupted: bool = False) -> None:
        """interrupted (Ctrl-C, an unexpected error): a tree being changed stays marked, as after a kill."""
        if self._fd is None:
            return
        if interrupted and self._phase == "changing":
            pass  # the record names this (ending) process, phase "changing"
        elif self.killed is not None:
            # Not recovered by this command (e.g. export refused): the next one must still see it.
            self._record(self.killed)
        else:
            # This command ended, nothing to recover: no lock file is left beside the tree (one
            # inside the series tree made it "dirty"); acquire() re-checks the file it locked.
            os.ftruncate(self._fd, 0)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
        os.close(self._fd)
        self._fd = None

    def _record(self, owner: Owner) -> None:
        assert self._fd is not None
        self._phase = owner.phase
        data = json.dumps(owner._asdict()).encode()
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, data, 0)
        os.fsync(self._fd)


@contextmanager
def tree_guard(dest: Path, command: str) -> Iterator[TreeGuard]:
    guard = TreeGuard(dest, command)
    guard.acquire()
    try:
        yield guard
    except BaseException as error:
        # A ForkbuildError is a deliberate end (a stop at a conflict leaves the person's work).
        guard.release(interrupted=not isinstance(error, ForkbuildError))
        raise
    guard.release()


def _held_open(path: Path) -> bool:
    """Whether any process has `path` open (git keeps index.lock open while it writes it)."""
    proc = Path("/proc")
    if not proc.is_dir():
        return True  # cannot tell: assume a live git holds it
    target = str(path.resolve())
    for fd_dir in proc.glob("[0-9]*/fd"):
        with suppress(OSError):  # a process that ended, or not ours to read
            for fd in fd_dir.iterdir():
                with suppress(OSError):
                    if os.readlink(fd) == target:
                        return True
    return False


def clear_stale_index_lock(tree: Path) -> bool:
    """Remove the work tree's `index.lock` when no process holds it; True if one was removed."""
    lock = Git(tree).git_dir / "index.lock" if (tree / ".git").exists() else None
    if lock is None or not lock.exists() or _held_open(lock):
        return False
    lock.unlink(missing_ok=True)
    return True


def remove_dead_tree(cache_git: Git, tree: Path) -> None:
    """Remove a dead owner's work tree: directory, registration (even a locked one), index.lock."""
    tree = Path(tree)
    clear_stale_index_lock(tree)
    cache_git.unlock_worktree(tree)  # a killed `worktree add` locks it
    if tree.exists():
        shutil.rmtree(tree, ignore_errors=True)
    cache_git.prune_worktrees()


def recover_killed_change(guard: TreeGuard, cache_git: Git) -> bool:
    """Remove a tree a killed forkbuild was changing (only its half-done work is there)."""
    changing = guard.killed is not None and guard.killed.phase == "changing"
    if changing:
        remove_dead_tree(cache_git, guard.dest)
    guard.killed = None
    return changing


def clear_dead_scratch_trees(cache_git: Git) -> int:
    """Remove every scratch work tree whose recorded owner process is dead; returns how many."""
    owners = cache_git.git_dir / OWNERS_DIR
    if not owners.is_dir():
        return 0
    cleared = 0
    for record in owners.glob("*.json"):
        try:
            data = json.loads(record.read_text())
            owner, tree = statefile.decode(Owner, data.get("owner")), Path(data["tree"])
        except (OSError, ValueError, KeyError, AttributeError):
            record.unlink(missing_ok=True)
            continue
        if owner.alive():
            continue
        owner.stop_orphans()
        remove_dead_tree(cache_git, tree)
        shutil.rmtree(tree.parent, ignore_errors=True)  # the scratch directory made for it
        record.unlink(missing_ok=True)
        cleared += 1
    return cleared


@contextmanager
def temporary_worktree(cache: UpstreamCache, *, purpose: str) -> Iterator[Path]:
    """A path for a scratch work tree of the cache (git creates it there), removed afterwards."""
    cache_git = cache.git()
    clear_dead_scratch_trees(cache_git)
    scratch = Path(tempfile.mkdtemp(prefix=f"forkbuild-{purpose}-"))
    dest = scratch / "tree"
    owners = cache_git.git_dir / OWNERS_DIR
    owners.mkdir(exist_ok=True)
    record = owners / f"{hashlib.sha1(str(dest).encode()).hexdigest()}.json"
    record.write_text(json.dumps({"tree": str(dest), "owner": Owner.me(purpose)._asdict()}))
    try:
        yield dest
    finally:
        try:
            if dest.exists():
                cache_git.remove_worktree(dest)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
            cache_git.prune_worktrees()
            record.unlink(missing_ok=True)
