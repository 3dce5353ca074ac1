"""Tiny series fixtures built in tmp_path: an upstream "package" (as a git repo and
as a wheel), patches made with real `git format-patch`, and a series.toml.

`make_series(tmp_path)` returns a SeriesFixture; tests/unit/conftest.py wraps it as the
`series_fx` (wheel upstream) and `git_series_fx` (git upstream) fixtures.

Default series (features -> patches):
  guards -> guards.patch       adds the guard section with one anchor per feature
  alpha  -> alpha-scale.patch  DSV41_ALPHA under its anchor + core.py
  beta   -> beta-limit.patch   DSV41_BETA under its anchor + util.py
Variants: full (all), lite (guards + beta: leaves alpha out, so beta's environ.py
hunk needs the 3-way merge with the series' blobs), stock (nothing).
"""

from __future__ import annotations

import hashlib
import http.server
import textwrap
import threading
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from forkbuild.cli import main as cli_main
from forkbuild.console import Reporter
from forkbuild.context import Context
from forkbuild.io.git import Git
from forkbuild.series.config import Series, load_series

AUTHOR = "Fixture Author <author@example.com>"
DATE = "1700000000 +0000"
VERSION = "1.0"
PACKAGE = "pkg"


def _numbered(prefix: str, count: int) -> str:
    return "".join(f"{prefix}_{number} = {number}\n" for number in range(count))


# The upstream package. Long enough that hunks have context and offsets can happen.
UPSTREAM_FILES: dict[str, str] = {
    "python/pkg/__init__.py": '"""A tiny upstream package."""\n\n__version__ = "1.0"\n',
    "python/pkg/environ.py": textwrap.dedent('''\
        """Environment settings."""

        import os


        class Envs:
            PKG_LOG_LEVEL = os.environ.get("PKG_LOG_LEVEL", "info")
            PKG_WORKERS = int(os.environ.get("PKG_WORKERS", "1"))


        envs = Envs()
        ''') + "\n" + _numbered("SETTING", 20),
    "python/pkg/core.py": textwrap.dedent('''\
        """The core computation."""

        from pkg.environ import envs


        def scale(value):
            return value * 2


        def offset(value):
            return value + 1
        ''') + "\n" + _numbered("CORE_CONSTANT", 30),
    "python/pkg/util.py": textwrap.dedent('''\
        """Helpers."""


        def limit(value, ceiling=100):
            return min(value, ceiling)
        ''') + "\n" + _numbered("UTIL_CONSTANT", 30),
}

GUARD_SECTION_OLD = '    PKG_WORKERS = int(os.environ.get("PKG_WORKERS", "1"))\n'
GUARD_SECTION_NEW = GUARD_SECTION_OLD + (
    "\n"
    "    # DSV41 fork guards\n"
    "    # -- feature: alpha\n"
    "    # -- feature: beta\n"
)


@dataclass(frozen=True, kw_only=True)
class PatchSpec:
    """One patch of a fixture series: a commit of text replacements, exported with format-patch."""

    file: str
    feature: str
    subject: str
    body: str
    edits: tuple[tuple[str, str, str], ...]  # (path, old text, new text); old "" creates the file
    guards: tuple[str, ...] = ()

    @property
    def message(self) -> str:
        trailers = [f"Feature: {self.feature}", *(f"Guard: {guard}" for guard in self.guards), "Forwarded: no"]
        return f"{self.subject}\n\n{self.body}\n\n" + "\n".join(trailers) + "\n"


DEFAULT_PATCHES: tuple[PatchSpec, ...] = (
    PatchSpec(file="guards.patch", feature="guards", subject="environ: fork guard section",
              body="Add the section the feature patches declare their guards in.",
              edits=(("python/pkg/environ.py", GUARD_SECTION_OLD, GUARD_SECTION_NEW),)),
    PatchSpec(file="alpha-scale.patch", feature="alpha", subject="core: scale by alpha when DSV41_ALPHA is set",
              body="Scale by three instead of two.", guards=("DSV41_ALPHA",),
              edits=(("python/pkg/environ.py", "    # -- feature: alpha\n",
                      '    # -- feature: alpha\n    DSV41_ALPHA = os.environ.get("DSV41_ALPHA", "0") == "1"\n'),
                     ("python/pkg/core.py", "    return value * 2\n",
                      "    if envs.DSV41_ALPHA:\n        return value * 3\n    return value * 2\n"))),
    PatchSpec(file="beta-limit.patch", feature="beta", subject="util: lower the limit when DSV41_BETA is set",
              body="A lower ceiling.", guards=("DSV41_BETA",),
              edits=(("python/pkg/environ.py", "    # -- feature: beta\n",
                      '    # -- feature: beta\n    DSV41_BETA = os.environ.get("DSV41_BETA", "0") == "1"\n'),
                     ("python/pkg/util.py", "def limit(value, ceiling=100):\n",
                      "def limit(value, ceiling=100):\n    from pkg.environ import envs\n"
                      "    ceiling = 50 if envs.DSV41_BETA else ceiling\n"))),
)

