"""What an overlay build writes, from the patches and the release wheel's members; refused
where a patch changes what the wheel holds compiled. `package_root` maps upstream's git
layout (`python/sglang/x.py`) to the wheel's (`sglang/x.py`)."""

from __future__ import annotations

import functools
import posixpath
import stat
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from forkbuild.applier import apply_in_index, plan_variant
from forkbuild.context import Context
from forkbuild.errors import BuildError
from forkbuild.series.combination import Combination
from forkbuild.series.config import PatchEntry
from forkbuild.series.patchfile import read_patch

# Sources of compiled extensions and their build files: the wheel holds only the built .so.
COMPILED_SUFFIXES = frozenset({".rs", ".c", ".cc", ".cpp", ".cxx", ".cu", ".cuh", ".h", ".hh", ".hpp",
                               ".hxx", ".pyx", ".pxd"})
BUILD_FILES = frozenset({"Cargo.toml", "Cargo.lock", "build.rs", "CMakeLists.txt", "setup.py", "setup.cfg",
                         "pyproject.toml"})


@dataclass(frozen=True, kw_only=True)
class WheelLayout:
    """Which repository paths a release wheel holds, and under which member names."""

    package_root: str
    members: frozenset[str]

    @functools.cached_property
    def packages(self) -> frozenset[str]:
        """Top-level directories of the wheel that are not metadata."""
        tops = {name.split("/", 1)[0] for name in self.members if "/" in name}
        return frozenset(top for top in tops if not top.endswith((".dist-info", ".data")))

    def member_for(self, repo_path: str) -> str | None:
        """The wheel member of a repository path; None when the wheel holds no such package."""
        prefix = f"{self.package_root.strip('/')}/" if self.package_root.strip("/") else ""
        if not repo_path.startswith(prefix):
            return None
        member = repo_path[len(prefix):]
        return member if member.split("/", 1)[0] in self.packages else None

    def is_compiled(self, repo_path: str) -> bool:
        path = PurePosixPath(repo_path)
        member = self.member_for(repo_path)
        if member is None:
            return path.suffix in COMPILED_SUFFIXES or path.name in BUILD_FILES
        # A source the wheel ships as data (JIT kernels), or one beside such files, is not compiled.
        directory = posixpath.dirname(member)
        return path.suffix in COMPILED_SUFFIXES and member not in self.members and not any(
            posixpath.dirname(name) == directory and name.endswith(path.suffix) for name in self.members)


def refuse_compiled(patches: Iterable[PatchEntry], layout: WheelLayout) -> None:
    """Raise BuildError naming each patch that changes a compiled source or build file."""
    found = [(entry.file, change.path) for entry in patches for change in read_patch(entry.path).files
             if layout.is_compiled(change.path)]
    if found:
        lines = "\n".join(f"  - patches/{patch}: {path}" for patch, path in found)
        raise BuildError(
            f"the overlay build cannot apply these changes: the release wheel holds them compiled or built\n{lines}",
            hint="build from source instead: set [upstream] source = \"git\" (url + commit) in series.toml "
                 "and run `forkbuild build-wheel --mode source` on a machine with the toolchain")


@dataclass(frozen=True, kw_only=True)
class OverlayChanges:
    """Wheel members to write (content) or delete (None), and files the wheel does not hold."""

    changes: Mapping[str, bytes | None]
    executable: frozenset[str]
    outside: tuple[str, ...]


def collect_changes(*, tree: Path | None = None, changed: Iterable[tuple[str, str]], layout: WheelLayout,
                    read: Callable[[str], tuple[bytes, bool]] | None = None) -> OverlayChanges:
    """The changed files (git's (status, path) pairs), read from the patched work tree `tree`,
    or through `read` (path -> content, executable)."""
    changes: dict[str, bytes | None] = {}
    executable, outside = set(), []
    for status, repo_path in changed:
        member = layout.member_for(repo_path)
        if member is None:
            outside.append(repo_path)
        elif status == "D":
            changes[member] = None
        else:
            if read is None:
                assert tree is not None  # one of the two is given
                file = tree / repo_path
                changes[member] = file.read_bytes()
                is_executable = bool(file.stat().st_mode & stat.S_IXUSR)
            else:
                changes[member], is_executable = read(repo_path)
            if is_executable:
                executable.add(member)
    return OverlayChanges(changes=changes, executable=frozenset(executable), outside=tuple(sorted(outside)))


def patched_changes(*, context: Context, combination: Combination, layout: WheelLayout) -> OverlayChanges | None:
    """The changes from the cache's blobs; None when a patch does not apply without a work tree."""
    applied = apply_in_index(context=context, plan=plan_variant(context.series, combination))
    if applied is None:
        return None
    git = context.upstream.git()
    changed = git.changed_blobs(*applied)
    blobs = {path: (blob, mode == "100755") for _, path, mode, blob in changed}
    return collect_changes(changed=[(status, path) for status, path, _, _ in changed], layout=layout,
                           read=lambda path: (git.blob_content(blobs[path][0]), blobs[path][1]))
