"""forkbuild's git is forkbuild's (issue 47): the user's global and XDG git config and attributes,
git's output-changing environment, a tree's own .gitattributes and an imported contributor's
repository config neither change the patches forkbuild writes nor run a program."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures import SeriesFixture, commit_all, edit
from forkbuild.io.git import Git
from test_import import make_source_range

# What a careless or curious user has in ~/.gitconfig, each of which changed exported bytes.
GLOBAL_CONFIG = """[diff]
\tnoprefix = true
\tcontext = 1
\tmnemonicPrefix = true
\talgorithm = histogram
[format]
\tsignOff = true
\theaders = "X-Extra: 1"
\tto = someone@example.com
\tthread = shallow
\tcoverLetter = true
\tsignature = my signature
[core]
\tquotePath = false
\tfsmonitor = {marker_script}
[i18n]
\tlogOutputEncoding = ISO-8859-1
[log]
\tshowSignature = true
[gpg]
\tprogram = {marker_script}
[filter "evil"]
\tclean = {marker_script}
\tsmudge = {marker_script}
[init]
\ttemplateDir = {template}
"""


def marker_script(directory: Path) -> tuple[Path, Path]:
    """A program that leaves a marker file when anything runs it."""
    marker = directory / "ran"
    script = directory / "program.sh"
    script.write_text(f"#!/bin/sh\ntouch {marker}\ncat\n")
    script.chmod(0o755)
    return script, marker


def hostile_home(tmp_path: Path) -> tuple[dict[str, str], Path]:
    home = tmp_path / "home"
    (home / ".config" / "git").mkdir(parents=True)
    script, marker = marker_script(home)
    template = home / "template"
    (template / "hooks").mkdir(parents=True)
    (template / "hooks" / "post-commit").write_text(f"#!/bin/sh\ntouch {marker}\n")
    (template / "hooks" / "post-commit").chmod(0o755)
    (home / ".gitconfig").write_text(GLOBAL_CONFIG.format(marker_script=script, template=template))
    (home / ".config" / "git" / "attributes").write_text("* -diff filter=evil\n")
    env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"), "GIT_DIFF_OPTS": "-u1",
           "GIT_ICASE_PATHSPECS": "1", "GIT_AUTHOR_NAME": "", "GIT_COMMITTER_DATE": "garbage",
           "GIT_DEFAULT_HASH": "sha256"}
    return env, marker


def forkbuild(fx: SeriesFixture, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "forkbuild", "-C", str(fx.root), "--cache", str(fx.cache), *args],
                          cwd=fx.root, env=env, capture_output=True, text=True, timeout=300)


def patches(fx: SeriesFixture) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(fx.patches_dir.iterdir())}


def test_the_users_git_config_and_environment_change_no_byte_and_run_nothing(series_fx: SeriesFixture, tmp_path):
    assert series_fx.cli("apply", "--all") == 0 and series_fx.cli("export") == 0  # patches/series too
    before = patches(series_fx)
    env, marker = hostile_home(tmp_path)
    for command in (["apply", "--all"], ["export", "--check"], ["export", "--refresh"], ["check"]):
        done = forkbuild(series_fx, *command, env=env)
        assert done.returncode == 0, (command, done.stderr)
    assert patches(series_fx) == before
    assert not marker.exists()  # no fsmonitor, gpg, filter or template hook of the user's ran


def test_a_patch_adding_gitattributes_does_not_turn_exports_binary(series_fx: SeriesFixture):
    assert series_fx.cli("apply", "--all") == 0
    tree = Git(series_fx.root / ".forkbuild-work" / "series")
    (tree.path / "python" / ".gitattributes").write_text("*.py -diff\n")
    edit(tree.path, "python/pkg/core.py", "    return value + 1\n", "    return value + 5\n")
    commit_all(tree, "core: offset by five\n\nFive.\n\nFeature: alpha\n")
    assert series_fx.cli("export") == 0
    text = b"".join(patches(series_fx).values())
    assert b"GIT binary patch" not in text and b"Binary files" not in text
    assert b"+    return value + 5" in text


def test_import_from_a_contributors_repository_runs_none_of_its_programs(series_fx: SeriesFixture, tmp_path):
    repo, start, end = make_source_range(series_fx)
    script, marker = marker_script(tmp_path)
    for key, value in (("log.showSignature", "true"), ("gpg.program", str(script)), ("core.fsmonitor", str(script)),
                       ("core.pager", str(script)), ("diff.external", str(script))):
        repo.run("config", key, value)
    (repo.path / ".gitattributes").write_text("* diff=evil\n")
    repo.run("config", "diff.evil.textconv", str(script))
    # a signed commit: with log.showSignature its gpg.program would verify it
    raw = repo.run("cat-file", "commit", end).stdout
    head, _, body = raw.partition("\n\n")
    signature = "gpgsig -----BEGIN PGP SIGNATURE-----\n \n iQEzBAABCAAdFiEE\n -----END PGP SIGNATURE-----"
    signed = repo.run("hash-object", "-t", "commit", "-w", "--stdin", input=f"{head}\n{signature}\n\n{body}").stdout.strip()
    done = forkbuild(series_fx, "import", "--git-range", str(repo.path), f"{start}..{signed}", "--feature", "alpha",
                     env={**os.environ})
    assert not marker.exists(), done.stderr
    assert done.returncode in (0, 2), done.stderr  # the second commit's feature decides; what matters: nothing ran


@pytest.mark.parametrize("variable", ["GIT_ICASE_PATHSPECS=1", "GIT_COMMITTER_DATE=garbage", "GIT_AUTHOR_NAME=",
                                      "GIT_DEFAULT_HASH=sha256"])
def test_gits_environment_breaks_no_command(series_fx: SeriesFixture, variable: str):
    key, _, value = variable.partition("=")
    assert series_fx.cli("apply", "--all") == 0 and series_fx.cli("export") == 0  # patches/series too
    done = forkbuild(series_fx, "apply", "--all", env={**os.environ, key: value})
    assert done.returncode == 0, done.stderr
    assert forkbuild(series_fx, "export", "--check", env={**os.environ, key: value}).returncode == 0
