"""`forkbuild status`: the series' patches and variants, as tables or JSON (stdout)."""

from __future__ import annotations

import json

from rich.console import Console
from rich.table import Table

from forkbuild.commands import add_command
from forkbuild.status import SeriesStatus, series_status


def add_parser(subparsers) -> None:
    parser = add_command(
        subparsers, "status", help="list patches (feature, guards, files, +/-) and variants",
        description='Lists the patches (feature, guards, +/-, variants) and the variants (features, patches, env). Fits 80 columns and pipes; --wide shows every column in full (touched files, env values); --json prints everything as JSON on stdout.',
        examples=['forkbuild status', 'forkbuild status --wide', "forkbuild status --json | jq '.patches[].file'"])
    parser.add_argument("--json", action="store_true", help="print the status as JSON on stdout")
    parser.set_defaults(run=run)


def run(args, context) -> int:
    status = series_status(context.series)
    if args.json:
        print(json.dumps(status.to_json(), indent=2))
        return 0
    console = Console(highlight=False)
    console.print(patch_table(status))
    console.print(variant_table(status))
    return 0


def patch_table(status: SeriesStatus) -> Table:
    upstream = status.upstream
    table = Table(title=f"{status.name}: {len(status.patches)} patches on {upstream['name']} {upstream['version']}")
    table.add_column("#")
    table.add_column("patch", no_wrap=True)
    for name in ("feature", "guards", "files"):
        table.add_column(name, overflow="fold")
    for name in ("+", "-", "upstream", "variants"):
        table.add_column(name)
    root = upstream["package_root"] + "/"
    for number, patch in enumerate(status.patches, start=1):
        guards = "\n".join(patch.guards) or ("[dim]unguarded[/]" if patch.unguarded else "")
        if set(patch.guard_trailers) != set(patch.guards) and patch.guards:
            guards += f"\n[yellow]trailers: {', '.join(patch.guard_trailers) or 'none'}[/]"
        table.add_row(str(number), patch.file, patch.feature, guards, "\n".join(path.removeprefix(root) for path in patch.files),
                      f"[green]{patch.added}[/]", f"[red]{patch.removed}[/]", patch.upstream, " ".join(patch.variants))
    return table


def variant_table(status: SeriesStatus) -> Table:
    table = Table("variant", "features", "patches", "env", title=f"variants (default: {status.default_variant})")
    for variant in status.variants:
        env = "\n".join(f"{key}={value}" for key, value in variant.env.items())
        table.add_row(variant.name, ", ".join(variant.features) or "[dim]none[/]", str(len(variant.patches)), env)
    return table
