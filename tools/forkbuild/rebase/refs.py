"""The cache refs a rebase creates or moves, recorded in its journal state before
each change, so that --abort undoes exactly those. The cache is shared: other
forkbuild runs add tags and refs while a rebase waits at a conflict, and an
abort must leave them alone.

The state's `refs` maps a ref to its RefMove: `before` (object id, or None:
absent) and `after` (the object id the rebase set, or None while an import has
not said yet).
"""

from __future__ import annotations

from collections.abc import Mapping

from forkbuild.git import Git
from forkbuild.rebase.state import RefMove


def series_ref(rebase_id: str, name: str) -> str:
    """A ref of this rebase alone: two checkouts may rebase against one cache at once."""
    return f"refs/forkbuild/rebase/{rebase_id}/{name}"


def record(recorded: Mapping[str, RefMove], ref: str, *, before: str | None,
           after: str | None) -> dict[str, RefMove]:
    """`recorded` plus: the rebase moves `ref` to `after`. The first `before` recorded is the one restored."""
    first = recorded[ref].before if ref in recorded else before
    return {**recorded, ref: RefMove(before=first, after=after)}


def restore(repo: Git, recorded: Mapping[str, RefMove]) -> list[str]:
    """Put each recorded ref back to its `before` (call with the cache lock held).

    A ref that is no longer where the rebase put it was changed by someone else
    since (or the rebase was killed before it learnt the value): it stays as it
    is. Returns those refs."""
    current = repo.refs()
    left = []
    for ref, move in sorted(recorded.items()):
        now = current.get(ref)
        if now == move.before:
            continue
        if move.after is None or now != move.after:
            left.append(ref)
        elif move.before is None:
            repo.delete_ref(ref)
        else:
            repo.update_ref(ref, move.before)
    return left
