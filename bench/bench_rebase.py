"""Rebase a real series 0.5.22 -> 0.5.23 and, in the same run, `git am -3` the
same patches onto 0.5.23; print both times, the ratio and both auto-applied counts.

The series is the integration test's (tests/integration/test_rebase_sglang.py):
five patches written against the sglang 0.5.22 wheel in the files 0.5.23 changed
(environ.py, schedule_batch.py), one of them already in 0.5.23. Both upstream
versions are imported into the cache before any timing (git am needs them too).

  forkbuild  `forkbuild rebase --onto 0.5.23 --accept-drops`, end to end (old series
             applied for the 3-way blobs, ladder, export, pin, check of every variant, report)
  git am -3  a work tree at 0.5.23 + `git am -3` of the patches, `--skip` past failures

"Auto-applied": patches that ended up as a commit without a human. A silent
misapply would show as a tree that differs from the rebase's for the same patches:
the bench compares them. Goal: forkbuild applies at least as many, never a wrong one.

    /work/venv-dev/bin/python bench/bench_rebase.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))

from test_rebase_sglang import NEW, OLD, PATCHES, shared_cache, write_series  # noqa: E402

from forkbuild.cache import UpstreamCache  # noqa: E402
from forkbuild.cli import main as cli_main  # noqa: E402
from forkbuild.config import load_series  # noqa: E402
from forkbuild.git import Git  # noqa: E402
from forkbuild.rebase.target import resolve  # noqa: E402


def git_am_3way(cache_git: Git, *, base: str, patches: list[Path], dest: Path) -> dict:
    """Seconds (checkout + am, am alone), commits made and final tree of `git am -3`, --skip past failures."""
    start = time.perf_counter()
    worktree = cache_git.add_worktree(dest, base)
    checked_out = time.perf_counter()
    result = worktree.am(patches, three_way=True, committer_date_is_author_date=True)
    while result.status != 0 and worktree.am_in_progress():
        result = worktree.run("am", "--skip", check=False)
    end = time.perf_counter()
    made = len(worktree.commits(base, worktree.head()))
    tree = worktree.out("rev-parse", "HEAD^{tree}")
    cache_git.remove_worktree(dest)
    return {"fresh": end - start, "am": end - checked_out, "made": made, "tree": tree}


def forkbuild_rebase(root: Path, cache: Path) -> tuple[float, dict]:
    start = time.perf_counter()
    code = cli_main(["-C", str(root), "--cache", str(cache), "rebase", "--onto", NEW, "--accept-drops"])
    elapsed = time.perf_counter() - start
    if code != 0:
        sys.exit(f"bench: forkbuild rebase exited {code}")
    return elapsed, json.loads((root / "build" / "rebase" / f"{OLD}-to-{NEW}.json").read_text())


def rebased_tree(cache_git: Git, *, base: str, root: Path, dest: Path) -> str:
    """The tree of 0.5.23 + the rebased series' patches (plain `git am`: they must apply as they are)."""
    series = load_series(root / "series.toml")
    worktree = cache_git.add_worktree(dest, base)
    result = worktree.am([entry.path for entry in series.patches], three_way=False)
    tree = worktree.out("rev-parse", "HEAD^{tree}") if result.status == 0 else "(does not apply)"
    cache_git.remove_worktree(dest)
    return tree


def one_run(scratch: Path, cache: Path) -> dict:
    root = scratch / "series"
    shutil.rmtree(root, ignore_errors=True)
    write_series(root, cache)
    series = load_series(root / "series.toml")
    cache_obj = UpstreamCache(cache)
    target = resolve(series.upstream, onto=NEW)
    new_base = cache_obj.ensure(target)
    cache_git = cache_obj.git()
    am = git_am_3way(cache_git, base=new_base, patches=[entry.path for entry in series.patches], dest=scratch / "am")
    rebase_seconds, report = forkbuild_rebase(root, cache)
    return {"am": am, "rebase": rebase_seconds, "report": report,
            "rebase_tree": rebased_tree(cache_git, base=new_base, root=root, dest=scratch / "check")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="forkbuild-bench-rebase-") as scratch_name:
        scratch = Path(scratch_name)
        cache = shared_cache(scratch)
        runs = []
        for _ in range(args.repeat):
            # The cache repository stays (a fresh one would time the wheel imports); the series is rebuilt.
            runs.append(one_run(scratch, cache))
    def median(pick) -> float:
        return statistics.median(pick(run) for run in runs)

    am_fresh, am_only = median(lambda run: run["am"]["fresh"]), median(lambda run: run["am"]["am"])
    rebase, replay = median(lambda run: run["rebase"]), median(lambda run: run["report"]["timings"]["replay"])
    last = runs[-1]
    report, am_made = last["report"], last["am"]["made"]
    phases = ", ".join(f"{name} {median(lambda run, n=name: run['report']['timings'][n]):.2f}s"
                       for name in report["timings"])
    outcomes = ", ".join(f"{p['file']}={p['outcome']}" for p in report["patches"])
    print(f"series: {len(PATCHES)} patches against sglang {OLD}, rebased onto {NEW} ({args.repeat} runs, medians)")
    print(f"git am -3           checkout+am {am_fresh:7.2f} s   am alone {am_only:6.2f} s   auto-applied {am_made}/{len(PATCHES)}")
    print(f"forkbuild rebase    end to end  {rebase:7.2f} s   replay   {replay:6.2f} s   auto-applied "
          f"{report['auto_applied']}/{len(PATCHES)}")
    print(f"  phases: {phases}")
    print(f"  outcomes: {outcomes}")
    print(f"ratio end to end / (checkout + git am -3): {rebase / am_fresh:.1f}x;  "
          f"replay / git am -3 alone: {replay / am_only:.1f}x")
    same = last["am"]["tree"] == last["rebase_tree"]
    print(f"result trees identical (rebased series vs git am -3): {'yes' if same else 'NO'}"
          f"  [{last['rebase_tree'][:12]} / {last['am']['tree'][:12]}]")
    return 0 if same and report["auto_applied"] >= am_made else 1


if __name__ == "__main__":
    sys.exit(main())
