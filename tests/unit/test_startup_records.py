"""What a re-run reads from the cache instead of computing again: the facts of each patch
file and what tomllib made of series.toml (patchfacts.py), and the file listing of the upstream
base (Git.tree_entries keep=True); and the `forkbuild` command's exit without the interpreter's
teardown (cli.run).

Each is checked through a real `forkbuild` process: what it imported, which git commands
it ran (GIT_TRACE), what it printed and returned."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fixtures import SeriesFixture

from forkbuild.git import TREES_DIR, Git
from forkbuild.patchfacts import FACTS_DIR, TOML_FACTS_DIR

PROBE = """
import sys
from forkbuild.cli import main
code = main(sys.argv[1:])
print("imported:", " ".join(name for name in ("email.parser", "unidiff", "tomllib") if name in sys.modules))
sys.exit(code)
"""


def forkbuild(fx: SeriesFixture, *args: str, trace: Path | None = None, probe: bool = False,
              extra: str = "") -> subprocess.CompletedProcess[str]:
    """`forkbuild -C <series> --cache <cache> args` in a new Python process."""
    env = {**os.environ, **({"GIT_TRACE": str(trace)} if trace else {})}
    env.pop("PYTHONUNBUFFERED", None)  # output to a pipe stays in Python's buffers until something flushes it
    code = PROBE if probe else extra + "from forkbuild.cli import run\nrun()\n"
    return subprocess.run([sys.executable, "-c", code, "-C", str(fx.root), "--cache", str(fx.cache), *args],
                          capture_output=True, text=True, env=env, check=False)


def apply_all(fx: SeriesFixture, dest: Path, **options) -> subprocess.CompletedProcess[str]:
    done = forkbuild(fx, "apply", "--all", "--dir", str(dest), **options)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def forget_results(fx: SeriesFixture) -> None:
    """Drop the apply engine's remembered results: the next apply computes every patch."""
    (fx.cache / "upstream.git" / "forkbuild-apply-memo.json").unlink(missing_ok=True)


def imported(done: subprocess.CompletedProcess[str]) -> str:
    """Which of PROBE's modules (email's parser, unidiff, tomllib) the run loaded."""
    return done.stdout.split("imported:", 1)[1]


def reapply_with_damaged_records(fx: SeriesFixture, tree: Path, records: Path,
                                 cut: str) -> subprocess.CompletedProcess[str]:
    """Every record in `records` cut off to `cut`, the remembered results dropped, an apply
    again (PROBE): it reads what it needs from the files, and the same commits come out."""
    head = Git(tree).head()
    for record in records.iterdir():
        record.write_text(cut)
    forget_results(fx)
    again = apply_all(fx, tree, probe=True)
    assert Git(tree).head() == head
    return again


def traced_commands(trace: Path) -> list[str]:
    return [line.split("trace: built-in: ", 1)[1] for line in trace.read_text().splitlines() if "trace: built-in: " in line]


def test_a_rerun_reads_unchanged_patch_files_from_their_records_without_email_or_unidiff(
        series_fx: SeriesFixture, tmp_path: Path) -> None:
    apply_all(series_fx, tmp_path / "tree")
    records = sorted((series_fx.cache / FACTS_DIR).iterdir())
    # Per patch: what parsing it found, and its problems (none) for upstream's set of symlinks.
    assert len([record for record in records if "-" not in record.name]) == len(series_fx.specs)
    assert [json.loads(record.read_text()) for record in records if "-" in record.name] == \
        [{"problems": []}] * len(series_fx.specs)
    forget_results(series_fx)
    again = apply_all(series_fx, tmp_path / "tree", probe=True)
    assert "imported: \n" in again.stdout  # neither email's parser nor unidiff nor tomllib was loaded
    # A changed patch file is a new record, read from the file: its new subject is in the commit.
    patch = series_fx.patches_dir / series_fx.specs[1].file
    patch.write_text(patch.read_text().replace("\nSubject: ", "\nSubject: reworded: ", 1))
    changed = apply_all(series_fx, tmp_path / "tree", probe=True)
    assert "unidiff" in imported(changed)
    assert len(list((series_fx.cache / FACTS_DIR).iterdir())) == len(records) + 2
    log = Git(tmp_path / "tree").out("log", "--format=%s")
    assert "reworded:" in log


