"""`forkbuild rebase`: move the series onto a new upstream release or commit."""

from __future__ import annotations

from pathlib import Path

from forkbuild.commands import add_command
from forkbuild.console import cells, styled
from forkbuild.errors import ForkbuildError

OUTCOME_STYLE = {"exact": "green", "offset": "green", "3-way": "yellow", "resolved": "yellow",
                 "upstreamed": "cyan", "emptied": "magenta", "skipped": "red", "dropped": "red", "conflict": "red",
                 "ported": "yellow", "moot": "magenta"}


def add_parser(subparsers) -> None:
    parser = add_command(subparsers, "rebase", help="move the series onto a new upstream version (or commit), resumably",
        description="Replays every patch onto the new upstream (exact, offset, 3-way), stops at conflicts with "
                    "the state journaled, proposes patches upstream already has for dropping, then re-exports "
                    "patches/, moves the series.toml pin, checks every variant and writes build/rebase/<old>-to-<new>.md/.json.",
        examples=['forkbuild rebase --onto 0.5.24', 'forkbuild rebase --continue', 'forkbuild rebase --onto 0123abc... --version 0.5.24.dev1'])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--onto", metavar="VERSION|COMMIT",
                        help="a release of the upstream package (its wheels from the index) or a full git commit id")
    action.add_argument("--continue", dest="resume", action="store_const", const="continue",
                        help="go on after resolving a conflict (edit, `git add`), after a review stop or a kill")
    action.add_argument("--skip", dest="resume", action="store_const", const="skip",
                        help="leave out the patch the rebase stopped at (reported as skipped)")
    action.add_argument("--abort", dest="resume", action="store_const", const="abort",
                        help="stop and put series.toml and patches/ back as they were, and undo the cache refs the rebase "
                             "made (files edited meanwhile are saved aside first)")
    parser.add_argument("--version", dest="target_version", metavar="VERSION",
                        help="with --onto COMMIT: the version name of that commit (the cache tag upstream/VERSION)")
    parser.add_argument("--dir", type=Path, default=None,
                        help="the work tree where conflicts are resolved (default: .forkbuild-work/rebase)")
    parser.add_argument("--accept-drops", action="store_true",
                        help="drop patches upstream already has without stopping for review (they stay in the report)")
    parser.add_argument("--accept-ported", action="store_true",
                        help="take a patch the porter placed hunk by hunk (every check passed) without stopping")
    parser.add_argument("--accept-moot", action="store_true",
                        help="leave out hunks (and patches) whose code the new release no longer has, without stopping")
    parser.set_defaults(run=run)


def run(args, context) -> int:
    # Here, not at the top: every forkbuild command builds the parser, only rebase needs these.
    from rich.table import Table

    from forkbuild.rebase import report
    from forkbuild.rebase.journal import Phase, RebaseState
    from forkbuild.rebase.phases import Rebase
    from forkbuild.rebase.target import resolve

    rebase = Rebase(context)
    try:
        if args.resume:
            if args.dir or args.target_version:
                raise ForkbuildError(f"--{args.resume} takes no --dir/--version: the journal remembers them")
            state: RebaseState | None = rebase.resume(args.resume)
        else:
            target = resolve(context.series.upstream, onto=args.onto, version=args.target_version)
            state = rebase.start(target=target, tree=args.dir and context.outside_series(args.dir, "--dir"), accept_drops=args.accept_drops,
                                 accept_ported=args.accept_ported, accept_moot=args.accept_moot)
    except KeyboardInterrupt:
        if rebase.journal.exists():  # every step is journaled: the next command goes on from the last one
            context.reporter.warn("rebase interrupted: `forkbuild rebase --continue` goes on, `--abort` puts "
                                  "everything back")
        raise
    if state is None:  # the series is on the target already
        return 0
    if state.phase is Phase.ABORTED:
        context.reporter.info("rebase aborted: series.toml, patches/ and the cache refs it made are as before")
        return 0
    table = Table("patch", "outcome", "detail", title=f"rebase {state.old.version} -> {state.target.version}")
    for patch in state.patches:
        style = OUTCOME_STYLE.get(patch.outcome or "", "red")
        table.add_row(*cells(patch.file, styled((report.label(patch.outcome), style)), patch.detail))
    context.reporter.console.print(table)
    for line in state.unported:
        context.reporter.warn(line)
    context.reporter.info(f"report: {state.report}")
    return 0
