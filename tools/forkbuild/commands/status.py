"""`forkbuild status`: the series' patches and variants, as tables or JSON (stdout)."""

from __future__ import annotations

import json

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from forkbuild.commands import add_command
from forkbuild.status import SeriesStatus, series_status


def add_parser(subparsers) -> None:
    parser = add_command(
        subparsers, "status", help="list patches (feature, guards, files, +/-) and variants",
        description='Lists the patches (feature, guards, +/-, variants) and the variants (features, patches, env). Fits 80 columns and pipes; --wide shows every column in full (touched files, env values); --json prints everything as JSON on stdout.',
        examples=['forkbuild status', 'forkbuild status --wide', "forkbuild status --json | jq '.patches[].file'"])
    parser.add_argument("--json", action="store_true", help="print the status as JSON on stdout")
    parser.add_argument("--wide", action="store_true",
                        help="every column in full (touched files, upstream status, env values), as wide as it takes")
    parser.set_defaults(run=run)


def run(args, context) -> int:
    status = series_status(context.series)
    if args.json:
        print(json.dumps(status.to_json(), indent=2))
        return 0
    if args.wide:
        # Every column in full: as wide as the content, never wrapped.
        console = Console(highlight=False, width=WIDE)
        tables = [patch_table(status), variant_table(status)]
    else:
        console = Console(highlight=False)
        tables = [narrow_patch_table(status), narrow_variant_table(status)]
    for table in tables:
        console.print(table, crop=False)
    return 0


WIDE = 100_000


def short_guards(guards: tuple[str, ...]) -> str:
    """DSV41_LOOP_ABORT _MAX_PERIOD _MIN_REPEATS: later guards without the first's name."""
    if not guards:
        return ""
    first = guards[0]
    return " ".join([first, *(guard.removeprefix(first) for guard in guards[1:])])


def narrow_patch_table(status: SeriesStatus) -> Table:
    """One patch in two lines of at most ~70 columns: file, +/-, files, variants;
    then feature and guards (wrapped at spaces only)."""
    upstream = status.upstream
    table = Table(title=f"{status.name}: {len(status.patches)} patches on {upstream['name']} {upstream['version']}",
                  box=box.SIMPLE_HEAD, pad_edge=False, title_justify="left")
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("patch / feature: guards", no_wrap=False, overflow="fold")
    table.add_column("+/-", no_wrap=True, justify="right")
    table.add_column("files", no_wrap=True, justify="right")
    table.add_column("variants", no_wrap=False)
    for number, patch in enumerate(status.patches, start=1):
        guards = short_guards(patch.guards) or ("[dim]unguarded[/]" if patch.unguarded else "")
        if set(patch.guard_trailers) != set(patch.guards) and patch.guards:
            guards += f" [yellow](trailers: {' '.join(patch.guard_trailers) or 'none'})[/]"
        name = escape(patch.file) + ("" if patch.upstream == "local" else f" [cyan]({patch.upstream})[/]")
        detail = f"[dim]{escape(patch.feature)}[/]" + (f": {guards}" if guards else "")
        table.add_row(str(number), f"{name}\n{detail}", f"[green]+{patch.added}[/] [red]-{patch.removed}[/]",
                      str(len(patch.files)), " ".join(patch.variants) or "[yellow]none[/]")
    return table


def narrow_variant_table(status: SeriesStatus) -> Table:
    table = Table(title=f"variants (default: {status.default_variant}); --wide: env values and files",
                  box=box.SIMPLE_HEAD, pad_edge=False, title_justify="left")
    table.add_column("variant", no_wrap=True)
    table.add_column("patches", justify="right", no_wrap=True)
    table.add_column("env", justify="right", no_wrap=True)
    table.add_column("features")
    for variant in status.variants:
        table.add_row(variant.name, str(len(variant.patches)), str(len(variant.env)),
                      escape(" ".join(variant.features)) or "[dim]none[/]")
    return table


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
