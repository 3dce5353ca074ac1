"""A Combination: what a build holds (a named variant or any set of features the series allows),
resolved once at the edge. Required features are added (and noted), conflicts are an error;
runtime defaults come from the base variant (without one, every guard keeps its default)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from forkbuild.errors import ConfigError
from forkbuild.series.config import Guard, PatchEntry, Series, unknown

COMBO_LABEL = "combo"  # the local-version label of a combination that is no named variant
WHOLE_SERIES = "the whole series"  # the whole series' name in messages (never looked up as a variant)


@dataclass(frozen=True, kw_only=True)
class Combination:
    name: str  # the variant's name, or combo-<id> for any other set of features
    features: tuple[str, ...]  # in series.toml's feature order
    base: str = ""  # the variant whose runtime defaults it carries; "" = none (guards at their defaults)
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    notes: tuple[str, ...] = ()  # what resolution did on its own (a required feature added ...)
    whole: bool = False  # every patch of the series: the tree `export` reads
    platforms: tuple[str, ...] = ()  # what its wheels and images are built for (the base variant's)

    @property
    def is_variant(self) -> bool:
        return self.name == self.base and not self.whole

    @property
    def label(self) -> str:
        return "+".join(self.features) or "stock"

    def patches(self, series: Series) -> tuple[PatchEntry, ...]:
        return series.patches_of(self.features)

    def guards(self, series: Series) -> tuple[Guard, ...]:
        return series.guards_for(self.features)

    def content_hash(self, series: Series) -> str:
        return series.build_hash(name=self.name, features=self.features, env=self.env,
                                 extra={} if self.is_variant else {"base": self.base})


def of_variant(series: Series, name: str) -> Combination:
    variant = series.variant(name)
    return Combination(name=variant.name, features=_ordered(series, variant.features), base=variant.name,
                       env=variant.env, platforms=variant.platforms)


def whole_series(series: Series) -> Combination:
    """Every feature and patch of the series: a tree to edit and export, no named build."""
    return Combination(name=WHOLE_SERIES, features=tuple(series.features), whole=True,
                       platforms=series.upstream.platforms)


def resolve(series: Series, *, variant: str | None = None, features: Iterable[str] | None = None,
            with_features: Iterable[str] = (), without_features: Iterable[str] = ()) -> Combination:
    """The combination the command line names: the variant (default: the series'), exactly
    `features` (+ what they require; defaults from `variant`), or a variant with/without these."""
    with_features, without_features = tuple(with_features), tuple(without_features)
    if features is not None and (with_features or without_features):
        raise ConfigError(["--features names the whole set: use it, or --with/--without relative to a variant"],
                          source="command line")
    if features is None and not with_features and not without_features:
        return of_variant(series, variant or series.default_variant)
    base = series.variant(variant).name if variant else ""
    notes: list[str] = []
    if features is not None:
        wanted = list(features)
    else:
        base = base or series.variant(series.default_variant).name
        held = list(series.variant(base).features)
        _require_known(series, [*with_features, *without_features], option="--with/--without")
        notes += [f"{name}: in {base} already" for name in with_features if name in held]
        notes += [f"{name}: not in {base}, nothing to leave out" for name in without_features if name not in held]
        wanted = [name for name in held + list(with_features) if name not in without_features]
    return from_features(series, wanted, base=base, notes=notes, refused=without_features)


def from_features(series: Series, features: Iterable[str], *, base: str = "", notes: Iterable[str] = (),
                  refused: Iterable[str] = ()) -> Combination:
    """`features` closed under `requires`, checked against `conflicts`; a `refused` feature
    (left out explicitly) that is required is an error, never added back silently."""
    wanted = list(dict.fromkeys(features))
    _require_known(series, wanted, option="--features")
    chosen, added = _close_requires(series, wanted)
    refused = [name for name in refused if name in chosen]
    problems = [f"--without {name}: {', '.join(added[name]) if name in added else 'another feature'} requires it"
                for name in refused]
    problems += [f"{one} conflicts with {other} (features.{one}.conflicts): choose one of them"
                 for one, other in _conflicts(series, chosen)]
    problems += [f"{name}: no patch yet (`ported = false` in series.toml): no build holds it until "
                 "`forkbuild export` writes its patch" for name in _ordered(series, chosen)
                 if not series.features[name].ported]
    if problems:
        raise ConfigError(problems, source="command line")
    notes = [*notes, *(f"{name} added: required by {', '.join(by)}" for name, by in added.items())]
    return _canonical(series, _ordered(series, chosen), base=base, notes=tuple(notes))


def _require_known(series: Series, names: Iterable[str], *, option: str) -> None:
    if problems := [f"{option}: {unknown(name, series.features)}" for name in names if name not in series.features]:
        raise ConfigError(problems, source="command line")


def _close_requires(series: Series, wanted: list[str]) -> tuple[set[str], dict[str, list[str]]]:
    """`wanted` plus everything it requires, transitively; added feature -> who required it."""
    chosen = set(wanted)
    added: dict[str, list[str]] = {}
    queue = list(wanted)
    while queue:
        name = queue.pop(0)
        for needed in series.features[name].requires:
            if needed not in chosen:
                chosen.add(needed)
                queue.append(needed)
            if needed not in wanted and name not in (by := added.setdefault(needed, [])):
                by.append(name)
    return chosen, added


def _conflicts(series: Series, chosen: set[str]) -> list[tuple[str, str]]:
    pairs = []
    for name in _ordered(series, chosen):
        for other in series.features[name].conflicts:
            if other in chosen and (other, name) not in pairs:
                pairs.append((name, other))
    return pairs


def closure(series: Series, features: Iterable[str]) -> frozenset[str]:
    """`features` plus what they require (no conflict check): for matrix strategies."""
    return frozenset(_close_requires(series, list(features))[0])


def buildable(series: Series) -> Series:
    """The series without the features no build may hold: those without a patch (`ported = false`)
    and those requiring one (for matrix strategies)."""
    kept = {name: feature for name, feature in series.features.items()
            if all(series.features[needed].ported for needed in closure(series, [name]))}
    return dataclasses.replace(series, features=MappingProxyType(kept))


def coexist(series: Series, features: Iterable[str]) -> bool:
    """Whether these features (with what they require) may be built together."""
    return not _conflicts(series, set(closure(series, features)))


def _ordered(series: Series, features: Iterable[str]) -> tuple[str, ...]:
    chosen = set(features)
    return tuple(name for name in series.features if name in chosen)


def runtime_env(series: Series, features: Iterable[str], base: str) -> Mapping[str, str]:
    """The base variant's ENV without the guards of features the combination leaves out."""
    if not base:
        return MappingProxyType({})
    held = set(features)
    owner = {guard.env: guard.feature for guard in series.all_guards()}
    return MappingProxyType({key: value for key, value in series.variant(base).env.items()
                             if owner.get(key, "") in held or key not in owner})


def _canonical(series: Series, features: tuple[str, ...], *, base: str, notes: tuple[str, ...]) -> Combination:
    env = runtime_env(series, features, base)
    # The same features and defaults as a named variant: that variant (same wheel, same name).
    for variant in ([series.variants[base]] if base else []) + list(series.variants.values()):
        if set(variant.features) == set(features) and dict(variant.env) == dict(env):
            return Combination(name=variant.name, features=features, base=variant.name, env=variant.env,
                               notes=notes, platforms=variant.platforms)
    platforms = series.variants[base].platforms if base else series.upstream.platforms
    return Combination(name=combination_id(features, base=base, env=env), features=features, base=base, env=env,
                       notes=notes, platforms=platforms)


def combination_id(features: Iterable[str], *, base: str, env: Mapping[str, str]) -> str:
    """combo-<10 hex> of the features and defaults (not the patch bytes): stable while patches are edited."""
    identity = json.dumps({"features": sorted(features), "base": base, "env": dict(sorted(env.items()))},
                          sort_keys=True)
    return f"{COMBO_LABEL}-{hashlib.sha256(identity.encode()).hexdigest()[:10]}"
