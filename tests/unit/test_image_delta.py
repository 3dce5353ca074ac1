"""The delta-layer planner (forkbuild_runtime.delta) on a tiny fake
installation: what it copies, removes and compiles, and the installed RECORD
it writes, checked by applying the plan to a real directory."""

from __future__ import annotations

import compileall
import importlib.metadata
import os
import shutil
import sys
import zipfile
from pathlib import Path

import pytest

from forkbuild_runtime import ImageError, delta, records
from forkbuild_runtime import __main__ as runtime_main

CACHE_TAG = sys.implementation.cache_tag
STOCK_FILES = {
    "pkg/__init__.py": b"VERSION = '1.0'\n",
    "pkg/same.py": b"x = 1\n",
    "pkg/changed.py": b"def f():\n    return 'stock'\n",
    "pkg/gone.py": b"old = True\n",
    "pkg/data.json": b"{}\n",
}
PATCHED_FILES = {
    **{k: v for k, v in STOCK_FILES.items() if k != "pkg/gone.py"},
    "pkg/changed.py": b"def f():\n    return 'patched'\n",
    "pkg/added.py": b"y = 2\n",
    "pkg/_forkbuild_manifest.json": b'{"schema": 1}\n',
}
DIST_INFO_EXTRA = {"WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
                   "top_level.txt": b"pkg\n"}


def _metadata(version: str) -> bytes:
    return f"Metadata-Version: 2.1\nName: pkg\nVersion: {version}\n\n".encode()


def _wheel_rows(files: dict[str, bytes], dist_info: str) -> bytes:
    rows = [records.row_for(path, data) for path, data in files.items()]
    return records.render([*rows, records.Row(f"{dist_info}/RECORD")])


def make_wheel(path: Path, *, version: str, files: dict[str, bytes]) -> Path:
    dist_info = f"pkg-{version}.dist-info"
    members = {**files, f"{dist_info}/METADATA": _metadata(version),
               **{f"{dist_info}/{name}": data for name, data in DIST_INFO_EXTRA.items()}}
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
        archive.writestr(f"{dist_info}/RECORD", _wheel_rows(members, dist_info))
    return path


def install_stock(site: Path) -> None:
    """What pip leaves: files, .pyc rows without hash, INSTALLER/REQUESTED/direct_url.json."""
    dist_info = "pkg-1.0.dist-info"
    files = {**STOCK_FILES, f"{dist_info}/METADATA": _metadata("1.0"), f"{dist_info}/INSTALLER": b"pip\n",
             f"{dist_info}/REQUESTED": b"", f"{dist_info}/direct_url.json": b'{"url": "file:///w/pkg.whl"}',
             **{f"{dist_info}/{name}": data for name, data in DIST_INFO_EXTRA.items()}}
    for relative, data in files.items():
        (site / relative).parent.mkdir(parents=True, exist_ok=True)
        (site / relative).write_bytes(data)
    compileall.compile_dir(site / "pkg", quiet=1)
    rows = [records.row_for(path, data) for path, data in files.items()]
    rows += [records.Row(records.pyc_for(path, CACHE_TAG)) for path in STOCK_FILES if path.endswith(".py")]
    rows += [records.Row("../../../bin/pkg-cli", "sha256=abc", "10"), records.Row(f"{dist_info}/RECORD")]
    (site / dist_info / "RECORD").write_bytes(records.render(rows))


def base_of(site: Path) -> records.Installed:
    dists = list(importlib.metadata.distributions(path=[str(site)]))
    assert len(dists) == 1, [d.metadata["Version"] for d in dists]
    rows = tuple(records.parse(dists[0].read_text("RECORD"), source="site RECORD"))
    dist_info = next(r.path.split("/", 1)[0] for r in rows if ".dist-info/" in r.path)
    direct = dists[0].read_text("direct_url.json")
    return records.Installed(name="pkg", version=dists[0].version, site=site, dist_info=dist_info, rows=rows,
                               direct_url={"url": "x"} if direct else None)


