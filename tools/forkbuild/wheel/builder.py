"""Build a variant's wheels: keep what is up to date, apply the patches once, validate each
wheel before it is moved into place. A git upstream builds by `python -m build` (source mode)."""

from __future__ import annotations

import functools
import importlib.util
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
from forkbuild import naming, process
from forkbuild.apply import scratch_tree
from forkbuild.chaos import chaos_point
from forkbuild.combination import COMBO_LABEL, Combination
from forkbuild.config import Series
from forkbuild.console import Reporter
from forkbuild.context import Context
from forkbuild.errors import BuildError, ToolMissing
from forkbuild.git import Git
from forkbuild.manifest import Manifest
from forkbuild.wheel.overlay import Overlay, write_overlay
from forkbuild.wheel.plan import OverlayChanges, WheelLayout, collect_changes, patched_changes, refuse_compiled
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
    rebuilt: bool


def variant_version(series: Series, combination: Combination) -> str:
    """`<upstream>+<variant>.<hash>`; a combination that is no named variant: `<upstream>+combo.<hash>`."""
    label = combination.name if combination.is_variant else COMBO_LABEL
    return naming.local_version(upstream_version=series.upstream.version, variant=label,
                                content_hash=combination.content_hash(series))


def build_wheels(*, context: Context, request: WheelRequest) -> tuple[BuiltWheel, ...]:
    version = variant_version(context.series, request.variant)
    upstream = context.series.upstream
    if (request.mode or ("overlay" if upstream.source == "wheel" else "source")) == "source":
        return _build_source(context=context, request=request, version=version)
    if not upstream.wheels:
        raise BuildError("overlay mode starts from a release wheel, and series.toml pins none",
                         hint="add [[upstream.wheels]] pins, or build with --mode source")
    return _build_overlay(context=context, request=request, version=version)


def up_to_date(target: Path, manifest: Manifest) -> bool:
    """Whether `target` carries exactly the manifest a rebuild would write (same upstream,
    series content, version and patches); an unreadable wheel is rebuilt."""
    try:
        return target.is_file() and manifest_module.read_wheel(target) == manifest
    except BuildError:
        return False


def install_validated(target: Path, write: Callable[[BinaryIO], None], *, verified_source: Path | None = None) -> None:
    """Write a wheel next to `target` under its final name, validate it, then rename it into place."""
    target.parent.mkdir(parents=True, exist_ok=True)
    for dead in target.parent.glob(".forkbuild-*-*"):  # scratch of a build that was killed
        pid = dead.name.split("-")[1]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(dead, ignore_errors=True)
    # The real file name (installer reads name and version from it), in a private directory
    # on the same file system: the final rename is atomic.
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


@functools.lru_cache(maxsize=4)
def _zip_source(path: Path, size: int, mtime_ns: int) -> ZipSource:
    """The release wheel, read and indexed once per process (a matrix builds many wheels from it)."""
    return ZipSource(path)


def _build_overlay(*, context: Context, request: WheelRequest, version: str) -> tuple[BuiltWheel, ...]:
    series, reporter = context.series, context.reporter
    targets = []
    for tag in dict.fromkeys(request.python_tags or [pin.python_tag for pin in series.upstream.wheels]):
        pin = series.upstream.wheel_for(tag)
        name = naming.wheel_filename(name=series.upstream.name, version=version, tags=naming.wheel_tags(pin.filename))
        manifest = manifest_module.build_manifest(series=series, variant=request.variant, version=version, pin=pin)
        stale = request.force or not up_to_date(request.out_dir / name, manifest)
        if not stale:
            reporter.info(f"{name}: up to date (same upstream wheel and series content)")
        targets.append((pin, request.out_dir / name, manifest, stale))
    sources = {}
    for pin, _, _, stale in targets:
        if stale:
            status = (path := context.upstream.wheel(pin)).stat()
            sources[pin.python_tag] = _zip_source(path, status.st_size, status.st_mtime_ns)
    if sources:
        patches = request.variant.patches(series)
        layouts = [WheelLayout(package_root=series.upstream.package_root, members=frozenset(source.by_name))
                   for source in sources.values()]
        for layout in layouts:
            refuse_compiled(patches, layout)
        changes = OverlayChanges(changes={}, executable=frozenset(), outside=())
        # Without a work tree first (fast, and reused across combinations); the strict
        # work-tree apply when a patch does not apply there, to report why.
        if patches and (fast := patched_changes(context=context, combination=request.variant, layout=layouts[0])):
            changes = fast
        elif patches:
            with scratch_tree(context=context, variant=request.variant, strict=True) as result:
                changed = Git(result.dest).changed_files(result.base_commit, result.head_commit)
                changes = collect_changes(tree=result.dest, changed=changed, layout=layouts[0])
        for outside in changes.outside:
            reporter.detail(f"not in the wheel, left out: {outside}")
    for pin, path, manifest, stale in targets:
        if stale:
            overlay = Overlay(name=series.upstream.name, package=naming.distribution_part(series.upstream.name),
                              version=version, manifest=manifest_module.dumps(manifest), changes=changes.changes,
                              executable=changes.executable)
            with reporter.step(f"Building {path.name} (overlay, {len(changes.changes)} changed files)"):
                source = sources[pin.python_tag]
                install_validated(path, partial(write_overlay, source, overlay), verified_source=source.path)
    return tuple(BuiltWheel(path=path, rebuilt=stale) for _, path, _, stale in targets)


