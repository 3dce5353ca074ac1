"""`forkbuild new`: a feature's [features.X] table and variant membership in series.toml
(tomlkit keeps comments and layout), validated whole before it is written, and a commit
template with its trailers. A re-run finds the feature as asked and only rewrites the template
(one the person edited is kept)."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

import tomlkit
from tomlkit.items import Table

from forkbuild.context import Context
from forkbuild.errors import ConfigError, ForkbuildError
from forkbuild.io.fsutil import write_atomic
from forkbuild.series.config import (
    FEATURE_NAME,
    GUARD_NAME,
    GUARD_PREFIX,
    Guard,
    Series,
    load_series,
    near_miss,
    parse_series,
)
from forkbuild.series.dep3 import PLACEHOLDERS, TEMPLATE_COMMENT
from forkbuild.series.edit import split_tail
from forkbuild.series.guards import GUARD_TYPES, check_value
from forkbuild.series.layout import WORK_DIR, new_variants
from forkbuild.series.writer import SeriesChange, series_transaction

PATCH_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\.patch")
PATCH_TRAILER = "Patch"  # export names a new patch file after it


@dataclass(frozen=True, kw_only=True)
class NewFeature:
    name: str
    description: str
    guards: tuple[Guard, ...]
    variants: tuple[str, ...]
    requires: tuple[str, ...]
    patch: str  # the patch file export will write
    series_toml: str | None = None  # the new text; None when series.toml already holds it all
    added_to: tuple[str, ...] = ()  # variants that gain the feature now (it has a patch)
    joins: tuple[str, ...] = ()  # variants it joins with its first exported patch (`ported = false` until then)


def parse_guard(spec: str, *, feature: str = "") -> Guard:
    """ENV:TYPE:DEFAULT (the default may itself hold colons, or be empty)."""
    parts = spec.split(":", 2)
    if len(parts) != 3:
        raise ForkbuildError(f"--guard {spec!r}: expected ENV:TYPE:DEFAULT, e.g. {GUARD_PREFIX}MY_FEATURE:switch:0")
    env, guard_type, default = parts
    if not GUARD_NAME.fullmatch(env):
        raise ForkbuildError(f"--guard {spec!r}: {env!r} must be {GUARD_PREFIX} plus upper-case words of letters "
                             "and digits joined by _")
    if guard_type not in GUARD_TYPES:
        raise ForkbuildError(f"--guard {spec!r}: type {guard_type!r} is not one of {', '.join(GUARD_TYPES)}"
                             f"{near_miss(guard_type, GUARD_TYPES)}")
    try:
        check_value(guard_type, default)
    except ValueError as error:
        raise ForkbuildError(f"--guard {spec!r}: default {default!r} does not fit type {guard_type}: {error}") from error
    return Guard(env=env, type=guard_type, default=default, feature=feature)


def plan_new_feature(series: Series, *, name: str, description: str, guards: list[str], variants: list[str],
                     requires: list[str], patch: str | None) -> NewFeature:
    if not FEATURE_NAME.fullmatch(name):
        raise ForkbuildError(f"feature name {name!r}: lower-case letters, digits and _, starting with a letter")
    chosen = tuple(dict.fromkeys(variants or [series.default_variant]))
    for variant in chosen:
        series.variant(variant)  # unknown: ConfigError with "perhaps you meant"
    guard_specs = tuple(parse_guard(spec, feature=name) for spec in guards)
    asked = patch or name.replace("_", "-")
    file = asked if asked.endswith(".patch") else f"{asked}.patch"
    if not PATCH_NAME.fullmatch(file):
        raise ForkbuildError(f"--name {asked!r}: a patch name is a plain file name of letters, digits, '.', '_', '-'")
    owner = next((entry for entry in series.patches if entry.file == file), None)
    if owner is not None:
        raise ForkbuildError(f"patches/{file} is already the patch of feature {owner.feature!r}",
                             hint="name the new patch with --name NAME")
    if (series.patches_dir / file).exists():
        raise ForkbuildError(f"patches/{file} exists (not listed in series.toml)",
                             hint="name the new patch with --name NAME, or move that file away")
    feature = NewFeature(name=name, description=description, guards=guard_specs,
                         variants=chosen, requires=tuple(dict.fromkeys(requires)), patch=file)
    owners = {guard.env: other.name for other in series.features.values() for guard in other.guards if other.name != name}
    taken = [f"--guard {guard.env}: already a guard of feature {owners[guard.env]!r} (a guard belongs to one feature)"
             for guard in feature.guards if guard.env in owners]
    if taken:
        raise ConfigError(taken, source="new", hint="name the new feature's guard differently")
    text = series.path.read_text()
    document = tomlkit.parse(text)
    if name in series.features:  # fine when it is exactly what was asked (a re-run)
        existing = series.features[name]
        asked_guards = [(guard.env, guard.type, guard.default) for guard in feature.guards]
        has = [(guard.env, guard.type, guard.default) for guard in existing.guards]
        differences = []
        if feature.guards and asked_guards != has:
            differences.append(f"guards {has} (asked: {asked_guards})")
        if feature.requires and tuple(feature.requires) != existing.requires:
            differences.append(f"requires {list(existing.requires)} (asked: {list(feature.requires)})")
        if feature.description and feature.description != existing.description:
            differences.append(f"description {existing.description!r}")
        if differences:
            line = next((number for number, row in enumerate(text.splitlines(), start=1)
                         if row.strip() == f"[features.{name}]"), None)
            where = f"features.{name}" + (f" (line {line})" if line else "")
            raise ConfigError([f"{where} exists already with " + "; ".join(differences)], source=str(series.path),
                              hint="change it in series.toml, or give `new` the same guards and requires")
    else:
        _add_feature_table(document, feature)
    # Without a patch the feature waits `ported = false`, in no variant, so that every variant builds as
    # checked; export adds it to `joining` with its first patch. Both texts must be valid series.toml.
    waits = not any(entry.feature == name for entry in series.patches)
    table = document["features"][name]  # type: ignore[index]
    if waits and table.get("ported", True):  # type: ignore[union-attr]
        table["ported"] = False  # type: ignore[index]
    waiting = tomlkit.dumps(document)
    table.pop("ported", None)  # type: ignore[union-attr]
    joining = tuple(variant for variant in chosen if name not in series.variants[variant].features)
    for variant in joining:
        document["variants"][variant].setdefault("features", tomlkit.array()).append(name)  # type: ignore[index,union-attr]
    joined = tomlkit.dumps(document)
    parse_series(joined, path=series.path)  # every problem reported as for any series.toml
    if waits:
        parse_series(waiting, path=series.path)
        feature = replace(feature, joins=joining)
    else:
        feature = replace(feature, added_to=joining)
    new_text = waiting if waits else joined
    return replace(feature, series_toml=None if new_text == text else new_text)


def new_feature(context: Context, **asked) -> tuple[NewFeature, Path, bool]:
    """Plan (plan_new_feature's arguments) and write, in one series transaction; the template's path,
    and whether it was kept as the person edited it (never overwritten then)."""
    with series_transaction(context.series_dir) as transaction:
        series = load_series(context.series_file)  # read under the lock
        feature = plan_new_feature(series, **asked)
        transaction.write(SeriesChange(series_toml=feature.series_toml))
    joins = new_variants(series.root, feature.name)
    if feature.joins:
        joins.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(joins, "".join(f"{variant}\n" for variant in feature.joins))
    template = series.root / WORK_DIR / f"{feature.name}.commit"
    template.parent.mkdir(parents=True, exist_ok=True)
    text = commit_template(feature)
    kept = template.is_file() and template.read_bytes() != text.encode()
    if not kept:
        write_atomic(template, text)
    return feature, template, kept


def _add_feature_table(document: tomlkit.TOMLDocument, feature: NewFeature) -> None:
    """[features.NAME] after the last feature table, before the next section's comments."""
    # Written as text and parsed: the file's own style (inline guard tables, one key a line).
    def quoted(value: str) -> str:
        return tomlkit.string(value).as_string()

    lines = [f"[features.{feature.name}]", f"description = {quoted(feature.description)}", "ported = false"]
    if feature.requires:
        lines.append(f"requires = [{', '.join(quoted(name) for name in feature.requires)}]")
    if feature.guards:
        guards = ", ".join(f"{{ env = {quoted(g.env)}, type = {quoted(g.type)}, default = {quoted(g.default)} }}"
                           for g in feature.guards)
        lines.append(f"guards = [{guards}]")
    table: Table = tomlkit.parse("\n".join(lines) + "\n")["features"][feature.name]
    features = document.get("features")
    if not isinstance(features, Table) or not list(features.keys()):
        document.add("features", tomlkit.table(is_super_table=True))
        document["features"].append(feature.name, table)  # type: ignore[union-attr]
        return
    last = features[list(features.keys())[-1]]
    if isinstance(last, Table):
        head, tail = split_tail(last)
        del last.value.body[len(head):]
        last.add(tomlkit.nl())
        for _, item in tail:
            table.add(item)  # type: ignore[call-overload]  # tomlkit's stub lacks Item; comments and blank lines
    features.append(feature.name, table)


def commit_template(feature: NewFeature) -> str:
    """The message for `git commit -t`: git aborts while the first line is the placeholder."""
    trailers = [f"Feature: {feature.name}", *(f"Guard: {guard.env}" for guard in feature.guards),
                "Forwarded: no", f"{PATCH_TRAILER}: {feature.patch}"]
    guards = ", ".join(f"envs.{guard.env}" for guard in feature.guards) or "no guard (series.toml: unguarded = \"why\")"
    return "\n".join([
        f"{feature.name}: {PLACEHOLDERS[0]}",
        "",
        PLACEHOLDERS[1],
        "",
        *trailers,
        "",
        f"{TEMPLATE_COMMENT}{feature.name}`. Lines starting with '#' are dropped.",
        f"# The patched code reads {guards}.",
        "# Keep the trailers: export files the commit under Feature:, checks Guard:; Forwarded: says",
        "# where it was sent upstream (no, not-needed or the URL: DEP-3; `forkbuild check` needs it),",
        f"# against series.toml and writes it to patches/{feature.patch} (Patch:).",
        "",
    ])
