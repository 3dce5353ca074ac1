"""Export: patches/, series.toml's [[patches]] and `patches/series` from the commits of the
full-series work tree, one `git format-patch` file per commit. Index/offset noise alone keeps
a file (unless `refresh`); an entry without a commit stops the export unless kept or dropped.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path

from forkbuild.applier import file_hashes, refuse_unsaved_work, series_hashes
from forkbuild.context import Context
from forkbuild.errors import ConfigError, DirtyTreeError, ExportDriftError, ForkbuildError, quoted
from forkbuild.io.chaos import chaos_point
from forkbuild.io.fsutil import write_atomic
from forkbuild.io.git import Git
from forkbuild.new_feature import PATCH_NAME, PATCH_TRAILER
from forkbuild.series.config import (
    FEATURE_NAME,
    GUARD_NAME,
    PatchEntry,
    Series,
    load_series,
    near_miss,
    parse_series,
)
from forkbuild.series.dep3 import placeholder_problem, template_comments
from forkbuild.series.edit import EntrySpec, quilt_series_text, unported, updated_series_toml
from forkbuild.series.layout import DROPPED_DIR, PATCHES_DIR, new_variants
from forkbuild.series.patchfile import PatchInfo, parse_patch, read_patch, read_text
from forkbuild.series.writer import SeriesChange, SeriesTransaction, series_transaction
from forkbuild.worktree.guard import tree_guard
from forkbuild.worktree.guards_module import generated_commit_problems, is_generated
from forkbuild.worktree.state import WorktreeState, read_state, write_state

# What changes in a patch when only its position moved: `index` blob ids, hunk header line numbers.
NOISE = (
    re.compile(r"^index [0-9a-f]+\.\.[0-9a-f]+(?: [0-7]{6})?$", re.MULTILINE),
    re.compile(r"^@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@.*$", re.MULTILINE),
)
SLUG_LENGTH = 48


@dataclass(frozen=True, kw_only=True)
class ExportedPatch:
    file: str
    feature: str
    upstream: str
    commit: str
    text: str  # fresh `git format-patch` output
    action: str  # "unchanged" | "noise" (kept: index/offset changes only) | "changed" | "new"


@dataclass(frozen=True, kw_only=True)
class ExportPlan:
    patches_dir: Path
    head: str
    patches: tuple[ExportedPatch, ...]
    removed: tuple[str, ...]
    kept: tuple[str, ...] = ()  # entries with no commit kept as they are (--keep)
    unported: tuple[str, ...] = ()  # what --drop changed of the features it left without a patch
    joined: tuple[str, ...] = ()  # features `new` left waiting that got their first patch, as asked
    series_toml: str | None  # the new series.toml text, None when unchanged
    quilt_series: str | None  # the new patches/series text, None when unchanged

    def changes(self) -> list[str]:
        crlf = {p.file for p in self.patches if (self.patches_dir / p.file).is_file()
                and b"\r\n" in (self.patches_dir / p.file).read_bytes()}
        lines = [f"patches/{p.file} ({p.action}{': CRLF line endings' if p.file in crlf else ''})"
                 for p in self.patches if p.action in ("new", "changed")]
        lines += [f"patches/{name} (removed)" for name in self.removed]
        if self.series_toml is not None:
            lines.append("series.toml (the patch list)")
        if self.quilt_series is not None:
            lines.append("patches/series")
        return lines


def export_series(*, context: Context, tree: Path, check: bool = False, refresh: bool = False,
                  drops: tuple[str, ...] = (), keeps: tuple[str, ...] = (),
                  series_toml: str | None = None, transaction: SeriesTransaction | None = None) -> ExportPlan:
    """Plan the export of `tree`; with check, raise ExportDriftError on any change, else write it.
    series_toml: the text to write the entries into instead of the file's (the rebase's moved pin:
    the series is parsed from it). transaction: the caller's, open (the rebase's finish restores the
    series first in it)."""
    with (nullcontext(transaction) if transaction else series_transaction(context.series_dir)) as transaction, \
            tree_guard(tree, "export") as guard:  # no apply beside
        # Read under the lock, not before it (or the rebase's moved pin, parsed from its text).
        series = load_series(context.series_file) if series_toml is None else \
            parse_series(series_toml, path=context.series_file.resolve())
        killed = guard.killed
        if killed is not None and killed.phase == "changing":  # the tree holds part of the series
            raise DirtyTreeError(
                f"{tree}: {killed.describe()} was killed while it was building this tree; "
                "its commits are only part of the series",
                hint=f"rebuild it: `forkbuild {killed.command} --all --dir {quoted(tree)}` (that run had checked the "
                     "tree held nothing unsaved before it started: it holds only what it made from patches/)")
        worktree, state = _open_tree(context=context, series=series, tree=tree, drops=drops)
        chaos_point("export:checked")
        plan = plan_export(series, worktree=worktree, base=state.base, refresh=refresh,
                           decisions=_decisions(series, drops=drops, keeps=keeps), state=state,
                           series_toml=series_toml)
        if check:
            changes = plan.changes()
            if changes:
                raise ExportDriftError(
                    f"patches/ is not what `forkbuild export` would write from {tree}:\n"
                    + "\n".join(f"  - {line}" for line in changes),
                    hint=f"run `forkbuild export --dir {quoted(tree)}` and commit the result")
            return plan
        save_aside(context, plan.removed)
        transaction.write(SeriesChange(
            series_toml=plan.series_toml, quilt_series=plan.quilt_series, removed=plan.removed,
            patches={patch.file: patch.text for patch in plan.patches if patch.action in ("new", "changed")}))
        forget_joins(series, {patch.feature for patch in plan.patches})
        # The tree's commits are the series now: apply may refresh it, export write from it.
        files = [patch.file for patch in plan.patches]
        write_state(worktree, replace(state, head=plan.head, patches=tuple(files),
                                      commits={patch.file: patch.commit for patch in plan.patches},
                                      sha256=file_hashes(series.patches_dir, files)))
    return plan


def _open_tree(*, context: Context, series: Series, tree: Path, drops: tuple[str, ...]) -> tuple[Git, WorktreeState]:
    """The full-series work tree at `tree` and its state, refusing any state export could lose."""
    if not (tree / ".git").exists():
        empty = not tree.exists() or (tree.is_dir() and not any(tree.iterdir()))  # where apply makes a tree
        hint = (f"make it with `forkbuild apply --all --dir {quoted(tree)}`" if empty else
                "export reads a tree `forkbuild apply --all` made (its own, or one at a new --dir)")
        raise ForkbuildError(f"{tree} is not a work tree", hint=hint)
    state = read_state(tree)
    if state is None:
        raise ForkbuildError(f"{tree} was not made by `forkbuild apply`", hint="make one with `forkbuild apply --all --dir <new dir>`")
    if state.variant:
        raise ForkbuildError(f"{tree} holds variant {state.variant!r} only: exporting it would drop the other patches",
                             hint="export the whole series' tree: `forkbuild apply --all` (default .forkbuild-work/series)")
    worktree = Git(tree)
    refuse_unsaved_work(worktree)
    _refuse_stale_tree(context, series, state=state, worktree=worktree, dropped=set(drops))
    base = state.base
    # The verified import, not the tag: a moved tag must not keep the user's work from being saved.
    pinned = context.upstream.verified(series.upstream) or context.upstream.ensure(series.upstream)
    if pinned and pinned != base:
        raise ForkbuildError(f"{tree} is built on {base[:12]}, but series.toml pins {series.upstream.tag} = {pinned[:12]}",
                             hint="re-apply the series onto the pinned upstream (forkbuild apply --all) and redo the change there")
    head = worktree.head()
    if not worktree.is_ancestor(base, head):
        raise ForkbuildError(f"{tree}: HEAD {head[:12]} is not on top of the upstream base {base[:12]}")
    if worktree.merge_commits(base, head):
        raise ForkbuildError(f"{tree}: merge commits cannot become patches", hint="linearize the history (git rebase)")
    return worktree, state


def changed_since_applied(series: Series, state: WorktreeState, *, dropped: Iterable[str] = ()) -> list[tuple[str, str]]:
    """The patch files that are not those the tree was applied from: (name, how). A patch `forkbuild
    drop` removed (now or in `dropped`) is gone from series.toml on purpose."""
    recorded, current, gone = state.sha256 or {}, series_hashes(series), {*dropped, *state.dropped}
    found = [(name, "changed") for name in current if name in recorded and recorded[name] != current[name]]
    found += [(name, "added to series.toml") for name in current if name not in recorded]
    return found + [(name, "no longer in series.toml") for name in recorded if name not in current and name not in gone]


def _refuse_stale_tree(context: Context, series: Series, *, state: WorktreeState, worktree: Git, dropped: set[str]) -> None:
    """Refuse a tree made from other patch files than patches/ holds: its commits would overwrite them."""
    tree = worktree.path
    if state.sha256 is None:
        context.reporter.warn(f"{tree} records no patch hashes (made by an older forkbuild): export cannot tell "
                              f"whether patches/ changed since it was applied")
        return
    changes = [f"patches/{name} ({how})" for name, how in changed_since_applied(series, state, dropped=dropped)]
    current = [entry.file for entry in series.patches]
    listed = [name for name in current if name in state.patches]
    if listed != [name for name in state.patches if name in current]:
        changes.append("series.toml (the order of [[patches]]: export would put the tree's order back)")
    if not changes:
        return
    try:  # an export killed before it recorded its write in the tree: nothing to overwrite
        if not plan_export(series, worktree=worktree, base=state.base, refresh=False).changes():
            return
    except ForkbuildError:
        pass
    message = (f"patches/ changed since {tree} was applied; exporting it would overwrite that with the tree's "
               "older commits:\n" + "\n".join(f"  - {line}" for line in changes))
    head, applied = worktree.head(), state.head
    if head == applied:
        raise DirtyTreeError(message, hint=f"re-apply the tree (forkbuild apply --all --dir {quoted(tree)}): it holds no "
                                           "commits of yours; then make your change there and export")
    raise DirtyTreeError(message, hint=(
        f"{tree} holds commits that are not exported: apply the current series into a new tree "
        f"(forkbuild apply --all --dir NEW), bring them over (new commits: git -C NEW cherry-pick "
        f"{applied[:12]}..{head[:12]}; amended ones: redo the change), export from there "
        f"(forkbuild export --dir NEW), then re-apply {tree}"))


@dataclass(frozen=True, kw_only=True)
class _Commit:
    sha: str
    text: str
    info: PatchInfo

    @property
    def label(self) -> str:
        return f"commit {self.sha[:12]} {self.info.subject!r}"


def plan_export(series: Series, *, worktree: Git, base: str, refresh: bool,
                decisions: dict[str, str] | None = None, state: WorktreeState | None = None,
                series_toml: str | None = None) -> ExportPlan:
    head = worktree.head()
    commits = _patch_commits(series, worktree, base, head)
    matches = match_commits(commits, series.patches)
    _check_trailers(series, commits, matches, where=worktree.path)
    names = _new_names(series, commits, matches)
    if state is not None:
        _refuse_revived(commits, matches, names, state=state, worktree=worktree)
    patches = []
    for commit, entry in zip(commits, matches, strict=True):
        file = entry.file if entry else names[commit.sha]
        path = series.patches_dir / file
        old = read_text(path) if path.is_file() else None  # line endings as they are: a CRLF file must show
        action = "new" if old is None else "unchanged" if old == commit.text else \
            "noise" if not refresh and normalized(old) == normalized(commit.text) else "changed"
        patches.append(ExportedPatch(file=file, feature=commit.info.trailer("Feature")[0],
                                     upstream=entry.upstream_status if entry else "local",
                                     commit=commit.sha, text=commit.text, action=action))
    exported = {entry.file for entry in matches if entry}
    missing = [entry for entry in series.patches if entry.file not in exported]
    decisions = decisions or {}
    _refuse_implicit_drops(missing=missing, decisions=decisions, state=state,
                           worktree=worktree, exported=exported)
    removed = tuple(entry.file for entry in missing if decisions.get(entry.file) == "drop")
    kept = tuple(entry.file for entry in missing if decisions.get(entry.file) == "keep")
    specs = _with_kept(series, [EntrySpec(file=p.file, feature=p.feature, upstream=p.upstream) for p in patches],
                       kept=kept)
    current_toml = series.path.read_text()
    new_toml, left, joined = unported(updated_series_toml(current_toml if series_toml is None else series_toml, specs),
                                      series, specs, joins=new_joins(series))
    quilt_path = series.patches_dir / "series"
    quilt = quilt_series_text(spec.file for spec in specs)
    old_quilt = quilt_path.read_text() if quilt_path.is_file() else None
    return ExportPlan(patches_dir=series.patches_dir, head=head, patches=tuple(patches),
                      removed=removed, kept=kept, unported=left, joined=joined,
                      series_toml=None if new_toml == current_toml else new_toml,
                      quilt_series=None if quilt == old_quilt else quilt)


def new_joins(series: Series) -> dict[str, list[str]]:
    """The variants `forkbuild new` recorded for each feature still without a patch (layout.new_variants)."""
    joins = {}
    for name, feature in series.features.items():
        path = new_variants(series.root, name)
        if not feature.ported and path.is_file():
            joins[name] = path.read_text(errors="replace").split()  # a name that is no variant is passed over
    return joins


def forget_joins(series: Series, features: set[str]) -> None:
    """Those features have a patch now: they joined (or never waited)."""
    for feature in features:
        new_variants(series.root, feature).unlink(missing_ok=True)


def _refuse_revived(commits: list[_Commit], matches: list[PatchEntry | None], names: dict[str, str], *,
                    state: WorktreeState, worktree: Git) -> None:
    """A commit of a patch `forkbuild drop` removed (the very commit the tree recorded for it, or one
    that would be written under its name) is no new patch: exporting it would undo the drop."""
    dropped = {state.commits[name]: name for name in state.dropped if name in state.commits}
    revived = [commit for commit, entry in zip(commits, matches, strict=True)
               if entry is None and (commit.sha in dropped or names[commit.sha] in state.dropped)]
    if not revived:
        return
    tree = quoted(worktree.path)
    hint = (f"re-apply the tree, which holds nothing else of yours: `forkbuild apply --all --dir {tree}`"
            if worktree.head() == state.head else "remove the commit from the tree: " + "; ".join(
                f"`git -C {tree} rebase --onto {commit.sha[:12]}^ {commit.sha[:12]}`" for commit in revived))
    raise DirtyTreeError("\n".join(f"{commit.label}: is patches/{dropped.get(commit.sha, names[commit.sha])}, which "
                                   "`forkbuild drop` removed from the series; exporting it would bring it back"
                                   for commit in revived),
                         hint=hint + " (to keep it after all: give its commit another `Patch: <name>.patch` trailer)")


def _decisions(series: Series, *, drops: tuple[str, ...], keeps: tuple[str, ...]) -> dict[str, str]:
    known = {entry.file for entry in series.patches}
    unknown = [f"--{how} {name}: no such patch in series.toml{near_miss(name, known)}"
               for how, names in (("drop", drops), ("keep", keeps)) for name in names if name not in known]
    unknown += [f"{name}: given to both --drop and --keep" for name in sorted(set(drops) & set(keeps))]
    if unknown:
        raise ConfigError(unknown, source="export")
    return {**{name: "keep" for name in keeps}, **{name: "drop" for name in drops}}


def _refuse_implicit_drops(*, missing: list[PatchEntry], decisions: dict[str, str],
                           state: WorktreeState | None, worktree: Git, exported: set[str]) -> None:
    """Stop, naming every entry without a commit that the caller said nothing about."""
    tree = worktree.path
    present = [name for name, how in decisions.items() if how == "drop" and name in exported]
    if present:
        commits = state.commits if state else {}
        removals = "; ".join(f"git -C {quoted(tree)} rebase --onto {commits[name][:12]}^ {commits[name][:12]}"
                             for name in present if name in commits)
        raise DirtyTreeError(f"--drop {', '.join(present)}: still a commit in {tree}, export would write it",
                             hint=f"remove its commit from the tree first ({removals or f'git -C {quoted(tree)} rebase -i'}), "
                                  "then export --drop again")
    undecided = [entry for entry in missing if entry.file not in decisions]
    if not undecided:
        return
    lines = [f"  - patches/{entry.file}: {_why_missing(entry, state=state, tree=tree)}" for entry in undecided]
    names = " ".join(quoted(entry.file) for entry in undecided)
    raise DirtyTreeError(
        f"{len(undecided)} patch(es) of series.toml have no commit in {tree}; export would lose them:\n"
        + "\n".join(lines),
        hint=f"keep them as they are: `forkbuild export --keep {names}` (then `forkbuild apply --all` stops at "
             f"each, to repair it); or drop them on purpose: `forkbuild export --drop {names}`")


def _why_missing(entry: PatchEntry, *, state: WorktreeState | None, tree: Path) -> str:
    outcome = state.missing.get(entry.file) if state else None
    if outcome:
        return (f"it did not apply when {tree.name} was made ({outcome}); patches/{entry.file} is unchanged")
    commit = state.commits.get(entry.file) if state else None
    if commit:
        return (f"its commit {commit[:12]} is gone from the tree (reset or rebased away); "
                f"get it back: git -C {quoted(tree)} cherry-pick {commit[:12]}, then export")
    return "no commit of the tree matches it (by subject or by place and feature)"


def _with_kept(series: Series, specs: list[EntrySpec], *, kept: tuple[str, ...]) -> list[EntrySpec]:
    """The exported entries with the kept ones back in their series.toml place (after the
    nearest entry before them that is still there)."""
    result = list(specs)
    for index, entry in enumerate(series.patches):
        if entry.file not in kept:
            continue
        earlier = {other.file for other in series.patches[:index]}
        position = max((at + 1 for at, spec in enumerate(result) if spec.file in earlier), default=0)
        result.insert(position, EntrySpec(file=entry.file, feature=entry.feature, upstream=entry.upstream_status))
    return result


def save_aside(context: Context, names: tuple[str, ...]) -> Path:
    """Copy patch files about to be dropped to .forkbuild-work/dropped/<time>/ (nothing is lost)."""
    target = context.series_dir / DROPPED_DIR / time.strftime("%Y%m%d-%H%M%S")
    if not names:
        return target
    target.mkdir(parents=True, exist_ok=True)
    for name in names:
        source = context.series_dir / PATCHES_DIR / name
        if source.is_file():
            write_atomic(target / name, source.read_bytes())
    return target


def _patch_commits(series: Series, worktree: Git, base: str, head: str) -> list[_Commit]:
    """The commits that are patches: forkbuild's generated guards commit is not one."""
    commits = []
    for sha in worktree.commits(base, head):
        text = worktree.format_patch(sha)
        commits.append(_Commit(sha=sha, text=text, info=parse_patch(text, path=Path(f"{sha[:12]}.patch"))))
    problems = [problem for commit in commits
                for problem in generated_commit_problems(series, commit.info, label=commit.label)]
    if problems:
        raise ConfigError(problems, source=f"commits of {worktree.path}")
    return [commit for commit in commits if not is_generated(commit.info)]


