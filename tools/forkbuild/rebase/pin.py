"""Moving series.toml's [upstream] pin to the rebase target with tomlkit, so
comments, order and layout of everything else survive."""

from __future__ import annotations

import tomlkit

from forkbuild.config import Upstream
from forkbuild.errors import ConfigError


def moved_pin(text: str, target: Upstream) -> str:
    """series.toml `text` with [upstream] version, git ref/commit and wheel pins of `target`."""
    document = tomlkit.parse(text)
    upstream = document.get("upstream")
    if upstream is None:
        raise ConfigError(["upstream: the [upstream] table is missing"])
    upstream["version"] = target.version
    if target.git and "git" in upstream:
        for key in ("ref", "commit"):
            value = getattr(target.git, key)
            if value or key in upstream["git"]:
                upstream["git"][key] = value
    if "wheels" in upstream:
        if not target.wheels:
            # The old version's wheels (a git-source rebase): pins of another version would lie.
            del upstream["wheels"]
        else:
            _move_wheels(upstream["wheels"], target)
    return tomlkit.dumps(document)


def _move_wheels(tables, target: Upstream) -> None:
    by_tag = {pin.python_tag: pin for pin in target.wheels}
    for index, table in enumerate(tables):
        pin = by_tag.get(str(table.get("python_tag")))
        if pin is None:
            raise ConfigError([f"upstream.wheels[{index}]: no {target.version} wheel for python_tag "
                               f"{table.get('python_tag')!r}"])
        table["filename"] = pin.filename
        table["sha256"] = pin.sha256
        if "url" in table:
            # Only where the old pin spelled out its url: otherwise the index is asked by name.
            table["url"] = pin.url
