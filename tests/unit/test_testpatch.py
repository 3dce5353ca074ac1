"""test-patch on a fixture upstream: a tiny "sglang" with a tiny envs registry,
two guarded features with patches and tests/patches-style tests run by the
repository's own tests/patches/conftest.py.

The harness's promise: removing one patch from a variant makes its feature's
guard-on test fail (and the structure checks say why)."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest

from fixtures import PatchSpec, commit_spec, make_upstream_repo
from forkbuild.cli import main as cli_main
from forkbuild.errors import UnsafePatchError

REPO = Path(__file__).resolve().parents[2]
ENVIRON = "python/sglang/srt/environ.py"

UPSTREAM = {
    "python/sglang/__init__.py": '"""A tiny stand-in for sglang."""\n',
    "python/sglang/srt/__init__.py": "",
    ENVIRON: textwrap.dedent('''\
        """The envs registry (stdlib only), shaped like sglang's."""

        import os


        class EnvField:
            def __init__(self, default):
                self.default = default

            def __set_name__(self, owner, name):
                self.name = name

            def get(self):
                value = os.getenv(self.name)
                return self.default if value is None else self.parse(value)


        class EnvInt(EnvField):
            def parse(self, value):
                return int(value)


        class Envs:
            SGLANG_WORKERS = EnvInt(1)


        envs = Envs()
        '''),
    "python/sglang/core.py": textwrap.dedent('''\
        """The code the features change."""

        from sglang.srt.environ import envs


        def scale(value):
            return value * 2


        def limit(value):
            return min(value, 100)
        '''),
}

GUARDS = PatchSpec(
    file="guards.patch", feature="guards", subject="environ: switch type and the generated guards' hook",
    body="Guards.",
    edits=((ENVIRON, "class Envs:\n", textwrap.dedent('''\
        class EnvSwitch(EnvField):
            def parse(self, value):
                if value.strip().lower() in ("1", "on", "true", "yes", "y"):
                    return True
                if value.strip().lower() in ("", "0", "off", "false", "no", "n"):
                    return False
                raise ValueError(f"{self.name}={value!r} is not a switch value")


        class EnvStrictInt(EnvInt):
            pass


        class Envs:
        ''')),
           (ENVIRON, "envs = Envs()\n", textwrap.dedent('''\
        def _declare_fork_guards():
            from sglang.srt.fork_guards import GUARDS

            kinds = {"switch": EnvSwitch, "int": EnvStrictInt}
            for env, kind, default, _feature in GUARDS:
                field = kinds[kind](None)
                field.__set_name__(Envs, env)
                field.default = field.parse(default)
                setattr(Envs, env, field)


        _declare_fork_guards()
        envs = Envs()
        '''))))
# The features' patches touch only the code they change: their guards are
# declared in series.toml and generated into sglang/srt/fork_guards.py.
ALPHA = PatchSpec(
    file="alpha.patch", feature="alpha", subject="core: scale by three", body="Alpha.", guards=("DSV41_ALPHA",),
    edits=(("python/sglang/core.py", "    return value * 2\n",
            "    if envs.DSV41_ALPHA.get():\n        return value * 3\n    return value * 2\n"),))
BETA = PatchSpec(
    file="beta.patch", feature="beta", subject="core: a configurable limit", body="Beta.", guards=("DSV41_BETA_LIMIT",),
    edits=(("python/sglang/core.py", "    return min(value, 100)\n",
            "    return min(value, envs.DSV41_BETA_LIMIT.get() or 100)\n"),))

SERIES_TOML = '''\
[series]
name = "fixture"
default_variant = "full"
guards_module = "sglang.srt.fork_guards"

[upstream]
name = "sglang"
version = "1.0"
package_root = "python"
source = "git"

[upstream.git]
url = "{repo}"
commit = "{commit}"

[features.guards]
description = "switch type and guard section"

[features.alpha]
description = "scale by three"
requires = ["guards"]
guards = [{{ env = "DSV41_ALPHA", type = "switch", default = "0" }}]

[features.beta]
description = "a configurable limit"
requires = ["guards"]
guards = [{{ env = "DSV41_BETA_LIMIT", type = "int", default = "{beta_default}" }}]

[[patches]]
file = "guards.patch"
feature = "guards"
unguarded = "declares the guard types and section"
{patches}
[variants.full]
description = "everything"
features = ["guards", "alpha", "beta"]

[variants.stock]
description = "upstream only"
features = []
'''

TEST_ALPHA = '''\
import importlib

import pytest

FEATURE = "alpha"


