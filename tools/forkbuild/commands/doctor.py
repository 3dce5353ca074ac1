"""`forkbuild doctor --env FILE`: how this build reads a deployed .env, and what changed from the runtime recipe."""

from __future__ import annotations

from pathlib import Path

from forkbuild.commands import add_command
from forkbuild.console import printable
from forkbuild.fleet.envcheck import doctor_env, hazard_line
from forkbuild.series.combination import resolve


def add_parser(subparsers) -> None:
    parser = add_command(
        subparsers, "doctor", help="how a variant reads a .env file's DSV41_* values; what changed from the recipe",
        description="Prints, per DSV41_* guard of the variant, the value the container gets (the .env file over "
                    "the image's ENV) and how this build reads it, and flags every value the runtime recipe's "
                    "sitecustomize read otherwise (no/n/Off were on there; 2/enabled now stop startup; an empty "
                    "DSV41_DRAFT_TAU ...), with the value to write instead, and values this build refuses; a DSV41_* name no guard has is refused with the closest one, a name "
                    "close to a setting serve reads is a warning, and so is a combination series.toml declares "
                    "hazardous ([[hazards]]). Exit 1 when a value changed meaning or is refused. Inside an image: `docker run IMAGE doctor`.",
        examples=["forkbuild doctor --env /srv/dsv41/.env", "forkbuild doctor --env .env --variant tp3"])
    parser.add_argument("--env", type=Path, required=True, metavar="FILE", help="the deployed .env file")
    parser.add_argument("--variant", help="the variant the container runs (default: series.default_variant)")
    parser.add_argument("--allow-unknown", action="store_true",
                        help="a DSV41_* name that is no guard of the series is a warning, not a refusal")
    parser.set_defaults(run=run)


def run(args, context) -> int:
    variant = resolve(context.series, variant=args.variant)
    report = doctor_env(context.series, variant=variant, env_file=args.env)
    print(printable(f"variant {variant.name}: how this build reads {args.env}"))
    print(printable("\n".join(report.lines)))  # the .env's values, shown, never sent to the terminal
    reporter = context.reporter
    for line in report.refused:
        reporter.line(("refused:", "bold red"), f" {line}")
    for line in report.changed:
        reporter.warn(f"meaning changed: {line}")
    unknown = () if args.allow_unknown else report.unknown
    for line in unknown:
        reporter.line(("refused:", "bold red"), f" {line} (--allow-unknown to pass it on)")
    for line in report.unused + report.notes + report.suspect + (report.unknown if args.allow_unknown else ()):
        reporter.warn(line)
    for hazard in report.hazards:
        reporter.warn(f"{hazard_line(hazard)} (`forkbuild launch` refuses it without --accept-hazard {hazard.name})")
    return 1 if report.refused or report.changed or unknown else 0
