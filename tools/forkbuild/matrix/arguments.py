"""The options that choose a combination (apply, build-wheel, build-image, test-patch, bisect),
resolved into a Combination once."""

from __future__ import annotations

import argparse

from forkbuild.series.combination import Combination, resolve
from forkbuild.series.config import PLATFORMS


def feature_list(text: str) -> tuple[str, ...]:
    """'a,b, c' -> ('a', 'b', 'c'); '' -> () (no features: stock)."""
    return tuple(name.strip() for name in text.split(",") if name.strip())


def add_arguments(parser: argparse.ArgumentParser, *, variant_option: bool = True) -> None:
    if variant_option:
        parser.add_argument("--variant", help="variant to use (default: series.default_variant); with --features "
                                              "or --with/--without: the variant the runtime defaults come from")
    parser.add_argument("--features", type=feature_list, default=None, metavar="A,B,C",
                        help="exactly these features (plus what they require); '' is stock")
    parser.add_argument("--with", dest="with_features", type=feature_list, action="append", default=[],
                        metavar="A,B", help="the variant's features plus these (repeatable)")
    parser.add_argument("--without", dest="without_features", type=feature_list, action="append", default=[],
                        metavar="A,B", help="the variant's features minus these (repeatable)")


def add_platform_argument(parser: argparse.ArgumentParser, *, what: str,
                          default: str = "the variant's `platforms`") -> None:
    parser.add_argument("--platform", action="append", default=[], choices=tuple(PLATFORMS), metavar="PLATFORM",
                        help=f"{what} only for this platform: {', '.join(PLATFORMS)} (repeatable; default: {default})")


def chosen(args: argparse.Namespace) -> bool:
    """Whether the command line names a feature set (not just a variant)."""
    return args.features is not None or bool(args.with_features) or bool(args.without_features)


def from_args(args: argparse.Namespace, context) -> Combination:
    """The combination the options name, resolved once; its notes are reported."""
    combination = resolve(context.series, variant=getattr(args, "variant", None), features=args.features,
                          with_features=[name for group in args.with_features for name in group],
                          without_features=[name for group in args.without_features for name in group])
    for note in combination.notes:
        context.reporter.info(f"note: {note}")
    if not combination.is_variant:
        defaults = f"runtime defaults of {combination.base}" if combination.base else "every guard at its default"
        context.reporter.info(f"{combination.name}: {combination.label} ({defaults})")
    return combination
