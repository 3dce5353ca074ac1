"""Where a stopped `apply --all` waits: the plan, the patch it stopped at and
what was done before, in the work tree's git dir, replaced atomically on every
step so that --continue, --skip and --abort (in another process) pick it up."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from forkbuild.errors import DirtyTreeError
from forkbuild.fsutil import write_atomic
from forkbuild.git import Git
from forkbuild.worktree.engine import PatchJob, PatchResult

STOP_FILE = "forkbuild-stop.json"
SCHEMA = 1


@dataclass(frozen=True, kw_only=True)
class StopState:
    variant: str
    base: str
    started_from: str  # the tree's HEAD before this apply: --abort goes back there
    previous_state: dict | None  # the tree's forkbuild state before this apply (None: a new tree)
    jobs: tuple[PatchJob, ...]
    cursor: int  # jobs[cursor] is the patch the run stopped at
    results: tuple[PatchResult, ...]  # of jobs[:cursor]
    hashes: dict[str, str]  # the series' patch files when the apply began

    @property
    def stopped(self) -> PatchJob:
        return self.jobs[self.cursor]

    def as_dict(self) -> dict:
        return {"schema": SCHEMA, "variant": self.variant, "base": self.base, "started_from": self.started_from,
                "previous_state": self.previous_state, "jobs": [job.as_dict() for job in self.jobs],
                "cursor": self.cursor, "results": [result.as_dict() for result in self.results],
                "hashes": self.hashes}

    @classmethod
    def from_dict(cls, data: dict) -> StopState:
        return cls(variant=data["variant"], base=data["base"], started_from=data["started_from"],
                   previous_state=data["previous_state"], jobs=tuple(PatchJob.from_dict(j) for j in data["jobs"]),
                   cursor=data["cursor"], results=tuple(PatchResult.from_dict(r) for r in data["results"]),
                   hashes=data["hashes"])


def stop_path(worktree: Git) -> Path:
    return worktree.git_dir / STOP_FILE


def read_stop(worktree: Git) -> StopState | None:
    path = stop_path(worktree)
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        if data.get("schema") != SCHEMA:
            raise ValueError(f"unknown schema {data.get('schema')!r}")
        return StopState.from_dict(data)
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise DirtyTreeError(f"{worktree.path}: its stopped-apply state {path} is unreadable ({error})",
                             hint=f"save your work in {worktree.path} (git -C {worktree.path} status), "
                                  f"then remove {path} and apply again") from error


def write_stop(worktree: Git, state: StopState) -> None:
    write_atomic(stop_path(worktree), json.dumps(state.as_dict(), indent=2, sort_keys=True) + "\n")


def clear_stop(worktree: Git) -> None:
    stop_path(worktree).unlink(missing_ok=True)
