"""The foundation on the real pinned sglang wheel: fetch (once, cached), apply every
variant strictly, and check the work tree holds exactly the series."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from forkbuild.applier import apply_variant
from forkbuild.upstream.cache import UpstreamCache
from forkbuild.console import Reporter
from forkbuild.context import Context
from forkbuild.series.combination import of_variant
from forkbuild.series.patchfile import read_patch

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def context() -> Context:
    # The repository's own cache: the wheel is downloaded once for every test run and command.
    return Context.create(series_dir=REPO, cache_dir=None, reporter=Reporter())


def test_fetch_is_offline_and_fast_the_second_time(context, monkeypatch):
    cache = UpstreamCache(context.cache_dir, reporter=context.reporter)
    first = cache.ensure(context.series.upstream)
    monkeypatch.setattr("urllib.request.urlopen", lambda *a, **k: pytest.fail("second fetch used the network"))
    start = time.monotonic()
    assert cache.ensure(context.series.upstream) == first
    assert time.monotonic() - start < 1.0
    tree = subprocess.run(["git", "-C", str(cache.repo_path), "ls-tree", "--name-only", first, "python/sglang/"],
                          capture_output=True, text=True, check=True).stdout.split()
    assert "python/sglang/srt" in tree and not any(".dist-info" in name for name in tree)


@pytest.mark.parametrize("variant", ["stock", "tp3", "tp4"])
def test_every_variant_applies_strictly_one_commit_per_patch(context, tmp_path, variant):
    result = apply_variant(context=context, variant=of_variant(context.series, variant), dest=tmp_path / variant)
    entries = context.series.patches_for(variant)
    assert [record.entry.file for record in result.records] == [entry.file for entry in entries]
    assert all(record.outcome in ("exact", "offset") for record in result.records), result.records
    log = subprocess.run(["git", "-C", str(tmp_path / variant), "log", "--format=%an|%s", f"{result.base_commit}..HEAD"],
                         capture_output=True, text=True, check=True).stdout.splitlines()[::-1]
    expected = [f"{info.author.split(' <')[0]}|{info.subject}" for info in map(read_patch, (e.path for e in entries))]
    if entries:  # then the guards of the variant's features, generated from series.toml (never a patch)
        expected.append("forkbuild|forkbuild: the guards of this build, generated from series.toml")
    assert log == expected
