"""The runtime manifest every built wheel carries (docs/DESIGN.md, "Runtime manifest"): what a
build contains, as JSON in a fixed key order; the in-image code reads it as plain objects."""

from __future__ import annotations

import hashlib
import json
import zipfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from forkbuild.errors import BuildError
from forkbuild.series.combination import Combination
from forkbuild.series.config import Guard, Series, WheelPin

SCHEMA = 1
PACKAGE_FILE = "_forkbuild_manifest.json"
DIST_INFO_FILE = "forkbuild_manifest.json"


@dataclass(frozen=True, kw_only=True)
class UpstreamRecord:
    name: str
    version: str
    source: str  # "wheel" or "git"
    wheel: str = ""  # the pinned wheel's file name; "" when built from git
    sha256: str = ""
    git_url: str = ""
    commit: str = ""


@dataclass(frozen=True, kw_only=True)
class GuardRecord:
    env: str
    feature: str
    type: str
    default: str


@dataclass(frozen=True, kw_only=True)
class PatchRecord:
    file: str
    feature: str
    sha256: str  # of the patch file the wheel was built from


@dataclass(frozen=True, kw_only=True)
class Manifest:
    """What a build contains; its fields are the JSON keys, in their order (KEYS)."""

    schema: int = SCHEMA
    series: str
    variant: str
    base_variant: str = ""  # the variant whose runtime defaults a combination carries; "" = none
    version: str
    series_hash: str
    upstream: UpstreamRecord
    features: tuple[str, ...]
    guards: tuple[GuardRecord, ...]  # the guards of the features built in
    series_guards: tuple[GuardRecord, ...]  # every guard of the series
    runtime_settings: tuple[str, ...]
    env_defaults: Mapping[str, str] = field(default_factory=dict)
    patches: tuple[PatchRecord, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {key: list(value) if isinstance(value, tuple) else value for key, value in asdict(self).items()}

    def from_pin(self, pin: WheelPin) -> Manifest:
        """The same build's manifest for the wheel made from `pin` (each Python tag's and platform's)."""
        return replace(self, upstream=replace(self.upstream, wheel=pin.filename, sha256=pin.sha256))

    def without_upstream(self) -> dict[str, Any]:
        """What the wheels of one build for several Pythons share."""
        return {key: value for key, value in self.to_json().items() if key != "upstream"}


KEYS = tuple(item.name for item in fields(Manifest))
_RECORDS = {"upstream": UpstreamRecord, "guards": GuardRecord, "series_guards": GuardRecord, "patches": PatchRecord}


def _guard_record(guard: Guard) -> GuardRecord:
    return GuardRecord(env=guard.env, feature=guard.feature, type=guard.type, default=guard.default)


def build_manifest(*, series: Series, variant: Combination, version: str, content_hash: str) -> Manifest:
    """The manifest of `variant` built as `version` (its content hash computed once, by the caller);
    from a release wheel: `from_pin` of it."""
    upstream = series.upstream
    guard_envs = {guard.env for guard in series.all_guards()}
    # Settings: what an image sets that is no guard (MODEL_PATH, TP_SIZE ...).
    settings = tuple(dict.fromkeys([*series.runtime_env, *(key for key in variant.env if key not in guard_envs)]))
    return Manifest(
        series=series.name, variant=variant.name, base_variant=variant.base, version=version,
        series_hash=content_hash,
        upstream=UpstreamRecord(name=upstream.name, version=upstream.version, source=upstream.source,
                                git_url=upstream.git.url if upstream.git else "",
                                commit=upstream.git.commit if upstream.git else ""),
        features=tuple(variant.features),
        guards=tuple(_guard_record(guard) for guard in series.guards_for(variant.features)),
        series_guards=tuple(_guard_record(guard) for guard in series.all_guards()),
        runtime_settings=settings,
        env_defaults={**series.runtime_env, **variant.env},
        patches=tuple(PatchRecord(file=entry.file, feature=entry.feature,
                                  sha256=hashlib.sha256(entry.path.read_bytes()).hexdigest())
                      for entry in variant.patches(series)),
    )


def dumps(manifest: Manifest) -> bytes:
    return (json.dumps(manifest.to_json(), indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def _records(cls: type, items: Any, *, key: str, source: str) -> tuple:
    names = {item.name for item in fields(cls)}
    if not isinstance(items, list):
        raise BuildError(f"{source}: manifest key {key!r} is not a list")
    records = []
    for n, item in enumerate(items):
        if not isinstance(item, dict) or set(item) - names or not all(isinstance(v, str) for v in item.values()):
            raise BuildError(f"{source}: manifest key {key!r}, entry {n}: not a {cls.__name__} "
                             f"(string fields {', '.join(sorted(names))})")
        try:
            records.append(cls(**item))
        except TypeError as error:  # a required field missing
            raise BuildError(f"{source}: manifest key {key!r}, entry {n}: {error}") from error
    return tuple(records)


def parse(data: bytes | str, *, source: str) -> Manifest:
    """A manifest read back; BuildError naming `source` (and the key) when it is not one."""
    try:
        raw = json.loads(data)
    except ValueError as error:
        raise BuildError(f"{source}: not a JSON manifest: {error}") from error
    if not isinstance(raw, dict) or raw.get("schema") != SCHEMA:
        raise BuildError(f"{source}: not a forkbuild manifest of schema {SCHEMA}")
    missing = [key for key in KEYS if key not in raw and key != "base_variant"]  # older manifests lack it
    if missing:
        raise BuildError(f"{source}: manifest lacks {', '.join(missing)}")
    values = {key: raw.get(key, "") for key in KEYS[1:]}
    for key, value in values.items():
        if key in _RECORDS:
            records = _records(_RECORDS[key], [value] if key == "upstream" else value, key=key, source=source)
            values[key] = records[0] if key == "upstream" else records
        elif key == "env_defaults":
            if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
                raise BuildError(f"{source}: manifest key 'env_defaults' is not an object of strings")
        elif key in ("features", "runtime_settings"):
            if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
                raise BuildError(f"{source}: manifest key {key!r} is not a list of strings")
            values[key] = tuple(value)
        elif not isinstance(value, str):
            raise BuildError(f"{source}: manifest key {key!r} is not a string")
    return Manifest(**values)


def read_wheel(path: Path) -> Manifest | None:
    """The manifest in a wheel's .dist-info; None when the wheel has none."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = [name for name in archive.namelist()
                     if name.count("/") == 1 and name.endswith(f".dist-info/{DIST_INFO_FILE}")]
            data = archive.read(names[0]) if len(names) == 1 else None
    except (OSError, zipfile.BadZipFile) as error:
        raise BuildError(f"{path}: cannot read the wheel: {error}") from error
    return None if data is None else parse(data, source=f"{path.name}:{names[0]}")
