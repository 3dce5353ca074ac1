"""import --quilt of real-world shapes: each test is a minimal patch of one shape
seen in Debian's debian/patches, imported through the CLI, then

- the tree import checks out and the tree `apply --all` makes from the written
  files hold what GNU patch makes of it (checked against `quilt push -a` too,
  when quilt is installed),
- `export --check` is clean right after (import -> export is a fixed point),
- the report names what was normalised or skipped.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from fixtures import cli_main, make_quilt_project
from forkbuild.applier import apply_variant
from forkbuild.console import Reporter
from forkbuild.context import Context
from forkbuild.errors import ApplyError, ConfigError
from forkbuild.exporter import export_series
from forkbuild.io.git import Git
from forkbuild.quiltimport import QuiltImport, import_quilt
from forkbuild.series.combination import whole_series
from forkbuild.series.config import load_series
from forkbuild.series.dep3 import git_am_subject, parse_dep3
from forkbuild.series.patchfile import read_patch

QUILT = shutil.which("quilt")
UPSTREAM = {
    "a.txt": b"".join(b"line %d\n" % number for number in range(1, 21)),
    "m.c": b"int main(void)\n{\n\treturn 0;\n}\n",
    "o.txt": b"one\ntwo\nthree\n",
    "logo.png": b"\x89PNG\r\n\x1a\n\x00\x00binary",
    "dos.txt": b"first\r\nsecond\r\nthird\r\n",
}


class Project:
    """An upstream tree (with debian/ beside it), its git upstream, a forkbuild project."""

    def __init__(self, tmp_path: Path, patches: dict[str, bytes], *, series: str | None = None,
                 empty_dirs: tuple[str, ...] = (), extra: dict[str, bytes] | None = None) -> None:
        self.src = tmp_path / "src"
        for name, data in {**UPSTREAM, **(extra or {})}.items():
            (self.src / name).parent.mkdir(parents=True, exist_ok=True)
            (self.src / name).write_bytes(data)
        for directory in empty_dirs:
            (self.src / directory).mkdir(parents=True)
        self.root = make_quilt_project(self.src, tmp_path)  # upstream: the tree without debian/
        self.quilt_dir = self.src / "debian" / "patches"
        self.quilt_dir.mkdir(parents=True)
        (self.src / "debian" / "control").write_text("Source: fixture\n")
        for name, data in patches.items():
            (self.quilt_dir / name).parent.mkdir(parents=True, exist_ok=True)
            (self.quilt_dir / name).write_bytes(data)
        (self.quilt_dir / "series").write_text(series if series is not None else "".join(f"{name}\n" for name in patches))
        self.tmp_path = tmp_path

    def context(self) -> Context:
        return Context(series_dir=self.root, cache_dir=Path(os.environ["FORKBUILD_CACHE"]), reporter=Reporter())

    def import_(self) -> QuiltImport:
        return import_quilt(context=self.context(), directory=self.quilt_dir, feature="debian")

    def cli_import(self, capsys: pytest.CaptureFixture[str]) -> str:
        capsys.readouterr()
        assert cli_main(["-C", str(self.root), "import", "--quilt", str(self.quilt_dir), "--feature", "debian"]) == 0
        return capsys.readouterr().err

    def round_trip(self) -> Path:
        """apply --all from the written files into a fresh tree; export --check must be clean."""
        context = Context(series_dir=self.root, cache_dir=Path(os.environ["FORKBUILD_CACHE"]), reporter=Reporter())
        tree = self.tmp_path / "applied"
        apply_variant(context=context, variant=whole_series(context.series), dest=tree)
        export_series(context=context, tree=tree, check=True)
        return tree

    def quilt_push(self) -> Path | None:
        """`quilt push -a` on a copy of the upstream tree (None without quilt), with GNU patch's
        -E as `dpkg-source -x` gives it (a file left empty is removed)."""
        if QUILT is None:
            return None
        dest = self.tmp_path / "quilt-tree"
        shutil.copytree(self.src, dest, symlinks=True)
        result = subprocess.run([QUILT, "--quiltrc=-", "push", "-a"], cwd=dest, capture_output=True, text=True,
                                env={**os.environ, "QUILT_PATCHES": "debian/patches", "QUILT_PATCH_OPTS": "-E"})
        assert result.returncode == 0, result.stdout + result.stderr
        return dest

    def assert_like_quilt(self, tree: Path, paths: list[str]) -> None:
        quilt_tree = self.quilt_push()
        if quilt_tree is None:
            return
        for path in paths:
            assert (tree / path).exists() == (quilt_tree / path).exists(), path
            if (tree / path).is_file():
                assert (tree / path).read_bytes() == (quilt_tree / path).read_bytes(), path


def notes_of(result: QuiltImport, source: str) -> str:
    return "\n".join(next(outcome.notes for outcome in result.patches if outcome.source == source))


A_TXT_HUNK = b"""\
--- a/a.txt
+++ b/a.txt
@@ -2,3 +2,3 @@
 line 2
