"""Reasons that follow their statement when an edit of the patch renumbers it (h1.s65 -> h1.s90).

A run records the moves with the patch's results ("reasons_moved": old id -> new id and the
reason's text), then applies them to reasons.toml: a kill between the two writes leaves them
recorded, --check names them, and the next run applies them. A recorded move is pending only
while its old id still holds that very text, so an applied one never runs again."""

from __future__ import annotations

from pathlib import Path

from forkbuild.fsutil import write_atomic
from forkbuild.mutate.results import REASONS_FILE, SURVIVED, load_reasons

MOVED = "reasons_moved"


def _identity(mutant: dict) -> tuple[str, str, str]:
    return mutant["path"], mutant["kind"], mutant["summary"]


def _survivors(mutants: list[dict], keep) -> dict[tuple, list[str]]:
    """The ids of the survivors `keep` accepts, by identity, in order."""
    grouped: dict[tuple, list[str]] = {}
    for mutant in mutants:
        if mutant["status"] == SURVIVED and keep(mutant):
            grouped.setdefault(_identity(mutant), []).append(mutant["id"])
    return grouped


def follow(previous: list[dict], current: list[dict], reasons: dict[str, str]) -> dict[str, str]:
    """old id -> new id for each reason (one patch's table) of `previous`'s survivors whose
    statement (same path, kind and text) survives in `current` under another id."""
    staying = {(mutant["id"], _identity(mutant)) for mutant in current if mutant["status"] == SURVIVED}
    olds = _survivors(previous, lambda mutant: mutant["id"] in reasons
                      and (mutant["id"], _identity(mutant)) not in staying)
    leaving = {old for ids in olds.values() for old in ids}
    # A survivor is open to a moved reason when it has none, or its own is moving away.
    news = _survivors(current, lambda mutant: mutant["id"] not in reasons or mutant["id"] in leaving)
    # Only a one-to-one pairing is sure (three `try:` that became two: which went?).
    return {old: new for identity, old_ids in olds.items() if len(news.get(identity, [])) == len(old_ids)
            for old, new in zip(old_ids, news[identity], strict=True) if old != new}


def pending(recorded_moves: dict[str, dict[str, str]], table: dict[str, str]) -> dict[str, str]:
    """old id -> new id of the recorded moves not yet applied to one patch's reasons `table`:
    the old id still holds the reason moved, and the new id none, or one moving away itself."""
    result = {old: move["id"] for old, move in recorded_moves.items() if table.get(old) == move["reason"]}
    while blocked := {old for old, new in result.items() if new in table and new not in result}:
        for old in blocked:
            del result[old]
    return result


def apply(root: Path, recorded: dict) -> list[tuple[str, str, str]]:
    """Apply the pending moves of one variant's records to reasons.toml (comments and other
    lines kept) in one atomic write; (patch, old id, new id) of each."""
    import tomlkit

    path = root / REASONS_FILE
    if not path.is_file():
        return []
    # Read as --check reads it first: a broken file stops here, named, before any edit.
    by_patch = load_reasons(root).by_patch
    found = {file: moves for file, record in recorded.items()
             if (moves := pending(record.get(MOVED, {}), by_patch.get(file, {})))}
    if not found:
        return []
    document = tomlkit.parse(path.read_text(encoding="utf-8"))
    applied = []
    for file, moves in found.items():
        table = document[file]
        texts = {old: table.pop(old) for old in moves}
        for old, new in moves.items():
            table[new] = texts[old]
            applied.append((file, old, new))
    write_atomic(path, tomlkit.dumps(document))
    return applied
