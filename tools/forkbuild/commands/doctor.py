"""`forkbuild doctor --env FILE`: how this build reads a deployed .env, and what changed from the runtime recipe."""

from __future__ import annotations

from pathlib import Path

from forkbuild.commands import add_command
from forkbuild.console import styled
from forkbuild.doctor import doctor_env


def add_parser(subparsers) -> None:
    parser = add_command(
        subparsers, "doctor", help="how a variant reads a .env file's DSV41_* values; what changed from the recipe",
        description="Prints, per DSV41_* guard of the variant, the value the container gets (the .env file over "
                    "the image's ENV) and how this build reads it, and flags every value the runtime recipe's "
                    "sitecustomize read otherwise (no/n/Off were on there; 2/enabled now stop startup; an empty "
                    "DSV41_DRAFT_TAU ...), with the value to write instead, and values this build refuses. Exit 1 "
                    "when a value changed meaning or is refused. Inside an image: `docker run IMAGE doctor`.",
        examples=["forkbuild doctor --env /srv/dsv41/.env", "forkbuild doctor --env .env --variant tp3"])
    parser.add_argument("--env", type=Path, required=True, metavar="FILE", help="the deployed .env file")
    parser.add_argument("--variant", help="the variant the container runs (default: series.default_variant)")
    parser.set_defaults(run=run)


def run(args, context) -> int:
    variant = args.variant or context.series.default_variant
    report = doctor_env(context.series, variant=variant, env_file=args.env)
    print(f"variant {variant}: how this build reads {args.env}")
    print("\n".join(report.lines))
    reporter = context.reporter
    for line in report.refused:
        reporter.console.print(styled(("refused:", "bold red"), f" {line}"))
    for line in report.changed:
        reporter.warn(f"meaning changed: {line}")
    for line in report.unused + report.notes:
        reporter.warn(line)
    return 1 if report.refused or report.changed else 0