@pytest.fixture
def site(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    install_stock(site)
    return site


@pytest.fixture
def patched(tmp_path: Path):
    path = make_wheel(tmp_path / "pkg-1.0+v.abc-py3-none-any.whl", version="1.0+v.abc", files=PATCHED_FILES)
    with zipfile.ZipFile(path) as archive:
        yield archive


def stock_rows(tmp_path: Path) -> list[records.Row]:
    wheel = make_wheel(tmp_path / "pkg-1.0-py3-none-any.whl", version="1.0", files=STOCK_FILES)
    with zipfile.ZipFile(wheel) as archive:
        return records.parse(archive.read("pkg-1.0.dist-info/RECORD").decode(), source="stock RECORD")


def test_plan_copies_only_changed_and_added_files(site, patched):
    plan = delta.plan(base_of(site), patched, cache_tag=CACHE_TAG)
    package_files = sorted(path for path in plan.files if path.startswith("pkg/"))
    assert package_files == ["pkg/_forkbuild_manifest.json", "pkg/added.py", "pkg/changed.py"]
    assert plan.compile == ("pkg/added.py", "pkg/changed.py")
    assert plan.remove[0] == "pkg-1.0.dist-info"
    assert set(plan.remove[1:]) == {"pkg/gone.py", records.pyc_for("pkg/gone.py", CACHE_TAG)}


def test_installed_record_is_rewritten(site, patched):
    plan = delta.plan(base_of(site), patched, cache_tag=CACHE_TAG)
    rows = {row.path: row for row in records.parse(plan.files["pkg-1.0+v.abc.dist-info/RECORD"].decode(), source="planned RECORD")}
    assert rows["pkg/changed.py"].hash == records.hash_of(PATCHED_FILES["pkg/changed.py"])
    assert rows["pkg/same.py"].hash == records.hash_of(STOCK_FILES["pkg/same.py"])
    assert "pkg/gone.py" not in rows and records.pyc_for("pkg/gone.py", CACHE_TAG) not in rows
    assert rows[records.pyc_for("pkg/added.py", CACHE_TAG)].hash == ""
    assert rows["../../../bin/pkg-cli"].hash == "sha256=abc"  # scripts pip wrote stay listed
    assert not any(path.startswith("pkg-1.0.dist-info/") for path in rows)
    new = "pkg-1.0+v.abc.dist-info"
    assert {f"{new}/INSTALLER", f"{new}/REQUESTED", f"{new}/METADATA", f"{new}/WHEEL"} <= set(rows)
    assert f"{new}/direct_url.json" not in rows  # it named the stock wheel file
    assert list(rows)[-1] == f"{new}/RECORD"


def _apply(plan: delta.Delta, *, site: Path, out: Path) -> None:
    """What the Dockerfile's delta stage does: copy, remove, compile."""
    delta.write(plan, site=site, out=out)
    shutil.copytree(out / "root" / site.relative_to(site.anchor), site, dirs_exist_ok=True)
    for path in (out / "remove").read_bytes().split(b"\0"):
        if path:
            target = Path(os.fsdecode(path))
            shutil.rmtree(target) if target.is_dir() else target.unlink()
    for line in (out / "compile").read_text().splitlines():
        assert compileall.compile_file(line, quiet=1, force=True)


def test_applied_delta_is_a_consistent_installation(site, patched, tmp_path):
    _apply(delta.plan(base_of(site), patched, cache_tag=CACHE_TAG), site=site, out=tmp_path / "out")
    after = base_of(site)
    assert after.version == "1.0+v.abc"
    (checked, problems) = records.verify_record(
        records.Installed(**{**after.__dict__, "rows": tuple(r for r in after.rows if not r.path.startswith("../"))}))
    assert problems == [] and checked == len(PATCHED_FILES) + 5  # + METADATA WHEEL top_level.txt INSTALLER REQUESTED
    assert (site / "pkg/changed.py").read_bytes() == PATCHED_FILES["pkg/changed.py"]
    assert not (site / "pkg/gone.py").exists() and not (site / "pkg-1.0.dist-info").exists()
    # What pip uninstall removes: every RECORD row exists, nothing of the package is left unlisted.
    listed = {row.path for row in after.rows if not row.path.startswith("../")}
    on_disk = {str(p.relative_to(site)) for p in site.rglob("*") if p.is_file()}
    assert on_disk == listed


def test_check_base_accepts_the_pinned_stock_install(site, tmp_path):
    delta.check_base(base_of(site), upstream_rows=stock_rows(tmp_path), upstream_version="1.0")


def test_check_base_refuses_another_version(site, tmp_path):
    with pytest.raises(ImageError, match="pkg 1.0 installed; this delta layer is made for the pinned stock 1.1"):
        delta.check_base(base_of(site), upstream_rows=stock_rows(tmp_path), upstream_version="1.1")


def test_check_base_refuses_modified_files(site, tmp_path):
    rows = stock_rows(tmp_path)
    rows = [records.row_for(r.path, b"other") if r.path == "pkg/same.py" else r for r in rows]
    with pytest.raises(ImageError, match=r"not the pinned wheel: 1 file\(s\) differ.*pkg/same.py"):
        delta.check_base(base_of(site), upstream_rows=rows, upstream_version="1.0")


def test_check_base_refuses_an_editable_install(site, tmp_path):
    base = base_of(site)
    editable = records.Installed(**{**base.__dict__, "direct_url": {"url": "file:///sgl-workspace/sglang/python",
                                                                      "dir_info": {"editable": True}}})
    with pytest.raises(ImageError, match="editable/source install .*/sgl-workspace/sglang.*--mode wheel"):
        delta.check_base(editable, upstream_rows=stock_rows(tmp_path), upstream_version="1.0")


def test_pick_wheel_names_what_is_there(tmp_path):
    (tmp_path / "pkg-1.0-cp312-cp312-linux_x86_64.whl").write_bytes(b"")
    with pytest.raises(ImageError, match="need exactly one cp311 wheel .* found: pkg-1.0-cp312"):
        delta.pick_wheel(tmp_path, python_tag="cp311")


def test_wheel_with_data_directory_is_refused(tmp_path):
    path = tmp_path / "w.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("pkg-1.dist-info/RECORD", "")
        archive.writestr("pkg-1.data/scripts/x", "")
    with zipfile.ZipFile(path) as archive, pytest.raises(ImageError, match="--mode wheel"):
        delta.open_wheel(archive)


@pytest.mark.parametrize(("source", "pyc"), [("a/b.py", f"a/__pycache__/b.{CACHE_TAG}.pyc"),
                                             ("top.py", f"__pycache__/top.{CACHE_TAG}.pyc")])
def test_pyc_paths_round_trip(source, pyc):
    assert records.pyc_for(source, CACHE_TAG) == pyc
    assert records.pyc_source(pyc) == source
    assert records.pyc_source("a/b.py") is None


def test_record_rows_with_commas_round_trip():
    rows = [records.Row('dir/N=1,K=2,[128, 128].json', "sha256=x", "3"), records.Row("a/RECORD")]
    assert records.parse(records.render(rows).decode(), source="RECORD") == rows


@pytest.mark.parametrize(("text", "problem"), [
    ("a,,\nb,c\n", "x/RECORD: line 2: RECORD row ['b', 'c'] does not have 3 fields"),
    ("a,sha256=x,ten\n", "x/RECORD: line 1: size 'ten' of a is not a number"),
    ("a" * 200_000 + ",,\n", "x/RECORD: line 1: not a RECORD"),  # past csv's field size limit
], ids=["fields", "size", "csv"])
def test_a_malformed_record_is_an_image_error_naming_the_file(text, problem):
    with pytest.raises(ImageError) as caught:
        records.parse(text, source="x/RECORD")
    assert str(caught.value).startswith(problem)


def test_a_malformed_installed_record_is_reported_without_a_traceback(tmp_path, monkeypatch, capsys):
    """`forkbuild_runtime check` on an sglang whose RECORD is broken: exit 1, one error line."""
    dist_info = tmp_path / "sglang-1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 1.0\n")
    (dist_info / "RECORD").write_text("sglang/__init__.py,sha256=x,1\nsglang-1.0.dist-info/RECORD\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert runtime_main.main(["check"]) == 1
    assert capsys.readouterr().err == ("forkbuild: error: the installed RECORD of sglang 1.0: line 2: RECORD row "
                                       "['sglang-1.0.dist-info/RECORD'] does not have 3 fields\n")