-line 3
+line three
 line 4
"""


def test_binary_stub_is_skipped_and_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    patch = b"""\
Description: new logo and text
Author: Some One <one@example.com>

diff --git a/a.txt b/a.txt
index 1111111..2222222 100644
""" + A_TXT_HUNK + b"""\
diff --git a/logo.png b/logo.png
index 3333333..4444444 100644
Binary files a/logo.png and b/logo.png differ
"""
    project = Project(tmp_path, {"logo.patch": patch})
    output = project.cli_import(capsys)
    assert "binary diff of logo.png skipped" in output
    tree = project.round_trip()
    assert b"line three\n" in (tree / "a.txt").read_bytes()
    assert (tree / "logo.png").read_bytes() == UPSTREAM["logo.png"]
    project.assert_like_quilt(tree, ["a.txt", "logo.png"])


def test_zero_context_hunks_apply_at_their_line(tmp_path: Path) -> None:
    patch = b"""\
Description: made with diff -U0

--- a/a.txt
+++ b/a.txt
@@ -5,0 +6,2 @@
+inserted one
+inserted two
@@ -10 +12 @@
-line 10
+line ten
"""
    project = Project(tmp_path, {"zero.diff": patch})
    result = project.import_()
    assert "--unidiff-zero" in notes_of(result, "zero.diff")
    tree = project.round_trip()
    lines = (tree / "a.txt").read_text().splitlines()
    assert lines[4:7] == ["line 5", "inserted one", "inserted two"] and lines[11] == "line ten"
    project.assert_like_quilt(tree, ["a.txt"])


def test_git_header_and_rename_header_over_disagreeing_names_follow_the_minus_plus_lines(tmp_path: Path) -> None:
    # A git header naming one file over ---/+++ lines naming another (grub2's
    # gcc12_build_dangling_pointer.patch), and a rename header over ---/+++ lines of one file.
    mkimage = b"""\
Description: ---/+++ disagree
diff --git a/m.c b/m.c
index 1111111..2222222 100644
--- a/m\t2022-12-11 15:41:56.717934782 +0000
+++ b/m.c\t2022-12-11 15:43:05.318432532 +0000
@@ -1,4 +1,4 @@
 int main(void)
 {
-\treturn 0;
+\treturn 1;
 }
"""
    rename = b"""\
Description: a rename header quilt ignores
diff --git a/o.txt b/n.txt
similarity index 80%
rename from o.txt
rename to n.txt
--- a/o.txt
+++ b/o.txt
@@ -1,3 +1,3 @@
 one
-two
+TWO
 three
