"""The runtime manifest every built wheel carries (docs/DESIGN.md, "Runtime
manifest"): what a build contains, readable from the installed package.

Built from the parsed series, the variant and the upstream pin; serialised
with a fixed key order so the same inputs give the same bytes.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import json
import zipfile
from pathlib import Path
from typing import Any

from forkbuild.config import Guard, Series, WheelPin
from forkbuild.errors import BuildError
from forkbuild.matrix.combination import Combination, as_combination

SCHEMA = 1
PACKAGE_FILE = "_forkbuild_manifest.json"
DIST_INFO_FILE = "forkbuild_manifest.json"
KEYS = ("schema", "series", "variant", "base_variant", "version", "series_hash", "upstream", "features", "guards",
        "series_guards", "runtime_settings", "env_defaults", "patches")
# Keys manifests written before feature combinations lack: such a manifest still reads.
OPTIONAL_KEYS = ("base_variant",)


def _guard_record(guard: Guard) -> dict[str, str]:
    return {"env": guard.env, "feature": guard.feature, "type": guard.type, "default": guard.default}


def build_manifest(*, series: Series, variant: Combination | str, version: str,
                   pin: WheelPin | None) -> dict[str, Any]:
    """The manifest of `variant` (a Combination or a variant's name) built as `version`
    from `pin` (None: built from git)."""
    chosen = as_combination(series, variant)
    upstream = series.upstream
    guard_envs = {guard.env for guard in series.all_guards()}
    # Settings are the variables an image sets that are not feature guards
    # (MODEL_PATH, TP_SIZE ...): the series' runtime env, then the variant's
    # (a combination's come from its base variant).
    settings = list(dict.fromkeys([*series.runtime_env, *(key for key in chosen.env if key not in guard_envs)]))
    return {
        "schema": SCHEMA,
        "series": series.name,
        "variant": chosen.name,
        "base_variant": chosen.base,
        "version": version,
        "series_hash": chosen.content_hash(series),
        "upstream": {
            "name": upstream.name,
            "version": upstream.version,
            "source": upstream.source,
            "wheel": pin.filename if pin else "",
            "sha256": pin.sha256 if pin else "",
            "git_url": upstream.git.url if upstream.git else "",
            "commit": upstream.git.commit if upstream.git else "",
        },
        "features": list(chosen.features),
        "guards": [_guard_record(guard) for guard in series.guards_for(chosen.features)],
        "series_guards": [_guard_record(guard) for guard in series.all_guards()],
        "runtime_settings": settings,
        "env_defaults": {**series.runtime_env, **chosen.env},
        "patches": [{"file": entry.file, "feature": entry.feature,
                     "sha256": hashlib.sha256(entry.path.read_bytes()).hexdigest()}
                    for entry in chosen.patches(series)],
    }


def dumps(manifest: dict[str, Any]) -> bytes:
    """The manifest file's bytes: key order as built, UTF-8, one trailing newline."""
    return (json.dumps(manifest, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def parse(data: bytes | str, *, source: str) -> dict[str, Any]:
    """A manifest read back; BuildError naming `source` when it is not one."""
    try:
        manifest = json.loads(data)
    except ValueError as error:
        raise BuildError(f"{source}: not a JSON manifest: {error}") from error
    if not isinstance(manifest, dict) or manifest.get("schema") != SCHEMA:
        raise BuildError(f"{source}: not a forkbuild manifest of schema {SCHEMA}")
    missing = [key for key in KEYS if key not in manifest and key not in OPTIONAL_KEYS]
    if missing:
        raise BuildError(f"{source}: manifest lacks {', '.join(missing)}")
    return manifest


def read_installed(package: str = "sglang") -> dict[str, Any] | None:
    """The manifest of the installed `package`; None when it has none (a stock install)."""
    resource = importlib.resources.files(package) / PACKAGE_FILE
    if not resource.is_file():
        return None
    return parse(resource.read_bytes(), source=f"{package}/{PACKAGE_FILE}")


def read_wheel(path: Path) -> dict[str, Any] | None:
    """The manifest in a wheel's .dist-info; None when the wheel has none."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = [name for name in archive.namelist()
                     if name.count("/") == 1 and name.endswith(f".dist-info/{DIST_INFO_FILE}")]
            data = archive.read(names[0]) if len(names) == 1 else None
    except (OSError, zipfile.BadZipFile) as error:
        raise BuildError(f"{path}: cannot read the wheel: {error}") from error
    return None if data is None else parse(data, source=f"{path.name}:{names[0]}")
