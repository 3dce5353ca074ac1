"""End-to-end rebase of the real series backward onto sglang 0.5.22 and 0.5.21,
forkbuild against git in the same run, and the ratio between them.

  forkbuild  `forkbuild rebase --onto V --accept-drops --accept-ported --accept-moot` (the porter on),
             then `forkbuild rebase --skip`
             at every stop, each a process of its own as a user runs them (end to end:
             old series, replay, export, pin, check of every variant, report)
  git        `git worktree add` at the series' base, `git am` of the same patch files,
             `git rebase --onto` the new base, `git rebase --skip` at every stop

Both start with upstream in the cache; each pair runs --repeat times (git's time swings with the
disk: its checkout of the whole release) and the medians are compared. Goal (issue 36): forkbuild <= 2.0x git.

    python bench/bench_rebase.py [--cache DIR] [--onto 0.5.22 0.5.21] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from forkbuild.errors import RebaseStopped
from forkbuild.io.git import Git
from forkbuild.rebase.target import resolve
from forkbuild.series.config import load_series
from forkbuild.upstream.cache import UpstreamCache

ROOT = Path(__file__).resolve().parents[1]
GOAL = 2.0


def forkbuild_rebase(root: Path, cache: Path, onto: str) -> tuple[float, int, dict]:
    """(seconds, stops, report) of a rebase skipping every stop."""
    command = [sys.executable, "-m", "forkbuild", "-C", str(root), "--cache", str(cache), "rebase"]
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    start, stops = time.perf_counter(), 0
    code = subprocess.run([*command, "--onto", onto, "--accept-drops", "--accept-ported", "--accept-moot"],
                          capture_output=True, env=env).returncode
    while code == RebaseStopped.return_code:
        stops += 1
        code = subprocess.run([*command, "--skip"], capture_output=True, env=env).returncode
    seconds = time.perf_counter() - start
    if code != 0:
        sys.exit(f"bench: forkbuild rebase --onto {onto} exited {code}")
    old = load_series(ROOT / "series.toml").upstream.version
    return seconds, stops, json.loads((root / "build" / "rebase" / f"{old}-to-{onto}.json").read_text())


def git_am_rebase(cache_git: Git, *, old_base: str, new_base: str, patches: list[Path], dest: Path) -> tuple[float, int, int]:
    """(seconds, stops, commits kept): a checkout at old_base, git am, git rebase --onto, --skip at every stop."""
    start = time.perf_counter()
    tree = cache_git.add_worktree(dest, old_base)
    made = tree.run("am", "--keep-non-patch", "--no-signoff", "--committer-date-is-author-date", "--",
                    *map(str, patches), check=False)
    if made.status != 0:
        sys.exit(f"bench: the series does not apply on its own base:\n{made.stderr}")
    result = tree.run("rebase", "--onto", new_base, old_base, check=False)
    stops = 0
    while result.status != 0 and (tree.git_dir / "rebase-merge").exists():
        stops += 1
        result = tree.run("rebase", "--skip", check=False)
    seconds = time.perf_counter() - start
    kept = len(tree.commits(new_base, tree.head()))
    cache_git.remove_worktree(dest)
    return seconds, stops, kept


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", type=Path, default=None, help="default: $FORKBUILD_CACHE or .cache/forkbuild")
    parser.add_argument("--onto", nargs="+", default=["0.5.22", "0.5.21"])
    parser.add_argument("--repeat", type=int, default=3, help="runs per target; the medians are compared")
    args = parser.parse_args()
    cache = (args.cache or Path(os.environ.get("FORKBUILD_CACHE") or ROOT / ".cache" / "forkbuild")).resolve()
    series = load_series(ROOT / "series.toml")
    upstream = UpstreamCache(cache)
    old_base = upstream.ensure(series.upstream)
    cache_git = upstream.git()
    ok = True
    print(f"series {series.name}: {len(series.patches)} patches on sglang {series.upstream.version}")
    print(f"  {'onto':8}{'forkbuild':>11}{'stops':>7}{'kept':>6}{'git':>9}{'stops':>7}{'kept':>6}{'ratio':>8}")
    for onto in args.onto:
        new_base = upstream.ensure(resolve(series.upstream, onto=onto))
        runs = []
        for _ in range(args.repeat):  # git's own time swings with the disk (its full checkout): medians
            with tempfile.TemporaryDirectory(prefix="forkbuild-bench-rebase-") as scratch_name:
                scratch = Path(scratch_name)
                root = scratch / "series"
                root.mkdir()
                shutil.copy(ROOT / "series.toml", root / "series.toml")
                shutil.copytree(ROOT / "patches", root / "patches")
                git_seconds, git_stops, git_kept = git_am_rebase(
                    cache_git, old_base=old_base, new_base=new_base, dest=scratch / "git",
                    patches=[entry.path for entry in series.patches])
                seconds, stops, report = forkbuild_rebase(root, cache, onto)
            runs.append((seconds, git_seconds))
        seconds, git_seconds = (statistics.median(times) for times in zip(*runs, strict=True))
        kept = sum(1 for patch in report["patches"] if patch["new_commit"])
        ratio = seconds / git_seconds
        ok &= ratio <= GOAL
        print(f"  {onto:8}{seconds:>10.2f}s{stops:>7}{kept:>6}{git_seconds:>8.2f}s{git_stops:>7}{git_kept:>6}"
              f"{ratio:>7.2f}x   (each run: " + ", ".join(f"{one:.1f}/{other:.1f} s" for one, other in runs) + ")")
    print(f"forkbuild rebase <= {GOAL}x git am + git rebase --onto on every target: {'yes' if ok else 'NO'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