def test_a_rerun_reads_series_toml_from_its_record_and_a_changed_one_from_the_file(
        series_fx: SeriesFixture, tmp_path: Path) -> None:
    import tomllib

    apply_all(series_fx, tmp_path / "tree")
    records = list((series_fx.cache / TOML_FACTS_DIR).iterdir())
    assert len(records) == 1
    assert json.loads(records[0].read_text()) == {"toml": tomllib.loads(series_fx.series_toml.read_text())}
    again = apply_all(series_fx, tmp_path / "tree", probe=True)
    assert "tomllib" not in imported(again)
    # A changed file is read by tomllib, and checked: its new (wrong) key is refused.
    text = series_fx.series_toml.read_text()
    series_fx.series_toml.write_text(text.replace("[upstream]\n", "[upstream]\nvresion = 1\n", 1))
    changed = forkbuild(series_fx, "apply", "--all", "--dir", str(tmp_path / "tree"), probe=True)
    assert changed.returncode != 0 and "vresion" in changed.stderr
    assert "tomllib" in imported(changed)
    # Damaged: parsed again, and the same commits come out.
    series_fx.series_toml.write_text(text)
    repaired = reapply_with_damaged_records(series_fx, tmp_path / "tree", series_fx.cache / TOML_FACTS_DIR,
                                            '{"toml": ')
    assert "tomllib" in imported(repaired)


def test_invalid_toml_is_refused_the_same_way_each_time_and_leaves_no_record(series_fx: SeriesFixture,
                                                                              tmp_path: Path) -> None:
    series_fx.series_toml.write_text(series_fx.series_toml.read_text() + "\n[upstream\n")
    first = forkbuild(series_fx, "apply", "--all", "--dir", str(tmp_path / "tree"))
    second = forkbuild(series_fx, "apply", "--all", "--dir", str(tmp_path / "tree"))
    assert first.returncode == second.returncode != 0
    assert "not valid TOML" in first.stderr and first.stderr == second.stderr
    assert not (series_fx.cache / TOML_FACTS_DIR).exists() or not list((series_fx.cache / TOML_FACTS_DIR).iterdir())


def test_only_toml_that_json_gives_back_exactly_is_recorded(tmp_path: Path, monkeypatch) -> None:
    """A date is no JSON value (nor is NaN): such a file is parsed each time, and tomllib's own types come out."""
    import datetime
    import math
    import tomllib

    from forkbuild import config
    from forkbuild.patchfacts import TOML_FACTS

    monkeypatch.setattr(TOML_FACTS, "directory", None)
    TOML_FACTS.keep_in(tmp_path)
    where = tmp_path / "series.toml"
    assert config._read_toml('when = 1979-05-27\n', path=where) == {"when": datetime.date(1979, 5, 27)}
    assert math.isnan(config._read_toml('x = nan\n', path=where)["x"])
    assert not (tmp_path / TOML_FACTS_DIR).exists()
    # Out of alphabetical order: the order of a file's tables is the series' order (features, variants).
    plain = 'z = 1\nb = 1.0\nc = [true, "x"]\n[t]\nd = {y = 2, e = 3}\n[a]\n'
    parsed = config._read_toml(plain, path=where)
    assert len(list((tmp_path / TOML_FACTS_DIR).iterdir())) == 1
    monkeypatch.setattr(tomllib, "loads", lambda text: pytest.fail("parsed again"))
    again = config._read_toml(plain, path=where)
    assert again == parsed and type(again["b"]) is float and type(again["z"]) is int
    assert list(again) == ["z", "b", "c", "t", "a"] and list(again["t"]["d"]) == ["y", "e"]
    # Another config.py (or patchfacts.py, or Python) is another key: its records are not taken.
    monkeypatch.setattr(TOML_FACTS, "_reader", b"another config.py")
    with pytest.raises(pytest.fail.Exception, match="parsed again"):
        config._read_toml(plain, path=where)


def test_a_damaged_patch_record_is_read_from_the_patch_again(series_fx: SeriesFixture, tmp_path: Path) -> None:
    first = apply_all(series_fx, tmp_path / "tree")
    again = reapply_with_damaged_records(series_fx, tmp_path / "tree", series_fx.cache / FACTS_DIR, '{"subject": ')
    assert "unidiff" in imported(again)  # the same commits, from the patches themselves
    again_records = [json.loads(record.read_text()) for record in (series_fx.cache / FACTS_DIR).iterdir()]
    assert all(record.get("subject") or record == {"problems": []} for record in again_records)
    assert first.returncode == again.returncode == 0


def test_an_unparsable_patch_is_refused_the_same_way_from_its_record(series_fx: SeriesFixture, tmp_path: Path) -> None:
    patch = series_fx.patches_dir / series_fx.specs[1].file
    text = patch.read_text()
    hunk = text.index("\n@@ ")
    patch.write_text(text[:hunk] + "\n@@ -1,3 +1,4 @@\n+only an added line\n")  # the hunk says 3 lines of context
    first = forkbuild(series_fx, "apply", "--all", "--dir", str(tmp_path / "tree"))
    second = forkbuild(series_fx, "apply", "--all", "--dir", str(tmp_path / "tree"), probe=True)
    assert first.returncode == second.returncode != 0
    assert "cannot parse the diff" in first.stderr
    assert first.stderr.replace("\n", " ") in second.stderr.replace("\n", " ")
    assert "imported: \n" in second.stdout  # the refusal came from the record