def match_commits(commits: list[_Commit], entries: tuple[PatchEntry, ...]) -> list[PatchEntry | None]:
    """The series entry of each commit: same subject first, then same position and feature."""
    subjects = {entry.file: read_patch(entry.path).subject for entry in entries}
    used: set[str] = set()
    matches: list[PatchEntry | None] = [None] * len(commits)
    for index, commit in enumerate(commits):
        for entry in entries:
            if entry.file not in used and subjects[entry.file] == commit.info.subject:
                matches[index] = entry
                used.add(entry.file)
                break
    # A reworded commit keeps its place in the series (and its feature).
    for index, commit in enumerate(commits):
        if matches[index] is None and index < len(entries):
            entry = entries[index]
            if entry.file not in used and entry.feature in commit.info.trailer("Feature"):
                matches[index] = entry
                used.add(entry.file)
    return matches


def _check_trailers(series: Series, commits: list[_Commit], matches: list[PatchEntry | None], *, where: Path) -> None:
    problems, unwritten = [], False
    for commit, entry in zip(commits, matches, strict=True):
        features = commit.info.trailer("Feature")
        if problem := placeholder_problem(commit.info):
            problems.append(f"{commit.label}: {problem}")
            unwritten = True
        if len(features) != 1:
            if not template_comments(commit.info):  # else the '#' lines hide the trailers: said above
                problems.append(f"{commit.label}: needs exactly one `Feature: <name>` trailer (has {len(features)})")
            continue
        feature = features[0]
        names = commit.info.trailer(PATCH_TRAILER)
        if len(names) > 1 or (names and not PATCH_NAME.fullmatch(names[0])):
            problems.append(f"{commit.label}: needs at most one `{PATCH_TRAILER}: <name>.patch` trailer, a plain "
                            f"file name (has {', '.join(map(repr, names))})")
        if entry and entry.feature != feature:
            problems.append(f"{commit.label}: its trailer says Feature: {feature}, "
                            f"but series.toml lists patches/{entry.file} under feature {entry.feature!r}")
        if feature not in series.features:
            problems.append(f"{commit.label}: Feature: {feature} is not a feature of series.toml"
                            f"{near_miss(feature, series.features)}")
            continue
        declared = {guard.env for guard in series.features[feature].guards}
        for guard in commit.info.trailer("Guard"):
            if guard not in declared:
                problems.append(f"{commit.label}: Guard: {guard} is not a guard of feature {feature!r} "
                                f"(declared: {', '.join(sorted(declared)) or 'none'})")
    if problems:
        unknown = {feature for commit in commits for feature in commit.info.trailer("Feature")
                   if feature not in series.features}
        # `new` only for a name it takes and no near miss of a known one; the rest is a trailer to reword.
        new = sorted(feature for feature in unknown if FEATURE_NAME.fullmatch(feature)
                     and not near_miss(feature, series.features))
        hint = ("reword it in the work tree (`git commit --amend`; an earlier commit: `git rebase -i`), then export"
                if unwritten or len(new) < len(unknown) else None)
        if new and not hint:
            hint = ("add the feature to series.toml and a variant first (each guard's TYPE:DEFAULT as the code "
                    "reads it): " + "; ".join(_new_command(series, commits, feature) for feature in new))
        raise ConfigError(problems, source=f"commits of {where}", hint=hint)


