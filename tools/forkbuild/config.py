"""series.toml, parsed once into frozen dataclasses and validated as a whole.

Validation collects every problem it can find before raising, and names the
key (and its line) of each, with a "perhaps you meant" for near misses.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Iterable, Mapping

from forkbuild.errors import ConfigError
from forkbuild.guards import GUARD_TYPES, check_value

UPSTREAM_SOURCES = ("wheel", "git")
UPSTREAM_STATUSES = ("local", "submitted", "upstreamed")
GUARD_PREFIX = "DSV41_"


@dataclass(frozen=True, kw_only=True)
class GitPin:
    url: str
    ref: str = ""
    commit: str = ""


@dataclass(frozen=True, kw_only=True)
class WheelPin:
    python_tag: str
    filename: str
    sha256: str
    url: str = ""


@dataclass(frozen=True, kw_only=True)
class Upstream:
    name: str
    version: str
    package_root: str
    source: str
    git: GitPin | None
    wheels: tuple[WheelPin, ...]

    @property
    def tag(self) -> str:
        """The cache repository's tag for this upstream version."""
        return f"upstream/{self.version}"

    def wheel_for(self, python_tag: str) -> WheelPin:
        for pin in self.wheels:
            if pin.python_tag == python_tag:
                return pin
        known = ", ".join(pin.python_tag for pin in self.wheels) or "none"
        raise ConfigError([f"upstream.wheels: no wheel pinned for {python_tag!r} (pinned: {known})"])


@dataclass(frozen=True, kw_only=True)
class Guard:
    env: str
    type: str
    default: str
    feature: str
    description: str = ""


@dataclass(frozen=True, kw_only=True)
class Feature:
    name: str
    description: str
    requires: tuple[str, ...] = ()
    conflicts: tuple[str, ...] = ()
    guards: tuple[Guard, ...] = ()


@dataclass(frozen=True, kw_only=True)
class PatchEntry:
    file: str
    feature: str
    path: Path
    upstream_status: str = "local"
    unguarded: str = ""


@dataclass(frozen=True, kw_only=True)
class Variant:
    name: str
    description: str
    features: tuple[str, ...]
    env: Mapping[str, str]


@dataclass(frozen=True, kw_only=True)
class Series:
    path: Path
    name: str
    default_variant: str
    upstream: Upstream
    features: Mapping[str, Feature]
    patches: tuple[PatchEntry, ...]
    variants: Mapping[str, Variant]
    runtime_env: Mapping[str, str] = field(default_factory=dict)

    @property
    def root(self) -> Path:
        return self.path.parent

    @property
    def patches_dir(self) -> Path:
        return self.root / "patches"

    def variant(self, name: str) -> Variant:
        if name not in self.variants:
            raise ConfigError([f"unknown variant {name!r}{_near_miss(name, self.variants)}"], source=str(self.path))
        return self.variants[name]

    def patches_for(self, variant: str) -> tuple[PatchEntry, ...]:
        features = set(self.variant(variant).features)
        return tuple(entry for entry in self.patches if entry.feature in features)

    def guards_for(self, features: Iterable[str]) -> tuple[Guard, ...]:
        return tuple(guard for name in features for guard in self.features[name].guards)

    def all_guards(self) -> tuple[Guard, ...]:
        return self.guards_for(self.features)

    def content_hash(self, variant: str) -> str:
        """sha256 of everything a variant's build contains: pin, features, env, patch bytes."""
        chosen = self.variant(variant)
        identity = {
            "upstream": {
                "name": self.upstream.name,
                "version": self.upstream.version,
                "source": self.upstream.source,
                "git": self.upstream.git and [self.upstream.git.url, self.upstream.git.commit],
                "wheels": sorted(pin.sha256 for pin in self.upstream.wheels),
            },
            "variant": chosen.name,
            "features": sorted(chosen.features),
            "guards": [[g.env, g.type, g.default] for g in self.guards_for(chosen.features)],
            "env": dict(sorted(chosen.env.items())),
            "runtime_env": dict(sorted(self.runtime_env.items())),
            "patches": [[p.file, p.feature, _sha256(p.path)] for p in self.patches_for(variant)],
        }
        return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _near_miss(name: str, known: Iterable[str]) -> str:
    matches = difflib.get_close_matches(name, list(known), n=1)
    return f" (perhaps you meant {matches[0]!r}?)" if matches else ""


