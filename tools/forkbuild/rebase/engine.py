"""The rebase as a journaled state machine.

phase     what the journal means                         on --continue
prepare   backup taken; nothing else is certain          import + old series + work tree, again
replay    patches[:cursor] are done, HEAD is their top    go on at cursor
applying  a kill hit patch `cursor` mid-way               reset to head_before, redo it
conflict  the engine stopped at patch `cursor` (markers)  settle the user's resolution, go on
review    replayed; drop proposals await a yes            accept the drops, finalize
finalize  writing the new series                          restore the backup, write it all again
checked   written; `forkbuild check` failed               check again, finish

Every step is redone safely from its journal entry, so a kill at any point
loses nothing; --abort puts series.toml and patches/ back from the journal's
backup and undoes the cache refs the rebase created or moved (rebase/refs.py).
"""

from __future__ import annotations

import dataclasses
import secrets
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from packaging.version import InvalidVersion, Version

from forkbuild.apply import FULL_SERIES_REF, record_series_tree, series_hashes
from forkbuild.cache import UpstreamCache
from forkbuild.config import GitPin, Upstream, WheelPin, parse_series
from forkbuild.context import Context
from forkbuild.errors import ApplyError, DirtyTreeError, ForkbuildError, RebaseStopped
from forkbuild.export import export_series
from forkbuild.git import Git
from forkbuild.rebase import refs, report
from forkbuild.rebase.checking import check_every_variant
from forkbuild.rebase.collision import upstream_collisions
from forkbuild.rebase.journal import Journal, checkpoint
from forkbuild.rebase.pin import moved_pin
from forkbuild.rebase.upstreamed import HunkEvidence, evidence
from forkbuild.worktree.engine import Engine, Outcome, PatchJob, PatchResult
from forkbuild.worktrees import clear_stale_index_lock

OLD_SERIES = "old-series"  # the series applied on the old pin (its blobs feed the 3-way merges)
NEW_SERIES = "new-series"  # the replayed series (the report's range-diffs read it)
STOP_DIFF_LINES = 40  # of the upstream change a stopped patch collided with, in the message
DROP_OUTCOMES = (Outcome.UPSTREAMED.value, Outcome.EMPTIED.value)


def default_tree(series_dir: Path) -> Path:
    return series_dir / ".forkbuild-work" / "rebase"


@contextmanager
def timed(state: dict, phase: str) -> Iterator[None]:
    """Add the seconds spent in `phase` to the state (journaled with the next step, reported)."""
    start = time.monotonic()
    try:
        yield
    finally:
        timings = state.setdefault("timings", {})
        timings[phase] = round(timings.get(phase, 0.0) + time.monotonic() - start, 3)


def _upstream_dict(upstream: Upstream) -> dict:
    return dataclasses.asdict(upstream)


def _upstream_from(data: dict) -> Upstream:
    git = GitPin(**data["git"]) if data.get("git") else None
    wheels = tuple(WheelPin(**pin) for pin in data.get("wheels", ()))
    return Upstream(**{**data, "git": git, "wheels": wheels})


