"""A corpus of real-world quilt series: Debian source packages with large
debian/patches, fetched once with `apt-get source --download-only` into
.cache/quilt-corpus/src (git-ignored; $FORKBUILD_QUILT_CORPUS overrides), used
offline afterwards by tests/integration/test_quilt_corpus.py and
bench/bench_quilt.py.

    python tests/integration/quilt_corpus.py fetch     # needs deb-src in apt's sources
    python tests/integration/quilt_corpus.py run       # every package: identical or not

For each package the expected tree is what `dpkg-source -x` makes (the patches
applied by GNU patch); the upstream is `dpkg-source -x --skip-patches` of the
same package, committed to a local git repository that a throw-away forkbuild
project pins (source = "git").
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "tests" / "unit"))

from fixtures import make_quilt_project as make_project  # noqa: E402
from forkbuild.worktree.emptydirs import find_empty_dirs  # noqa: E402
from forkbuild.io.git import Git  # noqa: E402

CORPUS = Path(os.environ.get("FORKBUILD_QUILT_CORPUS") or ROOT / ".cache" / "quilt-corpus")
# Debian 12 packages with quilt series of 3 to 206 patches (grub2: 206, the bench's).
PACKAGES = ("grub2", "perl", "cron", "exim4", "openssh", "ncurses", "groff", "mutt", "procps", "xterm",
            "less", "dash", "mksh")


@dataclass(frozen=True)
class Package:
    dsc: Path

    @property
    def name(self) -> str:
        return self.dsc.name.split("_", 1)[0]


def packages(corpus: Path = CORPUS) -> list[Package]:
    return [Package(dsc) for dsc in sorted((corpus / "src").glob("*.dsc"))]


def missing_tools() -> str:
    """Why the corpus cannot be used here ("" when it can)."""
    if not shutil.which("dpkg-source"):
        return "dpkg-source is not installed (apt-get install dpkg-dev)"
    if not packages():
        return (f"no quilt corpus in {CORPUS / 'src'} "
                "(fetch it once: python tests/integration/quilt_corpus.py fetch)")
    return ""


def fetch(corpus: Path = CORPUS) -> None:
    target = corpus / "src"
    target.mkdir(parents=True, exist_ok=True)
    for name in PACKAGES:  # one at a time: apt-get stops at the first package it cannot find
        subprocess.run(["apt-get", "source", "--download-only", name], cwd=target, check=False)


class Unusable(Exception):
    """A downloaded package that is no quilt corpus entry (incomplete download, format 1.0)."""


def extract(package: Package, dest: Path, *, patched: bool) -> Path:
    """`dpkg-source -x` of the package into `dest` (with --skip-patches: upstream + debian/)."""
    command = ["dpkg-source", "--no-check", "-x", *([] if patched else ["--skip-patches"]), str(package.dsc), str(dest)]
    result = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "LC_ALL": "C"})
    if result.returncode != 0:
        raise Unusable(f"dpkg-source -x failed: {(result.stderr or result.stdout).strip().splitlines()[-1:]}")
    if not (dest / "debian" / "patches" / "series").is_file():
        raise Unusable("no debian/patches/series (not a quilt package)")
    return dest


def tree_id(path: Path, scratch: Path) -> str:
    """The git tree id of a directory's content (.pc, quilt's state, and .git left out)."""
    repo = Git.init(scratch, bare=True)
    env = {"GIT_WORK_TREE": str(path), "GIT_INDEX_FILE": str(repo.git_dir / "ids.index")}
    repo.run("add", "--all", "--force", ".", ":(exclude).pc", ":(exclude).git", env=env)
    return repo.out("write-tree", env=env)


def forkbuild(project: Path, cache: Path, *args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "forkbuild", "-C", str(project), "--cache", str(cache), *args]
    return subprocess.run(command, capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})


@dataclass(frozen=True)
class Outcome:
    package: str
    patches: int
    imported: bool
    identical: bool  # apply --all (from the imported files) == dpkg-source -x, empty directories included
    imported_tree_identical: bool  # the tree import checked out == dpkg-source -x
    export_clean: bool
    detail: str


def run_package(package: Package, scratch: Path) -> Outcome:
    expected = extract(package, scratch / "expected", patched=True)
    upstream = extract(package, scratch / "src", patched=False)
    count = len([line for line in (upstream / "debian/patches/series").read_text().splitlines()
                 if line.split("#", 1)[0].strip()])
    project = make_project(upstream, scratch)
    cache = scratch / "cache"
    imported = forkbuild(project, cache, "import", "--quilt", str(upstream / "debian/patches"), "--feature", "debian")
    if imported.returncode != 0:
        return Outcome(package.name, count, False, False, False, False, (imported.stdout + imported.stderr)[-2000:])
    want = tree_id(expected, scratch / "ids-expected")
    want_empty = find_empty_dirs(expected)
    series_tree = project / ".forkbuild-work" / "series"
    import_same = (Git(series_tree).out("rev-parse", "HEAD^{tree}") == want
                   and find_empty_dirs(series_tree) == want_empty)
    applied = scratch / "applied"
    apply = forkbuild(project, cache, "apply", "--all", "--dir", str(applied))
    same = (apply.returncode == 0 and Git(applied).out("rev-parse", "HEAD^{tree}") == want
            and find_empty_dirs(applied) == want_empty)
    export = forkbuild(project, cache, "export", "--check", "--dir", str(applied)) if apply.returncode == 0 else apply
    detail = "" if same and export.returncode == 0 else (apply.stdout + apply.stderr + export.stdout + export.stderr)[-2000:]
    return Outcome(package.name, count, True, same, import_same, export.returncode == 0, detail)


def main(argv: list[str]) -> int:
    if argv[:1] == ["fetch"]:
        fetch()
        return 0
    reason = missing_tools()
    if reason:
        print(reason)
        return 2
    import tempfile

    outcomes = []
    for package in packages():
        with tempfile.TemporaryDirectory(prefix=f"quilt-corpus-{package.name}-") as scratch:
            try:
                outcome = run_package(package, Path(scratch))
            except Unusable as error:
                print(f"{package.name:10} skipped: {error}")
                continue
        outcomes.append(outcome)
        print(f"{outcome.package:10} {outcome.patches:4} patches  imported={outcome.imported}  "
              f"identical={outcome.identical}  import-tree-identical={outcome.imported_tree_identical}  "
              f"export-check-clean={outcome.export_clean}", flush=True)
        if outcome.detail:
            print("   " + outcome.detail.replace("\n", "\n   "))
    same = sum(1 for outcome in outcomes if outcome.identical and outcome.export_clean)
    print(f"{same} of {len(outcomes)} packages: apply --all == dpkg-source -x and export --check clean")
    return 0 if same == len(outcomes) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
