"""The project's own series rebased backward onto the real sglang 0.5.22 and 0.5.21
wheels, the porter's verified ports accepted and every other stop skipped: the rebase finishes with a series `forkbuild check`
accepts, and its report and terminal summary name every feature left without a patch
(docs/rebase.md: `ported = false`, out of the variants, declaration and guards kept)."""

from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path

import pytest

from forkbuild.cli import main as cli_main
from forkbuild.errors import RebaseStopped
from forkbuild.io.git import Git
from forkbuild.rebase.porter import IMPORT_LINE, places, undefined_names
from forkbuild.series.patchfile import file_diffs

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private cache whose wheels/ is the repository's: each wheel is downloaded once, ever."""
    cache = tmp_path_factory.mktemp("real-series") / "cache"
    shared = REPO / ".cache" / "forkbuild" / "wheels"
    shared.mkdir(parents=True, exist_ok=True)
    cache.mkdir()
    (cache / "wheels").symlink_to(shared)
    return cache


KEPT = {"0.5.22": 9, "0.5.21": 7}  # of 16: git's rungs alone keep 5 on each


@pytest.mark.parametrize("onto", ["0.5.22", "0.5.21"])
def test_port_then_skip_every_stop_then_check_passes(onto: str, cache: Path, tmp_path: Path, capsys) -> None:
    """With --accept-ported --accept-moot nothing is done by hand: the porter keeps at least KEPT[onto]
    patches, every ported hunk sits in the class/function it sat in on 0.5.23, and no ported module has an
    undefined name the release's module lacks; the rest is skipped and reported."""
    root = tmp_path / "series"
    root.mkdir()
    shutil.copy(REPO / "series.toml", root / "series.toml")
    shutil.copytree(REPO / "patches", root / "patches")
    before = tomllib.loads((root / "series.toml").read_text())
    cli = ["-C", str(root), "--cache", str(cache), "rebase"]
    code = cli_main([*cli, "--onto", onto, "--accept-drops", "--accept-ported", "--accept-moot"])
    stops = 0
    while code == RebaseStopped.return_code:
        stops += 1
        code = cli_main([*cli, "--skip"])
    terminal = capsys.readouterr()
    assert code == 0 and stops > 0

    report = json.loads((root / "build" / "rebase" / f"{before['upstream']['version']}-to-{onto}.json").read_text())
    kept = [patch for patch in report["patches"] if patch["new_commit"]]
    assert len(kept) >= KEPT[onto], [patch["file"] for patch in kept]
    ported = [patch for patch in kept if patch["outcome"] == "ported"]
    assert ported
    repo = Git(cache / "upstream.git")
    for patch in ported:
        old_diff, new_diff = (repo.diff_tree_patch(patch[key]) for key in ("old_commit", "new_commit"))
        new_files = {diff.path: diff for diff in file_diffs(new_diff)}
        for old in file_diffs(old_diff):
            if not old.path.endswith(".py") or old.path not in new_files:
                continue  # a moot file, left out with --accept-moot
            old_text = repo.show_file(patch["old_commit"], old.path)
            new_text = repo.show_file(patch["new_commit"], old.path)
            parent = f"{patch['new_commit']}^"
            release = repo.file_at(parent, old.path) or ""  # a file it creates
            # Same places: where its added lines sit on 0.5.23 and on the new release.
            old_places = places(old_text, [n for hunk in old.hunks for n in _code(hunk)])
            new_places = places(new_text, [n for hunk in new_files[old.path].hunks for n in _code(hunk)])
            assert new_places is not None and new_places <= (old_places or set()), (patch["file"], old.path, new_places)
            assert undefined_names(new_text, old.path) <= undefined_names(release, old.path), (patch["file"], old.path)
    lost = {entry["feature"] for entry in before["patches"]} - {patch["feature"] for patch in kept}
    assert lost
    said = " ".join((terminal.out + terminal.err).split())
    for feature in lost:
        line = f"feature {feature} has no patch left"
        assert any(item.startswith(line) for item in report["unported"]) and line in said
    after = tomllib.loads((root / "series.toml").read_text())
    for feature in lost:
        assert after["features"][feature]["ported"] is False
        assert after["features"][feature]["guards"] == before["features"][feature].get("guards", [])
        assert all(feature not in variant["features"] for variant in after["variants"].values())
    assert set(after["features"]) == set(before["features"])  # no declaration deleted
    assert cli_main(["-C", str(root), "--cache", str(cache), "check"]) == 0


def _code(hunk) -> list[int]:
    """The added lines of `hunk` that are code (imports go where imports go)."""
    lines = [text for kind, text in hunk.lines if kind == "+"]
    return [number for number, text in zip(hunk.added_at(), lines, strict=True)
            if text.strip() and not IMPORT_LINE.match(text)]
