"""Build a variant's wheels: decide what is stale, refuse what the overlay
cannot do, apply the patches once, write each wheel to a temporary file,
validate it, and only then move it into the output directory.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import BinaryIO

from forkbuild import manifest as manifest_module
from forkbuild import naming
from forkbuild.apply import scratch_tree
from forkbuild.chaos import chaos_point
from forkbuild.combination import Combination
from forkbuild.config import Series, WheelPin
from forkbuild.context import Context
from forkbuild.errors import BuildError
from forkbuild.git import Git
from forkbuild.manifest import Manifest
from forkbuild.wheel.overlay import Overlay, write_overlay
from forkbuild.wheel.patched import patched_changes
from forkbuild.wheel.plan import OverlayChanges, WheelLayout, collect_changes, refuse_compiled
from forkbuild.wheel.source import build_from_checkout
from forkbuild.wheel.validate import validate_wheel
from forkbuild.wheel.zipraw import ZipSource

MODES = ("overlay", "source")


@dataclass(frozen=True, kw_only=True)
class WheelRequest:
    variant: Combination  # what to build, resolved once by the caller
    out_dir: Path
    python_tags: tuple[str, ...] = ()  # empty: every pinned tag (overlay), the running interpreter (source)
    mode: str = ""  # empty: overlay for a release-wheel upstream, source for a git upstream
    force: bool = False
    isolation: bool = True  # source mode: build in an isolated environment (python -m build's default)


@dataclass(frozen=True, kw_only=True)
class BuiltWheel:
    path: Path
    version: str
    rebuilt: bool


def resolve_mode(series: Series, mode: str) -> str:
    if not mode:
        return "overlay" if series.upstream.source == "wheel" else "source"
    if mode not in MODES:
        raise BuildError(f"unknown build mode {mode!r}: choose one of {', '.join(MODES)}")
    if mode == "overlay" and not series.upstream.wheels:
        raise BuildError("overlay mode starts from a release wheel, and series.toml pins none",
                         hint="add [[upstream.wheels]] pins, or build with --mode source")
    return mode


def variant_version(series: Series, combination: Combination) -> str:
    """`<upstream>+<variant>.<hash>`; a combination that is no named variant: `<upstream>+combo.<hash>`."""
    return naming.local_version(upstream_version=series.upstream.version, variant=combination.version_label(),
                                content_hash=combination.content_hash(series))


def build_wheels(*, context: Context, request: WheelRequest) -> tuple[BuiltWheel, ...]:
    series = context.series
    version = variant_version(series, request.variant)
    if resolve_mode(series, request.mode) == "overlay":
        return _build_overlay(context=context, request=request, version=version)
    return _build_source(context=context, request=request, version=version)


def up_to_date(target: Path, manifest: Manifest) -> bool:
    """An existing wheel is kept when it carries exactly the manifest a rebuild would write:
    the same upstream wheel (sha256), series content hash, version and patches."""
    if not target.is_file():
        return False
    try:
        return manifest_module.read_wheel(target) == manifest
    except BuildError:
        return False  # unreadable: rebuilt


def install_validated(target: Path, write: Callable[[BinaryIO], None], *, verified_source: Path | None = None) -> None:
    """Write a wheel next to `target` under its final name, validate it (see validate_wheel for
    `verified_source`), then rename it into place."""
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_dead_scratch(target.parent)
    # The temporary wheel needs the real file name (installer reads the
    # distribution and version from it); a private directory on the same file
    # system keeps the final rename atomic.
    scratch = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".forkbuild-{os.getpid()}-"))
    try:
        temporary = scratch / target.name
        with temporary.open("wb") as stream:
            write(stream)
        validate_wheel(temporary, verified_source=verified_source)
        chaos_point("wheel:validated")
        os.replace(temporary, target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _remove_dead_scratch(directory: Path) -> None:
    """Scratch directories of builds that were killed (their pid is gone)."""
    for scratch in directory.glob(".forkbuild-*-*"):
        pid = scratch.name.split("-")[1]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(scratch, ignore_errors=True)


@dataclass(frozen=True, kw_only=True)
class _Target:
    pin: WheelPin
    path: Path
    manifest: Manifest


def _overlay_targets(*, series: Series, request: WheelRequest, version: str) -> list[_Target]:
    tags = request.python_tags or tuple(pin.python_tag for pin in series.upstream.wheels)
    targets = []
    for tag in dict.fromkeys(tags):
        pin = series.upstream.wheel_for(tag)
        name = naming.wheel_filename(name=series.upstream.name, version=version, tags=naming.wheel_tags(pin.filename))
        manifest = manifest_module.build_manifest(series=series, variant=request.variant, version=version, pin=pin)
        targets.append(_Target(pin=pin, path=request.out_dir / name, manifest=manifest))
    return targets


def _build_overlay(*, context: Context, request: WheelRequest, version: str) -> tuple[BuiltWheel, ...]:
    series, reporter = context.series, context.reporter
    targets = _overlay_targets(series=series, request=request, version=version)
    stale = [target for target in targets if request.force or not up_to_date(target.path, target.manifest)]
    for target in targets:
        if target not in stale:
            reporter.info(f"{target.path.name}: up to date (same upstream wheel and series content)")
    if not stale:
        return tuple(BuiltWheel(path=target.path, version=version, rebuilt=False) for target in targets)
    cache = context.upstream
    sources = {target.pin.python_tag: _zip_source(cache.wheel(target.pin)) for target in stale}
    patches = request.variant.patches(series)
    layouts = {tag: WheelLayout(package_root=series.upstream.package_root, members=frozenset(source.by_name))
               for tag, source in sources.items()}
    for layout in layouts.values():
        refuse_compiled(patches, layout)
    changes = _patched_files(context=context, variant=request.variant, layout=next(iter(layouts.values())),
                             has_patches=bool(patches))
    for path in changes.outside:
        reporter.detail(f"not in the wheel, left out: {path}")
    for target in stale:
        overlay = Overlay(name=series.upstream.name, package=_package(series), version=version,
                          manifest=manifest_module.dumps(target.manifest), changes=changes.changes,
                          executable=changes.executable)
        with reporter.step(f"Building {target.path.name} (overlay, {len(changes.changes)} changed files)"):
            source = sources[target.pin.python_tag]
            install_validated(target.path, partial(write_overlay, source, overlay),
                              verified_source=source.path)
    return tuple(BuiltWheel(path=target.path, version=version, rebuilt=target in stale) for target in targets)


def _zip_source(path: Path) -> ZipSource:
    """The release wheel, read and indexed once per process (a matrix builds many wheels from it)."""
    status = path.stat()
    return _cached_source(str(path), status.st_size, status.st_mtime_ns)


@functools.lru_cache(maxsize=4)
def _cached_source(path: str, size: int, mtime_ns: int) -> ZipSource:
    return ZipSource(Path(path))


def _package(series: Series) -> str:
    return naming.distribution_part(series.upstream.name)


def _patched_files(*, context: Context, variant: Combination, layout: WheelLayout, has_patches: bool) -> OverlayChanges:
    if not has_patches:
        return OverlayChanges(changes={}, executable=frozenset(), outside=())
    # Without a work tree first (fast, and reused across combinations); the strict
    # work-tree apply when a patch does not apply there, to report why.
    fast = patched_changes(context=context, combination=variant, layout=layout)
    if fast is not None:
        return fast
    with scratch_tree(context=context, variant=variant, strict=True) as result:
        changed = Git(result.dest).changed_files(result.base_commit, result.head_commit)
        return collect_changes(tree=result.dest, changed=changed, layout=layout)


def _running_tag() -> str:
    return f"cp{sys.version_info.major}{sys.version_info.minor}"


def _build_source(*, context: Context, request: WheelRequest, version: str) -> tuple[BuiltWheel, ...]:
    series, reporter = context.series, context.reporter
    if any(tag != _running_tag() for tag in request.python_tags):
        raise BuildError(f"source mode builds for the running interpreter ({_running_tag()}), "
                         f"not {', '.join(request.python_tags)}",
                         hint="run forkbuild with the Python whose wheel you want")
    manifest = manifest_module.build_manifest(series=series, variant=request.variant, version=version, pin=None)
    pattern = f"{naming.distribution_part(series.upstream.name)}-{version}-*.whl"
    current = [path for path in sorted(request.out_dir.glob(pattern)) if up_to_date(path, manifest)]
    if current and not request.force:
        for path in current:
            reporter.info(f"{path.name}: up to date (same upstream commit and series content)")
        return tuple(BuiltWheel(path=path, version=version, rebuilt=False) for path in current)
    with scratch_tree(context=context, variant=request.variant, strict=True) as result, \
            tempfile.TemporaryDirectory(prefix="forkbuild-build-") as scratch:
        epoch = Git(result.dest).commit_time(result.head_commit)
        with reporter.step(f"python -m build in the patched {series.upstream.name} checkout"):
            built = build_from_checkout(project=result.dest / series.upstream.package_root, out_dir=Path(scratch),
                                        upstream_version=series.upstream.version, epoch=epoch,
                                        isolation=request.isolation, reporter=reporter)
        target = request.out_dir / naming.wheel_filename(name=series.upstream.name, version=version,
                                                         tags=naming.wheel_tags(built.name))
        _check_built_name(built, series)
        overlay = Overlay(name=series.upstream.name, package=_package(series), version=version,
                          manifest=manifest_module.dumps(manifest))
        with reporter.step(f"Stamping {target.name}"):
            source = ZipSource(built)
            install_validated(target, partial(write_overlay, source, overlay))
    return (BuiltWheel(path=target, version=version, rebuilt=True),)


def _check_built_name(built: Path, series: Series) -> None:
    name = built.name.split("-", 1)[0]
    if name != naming.distribution_part(series.upstream.name):
        raise BuildError(f"the checkout built {built.name}, not a {series.upstream.name} wheel",
                         hint="[upstream] name in series.toml must be the project's distribution name")