def test_a_rerun_reads_the_upstream_listing_it_kept_instead_of_listing_the_tree(
        series_fx: SeriesFixture, tmp_path: Path) -> None:
    apply_all(series_fx, tmp_path / "tree")
    base = Git(tmp_path / "tree").out("rev-list", "--max-parents=0", "HEAD")
    kept = series_fx.cache / "upstream.git" / TREES_DIR / base
    listed = Git(tmp_path / "tree").out("ls-tree", "-r", "--name-only", base).splitlines()
    assert json.loads(kept.read_text())["paths"] == listed
    forget_results(series_fx)
    trace = tmp_path / "trace"
    apply_all(series_fx, tmp_path / "tree", trace=trace)
    assert not [command for command in traced_commands(trace) if command.startswith("git ls-tree -r")]
    # Damaged: listed again, and the same commits come out.
    head = Git(tmp_path / "tree").head()
    kept.write_text("[1, 2")
    forget_results(series_fx)
    trace.unlink()
    apply_all(series_fx, tmp_path / "tree", trace=trace)
    assert [command for command in traced_commands(trace) if command.startswith("git ls-tree -r")]
    assert Git(tmp_path / "tree").head() == head
    assert isinstance(json.loads(kept.read_text()), dict)


def test_a_problems_record_spares_the_path_checks_and_says_the_same(series_fx: SeriesFixture,
                                                                    monkeypatch) -> None:
    from forkbuild import patchfile
    from forkbuild.errors import UnsafePatchError
    from forkbuild.patchfacts import FACTS

    monkeypatch.setattr(FACTS, "directory", None)
    FACTS.keep_in(series_fx.cache)
    unsafe = series_fx.patches_dir / series_fx.specs[2].file
    unsafe.write_text(unsafe.read_text().replace(" b/python/", " b/../python/", 1))
    paths = [series_fx.patches_dir / spec.file for spec in series_fx.specs]
    with pytest.raises(UnsafePatchError, match="leaves the tree") as first:
        patchfile.check_patches(paths)
    patchfile._text_problems.cache_clear()
    patchfile._parsed.cache_clear()
    calls = []
    monkeypatch.setattr(patchfile, "safety_problems", lambda *args, **options: calls.append(args) or [])
    with pytest.raises(UnsafePatchError) as second:
        patchfile.check_patches(paths)
    assert second.value.message == first.value.message
    assert calls == []  # every patch's problems came from its record


def test_a_record_of_another_reader_is_not_used(series_fx: SeriesFixture, monkeypatch) -> None:
    """A change to patchfile.py, unidiff or Python is a new key: what an older reader found is not taken."""
    from forkbuild import patchfile
    from forkbuild.patchfacts import FACTS

    monkeypatch.setattr(FACTS, "directory", None)
    FACTS.keep_in(series_fx.cache)
    path = series_fx.patches_dir / series_fx.specs[0].file
    patchfile._parsed.cache_clear()
    patchfile.read_patch(path)
    parses = []
    parse = patchfile.parse_patch
    monkeypatch.setattr(patchfile, "parse_patch", lambda text, path: parses.append(path) or parse(text, path=path))
    patchfile._parsed.cache_clear()
    patchfile.read_patch(path)
    assert parses == []  # the same reader: from the record
    monkeypatch.setattr(FACTS, "_reader", b"another patchfile.py")
    patchfile._parsed.cache_clear()
    patchfile.read_patch(path)
    assert parses == [path]
    patchfile._parsed.cache_clear()


def test_records_written_long_ago_go_when_a_new_one_is_written(tmp_path: Path, monkeypatch) -> None:
    from forkbuild.patchfacts import FACTS, KEEP_DAYS

    monkeypatch.setattr(FACTS, "directory", None)
    FACTS.keep_in(tmp_path)
    FACTS.put("old", {"problems": []})
    FACTS.put("recent", {"problems": []})
    records = tmp_path / FACTS_DIR
    long_ago = time.time() - (KEEP_DAYS + 1) * 86400
    os.utime(records / "old", (long_ago, long_ago))
    assert FACTS.get("old") == {"problems": []}  # reading keeps nothing alive, and removes nothing
    FACTS.put("new", {"problems": []})
    assert sorted(path.name for path in records.iterdir()) == ["new", "recent"]
