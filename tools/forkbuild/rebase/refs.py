"""The cache refs a rebase creates or moves, recorded in its journal state before
each change, so that --abort undoes exactly those. The cache is shared: other
forkbuild runs add tags and refs while a rebase waits at a conflict, and an
abort must leave them alone.

state["refs"] maps a ref to {"before": object id or None (absent), "after":
the object id the rebase set, or None while an import has not said yet}.
"""

from __future__ import annotations

from forkbuild.git import Git


def series_ref(state: dict, name: str) -> str:
    """A ref of this rebase alone: two checkouts may rebase against one cache at once."""
    return f"refs/forkbuild/rebase/{state['id']}/{name}"


def record(state: dict, ref: str, *, before: str | None, after: str | None) -> None:
    """Note that the rebase moves `ref` to `after`; the first `before` recorded is the one restored."""
    entry = state["refs"].setdefault(ref, {"before": before, "after": None})
    entry["after"] = after


def restore(repo: Git, recorded: dict[str, dict]) -> list[str]:
    """Put each recorded ref back to its `before` (call with the cache lock held).

    A ref that is no longer where the rebase put it was changed by someone else
    since (or the rebase was killed before it learnt the value): it stays as it
    is. Returns those refs."""
    current = repo.refs()
    left = []
    for ref, entry in sorted(recorded.items()):
        now = current.get(ref)
        if now == entry["before"]:
            continue
        if entry["after"] is None or now != entry["after"]:
            left.append(ref)
        elif entry["before"] is None:
            repo.delete_ref(ref)
        else:
            repo.update_ref(ref, entry["before"])
    return left
