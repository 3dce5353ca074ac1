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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from forkbuild.childgroup import GROUP
from forkbuild.errors import ToolMissing


@dataclass(frozen=True)
class Completed:
    """A finished command: its exit status and decoded output."""

    status: int
    stdout: str
    stderr: str


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


def run_captured(command: Sequence[str], *, cwd: Path, env: Mapping[str, str] | None = None,
                 stdin: Path | None = None, input: str | None = None, interactive: bool = False) -> Completed:
    """Run `command` in `cwd` (`stdin`: a file to read from, or `input`: text to write to it) and
    return its status and output.
    interactive: it may ask on the terminal, so it stays in forkbuild's own process group."""
    group = 0 if interactive else GROUP.id()
    full_env = {**os.environ, "LANGUAGE": "C", "LC_ALL": "C", **(env or {})}
    with stdin.open("rb") if stdin else contextlib.nullcontext(None) as stream:
        try:
            if input is not None:
                done = subprocess.run(list(command), cwd=cwd, env=full_env, capture_output=True, check=False,
                                      input=input.encode("utf-8", "surrogateescape"), process_group=group or None)
            else:
                done = subprocess.run(list(command), cwd=cwd, env=full_env, capture_output=True, check=False,
                                      stdin=stream if stream is not None else subprocess.DEVNULL,
                                      process_group=group or None)
        except FileNotFoundError as error:
            if Path(cwd).is_dir():
                raise ToolMissing(f"{command[0]} is not installed",
                                  hint=f"install {command[0]} (apt-get install {command[0]})") from error
            raise
    return Completed(status=done.returncode, stdout=_decode(done.stdout), stderr=_decode(done.stderr).removesuffix("\n"))
