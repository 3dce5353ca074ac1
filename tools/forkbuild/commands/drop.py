"""`forkbuild drop NAME`: remove patches from the series on purpose (copied aside first), as one
series transaction; a feature left without a patch is marked `ported = false` (series_edit.unported)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from forkbuild.commands import add_command
from forkbuild.context import Context
from forkbuild.errors import ConfigError, DirtyTreeError, quoted
from forkbuild.exporter import normalized, save_aside
from forkbuild.io.git import Git
from forkbuild.series.config import Series, load_series, near_miss
from forkbuild.series.edit import EntrySpec, quilt_series_text, unported, updated_series_toml
from forkbuild.series.layout import SERIES_TREE
from forkbuild.series.patchfile import read_patch, read_text
from forkbuild.series.writer import SeriesChange, series_transaction
from forkbuild.worktree.state import WorktreeState, read_state, write_state


def add_parser(subparsers) -> None:
    parser = add_command(
        subparsers, "drop", help="remove patches and their series.toml entries on purpose (a copy is kept)",
        description="The only ways a patch leaves the series are this and `export --drop`: export never drops a "
                    "patch because its commit is missing. Each file is copied to .forkbuild-work/dropped/ first.",
        examples=["forkbuild drop loop-abort.patch"])
    parser.add_argument("names", nargs="+", metavar="NAME", help="patch file name as series.toml lists it")
    parser.set_defaults(run=run)


def run(args, context) -> int:
    tree = context.series_dir / SERIES_TREE
    dropped_patches, unported = drop_patches(context, args.names)
    for dropped in dropped_patches:
        context.reporter.info(f"dropped patches/{dropped.file} (feature {dropped.feature}, +{dropped.added}/"
                              f"-{dropped.removed} lines) and its series.toml entry; a copy is in {dropped.saved}")
        if dropped.tree_commit:
            context.reporter.warn(
                f"{tree} still holds its commit {dropped.tree_commit[:12]}: export refuses the tree until it is gone; "
                f"remove it there: git -C {quoted(tree)} rebase --onto {dropped.tree_commit[:12]}^ {dropped.tree_commit[:12]}"
                " (or `forkbuild apply --all`, if the tree holds nothing else of yours)")
    for note in unported:
        context.reporter.warn(note)
    return 0


@dataclass(frozen=True, kw_only=True)
class Dropped:
    file: str
    feature: str
    added: int
    removed: int
    saved: Path
    tree_commit: str  # the series work tree's commit of it ("" if none): export would bring it back


def drop_patches(context: Context, names: list[str]) -> tuple[list[Dropped], tuple[str, ...]]:
    """The patches dropped, and what changed of the features left without a patch."""
    with series_transaction(context.series_dir) as transaction:
        series = load_series(context.series_file)  # read under the lock
        known = {entry.file: entry for entry in series.patches}
        unknown = [f"{name}: no such patch in series.toml{near_miss(name, known)}" for name in names if name not in known]
        if unknown:
            raise ConfigError(unknown, source="drop")
        tree = context.series_dir / SERIES_TREE
        state = read_state(tree) if (tree / ".git").exists() else None
        if state is not None:
            _refuse_amended(series, tree, state, names)
        infos = {name: read_patch(known[name].path) for name in names}
        specs = [EntrySpec(file=entry.file, feature=entry.feature, upstream=entry.upstream_status)
                 for entry in series.patches if entry.file not in names]
        text, left, _ = unported(updated_series_toml(series.path.read_text(), specs), series, specs)
        saved = save_aside(context, tuple(names))
        transaction.write(SeriesChange(series_toml=text, quilt_series=quilt_series_text(spec.file for spec in specs),
                                       removed=tuple(names)))
    commits = {}
    if state is not None:  # so export does not call the tree stale
        worktree = Git(tree)
        head = worktree.head()
        commits = {name: commit for name, commit in state.commits.items()
                   if name in names and worktree.is_ancestor(commit, head)}
        write_state(worktree, replace(state, dropped=tuple(sorted({*state.dropped, *names}))))
    return [Dropped(file=name, feature=known[name].feature, added=infos[name].added, removed=infos[name].removed,
                    saved=saved, tree_commit=commits.get(name, "")) for name in names], left


def _refuse_amended(series: Series, tree: Path, state: WorktreeState, names: list[str]) -> None:
    """A patch whose commit in the series work tree was changed and not exported: dropping
    it would lose that change (the next export would add the commit back as a new patch)."""
    worktree = Git(tree)
    head = worktree.head()
    if head == state.head:
        return
    by_subject: dict[str, str] = {}
    for sha in worktree.commits(state.base, head):
        by_subject.setdefault(worktree.log1("%s", sha), sha)
    for name in names:
        recorded = state.commits.get(name, "")
        if recorded and worktree.is_ancestor(recorded, head):
            continue  # the commit apply made is still there, as it was
        found = by_subject.get(read_patch(series.patches_dir / name).subject)
        if found and normalized(worktree.format_patch(found)) != normalized(read_text(series.patches_dir / name)):
            raise DirtyTreeError(
                f"{name}: its commit in {tree} ({found[:12]}) was changed and not exported; dropping the patch "
                "would lose that change (the next export would add it back as a new patch)",
                hint=f"keep the change: `forkbuild export`, then drop; discard it: remove the commit "
                     f"(git -C {quoted(tree)} rebase --onto {found[:12]}^ {found[:12]}), then drop")
