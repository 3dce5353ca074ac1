"""The image's build-time check (and `forkbuild-entrypoint check`): the installed sglang is
the manifest's, intact (every RECORD hash), declares exactly the guards of the features built
in, and, with --env-defaults, runs with the variant's ENV defaults and their MXFP8 backend's
package (reported, not failed, on a test base: b12x is in no base forkbuild makes)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from . import ImageError, migration
from .records import DIST_INFO_MANIFEST, MANIFEST, installed, package_dir, read_manifest, verify_record


def run(*, variant: str | None, version: str | None, env_defaults: bool, test_base: bool = False) -> list[str]:
    """The lines of a passing report; raises ImageError listing every problem."""
    dist = installed("sglang")
    package = package_dir("sglang")
    manifest = read_manifest(package)
    problems: list[str] = []
    if manifest.get("version") != dist.version:
        problems.append(f"installed sglang is {dist.version}, its manifest says {manifest.get('version')}")
    if version and dist.version != version:
        problems.append(f"installed sglang is {dist.version}, expected {version}")
    if variant and manifest.get("variant") != variant:
        problems.append(f"the manifest's variant is {manifest.get('variant')!r}, expected {variant!r}")
    if not package.is_relative_to(dist.site):
        problems.append(f"`import sglang` loads {package}, not the installed {dist.site / 'sglang'}")
    dist_manifest = dist.site / dist.dist_info / DIST_INFO_MANIFEST
    if not dist_manifest.is_file() or dist_manifest.read_bytes() != (package / MANIFEST).read_bytes():
        problems.append(f"{dist_manifest} is missing or differs from the package's manifest")
    checked, record_problems = verify_record(dist)
    problems += record_problems
    declared = _declared(package)
    # A feature declares its guards once its patch is in the series (a variant may list one not yet patched).
    patched = {entry["feature"] for entry in manifest.get("patches", [])}
    built = {g["env"]: g for g in manifest.get("guards", []) if g["feature"] in patched}
    problems += [f"guard {env} (feature {g['feature']}) is not declared on sglang.srt.environ.Envs (its generated "
                 "guards module lacks it)" for env, g in built.items() if env not in declared]
    problems += [f"guard {g['env']} is declared but feature {g['feature']} is not built into this variant"
                 for g in manifest.get("series_guards", []) if g["env"] not in built and g["env"] in declared
                 and g["feature"] not in manifest.get("features", [])]
    notes = []
    if env_defaults:
        problems += [f"ENV {key}={os.environ.get(key)!r}, the variant's default is {value!r}"
                     for key, value in manifest.get("env_defaults", {}).items() if os.environ.get(key) != value]
        missing = migration.missing_backend(os.environ, manifest.get("guards", []))
        if missing and test_base:
            notes.append(f"WARNING (test base, allowed): {missing}")
        elif missing:
            problems.append(missing)
    if problems:
        raise ImageError("image check failed:\n" + "\n".join(f"  - {line}" for line in problems))
    return [*notes, f"sglang {dist.version} in {dist.site} (variant {manifest['variant']}, series {manifest['series']})",
            f"RECORD: {checked} files match their hashes",
            f"features: {', '.join(manifest['features']) or '(none)'}",
            f"guards declared: {len(declared)}"]


def _declared(package: Path) -> set[str]:
    """DSV41_* guards on sglang.srt.environ.Envs; environ.py loaded by path (`import sglang` needs torch)."""
    path = package / "srt" / "environ.py"
    spec = importlib.util.spec_from_file_location("_forkbuild_environ", path)
    assert spec and spec.loader  # a .py path always has a source loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {name for name in vars(module.Envs) if name.startswith(migration.PREFIX)}
