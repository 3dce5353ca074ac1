"""`forkbuild new`: start a feature: its series.toml table, its variants, a commit template."""

from __future__ import annotations

import os

from forkbuild.commands import add_command
from forkbuild.new_feature import new_feature
from forkbuild.series.layout import SERIES_TREE


def add_parser(subparsers) -> None:
    parser = add_command(
        subparsers, "new", help="add a feature to series.toml and write its commit template",
        description="Adds [features.FEATURE] (with its guards) to series.toml, keeping comments and layout, "
                    "`ported = false` until `forkbuild export` writes its first patch and adds it to the variants "
                    "(default: the default variant; a feature with a patch joins them at once); writes "
                    ".forkbuild-work/FEATURE.commit, a commit message template with the Feature:, Guard: and "
                    "Patch: trailers filled in, for `git commit -t` in the series work tree. Re-running the "
                    "same command changes nothing and rewrites the template (unless you edited it: that is kept).",
        examples=["forkbuild new hello_log --guard DSV41_HELLO_LOG:switch:0 --variant tp4 --requires guards",
                  "forkbuild new draft_tau --guard DSV41_DRAFT_TAU:float:1.0 --variant tp3 tp4 --name dspark-draft-tau"])
    parser.add_argument("feature", metavar="FEATURE", help="the feature's name (lower_case_with_underscores)")
    parser.add_argument("--guard", action="append", default=[], metavar="ENV:TYPE:DEFAULT",
                        help="a guard of the feature, e.g. DSV41_MY_FEATURE:switch:0 (repeatable; "
                             "types: switch, int, float, str)")
    parser.add_argument("--variant", action="extend", nargs="+", default=[], metavar="V",
                        help="variants that build the feature in (default: series.default_variant)")
    parser.add_argument("--requires", action="append", default=[], metavar="F",
                        help="a feature a variant must also hold (repeatable), e.g. guards")
    parser.add_argument("--description", default="", help="one line: what the feature does")
    parser.add_argument("--name", metavar="PATCH",
                        help="the patch file export writes (default: FEATURE with - for _, plus .patch)")
    parser.set_defaults(run=run)


def run(args, context) -> int:
    feature, template_path, kept = new_feature(context, name=args.feature, description=args.description,
                                         guards=args.guard, variants=args.variant, requires=args.requires,
                                         patch=args.name)
    reporter = context.reporter
    if feature.series_toml is None and not feature.joins:
        reporter.info(f"series.toml already holds feature {feature.name} in {', '.join(feature.variants)}: unchanged")
    elif feature.joins:
        reporter.info(f"series.toml: [features.{feature.name}], `ported = false` until its first patch: "
                      f"`forkbuild export` adds it to {', '.join(feature.joins)} with it")
    else:
        reporter.info(f"series.toml: [features.{feature.name}]"
                      + (f", added to {', '.join(feature.added_to)}" if feature.added_to else ""))
    template = os.path.relpath(template_path, context.series_dir / SERIES_TREE)
    reporter.info(f"commit template: {template_path}" + (" (kept as you edited it: delete it for a fresh one)"
                                                         if kept else ""))
    reporter.info(f"next: forkbuild apply --all; cd .forkbuild-work/series; change sglang; "
                  f"git commit -a -t {template}; cd -; forkbuild export  (writes patches/{feature.patch})")
    return 0
