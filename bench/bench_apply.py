"""Apply the whole series three ways, in the same run, and print times and ratios:

  forkbuild  `forkbuild apply --all --dir <fresh dir>` (the CLI, end to end)
  git am     `git worktree add` of the upstream commit + `git am <patches>`
  quilt      `git worktree add` of the upstream commit + `quilt push -a`

Two measurements: "fresh" (a new work tree each time: checkout + apply, what a
user waits for) and "apply step" (the patches only, on a ready checkout; for
forkbuild: re-applying into its existing tree, which resets it to upstream
first). Each is the median of --repeat runs, the tools interleaved. Goal:
forkbuild <= 1.0x git am.

Before each apply step the tree is settled, the same way for every tool: past git's racy
window (1.2 s), its index refreshed (`git update-index --refresh`: entries written in the
same instant as the index are otherwise re-read by content on the next command), and the
disk synced (a checkout of sglang's 5,771 files leaves ~130 MB of dirty pages to write
back). Unsettled, git am right after its checkout measured 0.25-0.41 s, settled 0.23-0.30 s.

forkbuild runs as installed: its bytecode compiled first (pip compiles an installed
package's; an editable install writes it on first import, unless PYTHONDONTWRITEBYTECODE
is set, as it is on this project's machines: then every run compiles ~60 modules from
source, ~30 ms).

    .venv/bin/python bench/bench_apply.py [--repeat 3] [--series-dir .] [--cache DIR]
"""

from __future__ import annotations

import argparse
import compileall
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import forkbuild
from forkbuild.series.config import load_series
from forkbuild.series.edit import quilt_series_text
from forkbuild.upstream.cache import UpstreamCache

ROOT = Path(__file__).resolve().parents[1]


def timed(command: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        sys.exit(f"bench: {' '.join(command)} failed ({result.returncode}):\n{result.stdout}{result.stderr}")
    return elapsed


class Bench:
    def __init__(self, *, series_dir: Path, cache: Path, scratch: Path) -> None:
        self.series_dir = series_dir
        self.cache = cache
        self.scratch = scratch
        self.series = load_series(series_dir / "series.toml")
        self.base = UpstreamCache(cache).ensure(self.series.upstream)  # fetched before any timing
        self.patches = [str(entry.path) for entry in self.series.patches]
        # quilt reads the same patch files through a series file in series.toml's order.
        self.quilt_dir = scratch / "quilt-patches"
        self.quilt_dir.mkdir()
        for entry in self.series.patches:
            (self.quilt_dir / entry.file).symlink_to(entry.path)
        (self.quilt_dir / "series").write_text(quilt_series_text(entry.file for entry in self.series.patches))
        self.forkbuild = shutil.which("forkbuild", path=str(Path(sys.executable).parent)) or "forkbuild"
        compileall.compile_dir(Path(forkbuild.__file__).parent, quiet=1)  # see the module doc
        self.git_env = {**os.environ, "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@localhost",
                        "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@localhost"}
        self.quilt_env = {**os.environ, "QUILT_PATCHES": str(self.quilt_dir)}
        self.count = 0

    def fresh(self, name: str) -> Path:
        self.count += 1
        return self.scratch / f"{name}-{self.count}"

    def checkout(self, dest: Path) -> float:
        return timed(["git", "-C", str(self.cache / "upstream.git"), "worktree", "add", "--detach", "--quiet",
                      str(dest), self.base], env=self.git_env)

    def remove(self, dest: Path) -> None:
        subprocess.run(["git", "-C", str(self.cache / "upstream.git"), "worktree", "remove", "--force", str(dest)],
                       capture_output=True)
        shutil.rmtree(dest, ignore_errors=True)

    def settle(self, dest: Path) -> None:
        """The tree as a user's ready checkout is (see the module doc)."""
        time.sleep(1.2)
        subprocess.run(["git", "-C", str(dest), "update-index", "-q", "--refresh"], capture_output=True)
        os.sync()

    def run_forkbuild(self, dest: Path) -> float:
        return timed([self.forkbuild, "-C", str(self.series_dir), "--cache", str(self.cache), "apply", "--all",
                      "--dir", str(dest)])

    def run_git_am(self, dest: Path) -> float:
        return timed(["git", "-C", str(dest), "am", "--quiet", *self.patches], env=self.git_env)

    def run_quilt(self, dest: Path) -> float:
        return timed(["quilt", "--quiltrc=-", "push", "-a", "-q"], cwd=dest, env=self.quilt_env)

    def round(self) -> dict[str, tuple[float, float]]:
        """One run of each tool: (fresh, apply step) seconds."""
        times = {}
        dest = self.fresh("forkbuild")
        first = self.run_forkbuild(dest)
        self.settle(dest)
        times["forkbuild"] = (first, self.run_forkbuild(dest))
        self.remove(dest)
        for name, apply in (("git am", self.run_git_am), ("quilt", self.run_quilt)):
            dest = self.fresh(name.replace(" ", "-"))
            checkout = self.checkout(dest)
            self.settle(dest)
            step = apply(dest)
            times[name] = (checkout + step, step)
            self.remove(dest)
        return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--series-dir", type=Path, default=ROOT)
    parser.add_argument("--cache", type=Path, default=None, help="default: $FORKBUILD_CACHE or <series-dir>/.cache/forkbuild")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    series_dir = args.series_dir.resolve()
    cache = (args.cache or Path(os.environ.get("FORKBUILD_CACHE") or series_dir / ".cache" / "forkbuild")).resolve()
    if shutil.which("quilt") is None:
        sys.exit("bench: quilt is not installed (apt-get install quilt)")
    with tempfile.TemporaryDirectory(prefix="forkbuild-bench-") as scratch:
        bench = Bench(series_dir=series_dir, cache=cache, scratch=Path(scratch))
        upstream = bench.series.upstream
        print(f"series {bench.series.name}: {len(bench.patches)} patches on {upstream.name} {upstream.version} "
              f"({bench.base[:12]}), {args.repeat} runs each, median")
        rounds = [bench.round() for _ in range(args.repeat)]
    report(rounds)
    return 0


def report(rounds: list[dict[str, tuple[float, float]]]) -> None:
    tools = list(rounds[0])
    median = {tool: tuple(statistics.median(run[tool][kind] for run in rounds) for kind in (0, 1)) for tool in tools}
    print(f"{'':16}{'fresh tree':>12}{'vs git am':>11}{'apply step':>13}{'vs git am':>11}")
    for tool in tools:
        fresh, step = median[tool]
        print(f"{tool:16}{fresh:11.2f}s{fresh / median['git am'][0]:10.2f}x{step:12.2f}s{step / median['git am'][1]:10.2f}x")


if __name__ == "__main__":
    sys.exit(main())