"""
    project = Project(tmp_path, {"mkimage.patch": mkimage, "rename.patch": rename})
    result = project.import_()
    assert "patched m.c, the one that exists" in notes_of(result, "mkimage.patch")
    assert "followed ---/+++" in notes_of(result, "rename.patch")
    tree = project.round_trip()
    assert b"return 1;" in (tree / "m.c").read_bytes()
    assert (tree / "o.txt").read_bytes() == b"one\nTWO\nthree\n" and not (tree / "n.txt").exists()
    project.assert_like_quilt(tree, ["m.c", "o.txt", "n.txt", "m"])


def test_a_rename_header_written_inside_a_subdirectory_is_normalised(tmp_path: Path) -> None:
    # `git diff` run inside sub/ with --relative for the rename lines only (the shape of
    # issue 36's Debian patch): git apply says "inconsistent old filename"; GNU patch
    # (quilt, dpkg-source -x) goes by the diff --git and ---/+++ names and renames sub/o.txt.
    rename = b"""\
Description: a rename written inside sub/
diff --git a/sub/o.txt b/sub/n.txt
similarity index 80%
rename from o.txt
rename to n.txt
index 1111111..2222222 100644
--- a/sub/o.txt
+++ b/sub/n.txt
@@ -1,3 +1,3 @@
 one
-two
+TWO
 three
"""
    project = Project(tmp_path, {"rename.patch": rename}, extra={"sub/o.txt": b"one\ntwo\nthree\n"})
    result = project.import_()
    assert "git rename/copy lines disagree with ---/+++ sub/o.txt -> sub/n.txt" in notes_of(result, "rename.patch")
    tree = project.round_trip()
    assert (tree / "sub/n.txt").read_bytes() == b"one\nTWO\nthree\n" and not (tree / "sub/o.txt").exists()
    project.assert_like_quilt(tree, ["sub/o.txt", "sub/n.txt"])


def test_latin1_description_is_decoded_with_the_stated_fallback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    patch = b"Description: caf\xe9 au lait\n Long line with \xfc.\nAuthor: Jos\xe9 Garc\xeda <jose@example.com>\n\n" + A_TXT_HUNK
    project = Project(tmp_path, {"latin1.patch": patch})
    output = project.cli_import(capsys)
    assert "decoded as Latin-1" in output
    info = read_patch(project.root / "patches" / "latin1.patch")
    assert info.subject == "café au lait" and info.author == "José García <jose@example.com>"
    assert "Long line with ü." in info.message
    project.round_trip()


def test_pasted_mbox_from_line_in_a_description_does_not_split_the_patch(tmp_path: Path) -> None:
    patch = b"""\
Subject: take the fix from upstream
From: Up Stream <up@example.com>
Date: Wed, 01 May 2024 10:00:00 +0000

Cherry-picked; the original mail started with:

From 0123456789abcdef0123456789abcdef01234567 Mon Sep 17 00:00:00 2001
and went on.
---
""" + A_TXT_HUNK
    project = Project(tmp_path, {"pasted.patch": patch})
    result = project.import_()
    assert "a mail boundary" in notes_of(result, "pasted.patch")
    written = (project.root / "patches" / "pasted.patch").read_text()
    assert written.count("\nFrom ") == 0 and " From 0123456789abcdef" in written
    tree = project.round_trip()  # git am of the written file: one commit, the hunk applied
    assert Git(tree).log1("%B").startswith("take the fix from upstream\n\nCherry-picked")


def test_format_patch_mail_and_dep3_patch_prefix_round_trip(tmp_path: Path) -> None:
    mail = b"""\
From 0123456789abcdef0123456789abcdef01234567 Mon Sep 17 00:00:00 2001
From: =?UTF-8?q?Ren=C3=A9=20Mail?= <rene@example.com>
Date: Thu, 2 May 2024 11:00:00 +0200
Subject: [PATCH 2/7] mkimage: fix
 the folded subject

The body.

Signed-off-by: Rene Mail <rene@example.com>
---
 a.txt | 2 +-
 1 file changed, 1 insertion(+), 1 deletion(-)

