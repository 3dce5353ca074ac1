"""Reasons that follow their statement when an edit of the patch renumbers it.

A statement mutant's id counts the statements its hunk adds (``mod.py:h1.s65``),
so code added above a survivor renumbers it (``h1.s90``): its reason in
mutation/reasons.toml would name a statement it was not written for, and
``--check`` would ask for the same reason twice over (remove it here, add it
there). When a run records a patch's results, each reason whose id no longer
names the survivor it was written for follows the survivor of the same path,
kind and text, where those pair up one to one in order; nothing else moves.

The moves are part of the patch's record in results.json ("reasons_moved": old
id -> the new id and the reason's text) and are applied to reasons.toml after
results.json is written: a kill between the two writes leaves them recorded,
``--check`` names them, and the next ``forkbuild mutate`` applies them (it runs
no mutant while results are current). A recorded move is pending only while
its old id still holds that very text, so an applied one never runs again,
whatever reasons.toml says later.
"""

from __future__ import annotations

from pathlib import Path

from forkbuild.fsutil import write_atomic
from forkbuild.mutate.results import REASONS_FILE, SURVIVED, load_reasons

MOVED = "reasons_moved"


def _identity(mutant: dict) -> tuple[str, str, str]:
    return mutant["path"], mutant["kind"], mutant["summary"]


def follow(previous: list[dict], current: list[dict], reasons: dict[str, str]) -> dict[str, str]:
    """old id -> new id for each reason of `previous`'s survivors (reasons: one
    patch's table) whose statement survives in `current` under another id."""
    current_by_id = {mutant["id"]: mutant for mutant in current}

    def still_fits(mutant: dict) -> bool:
        now = current_by_id.get(mutant["id"])
        return now is not None and now["status"] == SURVIVED and _identity(now) == _identity(mutant)

    reasoned = [mutant for mutant in previous if mutant["status"] == SURVIVED and mutant["id"] in reasons]
    leaving = [mutant for mutant in reasoned if not still_fits(mutant)]
    leaving_ids = {mutant["id"] for mutant in leaving}
    # A survivor is open to a moved reason when it has none, or its own is moving away.
    open_now = [mutant for mutant in current
                if mutant["status"] == SURVIVED and (mutant["id"] not in reasons or mutant["id"] in leaving_ids)]
    olds: dict[tuple, list[str]] = {}
    news: dict[tuple, list[str]] = {}
    for mutant in leaving:
        olds.setdefault(_identity(mutant), []).append(mutant["id"])
    for mutant in open_now:
        news.setdefault(_identity(mutant), []).append(mutant["id"])
    moves: dict[str, str] = {}
    for identity, old_ids in olds.items():
        new_ids = news.get(identity, [])
        # Only a one-to-one pairing is sure (three `try:` that became two: which went?).
        if len(new_ids) == len(old_ids):
            moves.update((old, new) for old, new in zip(old_ids, new_ids, strict=True) if old != new)
    return moves


def recorded_form(moved: dict[str, str], reasons: dict[str, str]) -> dict[str, dict[str, str]]:
    """follow()'s moves as a results.json record keeps them: with each reason's text."""
    return {old: {"id": new, "reason": reasons[old]} for old, new in moved.items()}


def pending(recorded_moves: dict[str, dict[str, str]], table: dict[str, str]) -> dict[str, str]:
    """old id -> new id of the recorded moves not yet applied to one patch's reasons
    `table`: the old id still holds the reason moved, and the new id has none, or
    only one that moves away itself."""
    result = {old: move["id"] for old, move in recorded_moves.items() if table.get(old) == move["reason"]}
    while blocked := {old for old, new in result.items() if new in table and new not in result}:
        for old in blocked:
            del result[old]
    return result


def apply(root: Path, recorded: dict) -> list[tuple[str, str, str]]:
    """Rename the reasons of every pending move of one variant's records in
    mutation/reasons.toml (comments and the other lines kept), in one atomic
    write; (patch, old id, new id) of each."""
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
