"""`forkbuild build-base`: the local base images (no registry), cached by content."""

from __future__ import annotations

from forkbuild.commands import add_command
from forkbuild.image.base import ensure_bases
from forkbuild.image.docker import Docker
from forkbuild.matrix import arguments
from forkbuild.series.config import native_platform


def add_parser(subparsers) -> None:
    parser = add_command(
        subparsers, "build-base", help="make the local base images: Python 3.11 (mmdebstrap) and, with --stock, + stock sglang",
        description='Makes the local base images (no registry needed): Debian bookworm with Python 3.11 by mmdebstrap and, with --stock, that plus the pinned stock sglang wheel (the base --mode delta needs). Cached by a hash of their recipe; prints the tags on stdout.',
        examples=['forkbuild build-base --stock', 'forkbuild build-base --stock --platform linux/arm64', 'read py stock < <(forkbuild build-base --stock)'])
    parser.add_argument("--stock", action="store_true",
                        help="also the base with the pinned sglang wheel installed (what --mode delta builds on)")
    arguments.add_platform_argument(parser, what="make the bases", default="this machine's")
    parser.add_argument("--python-tag", default="cp311", help="which pinned wheel the stock base installs (default cp311)")
    parser.set_defaults(run=run)


def run(args, context) -> int:
    docker = Docker.connect(reporter=context.reporter)
    tags = [tag for platform in args.platform or [native_platform()]
            for tag in ensure_bases(context=context, docker=docker, stock=args.stock, platform=platform,
                                    python_tag=args.python_tag)]
    # stdout carries only the tags, for scripts: `read py stock < <(forkbuild build-base --stock)`.
    print(" ".join(tags))
    return 0
