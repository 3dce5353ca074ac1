"""series_writer: one transaction per change of series.toml + patches/, rolled
forward or back after a kill at any step."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from forkbuild.errors import ForkbuildError
from forkbuild.io.chaos import CHAOS_ENV
from forkbuild.series.writer import JOURNAL, STEPS, WORK_DIR, SeriesChange, recover_series, write_series

OLD = {"series.toml": b"old toml\n", "patches/a.patch": b"A old\n", "patches/b.patch": b"B\n",
       "patches/series": b"a.patch\nb.patch\n"}
NEW = {"series.toml": b"new toml\n", "patches/a.patch": b"A new\n", "patches/c.patch": b"C\n",
       "patches/series": b"a.patch\nc.patch\n"}
CHANGE = SeriesChange(series_toml="new toml\n", quilt_series="a.patch\nc.patch\n",
                      patches={"a.patch": "A new\n", "c.patch": b"C\n"}, removed=("b.patch",))


def _make(root: Path) -> Path:
    for relative, data in OLD.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_bytes(data)
    return root


def _files(root: Path) -> dict[str, bytes]:
    found = {"series.toml": (root / "series.toml").read_bytes()}
    found.update({f"patches/{path.name}": path.read_bytes() for path in (root / "patches").iterdir()})
    return found


def test_a_change_is_written_whole(tmp_path: Path) -> None:
    root = _make(tmp_path)
    write_series(root, CHANGE)
    assert _files(root) == NEW
    assert not (root / WORK_DIR / JOURNAL).exists()
    assert list((root / WORK_DIR).glob(f".{JOURNAL}*")) == []


def test_only_series_files_can_be_written(tmp_path: Path) -> None:
    root = _make(tmp_path)
    for change in (SeriesChange(patches={"../x": "x"}), SeriesChange(removed=("sub/x.patch",))):
        with pytest.raises(ForkbuildError, match="refusing to write"):
            write_series(root, change)
    assert _files(root) == OLD


def _killed_write(root: Path, step: str) -> int:
    code = ("import sys; from pathlib import Path; sys.path.insert(0, %r);"
            "from test_series_writer import CHANGE; from forkbuild.series.writer import write_series;"
            "write_series(Path(%r), CHANGE)") % (str(Path(__file__).parent), str(root))
    return subprocess.run([sys.executable, "-c", code], env={**os.environ, CHAOS_ENV: step}).returncode


@pytest.mark.parametrize("step", STEPS)
def test_a_kill_at_every_step_leaves_old_or_new_and_recovery_finishes(tmp_path: Path, step: str) -> None:
    root = _make(tmp_path)
    assert _killed_write(root, step) == -9
    # Before recovery: each file is old or new (never a mix inside one file); after it, all old or all new.
    assert recover_series(root) is True
    expected = OLD if step == "series:prepared" else NEW
    assert _files(root) == expected
    assert not list((root / WORK_DIR).glob(f"*{JOURNAL}*"))
    assert not [path for path in (root / "patches").iterdir() if path.name.startswith(".")]
    # And the next write works as usual.
    write_series(root, SeriesChange(patches={"d.patch": "D\n"}))
    assert (root / "patches" / "d.patch").read_text() == "D\n"


def test_a_pending_journal_never_overwrites_a_later_edit(tmp_path: Path) -> None:
    root = _make(tmp_path)
    assert _killed_write(root, "series:committed") == -9
    (root / "patches" / "b.patch").write_bytes(b"edited by hand after the kill\n")
    with pytest.raises(ForkbuildError, match="patches/b.patch changed since") as raised:
        recover_series(root)
    assert (root / "patches" / "b.patch").read_bytes() == b"edited by hand after the kill\n"
    # Its hint, followed: delete the journal, and the user's edit is what stays.
    journal = root / WORK_DIR / JOURNAL
    assert str(journal) in raised.value.hint
    import shutil

    shutil.rmtree(journal)
    assert recover_series(root) is False
    assert (root / "patches" / "b.patch").read_bytes() == b"edited by hand after the kill\n"


def test_every_command_recovers_first(series_fx) -> None:
    """A killed transaction is finished by whatever forkbuild command runs next."""
    root = series_fx.root
    old = (root / "series.toml").read_text()
    code = ("from pathlib import Path; from forkbuild.series.writer import SeriesChange, write_series;"
            "write_series(Path(%r), SeriesChange(series_toml=%r))") % (str(root), old + "\n# rewritten\n")
    assert subprocess.run([sys.executable, "-c", code],
                          env={**os.environ, CHAOS_ENV: "series:committed"}).returncode == -9
    assert (root / "series.toml").read_text() == old
    assert series_fx.cli("status") == 0
    assert (root / "series.toml").read_text().endswith("# rewritten\n")


def test_a_large_transaction_pays_for_durability_once_not_per_file(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # An import writes hundreds of patches: one fsync after another for each (journal copy,
    # file, directory) was ~600 journal commits. The journal's bytes are one file; the
    # files' fsyncs are issued together (one sync_files), before any file is renamed into place.
    from forkbuild.io import fsutil

    root = _make(tmp_path)
    inside = [False]
    fsyncs: list[bool] = []  # for each fsync: was it one of the batch's?
    batches, order = [], []
    real_fsync, real_sync, real_replace = os.fsync, fsutil.sync_files, os.replace

    def batch(paths):
        batches.append(len(paths))
        order.append("sync")
        inside[0] = True
        try:
            real_sync(paths)
        finally:
            inside[0] = False

    monkeypatch.setattr(os, "fsync", lambda descriptor: fsyncs.append(inside[0]) or real_fsync(descriptor))
    monkeypatch.setattr(fsutil, "sync_files", batch)
    monkeypatch.setattr(os, "replace", lambda source, target: order.append("rename") or real_replace(source, target))
    patches = {f"{number:03}.patch": f"patch {number}\n" for number in range(200)}
    write_series(root, SeriesChange(quilt_series="".join(f"{name}\n" for name in patches), patches=patches))
    monkeypatch.undo()
    assert (root / "patches" / "199.patch").read_text() == "patch 199\n"
    assert batches == [201]  # the patches and patches/series, together
    assert fsyncs.count(True) == 201
    assert fsyncs.count(False) <= 8, fsyncs.count(False)  # the journal's data and manifest, directories
    assert order == ["sync"] + ["rename"] * 201
    assert not [path for path in (root / "patches").iterdir() if path.name.startswith(".")]
