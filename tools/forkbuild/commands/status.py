"""`forkbuild status`: what waits for a person (a stopped rebase or `apply --all`, a series tree
ahead of or behind patches/), the series' patches and variants, as tables or JSON (stdout)."""

from __future__ import annotations

import json
from pathlib import Path

from rich import box
from rich.console import Console
from rich.table import Column, Table

from forkbuild.commands import add_command
from forkbuild.console import cells, styled
from forkbuild.errors import ForkbuildError, quoted
from forkbuild.io.git import Git
from forkbuild.series.config import Series
from forkbuild.series.layout import REBASE_JOURNAL, SERIES_TREE
from forkbuild.series.patchfile import read_patch
from forkbuild.worktree.state import read_state, read_stop

WIDE = 100_000


def add_parser(subparsers) -> None:
    parser = add_command(
        subparsers, "status", help="list patches (feature, guards, files, +/-) and variants",
        description='Says what waits for a person (a stopped rebase or `apply --all`, a series tree with commits not exported or behind patches/, and the command that goes on), then lists the patches (feature, guards, +/-, variants) and the variants (features, patches, env). Fits 80 columns and pipes; --wide shows every column in full (touched files, env values); --json prints everything as JSON on stdout.',
        examples=['forkbuild status', 'forkbuild status --wide', "forkbuild status --json | jq '.patches[].file'"])
    parser.add_argument("--json", action="store_true", help="print the status as JSON on stdout")
    parser.add_argument("--wide", action="store_true",
                        help="every column in full (touched files, upstream status, env values), as wide as it takes")
    parser.set_defaults(run=run)


def series_status(series: Series) -> dict:
    """Everything status shows, as the JSON `--json` prints."""
    patches = []
    # Each variant's features once (a set): linear in the patches, not one variant scan per patch.
    features_of = {name: frozenset(variant.features) for name, variant in series.variants.items()}
    for entry in series.patches:
        info = read_patch(entry.path)
        patches.append({
            "file": entry.file, "subject": info.subject, "feature": entry.feature, "upstream": entry.upstream_status,
            "guards": [guard.env for guard in series.features[entry.feature].guards],  # from series.toml
            "guard_trailers": info.trailer("Guard"), "unguarded": entry.unguarded,
            "files": [change.path for change in info.files], "added": info.added, "removed": info.removed,
            "variants": [name for name, features in features_of.items() if entry.feature in features]})
    variants = [{"name": variant.name, "description": variant.description, "features": list(variant.features),
                 "patches": [entry.file for entry in series.patches_for(variant.name)], "env": dict(variant.env)}
                for variant in series.variants.values()]
    upstream = series.upstream
    return {"name": series.name,
            "upstream": {key: getattr(upstream, key) for key in ("name", "version", "source", "tag", "package_root")},
            "default_variant": series.default_variant, "patches": patches, "variants": variants,
            # Features that lost their last patch (drop, a rebase): declared, in no variant, to be ported.
            "unported": [name for name, feature in series.features.items() if not feature.ported]}


def waiting(context) -> list[dict]:
    """A rebase journaled in the series (stopped or interrupted) and an `apply --all` stopped in the
    series work tree: where each is and the command that goes on from it."""
    found: list[dict] = []
    if (context.series_dir / REBASE_JOURNAL).is_dir():  # the rebase's code only then (~25 ms of imports)
        found += _rebase_waiting(context.series_dir)
    tree = context.series_dir / SERIES_TREE
    if (tree / ".git").is_file():
        try:
            stop = read_stop(Git(tree))
        except ForkbuildError as error:
            found.append({"command": "apply", "phase": "unreadable", "state": error.message, "next": error.hint})
        else:
            if stop is None:
                found += _tree_waiting(context.series, tree)
            else:
                position = [stop.cursor + 1, len(stop.jobs)]
                found.append({
                    "command": "apply", "phase": "conflict", "tree": str(tree), "patch": stop.stopped.name,
                    "position": position, "state": f"stopped at {stop.stopped.name} ({position[0]} of "
                                                   f"{position[1]}) in {tree}",
                    "next": f"resolve it (`git add`), then `forkbuild apply --continue --dir {quoted(str(tree))}` and "
                            "`forkbuild export`; `--skip` leaves the patch out of the tree; `--abort` puts the tree back"})
    return found


