"""Series-changing commands are one transaction under the series lock, from the first read to
the last write (issue 38), and leave a series `check` accepts (issue 36)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from fixtures import SeriesFixture
from forkbuild.applier import apply_variant
from forkbuild.errors import ConfigError, DirtyTreeError, ForkbuildError
from forkbuild.io.git import Git
from forkbuild.series.combination import whole_series
from forkbuild.series.writer import SeriesChange, series_transaction
from test_export import amend, edit

# A forkbuild CLI run whose chaos points call `hook(step)` (defined in the snippet) instead.
RUN = """
import sys, time
from pathlib import Path
import forkbuild.{module} as module
signals = Path(sys.argv[1])
def wait_for(name):
    deadline = time.monotonic() + 60
    while not (signals / name).exists():
        if time.monotonic() > deadline:
            raise SystemExit("timed out waiting for " + name)
        time.sleep(0.02)
def hook(step):
{hook}
module.chaos_point = hook
from forkbuild.cli import main
sys.exit(main(sys.argv[2:]))
"""


def _start(fx: SeriesFixture, signals: Path, *, module: str, hook: str, args: list[str]) -> subprocess.Popen:
    code = RUN.format(module=module, hook=hook)
    return subprocess.Popen([sys.executable, "-c", code, str(signals), "-C", str(fx.root), "--cache", str(fx.cache),
                             *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(path: Path, process: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + 60
    while not path.exists() and (process is None or process.poll() is None):
        assert time.monotonic() < deadline, f"timed out waiting for {path.name}"
        time.sleep(0.02)


def test_two_exports_at_once_lose_no_edit(series_fx: SeriesFixture, tmp_path: Path) -> None:
    """Tree one amends alpha, tree two amends beta. Export two is held right after its staleness
    check; export one runs meanwhile. Before the fix, export two's check had passed outside the
    lock and it wrote its old alpha over export one's: the edit was lost everywhere."""
    fx = series_fx
    one = Git(apply_variant(context=fx.context(), variant=whole_series(fx.load()), dest=fx.root / ".forkbuild-work/series").dest)
    two = Git(apply_variant(context=fx.context(), variant=whole_series(fx.load()), dest=fx.root / ".forkbuild-work/two").dest)
    amend(one, one.commits(one.head() + "~3", one.head())[1],
          lambda t: edit(t.path, "python/pkg/core.py", "return value * 3", "return value * 4"))
    amend(two, two.commits(two.head() + "~3", two.head())[2],
          lambda t: edit(t.path, "python/pkg/util.py", "ceiling = 50", "ceiling = 40"))
    signals = tmp_path / "signals"
    signals.mkdir()
    second = _start(fx, signals, module="exporter", args=["export", "--dir", str(two.path)], hook=(
        "    if step == 'export:checked':\n"
        "        (signals / 'two-checked').touch()\n"
        "        wait_for('go')\n"))
    _wait_for(signals / "two-checked", second)
    first = _start(fx, signals, module="series.writer", args=["export", "--dir", str(one.path)], hook=(
        "    if step == 'series:waiting':\n"
        "        (signals / 'one-waiting').touch()\n"))
    _wait_for(signals / "one-waiting", first)  # blocked on the lock, or (before the fix) done
    (signals / "go").touch()
    second_out = second.communicate(timeout=120)
    first_out = first.communicate(timeout=120)
    assert second.returncode == 0, second_out
    alpha = (fx.patches_dir / "alpha-scale.patch").read_text()
    beta = (fx.patches_dir / "beta-limit.patch").read_text()
    assert "ceiling = 40" in beta
    if "value * 4" not in alpha:
        # Not written: then export one refused, saying why, and its tree still holds the edit.
        assert first.returncode == DirtyTreeError.return_code, first_out
        assert "changed since" in first_out[1]
        assert "value * 4" in one.out("show", "HEAD~1:python/pkg/core.py")


def test_a_write_refuses_files_changed_since_the_transaction_read_them(series_fx: SeriesFixture) -> None:
    fx = series_fx
    with series_transaction(fx.root) as transaction:
        toml = fx.series_toml.read_text()
        (fx.patches_dir / "beta-limit.patch").write_text("edited by hand\n")  # outside the lock
        with pytest.raises(DirtyTreeError, match=r"series changed since read: patches/beta-limit.patch"):
            transaction.write(SeriesChange(series_toml=toml + "# more\n"))
    assert fx.series_toml.read_text() == toml
    with series_transaction(fx.root) as transaction, pytest.raises(ForkbuildError, match="taken twice"):
        with series_transaction(fx.root):
            pass


def _features(fx: SeriesFixture) -> tuple[dict, dict]:
    data = tomllib.loads(fx.series_toml.read_text())
    return data["features"], {name: table["features"] for name, table in data["variants"].items()}