diff --git a/a.txt b/a.txt
index 1111111..2222222 100644
""" + A_TXT_HUNK + b"-- \n2.39.5\n\n"
    dep3 = b"""\
Description: [PATCH] o: capitals
Author: D E P <dep@example.com>
Forwarded: not-needed
Bug-Debian: https://bugs.debian.org/1

--- a/o.txt
+++ b/o.txt
@@ -1,3 +1,3 @@
-one
+ONE
 two
 three
"""
    project = Project(tmp_path, {"0002-mkimage-fix.patch": mail, "dep3.patch": dep3})
    result = project.import_()
    assert "format-patch mail" in notes_of(result, "0002-mkimage-fix.patch")
    assert "'[PATCH] o: capitals' -> 'o: capitals'" in notes_of(result, "dep3.patch")
    info = read_patch(project.root / "patches" / "0002-mkimage-fix.patch")
    assert (info.subject, info.author) == ("mkimage: fix the folded subject", "René Mail <rene@example.com>")
    assert info.date == "Thu, 2 May 2024 11:00:00 +0200"
    # No Forwarded: in the source: DEP-3's default, said (`forkbuild check` needs it).
    assert info.trailers == (("Signed-off-by", "Rene Mail <rene@example.com>"), ("Forwarded", "no"), ("Feature", "debian"))
    dep3_info = read_patch(project.root / "patches" / "dep3.patch")
    assert dep3_info.subject == "o: capitals"
    assert dep3_info.trailers == (("Forwarded", "not-needed"), ("Bug-Debian", "https://bugs.debian.org/1"),
                                  ("Feature", "debian"))
    tree = project.round_trip()
    assert [Git(tree).log1("%s", f"HEAD~{n}") for n in (1, 0)] == ["mkimage: fix the folded subject", "o: capitals"]


def test_crlf_file_keeps_its_carriage_returns(tmp_path: Path) -> None:
    patch = b"Description: a DOS file\n\n--- a/dos.txt\n+++ b/dos.txt\n@@ -1,3 +1,3 @@\n first\r\n-second\r\n+SECOND\r\n third\r\n"
    project = Project(tmp_path, {"dos.patch": patch})
    project.import_()
    assert (project.root / ".forkbuild-work" / "series" / "dos.txt").read_bytes() == b"first\r\nSECOND\r\nthird\r\n"
    tree = project.round_trip()  # git am of the written file must keep the CRs (am.keepcr)
    assert (tree / "dos.txt").read_bytes() == b"first\r\nSECOND\r\nthird\r\n"
    project.assert_like_quilt(tree, ["dos.txt"])


def test_empty_upstream_directories_are_reported_and_recreated(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    project = Project(tmp_path, {"a.patch": b"Description: a\n\n" + A_TXT_HUNK}, empty_dirs=("empty/deep", "spool"))
    output = project.cli_import(capsys)
    assert "2 empty upstream director(ies)" in output
    assert load_series(project.root / "series.toml").upstream.empty_dirs == ("empty/deep", "spool")
    assert (project.root / ".forkbuild-work" / "series" / "empty" / "deep").is_dir()
    tree = project.round_trip()
    assert (tree / "empty" / "deep").is_dir() and (tree / "spool").is_dir()


def test_empty_patch_is_skipped_and_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project = Project(tmp_path, {"empty.patch": b"", "a.patch": b"Description: a\n\n" + A_TXT_HUNK})
    output = project.cli_import(capsys)
    assert "(not imported)" in output and "changes nothing" in output
    assert [line for line in (project.root / "patches" / "series").read_text().splitlines()
            if not line.startswith("#")] == ["a.patch"]
    project.round_trip()


def test_patches_in_subdirectories_with_the_same_stem_get_distinct_names(tmp_path: Path) -> None:
    one = b"Description: one\n\n" + A_TXT_HUNK
    two = b"Description: two\n\n--- a/o.txt\n+++ b/o.txt\n@@ -1,3 +1,3 @@\n-one\n+1\n two\n three\n"
    project = Project(tmp_path, {"fixes/x.patch": one, "features/x.patch": two})
    result = project.import_()
    assert [outcome.file for outcome in result.patches] == ["fixes-x.patch", "features-x.patch"]
    project.round_trip()


@pytest.mark.parametrize("subject", ["[PATCH] fix", "[PATCH v2 3/7] fix it", "Re: [PATCH] fix", "[RFC] fix",
                                     "[RFC PATCH] fix", "re: re: fix", ": fix", "[foo] [PATCH] fix", "fix [PATCH]",
                                     "[PATCH]fix", "Revert \"x\""])
def test_subject_cleanup_is_what_git_mailinfo_does(tmp_path: Path, subject: str) -> None:
    repo = Git.init(tmp_path / "repo")
    mail = tmp_path / "mail"
    mail.write_text(f"From: A <a@example.com>\nSubject: {subject}\n\nbody\n")
    result = subprocess.run(["git", "-C", str(repo.path), "mailinfo", "-b", str(tmp_path / "msg"), str(tmp_path / "patch")],
                            stdin=mail.open(), capture_output=True, text=True, check=True)
    expected = next(line.removeprefix("Subject: ") for line in result.stdout.splitlines() if line.startswith("Subject: "))
    assert git_am_subject(subject) == expected


def test_a_description_line_git_would_cut_at_is_indented() -> None:
    # " ---" is a DEP-3 continuation line; unindented, git am would end the message there.
    header = parse_dep3(b"Description: subject\n first\n ---\n more\n\n--- a/a.txt\n", fallback_subject="x")
    assert header.body == "first\n ---\nmore"
    assert any("the diff start" in note for note in header.notes)


def test_a_git_section_cut_short_of_its_hunks_is_skipped(tmp_path: Path) -> None:
    # exim4's 75_58 patch: the test/ hunks were cut, a "new file" header was left behind.
    patch = b"Description: cut short\n\n" + A_TXT_HUNK + b"""\