def _build_source(*, context: Context, request: WheelRequest, version: str) -> tuple[BuiltWheel, ...]:
    series, reporter = context.series, context.reporter
    running = f"cp{sys.version_info.major}{sys.version_info.minor}"
    if any(tag != running for tag in request.python_tags):
        raise BuildError(f"source mode builds for the running interpreter ({running}), "
                         f"not {', '.join(request.python_tags)}",
                         hint="run forkbuild with the Python whose wheel you want")
    manifest = manifest_module.build_manifest(series=series, variant=request.variant, version=version, pin=None)
    package = naming.distribution_part(series.upstream.name)
    current = [path for path in sorted(request.out_dir.glob(f"{package}-{version}-*.whl")) if up_to_date(path, manifest)]
    if current and not request.force:
        for path in current:
            reporter.info(f"{path.name}: up to date (same upstream commit and series content)")
        return tuple(BuiltWheel(path=path, rebuilt=False) for path in current)
    with scratch_tree(context=context, variant=request.variant, strict=True) as result, \
            tempfile.TemporaryDirectory(prefix="forkbuild-build-") as scratch:
        epoch = int(Git(result.dest).log1("%ct", result.head_commit))
        with reporter.step(f"python -m build in the patched {series.upstream.name} checkout"):
            built = build_from_checkout(project=result.dest / series.upstream.package_root, out_dir=Path(scratch),
                                        upstream_version=series.upstream.version, epoch=epoch,
                                        isolation=request.isolation, reporter=reporter)
        if built.name.split("-", 1)[0] != package:
            raise BuildError(f"the checkout built {built.name}, not a {series.upstream.name} wheel",
                             hint="[upstream] name in series.toml must be the project's distribution name")
        target = request.out_dir / naming.wheel_filename(name=series.upstream.name, version=version,
                                                         tags=naming.wheel_tags(built.name))
        overlay = Overlay(name=series.upstream.name, package=package, version=version,
                          manifest=manifest_module.dumps(manifest))
        with reporter.step(f"Stamping {target.name}"):
            install_validated(target, partial(write_overlay, ZipSource(built), overlay))
    return (BuiltWheel(path=target, rebuilt=True),)


def build_from_checkout(*, project: Path, out_dir: Path, upstream_version: str, epoch: int,
                        isolation: bool, reporter: Reporter) -> Path:
    """Build one wheel of the project in `project` into `out_dir` and return it."""
    if not any((project / name).is_file() for name in ("pyproject.toml", "setup.py")):
        raise BuildError(f"{project} has no pyproject.toml or setup.py: nothing to build from source",
                         hint="source mode needs a git upstream ([upstream] source = \"git\"); "
                              "a release-wheel upstream builds by overlay")
    if importlib.util.find_spec("build") is None:
        raise ToolMissing("source mode needs the `build` package in forkbuild's environment",
                          hint=f"{sys.executable} -m pip install build")
    command = [sys.executable, "-m", "build", "--wheel", "--outdir", str(out_dir), str(project)]
    if not isolation:
        command.insert(4, "--no-isolation")
    # setuptools-scm cannot read the version in a forkbuild tree: pin it; the epoch fixes zip times.
    env = {"SETUPTOOLS_SCM_PRETEND_VERSION": upstream_version, "SOURCE_DATE_EPOCH": str(epoch)}
    reporter.detail(" ".join(command))
    completed = process.run(command, env=env)
    reporter.detail(completed.stdout + completed.stderr)
    if completed.status != 0:
        tail = "\n".join((completed.stdout + completed.stderr).strip().splitlines()[-20:])
        raise BuildError(f"`python -m build` failed in {project} (exit {completed.status}):\n{tail}")
    built = sorted(out_dir.glob("*.whl"))
    if len(built) != 1:
        raise BuildError(f"`python -m build` in {project} made {len(built)} wheels, expected one: {built}")
    return built[0]