@pytest.mark.guard_off
def test_scale_doubles():
    from sglang import core
    assert core.scale(5) == 10


@pytest.mark.guard_on
def test_scale_triples(monkeypatch):
    monkeypatch.setenv("DSV41_ALPHA", "on")
    from sglang import core
    assert core.scale(5) == 15


@pytest.mark.absent
def test_alpha_undeclared():
    from sglang.srt import environ
    assert not hasattr(environ.Envs, "DSV41_ALPHA")
'''

TEST_BETA = '''\
import pytest

FEATURE = "beta"


@pytest.mark.guard_off
def test_limit_is_100():
    from sglang import core
    assert core.limit(500) == 100


@pytest.mark.guard_on
def test_limit_follows_the_guard(monkeypatch):
    monkeypatch.setenv("DSV41_BETA_LIMIT", "7")
    from sglang import core
    assert core.limit(500) == 7


@pytest.mark.absent
def test_beta_undeclared():
    from sglang.srt import environ
    assert not hasattr(environ.Envs, "DSV41_BETA_LIMIT")
'''

TEST_GUARDS = '''\
import pytest

FEATURE = "guards"


@pytest.mark.guard_on
def test_switch_spellings(monkeypatch):
    from sglang.srt import environ
    field = environ.EnvSwitch(False)
    field.name = "DSV41_PROBE"
    monkeypatch.setenv("DSV41_PROBE", "off")
    assert field.get() is False


@pytest.mark.guard_off
def test_registry_reads_upstream_settings():
    from sglang.srt.environ import envs
    assert envs.SGLANG_WORKERS.get() == 1


@pytest.mark.absent
def test_no_switch_type():
    from sglang.srt import environ
    assert not hasattr(environ, "EnvSwitch")
'''


def _make(tmp_path: Path, *, specs=(ALPHA, BETA), beta_default: str = "0") -> Path:
    repo, commit = make_upstream_repo(tmp_path / "upstream", UPSTREAM)
    root = tmp_path / "series"
    (root / "patches").mkdir(parents=True)
    repo.run("checkout", "--quiet", "-b", "series")
    for spec in (GUARDS, *specs):
        (root / "patches" / spec.file).write_text(repo.format_patch(commit_spec(repo, spec)))
    entries = "".join(f'\n[[patches]]\nfile = "{spec.file}"\nfeature = "{spec.feature}"\n' for spec in specs)
    (root / "series.toml").write_text(SERIES_TOML.format(repo=repo.path, commit=commit, patches=entries,
                                                         beta_default=beta_default))
    write_feature_tests(root)
    return root


def write_feature_tests(root: Path) -> None:
    """tests/patches of the fixture features, with the repository's own conftest: the contract under test."""
    tests = root / "tests" / "patches"
    tests.mkdir(parents=True)
    shutil.copy(REPO / "tests" / "patches" / "conftest.py", tests / "conftest.py")
    for name, text in {"test_alpha.py": TEST_ALPHA, "test_beta.py": TEST_BETA, "test_guards.py": TEST_GUARDS}.items():
        (tests / name).write_text(text)


def _run(root: Path, variant: str, *extra: str) -> tuple[int, dict[tuple[str, str], dict]]:
    code = cli_main(["-C", str(root), "--cache", str(root.parent / "cache"),
                     "test-patch", "--variant", variant, "--from-tree", *extra])
    rows = json.loads((root / "build" / "test-patch" / f"{variant}.json").read_text())
    return code, {(row["feature"], row["check"]): row for row in rows}


def test_full_variant_passes_every_feature_both_ways(tmp_path):
    code, cells = _run(_make(tmp_path), "full")
    for feature in ("guards", "alpha", "beta"):
        for check in ("structure", "guard_off", "guard_on"):
            assert cells[feature, check]["outcome"] == "pass", cells[feature, check]
        assert cells[feature, "absent"]["outcome"] == "skip"
    assert code == 0
    row = cells["alpha", "guard_on"]
    assert set(row) >= {"variant", "feature", "check", "outcome", "reason"}
    assert row["details"][0]["test"].endswith("test_alpha.py::test_scale_triples")


def test_removing_a_patch_makes_its_guard_on_test_fail(tmp_path):
    code, cells = _run(_make(tmp_path, specs=(BETA,)), "full")
    assert code == 1
    assert cells["alpha", "guard_on"]["outcome"] == "fail"
    assert "test_scale_triples" in cells["alpha", "guard_on"]["reason"]
    assert cells["alpha", "guard_off"]["outcome"] == "pass"  # stock behaviour still holds
    structure = [detail["reason"] for detail in cells["alpha", "structure"]["details"] if detail["outcome"] == "fail"]
    assert any("no patch of alpha reads envs.DSV41_ALPHA" in reason for reason in structure)
    # The other feature is untouched.
    assert cells["beta", "guard_on"]["outcome"] == "pass"


def test_stock_runs_the_absent_tests_and_proves_guard_on_tests_fail_without_patches(tmp_path):
    code, cells = _run(_make(tmp_path), "stock")
    for feature in ("guards", "alpha", "beta"):
        assert cells[feature, "absent"]["outcome"] == "pass", cells[feature, "absent"]
        assert cells[feature, "guard_on"]["outcome"] == "skip"
        assert cells[feature, "guard_on_unpatched"]["outcome"] == "pass", cells[feature, "guard_on_unpatched"]
        assert cells[feature, "guard_off_unpatched"]["outcome"] == "pass", cells[feature, "guard_off_unpatched"]
    assert code == 0
    # alpha and beta ran with their guards declared, so they fail on the behaviour itself; guards (whose
    # behaviour is environ.py) on plain stock, where the switch type the patch adds is missing.
    (alpha,) = cells["alpha", "guard_on_unpatched"]["details"]
    assert alpha["proof"] == "assertion" and alpha["exception"] == "AssertionError: assert 10 == 15"
    assert "stock sglang + guard declarations" in alpha["reason"]
    (guards,) = cells["guards", "guard_on_unpatched"]["details"]
    assert guards["proof"] == "missing_name" and "EnvSwitch" in guards["reason"]
    counts = cells["", "proof"]["counts"]
    assert (counts["guard_on_tests"], counts["assertion"], counts["missing_name"]) == (3, 2, 1)
    assert counts["harness_error"] == counts["passes_without_patch"] == 0
    assert cells["", "proof"]["outcome"] == "pass"


ALPHA_DISCIPLINE = '''

