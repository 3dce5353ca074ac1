"""The rebase as a journaled state machine (its state: rebase/journal.py).

phase         what the journal means                          on --continue
prepare       backup taken; nothing else is certain           import + old series + work tree, again
replay        patches[:cursor] are done, HEAD is their top     go on at cursor
applying      a kill hit patch `cursor` mid-way                reset to head_before, redo it
conflict      stopped at patch `cursor` (markers in the tree)  the sequencer settles the resolution, go on
replayed      every patch replayed                             stop for review, or finalize
review        drop proposals await a yes                       accept the drops, finalize
finalize      writing the new series                           restore the backup, write it all again
checked       written; not checked yet                         check, finish
check-failed  written; `forkbuild check` failed                check again, finish

Each step journals a new state and is redone safely from it, so a kill anywhere loses
nothing; --abort restores the backup and the cache refs the rebase moved (restore_refs).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import replace
from pathlib import Path
from typing import NoReturn

from packaging.version import InvalidVersion, Version

from forkbuild.applier import FULL_SERIES_REF, record_series_tree, series_hashes
from forkbuild.checker import check_series, consistency, describe, provenance
from forkbuild.context import Context
from forkbuild.errors import ApplyError, DirtyTreeError, ForkbuildError, LockBusy, RebaseStopped
from forkbuild.exporter import export_series
from forkbuild.io.git import Git
from forkbuild.rebase import report
from forkbuild.rebase.journal import Journal, PatchState, Phase, RebaseState, RefMove, checkpoint
from forkbuild.rebase.kept import with_lost_lines
from forkbuild.rebase.porter import Porter
from forkbuild.rebase.target import moved_pin
from forkbuild.rebase.upstreamed import HunkEvidence, evidence, upstream_collisions
from forkbuild.series.config import Upstream, parse_series
from forkbuild.series.dep3 import applied_upstream
from forkbuild.series.layout import REBASE_TREE
from forkbuild.series.patchfile import read_patch
from forkbuild.series.writer import series_transaction
from forkbuild.worktree.engine import Engine, Outcome, PatchJob, PatchResult
from forkbuild.worktree.guard import TreeGuard, remove_dead_tree, tree_guard
from forkbuild.worktree.sequence import Sequencer

OLD_SERIES = "old-series"  # the series applied on the old pin (its blobs feed the 3-way merges)
NEW_SERIES = "new-series"  # the replayed series (the report's range-diffs read it)
STOP_DIFF_LINES = 40  # of the upstream change a stopped patch collided with, in the message


class Rebase:
    def __init__(self, context: Context) -> None:
        self.context = context
        self.reporter = context.reporter
        self.journal = Journal(context.series_dir)
        self.cache = context.upstream
        self._renames: Mapping[str, str] | None = None

    @contextmanager
    def one_at_a_time(self) -> Iterator[None]:
        """Hold the series' rebase lock (a flock: a killed holder leaves none)."""
        guard = TreeGuard(self.journal.path, "rebase")
        try:
            guard.acquire()
        except LockBusy as busy:
            raise LockBusy(f"another rebase is running in {self.context.series_dir}: {busy.message}",
                           hint="wait for it to end, then `forkbuild rebase --continue` or `--abort` it") from None
        guard.killed = None  # a killed rebase is the journal's to recover, not the lock's
        try:
            yield
        finally:
            guard.release()

    def start(self, *, target: Upstream, tree: Path | None, accept_drops: bool, accept_ported: bool = False,
              accept_moot: bool = False) -> RebaseState | None:
        """Start a rebase onto `target` and run it; None when the series is on `target` already."""
        series, tree = self.context.series, (tree or self.context.series_dir / REBASE_TREE).resolve()
        with self.one_at_a_time():
            if self.journal.exists():
                raise ForkbuildError("a rebase is already in progress",
                                     hint="`forkbuild rebase --continue`, `--skip` or `--abort` it first")
            if target.version == series.upstream.version:
                self.reporter.info(f"the series is already on {series.upstream.name} {target.version}: nothing to do")
                return None
            with suppress(InvalidVersion):  # a git upstream's label is no version: no order to warn about
                if Version(target.version) < Version(series.upstream.version):
                    self.reporter.warn(f"{target.version} is older than the pinned {series.upstream.version}: "
                                       "this rebase is a downgrade")
            if tree.exists() and any(tree.iterdir()):
                raise ForkbuildError(f"{tree} exists and is not empty", hint="remove it, or pass another --dir")
            self.journal.create(RebaseState(
                id=secrets.token_hex(6), phase=Phase.PREPARE, step="begun", worktree=tree,
                accept_drops=accept_drops, accept_ported=accept_ported, accept_moot=accept_moot,
                old=series.upstream, target=target,
                patches=tuple(PatchState(file=entry.file, feature=entry.feature) for entry in series.patches)))
            return self.run(self.journal.load())

    def resume(self, action: str) -> RebaseState:
        with self.one_at_a_time():
            state = self.journal.load()
            if action == "abort":
                return self.roll_back(state)
            if state.tree_gone:
                raise ForkbuildError(f"{state.worktree}: the rebase's work tree is gone (removed while the rebase "
                                     "was stopped): it holds the replayed patches", hint="`forkbuild rebase --abort` "
                                     "puts series.toml, patches/ and the cache refs back; then start it again")
            if action == "skip":
                if state.phase is not Phase.CONFLICT:
                    raise ForkbuildError(f"--skip: the rebase is not stopped at a conflict (phase {state.phase})",
                                         hint="--continue goes on, --abort puts everything back")
                state = self._go_on(state, "skip")
            # --continue while the drops are proposed is the user's yes to them.
            return self.run(state, resumed_at=state.phase)

    def run(self, state: RebaseState, *, resumed_at: Phase | None = None) -> RebaseState:
        if state.phase is Phase.PREPARE:
            started = time.monotonic()
            try:
                state = self._prepare(state)
            except ForkbuildError:
                if resumed_at is not None:
                    raise
                self.reporter.warn("the rebase could not start; putting everything back")
                # From the journal: it holds every ref the prepare recorded before it failed.
                self.roll_back(self.journal.load())
                raise
            state = state.timed("prepare", time.monotonic() - started)
        if state.phase is Phase.CONFLICT:
            state = self._go_on(state, "continue")
        if state.phase in (Phase.REPLAY, Phase.APPLYING):
            started = time.monotonic()
            state = self._replay(state).timed("replay", time.monotonic() - started)
        proposals = [patch for patch in state.patches if patch.outcome in report.DROP_OUTCOMES]
        if state.phase is Phase.REPLAYED:
            cache_git = self.cache.git()
            state = with_lost_lines(cache_git, state, renamed=self._renamed(state),
                                    old_head=cache_git.rev(state.own_ref(OLD_SERIES)) or "",
                                    new_head=Git(state.worktree).head())
            lost = any(patch.lost for patch in state.patches)
            waiting = [patch for patch in proposals if not (state.accept_moot if patch.outcome is Outcome.MOOT
                                                            else state.accept_drops)]
            phase = Phase.REVIEW if waiting or lost else Phase.FINALIZE
            state = self.journal.save(replace(state, phase=phase), phase.value)
        if state.phase is Phase.REVIEW:
            if resumed_at is not Phase.REVIEW:  # stop for the review
                self._stop_for_review(state, proposals)
            state = self.journal.save(replace(state, accept_drops=True, phase=Phase.FINALIZE), "finalize")
        if state.phase is Phase.FINALIZE:
            started = time.monotonic()
            state = self._finalize(state).timed("export", time.monotonic() - started)
        if state.phase in (Phase.CHECKED, Phase.CHECK_FAILED):
            state = self._check_and_finish(state)
        return state

    def _stop_for_review(self, state: RebaseState, proposals: list[PatchState]) -> NoReturn:
        md_path = self.journal.path / "report.md"
        report.write(self.cache.git(), state, md_path, check=None, final=False)
        proposals = [p for p in proposals if not (state.accept_moot if p.outcome is Outcome.MOOT else state.accept_drops)]
        lines = []
        if proposals:
            lines += ["proposed for dropping:", *(f"  - {p.file}: {report.label(p.outcome)}: {p.detail}; evidence: "
                                                  + "; ".join(item.describe() for item in p.evidence) for p in proposals)]
        lost = [patch for patch in state.patches if patch.lost]
        if lost:
            lines.append("lines a patch added on the old release that the rebased series lacks:")
            lines += [f"  - {patch.file} ({report.label(patch.outcome)}): {line}" for patch in lost for line in patch.lost]
        verb = "drops them and writes" if proposals else "writes"
        raise RebaseStopped("every patch is replayed; " + "\n".join(lines) + f"\n  draft report: {md_path}",
                            hint=f"`forkbuild rebase --continue` {verb} the series as replayed; "
                                 "`--abort` puts everything back")

    def _prepare(self, state: RebaseState) -> RebaseState:
        old, target = state.old, state.target
        with self.reporter.step(f"Importing {old.name} {old.version} and {target.version} into the cache"):
            started = time.monotonic()
            state, old_base = self._import(state, old)
            state, new_base = self._import(state, target)
            state = replace(state, old_base=old_base, new_base=new_base).timed("import", time.monotonic() - started)
        state = self.journal.save(state, "imported")
        cache_git = self.cache.git()
        remove_dead_tree(cache_git, state.worktree)  # a killed prepare's: the journal owns the tree
        backup = [self._backup(patch) for patch in state.patches]
        with self.reporter.step(f"Applying the {len(backup)} patches on {old.version} (their commits feed the 3-way merges)"):
            # Plumbing in the cache: no checkout of the old version is needed.
            old_series = Engine(cache_git, head=state.old_base, shown=state.old_base)
            made = old_series.run([PatchJob(name=path.name, path=path) for path in backup], stop=False)
            old_series.close()
        failed = [result for result in made if not result.outcome.applied]
        if failed:
            raise ForkbuildError(f"the series does not apply on its own pin {old.version}:\n"
                                 + "\n".join(f"  - {result.name}: {result.detail}" for result in failed),
                                 hint="fix the series first: `forkbuild check`")
        state = self._move_ref(state, state.own_ref(OLD_SERIES), old_series.head)
        state = replace(state, patches=tuple(replace(patch, old_commit=result.commit)
                                             for patch, result in zip(state.patches, made, strict=True)))
        # Sparse: only the files the series changes (the rest of the release would be most of the rebase's time).
        touched = sorted({path for _, path in cache_git.changed_files(state.old_base, old_series.head)})
        cache_git.add_worktree(state.worktree, state.new_base, only=touched)
        checkpoint("worktree")
        return self.journal.save(replace(state, phase=Phase.REPLAY, cursor=0), "prepared")

    def _import(self, state: RebaseState, upstream: Upstream) -> tuple[RebaseState, str]:
        """The cache commit of `upstream`; a tag the import creates is recorded for --abort."""
        ref = f"refs/tags/{upstream.tag}"
        if ref not in state.refs and self.cache.imported(upstream) is None:
            # Journaled before the import: a kill mid-import must not leave a tag abort does not know of.
            state = self.journal.save(state.with_ref(ref, before=None, after=None), "importing", at=upstream.version)
        commit = self.cache.ensure(upstream)
        if ref in state.refs:
            state = state.with_ref(ref, before=None, after=commit)
        return state, commit

    def _move_ref(self, state: RebaseState, ref: str, commit: str) -> RebaseState:
        """Point a cache ref at `commit`, journaling where it was first so that --abort can put it back."""
        cache_git = self.cache.git()
        state = self.journal.save(state.with_ref(ref, before=cache_git.refs().get(ref), after=commit), "ref",
                                  at=ref.rsplit("/", 1)[-1])
        cache_git.update_ref(ref, commit)
        return state

    def _backup(self, patch: PatchState) -> Path:
        # The journal's copy: patches/ itself may be half rewritten by a killed finalize.
        return self.journal.backup / "patches" / patch.file

    def _job(self, patch: PatchState) -> PatchJob:
        # Its commit in the old series: the 3-way rung merges it, never the file's index lines.
        return PatchJob(name=patch.file, path=self._backup(patch), source=patch.old_commit)

    def _replay(self, state: RebaseState) -> RebaseState:
        worktree = Git(state.worktree)
        if state.phase is Phase.APPLYING:
            # Killed mid-patch: whatever git got to, go back to before that patch and redo it.
            worktree.sequencer_quit()
            worktree.reset_hard(state.head_before)
            worktree.clean_untracked()
        elif state.tip and worktree.head() != state.tip:
            # Killed between patches: the commits made so far were not checked out yet.
            worktree.reset_hard(state.tip)
        sequencer = self._sequencer(worktree, state, detect_upstreamed=True)
        engine = sequencer.engine

        def decide(cursor: int) -> PatchResult | None:  # each patch journaled before git touches the tree
            nonlocal state
            patch = state.patches[cursor]
            state = self.journal.save(replace(state, phase=Phase.APPLYING, head_before=engine.head),
                                      "applying", at=patch.file)
            applied = applied_upstream(read_patch(self._backup(patch)).trailer_map())
            if applied and _at_or_below(applied, state.target.version):  # its header says upstream has it
                return PatchResult(name=patch.file, outcome=Outcome.UPSTREAMED,
                                   detail=f"Applied-Upstream: {applied}, at or below {state.target.version}")
            return None

        def took(cursor: int, result: PatchResult) -> PatchResult:
            nonlocal state
            patch = self._record(state, state.patches[cursor], result)
            state = state.with_patch(cursor, patch)
            if result.outcome is Outcome.CONFLICT:
                state, patch = self._port_or_stop(state, patch, sequencer, result)
            self._tell(patch)
            state = self.journal.save(replace(state, phase=Phase.REPLAY, cursor=cursor + 1, tip=engine.head),
                                      "applied", at=patch.file)
            return result

        sequencer.run(state.cursor, took=took, decide=decide)
        engine.finish()
        return self.journal.save(replace(state, phase=Phase.REPLAYED), "replayed")

    def _sequencer(self, worktree: Git, state: RebaseState, *, detect_upstreamed: bool = False,
                   head: str = "") -> Sequencer:
        """The series' patches, one at a time (each journaled), on `head` (default: the tree's HEAD); a
        conflict is left in the tree only where the porter cannot place the patch (_port_or_stop)."""
        return Sequencer(Engine(worktree, detect_upstreamed=detect_upstreamed, head=head),
                         [self._job(patch) for patch in state.patches], one_by_one=True, stop=False)

    def _port_or_stop(self, state: RebaseState, patch: PatchState, sequencer: Sequencer,
                      conflict: PatchResult) -> tuple[RebaseState, PatchState]:
        """git's rungs stopped on patches[cursor] (`conflict`, not yet in the tree): the porter's try;
        accepted (--accept-ported, --accept-moot), proposed at a stop, or the conflict left in the tree
        for a person where it cannot place every hunk."""
        guards = frozenset(guard.env for guard in self.context.series.all_guards())
        port = Porter(self.cache.git(), old_commit=patch.old_commit, new_head=state.head_before, known=guards,
                      renamed=lambda: self._renamed(state)).port()
        patch = replace(patch, port=port.hunks)
        state = state.with_patch(state.cursor, patch)
        if port.failed or not port.hunks:
            if port.hunks:
                placed = sum(hunk.status == "ported" for hunk in port.hunks)
                patch = replace(patch, detail=f"{patch.detail}; the porter placed {placed} of {len(port.hunks)} hunks "
                                f"(the first it could not: {port.failed[0].describe()}"
                                + ("; the report lists each)" if len(port.failed) > 1 else ")"))
            stopped = sequencer.engine.stop_in_worktree(sequencer.jobs[state.cursor], conflict)
            patch = replace(patch, conflicts=stopped.conflicts)
            Git(state.worktree).widen(stopped.conflicts)  # for the person's `git add`
            state = self.journal.save(replace(state.with_patch(state.cursor, patch), phase=Phase.CONFLICT), "conflict")
            self._stop_at_conflict(state, patch)
        worktree = Git(state.worktree)
        sequencer.engine.materialize()  # the tree at the patches before it, for the proposal
        if not any(hunk.status == "ported" for hunk in port.hunks):  # every hunk moot: a drop proposal
            patch = self._record(state, patch, PatchResult(
                name=patch.file, outcome=Outcome.MOOT, detail="none of its hunks' code is in the new release"))
            return state.with_patch(state.cursor, patch), patch
        changed = []
        for path, text in port.files.items():
            target = worktree.path / path
            if target.exists() or text is not None:  # a moot file the release lacks: nothing to stage
                changed.append(path)
            if text is None:
                target.unlink(missing_ok=True)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text, encoding="utf-8", errors="surrogateescape")
        worktree.widen(changed)  # the proposal may be edited and added
        if changed:
            worktree.stage(changed)
        patch = replace(patch, port_tree=worktree.write_tree())
        state = state.with_patch(state.cursor, patch)
        if not state.accept_ported or (port.moot and not state.accept_moot):
            state = self.journal.save(replace(state, phase=Phase.CONFLICT), "ported")
            lines = [f"    {hunk.describe()}" for hunk in port.hunks]
            raise RebaseStopped(
                f"{patch.file} does not apply to {state.target.version} as it is; the porter placed it hunk by hunk "
                f"(a proposal, staged in {state.worktree}):\n" + "\n".join(lines),
                hint="`forkbuild rebase --continue` accepts it as staged (edit and `git add` first to change it; "
                     "moot hunks are left out); `--skip` leaves the patch out; `--abort` puts everything back. "
                     "`rebase --accept-ported --accept-moot` accepts such proposals up front")
        result = sequencer.continue_(state.cursor)
        patch = self._record(state, patch, result)
        return state.with_patch(state.cursor, patch), patch

    def _renamed(self, state: RebaseState) -> Mapping[str, str]:
        """Upstream's renames, old release to new (old path -> new path): asked of git once a run."""
        if self._renames is None:
            self._renames = self.cache.git().renamed(state.old_base, state.new_base)
        return self._renames

    def _tell(self, patch: PatchState) -> None:
        self.reporter.info(f"{patch.file}: {report.label(patch.outcome)}" + (f": {patch.detail}" if patch.detail else ""))

    def _record(self, state: RebaseState, patch: PatchState, result: PatchResult) -> PatchState:
        """`patch` (patches[cursor]) with the engine's `result` for it."""
        found: tuple[HunkEvidence, ...] = ()
        if result.outcome in (Outcome.UPSTREAMED, Outcome.EMPTIED):
            # Into the new release (HEAD's lines are shifted by earlier fork patches); emptied: what upstream lacks.
            found = tuple(evidence(self.cache.git(), commit=state.new_base,
                                   patch_text=self._backup(patch).read_text(errors="surrogateescape")))
        # A patch settled after a stop keeps what it collided with: the report shows why it needed a person.
        collided, conflicts = patch.collided, patch.conflicts
        if result.outcome is Outcome.CONFLICT:
            conflicts = tuple(result.conflicts)
            collided = upstream_collisions(self.cache.git(), old_base=state.old_base, new_base=state.new_base,
                                           renamed=self._renamed(state),
                                           patch=self._backup(patch), files=result.conflicts)
        elif result.outcome.automatic or result.outcome is Outcome.UPSTREAMED:
            collided, conflicts = "", ()
        if result.outcome is Outcome.RESOLVED and patch.port_tree and \
                self.cache.git().tree_of(result.commit) == patch.port_tree:  # the porter's proposal, as it was
            moot = sum(hunk.status == "moot" for hunk in patch.port)
            result = result._replace(outcome=Outcome.PORTED, detail=f"hunk by hunk ({len(patch.port)} hunks"
                                     + (f", {moot} moot left out" if moot else "") + ")")
        return replace(patch, outcome=result.outcome, commit=result.commit, detail=result.detail, evidence=found,
                       conflicts=conflicts, collided=collided)

    def _stop_at_conflict(self, state: RebaseState, patch: PatchState) -> NoReturn:
        tree = state.worktree
        lines = (patch.collided or "(no upstream change near its hunks in those files)").splitlines()
        if len(lines) > STOP_DIFF_LINES:  # the whole of it goes into the report
            lines = lines[:STOP_DIFF_LINES] + [f"... ({len(lines) - STOP_DIFF_LINES} more lines: "
                                               "`forkbuild rebase` writes them all in its report)"]
        raise RebaseStopped(
            f"{patch.file} does not apply to {state.target.version}: {patch.detail}\n"
            f"  conflicted: {', '.join(patch.conflicts) or 'see `git status`'}\n"
            f"  work tree: {tree} (the series' files; `git sparse-checkout disable` there brings the rest)\n"
            f"  the upstream change it collided with ({state.old.version} -> {state.target.version}):\n"
            + "\n".join(f"    {line}" for line in lines),
            hint=f"resolve in {tree} (edit, `git add`), then `forkbuild rebase --continue`; "
                 "`--skip` leaves this patch out; `--abort` puts everything back")

    def _go_on(self, state: RebaseState, action: str) -> RebaseState:
        """--continue (the person's resolution committed) or --skip (the patch left out) at a stop."""
        patch = state.patches[state.cursor]
        sequencer = self._sequencer(Git(state.worktree), state, head=state.head_before)
        try:
            result = sequencer.continue_(state.cursor) if action == "continue" else sequencer.skip(state.cursor)
        except ApplyError as error:  # not resolved yet: the rebase stays stopped
            raise RebaseStopped(error.message, hint=(error.hint or "").replace(
                "--continue", "`forkbuild rebase --continue`")) from error
        patch = self._record(state, patch, result)
        self._tell(patch)
        went_on = replace(state.with_patch(state.cursor, patch), phase=Phase.REPLAY, cursor=state.cursor + 1,
                          tip=sequencer.engine.head)
        return self.journal.save(went_on, "settled" if action == "continue" else "skipped", at=patch.file)

    def _finalize(self, state: RebaseState) -> RebaseState:
        edits = self.journal.foreign_edits(state)
        if edits:
            raise DirtyTreeError(
                "series.toml/patches/ were edited while the rebase was stopped; writing the rebased series would "
                "overwrite:\n" + "\n".join(f"  {relative} ({how})" for relative, how in edits.items()),
                hint="to keep these edits, save them elsewhere (commit them on another branch, or copy them out), "
                     "put the files back as they were (`git checkout -- <files>`, remove new ones), run `forkbuild "
                     "rebase --continue`, then redo them on the rebased series; or `forkbuild rebase --abort`, which "
                     "restores the series from before the rebase and saves the edited files under .forkbuild-work/")
        state = self.journal.save(replace(state, writing=True), "finalize:writing")
        worktree = Git(state.worktree)
        state = self._move_ref(state, state.own_ref(NEW_SERIES), worktree.head())
        kept = [patch.file for patch in state.patches if patch.commit]
        with series_transaction(self.context.series_dir) as transaction:
            transaction.write(self.journal.restore_change())  # a known start: redoing this phase writes the same result
            checkpoint("finalize:restored")
            # Export writes the moved pin with the patches in one write, never a new pin over old patches.
            pinned = moved_pin(self.context.series_file.read_text(), state.target)
            # patches/ holds the backup again (restored above): the files the work tree was built from.
            record_series_tree(worktree, base=state.new_base, head=worktree.head(), patches=kept,
                               hashes=series_hashes(parse_series(pinned, path=self.context.series_file.resolve())))
            with self.reporter.step("Exporting the rebased patches"):
                # Every patch rewritten against the new pin; those left out dropped (series_edit.unported).
                plan = export_series(context=self._fresh_context(), tree=worktree.path, refresh=True, series_toml=pinned,
                                     drops=tuple(patch.file for patch in state.patches if not patch.commit),
                                     transaction=transaction)
        checkpoint("finalize:exported")
        exported = replace(state, written=self.journal.series_hashes(), writing=False, phase=Phase.CHECKED,
                           unported=plan.unported)
        return self.journal.save(exported, "exported")

    def _fresh_context(self) -> Context:
        return Context(series_dir=self.context.series_dir, cache_dir=self.context.cache_dir, reporter=self.reporter)

    def _check_tree(self, state: RebaseState) -> Path | None:
        """The rebase tree reset to the rebased series for the check to apply each variant in (also
        after an interrupted check); None where it is gone (the check makes a scratch tree)."""
        tree = state.worktree
        head = self.cache.git().rev(state.own_ref(NEW_SERIES)) if (tree / ".git").exists() else None
        if head is None:
            return None
        with tree_guard(tree, "rebase") as guard:
            guard.killed = None  # an interrupted check's half-applied variant: reset below
            worktree = Git(tree)
            worktree.reset_hard(head)
            worktree.clean_untracked()
            record_series_tree(worktree, base=state.new_base, head=head,
                               patches=[patch.file for patch in state.patches if patch.commit])
        return tree

    def _check_and_finish(self, state: RebaseState) -> RebaseState:
        cache_git = self.cache.git()
        known = set(cache_git.refs())
        started = time.monotonic()
        check = _check_every_variant(self._fresh_context(), self._check_tree(state))
        for ref, sha in cache_git.refs().items():  # the series-blob refs the check adds are the rebase's
            if ref.startswith(f"{FULL_SERIES_REF}/") and ref not in known:
                state = state.with_ref(ref, before=None, after=sha)
        state = state.timed("check", time.monotonic() - started)
        md_path = self.context.build_dir / "rebase" / f"{state.old.version}-to-{state.target.version}.md"
        report.write(cache_git, state, md_path, check=check, final=True)
        state = replace(state, report=md_path)
        if not check["ok"]:
            self.journal.save(replace(state, phase=Phase.CHECK_FAILED), "check-failed")
            raise RebaseStopped(f"the rebased series fails `forkbuild check`:\n{check['detail']}\n  report: {md_path}",
                                hint="fix series.toml/patches/ by hand and `forkbuild rebase --continue` to check again; "
                                     "`--abort` puts the old series back")
        state = self.journal.save(state, "check-passed")  # the refs the check made, for an abort after a kill
        remove_dead_tree(cache_git, state.worktree)
        for ref in (state.own_ref(OLD_SERIES), state.own_ref(NEW_SERIES)):
            if cache_git.rev(ref):
                cache_git.delete_ref(ref)
        checkpoint("finish:cleaned")
        self.journal.remove()
        return replace(state, phase=Phase.DONE)

    def roll_back(self, state: RebaseState) -> RebaseState:
        """Everything as before the rebase; series files edited meanwhile are saved aside first."""
        edits = self.journal.foreign_edits(state)
        if edits:
            saved = self.journal.save_aside(edits)
            self.reporter.warn(f"edited during the rebase, saved to {saved} before restoring: "
                               + ", ".join(f"{relative} ({how})" for relative, how in edits.items()))
        cache_git = self.cache.git()
        remove_dead_tree(cache_git, state.worktree)  # with a stopped merge's state and a killed git's index.lock
        checkpoint("abort:tree")
        with series_transaction(self.context.series_dir) as transaction:
            transaction.write(self.journal.restore_change())
        checkpoint("abort:series")
        with self.cache.locked():
            for ref in restore_refs(cache_git, state.refs):
                self.reporter.warn(f"{ref}: left as it is: it changed after the rebase set it")
        checkpoint("abort:refs")
        self.journal.remove()
        return replace(state, phase=Phase.ABORTED)


