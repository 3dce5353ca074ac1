"""Import a real-world quilt series and apply it, against `quilt push -a` of the
same series, in the same run; prints times and the ratio.

The series: Debian 12's grub2 (206 patches in debian/patches), from the quilt
corpus (tests/integration/quilt_corpus.py fetch; offline afterwards).

  forkbuild  `forkbuild import --quilt debian/patches` into a fresh project (the
             CLI end to end: read + normalise every patch, apply each through the
             engine (`git apply --cached` on small private indexes), every commit from
             one fast-import, format-patch, write patches/ + series.toml as one
             transaction, check the series work tree out once) — the imported
             series applied, in a tree
  quilt      `quilt push -a` on a fresh copy of the unpatched tree
  apply      `forkbuild apply --all` of the imported files into a fresh dir (for
             information: the same engine, on the exported mail-format patches)

Median of --repeat runs, the tools interleaved. Goal: forkbuild <= 1.0x quilt.

    .venv/bin/python bench/bench_quilt.py [--repeat 3] [--package grub2]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))

from bench_apply import timed  # noqa: E402
from quilt_corpus import extract, make_project, missing_tools, packages  # noqa: E402

from forkbuild.series.config import load_series  # noqa: E402
from forkbuild.upstream.cache import UpstreamCache  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--package", default="grub2")
    args = parser.parse_args()
    reason = missing_tools() or ("" if shutil.which("quilt") else "quilt is not installed (apt-get install quilt)")
    if reason:
        sys.exit(f"bench: {reason}")
    package = next((item for item in packages() if item.name == args.package), None)
    if package is None:
        sys.exit(f"bench: {args.package} is not in the quilt corpus")
    forkbuild = [sys.executable, "-m", "forkbuild"]
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-quilt-") as scratch_name:
        scratch = Path(scratch_name)
        source = extract(package, scratch / "src", patched=False)
        count = len([line for line in (source / "debian/patches/series").read_text().splitlines()
                     if line.split("#", 1)[0].strip()])
        files = sum(len(names) for _, _, names in os.walk(source))
        template = make_project(source, scratch / "template")
        cache = scratch / "cache"
        UpstreamCache(cache).ensure(load_series(template / "series.toml").upstream)  # imported before any timing
        times: dict[str, list[float]] = {"forkbuild": [], "quilt": [], "apply": []}
        for run in range(args.repeat):
            project = scratch / f"project-{run}"
            shutil.copytree(template, project)
            times["forkbuild"].append(timed([*forkbuild, "-C", str(project), "--cache", str(cache), "import",
                                             "--quilt", str(source / "debian/patches"), "--feature", "debian"]))
            quilt_tree = scratch / f"quilt-{run}"
            shutil.copytree(source, quilt_tree, symlinks=True)
            times["quilt"].append(timed(["quilt", "--quiltrc=-", "push", "-a", "-q"], cwd=quilt_tree,
                                        env={**os.environ, "QUILT_PATCHES": "debian/patches"}))
            times["apply"].append(timed([*forkbuild, "-C", str(project), "--cache", str(cache), "apply", "--all",
                                         "--dir", str(scratch / f"applied-{run}")]))
    median = {name: statistics.median(values) for name, values in times.items()}
    print(f"{package.dsc.stem}: {count} quilt patches on a {files}-file tree, {args.repeat} runs each, median")
    # The machine is shared: the ratios are of one run, the absolute times move with the load.
    print(f"load average (1/5/15 min) before: {' '.join(f'{value:.2f}' for value in load_before)}, "
          f"after: {' '.join(f'{value:.2f}' for value in os.getloadavg())} on {os.cpu_count()} cores")
    print(f"{'':28} time   vs quilt push -a")
    labels = {"forkbuild": "forkbuild import (+checkout)", "quilt": "quilt push -a",
              "apply": "forkbuild apply --all"}
    for name in ("forkbuild", "quilt", "apply"):
        print(f"{labels[name]:28} {median[name]:5.2f}s  {median[name] / median['quilt']:5.2f}x"
              f"   (runs: {' '.join(f'{value:.2f}' for value in times[name])})")
    both = median["forkbuild"] + median["apply"]
    print(f"{'import + apply --all':28} {both:5.2f}s  {both / median['quilt']:5.2f}x   (goal: <= 2.0x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
