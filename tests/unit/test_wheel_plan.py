"""Which changes the overlay makes, and the refusal of compiled sources."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from forkbuild.errors import BuildError
from forkbuild.series.config import PatchEntry
from forkbuild.wheel.plan import WheelLayout, collect_changes, refuse_compiled
from wheelkit import DEMO_FILES, layout, make_patch

LAYOUT = WheelLayout(package_root="python", members=frozenset(
    [*DEMO_FILES, "demo/", "demo/_ext.cpython-311-x86_64-linux-gnu.so", "demo-1.0.dist-info/RECORD"]))


def entry(tmp_path: Path, name: str, edits: dict[str, bytes | None]) -> PatchEntry:
    base = {**layout(DEMO_FILES), "rust/src/lib.rs": b"fn main() {}\n", "python/pyproject.toml": b"[project]\n"}
    text = make_patch(tmp_path / f"work-{name}", base=base, edits=edits, subject=f"demo: {name}", feature="f")
    path = tmp_path / f"{name}.patch"
    path.write_text(text)
    return PatchEntry(file=path.name, feature="f", path=path)


@pytest.mark.parametrize("path", [
    "rust/src/lib.rs",                 # the Rust source of a .so
    "python/pyproject.toml",           # the build configuration
    "python/demo/_ext.cpp",            # a C++ source next to no shipped C++ file
])
def test_compiled_sources_are_refused_naming_the_patch(tmp_path, path):
    patches = [entry(tmp_path, "harmless", {"python/demo/core.py": b"x = 1\n"}),
               entry(tmp_path, "native", {path: b"// changed\n"})]
    with pytest.raises(BuildError) as caught:
        refuse_compiled(patches, LAYOUT)
    assert f"patches/native.patch: {path}" in caught.value.message
    assert "harmless" not in caught.value.message
    assert "--mode source" in caught.value.hint


def test_sources_the_wheel_ships_as_data_are_overlaid(tmp_path):
    # JIT kernels: the wheel ships .cu files, so changing one or adding one beside it is fine.
    patches = [entry(tmp_path, "jit", {"python/demo/kernels/gemm.cu": b"// faster\n",
                                       "python/demo/kernels/new.cu": b"// new\n",
                                       "docs/notes.md": b"outside the wheel\n"})]
    refuse_compiled(patches, LAYOUT)


def test_collect_changes_maps_git_paths_to_members(tmp_path):
    tree = tmp_path / "tree"
    (tree / "python/demo").mkdir(parents=True)
    (tree / "python/demo/core.py").write_bytes(b"new\n")
    (tree / "python/demo/run.sh").write_bytes(b"#!/bin/sh\n")
    os.chmod(tree / "python/demo/run.sh", 0o755)
    changed = [("M", "python/demo/core.py"), ("A", "python/demo/run.sh"), ("D", "python/demo/extra.py"),
               ("M", "docs/index.md"), ("A", "python/setup_helpers/x.py")]
    result = collect_changes(tree=tree, changed=changed, layout=LAYOUT)
    assert result.changes == {"demo/core.py": b"new\n", "demo/run.sh": b"#!/bin/sh\n", "demo/extra.py": None}
    assert result.executable == {"demo/run.sh"}
    assert result.outside == ("docs/index.md", "python/setup_helpers/x.py")
