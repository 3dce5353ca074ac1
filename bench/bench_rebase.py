"""Rebase the real series backward onto sglang 0.5.22 and forward again onto
0.5.23, three ways in the same run, and print patches auto-applied, stops and times:

  forkbuild   `forkbuild rebase --onto V --accept-drops`, `--skip` at every conflict
              (end to end: old series, replay, export, pin, check of every variant, report)
  git rebase  the series as commits (git am on the old base), `git rebase --onto`
              (merge-ort, git's default), `git rebase --skip` at every conflict
  git am -3   a work tree at the new base, `git am -3` of the patch files, `--skip` past failures

Forward, all three start from the same input: the series forkbuild kept on 0.5.22.
"Auto-applied": a commit of the patch without a person. "Not in the cache": a stop
where git could not even try a 3-way merge (the preimage blobs named by a patch
file's index lines are missing), so there is nothing to resolve.
Goal: forkbuild >= both, zero "not in the cache" stops.

    .venv/bin/python bench/bench_rebase.py [--cache DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from forkbuild.cache import UpstreamCache
from forkbuild.cli import main as cli_main
from forkbuild.config import load_series
from forkbuild.errors import RebaseStopped
from forkbuild.git import Git
from forkbuild.rebase.target import resolve

ROOT = Path(__file__).resolve().parents[1]
OLD, NEW = "0.5.22", "0.5.23"
NO_PREIMAGE = ("lacks necessary blobs", "lacks the necessary blob", "sha1 information is lacking", "invalid object")


@dataclass
class Run:
    tool: str
    applied: int
    total: int
    stops: int
    no_preimage: int
    seconds: float
    note: str = ""


def forkbuild_rebase(root: Path, cache: Path, onto: str) -> tuple[Run, dict]:
    cli = ["-C", str(root), "--cache", str(cache), "rebase"]
    journal = root / ".forkbuild-work" / "rebase-journal" / "state.json"
    start, stops, blind = time.perf_counter(), 0, 0
    code = cli_main([*cli, "--onto", onto, "--accept-drops"])
    while code == RebaseStopped.return_code:
        state = json.loads(journal.read_text())
        stops += 1
        blind += any(marker in state["patches"][state["cursor"]]["detail"] for marker in NO_PREIMAGE)
        code = cli_main([*cli, "--skip"])
    seconds = time.perf_counter() - start
    if code != 0:
        sys.exit(f"bench: forkbuild rebase --onto {onto} exited {code}")
    frm = NEW if onto == OLD else OLD
    report = json.loads((root / "build" / "rebase" / f"{frm}-to-{onto}.json").read_text())
    return Run("forkbuild", report["auto_applied"], len(report["patches"]), stops, blind, seconds,
               note=f"replay {report['timings'].get('replay', 0):.2f}s"), report


def git_am_3way(cache_git: Git, *, base: str, patches: list[Path], dest: Path) -> Run:
    start = time.perf_counter()
    tree = cache_git.add_worktree(dest, base)
    result = tree.am(patches, three_way=True, committer_date_is_author_date=True)
    stops, blind = 0, 0
    while result.status != 0 and tree.am_in_progress():
        stops += 1
        blind += any(marker in result.stdout + result.stderr for marker in NO_PREIMAGE)
        result = tree.run("am", "--skip", check=False)
    seconds = time.perf_counter() - start
    applied = len(tree.commits(base, tree.head()))
    cache_git.remove_worktree(dest)
    return Run("git am -3", applied, len(patches), stops, blind, seconds)


def git_rebase(cache_git: Git, *, old_base: str, new_base: str, patches: list[Path], dest: Path) -> Run:
    """The series as commits on old_base (plain git am), then `git rebase --onto new_base` (merge-ort)."""
    tree = cache_git.add_worktree(dest, old_base)
    made = tree.am(patches, three_way=False, committer_date_is_author_date=True)
    if made.status != 0:
        sys.exit(f"bench: the series does not apply on its own base:\n{made.stderr}")
    start = time.perf_counter()
    result = tree.run("rebase", "--onto", new_base, old_base, check=False)
    stops = 0
    while result.status != 0 and (tree.git_dir / "rebase-merge").exists():
        stops += 1
        result = tree.run("rebase", "--skip", check=False)
    seconds = time.perf_counter() - start
    applied = len(tree.commits(new_base, tree.head()))
    cache_git.remove_worktree(dest)
    return Run("git rebase", applied, len(patches), stops, 0, seconds,
               note="empty (already upstream) commits dropped silently")


def series_paths(root: Path) -> list[Path]:
    return [entry.path for entry in load_series(root / "series.toml").patches]


def print_runs(title: str, runs: list[Run]) -> None:
    print(title)
    print(f"  {'tool':12}{'auto-applied':>14}{'stops':>7}{'not in the cache':>18}{'time':>9}")
    for run in runs:
        print(f"  {run.tool:12}{run.applied:>8}/{run.total:<5}{run.stops:>7}{run.no_preimage:>18}{run.seconds:>8.1f}s"
              f"  {run.note}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", type=Path, default=None, help="default: $FORKBUILD_CACHE or .cache/forkbuild")
    args = parser.parse_args()
    cache = (args.cache or Path(os.environ.get("FORKBUILD_CACHE") or ROOT / ".cache" / "forkbuild")).resolve()
    series = load_series(ROOT / "series.toml")
    upstream = UpstreamCache(cache)
    bases = {NEW: upstream.ensure(series.upstream), OLD: upstream.ensure(resolve(series.upstream, onto=OLD))}
    cache_git = upstream.git()
    with tempfile.TemporaryDirectory(prefix="forkbuild-bench-rebase-") as scratch_name:
        scratch = Path(scratch_name)
        root = scratch / "series"
        root.mkdir()
        shutil.copy(ROOT / "series.toml", root / "series.toml")
        shutil.copytree(ROOT / "patches", root / "patches")
        original = series_paths(root)
        print(f"series {series.name}: {len(original)} patches on sglang {NEW}; backward onto {OLD}, then forward")
        back_am = git_am_3way(cache_git, base=bases[OLD], patches=original, dest=scratch / "am-back")
        back_rebase = git_rebase(cache_git, old_base=bases[NEW], new_base=bases[OLD], patches=original,
                                 dest=scratch / "rebase-back")
        back, report = forkbuild_rebase(root, cache, OLD)
        print_runs(f"backward {NEW} -> {OLD}:", [back, back_rebase, back_am])
        kept = series_paths(root)  # forkbuild's series on 0.5.22: the input of all three forward
        fwd_am = git_am_3way(cache_git, base=bases[NEW], patches=kept, dest=scratch / "am-fwd")
        fwd_rebase = git_rebase(cache_git, old_base=bases[OLD], new_base=bases[NEW], patches=kept,
                                dest=scratch / "rebase-fwd")
        fwd, fwd_report = forkbuild_rebase(root, cache, NEW)
        print_runs(f"forward {OLD} -> {NEW} (the {len(kept)} patches kept on {OLD}):", [fwd, fwd_rebase, fwd_am])
        outcomes = ", ".join(f"{p['file']}={p['outcome']}" for p in report["patches"])
        print(f"backward outcomes: {outcomes}")
        print("forward outcomes: " + ", ".join(f"{p['file']}={p['outcome']}" for p in fwd_report["patches"]))
    ok = all(mine.applied >= max(other.applied for other in others) and mine.no_preimage == 0
             for mine, others in ((back, (back_am, back_rebase)), (fwd, (fwd_am, fwd_rebase))))
    print(f"forkbuild >= git rebase and git am -3 both ways, zero 'not in the cache' stops: {'yes' if ok else 'NO'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
