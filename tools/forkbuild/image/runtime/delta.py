"""Plan a `delta` layer: the files a patched wheel changes relative to the stock
wheel installed in the base, with the installed metadata rewritten so pip sees
the patched version (`pip show`, `pip check`, `pip uninstall` stay consistent).

Runs in the image build's `delta-plan` stage, inside the base, so it reads the
RECORD pip actually wrote there. Output (under --out):
  root/<site-packages>/...  changed and added files, the renamed .dist-info
                            with the rewritten installed RECORD
  remove                    NUL-separated absolute paths to delete (old
                            .dist-info, files the series deletes, their .pyc)
  compile                   newline-separated absolute paths of .py to byte-compile
Standard library only (runs inside images).
"""

from __future__ import annotations

import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import records
from .errors import ImageError
from .installed import Installed

# Files pip writes into a .dist-info that the wheel does not carry: kept.
# direct_url.json is left out: it names the stock wheel file, and pip
# installing the patched wheel from --find-links writes none either.
INSTALLER_FILES = ("INSTALLER", "REQUESTED")


class DeltaRefused(ImageError):
    """This base cannot take a delta layer."""


@dataclass(frozen=True)
class Wheel:
    dist_info: str
    rows: dict[str, records.Row]
    read: Callable[[str], bytes]


@dataclass(frozen=True)
class Delta:
    old_dist_info: str
    new_dist_info: str
    files: dict[str, bytes]
    remove: tuple[str, ...]
    compile: tuple[str, ...]


def open_wheel(archive: zipfile.ZipFile) -> Wheel:
    tops = {name.split("/", 1)[0] for name in archive.namelist()}
    dist_infos = sorted(top for top in tops if top.endswith(".dist-info"))
    if len(dist_infos) != 1:
        raise DeltaRefused(f"{archive.filename}: expected one .dist-info, found {dist_infos}")
    if any(top.endswith(".data") for top in tops):
        raise DeltaRefused(f"{archive.filename} has a .data directory; a delta layer cannot place it: use --mode wheel")
    record = f"{dist_infos[0]}/RECORD"
    try:
        text = archive.read(record).decode("utf-8")
    except KeyError:
        raise DeltaRefused(f"{archive.filename} has no {record}: not a valid wheel") from None
    except UnicodeDecodeError as error:
        raise DeltaRefused(f"{archive.filename}: {record} is not UTF-8: {error}") from None
    rows = records.parse(text, source=f"{archive.filename}: {record}")
    return Wheel(dist_info=dist_infos[0], rows={row.path: row for row in rows}, read=archive.read)


def _content(rows, dist_info: str) -> dict[str, str]:
    """path -> hash of the package files (no .dist-info, scripts or hashless .pyc rows)."""
    return {row.path: row.hash for row in rows
            if row.hash and not row.path.startswith((f"{dist_info}/", "../"))}


def check_base(base: Installed, *, upstream_rows: list[records.Row], upstream_version: str) -> None:
    """Refuse a base whose installed sglang is not exactly the pinned stock wheel."""
    hint = "build it on the stock base (`forkbuild build-base --stock`) or use --mode wheel"
    if base.version != upstream_version:
        raise DeltaRefused(f"the base has {base.name} {base.version} installed; this delta layer is made for the "
                           f"pinned stock {upstream_version} wheel: {hint}")
    if base.editable:
        where = (base.direct_url or {}).get("url", "a source tree")
        raise DeltaRefused(f"the base's {base.name} {base.version} is an editable/source install ({where}), not the "
                           f"pinned wheel in site-packages (the official lmsysorg/sglang images are like this): {hint}")
    upstream_dist_info = next(row.path.split("/", 1)[0] for row in upstream_rows if ".dist-info/" in row.path)
    installed, pinned = _content(base.rows, base.dist_info), _content(upstream_rows, upstream_dist_info)
    differ = sorted(path for path in installed.keys() | pinned.keys() if installed.get(path) != pinned.get(path))
    if differ:
        raise DeltaRefused(f"the base's {base.name} {base.version} is not the pinned wheel: {len(differ)} file(s) "
                           f"differ from its RECORD, e.g. {', '.join(differ[:5])}: {hint}")