class Rebase:
    def __init__(self, context: Context) -> None:
        self.context = context
        self.reporter = context.reporter
        self.journal = Journal(context.series_dir)
        self.cache = UpstreamCache(context.cache_dir, reporter=context.reporter)

    # -- entry points -------------------------------------------------------------
    def start(self, *, target: Upstream, tree: Path, accept_drops: bool) -> dict:
        series = self.context.series
        if self.journal.exists():
            raise ForkbuildError("a rebase is already in progress",
                                 hint="`forkbuild rebase --continue`, `--skip` or `--abort` it first")
        if target.version == series.upstream.version:
            self.reporter.info(f"the series is already on {series.upstream.name} {target.version}: nothing to do")
            return {"phase": "nothing"}
        if _older(target.version, than=series.upstream.version):
            self.reporter.warn(f"{target.version} is older than the pinned {series.upstream.version}: "
                               "this rebase is a downgrade")
        if tree.exists() and any(tree.iterdir()):
            raise ForkbuildError(f"{tree} exists and is not empty", hint="remove it, or pass another --dir")
        state = {
            "phase": "prepare", "worktree": str(tree), "accept_drops": accept_drops,
            "id": secrets.token_hex(6), "refs": {},
            "old": _upstream_dict(series.upstream), "target": _upstream_dict(target),
            "old_base": None, "new_base": None, "cursor": 0, "head_before": None,
            "patches": [{"file": entry.file, "feature": entry.feature, "old_commit": "", "outcome": None,
                         "commit": "", "detail": "", "evidence": [], "conflicts": []} for entry in series.patches],
        }
        self.journal.create(state)
        return self.run(self.journal.load())

    def resume(self, action: str) -> dict:
        state = self.journal.load()
        if action == "abort":
            self.abort(state)
            return state
        if action == "skip":
            if state["phase"] != "conflict":
                raise ForkbuildError(f"--skip: the rebase is not stopped at a conflict (phase {state['phase']})",
                                     hint="--continue goes on, --abort puts everything back")
            self._skip(state)
        # --continue while the drops are proposed is the user's yes to them.
        return self.run(state, resumed_at=state["phase"])

    def run(self, state: dict, *, resumed_at: str | None = None) -> dict:
        if state["phase"] == "prepare":
            try:
                with timed(state, "prepare"):
                    self._prepare(state)
            except ForkbuildError:
                if resumed_at:
                    raise
                self.reporter.warn("the rebase could not start; putting everything back")
                self.abort(state)
                raise
        if state["phase"] == "conflict":
            self._settle(state)
        if state["phase"] in ("replay", "applying"):
            with timed(state, "replay"):
                self._replay(state)
        if state["phase"] == "replayed":
            if self._proposals(state) and not state["accept_drops"]:
                state["phase"] = "review"
                self.journal.save(state, step="review")
            else:
                state["phase"] = "finalize"
                self.journal.save(state, step="finalize")
        if state["phase"] == "review":
            if resumed_at != "review":
                self._stop_for_review(state)
            state["accept_drops"], state["phase"] = True, "finalize"
            self.journal.save(state, step="finalize")
        if state["phase"] == "finalize":
            with timed(state, "export"):
                self._finalize(state)
        if state["phase"] in ("checked", "check-failed"):
            self._check_and_finish(state)
        return state

    # -- prepare --------------------------------------------------------------------
    def _prepare(self, state: dict) -> None:
        old, target = _upstream_from(state["old"]), _upstream_from(state["target"])
        with self.reporter.step(f"Importing {old.name} {old.version} and {target.version} into the cache"), \
                timed(state, "import"):
            state["old_base"] = self._import(state, old)
            state["new_base"] = self._import(state, target)
        self.journal.save(state, step="imported")
        tree = Path(state["worktree"])
        cache_git = self.cache.git()
        self._drop_tree(cache_git, tree)
        backup = self._backup_patches(state)
        with self.reporter.step(f"Applying the {len(backup)} patches on {old.version} (their commits feed the 3-way merges)"):
            # Plumbing in the cache: no checkout of the old version is needed.
            old_series = Engine(cache_git, head=state["old_base"], shown=state["old_base"])
            made = old_series.run([PatchJob(name=path.name, path=path) for path in backup], stop=False)
            old_series.close()
        failed = [result for result in made if not result.outcome.applied]
        if failed:
            raise ForkbuildError(f"the series does not apply on its own pin {old.version}:\n"
                                 + "\n".join(f"  - {result.name}: {result.detail}" for result in failed),
                                 hint="fix the series first: `forkbuild check`")
        self._move_ref(state, refs.series_ref(state, OLD_SERIES), old_series.head)
        for patch, result in zip(state["patches"], made, strict=True):
            patch["old_commit"] = result.commit
        cache_git.add_worktree(tree, state["new_base"])
        checkpoint("worktree")
        state["phase"], state["cursor"] = "replay", 0
        self.journal.save(state, step="prepared")

    def _import(self, state: dict, upstream: Upstream) -> str:
        """The cache commit of `upstream`; a tag the import creates is recorded for --abort."""
        ref = f"refs/tags/{upstream.tag}"
        if ref not in state["refs"] and self.cache.imported(upstream) is None:
            # Journaled before the import: a kill mid-import must not leave a tag abort does not know of.
            refs.record(state, ref, before=None, after=None)
            self.journal.save(state, step=f"importing:{upstream.version}")
        commit = self.cache.ensure(upstream)
        if ref in state["refs"]:
            state["refs"][ref]["after"] = commit
        return commit

    def _move_ref(self, state: dict, ref: str, commit: str) -> None:
        """Point a cache ref at `commit`, journaling where it was first so that --abort can put it back."""
        cache_git = self.cache.git()
        refs.record(state, ref, before=cache_git.refs().get(ref), after=commit)
        self.journal.save(state, step=f"ref:{ref.rsplit('/', 1)[-1]}")
        cache_git.update_ref(ref, commit)

    def _backup_patches(self, state: dict) -> list[Path]:
        # The journal's copies: patches/ itself may be half rewritten by a killed finalize.
        return [self.journal.backup / "patches" / patch["file"] for patch in state["patches"]]

    @staticmethod
    def _drop_tree(cache_git: Git, tree: Path) -> None:
        """Remove the rebase work tree (ours: the journal owns it) and its registration."""
        if tree.exists():
            cache_git.remove_worktree(tree)
            shutil.rmtree(tree, ignore_errors=True)
        cache_git.prune_worktrees()

    # -- replay ---------------------------------------------------------------------
    def _worktree(self, state: dict) -> Git:
        return Git(Path(state["worktree"]))

    def _job(self, state: dict, index: int) -> PatchJob:
        patch = state["patches"][index]
        # The patch's commit in the old series: the 3-way rung merges it, never the file's index lines.
        return PatchJob(name=patch["file"], path=self._backup_patches(state)[index], source=patch["old_commit"])

    def _replay(self, state: dict) -> None:
        worktree = self._worktree(state)
        if state["phase"] == "applying":
            # Killed mid-patch: whatever git got to, go back to before that patch and redo it.
            worktree.sequencer_quit()
            worktree.reset_hard(state["head_before"])
            worktree.clean_untracked()
        elif state.get("tip") and worktree.head() != state["tip"]:
            # Killed between patches: the commits made so far were not checked out yet.
            worktree.reset_hard(state["tip"])
        engine = Engine(worktree, detect_upstreamed=True)
        while state["cursor"] < len(state["patches"]):
            patch, job = state["patches"][state["cursor"]], self._job(state, state["cursor"])
            state["phase"], state["head_before"] = "applying", engine.head
            self.journal.save(state, step=f"applying:{patch['file']}")
            result = engine.step(job, stop=True)
            self._record(state, patch, result)
            if result.outcome is Outcome.CONFLICT:
                state["phase"] = "conflict"
                self.journal.save(state, step="conflict")
                self._stop_at_conflict(state, patch)
            self.reporter.info(f"{patch['file']}: {report.label(patch['outcome'])} {patch['detail']}".rstrip())
            state["phase"], state["cursor"], state["tip"] = "replay", state["cursor"] + 1, engine.head
            self.journal.save(state, step=f"applied:{patch['file']}")
        engine.finish()
        state["phase"] = "replayed"
        self.journal.save(state, step="replayed")

    def _record(self, state: dict, patch: dict, result: PatchResult) -> None:
        found = []
        if result.outcome in (Outcome.UPSTREAMED, Outcome.EMPTIED):
            # Evidence points into the new release (not HEAD, whose lines the earlier fork patches shift);
            # for an emptied patch it says which hunks upstream lacks.
            path = self._backup_patches(state)[state["cursor"]]
            found = [item.as_dict() for item in evidence(self.cache.git(), commit=state["new_base"],
                                                          patch_text=path.read_text(errors="surrogateescape"))]
        # A patch settled after a stop keeps what it collided with: the report shows why it needed a person.
        collided, conflicts = patch.get("collided", ""), patch.get("conflicts", [])
        if result.outcome is Outcome.CONFLICT:
            conflicts = list(result.conflicts)
            collided = upstream_collisions(self.cache.git(), old_base=state["old_base"], new_base=state["new_base"],
                                           patch=self._backup_patches(state)[state["cursor"]], files=result.conflicts)
        elif result.outcome.automatic or result.outcome is Outcome.UPSTREAMED:
            collided, conflicts = "", []
        patch.update(outcome=result.outcome.value, commit=result.commit, detail=result.detail, evidence=found,
                     conflicts=conflicts, collided=collided)

    def _stop_at_conflict(self, state: dict, patch: dict) -> None:
        tree = state["worktree"]
        files = ", ".join(patch["conflicts"]) or "see `git status`"
        collided = patch.get("collided") or "(no upstream change near its hunks in those files)"
        lines = collided.splitlines()
        if len(lines) > STOP_DIFF_LINES:  # the whole of it goes into the report
            collided = "\n".join(lines[:STOP_DIFF_LINES] + [f"... ({len(lines) - STOP_DIFF_LINES} more lines: "
                                                             "`forkbuild rebase` writes them all in its report)"])
        raise RebaseStopped(
            f"{patch['file']} does not apply to {state['target']['version']}: {patch['detail']}\n"
            f"  conflicted: {files}\n  work tree: {tree}\n"
            f"  the upstream change it collided with ({state['old']['version']} -> {state['target']['version']}):\n"
            + "\n".join(f"    {line}" for line in collided.splitlines()),
            hint=f"resolve in {tree} (edit, `git add`), then `forkbuild rebase --continue`; "
                 "`--skip` leaves this patch out; `--abort` puts everything back")

    def _settle(self, state: dict) -> None:
        patch, job = state["patches"][state["cursor"]], self._job(state, state["cursor"])
        engine = Engine(self._worktree(state), head=state["head_before"])
        try:
            result = engine.settle(job)
        except ApplyError as error:  # not resolved yet: the rebase stays stopped
            raise RebaseStopped(error.message, hint=(error.hint or "").replace(
                "--continue", "`forkbuild rebase --continue`")) from error
        self._record(state, patch, result)
        self.reporter.info(f"{patch['file']}: {report.label(patch['outcome'])}")
        state["phase"], state["cursor"], state["tip"] = "replay", state["cursor"] + 1, engine.head
        self.journal.save(state, step=f"settled:{patch['file']}")

    def _skip(self, state: dict) -> None:
        patch, job = state["patches"][state["cursor"]], self._job(state, state["cursor"])
        result = Engine(self._worktree(state), head=state["head_before"]).skip(job)
        self._record(state, patch, result)
        state["phase"], state["cursor"], state["tip"] = "replay", state["cursor"] + 1, state["head_before"]
        self.journal.save(state, step=f"skipped:{patch['file']}")

    # -- review -----------------------------------------------------------------------
    @staticmethod
    def _proposals(state: dict) -> list[dict]:
        return [patch for patch in state["patches"] if patch["outcome"] in DROP_OUTCOMES]

    def _stop_for_review(self, state: dict) -> None:
        md_path = self.journal.path / "report.md"
        draft = self._report(state, check=None, final=False)
        report.write(draft, md_path=md_path, json_path=self.journal.path / "report.json")
        lines = [f"  - {p['file']}: {report.label(p['outcome'])}: {p['detail']}; evidence: "
                 + "; ".join(_evidence_text(p)) for p in self._proposals(state)]
        raise RebaseStopped("every patch is replayed; proposed for dropping:\n" + "\n".join(lines)
                            + f"\n  draft report: {md_path}",
                            hint="`forkbuild rebase --continue` drops them and writes the series; "
                                 "`--abort` puts everything back")

    # -- finalize ---------------------------------------------------------------------
    def _finalize(self, state: dict) -> None:
        self._refuse_foreign_edits(state)
        state["writing"] = True
        self.journal.save(state, step="finalize:writing")
        worktree = self._worktree(state)
        self.journal.restore_series()  # a known start: redoing this phase writes the same result
        checkpoint("finalize:restored")
        self._move_ref(state, refs.series_ref(state, NEW_SERIES), worktree.head())
        series_toml = self.context.series_dir / "series.toml"
        # The moved pin is not written on its own: export writes it with the patches, in one
        # series_writer transaction (a kill leaves the old series or the new one, never a new
        # pin over the old patches). Export reads the series as it will be: pinned to the target.
        pinned = moved_pin(series_toml.read_text(), _upstream_from(state["target"]))
        context = self._fresh_context()
        context.series = parse_series(pinned, path=series_toml.resolve())
        kept = [p["file"] for p in state["patches"] if p["commit"]]
        # patches/ holds the backup again (restored above): the files the work tree was built from.
        record_series_tree(worktree, base=state["new_base"], head=worktree.head(), patches=kept,
                           hashes=series_hashes(context.series))
        with self.reporter.step("Exporting the rebased patches"):
            # refresh: on a new upstream every patch is rewritten against it (index
            # lines, hunk positions), so the series applies exactly on the new pin
            # and its 3-way blobs are the new version's; the range-diff shows the change.
            # The patches left out (--skip, accepted drop proposals) are dropped by name: export drops nothing by itself.
            export_series(context=context, tree=worktree.path, refresh=True, series_toml=pinned,
                          drops=tuple(p["file"] for p in state["patches"] if not p["commit"]))
        checkpoint("finalize:exported")
        state["written"], state["writing"] = self.journal.series_hashes(), False
        state["phase"] = "checked"
        self.journal.save(state, step="exported")

    def _refuse_foreign_edits(self, state: dict) -> None:
        edits = self.journal.foreign_edits(state)
        if not edits:
            return
        listing = "\n".join(f"  {relative} ({how})" for relative, how in edits.items())
        raise DirtyTreeError(
            f"series.toml/patches/ were edited while the rebase was stopped; writing the rebased series "
            f"would overwrite:\n{listing}",
            hint="to keep these edits, save them elsewhere (commit them on another branch, or copy them out), put "
                 "the files back as they were (`git checkout -- <files>`, remove new ones), run `forkbuild rebase "
                 "--continue`, then redo them on the rebased series; or `forkbuild rebase --abort`, which restores "
                 "the series from before the rebase and saves the edited files under .forkbuild-work/")

    def _fresh_context(self) -> Context:
        return Context(series_dir=self.context.series_dir, cache_dir=self.context.cache_dir, reporter=self.reporter)

    def _check(self, state: dict) -> dict:
        """`forkbuild check` of the new series; the series-blob refs it adds to the cache are the rebase's."""
        cache_git = self.cache.git()
        known = set(cache_git.refs())
        with timed(state, "check"):
            check = check_every_variant(self._fresh_context())
        for ref, sha in cache_git.refs().items():
            if ref.startswith(f"{FULL_SERIES_REF}/") and ref not in known:
                refs.record(state, ref, before=None, after=sha)
        return check

    def _check_and_finish(self, state: dict) -> None:
        check = self._check(state)
        final = self._report(state, check=check, final=True)
        md_path, json_path = report.paths(self.context.build_dir, old=state["old"]["version"],
                                          new=state["target"]["version"])
        report.write(final, md_path=md_path, json_path=json_path)
        state["report"] = str(md_path)
        if not check["ok"]:
            state["phase"] = "check-failed"
            self.journal.save(state, step="check-failed")
            raise RebaseStopped(f"the rebased series fails `forkbuild check`:\n{check['detail']}\n  report: {md_path}",
                                hint="fix series.toml/patches/ by hand and `forkbuild rebase --continue` to check again; "
                                     "`--abort` puts the old series back")
        self.journal.save(state, step="check-passed")  # the refs the check made, for an abort after a kill
        self._finish(state)

    def _finish(self, state: dict) -> None:
        cache_git = self.cache.git()
        self._drop_tree(cache_git, Path(state["worktree"]))
        for ref in (refs.series_ref(state, OLD_SERIES), refs.series_ref(state, NEW_SERIES)):
            if cache_git.rev(ref):
                cache_git.delete_ref(ref)
        checkpoint("finish:cleaned")
        self.journal.remove()
        state["phase"] = "done"

    def _report(self, state: dict, *, check: dict | None, final: bool) -> dict:
        cache_git = self.cache.git()
        patches = []
        for patch in state["patches"]:
            commit = patch["commit"]
            # Proposed while the review waits; dropped once the user said yes (the final report).
            proposal = ("dropped" if final else "drop") if patch["outcome"] in DROP_OUTCOMES else None
            patches.append({
                "file": patch["file"], "feature": patch["feature"], "outcome": patch["outcome"],
                "detail": patch["detail"], "old_commit": patch["old_commit"], "new_commit": commit,
                "files": report.files_of(cache_git, commit or patch["old_commit"]),
                "evidence": patch["evidence"], "evidence_text": _evidence_text(patch), "proposal": proposal,
                "range_diff": report.range_diff(cache_git, old_commit=patch["old_commit"], new_commit=commit),
                "conflicts": patch.get("conflicts", []), "collided": patch.get("collided", ""),
            })
        return report.document(state, patches=patches, check=check, final=final)

    # -- abort --------------------------------------------------------------------------
    def abort(self, state: dict) -> None:
        """Everything as before the rebase: work tree gone, series files restored, the
        cache refs the rebase created or moved put back (every other ref left alone).
        Series files edited while the rebase was stopped are saved aside first."""
        edits = self.journal.foreign_edits(state)
        if edits:
            saved = self.journal.save_aside(edits)
            self.reporter.warn(f"edited during the rebase, saved to {saved} before restoring: "
                               + ", ".join(f"{relative} ({how})" for relative, how in edits.items()))
        cache_git = self.cache.git()
        tree = Path(state["worktree"])
        if (tree / ".git").exists():
            clear_stale_index_lock(tree)  # a kill mid-merge leaves it; no live process holds it now
            Git(tree).sequencer_quit()
        self._drop_tree(cache_git, tree)
        checkpoint("abort:tree")
        self.journal.restore_series()
        checkpoint("abort:series")
        with self.cache.locked():
            left = refs.restore(cache_git, state["refs"])
        for ref in left:
            self.reporter.warn(f"{ref}: left as it is: it changed after the rebase set it")
        checkpoint("abort:refs")
        self.journal.remove()
        state["phase"] = "aborted"


def _older(version: str, *, than: str) -> bool:
    try:
        return Version(version) < Version(than)
    except InvalidVersion:
        return False  # a name that is not a version (a git upstream's label): no order to warn about


def _evidence_text(patch: dict) -> list[str]:
    return [HunkEvidence(**item).describe() for item in patch["evidence"]]
