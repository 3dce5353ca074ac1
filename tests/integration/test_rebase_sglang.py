"""A series written against the real sglang 0.5.22 wheel, rebased to 0.5.23
(wheels found and sha256-pinned through the index, downloaded by the cache):
each patch's outcome, the drop proposal for the patch 0.5.23 already has, the
moved pin and a series that `forkbuild check` accepts."""

from __future__ import annotations

import json
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

from forkbuild.upstream.cache import UpstreamCache
from forkbuild.cli import main as cli_main
from forkbuild.errors import RebaseStopped
from forkbuild.io.git import Git
from forkbuild.series.config import Upstream, WheelPin, load_series

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
OLD, NEW = "0.5.22", "0.5.23"
ENVIRON = "python/sglang/srt/environ.py"
SCHEDULE_BATCH = "python/sglang/srt/managers/schedule_batch.py"
# The 0.5.22 release wheels as PyPI lists them (the pins a 0.5.22 series carries).
OLD_WHEELS = (
    WheelPin(python_tag="cp311", filename=f"sglang-{OLD}-cp311-cp311-manylinux_2_34_x86_64.whl",
             sha256="cc9a0f15bd8f877a0584fdb7a1702240177a1f1cc8d17c978715161717b9037b"),
    WheelPin(python_tag="cp312", filename=f"sglang-{OLD}-cp312-cp312-manylinux_2_34_x86_64.whl",
             sha256="3505e3744366201296f94d244b3e7d3b0bb91b69726dc15e994070adb338ea2f"),
)


@dataclass(frozen=True)
class FixturePatch:
    file: str
    feature: str
    subject: str
    edits: tuple[tuple[str, str, str], ...]  # (path, old text, new text) on 0.5.22
    expected: str  # outcome onto 0.5.23


PATCHES = (
    # Above the first line 0.5.23 changed in environ.py: same place, same context.
    FixturePatch("envs-exact.patch", "envs", "environ: a fork switch next to the ngram lookup",
                 ((ENVIRON, "    SGLANG_USE_ATTN_TP_NGRAM = EnvBool(False)\n",
                   "    SGLANG_USE_ATTN_TP_NGRAM = EnvBool(False)\n    DSV41_FIXTURE_NGRAM = EnvBool(False)\n"),),
                 "exact"),
    # 0.5.23 inserted ~90 lines above, none near: the same context 93 lines further down.
    FixturePatch("envs-offset.patch", "envs", "environ: a fork switch next to the aiter rmsnorm pad",
                 ((ENVIRON, "    SGLANG_AITER_FUSE_RMSNORM_PAD = EnvBool(False)\n",
                   "    SGLANG_AITER_FUSE_RMSNORM_PAD = EnvBool(False)\n    DSV41_FIXTURE_PAD = EnvBool(False)\n"),),
                 "offset"),
    # 0.5.23 rewrote the comment and default two lines below: the context differs, the change does not collide.
    FixturePatch("envs-sim-len.patch", "envs", "environ: simulated acceptance length as a float literal",
                 ((ENVIRON, "    SGLANG_SIMULATE_ACC_LEN = EnvFloat(-1)\n", "    SGLANG_SIMULATE_ACC_LEN = EnvFloat(-1.0)\n"),),
                 "3-way"),
    FixturePatch("sched-retract-note.patch", "sched", "schedule_batch: say why retraction drops output ids",
                 ((SCHEDULE_BATCH, '            self.output_ids = array("q")\n',
                   '            # Retracted with input embeds: the ids would mis-size the KV indexes on re-prefill.\n'
                   '            self.output_ids = array("q")\n'),),
                 "offset"),
    # Exactly what 0.5.23 changed: already upstream.
    FixturePatch("war-read-done.patch", "war", "environ: publish prefill read-done by default",
                 ((ENVIRON, "    SGLANG_ENABLE_PREFILL_WAR_READ_DONE = EnvBool(False)\n",
                   "    SGLANG_ENABLE_PREFILL_WAR_READ_DONE = EnvBool(True)\n"),),
                 "upstreamed"),
)

SERIES_HEAD = f'''\
# A series written against sglang {OLD}, to be rebased onto {NEW}.
[series]
name = "rebase-fixture"
default_variant = "all"

[upstream]
name = "sglang"
version = "{OLD}"
package_root = "python"
# Release wheels, sha256-pinned.
source = "wheel"

[upstream.git]
url = "https://github.com/sgl-project/sglang.git"
ref = "v{OLD}"
commit = ""
''' + "".join(f'''
[[upstream.wheels]]
python_tag = "{pin.python_tag}"
filename = "{pin.filename}"
sha256 = "{pin.sha256}"
''' for pin in OLD_WHEELS) + '''
[features.envs]
description = "fork switches in the envs registry"

[features.sched]
description = "a scheduler note"

[features.war]
description = "prefill read-done on by default"
'''

SERIES_TAIL = '''
[variants.all]
description = "every patch"
features = ["envs", "sched", "war"]

[variants.envs-only]
description = "leaves the scheduler note out"
features = ["envs", "war"]

[variants.stock]
description = "no patches"
features = []
'''


def shared_cache(tmp: Path) -> Path:
    """A private cache whose wheels/ is the repository's: each wheel is downloaded once, ever."""
    cache = tmp / "cache"
    shared = REPO / ".cache" / "forkbuild" / "wheels"
    shared.mkdir(parents=True, exist_ok=True)
    cache.mkdir(parents=True)
    (cache / "wheels").symlink_to(shared)
    return cache


