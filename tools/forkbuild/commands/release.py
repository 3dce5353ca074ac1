"""`forkbuild release`: the newest upstream release (or a named one), rebased with the porter,
proved (every variant's wheel built and test-patch run) and reported in one go."""

from __future__ import annotations

import sys
from pathlib import Path

from forkbuild.commands import add_command
from forkbuild.errors import BuildError


def add_parser(subparsers) -> None:
    parser = add_command(
        subparsers, "release", help="move to a new upstream release and prove it: rebase, build, test, one report",
        description="latest: the newest release on the index above the pin (none: says so, exits 0); VERSION: that one. "
                    "Rebases (the porter included), then builds every variant's wheel and runs its test-patch on the "
                    "new release, and writes build/release/<old>-to-<new>.md (a pull-request body) and .json. A stopped "
                    "rebase is settled with `forkbuild rebase --continue/--skip`; `release` again goes on from there.",
        examples=["forkbuild release latest", "forkbuild release 0.5.24 --non-interactive", "nox -s release -- latest"])
    parser.add_argument("target", metavar="latest|VERSION", help="the release to move to")
    parser.add_argument("--non-interactive", action="store_true",
                        help="accept the porter's verified ports and upstreamed proposals; at the first stop a person "
                             "must settle, end with the report so far (the series untouched, the work tree kept)")
    parser.add_argument("--python", type=Path, default=Path(sys.executable),
                        help="interpreter of the test venv test-patch runs (default: the one running forkbuild)")
    parser.add_argument("--from-tree", action="store_true",
                        help="test-patch the applied tree on PYTHONPATH instead of installing each wheel")
    parser.set_defaults(run=run)


def run(args, context) -> int:
    from forkbuild.release import newest_release, release

    upstream = context.series.upstream
    version = args.target
    if version == "latest":
        if upstream.source != "wheel":
            raise BuildError("`release latest` follows the index: this series builds from git (upstream.source = 'git')",
                             hint="name the commit: forkbuild rebase --onto COMMIT --version X")
        newest = newest_release(upstream.name, upstream.version)
        if newest is None:
            context.reporter.info(f"{upstream.name} {upstream.version} is the newest release the index lists: nothing to "
                                  f"do (`forkbuild release {upstream.version}` proves it again)")
            return 0
        version = newest
    context.reporter.info(f"release: {upstream.name} {upstream.version} -> {version}")
    report = release(context, version=version, non_interactive=args.non_interactive, python=args.python,
                     from_tree=args.from_tree)
    for name in report["ported_failing"]:
        context.reporter.warn(f"{name}: ported, and its feature's tests fail on {version}")
    if not report["ok"]:
        context.reporter.warn(f"the new release fails test-patch: {sum(len(p['failed']) for p in report['proof'])} "
                              "failed check(s); the report names them")
        return 1
    return 0
