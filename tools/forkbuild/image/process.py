"""The one way the image code runs an external program (docker, docker-compose,
debootstrap, tar): the command echoed with -v, a missing program reported as
ToolMissing, a failure as BuildError ending with the program's last output
lines, so callers can add a hint and cli.main reports it."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from forkbuild.console import Reporter
from forkbuild.errors import BuildError, ToolMissing

TAIL_LINES = 40


def require(program: str, *, hint: str) -> str:
    """The path of `program` (a name looked up on PATH, or a path); ToolMissing
    when there is no such executable."""
    found = shutil.which(program)
    if found:
        return found
    if os.sep in program:
        raise ToolMissing(f"{program} is not an executable file", hint=hint)
    raise ToolMissing(f"{program} is not installed (not found on PATH)", hint=hint)


def run(command: Sequence[str], *, reporter: Reporter, missing_hint: str, env: Mapping[str, str] | None = None,
        input: bytes | None = None, stream: bool = False, check: bool = True) -> subprocess.CompletedProcess:
    """Run `command` and return its result, stdout and stderr captured as bytes.

    stream: with -v the program writes straight to the terminal instead (long
    builds show their own progress); the result then carries no output.
    check: a non-zero exit raises BuildError naming the command.
    """
    program = require(command[0], hint=missing_hint)
    argv = [program, *command[1:]]
    reporter.detail("$ " + shlex.join(argv))
    live = stream and reporter.verbose
    try:
        result = subprocess.run(argv, env=None if env is None else dict(env), input=input, capture_output=not live)
    except OSError as error:  # e.g. found on PATH but not runnable (wrong architecture, no permission)
        raise ToolMissing(f"cannot run {program}: {error.strerror}", hint=missing_hint) from None
    if check and result.returncode != 0:
        shown = " ".join([Path(program).name, *command[1:4]])
        output = "its output is above" if live else tail(result.stderr or result.stdout)
        raise BuildError(f"`{shown} ...` failed (exit {result.returncode}):\n{output}")
    return result


def tail(output: bytes | None, lines: int = TAIL_LINES) -> str:
    text = (output or b"").decode("utf-8", "replace").rstrip()
    return "\n".join(text.splitlines()[-lines:]) or "(no output)"
