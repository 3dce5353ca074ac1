"""Which guards an applied tree declares: its generated guards module
(forkbuild.guards_module), read with `ast` (no import), against series.toml.

forkbuild writes that module from series.toml, so a mismatch means the
generator or the tree is broken (a patch that edits the module, a tree not
made by forkbuild): the check stays because the wheel ships what the tree holds.
"""

from __future__ import annotations

from pathlib import Path

from forkbuild.config import Guard, Series
from forkbuild.guards_module import GeneratedEntry, module_path, read_module


def read_declarations(series: Series, tree: Path) -> dict[str, GeneratedEntry] | str:
    """The entries of the tree's generated guards module by variable, or why there are none to read."""
    path = module_path(series)
    if path is None:
        return "series.toml names no [series] guards_module"
    target = tree / path
    if not target.is_file():
        return f"{path} is missing: forkbuild generates it into every tree that holds patches"
    try:
        entries = read_module(target)
    except (ValueError, SyntaxError) as error:
        return f"{path} is not a generated guards module: {error}"
    return {entry.env: entry for entry in entries}


def mismatch(guard: Guard, entry: GeneratedEntry) -> str:
    """Why the generated `entry` does not say what series.toml's `guard` says; empty when it does."""
    wanted = (guard.type, guard.default, guard.feature)
    found = (entry.type, entry.default, entry.feature)
    if found == wanted:
        return ""
    return f"declared as (type, default, feature) {found!r}, series.toml says {wanted!r}"
