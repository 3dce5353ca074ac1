"""status: patches with feature, guards, files and +/-; variants with their features; --json."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures import SeriesFixture, commit_all
from forkbuild.commands.status import series_status
from forkbuild.errors import ApplyError, RebaseStopped
from forkbuild.io.git import Git
from forkbuild.series.config import load_series
from rebase_fixtures import CONFLICT_CHANGES, LADDER_CHANGES, NEW_VERSION, move_pin, rebase_args, release, run_killed


def test_patches_and_variants(series_fx: SeriesFixture) -> None:
    status = series_status(series_fx.load())
    patches = {patch["file"]: patch for patch in status["patches"]}
    assert list(patches) == ["guards.patch", "alpha-scale.patch", "beta-limit.patch"]
    alpha = patches["alpha-scale.patch"]
    assert alpha["feature"] == "alpha" and alpha["guards"] == ["DSV41_ALPHA"] == alpha["guard_trailers"]
    assert alpha["files"] == ["python/pkg/core.py", "python/pkg/environ.py"]
    assert (alpha["added"], alpha["removed"]) == (3, 0)
    assert alpha["variants"] == ["full"]
    assert patches["beta-limit.patch"]["variants"] == ["full", "lite"]
    assert patches["guards.patch"]["guards"] == [] and patches["guards.patch"]["upstream"] == "local"
    variants = {variant["name"]: variant for variant in status["variants"]}
    assert variants["lite"]["features"] == ["guards", "beta"]
    assert variants["lite"]["patches"] == ["guards.patch", "beta-limit.patch"]
    assert variants["full"]["env"] == {"DSV41_ALPHA": "1"}
    assert variants["stock"]["patches"] == []


def test_json_on_stdout(series_fx: SeriesFixture, capsys: pytest.CaptureFixture[str]) -> None:
    assert series_fx.cli("status", "--json") == 0
    data = json.loads(capsys.readouterr().out)
    assert data["upstream"]["version"] == "1.0"
    assert [patch["file"] for patch in data["patches"]] == ["guards.patch", "alpha-scale.patch", "beta-limit.patch"]
    assert data["patches"][2]["removed"] == 0 and data["patches"][2]["added"] == 3
    assert {variant["name"]: variant["features"] for variant in data["variants"]}["lite"] == ["guards", "beta"]


def test_tables(series_fx: SeriesFixture, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    assert series_fx.cli("status") == 0
    out = capsys.readouterr().out
    assert "alpha-scale.patch" in out and "DSV41_BETA" in out and "lite" in out


def test_a_feature_that_lost_its_last_patch_is_listed_as_not_ported(series_fx: SeriesFixture,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert series_status(series_fx.load())["unported"] == []
    assert series_fx.cli("drop", "beta-limit.patch") == 0
    assert series_status(series_fx.load())["unported"] == ["beta"]
    capsys.readouterr()
    assert series_fx.cli("status") == 0
    assert ("no patch on 1.0 (`ported = false`: in no variant until `forkbuild export` writes one; `forkbuild new "
            "FEATURE` starts it): beta") in \
        " ".join(capsys.readouterr().out.split())


REPO = Path(__file__).resolve().parents[2]


def _status_output(*args: str, columns: str | None = None) -> str:
    """`forkbuild status` on the project's own series, stdout a pipe (as `| less`)."""
    env = {key: value for key, value in os.environ.items() if key != "COLUMNS"}
    if columns:
        env["COLUMNS"] = columns
    done = subprocess.run([sys.executable, "-m", "forkbuild", "-C", str(REPO), "status", *args],
                          capture_output=True, text=True, env=env, check=True)
    return done.stdout


def test_status_piped_fits_80_columns_and_wraps_no_name():
    out = _status_output()
    lines = out.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 80
    series = load_series(REPO / "series.toml")
    words = {word for line in lines for word in line.split()}
    for entry in series.patches:
        assert entry.file in words, f"{entry.file} is cut or wrapped"
        assert entry.feature in words or f"{entry.feature}:" in words
    for guard in series.all_guards():
        first = series.features[guard.feature].guards[0].env
        assert (guard.env if guard.env == first else guard.env.removeprefix(first)) in words


def test_status_wide_shows_every_file_whole():
    out = _status_output("--wide", columns="80")
    series = load_series(REPO / "series.toml")
    root = series.upstream.package_root + "/"
    for patch in series_status(series)["patches"]:
        for path in patch["files"]:
            assert path.removeprefix(root) in out
        for guard in patch["guards"]:
            assert guard in out
    for variant in series.variants.values():
        for key, value in variant.env.items():
            assert f"{key}={value}" in out


