"""Build a variant's image from its prepared context, and measure it."""

from __future__ import annotations

import time
from dataclasses import dataclass

from forkbuild.errors import BuildError
from forkbuild.image.base import PYTHON_BASE_REPO, STOCK_BASE_REPO
from forkbuild.image.context import ImageContext
from forkbuild.image.docker import Docker

MODES = ("wheel", "delta")
TARGET = "image"
OFFICIAL_BASE = "lmsysorg/sglang:v{version}-cu130"
IMAGE_REPO = "forkbuild/sglang"


def official_base(upstream_version: str) -> str:
    """The real default base: the official image of the pinned sglang (CUDA 13)."""
    return OFFICIAL_BASE.format(version=upstream_version)


def default_tag(variant: str, mode: str, *, repository: str = IMAGE_REPO) -> str:
    return f"{repository}:{variant}-{mode}"


def build_args(context: ImageContext, *, mode: str, base: str) -> dict[str, str]:
    if mode not in MODES:
        raise BuildError(f"unknown image mode {mode!r}: choose one of {', '.join(MODES)}")
    args = {"BASE_IMAGE": base, "MODE": mode, "SGLANG_VERSION": context.version,
            "UPSTREAM_VERSION": context.upstream_version}
    if any(f"{repository}:" in base for repository in (PYTHON_BASE_REPO, STOCK_BASE_REPO)):
        # forkbuild's local bases (no torch, no GPU stack) make test images
        # only: the build-time check reports a missing backend package there
        # instead of failing on it. (A compose base "${VAR:-<tag>}" holds the tag.)
        args["FORKBUILD_TEST_BASE"] = "1"
    return args


@dataclass(frozen=True, kw_only=True)
class Layer:
    size: int
    created_by: str


@dataclass(frozen=True, kw_only=True)
class BuiltImage:
    tag: str
    mode: str
    base: str
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
    args = build_args(context, mode=mode, base=base)
    start = time.monotonic()
    try:
        docker.build(context=context.path, tag=tag, target=TARGET, build_args=args, stream=True, no_cache=no_cache)
    except BuildError as error:
        if docker.image_exists(base):
            raise
        raise BuildError(error.message, hint=f"the base {base} is not on this daemon and could not be pulled: "
                                             "pass --base IMAGE, or --local-base to make one here "
                                             "(`forkbuild build-base --stock`)") from error
    seconds = time.monotonic() - start
    return BuiltImage(tag=tag, mode=mode, base=base, seconds=seconds, layers=layers_above(docker, tag, base))


def _history(docker: Docker, ref: str) -> list[Layer]:
    output = docker.run("history", "--no-trunc", "--human=false", "--format", "{{.Size}}\t{{.CreatedBy}}", ref)
    layers = []
    for line in output.stdout.decode().splitlines():
        size, _, created_by = line.partition("\t")
        layers.append(Layer(size=int(size), created_by=created_by))
    return layers[::-1]


def layers_above(docker: Docker, image: str, base: str) -> tuple[Layer, ...]:
    below = len(_history(docker, base)) if docker.image_exists(base) else 0
    return tuple(_history(docker, image)[below:])
