"""A forkbuild work tree's state: what apply built it from and what export compares it
with, in `<git dir>/forkbuild-worktree.json` (a file without a "schema" key reads as 1)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forkbuild import statefile
from forkbuild.errors import DirtyTreeError, quoted
from forkbuild.fsutil import write_atomic
from forkbuild.git import Git
from forkbuild.worktree.engine import Outcome

STATE_FILE = "forkbuild-worktree.json"
SCHEMA = 1
READS = (None, SCHEMA)  # None: the file of a forkbuild from before the schema number


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
        fields.schema(READS)
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