def _tree_waiting(series: Series, tree: Path) -> list[dict]:
    """The series work tree against patches/: commits made there and not exported yet, or patch
    files changed since it was applied (what `export` and `apply --all` would bring together)."""
    from forkbuild.exporter import changed_since_applied

    try:
        state = read_state(tree)
        if state is None or state.variant or state.sha256 is None:  # not the series' tree, or made before hashes
            return []
        worktree = Git(tree)
        ahead = len(worktree.commits(state.head, worktree.head()))
        changed = sorted(name for name, _ in changed_since_applied(series, state))
    except (ForkbuildError, OSError) as error:  # its state unreadable, a patch file gone: export and check say more
        what = getattr(error, "message", None) or str(error)
        return [{"command": "series tree", "phase": "unreadable", "tree": str(tree), "state": f"{tree}: {what}",
                 "next": getattr(error, "hint", "") or "`forkbuild check` names what is wrong"}]
    if not ahead and not changed:
        return []
    lines = ([f"{ahead} commit(s) made there, not exported to patches/"] if ahead else []) + (
        [f"patches/ changed since it was applied: {', '.join(changed[:5])}" + (" ..." if len(changed) > 5 else "")]
        if changed else [])
    then = ("`forkbuild export` writes them" if not changed else "`forkbuild apply --all` brings it up to date"
            if not ahead else "`forkbuild export --check` says how to bring the two together")
    return [{"command": "series tree", "phase": "ahead" if not changed else "behind" if not ahead else "diverged",
             "tree": str(tree), "ahead": ahead, "changed": changed, "state": f"{tree}: " + "; ".join(lines),
             "next": then}]


def _rebase_waiting(series_dir: Path) -> list[dict]:
    from forkbuild.rebase.journal import Journal, Phase

    journal = Journal(series_dir)
    if not journal.exists():
        return []
    try:
        state = journal.load()
    except ForkbuildError as error:
        return [{"command": "rebase", "phase": "unreadable", "state": error.message, "next": error.hint}]
    position = [min(state.cursor + 1, len(state.patches)), len(state.patches)]  # the patch at the cursor
    stopped = state.phase is Phase.CONFLICT and state.cursor < len(state.patches)
    patch = state.patches[state.cursor].file if stopped else ""
    if state.tree_gone:
        where = f"its work tree {state.worktree} is gone ({state.phase}; {state.cursor} of {len(state.patches)} replayed)"
        then = "it cannot go on without it: start it again after `--abort`"
    elif stopped:
        where = f"stopped at {patch} ({position[0]} of {position[1]}) in {state.worktree}"
        then = "resolve it (`git add`), then `forkbuild rebase --continue`; `--skip` leaves the patch out"
    elif state.phase is Phase.REVIEW:
        where, then = "every patch replayed, waiting for review", "`forkbuild rebase --continue` writes the series"
    elif state.phase is Phase.CHECK_FAILED:
        where = "the series is written, but `forkbuild check` failed"
        then = "fix series.toml or patches/, then `forkbuild rebase --continue` checks again"
    else:
        where = f"interrupted ({state.phase}; {state.cursor} of {len(state.patches)} patches replayed)"
        then = "`forkbuild rebase --continue` goes on"
    return [{"command": "rebase", "phase": str(state.phase), "onto": state.target.version, "tree": str(state.worktree),
             "patch": patch, "position": position, "state": f"onto {state.target.version}, {where}",
             "next": f"{then}; `--abort` puts everything back"}]


def run(args, context) -> int:
    status = series_status(context.series) | {"in_progress": waiting(context)}
    if args.json:
        print(json.dumps(status, indent=2))
        return 0
    if args.wide:  # every column in full, never wrapped
        console, tables = Console(highlight=False, markup=False, width=WIDE), [patch_table(status), variant_table(status)]
    else:
        console, tables = Console(highlight=False, markup=False), [narrow_patch_table(status), narrow_variant_table(status)]
    for item in status["in_progress"]:
        title = item["command"] if item["command"] == "series tree" else f"{item['command']} in progress"
        console.print(styled((f"{title}:", "bold yellow"), f" {item['state']}\n  next: {item['next']}"))
    for table in tables:
        console.print(table, crop=False)
    if status["unported"]:
        console.print(styled(("no patch", "yellow"), f" on {status['upstream']['version']} (`ported = false`: in no "
                             "variant until `forkbuild export` writes one; `forkbuild new FEATURE` starts it): "
                             + " ".join(status["unported"])))
    return 0