def plan(base: Installed, wheel: Wheel, *, cache_tag: str) -> Delta:
    """The delta that turns the installed stock wheel into the patched wheel."""
    stock, patched = _content(base.rows, base.dist_info), _content(wheel.rows.values(), wheel.dist_info)
    changed = sorted(path for path, digest in patched.items() if stock.get(path) != digest)
    removed = sorted(set(stock) - set(patched))
    files = {path: wheel.read(path) for path in changed}
    new = wheel.dist_info
    for path in sorted(wheel.rows):
        if path.startswith(f"{new}/") and path != f"{new}/RECORD":
            files[path] = wheel.read(path)
    present = {row.path for row in base.rows}
    for name in INSTALLER_FILES:
        if f"{base.dist_info}/{name}" in present:
            files[f"{new}/{name}"] = base.read(f"{base.dist_info}/{name}")
    files[f"{new}/RECORD"] = records.render(_record_rows(base, files=files, removed=set(removed),
                                                          new_dist_info=new, cache_tag=cache_tag))
    gone = {path for path in removed} | {row.path for row in base.rows if records.pyc_source(row.path) in removed}
    return Delta(old_dist_info=base.dist_info, new_dist_info=new, files=files,
                 remove=(base.dist_info, *sorted(gone)),
                 compile=tuple(path for path in changed if path.endswith(".py")))


def _record_rows(base: Installed, *, files: dict[str, bytes], removed: set[str], new_dist_info: str,
                 cache_tag: str) -> list[records.Row]:
    """The installed RECORD after the delta: the base's rows in order, changed
    files rehashed, removed ones (and their .pyc) dropped, the old .dist-info
    replaced by the new one; added modules get the .pyc row pip would write."""
    rows, listed = [], set()
    for row in base.rows:
        if row.path.startswith(f"{base.dist_info}/") or row.path in removed or records.pyc_source(row.path) in removed:
            continue
        rows.append(records.row_for(row.path, files[row.path]) if row.path in files else row)
        listed.add(row.path)
    for path in sorted(files):
        if path in listed or path.startswith(f"{new_dist_info}/"):
            continue
        rows.append(records.row_for(path, files[path]))
        if path.endswith(".py"):
            rows.append(records.Row(records.pyc_for(path, cache_tag)))
    for path in sorted(files):
        if path.startswith(f"{new_dist_info}/") and path != f"{new_dist_info}/RECORD":
            rows.append(records.row_for(path, files[path]))
    rows.append(records.Row(f"{new_dist_info}/RECORD"))
    return rows


def write(delta: Delta, *, site: Path, out: Path) -> None:
    root = out / "root" / site.relative_to(site.anchor)
    for relative, data in delta.files.items():
        target = root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    (out / "remove").write_bytes(b"".join(str(site / path).encode() + b"\0" for path in delta.remove))
    (out / "compile").write_text("".join(f"{site / path}\n" for path in delta.compile))


def pick_wheel(wheels: Path, *, python_tag: str) -> Path:
    found = sorted(wheels.glob(f"*-{python_tag}-*.whl"))
    if len(found) != 1:
        available = ", ".join(path.name for path in sorted(wheels.glob("*.whl"))) or "none"
        raise DeltaRefused(f"need exactly one {python_tag} wheel in {wheels} for this base's Python "
                           f"{sys.version_info[0]}.{sys.version_info[1]}; found: {available}")
    return found[0]


def main(*, wheels: Path, upstream_records: Path, upstream_version: str, out: Path) -> None:
    from .installed import installed

    python_tag = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    base = installed("sglang")
    upstream_record = upstream_records / f"{python_tag}.RECORD"
    if not upstream_record.is_file():
        raise DeltaRefused(f"no pinned {python_tag} wheel RECORD in the build context ({upstream_record})")
    upstream_rows = records.parse(upstream_record.read_text(), source=str(upstream_record))
    check_base(base, upstream_rows=upstream_rows, upstream_version=upstream_version)
    wheel_path = pick_wheel(wheels, python_tag=python_tag)
    with zipfile.ZipFile(wheel_path) as archive:
        delta = plan(base, open_wheel(archive), cache_tag=sys.implementation.cache_tag)
    write(delta, site=base.site, out=out)
    print(f"delta for {wheel_path.name} over {base.name} {base.version} in {base.site}: "
          f"{len(delta.compile)} module(s) to compile, {len(delta.files)} file(s), {len(delta.remove)} removal(s)")
