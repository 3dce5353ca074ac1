"""`forkbuild bisect`: the smallest set of a combination's features for which a
command fails while stock passes (delta debugging; see forkbuild.matrix.ddmin)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from forkbuild.commands import add_command
from forkbuild.errors import BisectError
from forkbuild.matrix import arguments


def add_parser(subparsers) -> None:
    parser = add_command(
        subparsers, "bisect",
        help="delta-debug a variant's features to a minimal set for which CMD fails while stock passes",
        description="Each probe runs CMD with FORKBUILD_FEATURES (comma-separated), FORKBUILD_WHEELS (the probe's "
                    "wheel paths) and, with --image, FORKBUILD_IMAGE in its environment (matrix/probe.py); with "
                    "--runtime also the DSV41_* guards. Exit status 0 of CMD means pass.",
        examples=["forkbuild bisect --variant tp4 -- pytest tests/patches -x -q",
                  "forkbuild bisect --variant tp4 --runtime -- ./smoke.sh"])
    arguments.add_arguments(parser)
    parser.add_argument("--runtime", action="store_true",
                        help="one build of the combination; probes turn its DSV41_* guards on/off through the "
                             "environment (no rebuild). On = the value in your environment, else the variant's "
                             "runtime default, else 1 for a switch")
    parser.add_argument("--image", action="store_true", help="also build each probe's image (FORKBUILD_IMAGE)")
    parser.add_argument("--base", default="", help="--image: base image (default: the official image)")
    parser.add_argument("--local-base", action="store_true", help="--image: the local stock base")
    parser.add_argument("--retries", type=int, default=0, metavar="N",
                        help="try a failing probe N more times: it fails only if every try fails (flaky commands)")
    parser.add_argument("--continue", dest="resume", action="store_true",
                        help="resume from the probe log of the same bisect (after a kill or a stop)")
    parser.add_argument("--restart", action="store_true",
                        help="start over: the probe log of the same bisect is replaced (a finished bisect run "
                             "again without it prints its result from the log)")
    parser.add_argument("--log", type=Path, help="probe log (default: build/bisect/<combination>-<key>.json)")
    parser.add_argument("--python-tag", action="append", default=[], metavar="TAG",
                        help="wheels for these pinned tags (default: the running interpreter's)")
    parser.add_argument("--json", action="store_true", help='print {"minimal": [...], "probes": [...]} on stdout')
    parser.add_argument("command", nargs="+", metavar="CMD", help="the command (after --) to run for each probe, with its arguments")
    parser.set_defaults(run=run)


def run(args, context) -> int:
    # Here, not at the top: every forkbuild command builds the parser, only bisect needs these.
    from forkbuild.matrix.ddmin import FAIL, ProbeLog, bisect
    from forkbuild.matrix.probe import Probes, running_tag

    if args.retries < 0:
        raise BisectError("--retries must be 0 or more")
    if args.resume and args.restart:
        raise BisectError("--continue goes on with the probe log, --restart replaces it: give one of them")
    target = arguments.from_args(args, context)
    command = tuple(args.command)
    probes = Probes(context=context, target=target, command=command, runtime=args.runtime,
                    python_tags=tuple(args.python_tag) or running_tag(context.series),
                    out_dir=context.build_dir / "bisect" / "wheels", image=args.image, base=args.base,
                    local_base=args.local_base)
    if probes.fixed:
        context.reporter.info(f"not toggled at run time (no guard, or none set): {', '.join(probes.fixed)}")
    candidates = probes.candidates
    if not candidates:
        raise BisectError(f"{target.name} has no feature to bisect")
    key = {"mode": "runtime" if args.runtime else "build", "image": bool(args.image), "target": target.name,
           "features": list(target.features), "candidates": list(candidates), "command": list(command),
           "on": probes.on}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:10]
    log = ProbeLog(context.outside_series(args.log or context.build_dir / "bisect" / f"{target.name}-{digest}.json", "--log"), key=key,
                   resume=args.resume, restart=args.restart)
    context.reporter.info(f"bisecting {len(candidates)} features of {target.name} "
                          f"({'runtime guards' if args.runtime else 'a build per probe'}); log: {log.path}")

    def report(probe, replayed: bool) -> None:
        mark = ("FAIL", "red") if probe.outcome == FAIL else ("pass", "green")
        source = " (from the log)" if replayed else f" ({probe.seconds:.1f}s, exit {list(probe.exit_codes)})"
        context.reporter.line("  probe ", mark, f" {', '.join(probe.features) or 'stock'}{source}")

    result = bisect(candidates, run=probes, log=log, tries=1 + args.retries, report=report)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"minimal failing set: {', '.join(result['minimal'])}")
    context.reporter.info(f"{len(result['probes'])} probes ({result['replayed']} from the log); the command passes on "
                          f"stock and fails with {', '.join(result['minimal'])}"
                          + ("" if args.runtime else " (plus what they require)"))
    return 0
