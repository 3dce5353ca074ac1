"""The names of the files and folders forkbuild keeps in a series directory."""

from __future__ import annotations

from pathlib import Path

SERIES_FILE = "series.toml"
PATCHES_DIR = "patches"
WORK_DIR = ".forkbuild-work"  # forkbuild's own work trees, journals and set-aside files (git-ignored)
SERIES_TREE = Path(WORK_DIR) / "series"  # the full-series work tree that export reads
REBASE_TREE = Path(WORK_DIR) / "rebase"
REBASE_JOURNAL = Path(WORK_DIR) / "rebase-journal"  # a rebase in progress: state.json and the backup
DROPPED_DIR = Path(WORK_DIR) / "dropped"  # patches export/drop set aside, one folder a run
# `forkbuild new`'s variants for a feature without a patch yet (<feature>.variants, one a line): export adds it
# to them with its first patch (series.toml holds it `ported = false` until then: every variant builds as checked)
NEW_DIR = Path(WORK_DIR) / "new"
DIST_DIR = "dist"  # built wheels
BUILD_DIR = "build"  # reports
DOCKER_DIR = "docker"  # the image's Dockerfile and context


def new_variants(root: Path, feature: str) -> Path:
    """Where `forkbuild new` keeps the variants a feature without a patch joins with its first one."""
    return root / NEW_DIR / f"{feature}.variants"
