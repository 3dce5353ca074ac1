"""Bad patches are named as the culprit (the good ones are not blamed), every problem of
the series at once; path safety reads modes and names the way git does, and apply,
check and import run the same check."""

from __future__ import annotations

from pathlib import Path

import pytest

from fixtures import SeriesFixture, write_through_upstream_symlink
from forkbuild.errors import UnsafePatchError
from forkbuild.io.git import Git
from forkbuild.series.edit import quilt_series_text
from forkbuild.series.patchfile import git_mode, safety_problems

APPLY = UnsafePatchError.return_code


def add_patch(fx: SeriesFixture, name: str, text: str, feature: str = "beta") -> None:
    (fx.patches_dir / name).write_text(text)
    with fx.series_toml.open("a") as out:
        out.write(f'\n[[patches]]\nfile = "{name}"\nfeature = "{feature}"\n')


def link_patch(mode_line: str, path: str = "python/outlink") -> str:
    return (f"From 1111111111111111111111111111111111111111 Mon Sep 17 00:00:00 2001\n"
            f"From: Someone <someone@example.com>\nDate: Tue, 14 Nov 2023 22:13:20 +0000\n"
            f"Subject: [PATCH] a link\n\nFeature: beta\n---\n"
            f"diff --git a/{path} b/{path}\n{mode_line}\nindex 0000000..1b4ba8e\n"
            f"--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+/tmp\n\\ No newline at end of file\n")


def output(capsys) -> str:
    captured = capsys.readouterr()
    return " ".join((captured.out + captured.err).split())


@pytest.mark.parametrize("mode", ["120000", "0120000", "120000 ", "00120000", "160000", "0160000 "])
def test_every_spelling_git_reads_as_a_link_or_gitlink_is_refused_by_apply_check_and_import(
        series_fx: SeriesFixture, tmp_path: Path, capsys, mode: str) -> None:
    text = link_patch(f"new file mode {mode}")
    (tmp_path / "quilt").mkdir()
    (tmp_path / "quilt" / "link.patch").write_text(text)
    (tmp_path / "quilt" / "series").write_text("link.patch\n")
    assert series_fx.cli("import", "--quilt", str(tmp_path / "quilt"), "--feature", "beta") == APPLY
    add_patch(series_fx, "link.patch", text)
    assert series_fx.cli("check") == APPLY
    assert series_fx.cli("apply", "--all") == APPLY
    assert "link.patch" in output(capsys)
    assert not (series_fx.root / ".forkbuild-work" / "series" / "python" / "outlink").exists()


def test_git_mode_parsing_follows_git() -> None:
    assert git_mode("100644") == git_mode("0100644") == git_mode(" 100644") == 0o100644
    assert git_mode("100755") == 0o100755
    assert git_mode("120000\t") == 0o120000
    assert git_mode("12x") is None and git_mode("") is None
    assert safety_problems(link_patch("new file mode 100644"))  == []
    # A mode on the index line counts too, and a C-quoted name is unquoted before it is judged.
    assert "creates or changes a symbolic link" in safety_problems(link_patch("new file mode 100644")
                                                                   .replace("index 0000000..1b4ba8e",
                                                                            "index 0000000..1b4ba8e 0120000"))
    quoted = link_patch("new file mode 100644").replace("+++ b/python/outlink", '+++ "b/python/\\056./\\056git/x"')
    assert any("leaves the tree" in problem or ".git" in problem for problem in safety_problems(quoted))


def test_apply_refuses_a_path_through_an_upstream_symlink(git_series_fx: SeriesFixture, capsys) -> None:
    fx = git_series_fx
    write_through_upstream_symlink(fx)
    assert fx.cli("apply", "--all") == APPLY
    assert "goes through the symbolic link python/linked" in output(capsys)


def test_a_rename_out_of_an_upstream_symlink_is_refused_too(git_series_fx: SeriesFixture, capsys) -> None:
    """git is asked about every directory any header names ("rename from" too), not only those of
    the files the diff leaves behind."""
    fx = git_series_fx
    write_through_upstream_symlink(fx)
    (fx.patches_dir / "beta-limit.patch").write_text(
        "From 1111111111111111111111111111111111111111 Mon Sep 17 00:00:00 2001\n"
        "From: Someone <someone@example.com>\nDate: Tue, 14 Nov 2023 22:13:20 +0000\n"
        "Subject: [PATCH] move util\n\nFeature: beta\n---\n"
        "diff --git a/python/linked/util.py b/python/pkg/util2.py\nsimilarity index 100%\n"
        "rename from python/linked/util.py\nrename to python/pkg/util2.py\n")
    assert fx.cli("apply", "--all") == APPLY
    assert "goes through the symbolic link python/linked" in output(capsys)

