"""Round trip of the real series: rebase it back onto sglang 0.5.22 keeping what
applies (`--skip` at every conflict), then forward onto 0.5.23 again. Every kept
patch comes back exact or offset with the same added and removed lines, and no
stop is a "not in the cache" one: each conflict left markers in the work tree.

Two real rebases (imports, check of every variant) take minutes on a 2-core
machine: set FORKBUILD_SLOW_TESTS=1 to run it (bench/bench_rebase.py does the
same round trip and keeps its output in bench/results/rebase.txt)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from test_rebase_sglang import NEW, OLD, REPO, shared_cache

from forkbuild.cli import main as cli_main
from forkbuild.errors import RebaseStopped

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not os.environ.get("FORKBUILD_SLOW_TESTS"), reason="slow: FORKBUILD_SLOW_TESTS=1")]


def changed_lines(text: str) -> list[str]:
    """A patch's added and removed lines, in order (no headers, no context, no positions)."""
    return [line for line in text.splitlines()
            if line[:1] in "+-" and not line.startswith(("+++ ", "--- ")) and line != "---"]


def rebase_keeping_what_applies(root: Path, cache: Path, onto: str) -> dict:
    """`forkbuild rebase --onto`, `--skip` at every conflict; the journal's state at each stop is checked."""
    cli = ["-C", str(root), "--cache", str(cache), "rebase"]
    code = cli_main([*cli, "--onto", onto, "--accept-drops"])
    journal = root / ".forkbuild-work" / "rebase-journal" / "state.json"
    while code == RebaseStopped.return_code:
        state = json.loads(journal.read_text())
        stopped = state["patches"][state["cursor"]]
        assert state["phase"] == "conflict", state["phase"]
        assert stopped["conflicts"], stopped  # markers in named files, never "no 3-way possible"
        tree = Path(state["worktree"])
        assert any("<<<<<<<" in (tree / path).read_text(errors="replace") for path in stopped["conflicts"]
                   if (tree / path).is_file())
        code = cli_main([*cli, "--skip"])
    assert code == 0
    start = NEW if onto == OLD else OLD
    return json.loads((root / "build" / "rebase" / f"{start}-to-{onto}.json").read_text())


def test_back_to_0_5_22_keeping_what_applies_then_forward_again(tmp_path: Path) -> None:
    root, cache = tmp_path / "series", shared_cache(tmp_path)
    root.mkdir()
    shutil.copy(REPO / "series.toml", root / "series.toml")
    shutil.copytree(REPO / "patches", root / "patches")
    original = {path.name: path.read_text() for path in (root / "patches").glob("*.patch")}

    back = rebase_keeping_what_applies(root, cache, OLD)
    assert "not in the cache" not in json.dumps(back)
    outcomes = {patch["file"]: patch["outcome"] for patch in back["patches"]}
    assert set(outcomes.values()) <= {"exact", "offset", "3-way", "upstreamed", "skipped"}, outcomes
    kept = [name for name, outcome in outcomes.items() if outcome in ("exact", "offset", "3-way")]
    assert kept, outcomes

    forward = rebase_keeping_what_applies(root, cache, NEW)
    again = {patch["file"]: patch["outcome"] for patch in forward["patches"]}
    assert again == {name: again[name] for name in kept} and set(again.values()) <= {"exact", "offset"}, again
    for name in kept:
        assert changed_lines((root / "patches" / name).read_text()) == changed_lines(original[name]), name
