"""Apply a variant: plan first (which patches, safety, base), then build a work
tree of upstream + one commit per patch with `git am -3`.

Strict: exact and offset applies are fine (offsets are reported); git never
fuzzes; a 3-way merge is reported as such. A patch that fails is reported with
the left-out patches it probably needs, and the run goes on to find every
failing patch (`forkbuild check` reports them all at once).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from forkbuild.cache import UpstreamCache
from forkbuild.config import PatchEntry, Series
from forkbuild.context import Context
from forkbuild.emptydirs import recreate_empty_dirs
from forkbuild.errors import ApplyError, DirtyTreeError
from forkbuild.fsutil import write_atomic
from forkbuild.git import Git
from forkbuild.matrix.combination import Combination, as_combination
from forkbuild.patchfile import PatchInfo, check_safe, hunk_offsets, read_patch

STATE_FILE = "forkbuild-worktree.json"
# What the state file must hold: what apply builds a tree from and what export checks.
STATE_KEYS = {"variant": str, "base": str, "head": str, "patches": list}
FULL_SERIES_REF = "refs/forkbuild/series"
APPLYING = re.compile(r"^Applying: (?P<subject>.*)$")
THREE_WAY = "Falling back to patching base and 3-way merge"


@dataclass(frozen=True, kw_only=True)
class PatchRecord:
    entry: PatchEntry
    outcome: str  # "exact" | "offset" | "3way" | "failed"
    commit: str = ""
    detail: str = ""


@dataclass(frozen=True, kw_only=True)
class ApplyPlan:
    variant: str  # a variant name, or "" for the whole series
    entries: tuple[PatchEntry, ...]
    infos: tuple[PatchInfo, ...]
    left_out: tuple[PatchEntry, ...]


@dataclass(frozen=True, kw_only=True)
class ApplyResult:
    dest: Path
    variant: str
    base_commit: str
    head_commit: str
    records: tuple[PatchRecord, ...] = field(default_factory=tuple)

    @property
    def failures(self) -> tuple[PatchRecord, ...]:
        return tuple(record for record in self.records if record.outcome == "failed")


def plan_variant(series: Series, variant: Combination | str | None) -> ApplyPlan:
    """Which patches a combination (a variant, or any set of features; None: the whole
    series) applies, each read and checked for path safety."""
    combination = as_combination(series, variant) if variant else None
    entries = combination.patches(series) if combination else series.patches
    for entry in entries:
        check_safe(entry.path)
    chosen = set(entries)
    return ApplyPlan(variant=combination.name if combination else "", entries=entries, infos=tuple(read_patch(entry.path) for entry in entries),
                     left_out=tuple(entry for entry in series.patches if entry not in chosen))


def apply_variant(*, context: Context, variant: Combination | str | None, dest: Path) -> ApplyResult:
    """Apply `variant` (None: the whole series) into the work tree `dest` and raise on any failure."""
    result = apply_plan(context=context, plan=plan_variant(context.series, variant), dest=dest)
    if result.failures:
        raise ApplyError(describe_failures(result), hint="fix the patch, or run `forkbuild check` to see every variant")
    return result


def apply_plan(*, context: Context, plan: ApplyPlan, dest: Path) -> ApplyResult:
    series = context.series
    cache = UpstreamCache(context.cache_dir, reporter=context.reporter)
    base = cache.ensure(series.upstream)
    cache_git = cache.git()
    if plan.left_out and plan.entries:  # nothing applied (stock): no merges, no series blobs needed
        # Patches after a left-out one were written on top of it: `am -3` needs the
        # blobs of the whole series to merge them, so the series is applied once.
        ensure_series_blobs(context=context, cache=cache, base=base)
    worktree = prepare_worktree(cache_git, dest=dest, base=base)
    # Recorded in the tree's state: export refuses a tree made from other patches than patches/ holds now.
    hashes = series_hashes(series)
    label = plan.variant or "the whole series"
    with context.reporter.step(f"Applying {len(plan.entries)} patches of {label} into {dest}"):
        records = _am_all(worktree, plan)
    recreate_empty_dirs(dest, series.upstream.empty_dirs)  # upstream has them, git cannot track them
    head = worktree.head()
    _write_state(worktree, {"variant": plan.variant, "base": base, "head": head,
                            "patches": [record.entry.file for record in records if record.commit],
                            "sha256": hashes})
    for record in records:
        if record.outcome in ("offset", "3way"):
            context.reporter.info(f"{record.entry.file}: {record.outcome} {record.detail}".rstrip())
    return ApplyResult(dest=dest, variant=plan.variant, base_commit=base, head_commit=head, records=tuple(records))


@contextmanager
def scratch_tree(*, context: Context, variant: Combination | str | None, strict: bool) -> Iterator[ApplyResult]:
    """The variant applied in a temporary work tree, removed afterwards.

    strict: raise ApplyError on a failing patch (as apply_variant does); otherwise
    the failures are in the result's records, for callers that report them.
    """
    cache = UpstreamCache(context.cache_dir, reporter=context.reporter)
    with tempfile.TemporaryDirectory(prefix="forkbuild-scratch-") as scratch:
        name = variant if isinstance(variant, str) or variant is None else variant.name
        dest = Path(scratch) / (name or "series")
        try:
            if strict:
                yield apply_variant(context=context, variant=variant, dest=dest)
            else:
                yield apply_plan(context=context, plan=plan_variant(context.series, variant), dest=dest)
        finally:
            if dest.exists():
                cache.git().remove_worktree(dest)


def describe_failures(result: ApplyResult) -> str:
    lines = [f"{len(result.failures)} patch(es) of {result.variant or 'the series'} do not apply:"]
    lines += [f"  - {record.entry.file}: {record.detail}" for record in result.failures]
    return "\n".join(lines)


# -- the work tree ------------------------------------------------------------

def _state_path(worktree: Git) -> Path:
    return worktree.git_dir / STATE_FILE


def read_state(dest: Path) -> dict | None:
    """The state apply recorded for the work tree `dest`; None if forkbuild did not make it."""
    path = _state_path(Git(dest))
    if not path.is_file():
        return None
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise _corrupt_state(dest, path, str(error)) from error
    if not isinstance(state, dict):
        raise _corrupt_state(dest, path, "not a JSON object")
    wrong = [key for key, kind in STATE_KEYS.items() if not isinstance(state.get(key), kind)]
    if not isinstance(state.get("sha256", {}), dict):  # absent in trees made before it was recorded
        wrong.append("sha256")
    if wrong:
        raise _corrupt_state(dest, path, f"missing or mistyped: {', '.join(wrong)}")
    return state


def _corrupt_state(dest: Path, path: Path, reason: str) -> DirtyTreeError:
    # Without the state forkbuild cannot tell the series' commits from the user's:
    # refuse to touch the tree rather than guess.
    return DirtyTreeError(f"{dest}: its forkbuild state {path} is unreadable ({reason})",
                          hint=f"save any commits of yours first (git -C {dest} log), then remove {dest} "
                               "and apply again")


def series_hashes(series: Series) -> dict[str, str]:
    """sha256 of each patch file of the series, by file name."""
    return file_hashes(series.patches_dir, [entry.file for entry in series.patches])


def file_hashes(directory: Path, names: Iterable[str]) -> dict[str, str]:
    return {name: hashlib.sha256((directory / name).read_bytes()).hexdigest() for name in names}


def record_exported(worktree: Git, *, head: str, patches: list[str], hashes: Mapping[str, str]) -> None:
    """After `export`: the tree's commits are the series now (`hashes`: its patch files as
    written), so apply may refresh the tree again and export may write from it."""
    state = read_state(worktree.path) or {}
    _write_state(worktree, {**state, "head": head, "patches": patches, "sha256": dict(hashes)})


def record_series_tree(worktree: Git, *, base: str, head: str, patches: list[str],
                       hashes: Mapping[str, str] | None = None) -> None:
    """Mark a tree built outside apply (the rebase's) as a full-series work tree `export` reads.

    `hashes` (series_hashes of the series the tree replaces) lets export check that
    patches/ did not change meanwhile; without it export warns that it cannot."""
    state = {"variant": "", "base": base, "head": head, "patches": patches}
    _write_state(worktree, state if hashes is None else {**state, "sha256": dict(hashes)})


def _write_state(worktree: Git, state: dict) -> None:
    write_atomic(_state_path(worktree), json.dumps(state, indent=2, sort_keys=True) + "\n")


def refuse_unsaved_work(worktree: Git) -> None:
    """Raise DirtyTreeError if the tree holds work no commit has: a stopped `git am`, or
    uncommitted changes. apply would reset them away; export reads commits only."""
    dest = worktree.path
    if worktree.am_in_progress():
        raise DirtyTreeError(f"{dest}: a `git am` is in progress there",
                             hint=f"finish it (git -C {dest} am --continue) and export, "
                                  f"or discard it (git -C {dest} am --abort)")
    dirty = worktree.status_porcelain()
    if dirty:
        raise DirtyTreeError(f"{dest} has uncommitted changes:\n{dirty}",
                             hint=f"keep them: commit them (git -C {dest} commit, or --amend into the patch's commit), "
                                  f"then `forkbuild export --dir {dest}`; "
                                  f"discard them: git -C {dest} reset --hard && git -C {dest} clean -fd")


def prepare_worktree(cache_git: Git, *, dest: Path, base: str) -> Git:
    """A clean work tree at `base`: new, or one forkbuild made that holds nothing else."""
    if dest.exists() and not dest.is_dir():
        raise DirtyTreeError(f"{dest} exists and is not a directory", hint="choose another --dir")
    if not dest.exists() or not any(dest.iterdir()):
        return cache_git.add_worktree(dest, base)
    state = read_state(dest) if (dest / ".git").exists() else None
    if state is None:
        raise DirtyTreeError(f"{dest} exists and is not a forkbuild work tree",
                             hint="choose another --dir, or remove that directory yourself")
    worktree = Git(dest)
    refuse_unsaved_work(worktree)
    head = worktree.head()
    if head != state["head"]:
        extra = worktree.commits(state["head"], head)
        raise DirtyTreeError(f"{dest} has {len(extra) or 'other'} commit(s) that are not in the series (HEAD {head[:12]})",
                             hint=f"keep them: `forkbuild export --dir {dest}`; "
                                  f"discard them: git -C {dest} reset --hard {state['head'][:12]}")
    worktree.checkout_detached(base)
    return worktree


# -- applying ---------------------------------------------------------------

def _am_all(worktree: Git, plan: ApplyPlan) -> list[PatchRecord]:
    """`git am -3` the plan's patches; on a failure, record it, skip it and go on."""
    records: list[PatchRecord] = []
    remaining = list(zip(plan.entries, plan.infos, strict=True))
    while remaining:
        before = worktree.head()
        result = worktree.am([entry.path for entry, _ in remaining], three_way=True,
                             committer_date_is_author_date=True)
        made = worktree.commits(before, worktree.head())
        three_way = _three_way_subjects(result.stdout + result.stderr)
        diffs = worktree.commit_diffs(before, worktree.head()) if made else {}
        for (entry, info), commit in zip(remaining, made, strict=False):
            records.append(_record_for(entry, info, commit, diffs[commit], three_way=info.subject in three_way))
        remaining = remaining[len(made):]
        if result.status == 0:
            break
        if worktree.am_in_progress():
            # --quit, not --abort: --abort would also undo the patches this run applied.
            worktree.am_quit()
        if not remaining:
            # git made a commit for every patch and still failed: the error belongs to
            # the last one, whose commit may be incomplete; report it, never guess it is fine.
            last = records.pop()
            records.append(PatchRecord(entry=last.entry, outcome="failed", commit=last.commit,
                                       detail="git am failed after committing it: "
                                              + _reason(result.stdout + result.stderr, default=f"exit {result.status}")))
            break
        failed_entry, _ = remaining.pop(0)
        records.append(PatchRecord(entry=failed_entry, outcome="failed",
                                   detail=_failure_detail(failed_entry, plan, result.stdout + result.stderr)))
    return records


def _three_way_subjects(output: str) -> set[str]:
    subjects, current = set(), None
    for line in output.splitlines():
        match = APPLYING.match(line)
        if match:
            current = match["subject"]
        elif THREE_WAY in line and current is not None:
            subjects.add(current)
    return subjects


def _record_for(entry: PatchEntry, info: PatchInfo, commit: str, applied_diff: str, *, three_way: bool) -> PatchRecord:
    if three_way:
        return PatchRecord(entry=entry, outcome="3way", commit=commit, detail="(merged with the series' blobs)")
    offsets = hunk_offsets(entry.path.read_bytes().decode("utf-8", errors="surrogateescape"), applied_diff)  # bytes: a lone \r stays
    if offsets:
        return PatchRecord(entry=entry, outcome="offset", commit=commit, detail="; ".join(offsets))
    return PatchRecord(entry=entry, outcome="exact", commit=commit)


def _reason(output: str, *, default: str = "does not apply") -> str:
    """The line of git am's output that says why it stopped."""
    return next((line.strip() for line in output.splitlines()
                 if line.startswith(("error:", "fatal:", "CONFLICT"))), default)


def _failure_detail(entry: PatchEntry, plan: ApplyPlan, output: str) -> str:
    touched = {change.path for change in read_patch(entry.path).files}
    needs = [other.file for other in plan.left_out
             if touched & {change.path for change in read_patch(other.path).files}]
    reason = _reason(output)
    if needs:
        return f"{reason}; it needs {', '.join(needs)} (left out of {plan.variant or 'the series'}; same files)"
    return reason


# -- the whole series' blobs ------------------------------------------------

def _series_key(series: Series, base: str) -> str:
    digest = hashlib.sha256(base.encode())
    for entry in series.patches:
        digest.update(entry.file.encode() + b"\0" + entry.path.read_bytes())
    return digest.hexdigest()[:20]


def ensure_series_blobs(*, context: Context, cache: UpstreamCache, base: str) -> None:
    """Apply the whole series once (per content) in the cache, keeping its commits under a ref."""
    ref = f"{FULL_SERIES_REF}/{_series_key(context.series, base)}"
    cache_git = cache.git()
    if cache_git.rev(ref):
        return
    with cache.locked(), tempfile.TemporaryDirectory(prefix="forkbuild-series-") as scratch:
        if cache_git.rev(ref):
            return
        dest = Path(scratch) / "tree"
        worktree = cache_git.add_worktree(dest, base)
        try:
            plan = plan_variant(context.series, None)
            records = _am_all(worktree, plan)
            if any(record.outcome == "failed" for record in records):
                raise ApplyError(describe_failures(ApplyResult(dest=dest, variant="", base_commit=base,
                                                               head_commit=worktree.head(), records=tuple(records))),
                                 hint="the whole series must apply before a variant that leaves patches out can")
            cache_git.update_ref(ref, worktree.head())
        finally:
            cache_git.remove_worktree(dest)
            shutil.rmtree(dest, ignore_errors=True)
