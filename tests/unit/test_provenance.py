"""DEP-3 provenance: every patch says where it was sent upstream (`Forwarded:`); `check` refuses a
patch without it, naming the line to add; `new` writes it; an import adds `Forwarded: no` where the
source says nothing; a rebase proposes as upstreamed a patch whose `Applied-Upstream:` release is at
or below the target, before applying it."""

from __future__ import annotations

import json

from fixtures import SeriesFixture
from forkbuild.errors import RebaseStopped
from forkbuild.new_feature import NewFeature, commit_template
from rebase_fixtures import LADDER_CHANGES, NEW_VERSION, rebase_args, release


def test_check_refuses_a_patch_without_forwarded(series_fx: SeriesFixture, capsys) -> None:
    fx = series_fx
    patch = fx.patches_dir / "beta-limit.patch"
    patch.write_text(patch.read_text().replace("Forwarded: no\n", ""))
    assert fx.cli("check") != 0
    err = capsys.readouterr().err
    assert "patches/beta-limit.patch: has no `Forwarded:` line: add one beside its `Feature:` line (`Forwarded: no`" in err
    patch.write_text(patch.read_text().replace("Guard: DSV41_BETA\n", "Guard: DSV41_BETA\nForwarded: maybe\n"))
    assert fx.cli("check") != 0
    assert "`Forwarded: maybe` is not `no`, `not-needed`, `yes` or a URL" in capsys.readouterr().err
    patch.write_text(patch.read_text().replace("Forwarded: maybe\n", "Forwarded: https://github.com/sgl-project/sglang/pull/1\n"))
    assert fx.cli("check") == 0


def test_new_writes_forwarded() -> None:
    template = commit_template(NewFeature(name="gamma", description="", guards=(), variants=(), requires=(), patch="gamma.patch"))
    assert "\nForwarded: no\n" in template


def test_an_applied_upstream_patch_is_proposed_as_upstreamed(git_series_fx: SeriesFixture) -> None:
    fx = git_series_fx
    patch = fx.patches_dir / "beta-limit.patch"
    patch.write_text(patch.read_text().replace("Forwarded: no\n", f"Forwarded: no\nApplied-Upstream: {NEW_VERSION}\n"))
    assert fx.cli(*rebase_args(release(fx, LADDER_CHANGES))) == RebaseStopped.return_code  # the review
    draft = json.loads((fx.root / ".forkbuild-work/rebase-journal/report.json").read_text())
    beta = next(patch for patch in draft["patches"] if patch["file"] == "beta-limit.patch")
    assert beta["outcome"] == "upstreamed" and beta["detail"] == f"Applied-Upstream: {NEW_VERSION}, at or below {NEW_VERSION}"
    assert beta["proposal"] == "drop"