FEATURES_TOML = '''\
# Features of the fixture series.
[features.guards]
description = "the guard section"

[features.alpha]
description = "scale by three"
requires = ["guards"]
guards = [{ env = "DSV41_ALPHA", type = "switch", default = "0" }]

[features.beta]
description = "a lower limit"
requires = ["guards"]
guards = [{ env = "DSV41_BETA", type = "switch", default = "0" }]
'''

VARIANTS_TOML = '''\
# ---------------------------------------------------------------------------
# Variants
# ---------------------------------------------------------------------------

[variants.full]
description = "everything"
features = ["guards", "alpha", "beta"]
env = { DSV41_ALPHA = "1" }

[variants.lite]
description = "leaves alpha out"
features = ["guards", "beta"]

[variants.stock]
description = "upstream only"
features = []
'''


@dataclass
class SeriesFixture:
    root: Path  # the series directory: series.toml, patches/
    cache: Path  # FORKBUILD_CACHE
    upstream_repo: Path  # git repo: branch main = upstream, branch series = upstream + the patch commits
    upstream_commit: str
    wheel: Path
    specs: tuple[PatchSpec, ...]
    series_commits: dict[str, str] = field(default_factory=dict)  # patch file -> commit in upstream_repo

    @property
    def series_toml(self) -> Path:
        return self.root / "series.toml"

    @property
    def patches_dir(self) -> Path:
        return self.root / "patches"

    def load(self) -> Series:
        return load_series(self.series_toml)

    def context(self, *, verbose: bool = False) -> Context:
        """A fresh Context (series parsed anew on first use)."""
        return Context(series_dir=self.root, cache_dir=self.cache, reporter=Reporter(verbose=verbose))

    def cli(self, *args: str) -> int:
        """Run `forkbuild -C <root> --cache <cache> <args>` in-process; returns the exit code."""
        return cli_main(["-C", str(self.root), "--cache", str(self.cache), *args])


# -- builders ------------------------------------------------------------------

