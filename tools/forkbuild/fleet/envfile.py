"""A deployed `.env` file as `set -a; . .env` and docker-compose read it: KEY=VALUE lines,
`export ` allowed, '#' comments (a ` #` after a value, or a value that is only a comment),
values in single or double quotes; each keeps its line. What the shell and compose would read
differently from the text is refused with the way to write it: a `$` they would expand, a
backslash in double quotes (each reads its escapes its own way)."""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from forkbuild.errors import ConfigError

MAX_BYTES = 1 << 20  # a .env of the recipe is ~10 KiB
LINE = re.compile(r"^\s*(?:export\s+)?(?P<key>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>.*)$")


@dataclass(frozen=True)
class EnvValue:
    value: str
    line: int


def parse_env(text: str, *, source: str) -> dict[str, EnvValue]:
    """Every assignment of `text` (a later one wins, as in the shell); every bad line reported at once."""
    values: dict[str, EnvValue] = {}
    problems = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        match = LINE.match(raw)
        value = _unquote(match["value"]) if match else None
        if match is None or value is None:
            problems.append(f"line {number}: not KEY=VALUE: {raw.strip()!r}")
            continue
        if why := _read_differently(match["value"]):
            problems.append(f"line {number}: {match['key']}: {why}")
            continue
        values[match["key"]] = EnvValue(value=value, line=number)
    if problems:
        raise ConfigError(problems, source=source)
    return values


def _read_differently(raw: str) -> str:
    """Why the shell or compose would not read `raw` (a value as written) as its text; '' if they would."""
    text = raw.strip()
    if text.startswith("'"):
        return ""  # single quotes: literal in both
    if re.search(r"\$[A-Za-z_{(]", text):
        return (f"{text!r} holds a `$` the shell and compose would expand: write the value in single quotes "
                "for the text itself")
    if text.startswith('"') and "\\" in text:
        return (f"{text!r}: the shell and compose read backslashes in double quotes differently: use single "
                "quotes, or write the value without backslashes")
    return ""


def _unquote(value: str) -> str | None:
    if re.match(r"\s+#", value):  # `KEY= # note`: the shell reads KEY= and a comment
        return ""
    value = value.strip()
    for quote in ('"', "'"):
        if value.startswith(quote):
            end = value.find(quote, 1)
            if end < 0 or value[end + 1:].strip() and not value[end + 1:].strip().startswith("#"):
                return None
            return value[1:end]
    # Unquoted: a ' #' starts a comment, as in the shell.
    return re.split(r"\s+#", value, maxsplit=1)[0].strip()


def read_env_file(path: Path) -> dict[str, EnvValue]:
    """A regular UTF-8 text file of at most MAX_BYTES; a FIFO, device or binary file is refused."""
    try:
        # O_NONBLOCK: opening a FIFO with no writer returns at once instead of waiting.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as error:
        raise ConfigError([f"cannot read: {error.strerror}"], source=str(path)) from error
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ConfigError(["not a regular file (a FIFO, device or directory): give the .env file itself"],
                          source=str(path))
    with os.fdopen(fd, "rb") as file:
        data = file.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise ConfigError([f"larger than {MAX_BYTES // 1024} KiB: not a .env file"], source=str(path))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError([f"not UTF-8 text (byte {data[error.start]:#04x} at offset {error.start}): "
                           "a .env file is UTF-8 (save it without a UTF-16 encoding)"], source=str(path)) from None
    if "\0" in text:
        raise ConfigError([f"binary: a NUL byte at offset {text.index(chr(0))}: not a .env file"], source=str(path))
    return parse_env(text.removeprefix("\ufeff"), source=str(path))