class _Problems:
    """Collects problems, each located by the key path and the line it sits on."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()
        self.items: list[str] = []

    def _table_start(self, key: str) -> int:
        """Index of the line after the header of the innermost table `key` lies in."""
        parts = re.sub(r"\[\d+\]", "", key).split(".")
        for end in range(len(parts), 0, -1):
            header = re.compile(r"^\s*\[\[?\s*" + re.escape(".".join(parts[:end])) + r"\s*\]\]?\s*(#.*)?$")
            for number, line in enumerate(self.lines):
                if header.search(line):
                    return number
        return 0

    def line_of(self, needle: str, *, key: str = "") -> int | None:
        # tomllib keeps no positions: find the quoted value or the `key =` line by
        # text, searching from the header of the table the key lies in.
        start = self._table_start(key) if key else 0
        candidates = [needle] + ([needle.rsplit(".", 1)[-1]] if "." in needle and "[" not in needle else [])
        for candidate in candidates:
            escaped = re.escape(candidate)
            patterns = (
                re.compile(r"^\s*\[\[?\s*" + escaped + r"\s*\]\]?\s*(#.*)?$"),
                re.compile(r"[\"']" + escaped + r"[\"']"),
                re.compile(r"(^|[{,])\s*\"?" + escaped + r"\"?\s*="),
            )
            for pattern in patterns:
                for offset in (start, 0):
                    for number, line in enumerate(self.lines[offset:], start=offset + 1):
                        if pattern.search(line):
                            return number
        return None

    def add(self, key: str, message: str, *, near: str | None = None) -> None:
        line = self.line_of(near or key, key=key)
        where = f"{key} (line {line})" if line else key
        self.items.append(f"{where}: {message}")


_KEYS = {
    "": {"series", "upstream", "features", "patches", "variants", "runtime"},
    "series": {"name", "default_variant"},
    "upstream": {"name", "version", "package_root", "source", "git", "wheels"},
    "upstream.git": {"url", "ref", "commit"},
    "upstream.wheels": {"python_tag", "filename", "sha256", "url"},
    "features.*": {"description", "requires", "conflicts", "guards"},
    "features.*.guards": {"env", "type", "default", "description"},
    "patches": {"file", "feature", "upstream", "unguarded"},
    "variants.*": {"description", "features", "env"},
    "runtime": {"env"},
}


def _check_keys(problems: _Problems, table: Mapping[str, Any], kind: str, where: str) -> None:
    allowed = _KEYS[kind]
    for key in table:
        if key not in allowed:
            problems.add(f"{where}.{key}".lstrip("."), f"unknown key{_near_miss(key, allowed)}", near=key)


def _string_list(problems: _Problems, value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        problems.add(where, "must be an array of strings")
        return ()
    return tuple(value)


def _parse_upstream(problems: _Problems, raw: Mapping[str, Any]) -> Upstream:
    _check_keys(problems, raw, "upstream", "upstream")
    for key in ("name", "version", "package_root"):
        if not isinstance(raw.get(key), str) or not raw.get(key):
            problems.add(f"upstream.{key}", "is required (a non-empty string)", near="upstream")
    source = raw.get("source", "wheel")
    if source not in UPSTREAM_SOURCES:
        problems.add("upstream.source", f"must be one of {UPSTREAM_SOURCES}, not {source!r}")
    git = None
    if "git" in raw:
        _check_keys(problems, raw["git"], "upstream.git", "upstream.git")
        git = GitPin(url=raw["git"].get("url", ""), ref=raw["git"].get("ref", ""), commit=raw["git"].get("commit", ""))
    wheels = []
    for index, pin in enumerate(raw.get("wheels", [])):
        _check_keys(problems, pin, "upstream.wheels", f"upstream.wheels[{index}]")
        if not re.fullmatch(r"[0-9a-f]{64}", pin.get("sha256", "")):
            problems.add(f"upstream.wheels[{index}].sha256", "must be 64 lowercase hex digits", near="sha256")
        wheels.append(WheelPin(python_tag=pin.get("python_tag", ""), filename=pin.get("filename", ""),
                               sha256=pin.get("sha256", ""), url=pin.get("url", "")))
    if source == "wheel" and not wheels:
        problems.add("upstream.wheels", "source = 'wheel' needs at least one [[upstream.wheels]] pin", near="upstream")
    if source == "git" and not (git and git.url and git.commit):
        problems.add("upstream.git", "source = 'git' needs url and commit", near="upstream")
    return Upstream(name=raw.get("name", ""), version=raw.get("version", ""), package_root=raw.get("package_root", ""),
                    source=source, git=git, wheels=tuple(wheels))


def _parse_guard(problems: _Problems, raw: Any, *, feature: str, where: str) -> Guard | None:
    if not isinstance(raw, dict):
        problems.add(where, "must be a table {env, type, default}", near="guards")
        return None
    _check_keys(problems, raw, "features.*.guards", where)
    env, guard_type, default = raw.get("env", ""), raw.get("type", ""), raw.get("default")
    if not env.startswith(GUARD_PREFIX):
        problems.add(f"{where}.env", f"{env!r}: guard variables start with {GUARD_PREFIX}", near=env or "guards")
    if guard_type not in GUARD_TYPES:
        problems.add(f"{where}.type", f"{guard_type!r} is not one of {GUARD_TYPES}", near=env or "guards")
    if not isinstance(default, str):
        problems.add(f"{where}.default", "is required, as a string (the env value)", near=env or "guards")
        default = ""
    elif guard_type in GUARD_TYPES:
        try:
            check_value(guard_type, default)
        except ValueError as error:
            problems.add(f"{where}.default", str(error), near=env)
    return Guard(env=env, type=guard_type, default=default, feature=feature, description=raw.get("description", ""))


def _parse_features(problems: _Problems, raw: Mapping[str, Any]) -> dict[str, Feature]:
    features = {}
    for name, table in raw.items():
        where = f"features.{name}"
        _check_keys(problems, table, "features.*", where)
        guards = [_parse_guard(problems, guard, feature=name, where=f"{where}.guards[{index}]")
                  for index, guard in enumerate(table.get("guards", []))]
        features[name] = Feature(
            name=name,
            description=table.get("description", ""),
            requires=_string_list(problems, table.get("requires", []), f"{where}.requires"),
            conflicts=_string_list(problems, table.get("conflicts", []), f"{where}.conflicts"),
            guards=tuple(guard for guard in guards if guard),
        )
    return features


def _parse_patches(problems: _Problems, raw: list[Any], patches_dir: Path) -> list[PatchEntry]:
    entries = []
    for index, table in enumerate(raw):
        where = f"patches[{index}]"
        _check_keys(problems, table, "patches", where)
        file = table.get("file", "")
        if not file or Path(file).name != file:
            problems.add(f"{where}.file", f"{file!r} must be a plain file name inside patches/", near=file or "patches")
        status = table.get("upstream", "local")
        if status not in UPSTREAM_STATUSES:
            problems.add(f"{where}.upstream", f"{status!r} is not one of {UPSTREAM_STATUSES}", near=file)
        entries.append(PatchEntry(file=file, feature=table.get("feature", ""), path=patches_dir / file,
                                  upstream_status=status, unguarded=table.get("unguarded", "")))
    return entries


def _parse_variants(problems: _Problems, raw: Mapping[str, Any]) -> dict[str, Variant]:
    variants = {}
    for name, table in raw.items():
        where = f"variants.{name}"
        _check_keys(problems, table, "variants.*", where)
        env = table.get("env", {})
        if not all(isinstance(value, str) for value in env.values()):
            problems.add(f"{where}.env", "values must be strings (they become environment variables)")
        variants[name] = Variant(name=name, description=table.get("description", ""),
                                 features=_string_list(problems, table.get("features", []), f"{where}.features"),
                                 env=MappingProxyType({key: str(value) for key, value in env.items()}))
    return variants


def _check_references(problems: _Problems, series: Series) -> None:
    features = series.features
    for name, feature in features.items():
        for relation in ("requires", "conflicts"):
            for other in getattr(feature, relation):
                if other not in features:
                    problems.add(f"features.{name}.{relation}", f"unknown feature {other!r}{_near_miss(other, features)}", near=other)
    for index, entry in enumerate(series.patches):
        if entry.feature not in features:
            problems.add(f"patches[{index}].feature", f"unknown feature {entry.feature!r}{_near_miss(entry.feature, features)}",
                         near=entry.file)
    if series.default_variant not in series.variants:
        problems.add("series.default_variant",
                     f"unknown variant {series.default_variant!r}{_near_miss(series.default_variant, series.variants)}")


def _check_patch_files(problems: _Problems, series: Series) -> None:
    seen: dict[str, int] = {}
    for index, entry in enumerate(series.patches):
        if entry.file in seen:
            problems.add(f"patches[{index}].file", f"{entry.file} is already listed as patches[{seen[entry.file]}]", near=entry.file)
        seen.setdefault(entry.file, index)
        if entry.file and not entry.path.is_file():
            problems.add(f"patches[{index}].file", f"patches/{entry.file} does not exist", near=entry.file)
    if series.patches_dir.is_dir():
        for path in sorted(series.patches_dir.glob("*.patch")):
            if path.name not in seen:
                problems.add("patches", f"patches/{path.name} is not listed in series.toml (add a [[patches]] entry or delete it)")


def _requires_cycles(features: Mapping[str, Feature]) -> list[list[str]]:
    cycles, state = [], {}

    def visit(name: str, stack: list[str]) -> None:
        state[name] = "open"
        for other in features[name].requires:
            if other not in features:
                continue
            if state.get(other) == "open":
                cycles.append(stack[stack.index(other):] + [other])
            elif other not in state:
                visit(other, stack + [other])
        state[name] = "done"

    for name in features:
        if name not in state:
            visit(name, [name])
    return cycles


def _check_variants(problems: _Problems, series: Series) -> None:
    guard_owner = {guard.env: guard for guard in series.all_guards()}
    for name, variant in series.variants.items():
        chosen = set(variant.features)
        for feature_name in variant.features:
            feature = series.features.get(feature_name)
            if feature is None:
                problems.add(f"variants.{name}.features", f"unknown feature {feature_name!r}{_near_miss(feature_name, series.features)}",
                             near=f"variants.{name}")
                continue
            for needed in feature.requires:
                if needed not in chosen:
                    problems.add(f"variants.{name}.features", f"{feature_name} requires {needed}, which the variant leaves out",
                                 near=f"variants.{name}")
            for other in feature.conflicts:
                if other in chosen:
                    problems.add(f"variants.{name}.features", f"{feature_name} conflicts with {other}; a variant holds one of them",
                                 near=f"variants.{name}")
        for env, value in variant.env.items():
            guard = guard_owner.get(env)
            if guard is None:
                if env.startswith(GUARD_PREFIX) and env not in series.runtime_env:
                    problems.add(f"variants.{name}.env.{env}", f"not the guard of any feature{_near_miss(env, guard_owner)}", near=env)
                continue
            if guard.feature not in chosen:
                problems.add(f"variants.{name}.env.{env}", f"guard of {guard.feature}, which variant {name} leaves out", near=env)
            try:
                check_value(guard.type, value)
            except ValueError as error:
                problems.add(f"variants.{name}.env.{env}", str(error), near=env)


def parse_series(text: str, *, path: Path) -> Series:
    problems = _Problems(text)
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError([f"not valid TOML: {error}"], source=str(path)) from error
    _check_keys(problems, raw, "", "")
    meta = raw.get("series", {})
    _check_keys(problems, meta, "series", "series")
    runtime = raw.get("runtime", {})
    _check_keys(problems, runtime, "runtime", "runtime")
    if "upstream" not in raw:
        problems.add("upstream", "the [upstream] table is required")
    series = Series(
        path=path,
        name=meta.get("name", path.parent.name),
        default_variant=meta.get("default_variant", ""),
        upstream=_parse_upstream(problems, raw.get("upstream", {})),
        features=MappingProxyType(_parse_features(problems, raw.get("features", {}))),
        patches=tuple(_parse_patches(problems, raw.get("patches", []), path.parent / "patches")),
        variants=MappingProxyType(_parse_variants(problems, raw.get("variants", {}))),
        runtime_env=MappingProxyType({key: str(value) for key, value in runtime.get("env", {}).items()}),
    )
    _check_references(problems, series)
    _check_patch_files(problems, series)
    for cycle in _requires_cycles(series.features):
        problems.add(f"features.{cycle[0]}.requires", "cycle: " + " -> ".join(cycle))
    _check_variants(problems, series)
    if problems.items:
        raise ConfigError(problems.items, source=str(path))
    return series


def load_series(path: Path) -> Series:
    try:
        text = path.read_text()
    except OSError as error:
        raise ConfigError([f"cannot read: {error.strerror}"], source=str(path)) from error
    return parse_series(text, path=path.resolve())
