"""`python -m forkbuild_runtime {delta-plan,check,doctor,packages,preflight}` inside an image."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import ImageError, check, delta, doctor, packages, preflight


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="forkbuild_runtime")
    commands = parser.add_subparsers(dest="command", required=True)
    plan = commands.add_parser("delta-plan", help="plan the delta layer over this base's stock sglang")
    for option in ("--wheels", "--upstream-records", "--out"):
        plan.add_argument(option, type=Path, required=True)
    plan.add_argument("--upstream-version", required=True)
    verify = commands.add_parser("check", help="verify the installed patched sglang")
    verify.add_argument("--variant")
    verify.add_argument("--version")
    verify.add_argument("--env-defaults", action="store_true", help="also require the variant's ENV defaults")
    verify.add_argument("--test-base", action="store_true",
                        help="a test image: report a missing backend package instead of failing")
    install = commands.add_parser("packages", help="the pinned wheel of the MXFP8 backend package the base lacks")
    install.add_argument("--pick", type=Path, required=True, metavar="DIR", help="the build context's packages/")
    rendezvous = commands.add_parser("preflight", help="the cluster's rendezvous (gloo, and NCCL on GPUs), no model")
    rendezvous.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for every rank")
    diagnose = commands.add_parser("doctor", help="variant, features, guard values; warn about misconfiguration")
    diagnose.add_argument("--strict", action="store_true", help="exit 1 on warnings too")
    args = parser.parse_args(argv)
    try:
        if args.command == "doctor":
            return doctor.main(strict=args.strict)
        if args.command == "preflight":
            return preflight.main(timeout=args.timeout)
        if args.command == "packages":
            wheel, why = packages.pick(args.pick)
            print(why, file=sys.stderr)
            print(wheel or "")
        elif args.command == "delta-plan":
            delta.main(wheels=args.wheels, upstream_records=args.upstream_records,
                       upstream_version=args.upstream_version, out=args.out)
        else:
            print("\n".join(check.run(variant=args.variant, version=args.version, env_defaults=args.env_defaults,
                                       test_base=args.test_base)))
    except ImageError as error:
        print(f"forkbuild: error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