def _new_command(series: Series, commits: list[_Commit], feature: str) -> str:
    """`forkbuild new` for a feature the commits name, with the guards their trailers name."""
    guards = dict.fromkeys(guard for commit in commits if feature in commit.info.trailer("Feature")
                           for guard in commit.info.trailer("Guard") if GUARD_NAME.fullmatch(guard))
    options = "".join(f" --guard {guard}:switch:0" for guard in guards)
    return f"forkbuild new {feature}{options} --variant {series.default_variant}"


def _new_names(series: Series, commits: list[_Commit], matches: list[PatchEntry | None]) -> dict[str, str]:
    """A file name for each commit without an entry: `<feature>-<subject slug>.patch`, unique."""
    taken = {entry.file for entry in series.patches} | {path.name for path in series.patches_dir.glob("*")}
    names = {}
    for commit, entry in zip(commits, matches, strict=True):
        if entry is None:
            # `forkbuild new --name` writes a Patch: trailer; without one the name comes from the subject.
            asked = commit.info.trailer(PATCH_TRAILER)
            name = asked[0] if asked else patch_name(commit.info.trailer("Feature")[0], commit.info.subject)
            stem, number = name.removesuffix(".patch"), 2
            while name in taken:
                name, number = f"{stem}-{number}.patch", number + 1
            names[commit.sha] = name
            taken.add(name)
    return names


def patch_name(feature: str, subject: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", subject.lower()).strip("-")
    if len(slug) > SLUG_LENGTH:
        slug = slug[:SLUG_LENGTH].rsplit("-", 1)[0]
    prefix = feature.replace("_", "-")
    if slug.startswith(prefix + "-") or slug == prefix:
        return f"{slug}.patch"
    return f"{prefix}-{slug}.patch"


def normalized(text: str) -> str:
    for pattern in NOISE:
        text = pattern.sub("", text)
    return text
