"""The one way forkbuild runs git: output captured and decoded, messages in English,
children in forkbuild's child group (childgroup.py).

It does what gitpython's `Git.execute` does for a command whose output is read whole
(LANGUAGE=C and LC_ALL=C over the caller's environment, output decoded as UTF-8 with
surrogate escapes, stderr without its last newline), without importing gitpython on
every start: that import is a third of a no-op `forkbuild apply`'s time. gitpython stays
the git layer for objects and indexes (git.py loads it when those are used).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from forkbuild.childgroup import GROUP
from forkbuild.errors import ToolMissing

# Called each time forkbuild starts to wait for a command, and when that wait ends: work
# that can run beside the command runs then, not while forkbuild itself needs the processor
# (console.py: rich loads while git runs).
_before_waiting: Callable[[], None] | None = None
_after_waiting: Callable[[], None] | None = None


def call_around_waiting(before: Callable[[], None] | None, after: Callable[[], None] | None = None) -> None:
    global _before_waiting, _after_waiting
    _before_waiting, _after_waiting = before, after


@contextlib.contextmanager
def _waiting() -> Iterator[None]:
    if _before_waiting is not None:
        _before_waiting()
    try:
        yield
    finally:
        if _after_waiting is not None:
            _after_waiting()


class Completed(NamedTuple):
    """A finished command: its exit status and decoded output."""

    status: int
    stdout: str
    stderr: str


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


def _completed(status: int, stdout: bytes, stderr: bytes) -> Completed:
    return Completed(status=status, stdout=_decode(stdout), stderr=_decode(stderr).removesuffix("\n"))


def _environment(env: Mapping[str, str] | None) -> dict[str, str]:
    return {**os.environ, "LANGUAGE": "C", "LC_ALL": "C", **(env or {})}


@contextlib.contextmanager
def _missing_tool(command: Sequence[str], cwd: Path) -> Iterator[None]:
    try:
        yield
    except FileNotFoundError as error:
        if Path(cwd).is_dir():
            raise ToolMissing(f"{command[0]} is not installed",
                              hint=f"install {command[0]} (apt-get install {command[0]})") from error
        raise


def run_captured(command: Sequence[str], *, cwd: Path, env: Mapping[str, str] | None = None,
                 input: str | bytes | None = None, interactive: bool = False) -> Completed:
    """Run `command` in `cwd` (`input`: text or bytes to write to its stdin) and return its
    status and output.
    interactive: it may ask on the terminal, so it stays in forkbuild's own process group."""
    group = 0 if interactive else GROUP.id()
    with _missing_tool(command, cwd):
        process = subprocess.Popen(list(command), cwd=cwd, env=_environment(env),
                                   stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, process_group=group or None)
    with process:  # as subprocess.run: the command is killed if forkbuild stops waiting (Ctrl-C)
        try:
            data = input.encode("utf-8", "surrogateescape") if isinstance(input, str) else input
            with _waiting():  # once the command runs: what starts beside it does not hold it back
                stdout, stderr = process.communicate(data)
        except BaseException:
            process.kill()
            raise
    return _completed(process.returncode, stdout, stderr)


class Running:
    """A command `start_captured` started: it runs beside the caller until `wait()`."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self._process = process
        self._done: Completed | None = None

    def wait(self) -> Completed:
        if self._done is None:
            with _waiting():
                stdout, stderr = self._process.communicate()
            self._done = _completed(self._process.returncode, stdout, stderr)
        return self._done


def start_captured(command: Sequence[str], *, cwd: Path, env: Mapping[str, str] | None = None) -> Running:
    """`run_captured` without waiting: the command runs while the caller goes on (no input)."""
    with _missing_tool(command, cwd):
        process = subprocess.Popen(list(command), cwd=cwd, env=_environment(env), stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, process_group=GROUP.id() or None)
    return Running(process)
