"""`forkbuild build-base`: the local base images (no registry), cached by content."""

from __future__ import annotations

from forkbuild.cache import UpstreamCache
from forkbuild.image import base
from forkbuild.image.docker import Docker


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "build-base", help="make the local base images: Python 3.11 (debootstrap) and, with --stock, + stock sglang")
    parser.add_argument("--stock", action="store_true",
                        help="also the base with the pinned sglang wheel installed (what --mode delta builds on)")
    parser.add_argument("--python-tag", default="cp311", help="which pinned wheel the stock base installs (default cp311)")
    parser.set_defaults(run=run)


def run(args, context) -> int:
    docker = Docker.connect(reporter=context.reporter)
    tags = ensure_bases(context=context, docker=docker, stock=args.stock, python_tag=args.python_tag)
    # stdout carries only the tags, for scripts: `read py stock < <(forkbuild build-base --stock)`.
    print(" ".join(tags))
    return 0


def ensure_bases(*, context, docker: Docker, stock: bool, python_tag: str = "cp311") -> tuple[str, ...]:
    docker_dir = context.series_dir / "docker"
    python_base = base.ensure_python_base(docker=docker, docker_dir=docker_dir, cache_dir=context.cache_dir,
                                          reporter=context.reporter)
    if not stock:
        return (python_base,)
    upstream = context.series.upstream
    pin = upstream.wheel_for(python_tag)
    wheel = UpstreamCache(context.cache_dir, reporter=context.reporter).wheel(pin)
    stock_base = base.ensure_stock_base(docker=docker, docker_dir=docker_dir, python_base=python_base, pin=pin,
                                        wheel=wheel, version=upstream.version, reporter=context.reporter)
    return python_base, stock_base
