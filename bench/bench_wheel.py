"""Overlay build vs `wheel unpack` + `wheel pack` for the same change, the cost of a
variant's second platform against its first, and the time to build every variant's wheels.

    python bench/bench_wheel.py [-C SERIES_DIR] [--variant V] [--python-tag cp311] [--repeat 3]

The second platform (tp4: linux/amd64 after linux/arm64) reuses the first's plan and
patched files: `build-wheel` of both platforms minus `build-wheel` of the first alone,
as a ratio to the first alone (goal: <= 0.5x), both in this run, every wheel rebuilt.

Both methods start from the same pinned release wheel and write the same change
(the variant's changed files, the new version in METADATA, _version.py and the
.dist-info name, the manifest). The overlay time excludes the RECORD validation
that `build-wheel` runs on every wheel (unpack + pack validates nothing); it is
shown separately. Prints the ratio (goal: <= 0.1x).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from forkbuild.applier import scratch_tree
from forkbuild.console import Reporter
from forkbuild.context import Context
from forkbuild.io.git import Git
from forkbuild.series.combination import Combination, of_variant
from forkbuild.series.config import native_platform
from forkbuild.upstream.cache import UpstreamCache
from forkbuild.wheel import builder, naming
from forkbuild.wheel import manifest as manifest_module
from forkbuild.wheel.builder import WheelRequest, build_wheels, variant_version
from forkbuild.wheel.overlay import Overlay, write_overlay
from forkbuild.wheel.plan import OverlayChanges, WheelLayout, collect_changes
from forkbuild.wheel.validate import validate_wheel
from forkbuild.wheel.zipraw import ZipSource


def timed(action) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def variant_changes(context: Context, variant: Combination, layout: WheelLayout) -> OverlayChanges:
    with scratch_tree(context=context, variant=variant, strict=True) as result:
        changed = Git(result.dest).changed_files(result.base_commit, result.head_commit)
        return collect_changes(tree=result.dest, changed=changed, layout=layout)


def overlay_once(source_path: Path, overlay: Overlay, target: Path) -> None:
    source = ZipSource(source_path)
    with target.open("wb") as stream:
        write_overlay(source, overlay, stream)


def unpack_pack_once(source_path: Path, overlay: Overlay, work: Path) -> Path:
    """The same change made the usual way: unpack, edit files, pack (recompresses everything)."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    subprocess.run([sys.executable, "-m", "wheel", "unpack", "-d", str(work), str(source_path)],
                   check=True, capture_output=True)
    (tree,) = work.iterdir()
    for member, content in overlay.changes.items():
        if content is None:
            (tree / member).unlink()
        else:
            (tree / member).parent.mkdir(parents=True, exist_ok=True)
            (tree / member).write_bytes(content)
    version_module = tree / overlay.version_member
    version_module.write_bytes(naming.set_version_module(version_module.read_bytes(), overlay.version, source="bench"))
    (tree / overlay.manifest_member).write_bytes(overlay.manifest)
    old_dist_info = next(tree.glob("*.dist-info"))
    new_dist_info = tree / naming.dist_info_dir(overlay.name, overlay.version)
    old_dist_info.rename(new_dist_info)
    metadata = new_dist_info / "METADATA"
    metadata.write_bytes(naming.set_metadata_version(metadata.read_bytes(), overlay.version, source="bench"))
    (new_dist_info / "forkbuild_manifest.json").write_bytes(overlay.manifest)
    out = work / "out"
    out.mkdir()
    subprocess.run([sys.executable, "-m", "wheel", "pack", "-d", str(out), str(tree)], check=True, capture_output=True)
    (built,) = out.glob("*.whl")
    return built


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-C", "--series-dir", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--cache", type=Path, default=None)
    parser.add_argument("--variant", default=None)
    parser.add_argument("--python-tag", default="cp311")
    parser.add_argument("--platform", default=native_platform())
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-all", action="store_true", help="skip building every variant")
    args = parser.parse_args()
    context = Context.create(series_dir=args.series_dir, cache_dir=args.cache, reporter=Reporter())
    series = context.series
    variant = of_variant(series, args.variant or series.default_variant)  # resolved once
    pin = series.upstream.wheel_for(args.python_tag, args.platform)
    source_path = UpstreamCache(context.cache_dir, reporter=context.reporter).wheel(pin)
    source = ZipSource(source_path)
    layout = WheelLayout(package_root=series.upstream.package_root, members=frozenset(source.by_name))
    changes = variant_changes(context, variant, layout)
    content_hash = variant.content_hash(series)
    version = variant_version(series, variant, content_hash)
    overlay = Overlay(name=series.upstream.name, package=naming.distribution_part(series.upstream.name),
                      version=version, changes=changes.changes, executable=changes.executable,
                      manifest=manifest_module.dumps(manifest_module.build_manifest(
                          series=series, variant=variant, version=version, content_hash=content_hash).from_pin(pin)))
    print(f"{source_path.name}: {len(source.members)} members, {source_path.stat().st_size / 1e6:.1f} MB; "
          f"variant {variant.name}: {len(changes.changes)} changed files (+ version, manifest)")
    with tempfile.TemporaryDirectory(prefix="bench-wheel-") as scratch:
        scratch_dir = Path(scratch)
        target = scratch_dir / naming.wheel_filename(name=series.upstream.name, version=version,
                                                      tags=naming.wheel_tags(pin.filename))
        overlay_times = [timed(lambda: overlay_once(source_path, overlay, target)) for _ in range(args.repeat)]
        validate_times = [timed(lambda: validate_wheel(target)) for _ in range(args.repeat)]
        repack_times = [timed(lambda: unpack_pack_once(source_path, overlay, scratch_dir / "repack"))
                        for _ in range(args.repeat)]
        repacked = next((scratch_dir / "repack" / "out").glob("*.whl"))
        validate_wheel(repacked)
        overlay_s, validate_s, repack_s = (statistics.median(t) for t in (overlay_times, validate_times, repack_times))
        print(f"overlay build (median of {args.repeat}):      {overlay_s:6.2f} s")
        print(f"  + RECORD validation (installer):   {validate_s:6.2f} s")
        print(f"wheel unpack + wheel pack (median):  {repack_s:6.2f} s")
        print(f"ratio overlay / unpack+pack:         {overlay_s / repack_s:6.3f}x (goal <= 0.1x)")
        print(f"ratio with validation:               {(overlay_s + validate_s) / repack_s:6.3f}x")
        platform_cost(context, variant, scratch_dir / "platforms", repeat=args.repeat)
        if not args.skip_all:
            out = scratch_dir / "all"
            start = time.perf_counter()
            for name in series.variants:
                took = timed(lambda: build_wheels(context=context, request=WheelRequest(
                    variant=of_variant(series, name), out_dir=out, force=True)))
                wheels = sum(len(series.upstream.python_tags(p)) for p in series.variants[name].platforms)
                print(f"build-wheel {name:<8} (apply + {wheels} wheels, validated): {took:6.2f} s")
            print(f"every variant:                       {time.perf_counter() - start:6.2f} s")
    return 0


