"""Rebase fixtures: the shared tiny series (fixtures.py, git upstream) plus a
second upstream version "2.0" committed on the upstream repository's main
branch, and helpers to run and fingerprint a rebase."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys

from fixtures import DEFAULT_PATCHES, PatchSpec, SeriesFixture, commit_all, edit
from forkbuild.io.chaos import CHAOS_ENV
from forkbuild.io.git import Git

NEW_VERSION = "2.0"

# 2.0 moves core.py down by five lines (alpha: offset) and changes a line two
# below beta's util.py hunk (beta: 3-way); environ.py is unchanged (guards: clean).
LADDER_CHANGES = (
    ("python/pkg/core.py", '"""The core computation."""\n',
     '"""The core computation."""\n\n# Added in 2.0.\nCORE_RELEASE = 2\nCORE_NAME = "core"\nCORE_FLAGS = ()\n'),
    ("python/pkg/util.py", "UTIL_CONSTANT_0 = 0\n", "UTIL_CONSTANT_0 = 100\n"),
)
# 2.0 rewrites both lines around alpha's insertion in core.py: a conflict neither git nor the porter
# (rebase/porter.py: no context left on either side to anchor on) can settle.
CONFLICT_CHANGES = (
    ("python/pkg/core.py", "def scale(value):\n    return value * 2\n",
     "def scale(value):  # 2.0\n    return value * 2  # doubled in 2.0\n"),
)
# A patch of the series that 2.0 ships as it is.
DOCS_SPEC = PatchSpec(file="beta-docs.patch", feature="beta", subject="util: say what the helpers limit",
                      body="A better docstring.",
                      edits=(("python/pkg/util.py", '"""Helpers."""\n', '"""Helpers that limit values."""\n'),))
UPSTREAMED_CHANGES = DOCS_SPEC.edits
WITH_DOCS = (*DEFAULT_PATCHES, DOCS_SPEC)


def release(fx: SeriesFixture, changes: tuple[tuple[str, str, str], ...]) -> str:
    """Commit upstream 2.0 on the fixture upstream's main branch; its full commit id."""
    repo = Git(fx.upstream_repo)
    repo.run("checkout", "--quiet", "main")
    for path, old, new in changes:
        edit(repo.path, path, old, new)
    return commit_all(repo, f"pkg {NEW_VERSION}", date="1710000000 +0000")


def move_pin(fx: SeriesFixture, commit: str) -> None:
    """Pin the series to another upstream commit (patches unchanged: they no longer all fit); the
    wheels pinned beside the git source are left out, as the rebase leaves them (another version's)."""
    text = fx.series_toml.read_text().replace('version = "1.0"', f'version = "{NEW_VERSION}"')
    text = re.sub(r"\[\[upstream\.wheels\]\]\n(?:[a-z_0-9]+ = .*\n)+", "", text)
    fx.series_toml.write_text(re.sub(r'commit = "[0-9a-f]+"', f'commit = "{commit}"', text))


def rebase_args(commit: str) -> list[str]:
    return ["rebase", "--onto", commit, "--version", NEW_VERSION]


def fingerprint(fx: SeriesFixture) -> dict[str, str]:
    """sha256 of series.toml and every file under patches/, and every cache ref."""
    files = [fx.series_toml, *sorted(path for path in fx.patches_dir.rglob("*") if path.is_file())]
    found = {str(path.relative_to(fx.root)): hashlib.sha256(path.read_bytes()).hexdigest() for path in files}
    cache_repo = fx.cache / "upstream.git"
    if (cache_repo / "HEAD").exists():
        found.update({f"ref {name}": sha for name, sha in Git(cache_repo).refs().items()})
    return found


def run_killed(fx: SeriesFixture, args: list[str], *, step: str) -> subprocess.CompletedProcess:
    """`forkbuild <args>` in a child process that SIGKILLs itself at journal step `step`."""
    env = {**os.environ, CHAOS_ENV: f"rebase:{step}"}
    return subprocess.run([sys.executable, "-m", "forkbuild", "-C", str(fx.root), "--cache", str(fx.cache), *args],
                          env=env, capture_output=True, text=True, timeout=300)


def tree(fx: SeriesFixture) -> Git:
    return Git(fx.root / ".forkbuild-work" / "rebase")
