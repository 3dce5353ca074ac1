"""The one process runner: git (through git.py), docker, python, pytest. A child's
environment lacks what points git at another repository (a hook or shell rc may set it);
output is UTF-8 with surrogate escapes; git runs in forkbuild's child group (childgroup.py)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from forkbuild.errors import ToolMissing
from forkbuild.io.childgroup import GROUP

# `git rev-parse --local-env-vars` (git 2.39), and GIT_NAMESPACE (another view of the refs).
GIT_LOCAL_ENV = frozenset({
    "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_CONFIG", "GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT",
    "GIT_OBJECT_DIRECTORY", "GIT_DIR", "GIT_WORK_TREE", "GIT_IMPLICIT_WORK_TREE", "GIT_GRAFT_FILE",
    "GIT_INDEX_FILE", "GIT_NO_REPLACE_OBJECTS", "GIT_REPLACE_REF_BASE", "GIT_PREFIX",
    "GIT_INTERNAL_SUPER_PREFIX", "GIT_SHALLOW_FILE", "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
})


Environment = Mapping[str, str | None]  # what a caller sets on top; None: unset it


def environment(env: Environment | None = None) -> dict[str, str]:
    """forkbuild's environment less GIT_LOCAL_ENV (and GIT_CONFIG_KEY_n/VALUE_n), `env` on top."""
    clean = {key: value for key, value in os.environ.items()
             if key not in GIT_LOCAL_ENV and not key.startswith(("GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_"))}
    for key, value in (env or {}).items():
        if value is None:
            clean.pop(key, None)
        else:
            clean[key] = value
    return clean


@dataclass(frozen=True)
class Completed:
    """A finished command: its exit status and output (empty when not captured)."""

    status: int
    stdout: str
    stderr: str


def _popen(command: Sequence[str], *, cwd: Path | None, env: Environment | None, group: bool,
           **options: object) -> subprocess.Popen[bytes]:
    try:
        return subprocess.Popen(list(command), cwd=cwd, env=environment(env),
                                process_group=(GROUP.id() or None) if group else None, **options)  # type: ignore[call-overload]
    except FileNotFoundError as error:
        if cwd is not None and not Path(cwd).is_dir():
            raise
        if "/" in command[0]:  # a path given (--python, FORKBUILD_PYTHON): no package makes it
            raise ToolMissing(f"{command[0]} does not exist", hint="give the path of a program that exists") from error
        raise ToolMissing(f"{command[0]} is not installed",
                          hint=f"install {command[0]} (apt-get install {command[0]})") from error
    except OSError as error:  # not runnable: no permission, another architecture
        raise ToolMissing(f"cannot run {command[0]}: {error.strerror}") from error


TIMED_OUT = 124  # the status of a command killed at its timeout (as timeout(1) says it)


def run(command: Sequence[str], *, cwd: Path | None = None, env: Environment | None = None,
        input: str | bytes | None = None, capture: bool = True, group: bool = False,
        timeout: float | None = None) -> Completed:
    """Run `command`; capture=False: its output goes to the terminal. group: in the child group
    (not for a command that may ask on the terminal: a background group cannot read it).
    timeout: killed after so many seconds, with status TIMED_OUT."""
    pipe = subprocess.PIPE if capture else None
    process = _popen(command, cwd=cwd, env=env, group=group, stdout=pipe, stderr=pipe,
                     stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL)
    data = input.encode("utf-8", "surrogateescape") if isinstance(input, str) else input
    with process:  # as subprocess.run: killed if forkbuild stops waiting (Ctrl-C)
        try:
            stdout, stderr = process.communicate(data, timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            stdout, stderr = process.communicate()
            stderr = (stderr or b"") + f"\n(killed: no answer within {timeout:g} s)".encode()
            return Completed(TIMED_OUT, (stdout or b"").decode("utf-8", "surrogateescape"),
                             stderr.decode("utf-8", "surrogateescape").strip())
        except BaseException:
            process.kill()
            raise
    out, err = ((data or b"").decode("utf-8", "surrogateescape") for data in (stdout, stderr))
    return Completed(process.returncode, out, err.removesuffix("\n"))


def pipe(first: Sequence[str], second: Sequence[str], *, first_env: Environment | None = None,
         second_env: Environment | None = None) -> Completed:
    """`first | second` (docker save into another daemon's docker load): the status of the
    first that failed (else 0), the second's stdout, both's stderr."""
    producer = _popen(first, cwd=None, env=first_env, group=False, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                      stdin=subprocess.DEVNULL)
    try:
        consumer = _popen(second, cwd=None, env=second_env, group=False, stdin=producer.stdout,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except BaseException:
        producer.kill()
        producer.wait()
        raise
    assert producer.stdout is not None and producer.stderr is not None  # piped above
    producer.stdout.close()  # the consumer holds it now: the producer sees EPIPE if the consumer dies
    with producer, consumer:
        try:
            out, err = consumer.communicate()
            first_err = producer.stderr.read()
            producer.wait()
        except BaseException:
            producer.kill()
            consumer.kill()
            raise
    status = producer.returncode or consumer.returncode
    text = b"\n".join(part for part in (first_err.strip(), err.strip()) if part)
    return Completed(status, out.decode("utf-8", "surrogateescape"), text.decode("utf-8", "surrogateescape"))


def popen(command: Sequence[str], *, env: Environment | None = None, **options: object) -> subprocess.Popen:
    """A long-lived child the caller talks to through pipes (the mutate worker)."""
    return _popen(command, cwd=None, env=env, group=False, **options)
