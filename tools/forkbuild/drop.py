"""`forkbuild drop NAME`: remove a patch from the series on purpose, the one way a
patch leaves it besides `export --drop`. The file is copied aside first; the
output says what went."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from forkbuild.apply import record_dropped
from forkbuild.config import near_miss
from forkbuild.context import Context
from forkbuild.errors import ConfigError
from forkbuild.export import DEFAULT_TREE, save_aside
from forkbuild.fsutil import write_atomic
from forkbuild.patchfile import read_patch
from forkbuild.series_edit import EntrySpec, quilt_series_text, updated_series_toml


@dataclass(frozen=True, kw_only=True)
class Dropped:
    file: str
    feature: str
    added: int
    removed: int
    saved: Path
    tree_commit: str  # the series work tree's commit of it ("" if none): export would bring it back


def drop_patches(context: Context, names: list[str]) -> list[Dropped]:
    series = context.series
    known = {entry.file: entry for entry in series.patches}
    unknown = [f"{name}: no such patch in series.toml{near_miss(name, known)}" for name in names if name not in known]
    if unknown:
        raise ConfigError(unknown, source="drop")
    infos = {name: read_patch(known[name].path) for name in names}
    saved = save_aside(context, tuple(names))
    specs = [EntrySpec(file=entry.file, feature=entry.feature, upstream=entry.upstream_status)
             for entry in series.patches if entry.file not in names]
    # series.toml first: a kill after it leaves an unlisted file (check names it), never a listed missing one.
    write_atomic(series.path, updated_series_toml(series.path.read_text(), specs))
    for name in names:
        known[name].path.unlink(missing_ok=True)
    write_atomic(series.patches_dir / "series", quilt_series_text(spec.file for spec in specs))
    commits = record_dropped(context.series_dir / DEFAULT_TREE, names)
    return [Dropped(file=name, feature=known[name].feature, added=infos[name].added, removed=infos[name].removed,
                    saved=saved, tree_commit=commits.get(name, "")) for name in names]
