"""The rebase report for review: per patch its outcome, files, evidence and a
`git range-diff` of old vs new commit (paired by patch file, not by git's guess),
written as markdown and JSON under build/rebase/<old>-to-<new>.{md,json}."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from pathlib import Path

from forkbuild.fsutil import write_atomic
from forkbuild.git import Git
from forkbuild.rebase.state import RebaseState
from forkbuild.worktree.engine import Outcome

LABELS: dict[str | None, str] = {None: "not replayed", Outcome.RESOLVED: "resolved by hand",
                                 Outcome.EMPTIED: "emptied by resolution"}


def label(outcome: str | None) -> str:
    """How the report names an outcome (the engine's words: forkbuild.worktree.engine.Outcome)."""
    return LABELS.get(outcome, str(outcome))


PROPOSAL_NOTES = {"drop": " (proposed drop)", "dropped": " (dropped from the series)"}


def range_diff(repo: Git, *, old_commit: str, new_commit: str) -> str:
    """Old vs new version of one patch. A creation factor of 100 makes git pair
    the two commits however much they differ: they are the same patch by identity."""
    if not old_commit or not new_commit:
        return ""
    return repo.range_diff(f"{old_commit}^..{old_commit}", f"{new_commit}^..{new_commit}", creation_factor=100)


def files_of(repo: Git, commit: str) -> list[str]:
    return [path for _, path in repo.changed_files(f"{commit}^", commit)] if commit else []


def paths(build_dir: Path, *, old: str, new: str) -> tuple[Path, Path]:
    # Not with_suffix: versions hold dots ("0.5.22-to-0.5.23").
    directory = build_dir / "rebase"
    return directory / f"{old}-to-{new}.md", directory / f"{old}-to-{new}.json"


def document(state: RebaseState, *, patches: list[dict], check: dict | None, final: bool) -> dict:
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
    lines = [f"# Rebase {old} -> {new}{'' if report['final'] else ' (draft: waiting for review)'}", ""]
    lines.append(f"Upstream base {report['from']['base'][:12]} -> {report['to']['base'][:12]} "
                 f"({report['to']['source']}). Auto-applied: {report['auto_applied']} of {len(report['patches'])}.")
    counts = ", ".join(f"{label(key)}: {value}" for key, value in report["summary"].items() if value)
    lines += [f"Outcomes: {counts}.", ""]
    lines += ["| # | patch | feature | outcome | files | detail |", "|---|---|---|---|---|---|"]
    for number, patch in enumerate(report["patches"], start=1):
        outcome = label(patch["outcome"]) + PROPOSAL_NOTES.get(patch.get("proposal"), "")
        files = "<br>".join(f"`{path}`" for path in patch["files"])
        lines.append(f"| {number} | `{patch['file']}` | {patch['feature']} | {outcome} | {files} | {patch['detail']} |")
    lines.append("")
    evidence = [patch for patch in report["patches"] if patch["evidence"]]
    if evidence:
        lines += ["## Evidence for dropped patches", ""]
        for patch in evidence:
            lines.append(f"- `{patch['file']}` ({label(patch['outcome'])}): {patch['detail']}")
            lines += [f"  - {item}" for item in patch["evidence_text"]]
        lines.append("")
    if report["unported"]:
        lines += ["## Features left without a patch", "", "Their patch files are set aside under "
                  ".forkbuild-work/dropped/ (docs/rebase.md).", ""]
        lines += [f"- {item}" for item in report["unported"]]
        lines.append("")
    if report["check"] is not None:
        status = "passed" if report["check"]["ok"] else "FAILED"
        lines += [f"## forkbuild check: {status}", "", "```", report["check"]["detail"].rstrip(), "```", ""]
    collided = [patch for patch in report["patches"] if patch.get("collided")]
    if collided:
        lines += ["## Stopped patches: what collided", ""]
        for patch in collided:
            lines.append(f"- `{patch['file']}` ({label(patch['outcome'])}): conflicted "
                         + ", ".join(f"`{path}`" for path in patch.get("conflicts", [])) + "; upstream's change there:")
            lines += ["", "```diff", patch["collided"].rstrip(), "```", ""]
    lines += ["## Range-diff per patch (old vs new)", ""]
    for patch in report["patches"]:
        lines.append(f"### `{patch['file']}`: {label(patch['outcome'])}")
        body = patch["range_diff"] or "(no new commit: the patch is not in the new series)"
        lines += ["", "```diff", body.rstrip(), "```", ""]
    return "\n".join(lines)


def write(report: dict, *, md_path: Path, json_path: Path) -> None:
    md_path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(json_path, json.dumps(report, indent=2, sort_keys=True) + "\n")
    write_atomic(md_path, markdown(report) + "\n")