def _at_or_below(version: str, target: str) -> bool:
    try:
        return Version(version) <= Version(target)
    except InvalidVersion:  # a git upstream's label is no version
        return False


def restore_refs(repo: Git, recorded: Mapping[str, RefMove]) -> list[str]:
    """Put each recorded ref back to its `before` (with the cache lock held); returns the refs
    left alone: changed by someone else since, or set by a rebase killed before it knew the value."""
    current = repo.refs()
    left = []
    for ref, move in sorted(recorded.items()):
        now = current.get(ref)
        if now == move.before:
            continue
        if move.after is None or now != move.after:
            left.append(ref)
        elif move.before is None:
            repo.delete_ref(ref)
        else:
            repo.update_ref(ref, move.before)
    return left


def _check_every_variant(context: Context, tree: Path | None) -> dict:
    """`forkbuild check` of the rebased series (series.toml's promises, the whole series, every
    variant) in `tree`, as the report's {"ok", "detail"} instead of an error that ends the rebase."""
    try:
        errors, _ = consistency(context.series)
        results = check_series(context=context, dest=tree)
        errors += provenance(context.series)
    except ForkbuildError as error:
        return {"ok": False, "detail": error.message}
    lines = [f"{result.label}: {'ok' if result.ok else 'FAILED'} "
             f"({', '.join(f'{record.entry.file} {record.outcome}' for record in result.records) or 'no patches'})"
             for result in results]
    failures = "\n".join([describe(results), *(f"  - {error}" for error in errors)]).strip("\n")
    return {"ok": not errors and all(result.ok for result in results), "detail": "\n".join(lines + ([failures] if failures else []))}