diff --git a/test/rejectlog/0022 b/test/rejectlog/0022
new file mode 100644
index 000000000..68e21fff3
-- 
2.39.0
"""
    project = Project(tmp_path, {"cut.patch": patch})
    result = project.import_()
    assert "diff of test/rejectlog/0022 has an index line but no hunks" in notes_of(result, "cut.patch")
    tree = project.round_trip()
    assert not (tree / "test").exists()
    project.assert_like_quilt(tree, ["test/rejectlog/0022"])


def test_a_series_tree_holding_work_is_left_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project = Project(tmp_path, {"a.patch": b"Description: a\n\n" + A_TXT_HUNK})
    series_tree = project.root / ".forkbuild-work" / "series"
    apply_variant(context=project.context(), variant=whole_series(project.context().series), dest=series_tree)
    (series_tree / "o.txt").write_bytes(b"my uncommitted work\n")
    output = project.cli_import(capsys)
    assert "was left as it is" in output and "uncommitted changes" in output
    assert (series_tree / "o.txt").read_bytes() == b"my uncommitted work\n"
    assert (series_tree / "a.txt").read_bytes() == UPSTREAM["a.txt"]  # not moved to the new series
    assert (project.root / "patches" / "a.patch").is_file()


def test_a_diff_of_mixed_encodings_round_trips(tmp_path: Path) -> None:
    # mksh's patches: UTF-8 quotes in one line, a Latin-1 byte in another, in the same diff.
    patch = (b"Description: mixed\n\n--- a/o.txt\n+++ b/o.txt\n@@ -1,3 +1,5 @@\n one\n"
             b"+\xe2\x80\x9cquoted\xe2\x80\x9d\n+caf\xe9\n-two\n+TWO\n three\n")
    project = Project(tmp_path, {"mixed.patch": patch})
    project.import_()
    tree = project.round_trip()  # apply reads the written file back (patchfile.read_patch)
    assert (tree / "o.txt").read_bytes() == b"one\n\xe2\x80\x9cquoted\xe2\x80\x9d\ncaf\xe9\nTWO\nthree\n"


def test_a_patch_that_does_not_apply_writes_nothing_and_leaves_no_tree(tmp_path: Path) -> None:
    bad = b"Description: bad\n\n" + A_TXT_HUNK.replace(b"-line 3\n", b"-line 33\n")
    project = Project(tmp_path, {"a.patch": b"Description: a\n\n--- a/o.txt\n+++ b/o.txt\n@@ -1 +1 @@\n-one\n+1\n",
                                 "bad.patch": bad})
    toml = (project.root / "series.toml").read_bytes()
    with pytest.raises(ApplyError, match="bad.patch does not apply"):
        project.import_()
    assert (project.root / "series.toml").read_bytes() == toml
    assert sorted(path.name for path in (project.root / "patches").iterdir()) == []
    assert not (project.root / ".forkbuild-work" / "series").exists()  # made while importing, removed again


def test_a_patch_whose_context_an_earlier_one_changed_is_refused_not_merged(tmp_path: Path) -> None:
    # dpkg-source applies with patch -F 0: a hunk whose context moved is a failure. Its index
    # line names upstream's blob, so git could merge it (line 4, two lines from the earlier
    # change of line 2): import must not.
    blob = hashlib.sha1(b"blob %d\0" % len(UPSTREAM["a.txt"]) + UPSTREAM["a.txt"]).hexdigest()
    later = (b"Description: later\ndiff --git a/a.txt b/a.txt\nindex %s..1111111 100644\n--- a/a.txt\n+++ b/a.txt\n"
             b"@@ -2,4 +2,4 @@\n line 2\n line 3\n-line 4\n+line four\n line 5\n" % blob[:12].encode())
    project = Project(tmp_path, {"earlier.patch": b"Description: earlier\n\n--- a/a.txt\n+++ b/a.txt\n"
                                                  b"@@ -1,3 +1,3 @@\n line 1\n-line 2\n+line two\n line 3\n",
                                 "later.patch": later})
    with pytest.raises(ApplyError, match="later.patch does not apply"):
        project.import_()


def test_a_lone_carriage_return_inside_a_line_round_trips(tmp_path: Path) -> None:
    # mksh's debian-changes: a "\r" in the middle of a line; read as text with universal
    # newlines it would split the hunk line in two.
    patch = b"Description: cr\n\n--- a/o.txt\n+++ b/o.txt\n@@ -1,3 +1,3 @@\n one\n-two\n+t\rwo\n three\n"
    project = Project(tmp_path, {"cr.patch": patch})
    project.import_()
    tree = project.round_trip()
    assert (tree / "o.txt").read_bytes() == b"one\nt\rwo\nthree\n"


def test_a_file_a_patch_leaves_empty_is_removed_as_patch_E_does(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    # dpkg-source applies with GNU patch -E: a file a patch empties is removed. Neither diff
    # says "deleted file" (git keeps an empty file for both), and a git diff of a new empty
    # file makes no file at all. The last patch makes o.txt anew: the removal is what the
    # patches after it apply to.
    plain = b"Description: empties o.txt\n\n--- a/o.txt\n+++ b/o.txt\n@@ -1,3 +0,0 @@\n-one\n-two\n-three\n"
    git_style = b"""\
