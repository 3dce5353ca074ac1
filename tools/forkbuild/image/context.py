"""A variant's build context (build/image/<variant>/): everything an image
build reads, so builds run with --network none and compose/bake can use it.

  Dockerfile           docker/Dockerfile + the variant's ENV/LABEL/check lines
  entrypoint.sh        docker/entrypoint.sh
  forkbuild_runtime/   forkbuild.image.runtime (runs inside the image)
  wheels/              the variant's patched wheel(s), one per Python tag
  upstream/<tag>.RECORD  RECORD of each pinned stock wheel (delta's base check)
"""

from __future__ import annotations

import os
import shutil
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from forkbuild import manifest as manifest_module
from forkbuild import naming
from forkbuild.errors import BuildError
from forkbuild.image import dockerfile
from forkbuild.manifest import Manifest

RUNTIME_PACKAGE = Path(__file__).parent / "runtime"


@dataclass(frozen=True, kw_only=True)
class ImageContext:
    path: Path
    manifest: Manifest

    @property
    def variant(self) -> str:
        return self.manifest.variant

    @property
    def version(self) -> str:
        return self.manifest.version

    @property
    def upstream_version(self) -> str:
        return self.manifest.upstream.version


def python_tag(wheel: Path) -> str:
    return naming.wheel_tags(wheel.name).split("-", 1)[0]


def wheels_manifest(wheels: Sequence[Path], *, variant: str) -> Manifest:
    """The one manifest the variant's wheels share (they differ only by Python tag)."""
    if not wheels:
        raise BuildError(f"no wheel to build the {variant} image from")
    manifests = []
    for wheel in wheels:
        found = manifest_module.read_wheel(wheel)
        if found is None:
            raise BuildError(f"{wheel}: no forkbuild manifest in its .dist-info: not a forkbuild build")
        if found.variant != variant:
            raise BuildError(f"{wheel}: built for variant {found.variant!r}, not {variant!r}")
        manifests.append(found.without_upstream())
    if any(other != manifests[0] for other in manifests[1:]):
        raise BuildError(f"the {variant} wheels given do not share one manifest: {', '.join(w.name for w in wheels)}")
    tags = [python_tag(wheel) for wheel in wheels]
    if len(set(tags)) != len(tags):
        raise BuildError(f"two {variant} wheels for the same Python tag: {', '.join(w.name for w in wheels)}")
    first = manifest_module.read_wheel(wheels[0])
    assert first is not None  # every wheel was checked for its manifest above
    return first


def upstream_record(wheel: Path) -> bytes:
    with zipfile.ZipFile(wheel) as archive:
        records = [name for name in archive.namelist() if name.count("/") == 1 and name.endswith(".dist-info/RECORD")]
        if len(records) != 1:
            raise BuildError(f"{wheel}: expected one .dist-info/RECORD, found {records}")
        return archive.read(records[0])


def prepare(*, docker_dir: Path, variant: str, wheels: Sequence[Path], upstream_wheels: Mapping[str, Path],
            dest: Path) -> ImageContext:
    """Write the build context to `dest` (replaced as a whole, never half-written)."""
    manifest = wheels_manifest(wheels, variant=variant)
    template = (docker_dir / "Dockerfile").read_text()
    dest.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}-"))
    try:
        (work / "Dockerfile").write_text(dockerfile.render(template, manifest, source=wheels[0].name))
        shutil.copy2(docker_dir / "entrypoint.sh", work / "entrypoint.sh")
        shutil.copytree(RUNTIME_PACKAGE, work / "forkbuild_runtime",
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        (work / "wheels").mkdir()
        for wheel in wheels:
            link_or_copy(wheel, work / "wheels" / wheel.name)
        (work / "upstream").mkdir()
        for tag, wheel in sorted(upstream_wheels.items()):
            (work / "upstream" / f"{tag}.RECORD").write_bytes(upstream_record(wheel))
        _replace_dir(work, dest)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return ImageContext(path=dest, manifest=manifest)


def _replace_dir(new: Path, dest: Path) -> None:
    old = None
    if dest.exists():
        old = dest.with_name(f".{dest.name}-old-{os.getpid()}")
        os.replace(dest, old)
    os.replace(new, dest)
    if old is not None:
        shutil.rmtree(old)


def link_or_copy(source: Path, target: Path) -> None:
    """A hard link when on the same file system (wheels are 39 MB), else a copy."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)
