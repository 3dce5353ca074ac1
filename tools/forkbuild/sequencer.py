"""The one resumable sequencer's stop and resume: patches run in order by the apply
engine stop AT one that does not apply (conflict markers in the work tree) until a person
says --continue (their resolution becomes the patch's commit) or --skip (the patch is left
out); `resume` is that step for `apply --all` and `rebase` alike. Each records where it
stopped as JSON replaced atomically on every step: a stopped `apply --all` the `StopState`
below, in the work tree's git dir; a rebase its journal (rebase/journal.py), which holds
the whole rebase's state (phases before and after the replay, a backup of the series)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from forkbuild import statefile
from forkbuild.errors import DirtyTreeError, quoted
from forkbuild.fsutil import write_atomic
from forkbuild.git import Git
from forkbuild.worktree.engine import Engine, PatchJob, PatchResult
from forkbuild.worktree.state import WorktreeState

STOP_FILE = "forkbuild-stop.json"
# 1 throughout: previous_state is the tree's state in its own JSON form (worktree/state.py),
# which reads the older form without a "schema" key as well.
SCHEMA = 1


@dataclass(frozen=True, kw_only=True)
class StopState:
    """A stopped `apply --all`: where it stopped and what it did before."""

    variant: str
    base: str
    started_from: str  # the tree's HEAD before this apply: --abort goes back there
    previous_state: WorktreeState | None  # the tree's forkbuild state before this apply (None: a new tree)
    jobs: tuple[PatchJob, ...]
    cursor: int  # jobs[cursor] is the patch the run stopped at
    results: tuple[PatchResult, ...]  # of jobs[:cursor]
    hashes: dict[str, str]  # the series' patch files when the apply began

    @property
    def stopped(self) -> PatchJob:
        return self.jobs[self.cursor]

    def as_dict(self) -> dict:
        previous = self.previous_state.as_dict() if self.previous_state else None
        return {"schema": SCHEMA, "variant": self.variant, "base": self.base, "started_from": self.started_from,
                "previous_state": previous, "jobs": [job.as_dict() for job in self.jobs],
                "cursor": self.cursor, "results": [result.as_dict() for result in self.results],
                "hashes": self.hashes}

    @classmethod
    def from_dict(cls, data: dict) -> StopState:
        return cls(variant=data["variant"], base=data["base"], started_from=data["started_from"],
                   previous_state=_previous_state(data["previous_state"]),
                   jobs=tuple(PatchJob.from_dict(j) for j in data["jobs"]),
                   cursor=data["cursor"], results=tuple(PatchResult.from_dict(r) for r in data["results"]),
                   hashes=data["hashes"])


def _previous_state(data: object) -> WorktreeState | None:
    try:
        return None if data is None else WorktreeState.from_dict(data)
    except ValueError as error:
        raise ValueError(f"previous_state: {error}") from error


def stop_path(worktree: Git) -> Path:
    return worktree.git_dir / STOP_FILE


def read_stop(worktree: Git) -> StopState | None:
    path = stop_path(worktree)
    if not path.is_file():
        return None
    try:
        fields = statefile.load(path)
        fields.schema((SCHEMA,))
        return StopState.from_dict(fields.data)
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise DirtyTreeError(f"{worktree.path}: its stopped-apply state {path} is unreadable ({error})",
                             hint=f"save your work in {worktree.path} (git -C {quoted(worktree.path)} status), "
                                  f"then remove {path} and apply again") from error


def write_stop(worktree: Git, state: StopState) -> None:
    write_atomic(stop_path(worktree), statefile.dump(state.as_dict()))


def clear_stop(worktree: Git) -> None:
    stop_path(worktree).unlink(missing_ok=True)


def resume(engine: Engine, job: PatchJob, action: str) -> PatchResult:
    """--continue (the person's resolution of the stopped `job` is committed; ApplyError while
    it is not resolved) or --skip (the work tree goes back to before it) at a stop."""
    if action == "continue":
        return engine.settle(job)
    if action == "skip":
        return engine.skip(job)
    raise ValueError(f"resume: {action!r} is neither continue nor skip")
