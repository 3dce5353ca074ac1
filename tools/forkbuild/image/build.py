"""Build a variant's image from its prepared context and measure it; the compose file of
every variant's image in both modes, YAML whose scalars are JSON strings (quoted exactly)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from forkbuild.errors import BuildError
from forkbuild.image.build_context import ImageContext
from forkbuild.image.docker import Docker
from forkbuild.series.config import arch_of

MODES = ("wheel", "delta")
TARGET = "image"
IMAGE_REPO = "forkbuild/sglang"
# Users point compose at other bases without regenerating the file.
BASE_VARIABLE = {"wheel": "FORKBUILD_BASE_IMAGE", "delta": "FORKBUILD_DELTA_BASE_IMAGE"}


def official_base(upstream_version: str) -> str:
    """The real default base: the official image of the pinned sglang (CUDA 13)."""
    return f"lmsysorg/sglang:v{upstream_version}-cu130"


def default_tag(variant: str, mode: str, platform: str, *, repository: str = IMAGE_REPO) -> str:
    """`forkbuild/sglang:tp4-wheel-arm64`: a local image store holds one platform per tag."""
    return f"{repository}:{variant}-{mode}-{arch_of(platform)}"


def build_args(context: ImageContext, *, mode: str, base: str) -> dict[str, str]:
    args = {"BASE_IMAGE": base, "MODE": mode, "SGLANG_VERSION": context.manifest.version,
            "UPSTREAM_VERSION": context.manifest.upstream.version}
    if "forkbuild-base/" in base:  # also inside a compose base "${VAR:-<tag>}"
        args["FORKBUILD_TEST_BASE"] = "1"  # a local base has no GPU stack: the image check does not fail on it
    return args


@dataclass(frozen=True, kw_only=True)
class Layer:
    size: int
    created_by: str


@dataclass(frozen=True, kw_only=True)
class BuiltImage:
    mode: str
    seconds: float
    layers: tuple[Layer, ...]  # the layers above the base, oldest first

    @property
    def added_bytes(self) -> int:
        return sum(layer.size for layer in self.layers)

    @property
    def mode_layer_bytes(self) -> int:
        """The layer that holds sglang: pip's install (wheel) or the delta copy."""
        marker = "pip install" if self.mode == "wheel" else "compileall"
        return sum(layer.size for layer in self.layers if marker in layer.created_by)


def build_image(*, docker: Docker, context: ImageContext, mode: str, base: str, tag: str,
                no_cache: bool = False) -> BuiltImage:
    start = time.monotonic()
    try:
        docker.build(context=context.path, tag=tag, target=TARGET, build_args=build_args(context, mode=mode, base=base),
                     platform=context.platform, stream=True, no_cache=no_cache)
    except BuildError as error:
        if docker.image_exists(base):
            raise
        raise BuildError(error.message, hint=f"the base {base} is not on this daemon and could not be pulled: "
                                             "pass --base IMAGE, or --local-base to make one here "
                                             "(`forkbuild build-base --stock`)") from error
    return BuiltImage(mode=mode, seconds=time.monotonic() - start, layers=layers_above(docker, tag, base))


def layers_above(docker: Docker, image: str, base: str) -> tuple[Layer, ...]:
    def history(ref: str) -> list[Layer]:
        return [Layer(size=size, created_by=created_by) for size, created_by in docker.history(ref)]

    below = len(history(base)) if docker.image_exists(base) else 0
    return tuple(history(image)[below:])


def compose_file(contexts: Sequence[ImageContext], *, modes: Sequence[str], bases: Mapping[tuple[str, str], str],
                 relative_to: Path,
                 header: str, repository: str = IMAGE_REPO) -> str:
    """One service per context (a variant on a platform) and mode; `bases`: each (mode, platform)'s default base."""
    q = json.dumps
    lines = [f"# {line}" if line else "#" for line in header.splitlines()]
    lines.append("services:")
    for context in contexts:
        for mode in modes:
            variant, platform = context.manifest.variant, context.platform
            args = build_args(context, mode=mode, base=f"${{{BASE_VARIABLE[mode]}:-{bases[mode, platform]}}}")
            lines += [f"  {q(f'{variant}-{mode}-{arch_of(platform)}')}:",
                      f"    image: {q(default_tag(variant, mode, platform, repository=repository))}",
                      f"    platform: {q(platform)}", "    build:",
                      f"      context: {q(os.path.relpath(context.path, relative_to))}", f"      target: {q(TARGET)}",
                      '      network: "none"', "      args:",
                      *(f"        {q(key)}: {q(value)}" for key, value in args.items())]
    return "\n".join(lines) + "\n"
