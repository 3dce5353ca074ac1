"""Reading a deployed `.env` file (the runtime recipe's format: what `set -a; .
.env` and docker-compose read): KEY=VALUE lines, `export ` allowed, '#'
comments, values in single or double quotes. Each value keeps its line."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from forkbuild.errors import ConfigError

LINE = re.compile(r"^\s*(?:export\s+)?(?P<key>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>.*)$")


@dataclass(frozen=True)
class EnvValue:
    key: str
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
        values[match["key"]] = EnvValue(key=match["key"], value=value, line=number)
    if problems:
        raise ConfigError(problems, source=source)
    return values


def _unquote(value: str) -> str | None:
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
    try:
        text = path.read_text()
    except OSError as error:
        raise ConfigError([f"cannot read: {error.strerror}"], source=str(path)) from error
    return parse_env(text, source=str(path))
