"""`forkbuild fetch`: import the pinned upstream (and its wheels) into the cache."""

from __future__ import annotations

from forkbuild.commands import add_command


def add_parser(subparsers) -> None:
    parser = add_command(
        subparsers, "fetch", help="import the pinned upstream into the cache (offline when cached)",
        description="Imports the pinned upstream (the release wheel's files, or the git commit) into the cache; later runs are offline. --wheels also downloads every pinned wheel, sha256-verified.",
        examples=['forkbuild fetch', 'forkbuild fetch --wheels'])
    parser.add_argument("--wheels", action="store_true", help="also download every pinned wheel (all Python tags)")
    parser.add_argument("--verify", action="store_true",
                        help="re-hash every cached pinned wheel (a mismatch is "
                             "fetched again) and `git fsck` the cache repository")
    parser.set_defaults(run=run)


def run(args, context) -> int:
    upstream = context.series.upstream
    cache = context.upstream
    if args.verify:  # first: a damaged cache is named, not imported over
        for line in cache.verify(upstream):
            context.reporter.info(line)
    commit = cache.ensure(upstream)
    cache.check_readable(commit)
    context.reporter.info(f"{upstream.name} {upstream.version}: {upstream.tag} = {commit[:12]} in {cache.repo_path}")
    if args.wheels:
        for pin in upstream.wheels:
            context.reporter.info(f"{pin.filename}: {cache.wheel(pin)}")
    return 0
