"""Two versions of forkbuild's code, interleaved run by run: bench_apply's apply step (`apply --all`
on a ready tree, the engine's remembered results dropped before each run) and bench_quilt's
`import --quilt` (grub2). For a change that must make neither slower (a refactor): the baseline
is the other version, measured in the same run, under the same load.

    git archive REV | tar -x -C /tmp/base     # the code to compare with
    .venv/bin/python bench/bench_ab.py --base /tmp/base [--repeat 7] [--apply-only]

Needs bench_apply's cache ($FORKBUILD_CACHE or .cache/forkbuild; copied, not written) and, without
--apply-only, the quilt corpus (tests/integration/quilt_corpus.py fetch). Both versions run from
compiled bytecode, as bench_apply runs forkbuild (see its doc).
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))

from quilt_corpus import extract, make_project, packages  # noqa: E402

from forkbuild.cache import UpstreamCache  # noqa: E402
from forkbuild.config import load_series  # noqa: E402

MEMO = Path("upstream.git") / "forkbuild-apply-memo.json"


def timed(command: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    result = subprocess.run(command, env=env, capture_output=True)
    if result.returncode != 0:
        sys.exit(f"bench: {' '.join(command)} failed: {result.stderr.decode(errors='replace')[-1000:]}")
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, required=True, help="a checkout of the code to compare with")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--package", default="grub2")
    parser.add_argument("--apply-only", action="store_true", help="only the apply step (no quilt corpus needed)")
    args = parser.parse_args()
    roots = {"base": args.base.resolve(), "new": ROOT}
    for root in roots.values():
        compileall.compile_dir(root / "tools" / "forkbuild", quiet=1)
    # The same venv for both; each version's tools/ first on the path.
    envs = {name: {**os.environ, "PYTHONPATH": str(root / "tools")} for name, root in roots.items()}
    forkbuild = [sys.executable, "-m", "forkbuild"]
    cache = Path(os.environ.get("FORKBUILD_CACHE") or ROOT / ".cache" / "forkbuild")
    package = None if args.apply_only else next((item for item in packages() if item.name == args.package), None)
    if package is None and not args.apply_only:
        sys.exit(f"bench: {args.package} is not in the quilt corpus")
    load_before = os.getloadavg()
    apply_times: dict[str, list[float]] = {name: [] for name in roots}
    import_times: dict[str, list[float]] = {name: [] for name in roots}
    with tempfile.TemporaryDirectory(prefix="bench-ab-") as scratch_name:
        scratch = Path(scratch_name)
        caches = {name: scratch / f"cache-{name}" for name in roots}
        for name in roots:
            shutil.copytree(cache, caches[name], symlinks=True)
            timed([*forkbuild, "-C", str(roots[name]), "--cache", str(caches[name]), "apply", "--all",
                   "--dir", str(scratch / f"tree-{name}")], envs[name])  # the ready tree
        for _ in range(args.repeat):
            for name in roots:
                (caches[name] / MEMO).unlink(missing_ok=True)
                apply_times[name].append(timed([*forkbuild, "-C", str(roots[name]), "--cache", str(caches[name]),
                                                "apply", "--all", "--dir", str(scratch / f"tree-{name}")], envs[name]))
        if package is None:
            return _report(roots, args.repeat, load_before, {"apply --all, ready tree (dsv41)": apply_times})
        source = extract(package, scratch / "src", patched=False)
        template = make_project(source, scratch / "template")
        for name in roots:  # imported into each cache before any timing
            UpstreamCache(caches[name]).ensure(load_series(template / "series.toml").upstream)
        for run in range(args.repeat):
            for name in roots:
                project = scratch / f"quilt-{name}-{run}"
                shutil.copytree(template, project)
                import_times[name].append(timed([*forkbuild, "-C", str(project), "--cache", str(caches[name]),
                                                 "import", "--quilt", str(source / "debian/patches"),
                                                 "--feature", "debian"], envs[name]))
    return _report(roots, args.repeat, load_before, {"apply --all, ready tree (dsv41)": apply_times,
                                                     f"import --quilt ({package.dsc.stem})": import_times})


def _report(roots: dict[str, Path], repeat: int, load_before: tuple[float, float, float],
            measured: dict[str, dict[str, list[float]]]) -> int:
    print(f"base {roots['base']} vs new {ROOT}, {repeat} runs each, interleaved, median")
    print(f"load average (1/5/15 min) before: {' '.join(f'{value:.2f}' for value in load_before)}, "
          f"after: {' '.join(f'{value:.2f}' for value in os.getloadavg())} on {os.cpu_count()} cores")
    for label, times in measured.items():
        base, new = statistics.median(times["base"]), statistics.median(times["new"])
        print(f"{label:44} base {base:6.3f}s  new {new:6.3f}s  new/base {new / base:5.2f}x")
        for name in roots:
            print(f"    {name:5} runs: {' '.join(f'{value:.2f}' for value in times[name])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
