"""`forkbuild release`, release day in one command: the newest upstream release (or a named one),
the rebase with the porter, then proof on the new release (every variant's wheel built, every
variant's test-patch run) and one report, `build/release/<old>-to-<new>.md` (a pull-request body)
and `.json`.

--non-interactive accepts verified ports and upstreamed proposals; at the first stop a person must
settle it ends with the report so far (series.toml and patches/ untouched, the work tree kept);
`forkbuild rebase --continue` (then `release` again) goes on from there.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import Version

from forkbuild.commands import add_command
from forkbuild.context import Context
from forkbuild.errors import BuildError, ForkbuildError, RebaseStopped
from forkbuild.io.fsutil import write_atomic
from forkbuild.rebase.journal import PatchState, Phase, RebaseState
from forkbuild.rebase.phases import Rebase
from forkbuild.rebase.report import finished, label
from forkbuild.rebase.target import release_version, resolve
from forkbuild.series.combination import of_variant
from forkbuild.series.patchfile import read_patch
from forkbuild.testpatch.runner import Options, run_variant
from forkbuild.upstream import pypi
from forkbuild.wheel.builder import WheelRequest, build_wheels
from forkbuild.worktree.engine import Outcome


def add_parser(subparsers) -> None:
    parser = add_command(
        subparsers, "release", help="move to a new upstream release and prove it: rebase, build, test, one report",
        description="latest: the newest release on the index above the pin (none: says so, exits 0); VERSION: that one. "
                    "Rebases (the porter included), then builds every variant's wheel and runs its test-patch on the "
                    "new release, and writes build/release/<old>-to-<new>.md (a pull-request body) and .json. A stopped "
                    "rebase is settled with `forkbuild rebase --continue/--skip`; `release` again goes on from there.",
        examples=["forkbuild release latest", "forkbuild release 0.5.24 --non-interactive", "nox -s release -- latest"])
    parser.add_argument("target", metavar="latest|VERSION", help="the release to move to")
    parser.add_argument("--non-interactive", action="store_true",
                        help="accept the porter's verified ports and upstreamed proposals; at the first stop a person "
                             "must settle, end with the report so far (the series untouched, the work tree kept)")
    parser.add_argument("--python", type=Path, default=Path(sys.executable),
                        help="interpreter of the test venv test-patch runs (default: the one running forkbuild)")
    parser.add_argument("--from-tree", action="store_true",
                        help="test-patch the applied tree on PYTHONPATH instead of installing each wheel")
    parser.set_defaults(run=run)


def run(args, context) -> int:
    upstream = context.series.upstream
    version = args.target
    journal = Rebase(context).journal
    if version == "latest" and journal.exists():  # the release a stopped rebase is moving to, not the index's newest
        version = journal.load().target.version
    elif version == "latest":
        if upstream.source != "wheel":
            raise BuildError("`release latest` follows the index: this series builds from git (upstream.source = 'git')",
                             hint="name the commit: forkbuild rebase --onto COMMIT --version X")
        newest = newest_release(upstream.name, upstream.version)
        if newest is None:
            context.reporter.info(f"{upstream.name} {upstream.version} is the newest release the index lists: nothing to "
                                  f"do (`forkbuild release {upstream.version}` proves it again)")
            return 0
        version = newest
    version = release_version(version)
    if version != upstream.version:
        context.reporter.info(f"release: {upstream.name} {upstream.version} -> {version}")
    report = release(context, version=version, non_interactive=args.non_interactive, python=args.python,
                     from_tree=args.from_tree)
    for name in report["ported_failing"]:
        context.reporter.warn(f"{name}: ported, and its feature's tests fail on {version}")
    if not report["ok"]:
        context.reporter.warn(f"the new release fails test-patch: {sum(len(p['failed']) for p in report['proof'])} "
                              "failed check(s); the report names them")
        return 1
    return 0


SCHEMA = 1


def newest_release(name: str, pinned: str) -> str | None:
    """The newest final release of `name` the index lists a wheel of, above `pinned`; None: none is."""
    found = set()
    for entry in pypi.project_files(name):
        try:
            _, version, _, _ = parse_wheel_filename(entry.filename)
        except InvalidWheelFilename:
            continue
        if not version.is_prerelease and not version.is_devrelease and version > Version(pinned):
            found.add(version)
    return str(max(found)) if found else None


@dataclass(frozen=True, kw_only=True)
class Proof:
    """One variant on the new release: its wheels, and its test-patch rows that failed."""

    variant: str
    wheels: tuple[str, ...]
    failed: tuple[dict, ...]
    report: str


def release(context: Context, *, version: str, non_interactive: bool, python: Path, from_tree: bool) -> dict:
    """Rebase onto `version` (or go on with a stopped one), prove it, write the report; its document."""
    old = context.series.upstream.version
    rebase = Rebase(context)
    state: RebaseState | None
    try:
        if rebase.journal.exists():
            if (moving_to := rebase.journal.load().target.version) != version:
                raise ForkbuildError(f"a rebase onto {moving_to} is in progress, not onto {version}",
                                     hint=f"`forkbuild release {moving_to}` goes on with it; `forkbuild rebase --abort` "
                                          "puts everything back")
            state = rebase.resume("continue")
        elif version == old:
            state = None  # the proof alone is owed
        else:
            target = resolve(context.series.upstream, onto=version)
            state = rebase.start(target=target, tree=None, accept_drops=non_interactive,
                                 accept_ported=non_interactive)
    except RebaseStopped:
        write(context, rebase.journal.load(), old=old, new=version, proofs=None)
        raise
    fresh = Context(series_dir=context.series_dir, cache_dir=context.cache_dir, reporter=context.reporter)
    if state is None:  # on `version` already: the rebase was settled by hand, or the proof was killed
        rebased = _rebased_to(fresh, version)
        old, patches = rebased or (old, tuple(PatchState(file=entry.file, feature=entry.feature, commit="pinned")
                                             for entry in fresh.series.patches))
        context.reporter.info(f"the series is on {fresh.series.upstream.name} {version} already"
                              + (f" (rebased from {old})" if rebased else "") + ": proving it")
        state = RebaseState(id="", phase=Phase.DONE, step="", worktree=fresh.series_dir, accept_drops=False,
                            old=fresh.series.upstream, target=fresh.series.upstream, patches=patches)
    proofs = [_prove(fresh, name, python=python, from_tree=from_tree) for name in fresh.series.variants]
    return write(fresh, state, old=old, new=version, proofs=proofs)


def _rebased_to(context: Context, version: str) -> tuple[str, tuple[PatchState, ...]] | None:
    """The finished rebase that brought the series to `version` (its report), while the series still
    holds the patches it kept: (the version it came from, what became of each patch)."""
    series = [entry.file for entry in context.series.patches]
    return next(((old, patches) for old, patches in finished(context.build_dir / "rebase", version)
                 if [patch.file for patch in patches if patch.commit] == series), None)


def _prove(context: Context, name: str, *, python: Path, from_tree: bool) -> Proof:
    combination = of_variant(context.series, name)
    with context.reporter.step(f"Proving {name} on the new release: its wheels, then test-patch"):
        wheels = build_wheels(context=context, request=WheelRequest(variant=combination, out_dir=context.dist_dir))
        outcome = run_variant(context=context, options=Options(variant=combination, python=python, from_tree=from_tree))
    return Proof(variant=name, wheels=tuple(wheel.path.name for wheel in wheels), failed=tuple(outcome.failed),
                 report=str(outcome.report))


def _provenance(path: Path) -> dict[str, str]:
    if not path.is_file():
        return {}
    trailers = read_patch(path).trailer_map()
    return {key: values[-1] for key, values in trailers.items() if key in ("forwarded", "applied-upstream")}


def document(context: Context, state: RebaseState, *, old: str, new: str, proofs: list[Proof] | None) -> dict:
    patches = []
    for patch in state.patches:
        failing = [f"{proof.variant}: {row['check']}: {row['reason']}" for proof in proofs or ()
                   for row in proof.failed if row.get("feature") == patch.feature]
        tests = "not run" if proofs is None else ("failed" if failing else "passed")
        if not patch.commit or (patch.outcome is None and patch.commit != "pinned"):
            tests = "not in the series" if proofs is not None else tests
        # The porter's rungs where its placement is what went in (a patch left out after a partial port: its outcome).
        rungs = sorted({hunk.rung for hunk in patch.port if hunk.status == "ported"}) \
            if patch.outcome is Outcome.PORTED else []
        patches.append({
            "file": patch.file, "feature": patch.feature, "detail": patch.detail,
            "outcome": label(patch.outcome) if patch.outcome or patch.commit != "pinned" else "on the release",
            "rung": ", ".join(rungs) or (label(patch.outcome) if patch.outcome else ""),
            "hunks": [hunk.describe() for hunk in patch.port],
            "provenance": _provenance(context.series.patches_dir / patch.file), "tests": tests, "failing": failing})
    ported_failing = [patch["file"] for patch in patches if patch["outcome"] == "ported" and patch["failing"]]
    return {
        "schema": SCHEMA, "from": old, "to": new, "finished": proofs is not None,
        "phase": str(state.phase), "patches": patches,
        "proof": [{"variant": proof.variant, "wheels": list(proof.wheels), "failed": list(proof.failed),
                   "report": proof.report} for proof in proofs or ()],
        "ok": proofs is not None and not any(proof.failed for proof in proofs),
        "ported_failing": ported_failing,
    }


def markdown(report: dict) -> str:
    status = ("proved: every variant built and tested" if report["ok"] else
              "FAILED: a variant's tests fail on the new release" if report["finished"] else
              "stopped: a patch needs a person (`forkbuild rebase --continue` after settling it, then release again)")
    lines = [f"# sglang {report['from']} -> {report['to']}", "", f"Status: {status}.", "",
             "| # | patch | feature | outcome | rung | provenance | tests |", "|---|---|---|---|---|---|---|"]
    for number, patch in enumerate(report["patches"], start=1):
        provenance = ", ".join(f"{key}: {value}" for key, value in patch["provenance"].items()) or "-"
        lines.append(f"| {number} | `{patch['file']}` | {patch['feature']} | {patch['outcome']} | {patch['rung']} "
                     f"| {provenance} | {patch['tests']} |")
    lines.append("")
    for patch in report["patches"]:
        if patch["hunks"] or patch["failing"]:
            lines += [f"### `{patch['file']}`", "", *(f"- {hunk}" for hunk in patch["hunks"]),
                      *(f"- test failing: {failure}" for failure in patch["failing"]), ""]
    if report["proof"]:
        lines += ["## Proof on the new release", "", "| variant | wheels | failed checks |", "|---|---|---|"]
        lines += [f"| {proof['variant']} | {len(proof['wheels'])} | {len(proof['failed'])} |" for proof in report["proof"]]
        lines.append("")
    return "\n".join(lines)


def write(context: Context, state: RebaseState, *, old: str, new: str, proofs: list[Proof] | None) -> dict:
    report = document(context, state, old=old, new=new, proofs=proofs)
    path = context.build_dir / "release" / f"{old}-to-{new}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path.with_suffix(".json"), json.dumps(report, indent=2, sort_keys=True) + "\n")
    write_atomic(path, markdown(report) + "\n")
    context.reporter.info(f"release report: {path}")
    return report
