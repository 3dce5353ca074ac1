"""A forkbuild work tree's state: what apply built it from and what export compares it with
(`<git dir>/forkbuild-worktree.json`; a file without a "schema" key reads as 1); and where a
stopped `apply --all` stopped (`forkbuild-stop.json`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from forkbuild.errors import DirtyTreeError, quoted
from forkbuild.io import statefile
from forkbuild.io.fsutil import write_atomic
from forkbuild.io.git import Git
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


def read_state(dest: Path) -> WorktreeState | None:
    """The state apply recorded for the work tree `dest`; None if forkbuild did not make it."""
    path = Git(dest).git_dir / STATE_FILE
    if not path.is_file():
        return None
    try:
        return statefile.load(path, WorktreeState, (None, SCHEMA))
    except (OSError, ValueError) as error:
        # Without it the series' commits cannot be told from the user's: refuse, never guess.
        foreign = isinstance(error, statefile.UnknownSchema)
        how = f"is of {error}: another forkbuild made it" if foreign else f"is unreadable ({error})"
        first = "use the forkbuild version that made this tree (a newer one), or " if foreign else ""
        raise DirtyTreeError(f"{dest}: its forkbuild state {path} {how}", hint=f"{first}save any commits of yours "
                             f"first (git -C {quoted(dest)} log), then remove {dest} and apply again") from error


def write_state(worktree: Git, state: WorktreeState) -> None:
    write_atomic(worktree.git_dir / STATE_FILE, statefile.dump(state, schema=SCHEMA))


@dataclass(frozen=True, kw_only=True)
class StopState:
    """A stopped `apply --all` (`apply --continue/--skip/--abort` go on from it)."""

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


def read_stop(worktree: Git) -> StopState | None:
    path = worktree.git_dir / STOP_FILE
    if not path.is_file():
        return None
    try:
        return statefile.load(path, StopState, (SCHEMA,))
    except (OSError, ValueError) as error:
        raise DirtyTreeError(f"{worktree.path}: its stopped-apply state {path} is unreadable ({error})",
                             hint=f"save your work in {worktree.path} (git -C {quoted(worktree.path)} status), "
                                  f"then remove {path} and apply again") from error


def write_stop(worktree: Git, state: StopState) -> None:
    write_atomic(worktree.git_dir / STOP_FILE, statefile.dump(state, schema=SCHEMA))


def clear_stop(worktree: Git) -> None:
    (worktree.git_dir / STOP_FILE).unlink(missing_ok=True)