@pytest.mark.guard_on
def test_never_sets_its_guard():
    from sglang import core
    assert core.scale(5) == 10


@pytest.fixture
def needs_hardware(monkeypatch):
    pytest.skip("no such hardware here")


@pytest.mark.guard_on
def test_skips_from_a_fixture_before_setting_its_guard(needs_hardware):
    raise AssertionError("not reached")


@pytest.mark.guard_on
def test_skips_from_its_body_before_setting_its_guard():
    pytest.skip("no such hardware here")
'''


def test_guard_on_tests_must_set_their_guard_unless_they_skipped(tmp_path):
    # The harness holds a guard_on test to setting one of its feature's guards (else it proves
    # nothing about the switch), but not one that skipped after the watch began: a skip from a
    # fixture or from the body is reported as a skip.
    root = _make(tmp_path)
    (root / "tests" / "patches" / "test_alpha.py").write_text(TEST_ALPHA + ALPHA_DISCIPLINE)
    code, cells = _run(root, "full")
    details = {detail["test"].rsplit("::", 1)[1]: detail for detail in cells["alpha", "guard_on"]["details"]}
    assert details["test_never_sets_its_guard"]["outcome"] == "fail"
    assert "marked guard_on but never set DSV41_ALPHA" in details["test_never_sets_its_guard"]["reason"]
    for name in ("test_skips_from_a_fixture_before_setting_its_guard", "test_skips_from_its_body_before_setting_its_guard"):
        assert (details[name]["outcome"], details[name]["reason"]) == ("skip", "no such hardware here"), details[name]
    assert details["test_scale_triples"]["outcome"] == "pass"
    assert code == 1


# Both fail on plain stock with AttributeError on Envs, as the old proof wanted, without testing beta's behaviour.
GUARD_ONLY = '''

@pytest.mark.guard_on
def test_the_guard_reads_seven(monkeypatch):
    monkeypatch.setenv("DSV41_BETA_LIMIT", "7")
    from sglang.srt.environ import envs
    assert envs.DSV41_BETA_LIMIT.get() == 7
'''
MISSPELT_GUARD = '''

@pytest.mark.guard_on
def test_the_guard_reads_seven(monkeypatch):
    monkeypatch.setenv("DSV41_BETA_LIMT", "7")
    from sglang import core
    from sglang.srt.environ import envs
    assert core.limit(500) == envs.DSV41_BETA_LIMT.get()
