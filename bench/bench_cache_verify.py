"""The cost of verifying a cached wheel on every use: `UpstreamCache.wheel()` with its
verified stamp (size, mtime_ns, inode) vs hashing the wheel (the baseline: what a check
without the stamp costs), on the pinned sglang wheels.

    python bench/bench_cache_verify.py [-C SERIES_DIR] [--cache DIR] [--repeat 7]

Works on a copy of the wheel in a private cache (the shared cache is not touched).
Goal: the stamped check adds <= 0.2 s per use.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from forkbuild.cache import UpstreamCache, sha256_of
from forkbuild.config import load_series


def best(action, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-C", "--series-dir", type=Path, default=Path.cwd())
    parser.add_argument("--cache", type=Path, required=True, help="a cache holding the pinned wheels")
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    series = load_series(args.series_dir / "series.toml")
    with tempfile.TemporaryDirectory(prefix="bench-cache-") as scratch:
        for pin in series.upstream.wheels:
            source = args.cache / "wheels" / pin.filename
            if not source.is_file():
                print(f"{pin.filename}: not in {args.cache}; run `forkbuild fetch --wheels` first")
                continue
            cache = UpstreamCache(Path(scratch) / "cache")
            cache.wheels_dir.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, cache.wheels_dir / pin.filename)
            size = source.stat().st_size / 1e6
            first = best(lambda: (shutil.rmtree(cache.wheels_dir / ".verified", ignore_errors=True), cache.wheel(pin)), 1)
            stamped = best(lambda: cache.wheel(pin), args.repeat)
            hashing = best(lambda: sha256_of(cache.wheels_dir / pin.filename), args.repeat)
            print(f"{pin.filename} ({size:.1f} MB): first use (hash + stamp) {first:.3f} s; "
                  f"later uses {stamped * 1000:.2f} ms vs hashing every time {hashing:.3f} s "
                  f"({stamped / hashing:.4f}x); goal <= 0.2 s added: {'met' if stamped <= 0.2 else 'NOT met'}")


if __name__ == "__main__":
    main()
