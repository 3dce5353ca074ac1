"""The one apply engine (apply, check, wheels, rebase): one typed outcome per patch; per patch:

1. upstreamed  `git apply --cached --check --reverse` (rebase only)
2. exact/offset `git apply --cached` into a private index of the files the patch names
               (smallindex.py; commits from one fast-import), else of the whole tree
3. 3-way       a merge-ort merge of the patch's commit in a series on another base, or
               `git apply --3way` by its index lines
4. conflict    recorded (stop=False), or redone in the work tree with markers (stop=True)

No work tree is touched until `finish` checks the result out once (or a stop).

A bare diff (import --quilt: its commit's author and message given, any -p level, hunks without
context) takes the first two rungs only: it applies as GNU patch would, or not at all. With
`gnu_emptied`, a file a patch leaves empty is removed, as GNU patch -E does (dpkg-source).
"""

from __future__ import annotations

import email.utils
import itertools
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from enum import StrEnum
from pathlib import Path
from typing import NamedTuple

from forkbuild.errors import ForkbuildError
from forkbuild.io.childgroup import process_exists
from forkbuild.io.git import EMPTY_BLOB, IDENTITY, Author, FileCommit, Git, PathChange, TreeEntry
from forkbuild.series.patchfile import PatchInfo, git_am_subject, read_patch
from forkbuild.worktree.smallindex import TreeListing, apply_small, disjoint_run

_ENGINES = itertools.count(1)  # numbers this process's engines (their small index files)
# An engine's private index files (and git's lock beside one): forkbuild-engine[-small]-<pid>[-<n>].index
ENGINE_FILE = re.compile(r"forkbuild-engine-(?:small-)?(?P<pid>\d+)(?:-\d+)?\.index(?:\.lock)?")
ALREADY_APPLIED = "its change is already in the tree: applying it changes nothing"
# A fixed identity for the throw-away commit that gives merge-tree its merge base.
MERGE_AUTHOR = Author(name="forkbuild", email="forkbuild@localhost", date="946684800 +0000")
# What git prints while applying or merging: where hunks landed, why it failed, what conflicts.
CHECKING = re.compile(r"^Checking patch (?P<path>.+)\.\.\.$")
OFFSET_LINE = re.compile(r"^Hunk #(?P<hunk>\d+) succeeded at (?P<line>\d+) \(offset (?P<delta>-?\d+) lines?\)\.$")
CONFLICT_LINE = re.compile(r"^CONFLICT \([^)]*\): .*?(?:in|of) (?P<path>\S+)")
# git's own reasons, most telling first: the first one found names the failure.
REASONS = (
    re.compile(r"^error: patch failed: .*$"),
    re.compile(r"^error: .*: (?:patch does not apply|does not exist in index|already exists in index)$"),
    re.compile(r"^error: repository lacks the necessary blob.*$"),
    re.compile(r"^error: sha1 information is lacking or useless.*$"),
    re.compile(r"^CONFLICT .*$"),
    re.compile(r"^(?:error|fatal): .*$"),
)
REGULAR_MODES = (0o100644, 0o100755)
MISSING_BLOB = ("lacks the necessary blob", "lacks necessary blobs", "sha1 information is lacking", "invalid object")


class Outcome(StrEnum):
    EXACT = "exact"
    OFFSET = "offset"
    THREE_WAY = "3-way"
    CONFLICT = "conflict"
    UPSTREAMED = "upstreamed"  # the base already holds the patch's change
    RESOLVED = "resolved"  # a person resolved the conflict (repair, rebase)
    PORTED = "ported"  # rebase's porter placed it hunk by hunk (rebase/porter.py), accepted
    MOOT = "moot"  # rebase's porter found none of its hunks' code in the new release: a drop proposal
    EMPTIED = "emptied"  # the resolution kept the base's side: nothing of the patch is left
    SKIPPED = "skipped"  # left out with --skip at a conflict; its file stays as it is
    DROPPED = "dropped"  # removed from the series on purpose (drop, accepted proposal)

    @property
    def applied(self) -> bool:
        """A commit of the patch is in the tree."""
        return self in (Outcome.EXACT, Outcome.OFFSET, Outcome.THREE_WAY, Outcome.RESOLVED, Outcome.PORTED)

    @property
    def automatic(self) -> bool:
        return self in (Outcome.EXACT, Outcome.OFFSET, Outcome.THREE_WAY)


