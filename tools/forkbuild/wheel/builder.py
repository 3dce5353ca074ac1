"""Build a variant's wheels: keep what is up to date, apply the patches once, validate each
wheel before it is moved into place. A git upstream builds by `python -m build` (source mode)."""

from __future__ import annotations

import functools
import hashlib
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

from forkbuild.applier import scratch_tree
from forkbuild.console import Reporter
from forkbuild.context import Context
from forkbuild.errors import BuildError, ToolMissing
from forkbuild.io import process
from forkbuild.io.chaos import chaos_point
from forkbuild.io.fsutil import write_atomic
from forkbuild.io.git import Git
from forkbuild.series.combination import COMBO_LABEL, Combination
from forkbuild.series.config import Series, WheelPin, native_platform
from forkbuild.upstream.cache import sha256_of
from forkbuild.wheel import manifest as manifest_module
from forkbuild.wheel import naming
from forkbuild.wheel.manifest import Manifest
from forkbuild.wheel.overlay import Overlay, write_overlay
from forkbuild.wheel.plan import OverlayChanges, WheelLayout, collect_changes, patched_changes, refuse_compiled
from forkbuild.wheel.validate import PinnedWheel, validate_wheel
from forkbuild.wheel.zipraw import ZipSource

MODES = ("overlay", "source")


@dataclass(frozen=True, kw_only=True)
class WheelRequest:
    variant: Combination  # what to build, resolved once by the caller
    out_dir: Path
    python_tags: tuple[str, ...] = ()  # empty: every pinned tag (overlay), the running interpreter (source)
    platforms: tuple[str, ...] = ()  # empty: the combination's (overlay), the running machine's (source)
    mode: str = ""  # empty: overlay for a release-wheel upstream, source for a git upstream
    force: bool = False
    isolation: bool = True  # source mode: build in an isolated environment (python -m build's default)


@dataclass(frozen=True, kw_only=True)
class BuiltWheel:
    path: Path
    rebuilt: bool


def variant_version(series: Series, combination: Combination, content_hash: str | None = None) -> str:
    """`<upstream>+<variant>.<hash>`; a combination that is no named variant: `<upstream>+combo.<hash>`."""
    label = combination.name if combination.is_variant else COMBO_LABEL
    return naming.local_version(upstream_version=series.upstream.version, variant=label,
                                content_hash=content_hash or combination.content_hash(series))


def build_wheels(*, context: Context, request: WheelRequest) -> tuple[BuiltWheel, ...]:
    series, upstream = context.series, context.series.upstream
    content_hash = request.variant.content_hash(series)  # once a build: every wheel's version and manifest
    version = variant_version(series, request.variant, content_hash)
    manifest = manifest_module.build_manifest(series=series, variant=request.variant, version=version,
                                              content_hash=content_hash)
    if (request.mode or ("overlay" if upstream.source == "wheel" else "source")) == "source":
        return _build_source(context=context, request=request, manifest=manifest)
    if not upstream.wheels:
        raise BuildError("overlay mode starts from a release wheel, and series.toml pins none",
                         hint="add [[upstream.wheels]] pins, or build with --mode source")
    return _build_overlay(context=context, request=request, manifest=manifest)


def digest_file(wheel: Path) -> Path:
    """`<wheel>.sha256`: the sha256 of the wheel as built and validated (a wheel changed since: rebuilt)."""
    return wheel.with_name(wheel.name + ".sha256")


def up_to_date(target: Path, manifest: Manifest) -> bool:
    """Whether `target` is the wheel forkbuild built and validated (its bytes, by the sha256 written
    beside it) and carries exactly the manifest a rebuild would write (same upstream, series content,
    version and patches); an unreadable or changed wheel is rebuilt."""
    try:
        recorded = digest_file(target).read_text(errors="replace").split()[0] if digest_file(target).is_file() else ""
        if not target.is_file() or not recorded or sha256_of(target) != recorded:
            return False
        return manifest_module.read_wheel(target) == manifest
    except (BuildError, OSError, IndexError):
        return False


def install_validated(target: Path, write: Callable[[BinaryIO], None], *,
                      verified_source: PinnedWheel | None = None) -> None:
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
        digest = f"{sha256_of(temporary)}  {target.name}\n"  # sha256sum's format: `sha256sum -c` reads it
        digest_file(target).unlink(missing_ok=True)  # a kill between the two renames: rebuilt next time
        os.replace(temporary, target)
        write_atomic(digest_file(target), digest)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@functools.lru_cache(maxsize=4)
def _zip_source(path: Path, size: int, mtime_ns: int) -> ZipSource:
    """The release wheel, read and indexed once per process (a matrix builds many wheels from it)."""
    return ZipSource(path)


def _pins(series: Series, request: WheelRequest) -> list[WheelPin]:
    """The release wheels to overlay: per platform, each requested (else pinned) Python tag."""
    upstream = series.upstream
    pins = []
    for platform in dict.fromkeys(request.platforms or request.variant.platforms or upstream.platforms):
        tags = request.python_tags or upstream.python_tags(platform)
        pins += [upstream.wheel_for(tag, platform) for tag in dict.fromkeys(tags)]
    return list(dict.fromkeys(pins))  # a pure wheel's pin serves every platform: once


