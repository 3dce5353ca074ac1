"""`forkbuild release` on a fixture index (PEP 691 JSON over HTTP) that lists a newer fixture
release: `latest` finds it, the rebase moves the series, every variant's wheel is built and its
test-patch run on the new release, and build/release/<old>-to-<new>.md/.json is written; with the
series on the newest release, `latest` says so and exits 0."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from fixtures import commit_spec, http_server, make_upstream_repo
from forkbuild.cli import main as cli_main
from forkbuild.io.chaos import CHAOS_ENV
from test_testpatch import ALPHA, BETA, GUARDS, SERIES_TOML, UPSTREAM, write_feature_tests

REPO = Path(__file__).resolve().parents[2]
# 1.1 adds a module constant above the code the features change: alpha's and beta's hunks move.
NEWER = {**UPSTREAM, "python/sglang/core.py": UPSTREAM["python/sglang/core.py"].replace(
    '"""The code the features change."""\n', '"""The code the features change."""\n\nRELEASE = "1.1"\n')}


def wheel(directory: Path, version: str, files: dict[str, str]) -> Path:
    contents = {name.removeprefix("python/"): text.encode() for name, text in files.items()}
    dist_info = f"sglang-{version}.dist-info"
    contents[f"{dist_info}/METADATA"] = f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n".encode()
    contents[f"{dist_info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    rows = "".join(f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode().rstrip('=')},"
                   f"{len(data)}\n" for name, data in contents.items())
    contents[f"{dist_info}/RECORD"] = (rows + f"{dist_info}/RECORD,,\n").encode()
    path = directory / f"sglang-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in contents.items():
            archive.writestr(zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0)), data)
    return path


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """An index listing sglang 1.0 and 1.1: (its URL, {version: wheel})."""
    files = tmp_path / "index"
    files.mkdir()
    wheels = {"1.0": wheel(files, "1.0", UPSTREAM), "1.1": wheel(files, "1.1", NEWER)}
    listing = {"files": [{"filename": path.name, "url": path.as_uri(),
                          "hashes": {"sha256": hashlib.sha256(path.read_bytes()).hexdigest()}} for path in wheels.values()]}

    page = json.dumps(listing).encode()
    kind = {"Content-Type": "application/vnd.pypi.simple.v1+json"}
    with http_server(lambda path: (200, kind, page) if path.rstrip("/") == "/simple/sglang" else (404, {}, b"")) \
            as base:
        monkeypatch.setenv("FORKBUILD_INDEX_URL", f"{base}/simple")
        yield wheels


def series(tmp_path: Path, wheels: dict[str, Path]) -> Path:
    repo, commit = make_upstream_repo(tmp_path / "upstream", UPSTREAM)
    root = tmp_path / "series"
    (root / "patches").mkdir(parents=True)
    repo.run("checkout", "--quiet", "-b", "series")
    for spec in (GUARDS, ALPHA, BETA):
        (root / "patches" / spec.file).write_text(repo.format_patch(commit_spec(repo, spec)))
    entries = "".join(f'\n[[patches]]\nfile = "{spec.file}"\nfeature = "{spec.feature}"\n' for spec in (ALPHA, BETA))
    text = SERIES_TOML.format(repo=repo.path, commit=commit, patches=entries, beta_default="0")
    pinned = wheels["1.0"]
    sha = hashlib.sha256(pinned.read_bytes()).hexdigest()
    text = text.replace('source = "git"\n', 'source = "wheel"\n').replace(
        "\n[features.guards]", f'\n[[upstream.wheels]]\npython_tag = "py3"\nfilename = "{pinned.name}"\n'
                               f'sha256 = "{sha}"\nurl = "{pinned.as_uri()}"\n\n[features.guards]', 1)
    (root / "series.toml").write_text(text)
    write_feature_tests(root)
    return root


def test_release_latest_rebases_builds_tests_and_reports(tmp_path: Path, index, capsys) -> None:
    root = series(tmp_path, index)
    cli = ["-C", str(root), "--cache", str(tmp_path / "cache")]
    assert cli_main([*cli, "check"]) == 0
    assert cli_main([*cli, "release", "latest", "--non-interactive", "--from-tree"]) == 0, capsys.readouterr().err
    assert tomllib.loads((root / "series.toml").read_text())["upstream"]["version"] == "1.1"
    report = json.loads((root / "build" / "release" / "1.0-to-1.1.json").read_text())
    assert report["ok"] and report["finished"]
    assert {patch["file"]: patch["outcome"] for patch in report["patches"]} == {
        "guards.patch": "exact", "alpha.patch": "offset", "beta.patch": "offset"}
    assert all(patch["tests"] == "passed" and patch["provenance"] == {"forwarded": "no"} for patch in report["patches"])
    assert {proof["variant"] for proof in report["proof"]} == {"full", "stock"}
    assert all(len(proof["wheels"]) == 1 and not proof["failed"] for proof in report["proof"])
    assert (root / "dist").is_dir() and any((root / "dist").glob("sglang-1.1+full.*.whl"))
    md = (root / "build" / "release" / "1.0-to-1.1.md").read_text()
    assert md.startswith("# sglang 1.0 -> 1.1") and "| 2 | `alpha.patch` | alpha | offset |" in md
    # Killed during its proof (or its last stop settled with `rebase --continue`/`--skip`), run again: the
    # series is on 1.1; the proof is owed, and the report is the rebase's, from 1.0, with what became of each patch.
    (root / "build" / "release" / "1.0-to-1.1.json").unlink()
    assert cli_main([*cli, "release", "1.1", "--from-tree"]) == 0
    again = json.loads((root / "build" / "release" / "1.0-to-1.1.json").read_text())
    assert again["ok"] and again["from"] == "1.0" and not (root / "build" / "release" / "1.1-to-1.1.json").exists()
    assert {patch["file"]: patch["outcome"] for patch in again["patches"]} == {
        "guards.patch": "exact", "alpha.patch": "offset", "beta.patch": "offset"}
    # Without the rebase's report: proved against the release alone.
    for path in (root / "build" / "rebase").iterdir():
        path.unlink()
    assert cli_main([*cli, "release", "1.1", "--from-tree"]) == 0
    alone = json.loads((root / "build" / "release" / "1.1-to-1.1.json").read_text())
    assert alone["ok"] and {patch["outcome"] for patch in alone["patches"]} == {"on the release"}
    assert all(patch["tests"] == "passed" for patch in alone["patches"])
    capsys.readouterr()
    assert cli_main([*cli, "release", "latest"]) == 0  # on the newest: nothing to do
    assert "sglang 1.1 is the newest release the index lists: nothing to do" in capsys.readouterr().err


def test_release_goes_on_only_with_the_rebase_in_progress(tmp_path: Path, index, capsys, monkeypatch) -> None:
    """Before, `release VERSION` went on with whatever rebase was stopped (here onto 1.1, asked for 1.0)
    and reported it as 1.0-to-1.0."""
    root = series(tmp_path, index)
    cli = ["-C", str(root), "--cache", str(tmp_path / "cache")]
    killed = subprocess.run([sys.executable, "-m", "forkbuild", *cli, "rebase", "--onto", "1.1"],
                            env={**os.environ, CHAOS_ENV: "rebase:applying:alpha.patch"}, capture_output=True, timeout=300)
    assert killed.returncode == -9 and (root / ".forkbuild-work" / "rebase-journal").is_dir()
    before = (root / "series.toml").read_bytes()
    capsys.readouterr()
    assert cli_main([*cli, "release", "1.0", "--from-tree"]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "a rebase onto 1.1 is in progress, not onto 1.0" in err and "`forkbuild release 1.1` goes on with it" in err
    assert (root / "series.toml").read_bytes() == before and not (root / "build" / "release").exists()
    # `latest` is the release the stopped rebase moves to (not looked up again: the index is gone).
    monkeypatch.setenv("FORKBUILD_INDEX_URL", "http://127.0.0.1:9/simple")
    assert cli_main([*cli, "release", "latest", "--non-interactive", "--from-tree"]) == 0, capsys.readouterr().err
    assert tomllib.loads((root / "series.toml").read_text())["upstream"]["version"] == "1.1"
    assert json.loads((root / "build" / "release" / "1.0-to-1.1.json").read_text())["ok"]


WORKFLOW = REPO / ".github" / "workflows" / "release-watch.yml"


def test_the_release_watch_validates_and_runs_the_command_tested_above() -> None:
    # GitHub's workflow schema, vendored in check-jsonschema: no network.
    done = subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows",
                           str(WORKFLOW)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    text = WORKFLOW.read_text()
    assert 'nox -s release -- "$TARGET" --non-interactive' in text and "schedule:" in text and "workflow_dispatch:" in text
    noxfile = (REPO / "noxfile.py").read_text()
    session = noxfile[noxfile.index('@nox.session(name="release"'):].split("\n\n\n")[0]
    assert '"-m", "forkbuild", "release", *session.posargs' in session  # the command the test above runs


def test_the_report_names_a_porter_rung_only_where_the_port_went_in(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from forkbuild.commands.release import document
    from forkbuild.rebase.journal import PatchState, Phase, RebaseState
    from forkbuild.rebase.porter import HunkPort
    from forkbuild.series.config import Upstream
    from forkbuild.worktree.engine import Outcome

    placed = (HunkPort(file="a.py", hunk=1, status="ported", rung="context-2"),
              HunkPort(file="a.py", hunk=2, status="failed", checks="no rung places it"))
    upstream = Upstream(name="sglang", version="1.1", package_root="python", source="wheel", git=None, wheels=())
    state = RebaseState(id="", phase=Phase.DONE, step="", worktree=tmp_path, accept_drops=False, old=upstream,
                        target=upstream, patches=(
                            PatchState(file="kept.patch", feature="f", outcome=Outcome.PORTED, commit="c1",
                                       port=placed[:1]),
                            PatchState(file="left.patch", feature="g", outcome=Outcome.SKIPPED, port=placed)))
    report = document(SimpleNamespace(series=SimpleNamespace(patches_dir=tmp_path)), state, old="1.0", new="1.1",
                      proofs=None)
    assert [(patch["file"], patch["rung"]) for patch in report["patches"]] == [
        ("kept.patch", "context-2"), ("left.patch", "skipped")]  # the half-placed, skipped one: not a rung
