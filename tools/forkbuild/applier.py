"""Apply a variant: plan (which patches, path safety), then a work tree of upstream plus one
commit per patch, by the apply engine. `apply --all` stops AT a patch that does not apply until
--continue/--skip/--abort; a variant tree and `check` record each failure."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

from forkbuild.context import Context
from forkbuild.errors import ApplyError, ConfigError, DirtyTreeError, ForkbuildError, UnsafePatchError, quoted
from forkbuild.io.chaos import chaos_point
from forkbuild.io.git import Git
from forkbuild.series.combination import WHOLE_SERIES, Combination, whole_series
from forkbuild.series.config import PatchEntry, Series
from forkbuild.series.patchfile import PatchInfo, check_patches, read_patch
from forkbuild.upstream.cache import UpstreamCache
from forkbuild.worktree.emptydirs import recreate_empty_dirs
from forkbuild.worktree.engine import ALREADY_APPLIED, Engine, Outcome, PatchJob, PatchResult
from forkbuild.worktree.guard import TreeGuard, recover_killed_change, remove_dead_tree, temporary_worktree, tree_guard
from forkbuild.worktree.guards_module import add_generated_commit, module_path
from forkbuild.worktree.sequence import Sequencer
from forkbuild.worktree.smallindex import TreeListing
from forkbuild.worktree.state import (
    STATE_FILE,
    StopState,
    WorktreeState,
    clear_stop,
    read_state,
    read_stop,
    write_state,
    write_stop,
)

FULL_SERIES_REF = "refs/forkbuild/series"


class PatchRecord(NamedTuple):
    """The engine's result (a PatchResult's fields) for one series entry."""

    entry: PatchEntry
    outcome: Outcome
    commit: str = ""
    detail: str = ""
    conflicts: tuple[str, ...] = ()
    offsets: tuple[str, ...] = ()

    @property
    def failed(self) -> bool:
        return self.outcome is Outcome.CONFLICT


class ApplyPlan(NamedTuple):
    """What an apply will do: the patches it applies and those the variant leaves out."""

    combination: Combination  # its features' guards go into the guards module
    entries: tuple[PatchEntry, ...]
    left_out: tuple[PatchEntry, ...]
    parsed: Mapping[Path, PatchInfo]  # each patch file as the safety check read it


class ApplyResult(NamedTuple):
    dest: Path
    combination: Combination
    base_commit: str
    head_commit: str
    records: tuple[PatchRecord, ...] = ()

    @property
    def failures(self) -> tuple[PatchRecord, ...]:
        return tuple(record for record in self.records if record.failed)


def plan_variant(series: Series, combination: Combination) -> ApplyPlan:
    """Which patches a combination applies, each read and checked for path safety."""
    entries = series.patches if combination.whole else combination.patches(series)
    parsed = check_patches([entry.path for entry in entries])  # every problem of every patch at once
    chosen = set(entries)
    return ApplyPlan(combination=combination, entries=entries,
                     left_out=tuple(entry for entry in series.patches if entry not in chosen), parsed=parsed)


def apply_variant(*, context: Context, variant: Combination, dest: Path, stop: bool = False) -> ApplyResult:
    """Apply `variant` into the work tree `dest`; raise on any failure (with stop: AT the first
    one, conflict markers in `dest`, until `resume_apply`)."""
    result = apply_plan(context=context, plan=plan_variant(context.series, variant), dest=dest, stop=stop)
    if result.failures:
        lines = [f"{len(result.failures)} patch(es) of {result.combination.name} do not apply:"]
        lines += [f"  - {record.entry.file}: {record.detail}" for record in result.failures]
        raise ApplyError("\n".join(lines), hint="fix the patch, or run `forkbuild check` to see every variant")
    return result


def _jobs(context: Context, plan: ApplyPlan) -> tuple[str, Git, TreeListing, tuple[PatchJob, ...]]:
    """The pinned upstream commit, the cache's git, upstream's tree as the patches need it and the plan's jobs."""
    cache = context.upstream
    base = cache.ensure(context.series.upstream)
    cache_git = cache.git()
    listing = upstream_listing(cache_git, base, plan.parsed, series=context.series)
    # The 3-way rung merges each patch's commit of the whole series.
    sources = ensure_series_blobs(context=context, cache=cache, base=base) if plan.left_out and plan.entries else {}
    return base, cache_git, listing, tuple(PatchJob(name=entry.file, path=entry.path,
                                                    source=sources.get(entry.file, "")) for entry in plan.entries)