Description: empties m.c, git style
diff --git a/m.c b/m.c
index 1111111..e69de29 100644
--- a/m.c
+++ b/m.c
@@ -1,4 +0,0 @@
-int main(void)
-{
-\treturn 0;
-}
"""
    new_empty = b"Description: a new empty file\ndiff --git a/stamp b/stamp\nnew file mode 100644\nindex 0000000..e69de29\n"
    again = b"Description: o.txt anew\n\n--- /dev/null\n+++ b/o.txt\n@@ -0,0 +1 @@\n+reborn\n"
    project = Project(tmp_path, {"plain.patch": plain, "git.patch": git_style, "stamp.patch": new_empty,
                                 "again.patch": again})
    output = project.cli_import(capsys)
    assert "leaves o.txt empty: removed, as GNU patch -E does" in output
    assert "leaves m.c empty: removed" in output
    assert "leaves stamp empty" in output and "(not imported)" in output
    series_tree = project.root / ".forkbuild-work" / "series"
    assert not (series_tree / "m.c").exists() and not (series_tree / "stamp").exists()
    assert (series_tree / "o.txt").read_bytes() == b"reborn\n"
    # What was written says so: a deletion, which apply (git am) carries out.
    assert "deleted file mode 100644" in (project.root / "patches" / "git.patch").read_text()
    tree = project.round_trip()
    assert not (tree / "m.c").exists() and not (tree / "stamp").exists()
    assert (tree / "o.txt").read_bytes() == b"reborn\n"
    project.assert_like_quilt(tree, ["o.txt", "m.c", "stamp"])


def test_a_name_git_spells_otherwise_is_applied_on_the_whole_tree(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # A C-quoted name with an octal escape: the diff's name as read here is not git's, so
    # the small index lacks the file; the patch is applied on the whole tree instead.
    cafe = "caf\u00e9.txt"
    patch = b"""\
