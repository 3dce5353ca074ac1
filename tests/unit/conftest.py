"""Shared unit-test fixtures: tiny series in tmp_path (see fixtures.py), no network,
git isolated from the user's configuration."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fixtures import SeriesFixture, make_series


@pytest.fixture(autouse=True)
def isolated_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cache in tmp_path and git without the user's or system's config."""
    monkeypatch.setenv("FORKBUILD_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        monkeypatch.delenv(name, raising=False)
    for name in [name for name in os.environ if name.startswith("DSV41_")]:
        monkeypatch.delenv(name)


@pytest.fixture
def series_fx(tmp_path: Path) -> SeriesFixture:
    """The default fixture series; upstream imported from a wheel (file:// URL)."""
    return make_series(tmp_path)


@pytest.fixture
def git_series_fx(tmp_path: Path) -> SeriesFixture:
    """The default fixture series; upstream fetched from a local git repository."""
    return make_series(tmp_path, source="git")