def _build_overlay(*, context: Context, request: WheelRequest, manifest: Manifest) -> tuple[BuiltWheel, ...]:
    series, reporter, version = context.series, context.reporter, manifest.version
    targets = []
    for pin in _pins(series, request):
        name = naming.wheel_filename(name=series.upstream.name, version=version, tags=naming.wheel_tags(pin.filename))
        made_from = manifest.from_pin(pin)
        stale = request.force or not up_to_date(request.out_dir / name, made_from)
        if not stale:
            reporter.info(f"{name}: up to date (same upstream wheel and series content)")
        targets.append((pin, request.out_dir / name, made_from, stale))
    sources = {}
    for pin, _, _, stale in targets:
        if stale:
            status = (path := context.upstream.wheel(pin)).stat()
            sources[pin] = _zip_source(path, status.st_size, status.st_mtime_ns)
    if sources:
        # One plan for every platform and Python tag: the patched files are the same in each.
        changes = _changes(context=context, combination=request.variant, sources=list(sources.values()))
    for pin, path, made_from, stale in targets:
        if stale:
            overlay = Overlay(name=series.upstream.name, package=naming.distribution_part(series.upstream.name),
                              version=version, manifest=manifest_module.dumps(made_from), changes=changes.changes,
                              executable=changes.executable)
            with reporter.step(f"Building {path.name} (overlay, {len(changes.changes)} changed files)"):
                source = sources[pin]
                install_validated(path, partial(write_overlay, source, overlay),
                                  verified_source=PinnedWheel(path=source.path, sha256=pin.sha256))
    return tuple(BuiltWheel(path=path, rebuilt=stale) for _, path, _, stale in targets)


def _changes(*, context: Context, combination: Combination, sources: list[ZipSource]) -> OverlayChanges:
    series = context.series
    patches = combination.patches(series)
    layouts = [WheelLayout(package_root=series.upstream.package_root, members=frozenset(source.by_name))
               for source in sources]
    for layout in layouts:
        refuse_compiled(patches, layout)
    changes = OverlayChanges(changes={}, executable=frozenset(), outside=())
    # Without a work tree first (fast, and reused across combinations); the strict
    # work-tree apply when a patch does not apply there, to report why.
    if patches and (fast := patched_changes(context=context, combination=combination, layout=layouts[0])):
        changes = fast
    elif patches:
        with scratch_tree(context=context, variant=combination, strict=True) as result:
            changed = Git(result.dest).changed_files(result.base_commit, result.head_commit)
            changes = collect_changes(tree=result.dest, changed=changed, layout=layouts[0])
    root = f"{series.upstream.package_root.strip('/')}/" if series.upstream.package_root.strip("/") else ""
    # Under package_root, a path no package of the wheel holds is a new top-level package or module:
    # the wheel would silently lack it. Outside package_root (upstream's tests, docs): not the wheel's.
    if missing := [path for path in changes.outside if path.startswith(root)]:
        raise BuildError(f"the series adds {', '.join(missing[:5])}, outside the release wheel's packages "
                         f"({', '.join(sorted(layouts[0].packages))}): the overlay wheel would leave it out",
                         hint="put it inside an existing package, or build from source (--mode source)")
    for outside in changes.outside:
        context.reporter.detail(f"not in the wheel, left out: {outside}")
    _refuse_other_originals(context=context, sources=sources, members=[m for m in changes.changes if m])
    return changes


def _refuse_other_originals(*, context: Context, sources: list[ZipSource], members: list[str]) -> None:
    """The patched files were made from upstream as imported (the first pin): each release wheel
    they are laid on must hold exactly those originals (the .py files of every architecture's
    wheel are the same; a wheel where one differs would get another platform's file)."""
    if not members:
        return
    upstream = context.series.upstream
    prefix = f"{upstream.package_root.strip('/')}/" if upstream.package_root.strip("/") else ""
    commit = context.upstream.ensure(upstream)
    originals = context.upstream.git().tree_entries(commit, [prefix + member for member in members])
    for source in sources:
        differ = [member for member in members if member in source.by_name
                  and (entry := originals.get(prefix + member)) and entry.blob != _blob_id(source.read(member), entry.blob)]
        if differ:
            raise BuildError(f"{source.path.name}: {len(differ)} file(s) the series changes differ from upstream as "
                             f"imported (from {upstream.wheels[0].filename}): {', '.join(differ[:5])}",
                             hint="the patched files of one release wheel cannot be laid on another whose originals "
                                  "differ: build that platform with --mode source, or pin matching wheels")


def _blob_id(content: bytes, like: str) -> str:
    """git's object id of a blob holding `content`, in the hash of `like` (sha1 or sha256)."""
    algorithm = hashlib.sha256 if len(like) == 64 else hashlib.sha1
    return algorithm(b"blob %d\0" % len(content) + content).hexdigest()


def _build_source(*, context: Context, request: WheelRequest, manifest: Manifest) -> tuple[BuiltWheel, ...]:
    series, reporter, version = context.series, context.reporter, manifest.version
    running = f"cp{sys.version_info.major}{sys.version_info.minor}"
    if any(tag != running for tag in request.python_tags):
        raise BuildError(f"source mode builds for the running interpreter ({running}), "
                         f"not {', '.join(request.python_tags)}",
                         hint="run forkbuild with the Python whose wheel you want")
    if any(platform != native_platform() for platform in request.platforms):
        raise BuildError(f"source mode builds for this machine ({native_platform()}), "
                         f"not {', '.join(request.platforms)}",
                         hint="run the source build on a machine of that platform")
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
