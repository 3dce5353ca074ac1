"""The process group of forkbuild's git children: recovering a killed forkbuild stops what is
left of its group first (a SIGKILL does not reach children: a `git reset --hard` would write
on). A keeper (`cat` on a pipe only forkbuild holds) makes the group; Ctrl-C is passed on."""

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
# Beside git and its helpers, all a child group holds; anything else: the id was reused, hands off.
KEEPER_NAMES = ("cat", "sh")
STOP_WAIT_S = 10.0


class ChildGroup:
    """This process's group for its git children, made on first use."""

    def __init__(self) -> None:
        self._keeper: subprocess.Popen[bytes] | None = None
        self._owner_pid = 0
        self._lock = threading.Lock()  # threads running git at once make one keeper

    def id(self) -> int:
        """The group's id for Popen(process_group=...); 0 when none could be made."""
        with self._lock:
            keeper = self._keeper
            if keeper is None or self._owner_pid != os.getpid() or keeper.poll() is not None:
                try:
                    keeper = subprocess.Popen(KEEPER, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                              stderr=subprocess.DEVNULL, process_group=0)
                except OSError:
                    return 0
                self._keeper, self._owner_pid = keeper, os.getpid()
                _forward_sigint(self)
            return keeper.pid


GROUP = ChildGroup()


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP (a service stopped, a terminal closed): recovered like a Ctrl-C, every
    `except KeyboardInterrupt` and `finally` on the way runs; the exit status is 128 + the signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated(signum)


def handle_termination() -> None:
    """SIGTERM and SIGHUP end forkbuild as a Ctrl-C does (the command's entry point calls this)."""
    for signum in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) is signal.SIG_DFL:
            signal.signal(signum, _raise_terminated)


def _forward_sigint(group: ChildGroup) -> None:
    """Ctrl-C (and SIGTERM, SIGHUP) reach the group's git too (over the handler forkbuild runs with,
    in the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum, handler in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, _raise_terminated),
                            (signal.SIGHUP, _raise_terminated)):
        if signal.getsignal(signum) is handler:
            signal.signal(signum, _forwarding(group, signum, handler))


def _forwarding(group: ChildGroup, signum: int, handler):  # type: ignore[no-untyped-def]
    def forward(number: int, frame: FrameType | None) -> None:
        keeper = group._keeper
        if keeper is not None:
            with suppress(OSError):
                os.killpg(keeper.pid, signum)
        handler(number, frame)

    return forward


class ProcStat(NamedTuple):
    """/proc/<pid>/stat: command name, state ("Z": zombie), group, start (clock ticks since boot)."""

    comm: str
    state: str
    group: int
    started: int


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
        os.kill(pid, 0)
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
    """Kill what is left of a dead forkbuild's child group (its owner started at `started`) and
    wait until it is gone; what was stopped. Only git and the keeper, started after the owner."""
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