'''


@pytest.mark.parametrize("test_text, kind, why", [
    (GUARD_ONLY, "passes_without_patch", "passes without the patch"),
    (MISSPELT_GUARD, "harness_error", "undeclared guard DSV41_BETA_LIMT"),
])
def test_a_guard_on_test_failing_on_stock_only_for_its_undeclared_guard_is_no_proof(tmp_path, test_text, kind, why):
    root = _make(tmp_path)
    (root / "tests" / "patches" / "test_beta.py").write_text(TEST_BETA + test_text)
    code, cells = _run(root, "stock")
    assert code == 1
    details = {detail["test"].rsplit("::", 1)[1]: detail for detail in cells["beta", "guard_on_unpatched"]["details"]}
    assert details["test_the_guard_reads_seven"]["outcome"] == "fail"
    assert details["test_the_guard_reads_seven"]["proof"] == kind
    assert why in details["test_the_guard_reads_seven"]["reason"]
    assert details["test_limit_follows_the_guard"]["proof"] == "assertion"  # the real test still counts
    assert cells["beta", "guard_on_unpatched"]["outcome"] == "fail"
    assert cells["", "proof"]["counts"][kind] == 1 and cells["", "proof"]["outcome"] == "fail"


def test_a_guard_on_test_that_passes_on_stock_fails_the_proof(tmp_path):
    root = _make(tmp_path)
    weak = TEST_BETA.replace('assert core.limit(500) == 7', 'assert core.limit(5) == 5')
    (root / "tests" / "patches" / "test_beta.py").write_text(weak)
    code, cells = _run(root, "stock")
    assert cells["beta", "guard_on_unpatched"]["outcome"] == "fail"
    assert "does not detect a missing patch" in cells["beta", "guard_on_unpatched"]["reason"]
    assert code == 1


def test_the_generated_guards_are_checked_against_series_toml(tmp_path, monkeypatch):
    """The structure check reads the module the tree holds: a generator that leaves a guard
    out (or writes another default) fails it, naming the guard."""
    import forkbuild.worktree.guards_module as guards_module

    root = _make(tmp_path)
    code, cells = _run(root, "full", "--structure-only")
    assert code == 0 and cells["beta", "structure"]["outcome"] == "pass"
    decl = [d["reason"] for d in cells["beta", "structure"]["details"] if d["step"] == "guard_decl"]
    assert decl == ["DSV41_BETA_LIMIT: int, default '0' (generated)"]
    honest = guards_module.render
    monkeypatch.setattr(guards_module, "render", lambda *args: honest(*args).replace("'0', 'beta'", "'5', 'beta'"))
    code, cells = _run(root, "full", "--structure-only")
    assert code == 1
    assert cells["beta", "structure"]["outcome"] == "fail"
    assert "('int', '5', 'beta'), series.toml says ('int', '0', 'beta')" in cells["beta", "structure"]["reason"]
    assert cells["alpha", "structure"]["outcome"] == "pass"
    monkeypatch.setattr(guards_module, "render", lambda *args: "".join(
        line for line in honest(*args).splitlines(keepends=True) if not line.rstrip().endswith("'alpha'),")))
    code, cells = _run(root, "full", "--structure-only")
    assert code == 1 and "DSV41_ALPHA is not declared" in cells["alpha", "structure"]["reason"]


def test_a_patch_editing_the_generated_module_is_refused_before_structure(tmp_path, capsys):
    root = _make(tmp_path)
    code, cells = _run(root, "full", "--structure-only")
    assert code == 0
    # beta's patch writes the module itself, as if it declared its guard in a shared file.
    patch = root / "patches" / "beta.patch"
    text = patch.read_text()
    addition = ("diff --git a/python/sglang/srt/fork_guards.py b/python/sglang/srt/fork_guards.py\n"
                "new file mode 100644\n--- /dev/null\n+++ b/python/sglang/srt/fork_guards.py\n"
                "@@ -0,0 +1 @@\n+GUARDS = ()\n")
    patch.write_text(text.replace("diff --git", addition + "diff --git", 1))
    capsys.readouterr()
    assert cli_main(["-C", str(root), "--cache", str(root.parent / "cache"), "test-patch", "--variant", "full",
                     "--from-tree", "--structure-only"]) == UnsafePatchError.return_code
    assert "beta.patch change(s) python/sglang/srt/fork_guards.py, which forkbuild generates" in capsys.readouterr().err


def test_a_patch_reading_no_guard_fails_unless_marked_unguarded(tmp_path):
    sneaky = PatchSpec(file="alpha.patch", feature="alpha", subject="core: scale by three", body="Always.",
                       edits=(("python/sglang/core.py", "    return value * 2\n", "    return value * 3\n"),))
    root = _make(tmp_path, specs=(sneaky, BETA))
    code, cells = _run(root, "full", "--structure-only")
    assert code == 1
    reasons = [detail["reason"] for detail in cells["alpha", "structure"]["details"] if detail["outcome"] == "fail"]
    assert any("alpha.patch: added code reads none of DSV41_ALPHA" in reason for reason in reasons)


@pytest.mark.parametrize("text, problem", [
    ("GUARDS = (('DSV41_X', 'switch', '0', 'x'),)\n", ""),
    ("GUARDS = (('DSV41_X', 'int', '0', 'x'),)\n", "declared as (type, default, feature) ('int', '0', 'x')"),
    ("GUARDS = (('DSV41_X', 'switch'),)\n", "not a generated guards module"),
    ("GUARDS = compute()\n", "not a generated guards module"),
    ("", "not a generated guards module"),
])
def test_reading_the_generated_module(tmp_path, text, problem):
    from forkbuild.series.config import Guard, load_series
    from forkbuild.testpatch.structure import mismatch, read_declarations

    root = _make(tmp_path)
    series = load_series(root / "series.toml")
    tree = tmp_path / "tree"
    (tree / "python" / "sglang" / "srt").mkdir(parents=True)
    (tree / "python" / "sglang" / "srt" / "fork_guards.py").write_text(text)
    found = read_declarations(series, tree)
    if isinstance(found, str):
        assert problem in found
        return
    guard = Guard(env="DSV41_X", type="switch", default="0", feature="x")
    assert mismatch(guard, found["DSV41_X"]).startswith(problem)


@pytest.mark.parametrize("exception, added, kind", [
    ({"type": "AssertionError", "message": "assert 10 == 15"}, set(), "assertion"),
    ({"type": "Failed", "message": "DID NOT RAISE <class 'ValueError'>"}, set(), "assertion"),
    ({"type": "ImportError", "message": "cannot import name 'triple' from 'sglang.core'", "missing": "triple",
      "owner": "sglang.core"}, {"triple"}, "missing_name"),
    ({"type": "ModuleNotFoundError", "message": "No module named 'sglang.kernels'", "missing": "sglang.kernels",
      "owner": ""}, {"sglang.kernels.w8", "w8"}, "missing_name"),
    ({"type": "ImportError", "message": "cannot import name 'triple' from 'sglang.core'", "missing": "triple",
      "owner": "sglang.core"}, {"quadruple"}, "other_exception"),
    ({"type": "AttributeError", "message": "'Envs' object has no attribute 'DSV41_ALPHA'", "missing": "DSV41_ALPHA",
      "owner": "Envs"}, {"DSV41_ALPHA"}, "harness_error"),
    ({}, set(), "harness_error"),
])
def test_judge_a_guard_on_failure_without_the_patch(exception, added, kind):
    from forkbuild.testpatch.proof import judge

    item = {"outcome": "fail", "reason": "call: boom", "exception": exception}
    assert judge(item, added=added)[0] == kind


def test_added_names_are_what_the_features_patches_define(tmp_path):
    from forkbuild.series.config import load_series
    from forkbuild.testpatch.proof import added_names

    series = load_series(_make(tmp_path) / "series.toml")
    assert {"EnvSwitch", "EnvStrictInt", "parse"} <= added_names(series, "guards")
    assert "EnvSwitch" not in added_names(series, "alpha")


KILLS_FORKBUILD = '''\
import os
import signal

import pytest

FEATURE = "alpha"


@pytest.mark.guard_off
def test_zz_the_call_ends():
    # As a GPU call's time limit does: forkbuild (pytest's parent) is killed mid-run.
    os.kill(os.getppid(), signal.SIGKILL)
    os._exit(1)
'''


def test_a_verbose_run_names_each_test_as_it_ends_so_a_killed_run_shows_how_far_it_got(tmp_path):
    import signal
    import subprocess
    import sys

    root = _make(tmp_path)
    (root / "tests" / "patches" / "test_zz_kill.py").write_text(KILLS_FORKBUILD)
    command = [sys.executable, "-m", "forkbuild", "-v", "-C", str(root), "--cache", str(tmp_path / "cache"),
               "test-patch", "--variant", "full", "--from-tree"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == -signal.SIGKILL, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    # What ran before the kill is on the terminal already; nothing is written after it.
    assert "test_alpha.py::test_scale_triples PASSED" in done.stdout, done.stdout[-3000:]
    assert "test_zz_kill.py::test_zz_the_call_ends" in done.stdout
    assert not (root / "build" / "test-patch" / "full.json").exists()
