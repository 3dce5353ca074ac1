"""What an image is built from: the local bases, the variant's patched wheels (made by
`forkbuild build-wheel`'s code) and the pinned stock wheels, and the build
context made of them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from forkbuild.combination import Combination
from forkbuild.context import Context
from forkbuild.image import base
from forkbuild.image import context as image_context
from forkbuild.image.docker import Docker
from forkbuild.wheel.builder import WheelRequest, build_wheels


def variant_wheels(context: Context, *, variant: Combination, python_tags: Sequence[str]) -> list[Path]:
    """The variant's patched wheels in <series>/dist, built unless up to date."""
    request = WheelRequest(variant=variant, out_dir=context.dist_dir.resolve(),
                           python_tags=tuple(python_tags))
    return [built.path for built in build_wheels(context=context, request=request)]


def prepare_context(context: Context, *, variant: Combination, wheels: Sequence[Path] = (),
                    python_tags: Sequence[str] = ()) -> image_context.ImageContext:
    """build/image/<variant>/ from the given wheels, or from freshly built ones."""
    chosen = list(wheels) or variant_wheels(context, variant=variant, python_tags=python_tags)
    cache = context.upstream
    upstream = context.series.upstream
    stock = {tag: cache.wheel(upstream.wheel_for(tag))
             for tag in sorted({image_context.python_tag(wheel) for wheel in chosen})}
    return image_context.prepare(docker_dir=context.docker_dir, variant=variant.name, wheels=chosen,
                                 upstream_wheels=stock, dest=context.build_dir / "image" / variant.name)


def ensure_bases(*, context: Context, docker: Docker, stock: bool, python_tag: str = "cp311") -> tuple[str, ...]:
    """The local base tags: (python,) or (python, stock), each built if missing."""
    docker_dir = context.docker_dir
    python_base = base.ensure_python_base(docker=docker, docker_dir=docker_dir, cache_dir=context.cache_dir,
                                          reporter=context.reporter)
    if not stock:
        return (python_base,)
    upstream = context.series.upstream
    pin = upstream.wheel_for(python_tag)
    wheel = context.upstream.wheel(pin)
    stock_base = base.ensure_stock_base(docker=docker, docker_dir=docker_dir, python_base=python_base, pin=pin,
                                        wheel=wheel, version=upstream.version, reporter=context.reporter)
    return python_base, stock_base
