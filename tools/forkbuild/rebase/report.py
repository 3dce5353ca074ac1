"""The rebase report for review: per patch its outcome, files, evidence and a
`git range-diff` of old vs new commit (paired by patch file, not by git's guess),
written as markdown and JSON under build/rebase/<old>-to-<new>.{md,json}."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from forkbuild.io import statefile
from forkbuild.io.fsutil import write_atomic
from forkbuild.io.git import Git
from forkbuild.rebase.journal import PatchState, RebaseState
from forkbuild.rebase.porter import HunkPort
from forkbuild.worktree.engine import Outcome

LABELS: dict[str | None, str] = {None: "not replayed", Outcome.RESOLVED: "resolved by hand",
                                 Outcome.EMPTIED: "emptied by resolution"}


def label(outcome: str | None) -> str:
    """How the report names an outcome (the engine's words: forkbuild.worktree.engine.Outcome)."""
    return LABELS.get(outcome, str(outcome))


PROPOSAL_NOTES = {"drop": " (proposed drop)", "dropped": " (dropped from the series)"}
DROP_OUTCOMES = (Outcome.UPSTREAMED, Outcome.EMPTIED, Outcome.MOOT)


def document(repo: Git, state: RebaseState, *, check: dict | None, final: bool) -> dict:
    patches = []
    for patch in state.patches:
        old, new = patch.old_commit, patch.commit
        entry = dataclasses.asdict(patch)
        entry.update(
            new_commit=entry.pop("commit"), evidence_text=[item.describe() for item in patch.evidence],
            # Proposed while the review waits; dropped once the user said yes (the final report).
            proposal=("dropped" if final else "drop") if patch.outcome in DROP_OUTCOMES else None,
            files=[path for _, path in repo.changed_files(f"{new or old}^", new or old)] if new or old else [],
            # A creation factor of 100 pairs the two commits however much they differ: they are one patch.
            range_diff=repo.range_diff(f"{old}^..{old}", f"{new}^..{new}", creation_factor=100) if old and new else "")
        patches.append(entry)
    counts = Counter(patch["outcome"] for patch in patches)
    target = dataclasses.asdict(state.target)
    return {
        "schema": 1,
        "final": final,
        "from": {"version": state.old.version, "base": state.old_base},
        "to": {"version": state.target.version, "base": state.new_base, "source": state.target.source,
               "wheels": target["wheels"], "git": target["git"]},
        "summary": {outcome.value: counts.get(outcome.value, 0) for outcome in Outcome},
        "auto_applied": sum(counts.get(outcome.value, 0) for outcome in Outcome if outcome.automatic),
        "check": check,
        "timings": dict(state.timings),
        "patches": patches,
        "unported": list(state.unported),
    }


def markdown(report: dict) -> str:
    old, new = report["from"]["version"], report["to"]["version"]
    counts = ", ".join(f"{label(key)}: {value}" for key, value in report["summary"].items() if value)
    lines = [f"# Rebase {old} -> {new}{'' if report['final'] else ' (draft: waiting for review)'}", "",
             f"Upstream base {report['from']['base'][:12]} -> {report['to']['base'][:12]} ({report['to']['source']}). "
             f"Auto-applied: {report['auto_applied']} of {len(report['patches'])}.", f"Outcomes: {counts}.", "",
             "| # | patch | feature | outcome | files | detail |", "|---|---|---|---|---|---|"]
    for number, patch in enumerate(report["patches"], start=1):
        outcome = label(patch["outcome"]) + PROPOSAL_NOTES.get(patch["proposal"], "")
        files = "<br>".join(f"`{path}`" for path in patch["files"])
        lines.append(f"| {number} | `{patch['file']}` | {patch['feature']} | {outcome} | {files} | {patch['detail']} |")
    lines.append("")
    lines += _per_patch(report, "evidence", "## Evidence for dropped patches", [],
                        lambda patch: (f": {patch['detail']}", patch["evidence_text"]))
    lines += _per_patch(report, "port", "## Ported hunk by hunk", [
        "What git's rungs stopped on, placed by the porter (rebase/porter.py): each hunk's rung, its "
        "class/function and the checks it passed, or why it was refused.", ""],
        lambda patch: (":", [HunkPort(**hunk).describe() for hunk in patch["port"]]))
    lost = [patch for patch in report["patches"] if patch["lost"]]
    if lost:
        lines += ["## Lines the rebased series lacks", "", "Added by the patch on the old release, still there at the "
                  "old series' end, and nowhere in the file (or its renamed successor) after the rebase.", ""]
        lines += [f"- `{patch['file']}`: `{line}`" for patch in lost for line in patch["lost"]] + [""]
    if report["unported"]:
        lines += ["## Features left without a patch", "", "Their patch files are set aside under "
                  ".forkbuild-work/dropped/ (docs/rebase.md).", "", *(f"- {item}" for item in report["unported"]), ""]
    if report["check"] is not None:
        status = "passed" if report["check"]["ok"] else "FAILED"
        lines += [f"## forkbuild check: {status}", "", "```", report["check"]["detail"].rstrip(), "```", ""]
    collided = [patch for patch in report["patches"] if patch["collided"]]
    if collided:
        lines += ["## Stopped patches: what collided", ""]
        for patch in collided:
            lines += [f"- `{patch['file']}` ({label(patch['outcome'])}): conflicted "
                      + ", ".join(f"`{path}`" for path in patch["conflicts"]) + "; upstream's change there:",
                      "", "```diff", patch["collided"].rstrip(), "```", ""]
    lines += ["## Range-diff per patch (old vs new)", ""]
    for patch in report["patches"]:
        body = patch["range_diff"] or "(no new commit: the patch is not in the new series)"
        lines += [f"### `{patch['file']}`: {label(patch['outcome'])}", "", "```diff", body.rstrip(), "```", ""]
    return "\n".join(lines)


def _per_patch(report: dict, key: str, title: str, intro: list[str],
               items: Callable[[dict], tuple[str, list[str]]]) -> list[str]:
    """A section listing, for each patch with `key`, its line and its items (`items(patch)`: the
    line's tail and the items); none when no patch has any."""
    lines = []
    for patch in (patch for patch in report["patches"] if patch[key]):
        tail, listed = items(patch)
        lines += [f"- `{patch['file']}` ({label(patch['outcome'])}){tail}", *(f"  - {item}" for item in listed)]
    return [title, "", *intro, *lines, ""] if lines else []


def write(repo: Git, state: RebaseState, md_path: Path, *, check: dict | None, final: bool) -> None:
    """The report as markdown at `md_path` and as JSON beside it."""
    report = document(repo, state, check=check, final=final)
    md_path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(md_path.with_suffix(".json"), json.dumps(report, indent=2, sort_keys=True) + "\n")
    write_atomic(md_path, markdown(report) + "\n")


def finished(directory: Path, version: str) -> list[tuple[str, tuple[PatchState, ...]]]:
    """The final reports `write` left in `directory` of rebases onto `version`, newest first: the
    version each came from and its patches as the rebase left them. A file that does not read as
    one is passed over."""
    found = []
    for path in sorted(directory.glob(f"*-to-{version}.json"), key=lambda path: path.stat().st_mtime, reverse=True):
        try:
            data = json.loads(path.read_text())
            if data["final"] and data["to"]["version"] == version:
                found.append((str(data["from"]["version"]), tuple(
                    statefile.decode(PatchState, {**entry, "commit": entry["new_commit"] or ""})
                    for entry in data["patches"])))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return found