def upstream_listing(cache_git: Git, base: str, parsed: Mapping[Path, PatchInfo], *, series: Series) -> TreeListing:
    """Upstream's tree as the patches need it (their files, the guards module's, every directory a header
    names: one git run); raises if a patch writes through an upstream symlink (git's verdict, every run,
    never a cache) or the guards module would replace a file of upstream's."""
    listing = TreeListing(cache_git, base)
    generated = module_path(series)
    listing.learn({*(change.path for info in parsed.values() for change in info.files),
                   *(folder for info in parsed.values() for folder in info.dirs), *filter(None, [generated])})
    symlinks = listing.symlinks()
    if symlinks:
        check_patches(list(parsed), symlinks=symlinks)
    if generated and listing.entries_for([generated]):
        raise ConfigError([f"series.guards_module: {series.guards_module!r} is upstream's own {generated}: "
                           "forkbuild would replace it with the generated guards; name a module upstream does not "
                           "have"], source=str(series.path))
    if makers := [path.name for path, info in parsed.items() if generated in {change.path for change in info.files}]:
        raise UnsafePatchError(f"{', '.join(makers)} change(s) {generated}, which forkbuild generates from series.toml "
                               "after the patches", hint="declare guards under their feature in series.toml and "
                               "leave that file out of the patch")
    return listing


def apply_plan(*, context: Context, plan: ApplyPlan, dest: Path, stop: bool = False,
               report_offsets: bool = True) -> ApplyResult:
    base, cache_git, listing, jobs = _jobs(context, plan)
    with tree_guard(dest, "apply") as guard:  # a second run on this tree refuses; a killed one is cleared
        if recover_killed_change(guard, cache_git):
            context.reporter.warn(f"{dest}: removed what an interrupted or killed forkbuild apply left half-built there")
        worktree, previous = prepare_worktree(cache_git, dest=dest, base=base, guard=guard, checkout=False)
        try:
            return _apply_prepared(context, plan, worktree, previous, guard=guard, base=base, jobs=jobs,
                                   listing=listing, stop=stop, report_offsets=report_offsets)
        except (ForkbuildError, OSError) as error:
            if previous is None and getattr(error, "label", "") != "stopped":
                # A new tree that failed half-made (a full disk, a limit): gone, so the re-run starts afresh.
                remove_dead_tree(cache_git, dest)
            raise


def _apply_prepared(context: Context, plan: ApplyPlan, worktree: Git, previous: WorktreeState | None, *,
                    guard: TreeGuard, base: str, jobs: tuple[PatchJob, ...], listing: TreeListing, stop: bool,
                    report_offsets: bool) -> ApplyResult:
    dest = worktree.path
    chaos_point("apply:prepared")
    assert plan.combination.whole or not stop, "only apply --all stops (its state names no variant)"
    run = StopState(base=base, started_from=previous.head if previous else base,
                    previous_state=previous, jobs=jobs, cursor=0, results=(),
                    hashes=series_hashes(context.series))
    with context.reporter.step(f"Applying {len(plan.entries)} patches of {plan.combination.name} into {dest}"):
        def before_change() -> None:  # once, before the engine first touches the tree
            if previous is not None:  # unsaved work is refused first; a kill before this leaves it to the user
                refuse_unsaved_work(worktree)
                guard.changing()
            chaos_point("apply:changing")

        # What the tree shows: the HEAD prepare_worktree checked, or nothing (a new tree).
        engine = Engine(worktree, head=base, shown=previous.head if previous else base, checked_out=bool(previous),
                        before_change=before_change, listing=listing, parsed=plan.parsed)
        results = _run(Sequencer(engine, run.jobs, stop=stop), run, context=context, combination=plan.combination)
    return _result(context, plan, dest=dest, base=base, head=engine.head, results=results, report=report_offsets)


