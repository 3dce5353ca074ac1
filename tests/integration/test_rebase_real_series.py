"""The project's own series rebased backward onto the real sglang 0.5.22 and 0.5.21
wheels, every stop skipped: the rebase finishes with a series `forkbuild check`
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


@pytest.mark.parametrize("onto", ["0.5.22", "0.5.21"])
def test_skip_every_stop_then_check_passes(onto: str, cache: Path, tmp_path: Path, capsys) -> None:
    root = tmp_path / "series"
    root.mkdir()
    shutil.copy(REPO / "series.toml", root / "series.toml")
    shutil.copytree(REPO / "patches", root / "patches")
    before = tomllib.loads((root / "series.toml").read_text())
    cli = ["-C", str(root), "--cache", str(cache), "rebase"]
    code = cli_main([*cli, "--onto", onto, "--accept-drops"])
    stops = 0
    while code == RebaseStopped.return_code:
        stops += 1
        code = cli_main([*cli, "--skip"])
    terminal = capsys.readouterr()
    assert code == 0 and stops > 0

    report = json.loads((root / "build" / "rebase" / f"{before['upstream']['version']}-to-{onto}.json").read_text())
    kept = {patch["feature"] for patch in report["patches"] if patch["new_commit"]}
    lost = {entry["feature"] for entry in before["patches"]} - kept
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