def write_series(root: Path, cache: Path) -> None:
    upstream = Upstream(name="sglang", version=OLD, package_root="python", source="wheel", git=None, wheels=OLD_WHEELS)
    cache_git = UpstreamCache(cache).git()
    base = UpstreamCache(cache).ensure(upstream)
    tree = cache.parent / "authoring"
    work = cache_git.add_worktree(tree, base)
    env = {"GIT_AUTHOR_NAME": "Fixture Author", "GIT_AUTHOR_EMAIL": "author@example.com",
           "GIT_AUTHOR_DATE": "1700000000 +0000", "GIT_COMMITTER_DATE": "1700000000 +0000"}
    (root / "patches").mkdir(parents=True)
    entries = []
    for patch in PATCHES:
        for path, old, new in patch.edits:
            target = tree / path
            text = target.read_text()
            assert text.count(old) == 1, (path, old)
            target.write_text(text.replace(old, new))
        work.run("commit", "--quiet", "-a", "-m", f"{patch.subject}\n\nFixture patch.\n\nFeature: {patch.feature}\nForwarded: no\n", env=env)
        (root / "patches" / patch.file).write_text(work.format_patch(work.head()))
        entries.append(f'\n[[patches]]\nfile = "{patch.file}"\nfeature = "{patch.feature}"\n')
    cache_git.remove_worktree(tree)
    (root / "series.toml").write_text(SERIES_HEAD + "".join(entries) + SERIES_TAIL)


@pytest.fixture(scope="module")
def rebased(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("rebase-sglang")
    root, cache = tmp / "series", shared_cache(tmp)
    write_series(root, cache)
    os.environ.pop("FORKBUILD_CHAOS_KILL_AT", None)
    cli = ["-C", str(root), "--cache", str(cache), "rebase"]
    first = cli_main([*cli, "--onto", NEW])
    draft = json.loads((root / ".forkbuild-work" / "rebase-journal" / "report.json").read_text())
    second = cli_main([*cli, "--continue"])
    report = json.loads((root / "build" / "rebase" / f"{OLD}-to-{NEW}.json").read_text())
    return {"root": root, "cache": cache, "first": first, "second": second, "draft": draft, "report": report}


def test_stops_for_review_then_finishes(rebased: dict) -> None:
    assert rebased["first"] == RebaseStopped.return_code
    assert rebased["second"] == 0
    proposed = [p["file"] for p in rebased["draft"]["patches"] if p["proposal"] == "drop"]
    assert proposed == ["war-read-done.patch"]


def test_per_patch_outcomes(rebased: dict) -> None:
    outcomes = {patch["file"]: patch["outcome"] for patch in rebased["report"]["patches"]}
    assert outcomes == {patch.file: patch.expected for patch in PATCHES}
    assert rebased["report"]["auto_applied"] == 4


def test_upstreamed_evidence_names_the_upstream_line(rebased: dict) -> None:
    war = next(p for p in rebased["report"]["patches"] if p["file"] == "war-read-done.patch")
    [evidence] = war["evidence"]
    assert evidence["file"] == ENVIRON and evidence["found"]
    line = evidence["start"]
    tag = load_series(rebased["root"] / "series.toml").upstream.tag  # upstream/<NEW>+<pin>: the rebased pin
    lines = Git(rebased["cache"] / "upstream.git").out("show", f"{tag}:{ENVIRON}").splitlines()
    assert lines[line - 1].strip() == "SGLANG_ENABLE_PREFILL_WAR_READ_DONE = EnvBool(True)"


def test_pin_moved_with_index_sha256_and_comments_kept(rebased: dict) -> None:
    text = (rebased["root"] / "series.toml").read_text()
    upstream = tomllib.loads(text)["upstream"]
    assert upstream["version"] == NEW and upstream["git"]["ref"] == f"v{NEW}"
    pins = {pin["python_tag"]: pin for pin in upstream["wheels"]}
    assert pins["cp311"]["filename"] == f"sglang-{NEW}-cp311-cp311-manylinux_2_34_x86_64.whl"
    # The same digests the lead pinned by hand in the project's series.toml.
    assert pins["cp311"]["sha256"] == "00b3cd5b265ac76c64185fbb6b95424f324ddd9f428d0306b77bc9db9d859937"
    assert pins["cp312"]["sha256"] == "8d257a319395b322bb1be327d05e5528859358153c8563b04c0a4a3c8af164b6"
    assert "# Release wheels, sha256-pinned." in text
    assert [entry["file"] for entry in tomllib.loads(text)["patches"]] == [p.file for p in PATCHES[:-1]]
    assert not (rebased["root"] / "patches" / "war-read-done.patch").exists()


def test_rebased_series_passes_check(rebased: dict) -> None:
    assert rebased["report"]["check"]["ok"], rebased["report"]["check"]["detail"]
    three_way = (rebased["root"] / "patches" / "envs-sim-len.patch").read_text()
    assert "# DSpark opt-in: with SGLANG_SIMULATE_ACC_LEN set" in three_way  # re-exported against 0.5.23


def test_report_markdown_has_range_diffs(rebased: dict) -> None:
    md = (rebased["root"] / "build" / "rebase" / f"{OLD}-to-{NEW}.md").read_text()
    assert f"# Rebase {OLD} -> {NEW}" in md
    assert "### `envs-sim-len.patch`: 3-way" in md
    sim = next(p for p in rebased["report"]["patches"] if p["file"] == "envs-sim-len.patch")
    assert sim["range_diff"].startswith("1:  ") and " ! 1:  " in sim["range_diff"]