def write_files(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def edit(root: Path, path: str, old: str, new: str) -> None:
    """Replace `old` (which must occur exactly once) with `new` in root/path; old "" writes the file."""
    target = root / path
    if not old:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(new)
        return
    text = target.read_text()
    assert text.count(old) == 1, f"{path}: {old!r} occurs {text.count(old)} times"
    target.write_text(text.replace(old, new))


def commit_all(repo: Git, message: str, *, author: str = AUTHOR, date: str = DATE) -> str:
    """Commit every change in the work tree of `repo` with a fixed author and dates."""
    name, email = author.rsplit(" <", 1)
    env = {"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email.rstrip(">"),
           "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
    repo.run("add", "--all", ".")
    repo.run("commit", "--quiet", "--allow-empty-message", "-m", message, env=env)
    return repo.head()


def git_am(tree: Git, patches: list[Path], *, three_way: bool = False, committer_date_is_author_date: bool = False):
    """`git am` of mbox patches, the baseline forkbuild's commits are held against; the result, not raised."""
    return tree.run("am", "--keep-non-patch", "--no-signoff", *(["--3way"] if three_way else []),
                    *(["--committer-date-is-author-date"] if committer_date_is_author_date else []),
                    "--", *map(str, patches), check=False)


def commit_spec(repo: Git, spec: PatchSpec) -> str:
    for path, old, new in spec.edits:
        edit(repo.path, path, old, new)
    return commit_all(repo, spec.message)


def make_upstream_repo(path: Path, files: dict[str, str] = UPSTREAM_FILES) -> tuple[Git, str]:
    repo = Git.init(path)
    write_files(path, files)
    return repo, commit_all(repo, f"{PACKAGE} {VERSION}")


def make_wheel(directory: Path, files: dict[str, str] = UPSTREAM_FILES, *, package_root: str = "python") -> Path:
    """A wheel-like zip of the package files (package_root stripped) plus a dist-info."""
    directory.mkdir(parents=True, exist_ok=True)
    wheel = directory / f"{PACKAGE}-{VERSION}-py3-none-any.whl"
    dist_info = f"{PACKAGE}-{VERSION}.dist-info"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in sorted(files.items()):
            archive.writestr(name.removeprefix(package_root + "/"), text)
        archive.writestr(f"{dist_info}/METADATA", f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: {VERSION}\n")
        archive.writestr(f"{dist_info}/WHEEL", "Wheel-Version: 1.0\nGenerator: fixture\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        archive.writestr(f"{dist_info}/RECORD", "")
    return wheel


def upstream_toml(*, source: str, wheel: Path, repo: Path, commit: str) -> str:
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    return f'''\
# The fixture's upstream.
[series]
name = "fixture"
default_variant = "full"

[upstream]
name = "{PACKAGE}"
version = "{VERSION}"
package_root = "python"
source = "{source}"

[upstream.git]
url = "{repo}"
commit = "{commit}"

[[upstream.wheels]]
python_tag = "py3"
filename = "{wheel.name}"
sha256 = "{sha}"
url = "{wheel.as_uri()}"
'''


def patches_toml(specs: tuple[PatchSpec, ...]) -> str:
    blocks = ["# The series, in order.\n"]
    for spec in specs:
        blocks.append(f'[[patches]]\nfile = "{spec.file}"\nfeature = "{spec.feature}"\n')
    return "\n".join(blocks)


def make_series(tmp_path: Path, *, source: str = "wheel", specs: tuple[PatchSpec, ...] = DEFAULT_PATCHES,
                features_toml: str = FEATURES_TOML, variants_toml: str = VARIANTS_TOML,
                customize: Callable[[SeriesFixture], None] | None = None) -> SeriesFixture:
    """Build upstream (repo + wheel), the patches (real format-patch output) and series.toml."""
    repo, upstream_commit = make_upstream_repo(tmp_path / "upstream")
    wheel = make_wheel(tmp_path / "dist")
    root = tmp_path / "series"
    (root / "patches").mkdir(parents=True)
    repo.run("checkout", "--quiet", "-b", "series")
    fixture = SeriesFixture(root=root, cache=tmp_path / "cache", upstream_repo=repo.path,
                            upstream_commit=upstream_commit, wheel=wheel, specs=specs)
    for spec in specs:
        commit = commit_spec(repo, spec)
        fixture.series_commits[spec.file] = commit
        (root / "patches" / spec.file).write_text(repo.format_patch(commit))
    repo.run("checkout", "--quiet", "main")
    text = "\n".join([upstream_toml(source=source, wheel=wheel, repo=repo.path, commit=upstream_commit),
                      features_toml, patches_toml(specs), variants_toml])
    fixture.series_toml.write_text(text)
    if customize:
        customize(fixture)
    return fixture


def make_quilt_project(upstream_tree: Path, root: Path) -> Path:
    """root/project: a forkbuild project (one feature, `debian`; patches/ empty) whose upstream
    (source = "git", root/upstream.git) is the content of the directory `upstream_tree`."""
    repo = Git.init(root / "upstream.git", bare=True)
    commit = repo.commit_directory(upstream_tree, message="upstream\n", date="946684800 +0000")
    repo.update_ref("refs/heads/main", commit)
    project = root / "project"
    (project / "patches").mkdir(parents=True)
    (project / "series.toml").write_text(f'''\
[series]
name = "corpus"
default_variant = "all"

[upstream]
name = "{upstream_tree.name}"
version = "corpus"
package_root = "."
source = "git"

[upstream.git]
url = "{repo.path}"
commit = "{commit}"

[features.debian]
description = "The Debian patches."

[variants.all]
description = "Every patch."
features = ["debian"]
''')
    return project


def write_through_upstream_symlink(fx: SeriesFixture) -> None:
    """Give the (git) upstream a symlink python/linked -> pkg, and make beta-limit.patch
    write util.py through it."""
    repo = Git(fx.upstream_repo)
    (repo.path / "python" / "linked").symlink_to("pkg")
    upstream = commit_all(repo, "upstream with a symlink")
    fx.series_toml.write_text(fx.series_toml.read_text().replace(fx.upstream_commit, upstream))
    text = (fx.patches_dir / "beta-limit.patch").read_text().replace("python/pkg/util.py", "python/linked/util.py")
    (fx.patches_dir / "beta-limit.patch").write_text(text)


@contextmanager
def http_server(respond: Callable[[str], tuple[int, dict[str, str], bytes]]) -> Iterator[str]:
    """A server on a local port answering each GET with respond(path) = (status, headers, body); its base URL."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            status, headers, body = respond(self.path)
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
