"""The cache is untrusted input (a CI cache restored from another run, a shared directory):
what decides safety is computed on every run, never read back from it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fixtures import SeriesFixture
from forkbuild.cli import main as cli_main
from forkbuild.errors import ConfigError, UnsafePatchError, UpstreamError
from forkbuild.io.git import Git

EVIL = ("From 1111111111111111111111111111111111111111 Mon Sep 17 00:00:00 2001\n"
        "From: Someone <someone@example.com>\nDate: Tue, 14 Nov 2023 22:13:20 +0000\n"
        "Subject: [PATCH] a link out of the tree\n\nFeature: beta\n---\n"
        "diff --git a/python/pkg/evil b/python/pkg/evil\nnew file mode 120000\nindex 0000000..1b4ba8e\n"
        "--- /dev/null\n+++ b/python/pkg/evil\n@@ -0,0 +1 @@\n+/etc\n\\ No newline at end of file\n")


def add_patch(fx: SeriesFixture, name: str) -> Path:
    with fx.series_toml.open("a") as out:
        out.write(f'\n[[patches]]\nfile = "{name}"\nfeature = "beta"\n')
    return fx.patches_dir / name


def cache_records(cache: Path) -> list[Path]:
    """Every JSON file forkbuild keeps in the cache (git's own objects and the wheels aside)."""
    found = []
    for path in cache.rglob("*"):
        if path.is_file() and "objects" not in path.parts and path.suffix != ".whl":
            try:
                json.loads(path.read_bytes())
            except ValueError:
                continue
            found.append(path)
    return found


def test_a_cache_record_rewritten_to_no_problems_never_lets_an_unsafe_patch_through(series_fx: SeriesFixture) -> None:
    add_patch(series_fx, "evil.patch").write_text(EVIL)
    assert series_fx.cli("check") == UnsafePatchError.return_code
    for record in cache_records(series_fx.cache):
        if '"problems"' in record.read_text(errors="replace"):
            record.write_text(json.dumps({"problems": []}))
    assert series_fx.cli("check") == UnsafePatchError.return_code
    assert series_fx.cli("apply", "--all") == UnsafePatchError.return_code
    assert not (series_fx.root / ".forkbuild-work" / "series" / "python" / "pkg" / "evil").is_symlink()


def test_a_patch_file_that_is_a_symlink_is_refused_and_its_target_never_copied(series_fx: SeriesFixture,
                                                                              tmp_path: Path, capsys) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text(EVIL.replace("a link out of the tree", "TOP-SECRET-VALUE").replace("120000", "100644"))
    add_patch(series_fx, "linked.patch").symlink_to(secret)
    assert series_fx.cli("check") == ConfigError.return_code
    assert "patches/linked.patch is a symbolic link" in " ".join(capsys.readouterr().err.split())
    assert series_fx.cli("apply", "--all") == ConfigError.return_code
    assert not [path for path in series_fx.cache.rglob("*") if path.is_file() and "objects" not in path.parts
                and b"TOP-SECRET-VALUE" in path.read_bytes()]


def test_a_patches_directory_that_is_a_symlink_is_refused(series_fx: SeriesFixture, tmp_path: Path, capsys) -> None:
    """The series writer would write (a rebase back up and restore) files wherever it points."""
    elsewhere = tmp_path / "elsewhere"
    series_fx.patches_dir.rename(elsewhere)
    series_fx.patches_dir.symlink_to(elsewhere)
    before = sorted(path.name for path in elsewhere.iterdir())
    assert series_fx.cli("check") == ConfigError.return_code
    assert f"{series_fx.patches_dir} is a symbolic link" in " ".join(capsys.readouterr().err.split())
    assert series_fx.cli("apply", "--all") == ConfigError.return_code
    assert series_fx.cli("drop", "beta-limit.patch") == ConfigError.return_code
    assert sorted(path.name for path in elsewhere.iterdir()) == before


def truncate_objects(fx: SeriesFixture, *, kind: str = "") -> None:
    """Cut every loose object of the cache repository (of `kind`: blob, tree, commit; "" = all) in half."""
    repo = fx.cache / "upstream.git"
    for path in (repo / "objects").glob("??/*"):
        sha = path.parent.name + path.name
        if kind and Git(repo).run("cat-file", "-t", sha, check=False).stdout.strip() != kind:
            continue
        data = path.read_bytes()
        path.chmod(0o644)
        path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize("kind", ["", "blob"])
def test_a_damaged_cache_is_named_with_a_hint_and_plain_fetch_notices(series_fx: SeriesFixture, capsys,
                                                                      kind: str) -> None:
    assert series_fx.cli("apply", "--all") == 0
    shutil.rmtree(series_fx.root / ".forkbuild-work")
    truncate_objects(series_fx, kind=kind)
    capsys.readouterr()
    for command, hint in ((["apply", "--all"], "forkbuild fetch --verify"), (["fetch"], "forkbuild fetch --verify"),
                          (["fetch", "--verify"], "git fsck")):
        assert series_fx.cli(*command) == UpstreamError.return_code, command
        said = " ".join(capsys.readouterr().err.split())
        assert "is damaged" in said and hint in said and "aside" in said and "git failed" not in said, said


@pytest.mark.parametrize("step", ["apply:prepared", "apply:applied"])
def test_a_cache_removed_during_apply_is_a_clear_error_and_a_rerun_recovers(series_fx: SeriesFixture, capsys,
                                                                            monkeypatch, step: str) -> None:
    import forkbuild.applier

    assert series_fx.cli("fetch") == 0
    monkeypatch.setattr(forkbuild.applier, "chaos_point",
                        lambda at: shutil.rmtree(series_fx.cache) if at == step else None)
    assert series_fx.cli("apply", "--all", "--dir", str(series_fx.root / "t")) == UpstreamError.return_code
    assert "was removed while forkbuild was using it" in " ".join(capsys.readouterr().err.split())
    monkeypatch.undo()
    shutil.rmtree(series_fx.root / "t", ignore_errors=True)  # its git data went with the cache (the hint says so)
    assert series_fx.cli("apply", "--all", "--dir", str(series_fx.root / "t")) == 0


@pytest.mark.parametrize("option", ["--cache", "-C"])
def test_an_empty_directory_option_is_refused_not_taken_as_the_current_directory(series_fx: SeriesFixture, capsys,
                                                                                  monkeypatch, option: str) -> None:
    monkeypatch.chdir(series_fx.root)
    with pytest.raises(SystemExit) as exited:
        cli_main([option, "", "fetch"])
    assert exited.value.code == 2 and "an empty path names no directory" in capsys.readouterr().err
    assert not (series_fx.root / "upstream.git").exists()


def test_a_wheel_changed_in_place_with_its_size_and_mtime_kept_is_hashed_again(tmp_path: Path) -> None:
    """The verified stamp (what spares build-wheel the hash) cannot vouch for a file written
    after it: the same size, mtime and inode, other bytes, is hashed and fetched again."""
    import hashlib
    import os
    import zipfile

    from forkbuild.series.config import WheelPin
    from forkbuild.upstream.cache import UpstreamCache

    source = tmp_path / "demo-1.0-py3-none-any.whl"
    with zipfile.ZipFile(source, "w") as archive:
        archive.writestr("demo/__init__.py", "x = 1\n")
    pin = WheelPin(python_tag="py3", filename=source.name, sha256=hashlib.sha256(source.read_bytes()).hexdigest(),
                   url=source.as_uri())
    cache = UpstreamCache(tmp_path / "cache")
    cached = cache.wheel(pin)
    before = cached.stat()
    with cached.open("r+b") as handle:  # in place: the inode stays
        handle.write(b"EVIL")
    os.utime(cached, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (cached.stat().st_size, cached.stat().st_mtime_ns, cached.stat().st_ino) == \
        (before.st_size, before.st_mtime_ns, before.st_ino)
    assert hashlib.sha256(cache.wheel(pin).read_bytes()).hexdigest() == pin.sha256


def test_a_moved_upstream_tag_is_refused_by_every_use_and_by_fetch_verify(series_fx: SeriesFixture, capsys) -> None:
    """A poisoned cache: the tag moved to a commit with a payload (fsck-clean). The pin verifies
    what is built from: apply and build-wheel refuse it, and fetch --verify even when the record
    was rewritten along with the tag."""
    assert series_fx.cli("apply", "--all") == 0
    cache = series_fx.cache
    repo = Git(cache / "upstream.git")
    (tag,) = [ref.removeprefix("refs/tags/") for ref in repo.refs() if ref.startswith("refs/tags/upstream/")]
    honest = repo.rev(f"refs/tags/{tag}")
    payload = repo.run("hash-object", "-w", "--stdin", input="payload\n").stdout.strip()
    tree = repo.run("mktree", input=repo.out("ls-tree", honest) + f"\n100644 blob {payload}\tPAYLOAD.py\n").stdout.strip()
    poisoned = repo.out("commit-tree", tree, "-m", "payload", env={"GIT_AUTHOR_DATE": "946684800 +0000",
                                                                  "GIT_COMMITTER_DATE": "946684800 +0000"})
    repo.run("tag", "-f", tag, poisoned)
    repo.run("fsck", "--no-dangling")  # the cache is consistent: only the pin can tell
    capsys.readouterr()
    for command in (["apply", "--all"], ["check"], ["fetch"]):
        assert series_fx.cli(*command) == UpstreamError.return_code, command
        err = capsys.readouterr().err
        assert f"its tag {tag} names {poisoned[:12]}" in err and "move" in err and str(cache) in err
    record = cache / "verified.json"
    record.write_text(json.dumps({tag: poisoned}))  # the record rewritten with the tag
    assert series_fx.cli("fetch", "--verify") == UpstreamError.return_code
    assert f"the verified pkg 1.0 is {honest[:12]}" in capsys.readouterr().err


def test_with_a_moved_tag_export_still_saves_the_work_and_the_hint_recovers(series_fx: SeriesFixture, capsys) -> None:
    assert series_fx.cli("apply", "--all") == 0
    repo = Git(series_fx.cache / "upstream.git")
    (tag,) = [ref.removeprefix("refs/tags/") for ref in repo.refs() if ref.startswith("refs/tags/upstream/")]
    honest = repo.rev(f"refs/tags/{tag}")
    repo.run("tag", "-f", tag, repo.out("commit-tree", repo.out("rev-parse", f"{honest}^{{tree}}"), "-m", "moved"))
    assert series_fx.cli("export") == 0  # the tree is compared with the verified import, not the tag
    assert series_fx.cli("apply", "--all") == UpstreamError.return_code
    assert "move" in capsys.readouterr().err
    # the hint, followed: move the cache and the work trees aside, fetch: everything works again
    shutil.move(series_fx.cache, series_fx.root.parent / "cache.aside")
    shutil.move(series_fx.root / ".forkbuild-work", series_fx.root.parent / "work.aside")
    assert series_fx.cli("fetch") == 0 and series_fx.cli("apply", "--all") == 0
    assert series_fx.cli("export", "--check") == 0