@pytest.mark.parametrize("how", ["drop", "export --drop"])
def test_dropping_a_features_last_patch_leaves_a_series_check_accepts(series_fx: SeriesFixture, how: str) -> None:
    fx = series_fx
    assert fx.cli("apply", "--all") == 0
    if how == "drop":
        assert fx.cli("drop", "beta-limit.patch") == 0
    else:
        tree = Git(fx.root / ".forkbuild-work/series")
        tree.run("reset", "--quiet", "--hard", "HEAD~1")  # beta's commit goes
        assert fx.cli("export", "--drop", "beta-limit.patch") == 0
    features, variants = _features(fx)
    assert features["beta"]["ported"] is False
    assert features["beta"]["guards"] == [{"env": "DSV41_BETA", "type": "switch", "default": "0"}]
    assert variants == {"full": ["guards", "alpha"], "lite": ["guards"], "stock": []}
    assert fx.cli("check") == 0
    if how == "drop":  # the tree still holds beta's commit: export refuses to bring it back ...
        assert fx.cli("export") == DirtyTreeError.return_code
        assert "ported" in _features(fx)[0]["beta"]
        # ... unless its commit is made a patch of another name, on purpose: then the marker goes.
        tree = Git(fx.root / ".forkbuild-work/series")
        tree.run("commit", "--quiet", "--amend", "-m", tree.log1("%B", "HEAD").rstrip() + "\nPatch: beta-again.patch\n")
        assert fx.cli("export") == 0
        assert "ported" not in _features(fx)[0]["beta"] and (fx.patches_dir / "beta-again.patch").is_file()
        assert fx.cli("check") == 0


def test_new_for_a_feature_that_lost_its_last_patch_ports_it_again(series_fx: SeriesFixture) -> None:
    fx = series_fx
    assert fx.cli("drop", "beta-limit.patch") == 0
    assert _features(fx)[0]["beta"]["ported"] is False
    # Its next patch starts as any feature's does: marked until the patch is exported (every variant
    # builds as checked meanwhile), then back in the variant `new` named, the marker gone.
    assert fx.cli("new", "beta", "--variant", "full", "--name", "beta-again") == 0
    features, variants = _features(fx)
    assert features["beta"]["ported"] is False and "beta" not in variants["full"]
    assert fx.cli("check") == 0
    assert fx.cli("apply", "--all") == 0
    tree = Git(fx.root / ".forkbuild-work/series")
    edit(tree.path, "python/pkg/util.py", "def limit(", "def limited(")
    tree.run("commit", "--quiet", "-a", "-m", "util: limited\n\nFeature: beta\nForwarded: no\nPatch: beta-again.patch\n")
    assert fx.cli("export") == 0
    features, variants = _features(fx)
    assert "ported" not in features["beta"] and "beta" in variants["full"]
    assert features["beta"]["guards"] == [{"env": "DSV41_BETA", "type": "switch", "default": "0"}]
    assert fx.cli("check") == 0


def test_dropping_a_feature_another_needs_is_refused(series_fx: SeriesFixture) -> None:
    before = series_fx.series_toml.read_bytes()
    assert series_fx.cli("drop", "guards.patch") == ConfigError.return_code
    assert series_fx.series_toml.read_bytes() == before
    assert (series_fx.patches_dir / "guards.patch").exists()


def test_drop_of_a_patch_whose_tree_commit_was_amended_is_refused(series_fx: SeriesFixture, capfd) -> None:
    fx = series_fx
    assert fx.cli("apply", "--all") == 0
    tree = Git(fx.root / ".forkbuild-work/series")
    amend(tree, tree.commits(tree.head() + "~3", tree.head())[1],
          lambda t: edit(t.path, "python/pkg/core.py", "return value * 3", "return value * 4"))
    capfd.readouterr()
    assert fx.cli("drop", "alpha-scale.patch") == DirtyTreeError.return_code
    assert "was changed and not exported" in capfd.readouterr().err
    assert (fx.patches_dir / "alpha-scale.patch").exists()
    assert fx.cli("export") == 0  # the hint: keep the change, then drop
    assert "value * 4" in (fx.patches_dir / "alpha-scale.patch").read_text()


def test_apply_reads_the_series_under_its_lock_so_a_drop_cannot_pull_a_patch_from_under_it(
        series_fx: SeriesFixture) -> None:
    # A drop (or export, or new) holding the series lock: apply --all waits for it instead of reading a
    # series that is being rewritten (before: a FileNotFoundError traceback when a drop removed a patch
    # file between apply's plan and git reading it, and a tree the next export called killed).
    fx = series_fx
    assert fx.cli("fetch") == 0
    tree = fx.root / ".forkbuild-work" / "series"
    with series_transaction(fx.root):
        apply = subprocess.Popen([sys.executable, "-m", "forkbuild", "-C", str(fx.root), "--cache", str(fx.cache),
                                  "apply", "--all"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(2.0)
        assert apply.poll() is None and not tree.exists()  # waiting for the lock, nothing read or built
    out, err = apply.communicate(timeout=120)
    assert apply.returncode == 0, err
    assert "Traceback" not in err and (tree / "python/pkg/core.py").is_file()


@pytest.mark.parametrize("manifest", [b"", b"\xff\xfe", b'{"entries": [{"path": "series.toml"}]}', b'{"entries": [1]}',
                                      b'{"entries": [{"path": "series.toml", "before": null, "after": "00"}]}'])
def test_a_damaged_record_of_an_interrupted_write_is_named_not_a_traceback(series_fx: SeriesFixture, capsys,
                                                                           manifest: bytes) -> None:
    """Every command finishes a pending write first: a damaged record made each one a traceback."""
    journal = series_fx.root / ".forkbuild-work" / "series-transaction"
    journal.mkdir(parents=True)
    (journal / "manifest.json").write_bytes(manifest)
    before = series_fx.series_toml.read_bytes()
    assert series_fx.cli("status") == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "the record of an interrupted write of the series is damaged" in err and "Traceback" not in err
    assert f"then delete {journal}" in err and series_fx.series_toml.read_bytes() == before
    shutil.rmtree(journal)  # the hint, followed
    assert series_fx.cli("status") == 0
