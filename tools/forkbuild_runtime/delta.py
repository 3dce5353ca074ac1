"""Plan a `delta` layer, inside the base (it reads the RECORD pip wrote there): the files a
patched wheel changes over the installed stock wheel, and the installed metadata rewritten so
pip sees the patched version (`pip show`, `pip check`, `pip uninstall` stay consistent).
Output under --out: root/<site-packages>/... (changed and added files, the renamed .dist-info
with the rewritten RECORD); `remove` (NUL-separated absolute paths: the old .dist-info, files
the series deletes and their .pyc); `compile` (the .py files to byte-compile, one a line).
"""

from __future__ import annotations

import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from . import ImageError, records

# Files pip writes into a .dist-info that the wheel does not carry: kept. direct_url.json is
# left out: it names the stock wheel file (pip installing from --find-links writes none).
INSTALLER_FILES = ("INSTALLER", "REQUESTED")


@dataclass(frozen=True)
class Delta:
    files: dict[str, bytes]
    remove: tuple[str, ...]
    compile: tuple[str, ...]


def open_wheel(archive: zipfile.ZipFile) -> tuple[str, list[records.Row]]:
    """The wheel's .dist-info and RECORD rows; refused where a delta layer cannot place it."""
    tops = {name.split("/", 1)[0] for name in archive.namelist()}
    dist_infos = sorted(top for top in tops if top.endswith(".dist-info"))
    if len(dist_infos) != 1:
        raise ImageError(f"{archive.filename}: expected one .dist-info, found {dist_infos}")
    if any(top.endswith(".data") for top in tops):
        raise ImageError(f"{archive.filename} has a .data directory; a delta layer cannot place it: use --mode wheel")
    record = f"{dist_infos[0]}/RECORD"
    try:
        text = archive.read(record).decode("utf-8")
    except KeyError:
        raise ImageError(f"{archive.filename} has no {record}: not a valid wheel") from None
    except UnicodeDecodeError as error:
        raise ImageError(f"{archive.filename}: {record} is not UTF-8: {error}") from None
    return dist_infos[0], records.parse(text, source=f"{archive.filename}: {record}")


def _content(rows, dist_info: str) -> dict[str, str]:
    """path -> hash of the package files (no .dist-info, scripts or hashless .pyc rows)."""
    return {row.path: row.hash for row in rows
            if row.hash and not row.path.startswith((f"{dist_info}/", "../"))}


def check_base(base: records.Installed, *, upstream_rows: list[records.Row], upstream_version: str) -> None:
    """Refuse a base whose installed sglang is not exactly the pinned stock wheel."""
    hint = "build it on the stock base (`forkbuild build-base --stock`) or use --mode wheel"
    if base.version != upstream_version:
        raise ImageError(f"the base has {base.name} {base.version} installed; this delta layer is made for the "
                         f"pinned stock {upstream_version} wheel: {hint}")
    # An editable or source-tree install (the official image's /sgl-workspace/sglang).
    direct_url = base.direct_url or {}
    if direct_url.get("dir_info", {}).get("editable") or f"{base.name}/__init__.py" not in {r.path for r in base.rows}:
        where = direct_url.get("url", "a source tree")
        raise ImageError(f"the base's {base.name} {base.version} is an editable/source install ({where}), not the "
                         f"pinned wheel in site-packages (the official lmsysorg/sglang images are like this): {hint}")
    upstream_dist_info = next(row.path.split("/", 1)[0] for row in upstream_rows if ".dist-info/" in row.path)
    installed, pinned = _content(base.rows, base.dist_info), _content(upstream_rows, upstream_dist_info)
    differ = sorted(path for path in installed.keys() | pinned.keys() if installed.get(path) != pinned.get(path))
    if differ:
        raise ImageError(f"the base's {base.name} {base.version} is not the pinned wheel: {len(differ)} file(s) "
                         f"differ from its RECORD, e.g. {', '.join(differ[:5])}: {hint}")


