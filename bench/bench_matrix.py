"""Feature-combination builds and matrices.

    python bench/bench_matrix.py [-C SERIES_DIR] [--combinations 32] [--python-tag cp311] [--repeat 3]

1. Wheels: 32 combination wheels (a fixed random sample of the series' valid
   feature sets) built in one process, as `forkbuild matrix --format bake` and
   `forkbuild bisect` build them, against one variant's wheel built the way a
   user builds it (`forkbuild build-wheel --variant tp4 --python-tag cp311`, a
   process of its own), in the same run; each side a fresh process, median of
   --repeat runs. Goal: <= 4x. The 4 combinations built by processes of their
   own must be byte for byte the one-process wheels. Also: 4 combinations each
   built by its own `forkbuild build-wheel --features` process, scaled to 32 (what
   the reuse saves: the release wheel read and verified once, each patched file
   kept per (file, the patches touching it)).
2. Pairwise: forkbuild's greedy covering array against allpairspy on the same
   series (rows, lower bound, feasible pairs left uncovered, rows that are not
   buildable, time).
"""

from __future__ import annotations

import argparse
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from forkbuild.console import Reporter
from forkbuild.context import Context
from forkbuild.matrix import strategies
from forkbuild.series.combination import closure, from_features
from forkbuild.wheel.builder import WheelRequest, build_wheels


def timed(action) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


# CPU seconds (user + system) of the child processes run so far: on a shared machine the
# wall clock swings with the others' load, the CPU a build needs much less.
CPU: list[float] = []


def run_child(command: list[str]) -> None:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(command, check=True, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)


def cli(args: argparse.Namespace, *command: str) -> None:
    base = [sys.executable, "-m", "forkbuild", "-C", str(args.series_dir)]
    if args.cache:
        base += ["--cache", str(args.cache)]
    run_child([*base, *command])


def bench_wheels(args: argparse.Namespace, context: Context) -> None:
    series = context.series
    combinations = sample_combinations(args, series)
    variant = args.variant or series.default_variant
    print(f"{len(combinations)} combinations of {len(series.features)} features "
          f"(sizes {min(len(c.features) for c in combinations)}-{max(len(c.features) for c in combinations)}), "
          f"{args.python_tag}")
    with tempfile.TemporaryDirectory(prefix="bench-matrix-") as scratch:
        out = Path(scratch)
        one = [timed(lambda: cli(args, "build-wheel", "--variant", variant, "--python-tag", args.python_tag,
                                 "--force", "--out", str(out / "one"))) for _ in range(args.repeat)]
        single, single_cpu = statistics.median(one), statistics.median(CPU[-args.repeat:])
        print(f"one variant's wheel ({variant}, `forkbuild build-wheel`, median of {args.repeat}): {single:7.2f} s "
              f"({single_cpu:.2f} s CPU; runs {', '.join(f'{run:.2f}' for run in one)})")
        separate = [timed(lambda c=c: cli(args, "build-wheel", "--features", ",".join(c.features), "--python-tag",
                                          args.python_tag, "--force", "--out", str(out / "separate")))
                    for c in combinations[:4]]
        scaled = statistics.mean(separate) * len(combinations)
        print(f"4 combinations, one `build-wheel --features` process each: {sum(separate):7.2f} s "
              f"(x{len(combinations) / 4:.0f} = {scaled:.1f} s for {len(combinations)})")
        # A process of its own, as the variant's build is: nothing kept from the runs before.
        runs = [timed(lambda: run_child([sys.executable, __file__, *sys.argv[1:], "--batch-into", str(out / "batch")]))
                for _ in range(args.repeat)]
        batch, batch_cpu = statistics.median(runs), statistics.median(CPU[-args.repeat:])
        print(f"{len(combinations)} combination wheels in one process (median of {args.repeat}): {batch:7.2f} s "
              f"({batch_cpu:.2f} s CPU; {batch / len(combinations):.2f} s each; runs {', '.join(f'{run:.2f}' for run in runs)})")
        print(f"ratio {len(combinations)} combinations / one variant:          {batch / single:7.2f}x (goal <= 4x); "
              f"in CPU seconds {batch_cpu / single_cpu:.2f}x")
        print(f"ratio one process / a process each:          {batch / scaled:7.2f}x")
        # The 4 built by processes of their own are 4 of the 32: the one-process wheels must be the same bytes.
        alone = sorted((out / "separate").glob("*.whl"))
        same = sum((out / "batch" / path.name).read_bytes() == path.read_bytes() for path in alone)
        print(f"one process vs a process each, same bytes:   {same}/{len(alone)} wheels")


def sample_combinations(args: argparse.Namespace, series):
    subsets = [row for row in strategies.valid_subsets(series) if row]
    sample = random.Random(0).sample(subsets, args.combinations)
    # Built in the order `forkbuild matrix --format bake` builds them (longest shared patch prefixes).
    return strategies.build_order(series, [from_features(series, sorted(row)) for row in sample])


def build_batch(args: argparse.Namespace, context: Context) -> None:
    """The child process of bench_wheels: every sampled combination's wheel, one after the other."""
    for combination in sample_combinations(args, context.series):
        build_wheels(context=context, request=WheelRequest(variant=combination, out_dir=args.batch_into,
                                                           python_tags=(args.python_tag,), force=True))


def bench_pairwise(series) -> None:
    names = list(series.features)
    needed = strategies.feasible_pairs(series)

    def judge(label: str, rows: list[frozenset[str]], seconds: float) -> None:
        covered = set().union(*(strategies._row_pairs(names, row) for row in rows)) if rows else set()
        invalid = sum(1 for row in rows if not strategies.feasible(series, row, set(names) - row))
        print(f"{label:<34} {len(rows):3d} rows  {len(needed - covered):4d}/{len(needed)} pairs uncovered  "
              f"{invalid:2d} unbuildable rows  {seconds:6.2f} s")

    print(f"pairwise over {len(names)} features: lower bound {strategies.pairwise_lower_bound(series)} rows")
    start = time.perf_counter()
    matrix = strategies.build_matrix(series, "pairwise")
    judge("forkbuild (greedy, 4 tie-breaks)", [frozenset(c.features) for c in matrix.combinations],
          time.perf_counter() - start)
    try:
        from allpairspy import AllPairs
    except ImportError:
        print("allpairspy is not installed (pip install allpairspy): skipped")
        return

    def allowed(row) -> bool:
        placed = list(zip(names, row))
        return strategies.feasible(series, [n for n, on in placed if on], [n for n, on in placed if not on])

    start = time.perf_counter()
    rows = [frozenset(n for n, on in zip(names, row) if on)
            for row in AllPairs([[True, False]] * len(names), filter_func=allowed)]
    judge("allpairspy, constraints as filter", rows, time.perf_counter() - start)
    start = time.perf_counter()
    rows = [closure(series, [n for n, on in zip(names, row) if on]) for row in AllPairs([[True, False]] * len(names))]
    judge("allpairspy, rows closed afterwards", rows, time.perf_counter() - start)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-C", "--series-dir", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--cache", type=Path, default=None)
    parser.add_argument("--variant", default=None)
    parser.add_argument("--combinations", type=int, default=32)
    parser.add_argument("--python-tag", default="cp311")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--batch-into", type=Path, help=argparse.SUPPRESS)  # the child process of bench_wheels
    args = parser.parse_args()
    context = Context.create(series_dir=args.series_dir, cache_dir=args.cache, reporter=Reporter())
    if args.batch_into:
        build_batch(args, context)
        return 0
    bench_pairwise(context.series)
    bench_wheels(args, context)
    return 0


if __name__ == "__main__":
    sys.exit(main())