def resume_apply(*, context: Context, dest: Path, action: str) -> ApplyResult | None:
    """--continue / --skip / --abort a stopped `apply --all` in `dest` (None after --abort), under
    the tree's lock; never marked as changing: it holds the person's resolution."""
    if not (dest / ".git").exists():
        raise ApplyError(f"no apply is stopped in {dest}: it is not a work tree", hint="`forkbuild apply --all` starts one")
    with tree_guard(dest, f"apply --{action}"):
        worktree = Git(dest)
        state = read_stop(worktree)
        if state is None:
            raise ApplyError(f"no apply is stopped in {dest}", hint="`forkbuild apply --all` starts one")
        sequencer = Sequencer(Engine(worktree), state.jobs)
        if action == "abort":
            sequencer.abort(state.cursor, back_to=state.started_from)
            if state.previous_state is None:
                (worktree.git_dir / STATE_FILE).unlink(missing_ok=True)
            else:
                write_state(worktree, state.previous_state)
            clear_stop(worktree)
            context.reporter.info(f"apply aborted: {dest} is back at {state.started_from[:12]}")
            return None
        settled = sequencer.continue_(state.cursor) if action == "continue" else sequencer.skip(state.cursor)
        context.reporter.info(f"{settled.name}: {settled.outcome} {settled.detail}".rstrip())
        resumed = replace(state, cursor=state.cursor + 1, results=(*state.results, settled))
        plan = plan_variant(context.series, whole_series(context.series))  # a stop is only ever apply --all's
        results = _run(sequencer, resumed, context=context, combination=plan.combination)
        return _result(context, plan, dest=dest, base=state.base, head=sequencer.engine.head, results=results)


def _run(sequencer: Sequencer, state: StopState, *, context: Context, combination: Combination) -> list[PatchResult]:
    """Apply state.jobs[state.cursor:]; on a conflict where the sequencer stops, save the state and
    raise. Then the generated guards commit of the combination's features, and one checkout."""
    engine = sequencer.engine

    def took(cursor: int, result: PatchResult) -> PatchResult:
        if result.outcome is Outcome.CONFLICT and sequencer.stop:  # the commits before it are written
            results = [*state.results, *taken]
            stopped = replace(state, cursor=cursor, results=tuple(results))
            write_stop(engine.worktree, stopped)
            _record_applied(engine.worktree, stopped, results, head=engine.head, combination=combination)
            job, dest = state.jobs[cursor], engine.worktree.path
            detail = _failure_detail(engine.worktree, job.path, result.detail,
                                     earlier=[(other.name, other.path) for other in state.jobs[:cursor]])
            error = ApplyError(
                f"{job.name} does not apply: {detail}\n  conflicted: {', '.join(result.conflicts) or 'none reported'}"
                f"\n  work tree: {dest}",
                hint=f"resolve it in {dest} (edit the conflict markers or .rej hunks, `git add`), then "
                     f"`forkbuild apply --continue --dir {quoted(dest)}` and `forkbuild export`; `--skip` leaves it "
                     "out of the tree (its file stays; export then stops until you repair or drop it); `--abort` "
                     "puts the tree back")
            error.label = "stopped"  # the tree waits for a person
            raise error
        taken.append(result)
        return result

    taken: list[PatchResult] = []
    sequencer.run(state.cursor, took=took)
    results = [*state.results, *taken]
    if state.jobs:  # a build of no patches is upstream as it is
        add_generated_commit(engine, series=context.series, features=combination.features)
    engine.finish()  # writes the pending commits, then the one checkout
    results = [engine.written(result) for result in results]
    recreate_empty_dirs(engine.worktree.path, context.series.upstream.empty_dirs)  # upstream has them, git cannot track them
    chaos_point("apply:applied")
    _record_applied(engine.worktree, state, results, head=engine.head, combination=combination)
    clear_stop(engine.worktree)
    return results


def _record_applied(worktree: Git, state: StopState, results: list[PatchResult], *, head: str,
                    combination: Combination) -> None:
    """The tree's state: what export compares it with."""
    applied = [result for result in results if result.outcome.applied]
    write_state(worktree, WorktreeState(
        variant="" if combination.whole else combination.name, base=state.base, head=head,
        patches=tuple(result.name for result in applied),
        commits={result.name: result.commit for result in applied},
        missing={result.name: result.outcome for result in results if not result.outcome.applied},
        sha256=state.hashes))


