"""A forkbuild work tree's state: what apply built it from and what export compares it with
(`<git dir>/forkbuild-worktree.json`; a file without a "schema" key reads as 1); and where a
stopped `apply --all` stopped (`forkbuild-stop.json`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forkbuild import statefile
from forkbuild.errors import DirtyTreeError, quoted
from forkbuild.fsutil import write_atomic
from forkbuild.git import Git
from forkbuild.worktree.engine import Outcome, PatchJob, PatchResult

STATE_FILE = "forkbuild-worktree.json"
STOP_FILE = "forkbuild-stop.json"
SCHEMA = 1


@dataclass(frozen=True, kw_only=True)
class WorktreeState:

    variant: str  # "" for the whole series (the tree export reads)
    base: str  # the upstream commit the series is applied on
    head: str  # the tree's HEAD as forkbuild left it: commits above it are someone's
    patches: tuple[str, ...]  # the patch files that have a commit in the tree, in order
    commits: Mapping[str, str] = field(default_factory=dict)  # patch file -> its commit
    missing: Mapping[str, Outcome] = field(default_factory=dict)  # patch file -> why it has no commit
    # sha256 of the patch files the tree was made from; None: not recorded.
    sha256: Mapping[str, str] | None = None
    dropped: tuple[str, ...] = ()  # removed from the series on purpose (`forkbuild drop`)

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "schema": SCHEMA, "variant": self.variant, "base": self.base, "head": self.head,
            "patches": list(self.patches), "commits": dict(self.commits),
            "missing": {name: outcome.value for name, outcome in self.missing.items()},
            "dropped": list(self.dropped)}
        if self.sha256 is not None:  # left out, not null: an older forkbuild reads a missing key as "not recorded"
            data["sha256"] = dict(self.sha256)
        return data

    @classmethod
    def from_dict(cls, data: object) -> WorktreeState:
        """ValueError (statefile.UnknownSchema for another schema) when `data` is not a state."""
        fields = statefile.Fields(data)
        fields.schema((None, SCHEMA))  # None: a file from before the schema number
        sha256 = fields.text_map("sha256") if "sha256" in fields.data else None
        missing = fields.text_map("missing", {})
        try:
            outcomes = {name: Outcome(value) for name, value in missing.items()}
        except ValueError as error:
            raise ValueError(f"missing: {error}") from error
        return cls(variant=fields.text("variant"), base=fields.text("base"), head=fields.text("head"),
                   patches=fields.texts("patches"), commits=fields.text_map("commits", {}), missing=outcomes,
                   sha256=sha256, dropped=fields.texts("dropped", ()))


def state_path(worktree: Git) -> Path:
    return worktree.git_dir / STATE_FILE


def read_state(dest: Path) -> WorktreeState | None:
    """The state apply recorded for the work tree `dest`; None if forkbuild did not make it."""
    path = state_path(Git(dest))
    if not path.is_file():
        return None
    try:
        return WorktreeState.from_dict(statefile.load(path).data)
    except statefile.UnknownSchema as error:
        raise DirtyTreeError(f"{dest}: its forkbuild state {path} is of {error}: another forkbuild made it",
                             hint="use the forkbuild version that made this tree (a newer one), or save any commits "
                                  f"of yours first (git -C {quoted(dest)} log), then remove {dest} and apply again") from error
    except (OSError, ValueError) as error:
        # Without it the series' commits cannot be told from the user's: refuse, never guess.
        raise DirtyTreeError(f"{dest}: its forkbuild state {path} is unreadable ({error})",
                             hint=f"save any commits of yours first (git -C {quoted(dest)} log), then remove {dest} "
                                  "and apply again") from error


def write_state(worktree: Git, state: WorktreeState) -> None:
    write_atomic(state_path(worktree), statefile.dump(state.as_dict()))


@dataclass(frozen=True, kw_only=True)
class StopState:
    """A stopped `apply --all` (`apply --continue/--skip/--abort` go on from it)."""

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
