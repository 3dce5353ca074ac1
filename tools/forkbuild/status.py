"""`status`: what the series holds — patches (feature, guards, files, +/-,
upstream status, variants) and variants (features, patches, env) — as data."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from forkbuild.config import Series
from forkbuild.patchfile import read_patch


@dataclass(frozen=True, kw_only=True)
class PatchStatus:
    file: str
    subject: str
    feature: str
    upstream: str
    guards: tuple[str, ...]  # the feature's guards, from series.toml
    guard_trailers: tuple[str, ...]  # the `Guard:` trailers of the patch itself
    unguarded: str
    files: tuple[str, ...]
    added: int
    removed: int
    variants: tuple[str, ...]  # the variants that build it in


@dataclass(frozen=True, kw_only=True)
class VariantStatus:
    name: str
    description: str
    features: tuple[str, ...]
    patches: tuple[str, ...]
    env: dict[str, str]


@dataclass(frozen=True, kw_only=True)
class SeriesStatus:
    name: str
    upstream: dict[str, str]
    default_variant: str
    patches: tuple[PatchStatus, ...]
    variants: tuple[VariantStatus, ...]

    def to_json(self) -> dict:
        return asdict(self)


def series_status(series: Series) -> SeriesStatus:
    in_variants = {entry.file: tuple(name for name in series.variants if entry in series.patches_for(name))
                   for entry in series.patches}
    patches = []
    for entry in series.patches:
        info = read_patch(entry.path)
        patches.append(PatchStatus(
            file=entry.file, subject=info.subject, feature=entry.feature, upstream=entry.upstream_status,
            guards=tuple(guard.env for guard in series.features[entry.feature].guards),
            guard_trailers=tuple(info.trailer("Guard")), unguarded=entry.unguarded,
            files=tuple(change.path for change in info.files), added=info.added, removed=info.removed,
            variants=in_variants[entry.file]))
    variants = tuple(VariantStatus(name=variant.name, description=variant.description, features=variant.features,
                                   patches=tuple(entry.file for entry in series.patches_for(variant.name)),
                                   env=dict(variant.env))
                     for variant in series.variants.values())
    upstream = series.upstream
    return SeriesStatus(name=series.name, default_variant=series.default_variant,
                        upstream={"name": upstream.name, "version": upstream.version, "source": upstream.source,
                                  "tag": upstream.tag, "package_root": upstream.package_root},
                        patches=tuple(patches), variants=variants)