Description: a quoted name
diff --git "a/caf\\303\\251.txt" "b/caf\\303\\251.txt"
--- "a/caf\\303\\251.txt"
+++ "b/caf\\303\\251.txt"
@@ -1 +1 @@
-old
+new
"""
    # a.patch first: the whole tree the quoted one applies to must hold a.patch's change.
    project = Project(tmp_path, {"a.patch": b"Description: a\n\n" + A_TXT_HUNK, "quoted.patch": patch},
                      extra={cafe: b"old\n"})
    whole_tree = []
    real = Git.read_tree
    monkeypatch.setattr(Git, "read_tree", lambda self, tree, *, index: whole_tree.append(tree) or real(self, tree, index=index))
    project.import_()
    assert len(whole_tree) == 1  # the quoted patch alone
    assert (project.root / ".forkbuild-work" / "series" / cafe).read_bytes() == b"new\n"
    tree = project.round_trip()
    assert (tree / cafe).read_bytes() == b"new\n"
    assert b"line three\n" in (tree / "a.txt").read_bytes()


def test_a_file_left_empty_on_the_whole_tree_is_removed_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The quoted name again (it goes the whole-tree way), its one line removed: GNU patch -E
    # removes the file there as in a small index; the upstream's own empty file stays.
    cafe = "caf\u00e9.txt"
    patch = b"""\
