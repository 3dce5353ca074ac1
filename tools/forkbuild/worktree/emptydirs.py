"""Empty directories: upstream trees (tarballs, quilt trees) have them, git cannot
track them. series.toml's [upstream] empty_dirs lists them; apply recreates them."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

# Never upstream content: version control and quilt's own state.
NOT_UPSTREAM = {".git", ".pc", ".svn", ".hg", ".bzr"}


def find_empty_dirs(tree: Path) -> list[str]:
    """Relative paths of the directories under `tree` holding nothing at all, sorted."""
    found = []
    for current, directories, files in os.walk(tree):
        directories[:] = [name for name in directories if name not in NOT_UPSTREAM]
        if not directories and not files and Path(current) != tree:
            found.append(Path(current).relative_to(tree).as_posix())
    return sorted(found)


def recreate_empty_dirs(dest: Path, directories: Iterable[str]) -> list[str]:
    """Make each of `directories` under the work tree `dest`; returns those it made."""
    made = []
    for directory in directories:
        target = dest / directory
        if not target.exists():  # a file a patch put there wins: never overwrite it
            target.mkdir(parents=True, exist_ok=True)
            made.append(directory)
    return made
