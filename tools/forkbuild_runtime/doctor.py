"""`doctor`: the variant, the features built in, the recipe's settings and every guard's
current value (the recipe's `start.sh doctor` "decode:" line); warns loudly about a guard
of a feature this image lacks, an unknown DSV41_* variable, or a value sglang would refuse."""

from __future__ import annotations

import importlib.util
import os
import sys

from . import migration, packages
from .records import installed, package_dir, read_manifest


def report(environ: dict[str, str]) -> tuple[list[str], list[str], list[str]]:
    """(lines, warnings, errors) for the installed build and `environ`."""
    dist = installed("sglang")
    manifest = read_manifest(package_dir("sglang"))

    def get(key: str) -> str:
        return environ.get(key, "-")

    built = manifest["guards"]
    values = {g["env"]: environ.get(g["env"], f"(unset: {g['default']!r})") for g in built}
    lines = [
        f"variant:  {manifest['variant']}  (series {manifest['series']} {manifest['series_hash'][:12]})",
        f"sglang:   {dist.version}  (upstream {manifest['upstream']['version']}, {dist.site})",
        f"features: {', '.join(manifest['features']) or '(none: stock)'}",
        f"model:    {get('MODEL_PATH')}",
        f"parallel: TP={get('TP_SIZE')}  nodes={get('NNODES')} rank={get('NODE_RANK')}  ctx={get('CONTEXT_LENGTH')}  "
        f"util={get('MEM_FRACTION_STATIC')} (head {get('HEAD_MEM_FRACTION_STATIC')})  "
        f"max_running={get('MAX_RUNNING_REQUESTS')}",
        *(f"note:     {line}" for line in migration.setting_notes(environ)),
        "decode:   " + ("  ".join(f"{env.removeprefix(migration.PREFIX).lower()}={value}" for env, value in values.items())
                        or "(no guards)"),
        "guards:" if built else "guards:   (none built in)",
        *(f"  {g['env']}={values[g['env']]}  [{g['feature']}, {g['type']}, default {g['default']!r}]" for g in built),
    ]
    found = migration.readings(built, environ)
    if found:
        lines += ["how this build reads them (and what changed from the runtime recipe):", *migration.lines(found)]
    warnings, errors = _problems(manifest, environ)
    warnings += [f"{r.env}={r.value!r} meant {r.recipe} under the runtime recipe; this build: {r.now}"
                 + (f"; {r.hint}" if r.hint else "") for r in found if r.changed]
    # Refusals beyond the type (MID/DROP without W8, an unknown backend name).
    errors += [f"{r.env}={r.value!r}: {r.now}" for r in found
               if r.refused and not any(line.startswith(f"{r.env}=") for line in errors)]
    if package := migration.backend_package(environ, built):
        have = packages.found(package) if importlib.util.find_spec(package) else "NOT INSTALLED"
        lines.insert(3, f"mxfp8:    {environ.get(migration.MXFP8)} needs package {package}: {have}")
    missing = migration.missing_backend(environ, built)
    return lines, warnings, errors + ([missing] if missing else [])


def _problems(manifest: dict, environ: dict[str, str]) -> tuple[list[str], list[str]]:
    built = {g["env"]: g for g in manifest["guards"]}
    known = {g["env"]: g for g in manifest["series_guards"]}
    settings = set(manifest.get("runtime_settings", [])) | set(manifest.get("env_defaults", {}))
    warnings, errors = [], []
    for env, value in sorted(environ.items()):
        reason = migration.problem(built[env]["type"], value) if env in built else None
        if reason:
            errors.append(f"{env}={value!r} is {reason}: sglang will refuse to start")
        elif env in known and env not in built:
            warnings.append(f"{env}={value!r} is set, but feature '{known[env]['feature']}' is NOT built into this "
                            f"image (variant {manifest['variant']}): it has no effect")
        elif env.startswith(migration.PREFIX) and env not in settings and env not in known:
            warnings.append(f"{env}={value!r} is not a guard of series {manifest['series']}: it has no effect")
    return warnings, errors


def main(*, strict: bool) -> int:
    lines, warnings, errors = report(dict(os.environ))
    print("\n".join(lines))
    if warnings or errors:
        print("!" * 78, *(f"ERROR: {line}" for line in errors), *(f"WARNING: {line}" for line in warnings), "!" * 78,
              sep="\n", file=sys.stderr)
    return 1 if errors or (strict and warnings) else 0
