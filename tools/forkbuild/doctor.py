"""`forkbuild doctor --env FILE`: what a deployed `.env` means to a variant of this build, next to
what it meant under the runtime recipe (`docker run IMAGE doctor` says the same)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from forkbuild.config import GUARD_PREFIX, Series
from forkbuild.envfile import read_env_file
from forkbuild.image.runtime import migration


@dataclass(frozen=True, kw_only=True)
class EnvReport:
    values: dict[str, str]  # the file's values, key -> value
    lines: tuple[str, ...]
    changed: tuple[str, ...]  # values whose meaning changed, with the value to write
    refused: tuple[str, ...]  # values this build stops on
    unused: tuple[str, ...]  # DSV41_* values that do nothing in this variant
    notes: tuple[str, ...] = ()  # recipe settings this build reads otherwise (or not at all)


def doctor_env(series: Series, *, variant: str, env_file: Path) -> EnvReport:
    chosen = series.variant(variant)
    values = read_env_file(env_file)
    plain = {key: item.value for key, item in values.items()}
    built = [{"env": g.env, "type": g.type, "default": g.default} for g in series.guards_for(chosen.features)]
    # What the container sees: the image's ENV (the variant's defaults), then the file.
    environ = {**chosen.env, **plain}
    found = migration.readings(built, environ)
    lines, changed, refused = [], [], []
    for reading, text in zip(found, migration.lines(found), strict=True):
        where = f"{env_file}:{values[reading.env].line}" if reading.env in values else \
            "the image's ENV (variant default)" if reading.env in chosen.env else "guard default"
        lines.append(f"{text}  [{where}]")
        if reading.changed and reading.env in values:
            changed.append(f"{env_file}:{values[reading.env].line}: {reading.env}={reading.value!r} meant "
                           f"{reading.recipe} under the runtime recipe; now {reading.now}"
                           + (f"; {reading.hint}" if reading.hint else ""))
        if reading.refused:
            refused.append(f"{where}: {reading.env}={reading.value!r}: {reading.now}")
    guards = {g.env: g for g in series.all_guards()}
    unused = [f"{env_file}:{item.line}: {key}={item.value!r}: "
              + (f"feature {guards[key].feature} is not in variant {variant}: no effect" if key in guards
                 else f"not a guard of series {series.name}: no effect")
              for key, item in values.items()
              if key.startswith(GUARD_PREFIX) and key not in {g["env"] for g in built}
              and key not in series.runtime_env and key not in migration.SETTING_NOTES]
    notes = [f"{env_file}:{values[line.split('=', 1)[0]].line}: {line}"
             for line in migration.setting_notes(plain)]
    return EnvReport(values=plain, lines=tuple(lines), changed=tuple(changed), refused=tuple(refused),
                     unused=tuple(unused), notes=tuple(notes))
