"""`forkbuild doctor --env FILE`: what a deployed `.env` means to a variant of this build, next to
what it meant under the runtime recipe (`docker run IMAGE doctor` says the same); a DSV41_* name
that is no guard (a typo: refused, with the closest), a setting close to one `serve` reads, and a
combination series.toml declares hazardous ([[hazards]])."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from forkbuild.fleet.envfile import read_env_file
from forkbuild.series.combination import Combination
from forkbuild.series.config import GUARD_PREFIX, Hazard, Series
from forkbuild_runtime import migration


@dataclass(frozen=True, kw_only=True)
class EnvReport:
    values: dict[str, str]  # the file's values, key -> value
    lines: tuple[str, ...]
    changed: tuple[str, ...]  # values whose meaning changed, with the value to write
    refused: tuple[str, ...]  # values this build stops on
    unused: tuple[str, ...]  # DSV41_* values of a guard this variant leaves out: no effect
    notes: tuple[str, ...] = ()  # recipe settings this build reads otherwise (or not at all)
    unknown: tuple[str, ...] = ()  # DSV41_* names no guard has (with the closest): a typo, refused
    suspect: tuple[str, ...] = ()  # names close to a setting `serve` or the fabric reads, but not it
    hazards: tuple[Hazard, ...] = ()  # [[hazards]] the resulting guard values hold


# Settings the nodes' fabric reads (NCCL/Gloo over the GB10's ConnectX-7), passed to every node as written.
FABRIC_SETTINGS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_IB_DISABLE", "NCCL_IB_GID_INDEX",
                   "NCCL_NET_GDR_LEVEL", "NCCL_DEBUG", "UCX_NET_DEVICES", "FORKBUILD_RDMA")


def closest(name: str, known: Iterable[str], *, cutoff: float = 0.6) -> str:
    matches = difflib.get_close_matches(name, list(known), n=1, cutoff=cutoff)
    return f" (perhaps you meant {matches[0]}?)" if matches else ""


def doctor_env(series: Series, *, variant: Combination, env_file: Path) -> EnvReport:
    chosen = variant
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
    known = {*series.runtime_env, *chosen.env, *migration.SETTING_NOTES}
    unused = [f"{env_file}:{item.line}: {key}={item.value!r}: feature {guards[key].feature} is not in variant "
              f"{variant.name}: no effect" for key, item in values.items()
              if key in guards and key not in {g["env"] for g in built}]
    unknown = [f"{env_file}:{item.line}: {key}={item.value!r}: not a guard of series {series.name}"
               + closest(key, guards) for key, item in values.items()
               if key.startswith(GUARD_PREFIX) and key not in guards and key not in known]
    settings = {*migration.SERVE_SETTINGS, *FABRIC_SETTINGS, *known}
    suspect = [f"{env_file}:{item.line}: {key}={item.value!r}: not a setting serve reads{hint}"
               for key, item in values.items()
               if not key.startswith(GUARD_PREFIX) and key not in settings
               and (hint := closest(key, settings, cutoff=0.85))]
    effective = {**{g.env: g.default for g in series.guards_for(chosen.features)}, **environ}
    hazards = tuple(hazard for hazard in series.hazards
                    if all(env in guards and guards[env].feature in chosen.features for env in hazard.when)
                    and hazard.holds(guards, effective, variant=variant.name))
    notes = [f"{env_file}:{values[line.split('=', 1)[0]].line}: {line}"
             for line in migration.setting_notes(plain)]
    return EnvReport(values=plain, lines=tuple(lines), changed=tuple(changed), refused=tuple(refused),
                     unused=tuple(unused), notes=tuple(notes), unknown=tuple(unknown), suspect=tuple(suspect),
                     hazards=hazards)


def hazard_line(hazard: Hazard) -> str:
    values = ", ".join(f"{env}={value}" for env, value in hazard.when.items())
    return f"hazard {hazard.name} ({values}): {hazard.reason}"