def plan(base: records.Installed, wheel: zipfile.ZipFile, *, cache_tag: str) -> Delta:
    """The delta that turns the installed stock wheel into the patched `wheel`."""
    new, rows = open_wheel(wheel)
    stock, patched = _content(base.rows, base.dist_info), _content(rows, new)
    changed = sorted(path for path, digest in patched.items() if stock.get(path) != digest)
    removed = set(stock) - set(patched)
    files = {path: wheel.read(path) for path in changed}
    files.update((row.path, wheel.read(row.path)) for row in sorted(rows, key=lambda row: row.path)
                 if row.path.startswith(f"{new}/") and row.path != f"{new}/RECORD")
    present = {row.path for row in base.rows}
    files.update((f"{new}/{name}", (base.site / base.dist_info / name).read_bytes()) for name in INSTALLER_FILES
                 if f"{base.dist_info}/{name}" in present)
    files[f"{new}/RECORD"] = records.render(_record_rows(base, files=files, removed=removed, new_dist_info=new,
                                                         cache_tag=cache_tag))
    gone = removed | {row.path for row in base.rows if records.pyc_source(row.path) in removed}
    return Delta(files=files, remove=(base.dist_info, *sorted(gone)),
                 compile=tuple(path for path in changed if path.endswith(".py")))


def _record_rows(base: records.Installed, *, files: dict[str, bytes], removed: set[str], new_dist_info: str,
                 cache_tag: str) -> list[records.Row]:
    """The installed RECORD after the delta: the base's rows in order, changed files rehashed,
    removed ones (and their .pyc) dropped, the old .dist-info's rows replaced by the new one's;
    added modules get the .pyc row pip would write."""
    rows, listed = [], set()
    for row in base.rows:
        if row.path.startswith(f"{base.dist_info}/") or row.path in removed or records.pyc_source(row.path) in removed:
            continue
        rows.append(records.row_for(row.path, files[row.path]) if row.path in files else row)
        listed.add(row.path)
    for path in sorted(set(files) - listed):
        if not path.startswith(f"{new_dist_info}/"):
            rows.append(records.row_for(path, files[path]))
            if path.endswith(".py"):
                rows.append(records.Row(records.pyc_for(path, cache_tag)))
    rows += [records.row_for(path, files[path]) for path in sorted(files)
             if path.startswith(f"{new_dist_info}/") and path != f"{new_dist_info}/RECORD"]
    return [*rows, records.Row(f"{new_dist_info}/RECORD")]


def pick_wheel(wheels: Path, *, python_tag: str) -> Path:
    found = sorted(wheels.glob(f"*-{python_tag}-*.whl"))
    if len(found) != 1:
        available = ", ".join(path.name for path in sorted(wheels.glob("*.whl"))) or "none"
        raise ImageError(f"need exactly one {python_tag} wheel in {wheels} for this base's Python "
                         f"{sys.version_info[0]}.{sys.version_info[1]}; found: {available}")
    return found[0]


def write(delta: Delta, *, site: Path, out: Path) -> None:
    root = out / "root" / site.relative_to(site.anchor)
    for relative, data in delta.files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_bytes(data)
    (out / "remove").write_bytes(b"".join(str(site / path).encode() + b"\0" for path in delta.remove))
    (out / "compile").write_text("".join(f"{site / path}\n" for path in delta.compile))


def main(*, wheels: Path, upstream_records: Path, upstream_version: str, out: Path) -> None:
    python_tag = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    base = records.installed("sglang")
    upstream_record = upstream_records / f"{python_tag}.RECORD"
    if not upstream_record.is_file():
        raise ImageError(f"no pinned {python_tag} wheel RECORD in the build context ({upstream_record})")
    check_base(base, upstream_rows=records.parse(upstream_record.read_text(), source=str(upstream_record)),
               upstream_version=upstream_version)
    wheel_path = pick_wheel(wheels, python_tag=python_tag)
    with zipfile.ZipFile(wheel_path) as archive:
        delta = plan(base, archive, cache_tag=sys.implementation.cache_tag)
    write(delta, site=base.site, out=out)
    print(f"delta for {wheel_path.name} over {base.name} {base.version} in {base.site}: "
          f"{len(delta.compile)} module(s) to compile, {len(delta.files)} file(s), {len(delta.remove)} removal(s)")