def _result(context: Context, plan: ApplyPlan, *, dest: Path, base: str, head: str,
            results: list[PatchResult], report: bool = True) -> ApplyResult:
    by_name = {entry.file: entry for entry in plan.entries}
    records = []
    for result in results:
        entry = by_name[result.name]
        if result.outcome is Outcome.CONFLICT:
            earlier = plan.entries[:plan.entries.index(entry)]
            result = result._replace(detail=_failure_detail(
                Git(dest), entry.path, result.detail, earlier=[(other.file, other.path) for other in earlier],
                left_out=plan.left_out, variant=plan.combination.name))
        records.append(PatchRecord(entry, result.outcome, result.commit, result.detail, result.conflicts, result.offsets))
    moved = [record for record in records if record.offsets]
    if report and moved:
        context.reporter.info(f"{len(moved)} patch(es) applied at an offset ({sum(len(r.offsets) for r in moved)} "
                              "hunk(s) moved; `forkbuild export --refresh` rewrites them; -v lists them)")
        for record in moved:
            context.reporter.detail(f"  {record.entry.file}: " + "; ".join(record.offsets))
    for record in records:
        if report and record.outcome is Outcome.THREE_WAY:
            context.reporter.info(f"{record.entry.file}: 3-way ({record.detail})")
    return ApplyResult(dest=dest, combination=plan.combination, base_commit=base, head_commit=head,
                       records=tuple(records))


@contextmanager
def scratch_tree(*, context: Context, variant: Combination, strict: bool) -> Iterator[ApplyResult]:
    """The variant applied in a temporary work tree; strict: raise on a failing patch."""
    with temporary_worktree(context.upstream, purpose="scratch") as dest:
        yield apply_variant(context=context, variant=variant, dest=dest) if strict else \
            apply_plan(context=context, plan=plan_variant(context.series, variant), dest=dest)


def series_hashes(series: Series) -> dict[str, str]:
    return file_hashes(series.patches_dir, [entry.file for entry in series.patches])


def file_hashes(directory: Path, names: Iterable[str]) -> dict[str, str]:
    return {name: hashlib.sha256((directory / name).read_bytes()).hexdigest() for name in names}


def record_series_tree(worktree: Git, *, base: str, head: str, patches: list[str],
                       hashes: Mapping[str, str] | None = None) -> None:
    """Mark a tree built outside apply as a full-series work tree; `hashes` lets export check
    that patches/ did not change meanwhile."""
    write_state(worktree, WorktreeState(variant="", base=base, head=head, patches=tuple(patches),
                                        sha256=None if hashes is None else dict(hashes)))


def refuse_unsaved_work(worktree: Git) -> None:
    """Raise DirtyTreeError if the tree holds work no commit has (apply would reset it away)."""
    dest = worktree.path
    stopped = read_stop(worktree)
    if stopped is not None:
        raise DirtyTreeError(f"{dest}: `forkbuild apply` is stopped there at {stopped.stopped.name}",
                             hint=f"resolve it and `forkbuild apply --continue --dir {quoted(dest)}`; or `--skip` it; "
                                  f"or `--abort` (the tree goes back to before that apply)")
    if worktree.am_in_progress():
        raise DirtyTreeError(f"{dest}: a `git am` is in progress there",
                             hint=f"finish it (git -C {quoted(dest)} am --continue) and export, "
                                  f"or discard it (git -C {quoted(dest)} am --abort)")
    dirty = worktree.status_porcelain()
    if dirty:
        raise DirtyTreeError(f"{dest} has uncommitted changes:\n{dirty}",
                             hint=f"keep them: commit them (git -C {quoted(dest)} commit, or --amend into the patch's commit), "
                                  f"then `forkbuild export --dir {quoted(dest)}`; "
                                  f"discard them: git -C {quoted(dest)} reset --hard && git -C {quoted(dest)} clean -fd")