def test_a_tampered_cache_never_hides_upstreams_symlinks(git_series_fx: SeriesFixture, capsys) -> None:
    """Issue 38: the symlink verdict was read back from a record in the cache; a record rewritten
    to name no link let apply write through python/linked. Every listing the cache keeps is
    emptied here: the verdict is git's, every run."""
    fx = git_series_fx
    write_through_upstream_symlink(fx)
    assert fx.cli("apply", "--all") == APPLY
    base = Git(fx.cache / "upstream.git").out("rev-list", "--max-parents=0", "--all").split()
    for directory in ("forkbuild-symlinks", "forkbuild-trees"):  # what a forkbuild before 38 read from
        (fx.cache / "upstream.git" / directory).mkdir(exist_ok=True)
        for commit in base:
            (fx.cache / "upstream.git" / directory / commit).write_text("[]\n")
    capsys.readouterr()
    assert fx.cli("apply", "--all") == APPLY
    assert "goes through the symbolic link python/linked" in output(capsys)


@pytest.mark.parametrize("bad", ["", "hello, this is not a patch\n", "truncated"])
def test_a_bad_patch_is_named_and_the_good_ones_are_not_blamed(series_fx: SeriesFixture, capsys, bad: str) -> None:
    if bad == "truncated":
        text = (series_fx.patches_dir / "alpha-scale.patch").read_text()
        bad = text[: text.rindex("@@") + 40]
    (series_fx.patches_dir / "alpha-scale.patch").write_text(bad)
    assert series_fx.cli("apply", "--all") == APPLY
    said = output(capsys)
    assert "alpha-scale.patch" in said
    assert "guards.patch" not in said and "beta-limit.patch" not in said


def test_every_problem_of_the_series_is_reported_at_once(series_fx: SeriesFixture, capsys) -> None:
    (series_fx.patches_dir / "guards.patch").write_text("")
    text = (series_fx.patches_dir / "beta-limit.patch").read_text().replace("python/pkg/util.py", "../util.py")
    (series_fx.patches_dir / "beta-limit.patch").write_text(text)
    assert series_fx.cli("check") == APPLY
    said = output(capsys)
    assert "patches/guards.patch: is empty" in said
    assert "patches/beta-limit.patch: ../util.py: leaves the tree" in said


def test_export_check_flags_crlf(series_fx: SeriesFixture, capsys) -> None:
    """A fresh clone (no work tree): `export --check` applies first, and the patch is named for its CRs."""
    (series_fx.patches_dir / "series").write_text(quilt_series_text(spec.file for spec in series_fx.specs))
    path = series_fx.patches_dir / "beta-limit.patch"
    path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))
    assert series_fx.cli("export", "--check") == APPLY
    assert "patches/beta-limit.patch: has CRLF line endings" in output(capsys)


def test_a_byte_order_mark_is_named_for_what_it_is(series_fx: SeriesFixture, capsys) -> None:
    """An editor that saves "UTF-8 with BOM": the first line is no `From ` header to git am."""
    path = series_fx.patches_dir / "beta-limit.patch"
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert series_fx.cli("check") == APPLY
    said = output(capsys)
    assert "patches/beta-limit.patch: starts with a byte-order mark (save it as UTF-8 without one)" in said
    assert "From:" not in said  # the author is there, after the mark


def test_a_patch_that_needs_fuzz_is_reported_as_needing_fuzz(series_fx: SeriesFixture, capsys) -> None:
    """Context changed two lines away from the hunk, index blobs unknown: git would say
    "sha1 information is lacking"; forkbuild says it needs fuzz."""
    path = series_fx.patches_dir / "beta-limit.patch"
    text = path.read_text()
    head, hunks = text.split("diff --git", 1)
    # The first context line of util.py's hunk no longer matches upstream.
    lines = ("diff --git" + hunks).splitlines(keepends=True)
    at = next(index for index, line in enumerate(lines) if line.startswith("@@") and "util" in "".join(lines[max(0, index - 4):index]))
    lines[at + 1] = " # a context line upstream never had\n"
    text = head + "".join(lines)
    text = "\n".join("index 1111111..2222222 100644" if line.startswith("index ") else line for line in text.split("\n"))
    path.write_text(text)
    assert series_fx.cli("apply", "--all") == 4
    said = output(capsys)
    assert "beta-limit.patch" in said and "applies only with fuzz" in said
    assert "sha1 information" not in said