def _title(status: dict) -> str:
    return f"{status['name']}: {len(status['patches'])} patches on {status['upstream']['name']} {status['upstream']['version']}"


def _trailers_differ(patch: dict) -> bool:
    return bool(patch["guards"]) and set(patch["guard_trailers"]) != set(patch["guards"])


def narrow_patch_table(status: dict) -> Table:
    """One patch in two lines of at most ~70 columns: file, +/-, files, variants; then feature and guards."""
    table = Table(Column("#", justify="right", no_wrap=True), Column("patch / feature: guards", overflow="fold"),
                  Column("+/-", no_wrap=True, justify="right"), Column("files", no_wrap=True, justify="right"),
                  "variants", title=_title(status), box=box.SIMPLE_HEAD, pad_edge=False, title_justify="left")
    for number, patch in enumerate(status["patches"], start=1):
        # DSV41_LOOP_ABORT _MAX_PERIOD _MIN_REPEATS: later guards without the first's name.
        first, *rest = patch["guards"] or [""]
        guards = styled(" ".join([first, *(guard.removeprefix(first) for guard in rest)]) or
                        (("unguarded", "dim") if patch["unguarded"] else ""))
        if _trailers_differ(patch):
            guards.append(f" (trailers: {' '.join(patch['guard_trailers']) or 'none'})", style="yellow")
        upstream = () if patch["upstream"] == "local" else (" ", (f"({patch['upstream']})", "cyan"))
        cell = styled(patch["file"], *upstream, "\n", (patch["feature"], "dim"), *((": ", guards) if guards else ()))
        table.add_row(*cells(str(number), cell, styled((f"+{patch['added']}", "green"), " ", (f"-{patch['removed']}", "red")),
                      str(len(patch["files"])), " ".join(patch["variants"]) or styled(("none", "yellow"))))
    return table


def narrow_variant_table(status: dict) -> Table:
    table = Table(Column("variant", no_wrap=True), *(Column(name, justify="right", no_wrap=True) for name in
                                                     ("patches", "env")), "features", box=box.SIMPLE_HEAD,
                  title=f"variants (default: {status['default_variant']}); --wide: env values and files",
                  pad_edge=False, title_justify="left")
    for variant in status["variants"]:
        table.add_row(*cells(variant["name"], str(len(variant["patches"])), str(len(variant["env"])),
                      " ".join(variant["features"]) or styled(("none", "dim"))))
    return table


def patch_table(status: dict) -> Table:
    table = Table("#", Column("patch", no_wrap=True), *(Column(name, overflow="fold") for name in
                                                       ("feature", "guards", "files")),
                  "+", "-", "upstream", "variants", title=_title(status))
    root = status["upstream"]["package_root"] + "/"
    for number, patch in enumerate(status["patches"], start=1):
        guards = styled("\n".join(patch["guards"]) or (("unguarded", "dim") if patch["unguarded"] else ""))
        if _trailers_differ(patch):
            guards.append(f"\ntrailers: {', '.join(patch['guard_trailers']) or 'none'}", style="yellow")
        table.add_row(*cells(str(number), patch["file"], patch["feature"], guards,
                      "\n".join(path.removeprefix(root) for path in patch["files"]),
                      styled((str(patch["added"]), "green")), styled((str(patch["removed"]), "red")), patch["upstream"],
                      " ".join(patch["variants"])))
    return table


def variant_table(status: dict) -> Table:
    table = Table("variant", "features", "patches", "env", title=f"variants (default: {status['default_variant']})")
    for variant in status["variants"]:
        env = "\n".join(f"{key}={value}" for key, value in variant["env"].items())
        features = ", ".join(variant["features"]) or styled(("none", "dim"))
        table.add_row(*cells(variant["name"], features, str(len(variant["patches"])), env))
    return table
