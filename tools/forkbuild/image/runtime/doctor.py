"""`doctor`: what this image is and how it is configured right now.

Prints the variant, the features built in, the recipe's settings and every
guard's current value (the recipe's `start.sh doctor` "decode:" line), and
warns loudly about a guard set for a feature this image does not have, an
unknown DSV41_* variable, or a value sglang would refuse at startup.
Standard library only (runs inside images).
"""

from __future__ import annotations

import os
import sys

from . import guards, migration
from .installed import installed, package_dir, read_manifest


def report(environ: dict[str, str]) -> tuple[list[str], list[str], list[str]]:
    """(lines, warnings, errors) for the installed build and `environ`."""
    dist = installed("sglang")
    manifest = read_manifest(package_dir("sglang"))

    def get(key: str) -> str:
        return environ.get(key, "-")

    built = manifest["guards"]
    lines = [
        f"variant:  {manifest['variant']}  (series {manifest['series']} {manifest['series_hash'][:12]})",
        f"sglang:   {dist.version}  (upstream {manifest['upstream']['version']}, {dist.site})",
        f"features: {', '.join(manifest['features']) or '(none: stock)'}",
        f"model:    {get('MODEL_PATH')}",
        f"parallel: TP={get('TP_SIZE')}  nodes={get('NNODES')} rank={get('NODE_RANK')}  ctx={get('CONTEXT_LENGTH')}  "
        f"util={get('MEM_FRACTION_STATIC')} (head {get('HEAD_MEM_FRACTION_STATIC')})  "
        f"max_running={get('MAX_RUNNING_REQUESTS')}",
        *(f"note:     {line}" for line in migration.setting_notes(environ)),
        "decode:   " + ("  ".join(f"{_short(g['env'])}={_value(g, environ)}" for g in built) or "(no guards)"),
        "guards:" if built else "guards:   (none built in)",
        *(f"  {g['env']}={_value(g, environ)}  [{g['feature']}, {g['type']}, default {g['default']!r}]"
          for g in built),
    ]
    found = migration.readings(built, environ)
    if found:
        lines += ["how this build reads them (and what changed from the runtime recipe):", *migration.lines(found)]
    warnings, errors = _problems(manifest, environ)
    warnings += changed_meanings(found)
    # Refusals beyond the type (MID/DROP without W8, an unknown backend name).
    errors += [f"{r.env}={r.value!r}: {r.now}" for r in found
               if r.refused and not any(line.startswith(f"{r.env}=") for line in errors)]
    missing = migration.missing_backend(environ, built)
    if missing:
        errors.append(missing)
    return lines, warnings, errors


def changed_meanings(found: list[migration.Reading]) -> list[str]:
    """A warning per value the runtime recipe read otherwise, with the value that keeps its meaning."""
    return [f"{r.env}={r.value!r} meant {r.recipe} under the runtime recipe; this build: {r.now}"
            + (f"; {r.hint}" if r.hint else "") for r in found if r.changed]


def _value(guard: dict, environ: dict[str, str]) -> str:
    """The value sglang will read: the variable's, or (unset) and the guard's default."""
    return environ[guard["env"]] if guard["env"] in environ else f"(unset: {guard['default']!r})"


def _short(env: str) -> str:
    return env[len(guards.PREFIX):].lower() if env.startswith(guards.PREFIX) else env


def _problems(manifest: dict, environ: dict[str, str]) -> tuple[list[str], list[str]]:
    built = {g["env"]: g for g in manifest["guards"]}
    known = {g["env"]: g for g in manifest["series_guards"]}
    settings = set(manifest.get("runtime_settings", [])) | set(manifest.get("env_defaults", {}))
    warnings, errors = [], []
    for env, value in sorted(environ.items()):
        if env in built:
            reason = guards.problem(built[env]["type"], value)
            if reason:
                errors.append(f"{env}={value!r} is {reason}: sglang will refuse to start")
        elif env in known:
            warnings.append(f"{env}={value!r} is set, but feature '{known[env]['feature']}' is NOT built into this "
                            f"image (variant {manifest['variant']}): it has no effect")
        elif env.startswith(guards.PREFIX) and env not in settings:
            warnings.append(f"{env}={value!r} is not a guard of series {manifest['series']}: it has no effect")
    return warnings, errors


def main(*, strict: bool) -> int:
    lines, warnings, errors = report(dict(os.environ))
    print("\n".join(lines))
    if warnings or errors:
        bar = "!" * 78
        print(bar, file=sys.stderr)
        for line in errors:
            print(f"ERROR: {line}", file=sys.stderr)
        for line in warnings:
            print(f"WARNING: {line}", file=sys.stderr)
        print(bar, file=sys.stderr)
    return 1 if errors or (strict and warnings) else 0