def prepare_worktree(cache_git: Git, *, dest: Path, base: str, guard: TreeGuard | None = None,
                     checkout: bool = True) -> tuple[Git, WorktreeState | None]:
    """A clean work tree at `base` and the state it records: new (None), or one forkbuild made that
    holds nothing else. With the caller's `guard`, unsaved work is the caller's to refuse
    (`_before_change`). checkout=False: a new tree gets no files yet."""
    if dest.exists() and not dest.is_dir():
        raise DirtyTreeError(f"{dest} exists and is not a directory",
                             hint=f"move {quoted(dest)} away (it is not forkbuild's), or choose another --dir")
    if not dest.exists() or not any(dest.iterdir()):
        if guard:
            guard.changing()
        return cache_git.add_worktree(dest, base, checkout=checkout), None
    state = read_state(dest) if (dest / ".git").exists() else None
    if state is None:
        raise DirtyTreeError(f"{dest} exists and is not a forkbuild work tree",
                             hint="choose another --dir, or remove that directory yourself")
    worktree = Git(dest)
    if guard is None:
        refuse_unsaved_work(worktree)
    head = worktree.head()
    if head != state.head:
        extra = worktree.commits(state.head, head)
        raise DirtyTreeError(f"{dest} has {len(extra) or 'other'} commit(s) that are not in the series (HEAD {head[:12]})",
                             hint=f"keep them: `forkbuild export --dir {quoted(dest)}`; "
                                  f"discard them: git -C {quoted(dest)} reset --hard {state.head[:12]}")
    return worktree, state


def _failure_detail(worktree: Git, path: Path, reason: str, *, earlier: list[tuple[str, Path]],
                    left_out: tuple[PatchEntry, ...] = (), variant: str = WHOLE_SERIES) -> str:
    """Why a patch does not apply, in more words than git's: a duplicate, the fuzz it needs
    (forkbuild never fuzzes), or the left-out patches it needs."""
    touched = {change.path for change in read_patch(path).files}
    if reason == ALREADY_APPLIED:
        files = [(name, {change.path for change in read_patch(other).files}) for name, other in earlier]
        makers = [name for name, paths in files if touched <= paths] or [name for name, paths in files if touched & paths]
        return (f"its change is already in the tree, made by {' or '.join(makers) or 'upstream'}: applying it "
                "changes nothing (a duplicate: drop one of them, or make it change what the other does not)")
    fuzz = worktree.fuzz_needed(path)
    if fuzz:
        return (f"applies only with fuzz {fuzz} (its context lines differ from the tree's); forkbuild never "
                "fuzzes: refresh the patch")
    needs = [other.file for other in left_out if touched & {change.path for change in read_patch(other.path).files}]
    if needs:
        return f"{reason}; it needs {', '.join(needs)} (left out of {variant}; same files)"
    return reason


def ensure_series_blobs(*, context: Context, cache: UpstreamCache, base: str) -> dict[str, str]:
    """The whole series applied once per content in the cache, under a ref: patch file -> commit."""
    series = context.series
    digest = hashlib.sha256(base.encode())
    for entry in series.patches:
        digest.update(entry.file.encode() + b"\0" + entry.path.read_bytes())
    ref = f"{FULL_SERIES_REF}/{digest.hexdigest()[:20]}"
    cache_git = cache.git()
    if not cache_git.rev(ref):
        with cache.locked():
            if not cache_git.rev(ref):
                head, failed = _in_index(cache_git, base, [PatchJob(name=entry.file, path=entry.path)
                                                           for entry in series.patches])
                if failed:
                    raise ApplyError("the whole series does not apply:\n" + "\n".join(
                        f"  - {result.name}: {result.detail}" for result in failed),
                        hint="the whole series must apply before a variant that leaves patches out can")
                cache_git.update_ref(ref, head)
    commits = cache_git.commits(base, ref)
    return dict(zip((entry.file for entry in series.patches), commits, strict=True))


def apply_in_index(*, context: Context, plan: ApplyPlan) -> tuple[str, str] | None:
    """The engine's index-only mode: `plan` and its guards commit applied in the bare cache, as
    apply_plan commits it; (base, head), or None when a patch does not apply."""
    base, cache_git, listing, jobs = _jobs(context, plan)
    head, failed = _in_index(cache_git, base, list(jobs), generated=(context.series, plan.combination.features) if jobs else None,
                             listing=listing, parsed=plan.parsed)
    return None if failed else (base, head)


def _in_index(cache_git: Git, base: str, jobs: list[PatchJob], generated: tuple[Series, tuple[str, ...]] | None = None,
              listing: TreeListing | None = None, parsed: Mapping[Path, PatchInfo] | None = None,
              ) -> tuple[str, list[PatchResult]]:
    engine = Engine(cache_git, head=base, shown=base, listing=listing, parsed=parsed)
    try:
        failed = [result for result in engine.run(jobs, stop=False, write=False) if not result.outcome.applied]
        if generated and not failed:
            add_generated_commit(engine, series=generated[0], features=generated[1])
        return engine.head, failed
    finally:
        engine.close()