def platform_cost(context: Context, variant: Combination, out: Path, *, repeat: int) -> None:
    """build-wheel of the variant's first platform alone, then of all of them (every wheel rebuilt,
    the release wheels read anew each time): the second platform's cost as a ratio to the first."""
    if len(variant.platforms) < 2:
        print(f"{variant.name} declares one platform: no second platform to time")
        return

    def build(platforms: tuple[str, ...]) -> float:
        builder._zip_source.cache_clear()
        return timed(lambda: build_wheels(context=context, request=WheelRequest(
            variant=variant, out_dir=out, platforms=platforms, force=True)))

    first, both = [], []
    for _ in range(repeat):
        first.append(build(variant.platforms[:1]))
        both.append(build(variant.platforms[:2]))
    first_s, both_s = statistics.median(first), statistics.median(both)
    tags = len(context.series.upstream.python_tags(variant.platforms[0]))
    print(f"build-wheel {variant.name} {variant.platforms[0]} alone ({tags} wheels, median of {repeat}): {first_s:6.2f} s")
    print(f"build-wheel {variant.name} {' + '.join(variant.platforms[:2])} ({2 * tags} wheels):   {both_s:6.2f} s")
    print(f"second platform ({variant.platforms[1]}) / first:   {(both_s - first_s) / first_s:6.3f}x (goal <= 0.5x)")


if __name__ == "__main__":
    sys.exit(main())
