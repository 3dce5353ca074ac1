"""The process group forkbuild's git children run in, so that nothing a killed forkbuild
started goes on writing into a tree the next run is recovering (a SIGKILL does not reach
children: a `git reset --hard` and its checkout workers would run on for seconds).

The group is made by a keeper (`cat` reading a pipe only forkbuild holds: it ends when
forkbuild does, however that dies). The tree lock and the scratch-tree records carry the
group's id (worktrees.Owner.group); whoever recovers a dead owner's work stops what is
left of its group first (`stop_orphans`). The terminal's Ctrl-C reaches only forkbuild's
own group: the SIGINT handler passes it on (the keeper ignores it).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from contextlib import suppress
from pathlib import Path
from types import FrameType
from typing import NamedTuple

# `exec` keeps the ignored SIGINT: the keeper outlives a Ctrl-C that the group's git gets.
KEEPER = ["sh", "-c", "trap '' INT; exec cat"]
# What may be in a forkbuild child group: git, its helpers (git-remote-*, checkout
# workers are git too), the keeper. Anything else means the id was reused: hands off.
KEEPER_NAMES = ("cat", "sh")
STOP_WAIT_S = 10.0


class ChildGroup:
    """This process's group for its git children (made on first use)."""

    def __init__(self) -> None:
        self._keeper: subprocess.Popen[bytes] | None = None
        self._owner_pid = 0
        self._lock = threading.Lock()  # threads running git at once make one keeper

    def id(self) -> int:
        """The group's id for Popen(process_group=...); 0 when none could be made."""
        with self._lock:
            keeper = self._keeper
            if keeper is None or self._owner_pid != os.getpid() or keeper.poll() is not None:
                keeper = self._start()
            return keeper.pid if keeper else 0

    def _start(self) -> subprocess.Popen[bytes] | None:
        try:
            keeper = subprocess.Popen(KEEPER, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL, process_group=0)
        except OSError:
            return None
        self._keeper, self._owner_pid = keeper, os.getpid()
        _forward_sigint(self)
        return keeper


GROUP = ChildGroup()


def _forward_sigint(group: ChildGroup) -> None:
    """Ctrl-C reaches the group's git too (only over Python's own handler, in the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return

    def forward(signum: int, frame: FrameType | None) -> None:
        keeper = group._keeper
        if keeper is not None:
            with suppress(OSError):
                os.killpg(keeper.pid, signal.SIGINT)
        signal.default_int_handler(signum, frame)

    signal.signal(signal.SIGINT, forward)


# -- after a kill: what is left of a dead forkbuild's group ------------------------------

class ProcStat(NamedTuple):
    """What /proc/<pid>/stat says of a process."""

    comm: str  # its command name
    state: str  # "Z": a zombie
    group: int  # its process group
    started: int  # clock ticks since boot (with the pid it names one process)


def proc_stat(pid: int) -> ProcStat | None:
    """/proc/<pid>/stat of `pid`, or None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return ProcStat(comm=stat[stat.index("(") + 1:stat.rindex(")")], state=fields[0], group=int(fields[2]),
                    started=int(fields[19]))


def process_exists(pid: int) -> bool:
    """Whether a process `pid` exists on this machine (any user's; a zombie counts)."""
    try:
        os.kill(pid, 0)  # no signal: only the question
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, another user's
    return True


def members(group: int) -> dict[int, ProcStat]:
    """pid -> stat of the live (not zombie) processes in process group `group`."""
    found = {}
    for entry in Path("/proc").glob("[0-9]*"):
        info = proc_stat(int(entry.name))
        if info and info.group == group and info.state != "Z":
            found[int(entry.name)] = info
    return found


def stop_orphans(group: int, *, started: str) -> list[str]:
    """Kill what is still running of a dead forkbuild's child group `group` (its owner started
    at `started`, clock ticks) and wait until it is gone; returns what was stopped. Only a
    group of git, its helpers and the keeper, all started after the owner, is ours."""
    if group <= 0 or not Path("/proc").is_dir():
        return []
    found = members(group)
    after = int(started) if started.isdigit() else 0
    ours = all((info.comm.startswith("git") or info.comm in KEEPER_NAMES) and info.started >= after
               for info in found.values())
    if not found or not ours:
        return []
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signal.SIGKILL)  # the whole group at once: a git forking a worker cannot escape
    deadline = time.monotonic() + STOP_WAIT_S
    while members(group) and time.monotonic() < deadline:
        time.sleep(0.01)
    return sorted(f"{info.comm} (pid {pid})" for pid, info in found.items())
