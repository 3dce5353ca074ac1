"""`forkbuild build-image`: a variant's docker image per platform, in wheel or delta mode."""

from __future__ import annotations

from pathlib import Path

from forkbuild.commands import add_command
from forkbuild.errors import ConfigError
from forkbuild.image import build
from forkbuild.image.base import ensure_bases
from forkbuild.image.build_context import prepare_context
from forkbuild.image.docker import Docker
from forkbuild.matrix import arguments
from forkbuild.series.config import ANY_PLATFORM, image_platforms, native_platform, platform_of_tags


def add_parser(subparsers) -> None:
    parser = add_command(
        subparsers, "build-image", help="build a variant's docker image (wheel or delta mode)",
        description="Builds a variant's docker image: `wheel` mode pip-installs the patched wheel over the base, `delta` mode adds one thin layer of changed files over a base holding the stock wheel. One image per platform of the variant (linux/arm64 for the GB10 fleet, under emulation on an x86_64 machine; linux/amd64), tagged forkbuild/sglang:<variant>-<mode>-<arch>. The image checks itself at build time; prints each tag on stdout. Needs a docker daemon.",
        examples=['forkbuild build-image --variant tp4 --mode delta --local-base',
                  'forkbuild build-image --variant tp4 --platform linux/arm64 --base lmsysorg/sglang:v0.5.23-cu130', 'forkbuild build-image --variant tp3 --base lmsysorg/sglang:v0.5.23-cu130'])
    arguments.add_arguments(parser)
    arguments.add_platform_argument(parser, what="build the image")
    parser.add_argument("--mode", choices=build.MODES, default="wheel",
                        help="wheel: pip install the patched wheel over the base; delta: a thin layer of the "
                             "changed files over a base with the stock wheel installed (default: wheel)")
    bases = parser.add_mutually_exclusive_group()
    bases.add_argument("--base", help="base image (default: the official lmsysorg/sglang image of the pinned version)")
    bases.add_argument("--local-base", action="store_true",
                       help="make and use the local stock base (`forkbuild build-base --stock`): no registry needed")
    parser.add_argument("--tag", help="image tag (one platform; default: forkbuild/sglang:<variant>-<mode>-<arch>)")
    parser.add_argument("--wheel", type=Path, action="append", default=[], metavar="PATH",
                        help="use this patched wheel instead of building one (repeatable: one per Python tag and platform)")
    parser.add_argument("--python-tag", action="append", default=[], metavar="TAG",
                        help="build the wheel only for this pinned tag (repeatable; default: every pinned tag)")
    parser.set_defaults(run=run)


def run(args, context) -> int:
    combination = arguments.from_args(args, context)
    wheels = [path.resolve() for path in args.wheel]
    platforms = image_platforms(args.platform or [platform_of_tags(path.name) or "" for path in wheels]
                                or combination.platforms or [native_platform()])
    if args.tag and len(platforms) > 1:
        raise ConfigError([f"--tag names one image, and {combination.name} builds for {', '.join(platforms)}: "
                           "add --platform"], source="command line")
    docker = Docker.connect(reporter=context.reporter)
    for platform in platforms:
        with context.reporter.step(f"build context for {combination.name} ({platform})"):
            image_context = prepare_context(context, variant=combination, platform=platform,
                                            wheels=[path for path in wheels
                                                    if platform_of_tags(path.name) in (platform, ANY_PLATFORM)],
                                            python_tags=args.python_tag)
        base = (ensure_bases(context=context, docker=docker, stock=True, platform=platform)[-1] if args.local_base
                else args.base or build.official_base(image_context.manifest.upstream.version))
        tag = args.tag or build.default_tag(combination.name, args.mode, platform)
        with context.reporter.step(f"image {tag} ({args.mode} on {base}, {platform})"):
            built = build.build_image(docker=docker, context=image_context, mode=args.mode, base=base, tag=tag)
        filled = sum(1 for layer in built.layers if layer.size)
        context.reporter.info(f"{tag}: sglang {image_context.manifest.version} for {platform}, {built.seconds:.1f}s, "
                              f"{filled} non-empty layers over the base adding {built.added_bytes / 1e6:.1f} MB "
                              f"(the {args.mode} layer {built.mode_layer_bytes / 1e6:.1f} MB)")
        print(tag)
    return 0
