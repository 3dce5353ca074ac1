"""The cache refs a rebase creates or moves, journaled before each change so that
--abort undoes exactly those (the cache is shared: other runs' refs stay alone)."""

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
    """Put each recorded ref back to its `before` (with the cache lock held); returns the refs
    left alone: changed by someone else since, or set by a rebase killed before it knew the value."""
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
