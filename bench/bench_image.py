"""Docker images per variant: `delta` vs `wheel` mode, and every image built in
parallel, in one run.

    eval "$(.ci/dockerd.sh env)"   # after `.ci/dockerd.sh start`
    python bench/bench_image.py [-C SERIES_DIR] [--python-tag cp311] [--platform P] [--no-parallel]

Both modes build on the same local stock base (`forkbuild build-base --stock`:
the pinned sglang wheel installed --no-deps), so the comparison is the layer
each mode adds: pip installing the whole patched wheel over the stock one
(wheel) against the changed files + rewritten metadata (delta). Every build
runs with --no-cache: timings are real builds, not cache hits. Bases and wheels
are made before any timing. Prints, per variant, build seconds and the bytes
the sglang layer and all layers above the base add, then the wall time of
`docker-compose build --parallel --no-cache` for every (variant, mode).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from forkbuild.commands.compose import compose_build
from forkbuild.console import Reporter
from forkbuild.context import Context
from forkbuild.image import build
from forkbuild.image.base import ensure_bases
from forkbuild.image.build_context import prepare_context
from forkbuild.image.docker import Docker
from forkbuild.series.combination import of_variant
from forkbuild.series.config import PLATFORMS, native_platform

REPOSITORY = "forkbuild-bench/sglang"


def _row(variant: str, built: build.BuiltImage) -> str:
    return (f"{variant:<8} {built.mode:<6} {built.seconds:>8.1f} {built.mode_layer_bytes / 1e6:>12.2f} "
            f"{built.added_bytes / 1e6:>12.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-C", "--series-dir", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--python-tag", default="cp311")
    parser.add_argument("--platform", choices=tuple(PLATFORMS), default=native_platform(),
                        help="the images' platform (default: this machine's; another runs under emulation)")
    parser.add_argument("--no-parallel", action="store_true", help="skip the all-images parallel build")
    args = parser.parse_args()
    reporter = Reporter()
    context = Context.create(series_dir=args.series_dir, cache_dir=None, reporter=reporter)
    docker = Docker.connect(reporter=reporter)

    start = time.monotonic()
    platform = args.platform
    stock_base = ensure_bases(context=context, docker=docker, stock=True, platform=platform,
                              python_tag=args.python_tag)[-1]
    contexts = [prepare_context(context, variant=of_variant(context.series, name), platform=platform,
                                python_tags=[args.python_tag]) for name in context.series.variants]
    print(f"setup (bases, wheels, contexts; cached when present): {time.monotonic() - start:.1f}s")
    print(f"base: {stock_base}\n")

    print(f"{'variant':<8} {'mode':<6} {'build s':>8} {'layer MB':>12} {'added MB':>12}")
    results = {}
    for image_context in contexts:
        variant = image_context.manifest.variant
        for mode in build.MODES:
            built = build.build_image(docker=docker, context=image_context, mode=mode, base=stock_base,
                                      tag=build.default_tag(variant, mode, platform, repository=REPOSITORY),
                                      no_cache=True)
            results[variant, mode] = built
            print(_row(variant, built), flush=True)
    print()
    for variant in (image_context.manifest.variant for image_context in contexts):
        wheel, delta = results[variant, "wheel"], results[variant, "delta"]
        print(f"{variant}: delta/wheel  time {delta.seconds / wheel.seconds:.2f}x  "
              f"layer {delta.mode_layer_bytes / wheel.mode_layer_bytes:.3f}x")
    sequential = sum(built.seconds for built in results.values())
    print(f"\nall {len(results)} images one after another: {sequential:.1f}s")
    if args.no_parallel:
        return

    out = context.build_dir / "compose-bench.yaml"
    out.write_text(build.compose_file(contexts, modes=build.MODES, bases={(mode, platform): stock_base for mode in build.MODES},
                                      relative_to=out.parent, repository=REPOSITORY,
                                      header="bench/bench_image.py: every image, built in parallel"))
    start = time.monotonic()
    compose_build(docker=docker, compose_file=out, reporter=reporter, no_cache=True)
    parallel = time.monotonic() - start
    print(f"all {len(results)} images in parallel (docker-compose build --parallel --no-cache): {parallel:.1f}s "
          f"({sequential / parallel:.2f}x faster than one after another)")


if __name__ == "__main__":
    main()