Description: empties a quoted name
diff --git "a/caf\\303\\251.txt" "b/caf\\303\\251.txt"
--- "a/caf\\303\\251.txt"
+++ "b/caf\\303\\251.txt"
@@ -1 +0,0 @@
-old
"""
    project = Project(tmp_path, {"quoted.patch": patch}, extra={cafe: b"old\n", "keep.txt": b""})
    whole_tree = []
    real = Git.read_tree
    monkeypatch.setattr(Git, "read_tree", lambda self, tree, *, index: whole_tree.append(tree) or real(self, tree, index=index))
    result = project.import_()
    assert len(whole_tree) == 1
    assert f"leaves {cafe} empty: removed, as GNU patch -E does for dpkg-source -x" in result.patches[0].notes
    series_tree = project.root / ".forkbuild-work" / "series"
    assert not (series_tree / cafe).exists() and (series_tree / "keep.txt").read_bytes() == b""
    tree = project.round_trip()
    assert not (tree / cafe).exists() and (tree / "keep.txt").exists()


def test_patches_of_disjoint_files_share_one_git_apply(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Three patches of three files, then one of a file patched before: two git apply
    # processes, and the tree is what applying them one by one makes (apply --all, quilt).
    def first_line(path: bytes, old: bytes, new: bytes, after: bytes) -> bytes:
        return (b"Description: %s\n\n--- a/%s\n+++ b/%s\n@@ -1,2 +1,2 @@\n-%s\n+%s\n %s\n"
                % (path, path, path, old, new, after))

    patches = {"a.patch": b"Description: a\n\n" + A_TXT_HUNK, "o.patch": first_line(b"o.txt", b"one", b"ONE", b"two"),
               "m.patch": first_line(b"m.c", b"int main(void)", b"int main(int argc, char **argv)", b"{"),
               "o-again.patch": first_line(b"o.txt", b"ONE", b"1", b"two")}
    project = Project(tmp_path, patches)
    calls = []
    real = Git.apply_to_index
    monkeypatch.setattr(Git, "apply_to_index", lambda self, patch, **options: calls.append(patch) or real(self, patch, **options))
    result = project.import_()
    assert [len(group) for group in calls] == [3, 1]
    assert [outcome.file for outcome in result.patches] == list(patches)
    tree = project.round_trip()
    assert (tree / "o.txt").read_bytes() == b"1\ntwo\nthree\n"
    assert (tree / "m.c").read_bytes().startswith(b"int main(int argc, char **argv)\n")
    assert [Git(tree).log1("%s", f"HEAD~{n}") for n in (3, 2, 1, 0)] == ["a", "o.txt", "m.c", "o.txt"]
    project.assert_like_quilt(tree, ["a.txt", "o.txt", "m.c"])


def test_a_patch_without_a_date_from_before_1973_keeps_its_file_date(tmp_path: Path) -> None:
    # No Date in the description: the patch file's mtime dates the commit, as a raw date
    # (git's RFC 2822 parser reads "<seconds> <zone>" only from 100000000 seconds on).
    project = Project(tmp_path, {"a.patch": b"Description: a\n\n" + A_TXT_HUNK})
    os.utime(project.quilt_dir / "a.patch", (0, 0))
    project.import_()
    series_tree = Git(project.root / ".forkbuild-work" / "series")
    assert series_tree.log1("%ad") == "0 +0000"
    assert series_tree.out("log", "-1", "--format=%cd", "--date=raw") == "0 +0000"  # committer at the author date


def test_a_patch_below_a_file_an_earlier_patch_removes_applies_as_on_the_whole_tree(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Disjoint names, but mk's file is below `sub`, a file rm removes. They share the engine's one
    # git apply on a small index of `sub` (git removes it before it makes sub/new.txt, as it would on
    # the whole tree); the engine's tree listing checks what the whole tree holds there.
    remove = b"Description: rm\n\n--- a/sub\n+++ /dev/null\n@@ -1 +0,0 @@\n-a file\n"
    create = b"Description: mk\n\n--- /dev/null\n+++ b/sub/new.txt\n@@ -0,0 +1 @@\n+new\n"
    project = Project(tmp_path, {"rm.patch": remove, "mk.patch": create}, extra={"sub": b"a file\n"})
    calls = []
    real = Git.apply_to_index
    monkeypatch.setattr(Git, "apply_to_index", lambda self, patch, **options: calls.append(patch) or real(self, patch, **options))
    project.import_()
    assert [len(group) for group in calls] == [2]
    tree = project.round_trip()
    assert not (tree / "sub").is_file()
    assert (tree / "sub" / "new.txt").read_bytes() == b"new\n"


def test_a_patch_name_with_a_terminal_escape_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    name = "title\x1b]0;owned\x07.patch"
    project = Project(tmp_path, {name: b"Description: a\n\n" + A_TXT_HUNK})
    toml = (project.root / "series.toml").read_bytes()
    with pytest.raises(ConfigError, match="has control characters: rename the file"):
        project.import_()
    assert (project.root / "series.toml").read_bytes() == toml and not any((project.root / "patches").iterdir())
