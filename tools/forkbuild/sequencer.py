"""Stop and resume: patches stop AT one that does not apply until --continue (the person's
resolution becomes its commit) or --skip; `resume` is that step for `apply --all` and rebase.
A stopped `apply --all` is a `StopState` in the tree's git dir; a rebase's is its journal."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from forkbuild import statefile
from forkbuild.errors import DirtyTreeError, quoted
from forkbuild.fsutil import write_atomic
from forkbuild.git import Git
from forkbuild.worktree.engine import Engine, Outcome, PatchJob, PatchResult
from forkbuild.worktree.state import WorktreeState

STOP_FILE = "forkbuild-stop.json"
SCHEMA = 1


@dataclass(frozen=True, kw_only=True)
class StopState:

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
                "previous_state": previous, "jobs": [{**job._asdict(), "path": str(job.path)} for job in self.jobs],
                "cursor": self.cursor, "results": [result._asdict() for result in self.results],
                "hashes": self.hashes}

    @classmethod
    def from_dict(cls, data: dict) -> StopState:
        previous = data["previous_state"]
        return cls(variant=data["variant"], base=data["base"], started_from=data["started_from"],
                   previous_state=None if previous is None else WorktreeState.from_dict(previous),
                   jobs=tuple(PatchJob(**{**job, "path": Path(job["path"])}) for job in data["jobs"]),
                   cursor=data["cursor"], results=tuple(PatchResult(**{
                       **result, "outcome": Outcome(result["outcome"]), "conflicts": tuple(result["conflicts"]),
                       "offsets": tuple(result["offsets"])}) for result in data["results"]),
                   hashes=data["hashes"])


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
    """--continue (ApplyError while `job` is not resolved) or --skip at a stop."""
    if action == "continue":
        return engine.settle(job)
    if action == "skip":
        return engine.skip(job)
    raise ValueError(f"resume: {action!r} is neither continue nor skip")
