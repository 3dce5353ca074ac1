"""The one reader of what git prints while applying or merging a patch: where
hunks landed (`git apply -v`), why it failed, which files conflict. apply,
check, repair and rebase all take their words from here."""

from __future__ import annotations

import re
from typing import NamedTuple

CHECKING = re.compile(r"^Checking patch (?P<path>.+)\.\.\.$")
OFFSET = re.compile(r"^Hunk #(?P<hunk>\d+) succeeded at (?P<line>\d+) \(offset (?P<delta>-?\d+) lines?\)\.$")
CONFLICT = re.compile(r"^CONFLICT \([^)]*\): .*?(?:in|of) (?P<path>\S+)")
# git's own reasons, most telling first: the first one found names the failure.
REASONS = (
    re.compile(r"^error: patch failed: .*$"),
    re.compile(r"^error: .*: (?:patch does not apply|does not exist in index|already exists in index)$"),
    re.compile(r"^error: repository lacks the necessary blob.*$"),
    re.compile(r"^error: sha1 information is lacking or useless.*$"),
    re.compile(r"^CONFLICT .*$"),
    re.compile(r"^(?:error|fatal): .*$"),
)
MISSING_BLOB = ("lacks the necessary blob", "lacks necessary blobs", "sha1 information is lacking", "invalid object")


class GitReport(NamedTuple):
    """What one git apply / merge run said."""

    offsets: tuple[str, ...] = ()  # "<path> hunk <n>: +3 lines"
    reason: str = ""  # the line saying why it failed ("" when it did not)
    conflicts: tuple[str, ...] = ()  # paths git reported as conflicting
    no_preimage: bool = False  # a 3-way merge by index lines was impossible: blobs missing


def read_report(output: str) -> GitReport:
    """Parse git apply -v / merge-tree / cherry-pick output (stdout and stderr together)."""
    lines = [line.rstrip() for line in output.splitlines()]
    offsets, current = [], ""
    for line in lines:
        if checking := CHECKING.match(line):
            current = checking["path"]
        elif moved := OFFSET.match(line):
            offsets.append(f"{current} hunk {moved['hunk']}: {int(moved['delta']):+d} lines")
    reason = next((line.removeprefix("error: ").strip() for pattern in REASONS for line in lines
                   if pattern.match(line)), "")
    return GitReport(offsets=tuple(offsets), reason=reason,
                     conflicts=tuple(dict.fromkeys(m["path"] for m in map(CONFLICT.match, lines) if m)),
                     no_preimage=any(marker in line for line in lines for marker in MISSING_BLOB))


def merge_tree_result(stdout: str) -> tuple[str, tuple[str, ...], str]:
    """`git merge-tree --write-tree --name-only --messages`: (tree, conflicted paths, messages)."""
    head, _, messages = stdout.partition("\n\n")
    lines = head.splitlines()
    return (lines[0].strip() if lines else ""), tuple(line for line in lines[1:] if line), messages