def _in_progress(fx: SeriesFixture, capsys: pytest.CaptureFixture[str]) -> list[dict]:
    capsys.readouterr()
    assert fx.cli("status", "--json") == 0
    return json.loads(capsys.readouterr().out)["in_progress"]


def test_a_stopped_rebase_is_named_with_its_patch_and_what_goes_on(git_series_fx: SeriesFixture,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    fx = git_series_fx
    assert _in_progress(fx, capsys) == []
    assert fx.cli(*rebase_args(release(fx, CONFLICT_CHANGES))) == RebaseStopped.return_code
    [item] = _in_progress(fx, capsys)
    assert (item["command"], item["phase"], item["patch"], item["position"], item["onto"]) == (
        "rebase", "conflict", "alpha-scale.patch", [2, 3], NEW_VERSION)
    assert "`forkbuild rebase --continue`" in item["next"] and "`--abort`" in item["next"]
    assert fx.cli("status") == 0
    assert "rebase in progress: onto 2.0, stopped at alpha-scale.patch (2 of 3)" in capsys.readouterr().out
    assert fx.cli("rebase", "--abort") == 0  # the hint's way out
    assert _in_progress(fx, capsys) == []


def test_a_stopped_apply_is_named_with_its_patch_and_what_goes_on(git_series_fx: SeriesFixture,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    fx = git_series_fx
    assert fx.cli("apply", "--all") == 0
    move_pin(fx, release(fx, CONFLICT_CHANGES))
    assert fx.cli("apply", "--all") == ApplyError.return_code
    [item] = _in_progress(fx, capsys)
    assert (item["command"], item["patch"], item["position"]) == ("apply", "alpha-scale.patch", [2, 3])
    command = item["next"].split("`")[3]  # forkbuild apply --continue --dir <tree>
    assert command.startswith("forkbuild apply --continue --dir ")
    assert fx.cli("apply", "--abort", "--dir", shlex.split(command)[-1]) == 0
    assert _in_progress(fx, capsys) == []


def test_a_value_with_a_terminal_escape_is_shown_not_sent(series_fx: SeriesFixture,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    # A variant's env value reaches status --wide's table: its ESC is written out, not obeyed.
    text = series_fx.series_toml.read_text()
    series_fx.series_toml.write_text(text.replace('env = { DSV41_ALPHA = "1" }',
                                                  'env = { DSV41_ALPHA = "1", NOTE = "a\\u001b]0;owned\\u0007b" }'))
    capsys.readouterr()
    assert series_fx.cli("status", "--wide") == 0
    out = capsys.readouterr().out
    assert "NOTE=a\\x1b]0;ownedb" in out and "\x1b" not in out


def test_a_rebase_a_kill_interrupted_says_how_far_it_got_and_goes_on(git_series_fx: SeriesFixture,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    fx = git_series_fx
    assert fx.cli("fetch") == 0
    killed = run_killed(fx, rebase_args(release(fx, LADDER_CHANGES)), step="replayed")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    [item] = _in_progress(fx, capsys)
    assert (item["phase"], item["patch"], item["position"]) == ("replayed", "", [3, 3])
    assert item["state"] == "onto 2.0, interrupted (replayed; 3 of 3 patches replayed)"
    assert item["next"].startswith("`forkbuild rebase --continue` goes on")
    assert fx.cli("rebase", "--continue") == 0  # the hint, followed
    assert _in_progress(fx, capsys) == []


def test_the_series_tree_ahead_of_or_behind_patches_says_which_command_brings_them_together(
        series_fx: SeriesFixture, capsys: pytest.CaptureFixture[str]) -> None:
    fx = series_fx
    assert fx.cli("apply", "--all") == 0
    assert _in_progress(fx, capsys) == []
    tree = fx.root / ".forkbuild-work" / "series"
    (tree / "python/pkg/util.py").write_text((tree / "python/pkg/util.py").read_text() + "# tuned\n")
    commit_all(Git(tree), "util: say it is tuned\n\nFeature: beta\nForwarded: no")
    [item] = _in_progress(fx, capsys)
    assert (item["command"], item["phase"], item["ahead"], item["changed"]) == ("series tree", "ahead", 1, [])
    assert item["next"].startswith("`forkbuild export`")
    assert fx.cli("export") == 0  # the hint, followed
    assert _in_progress(fx, capsys) == []
    # A patch file edited by hand: the tree is behind patches/.
    patch = fx.patches_dir / "beta-limit.patch"
    patch.write_text(patch.read_text().replace("util: lower the limit", "util: lower the ceiling", 1))
    [item] = _in_progress(fx, capsys)
    assert (item["phase"], item["ahead"], item["changed"]) == ("behind", 0, ["beta-limit.patch"])
    assert fx.cli("apply", "--all") == 0  # the hint, followed
    assert _in_progress(fx, capsys) == []
