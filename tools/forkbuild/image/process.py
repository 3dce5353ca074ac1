"""docker, docker-compose, debootstrap and tar through forkbuild's one process runner
(forkbuild.process): the command echoed with -v, a missing program a ToolMissing, a
failure a BuildError ending with the program's last output lines."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from forkbuild import process
from forkbuild.console import Reporter
from forkbuild.errors import BuildError, ToolMissing

TAIL_LINES = 40


def require(program: str, *, hint: str) -> str:
    """The path of `program` (a name on PATH, or a path); ToolMissing when there is none."""
    found = shutil.which(program)
    if not found:
        raise ToolMissing(f"{program} is not " + ("an executable file" if "/" in program else
                                                  "installed (not found on PATH)"), hint=hint)
    return found


def run(command: Sequence[str], *, reporter: Reporter, missing_hint: str, env: Mapping[str, str] | None = None,
        input: bytes | None = None, stream: bool = False, check: bool = True) -> subprocess.CompletedProcess:
    """`command`'s result, output as bytes. stream: with -v the program writes to the terminal
    (long builds show their progress; the result then carries no output). check: a non-zero
    exit raises BuildError naming the command."""
    argv = [require(command[0], hint=missing_hint), *command[1:]]
    reporter.detail("$ " + shlex.join(argv))
    live = stream and reporter.verbose
    try:
        done = process.run(argv, env=env, input=input, capture=not live)
    except ToolMissing as error:  # on PATH but not runnable (wrong architecture, no permission)
        raise ToolMissing(error.message, hint=missing_hint) from None
    result = subprocess.CompletedProcess(argv, done.status, done.stdout.encode("utf-8", "surrogateescape"),
                                         done.stderr.encode("utf-8", "surrogateescape"))
    if check and result.returncode != 0:
        shown = " ".join([Path(argv[0]).name, *command[1:4]])
        output = "its output is above" if live else tail(result.stderr or result.stdout)
        raise BuildError(f"`{shown} ...` failed (exit {result.returncode}):\n{output}")
    return result


def tail(output: bytes | None, lines: int = TAIL_LINES) -> str:
    text = (output or b"").decode("utf-8", "replace").rstrip()
    return "\n".join(text.splitlines()[-lines:]) or "(no output)"