class Bare(NamedTuple):
    """A diff without a mail's headers: the commit it makes, and every path it names (None: not known)."""

    author: Author
    message: str
    paths: frozenset[str] | None


class PatchJob(NamedTuple):
    """One patch of a plan; `source`: its commit in a series on another base (the 3-way rung)."""

    name: str
    path: Path
    source: str = ""
    strip: int = 1  # git apply -p
    unidiff_zero: bool = False  # some hunk has no context lines
    bare: Bare | None = None


class PatchResult(NamedTuple):
    """What applying one patch came to: its outcome, commit and what git said."""

    name: str
    outcome: Outcome
    commit: str = ""
    detail: str = ""
    conflicts: tuple[str, ...] = ()
    offsets: tuple[str, ...] = ()
    emptied: tuple[str, ...] = ()  # left empty, removed (gnu_emptied)


class _Planned(NamedTuple):
    """A job the fast rung takes: its commit author and message, the files it names."""

    job: PatchJob
    author: Author
    message: str
    paths: frozenset[str]


def _offset_path(offset: str) -> str:
    return offset.rsplit(" hunk ", 1)[0]


class GitReport(NamedTuple):
    offsets: tuple[str, ...] = ()  # "<path> hunk <n>: +3 lines"
    reason: str = ""  # the line saying why it failed ("" when it did not)
    conflicts: tuple[str, ...] = ()  # paths git reported as conflicting
    no_preimage: bool = False  # a 3-way merge by index lines was impossible: blobs missing


def read_report(output: str) -> GitReport:
    """Parse git apply -v / merge-tree / cherry-pick output (stdout and stderr together)."""
    lines = [line.rstrip() for line in output.splitlines()]
    offsets, current = [], ""
    for line in lines:
        if checking := CHECKING.match(line):
            current = checking["path"]
        elif moved := OFFSET_LINE.match(line):
            offsets.append(f"{current} hunk {moved['hunk']}: {int(moved['delta']):+d} lines")
    reason = next((line.removeprefix("error: ").strip() for pattern in REASONS for line in lines
                   if pattern.match(line)), "")
    return GitReport(offsets=tuple(offsets), reason=reason,
                     conflicts=tuple(dict.fromkeys(m["path"] for m in map(CONFLICT_LINE.match, lines) if m)),
                     no_preimage=any(marker in line for line in lines for marker in MISSING_BLOB))


class Engine:
    """Patches onto a work tree's HEAD. `head` is the tip of what was applied so far; the
    work tree shows `shown` until `finish()` (or a stop) checks `head` out. The fast rung's
    commits wait in `_pending` until `flush()` writes them (one fast-import)."""

    def __init__(self, worktree: Git, *, detect_upstreamed: bool = False, head: str = "", shown: str = "",
                 checked_out: bool = True, before_change: Callable[[], None] | None = None,
                 listing: TreeListing | None = None, parsed: Mapping[Path, PatchInfo] | None = None,
                 gnu_emptied: bool = False) -> None:
        self.worktree = worktree
        self.gnu_emptied = gnu_emptied
        for path in worktree.git_dir.glob("forkbuild-engine-*.index*"):  # what killed engines left
            match = ENGINE_FILE.fullmatch(path.name)
            if match and int(match["pid"]) != os.getpid() and not process_exists(int(match["pid"])):
                path.unlink(missing_ok=True)
        self._before_change = before_change
        self._checked_out = checked_out  # False: a new work tree without files (`git worktree add --no-checkout`)
        self.detect_upstreamed = detect_upstreamed
        current = "" if head and shown else worktree.head()
        self._head = head or current  # a commit id, or the token of a pending commit
        self.shown = shown or current
        self._pending: list[tuple[str, FileCommit]] = []  # (token, commit), oldest first
        self._written: dict[str, str] = {}  # token -> commit id, once flushed
        # of `_head`'s tree, for the fast rung; `listing`: `head`'s, when the caller has one
        self._listing = listing
        self._serial = next(_ENGINES)
        # The small index now: its listing, the files it was written for, what it holds.
        self._small: tuple[TreeListing, set[str], dict[str, TreeEntry]] | None = None
        self._index_at: str | None = None
        self._parsed = dict(parsed or {})  # patch file -> PatchInfo: each read once (`parsed`: the caller's reads)

    @property
    def head(self) -> str:
        self.flush()
        return self._head

    @property
    def _index(self) -> Path:
        # Per process: the bare cache's git dir is shared by every forkbuild run.
        return self.worktree.git_dir / f"forkbuild-engine-{os.getpid()}.index"

    @property
    def _small_index(self) -> Path:
        # Per engine: its next group applies on top of what its last one left there.
        return self.worktree.git_dir / f"forkbuild-engine-small-{os.getpid()}-{self._serial}.index"

    def run(self, jobs: Iterable[PatchJob], *, stop: bool, write: bool = True) -> list[PatchResult]:
        """Apply `jobs` in order on `head`; with stop, up to the first conflict (left in the work
        tree). write=False leaves commits pending (pass the results through `written()` later)."""
        jobs = list(jobs)
        results: list[PatchResult] = []
        limit: int | None = None  # the most jobs the next group takes: halved after one git refused
        while len(results) < len(jobs) and not (stop and results and results[-1].outcome is Outcome.CONFLICT):
            rest = jobs[len(results):]
            group = self._group(rest, limit)
            if len(group) > 1:
                done = self._fast(group, upcoming=rest)
                # One patch of it needs a slower rung: halve until the run before it goes in one git run
                # (a few tries per such patch, never one git run per patch after it).
                limit = None if done else len(group) // 2
                results += done
                continue
            planned = group[0] if group else None
            done = self._fast([planned], upcoming=rest) if planned else []
            if not done:
                self.flush()  # the slower rungs work on real commits
                done = [self._compute(rest[0], stop=stop)]
            limit = None
            results += done
        if write:
            self.flush()
        return [self.written(result) for result in results]

    def written(self, result: PatchResult) -> PatchResult:
        """`result` with the id of its commit once `flush` wrote it."""
        return result._replace(commit=self._written[result.commit]) if result.commit in self._written else result

    def flush(self) -> None:
        """Write the fast rung's pending commits (one fast-import)."""
        if not self._pending:
            return
        ids = self.worktree.commit_changes([commit for _, commit in self._pending])
        self._written.update(zip((token for token, _ in self._pending), ids, strict=True))
        self._pending = []
        self._head = self._written.get(self._head, self._head)

    def _plan(self, job: PatchJob) -> _Planned | None:
        """What the fast rung needs of `job`; None when it must not take it."""
        if self.detect_upstreamed:
            return None  # the reverse check needs the whole index: a file the patch deletes must be absent
        if job.bare:
            author, message, paths = job.bare
            return _Planned(job=job, author=author, message=message, paths=paths) if paths else None
        info = self._read(job.path)
        author, message = patch_author_message(info)
        paths = frozenset(change.path for change in info.files)
        if not author.date or not author.name or not paths:
            return None  # commit-tree dates it now or refuses it, or nothing to name: the full rung decides
        return _Planned(job=job, author=author, message=message, paths=paths)

    def _group(self, jobs: list[PatchJob], limit: int | None = None) -> list[_Planned]:
        """The first jobs (at most `limit`) that one `git apply` can take together: each names files
        none of the others does (so each one's result is its own), all with one -p and --unidiff-zero."""
        options = (jobs[0].strip, jobs[0].unidiff_zero)
        planned = itertools.takewhile(lambda plan: plan is not None and (plan.job.strip, plan.job.unidiff_zero) == options,
                                      map(self._plan, jobs))
        return disjoint_run(planned, lambda plan: plan.paths, limit=limit)  # type: ignore[arg-type,union-attr]

    def _fast(self, group: list[_Planned], *, upcoming: Sequence[PatchJob] = ()) -> list[PatchResult]:
        """exact / offset for `group` from one `git apply --cached -v` into a private index of the
        files they (and `upcoming`) name, commits left pending; [] when this rung cannot tell."""
        if self._listing is None:
            self.flush()
            self._listing = TreeListing(self.worktree, self._head)
        listing = self._listing
        paths = {path for planned in group for path in planned.paths}
        if self._small is not None and self._small[0] is listing and paths <= self._small[1]:
            _, named, before = self._small
            written = True
        else:
            named = paths | self._paths_of(upcoming)
            before, written = listing.entries_for(named), False
        self._small = None  # until git's run below is read back: the index may hold anything
        first = group[0].job
        applied = apply_small(self.worktree, [planned.job.path for planned in group], index=self._small_index,
                              entries=before, written=written, strip=first.strip, unidiff_zero=first.unidiff_zero)
        if applied is None:
            self._small = (listing, named, dict(before))  # git applies all or nothing: the index is as it was
            return []  # does not apply there: the full rungs take it
        after, report = applied
        changes = listing.changes(before, after)
        offsets = read_report(report).offsets
        owner = {path: planned for planned in group for path in planned.paths}
        if changes is None or any(change.path not in owner for change in changes) or \
                any(_offset_path(offset) not in owner for offset in offsets):
            return []
        results = []
        mine: dict[int, list[PathChange]] = {id(planned): [] for planned in group}  # linear: one pass each
        moved: dict[int, list[str]] = {id(planned): [] for planned in group}
        for change in changes:
            mine[id(owner[change.path])].append(change)
        for offset in offsets:
            moved[id(owner[_offset_path(offset)])].append(offset)
        for planned in group:
            own, emptied = self._empty_removed(mine[id(planned)], before)
            token = self._add_pending(FileCommit(parent=self._parent(), author=planned.author,
                                                 message=planned.message, changes=own)) if own or not planned.job.bare else ""
            listing.update(own)
            offsets_of = tuple(moved[id(planned)])
            results.append(PatchResult(name=planned.job.name, outcome=Outcome.OFFSET if offsets_of else Outcome.EXACT,
                                       commit=token, offsets=offsets_of, detail="; ".join(offsets_of), emptied=emptied))
        # A file removed for being left empty is still in the index: it is written anew next time.
        self._small = None if any(result.emptied for result in results) else (listing, named, after)
        return results

    def _empty_removed(self, changes: Sequence[PathChange], before: Mapping[str, TreeEntry]
                       ) -> tuple[tuple[PathChange, ...], tuple[str, ...]]:
        """`changes` with the regular files they leave empty removed (none made), and those files (gnu_emptied)."""
        emptied = tuple(change.path for change in changes if self.gnu_emptied and change.blob == EMPTY_BLOB
                        and change.mode in REGULAR_MODES)
        kept = tuple(change for change in changes if change.path not in emptied)
        return (*kept, *(PathChange(path=path, mode=0) for path in emptied if path in before)), emptied

    def _read(self, path: Path) -> PatchInfo:
        """`path` parsed; an engine reads each patch once (the files do not change while it runs)."""
        if path not in self._parsed:
            self._parsed[path] = read_patch(path)
        return self._parsed[path]

    def _paths_of(self, jobs: Iterable[PatchJob]) -> set[str]:
        """The files `jobs` name (a patch that does not read is the full rungs' to judge)."""
        named: set[str] = set()
        for job in jobs:
            if job.bare:
                named.update(job.bare.paths or ())
                continue
            try:
                named.update(change.path for change in self._read(job.path).files)
            except (ForkbuildError, OSError):
                pass
        return named

    def commit_files(self, files: Mapping[str, bytes], *, message: str) -> None:
        """Commit `files` (path -> content) on `head` as forkbuild, at HEAD's date (the guards module)."""
        date = self._pending[-1][1].author.date if self._head.startswith("pending:") else \
            self.worktree.log1("%cd", self._head)
        modes = self._listing.entries_for(files) if self._listing else {}
        changes = tuple(PathChange(path=path, mode=modes[path].mode if path in modes else 0o100644, content=content)
                        for path, content in files.items())
        author = Author(name=IDENTITY["user.name"], email=IDENTITY["user.email"], date=date)
        self._add_pending(FileCommit(parent=self._parent(), author=author, message=message, changes=changes))
        self._listing = None  # the new blobs' ids are git's to tell

    def _parent(self) -> str:
        """HEAD as the parent of a pending commit: "" for the pending commit before it."""
        return "" if self._head.startswith("pending:") else self._head

    def _add_pending(self, commit: FileCommit) -> str:
        token = f"pending:{len(self._written) + len(self._pending) + 1}"
        self._pending.append((token, commit))
        self._head = token
        return token

    def _compute(self, job: PatchJob, *, stop: bool) -> PatchResult:
        if self._index_at != self.head:
            self.worktree.read_tree(self.head, index=self._index)
            self._index_at = self.head
        if self.detect_upstreamed and self.worktree.apply_to_index(job.path, index=self._index, check=True,
                                                                 reverse=True).status == 0:
            return PatchResult(name=job.name, outcome=Outcome.UPSTREAMED,
                               detail="the base already holds the patch's result (it reverse-applies)")
        applied = self.worktree.apply_to_index(job.path, index=self._index, strip=job.strip,
                                               unidiff_zero=job.unidiff_zero)
        report = read_report(applied.stdout + applied.stderr)
        if applied.status == 0:
            emptied = self._remove_emptied()
            tree = self.worktree.write_tree(index=self._index)
            meta = job.bare[:2] if job.bare else patch_author_message(self._read(job.path))
            commit = "" if job.bare and tree == self.worktree.tree_of(self.head) else self._commit(tree, meta)
            outcome = Outcome.OFFSET if report.offsets else Outcome.EXACT
            return PatchResult(name=job.name, outcome=outcome, commit=commit, offsets=report.offsets,
                               detail="; ".join(report.offsets), emptied=emptied)
        if job.bare:  # as GNU patch would, or not at all
            self._index_at = None
            return PatchResult(name=job.name, outcome=Outcome.CONFLICT, detail=report.reason or "does not apply")
        merged = self._merge_source(job) if job.source else self._merge_by_index_lines(job)
        if merged.detail == ALREADY_APPLIED and stop:
            self.materialize()  # nothing to resolve: the tree shows HEAD, for --skip (or drop)
        if merged.outcome is not Outcome.CONFLICT or not stop or merged.detail == ALREADY_APPLIED:
            return merged
        return self.stop_in_worktree(job, merged)

    def _remove_emptied(self) -> tuple[str, ...]:
        """The regular files of the private index that the patch just applied left empty, removed (gnu_emptied)."""
        if not self.gnu_emptied:
            return ()
        empty = {path: entry for path, entry in self.worktree.read_index(self._index).items()
                 if entry.blob == EMPTY_BLOB and entry.mode in REGULAR_MODES}
        held = self.worktree.tree_entries(self.head, empty) if empty else {}
        emptied = tuple(sorted(path for path, entry in empty.items() if held.get(path) != entry))
        if emptied:
            self.worktree.update_index(self._index, dict.fromkeys(emptied))
        return emptied

    def _commit(self, tree: str, meta: tuple[Author, str]) -> str:
        author, message = meta
        commit = self.worktree.commit_tree(tree, parents=[self.head], message=message, author=author)
        self._head = self._index_at = commit
        self._listing = None
        return commit

    def _merge_source(self, job: PatchJob) -> PatchResult:
        """Cherry-pick `job.source` onto `head` by merge-tree, head's tree given the source's parent
        as its parent (git 2.39's merge-tree has no --merge-base)."""
        git = self.worktree
        ours = git.commit_tree(git.tree_of(self.head), parents=[f"{job.source}^"], message="forkbuild merge base\n",
                               author=MERGE_AUTHOR)
        clean, tree, conflicted, messages = git.merge_tree(ours, job.source)
        if clean and tree:
            if tree == git.tree_of(self.head):
                if not self.detect_upstreamed:  # a failure, never an empty commit
                    return PatchResult(name=job.name, outcome=Outcome.CONFLICT, detail=ALREADY_APPLIED)
                return PatchResult(name=job.name, outcome=Outcome.UPSTREAMED,
                                   detail="a 3-way merge of its commit left nothing to change (the base has it)")
            commit = self._commit(tree, git.authored(job.source))
            return PatchResult(name=job.name, outcome=Outcome.THREE_WAY, commit=commit,
                               detail=f"merged its commit {job.source[:12]} (merge-ort)")
        report = read_report(messages)
        return PatchResult(name=job.name, outcome=Outcome.CONFLICT, conflicts=tuple(conflicted) or report.conflicts,
                           detail=report.reason or f"its commit {job.source[:12]} conflicts with the base")

    def _merge_by_index_lines(self, job: PatchJob) -> PatchResult:
        result = self.worktree.apply_to_index(job.path, index=self._index, three_way=True)
        report = read_report(result.stdout + result.stderr)
        if result.status == 0:
            tree = self.worktree.write_tree(index=self._index)
            if tree == self.worktree.tree_of(self.head):
                return PatchResult(name=job.name, outcome=Outcome.CONFLICT, detail=ALREADY_APPLIED)
            commit = self._commit(tree, patch_author_message(self._read(job.path)))
            return PatchResult(name=job.name, outcome=Outcome.THREE_WAY, commit=commit,
                               detail="merged with the preimage blobs its index lines name")
        self._index_at = None  # a failed --3way leaves unmerged entries in the private index
        detail = report.reason or "does not apply"
        if report.no_preimage:
            detail += "; no 3-way merge: git lacks the preimage blobs its index lines name"
        return PatchResult(name=job.name, outcome=Outcome.CONFLICT, detail=detail, conflicts=report.conflicts)

    def stop_in_worktree(self, job: PatchJob, merged: PatchResult) -> PatchResult:
        """Redo the failed merge in the work tree so a person can resolve it."""
        self.materialize()
        git = self.worktree
        if job.source:
            result = git.cherry_pick_no_commit(job.source)
        else:
            result = git.apply_worktree(job.path, three_way=True)
            if read_report(result.stdout + result.stderr).no_preimage or not git.unmerged_paths():
                git.reset_hard(self.head)
                result = git.apply_worktree(job.path, reject=True)
        conflicts = tuple(git.unmerged_paths()) or merged.conflicts or tuple(git.untracked("*.rej"))
        return PatchResult(name=job.name, outcome=Outcome.CONFLICT, detail=merged.detail, conflicts=conflicts)

    def materialize(self) -> None:
        """Check `head` out in the work tree (only the files that differ change)."""
        if self._before_change is not None:
            self._before_change()
            self._before_change = None
        if not self._checked_out:
            self.worktree.reset_hard(self.head)  # the tree's first files: nothing there to keep
            self._checked_out = True
        elif self.shown != self.head or self.worktree.head() != self.head:
            self.worktree.checkout_detached(self.head)
        self.shown = self.head

    def finish(self) -> None:
        self.materialize()
        self.close()

    def close(self) -> None:
        """Drop the private index (a bare repository's engine ends here: nothing to check out)."""
        self.flush()
        self._index.unlink(missing_ok=True)
        self._small_index.unlink(missing_ok=True)
        self._small = None
        self._index_at = None

    def adopt(self, commit: str) -> None:
        """`commit` (made in the work tree, on `head`) is the new head, shown as it is."""
        self._head = self.shown = commit
        self._listing = None

    def reword(self, message: str) -> str:
        """The head commit again with `message` (same tree, parents, author and dates); the new head."""
        git, old = self.worktree, self.head
        author, _ = git.authored(old)
        self._head = git.commit_tree(git.tree_of(old), parents=git.parents(old), message=message, author=author)
        if self._index_at == old:
            self._index_at = self._head  # the same tree
        return self._head

    def read(self, path: Path) -> PatchInfo:
        return self._read(path)


def patch_author_message(info: PatchInfo) -> tuple[Author, str]:
    """The author and commit message `git am --keep-non-patch` takes from a patch mail."""
    name, address = email.utils.parseaddr(info.author)
    subject = git_am_subject(info.subject)
    body = info.message.strip("\n")
    message = f"{subject}\n\n{body}\n" if body else f"{subject}\n"
    return Author(name=name or address, email=address, date=info.date), message
