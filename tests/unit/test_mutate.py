"""forkbuild mutate: mutants from patch hunks, the overlay that loads them, the
results key, the reasons' moves and the CI check. Fixtures are tiny modules and hand-made patches."""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from forkbuild.errors import MutationError
from forkbuild.mutate import results
from forkbuild.mutate.mutants import HUNK, NO_CODE, STATEMENT, Mutant, mutants_of
from forkbuild.mutate.results import Reasons, feature_of_test, load_reasons, patch_key
from forkbuild.mutate.workers import OVERLAY, run_all
from forkbuild.series.config import PatchEntry

ORIGINAL = textwrap.dedent("""\
    import os


    def budget(limit):
        \"\"\"The budget.\"\"\"
        used = 0
        # spend it
        return limit - used


    def other():
        return 1
    """)


def _diff(path: str, before: str | None, after: str) -> str:
    old = [] if before is None else before.splitlines(keepends=True)
    diff = difflib.unified_diff(old, after.splitlines(keepends=True), "/dev/null" if before is None else f"a/{path}",
                                f"b/{path}", n=3)
    return f"diff --git a/{path} b/{path}\n" + "".join(diff)


def _entry(tmp_path: Path, *diffs: str, name: str = "feat.patch") -> PatchEntry:
    path = tmp_path / name
    path.write_text("From 0000 Mon Sep 17 00:00:00 2001\nFrom: a <a@b>\nSubject: s\n\nmsg\n\n" + "".join(diffs))
    return PatchEntry(file=name, feature="feat", path=path)


def _mutants(tmp_path, before, after, installed=None, path="python/pkg/mod.py"):
    entry = _entry(tmp_path, _diff(path, before, after))
    text = after if installed is None else installed
    return mutants_of(entry, package_root="python", installed=lambda _: text)


def test_a_comment_or_docstring_only_hunk_yields_no_mutant(tmp_path):
    after = ORIGINAL.replace("# spend it", "# spend it all").replace('"""The budget."""', '"""The whole budget."""')
    mutants, skipped = _mutants(tmp_path, ORIGINAL, after)
    assert mutants == []
    assert [item.why for item in skipped] == [NO_CODE]


def test_a_code_hunk_is_reverted_in_the_installed_file(tmp_path):
    after = ORIGINAL.replace("    return limit - used\n", "    if os.environ.get('CAP'):\n        limit = min(limit, 4)\n"
                                                            "    return limit - used\n")
    (mutant,), _ = _mutants(tmp_path, ORIGINAL, after)
    assert (mutant.kind, mutant.id, mutant.module) == (HUNK, "pkg/mod.py:h1", "pkg.mod")
    assert mutant.source == ORIGINAL


def test_several_added_statements_give_one_mutant_each(tmp_path):
    after = ORIGINAL.replace("    used = 0\n", "    used = 0\n    used += 1\n    limit *= 2\n")
    mutants, _ = _mutants(tmp_path, ORIGINAL, after)
    assert [mutant.kind for mutant in mutants] == [HUNK, STATEMENT, STATEMENT]
    assert mutants[1].source == after.replace("    used += 1\n", "    pass\n")
    assert mutants[2].source == after.replace("    limit *= 2\n", "    pass\n")
    assert mutants[1].id == "pkg/mod.py:h1.s1"


def test_an_added_function_gives_its_body_statements(tmp_path):
    after = ORIGINAL + "\n\ndef added(x):\n    \"\"\"Doc.\"\"\"\n    y = x + 1\n    return y\n"
    mutants, _ = _mutants(tmp_path, ORIGINAL, after)
    assert [mutant.summary for mutant in mutants if mutant.kind == STATEMENT] == ["y = x + 1", "return y"]


def test_the_hunk_is_found_where_later_patches_moved_it(tmp_path):
    after = ORIGINAL.replace("    return 1\n", "    return 2\n")
    installed = "import sys\nimport json\n" + after  # a later patch added lines above
    (mutant,), _ = _mutants(tmp_path, ORIGINAL, after, installed=installed)
    assert mutant.source == "import sys\nimport json\n" + ORIGINAL


def test_lines_a_later_patch_put_inside_the_hunk_stay(tmp_path):
    after = ORIGINAL.replace("def other():\n", "SECTION_START = 1\nSECTION_END = 2\n\n\ndef other():\n")
    installed = after.replace("SECTION_START = 1\n", "SECTION_START = 1\nLATER = 3\n")
    (mutant, *_), _ = _mutants(tmp_path, ORIGINAL, after, installed=installed)
    assert "LATER = 3\n" in mutant.source
    assert "SECTION_START" not in mutant.source and "SECTION_END" not in mutant.source


def test_a_new_module_is_removed_by_its_hunk_mutant(tmp_path):
    mutants, _ = _mutants(tmp_path, None, "A = 1\nB = A + 1\n", path="python/pkg/new.py")
    assert mutants[0].kind == HUNK and mutants[0].source is None
    assert [mutant.summary for mutant in mutants[1:]] == ["A = 1", "B = A + 1"]


def test_a_hunk_missing_from_the_installed_file_names_the_patch(tmp_path):
    after = ORIGINAL.replace("    return 1\n", "    return 2\n")
    with pytest.raises(MutationError, match="feat.patch: hunk pkg/mod.py:h1"):
        _mutants(tmp_path, ORIGINAL, after, installed="something else\n")


# -- the overlay -------------------------------------------------------------------------

def _package(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    (site / "pkg").mkdir(parents=True)
    (site / "pkg" / "__init__.py").write_text("")
    (site / "pkg" / "mod.py").write_text("VALUE = 'installed'\n")
    return site


def _python(site: Path, code: str, **mutant) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(OVERLAY), str(site)]),
           "FORKBUILD_MUTANT": json.dumps({mutant["module"]: mutant["source"]}) if mutant else ""}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)


def test_the_overlay_loads_the_mutant_in_the_process_and_its_children(tmp_path):
    site = _package(tmp_path)
    mutated = tmp_path / "m0" / "mod.py"
    mutated.parent.mkdir()
    mutated.write_text("VALUE = 'mutant'\n")
    child = "import subprocess, sys; print(subprocess.run([sys.executable, '-c', 'import pkg.mod; print(pkg.mod.VALUE)'], capture_output=True, text=True).stdout.strip())"
    done = _python(site, f"import pkg.mod; print(pkg.mod.VALUE); {child}", module="pkg.mod", source=str(mutated))
    assert done.stdout.split() == ["mutant", "mutant"], done.stderr
    assert (site / "pkg" / "mod.py").read_text() == "VALUE = 'installed'\n"
    assert _python(site, "import pkg.mod; print(pkg.mod.VALUE)").stdout.strip() == "installed"


def test_code_reading_its_own_source_reads_the_mutant(tmp_path):
    # Triton's @jit compiles a kernel from inspect.getsource of its function,
    # which reads the file the code object names: the real one.
    site = _package(tmp_path)
    (site / "pkg" / "mod.py").write_text("def kernel():\n    return 'installed'\n")
    mutated = tmp_path / "m0" / "mod.py"
    mutated.parent.mkdir()
    mutated.write_text("def kernel():\n    pass\n")
    code = "import inspect, linecache, pkg.mod; linecache.checkcache(); print(inspect.getsource(pkg.mod.kernel))"
    done = _python(site, code, module="pkg.mod", source=str(mutated))
    assert done.stdout == "def kernel():\n    pass\n\n", done.stderr
    assert "return 'installed'" in _python(site, code).stdout


def test_the_overlay_removes_a_module(tmp_path):
    done = _python(_package(tmp_path), "import pkg.mod", module="pkg.mod", source="")
    assert "ModuleNotFoundError" in done.stderr


def _test_repo(tmp_path: Path) -> tuple[Path, Path]:
    """A site-packages with `pkg`, and a repo whose tests/conftest.py writes
    FORKBUILD_TEST_RESULTS as tests/patches/conftest.py does."""
    site = _package(tmp_path)
    root = tmp_path / "repo"
    (root / "tests").mkdir(parents=True)
    (root / "tests" / "conftest.py").write_text(textwrap.dedent("""\
        import json, os
        records = []
        def pytest_runtest_logreport(report):
            if report.when == "call":
                records.append({"test": report.nodeid, "outcome": "fail" if report.failed else "pass"})
        def pytest_sessionfinish(session):
            with open(os.environ["FORKBUILD_TEST_RESULTS"], "w") as handle:
                json.dump(records, handle)
        """))
    return site, root


def test_run_all_runs_the_baseline_then_names_the_killing_test(tmp_path, monkeypatch):
    site, root = _test_repo(tmp_path)
    (root / "tests" / "test_mod.py").write_text(
        "import subprocess, sys\n\ndef test_value():\n    import pkg.mod\n    assert pkg.mod.VALUE == 'installed'\n\n"
        "def test_in_a_subprocess():\n    code = 'import pkg.mod; assert pkg.mod.OTHER == 1'\n"
        "    assert subprocess.run([sys.executable, '-c', code]).returncode == 0\n")
    (site / "pkg" / "mod.py").write_text("VALUE = 'installed'\nOTHER = 1\n")
    monkeypatch.setenv("PYTHONPATH", str(site))
    mutant = Mutant("pkg/mod.py:h1", "feat.patch", "feat", "pkg/mod.py", HUNK, (1, 1), "", "VALUE = 'x'\nOTHER = 1\n")
    in_child = Mutant("pkg/mod.py:h2", "feat.patch", "feat", "pkg/mod.py", HUNK, (2, 2), "", "VALUE = 'installed'\nOTHER = 2\n")
    alive = Mutant("pkg/mod.py:h3", "feat.patch", "feat", "pkg/mod.py", HUNK, (1, 1), "", "VALUE = 'installed'  # same\nOTHER = 1\n")
    outcomes = {}
    runs = {"feat": (root / "tests" / "test_mod.py",)}
    baselines = run_all(runs, [mutant, in_child, alive], root=root, site_packages=site, python=Path(sys.executable),
                        preload=["pkg.mod"], workers=2, scratch=tmp_path / "scratch",
                        done=lambda item, outcome: outcomes.__setitem__(item.id, outcome))
    assert baselines["feat"].status == "survived"
    assert (outcomes["pkg/mod.py:h1"].status, outcomes["pkg/mod.py:h1"].killed_by) == ("killed", "tests/test_mod.py::test_value")
    assert outcomes["pkg/mod.py:h2"].killed_by == "tests/test_mod.py::test_in_a_subprocess"
    assert outcomes["pkg/mod.py:h3"].status == "survived"
    assert (site / "pkg" / "mod.py").read_text() == "VALUE = 'installed'\nOTHER = 1\n"


def test_a_mutant_runs_the_test_files_naming_its_module_first(tmp_path, monkeypatch):
    # Both files' tests fail for the mutant; the one that names pkg.mod comes second
    # in the feature's order but runs first, so it is the one that kills it (-x).
    site, root = _test_repo(tmp_path)
    (root / "tests" / "test_a_elsewhere.py").write_text(
        "import importlib\n\ndef test_through_a_name_built_at_run_time():\n"
        "    assert importlib.import_module('pkg.' + 'm' + 'od').VALUE == 'installed'\n")
    (root / "tests" / "test_b_naming.py").write_text(
        "def test_value():\n    import pkg.mod\n    assert pkg.mod.VALUE == 'installed'\n")
    (site / "pkg" / "mod.py").write_text("VALUE = 'installed'\n")
    monkeypatch.setenv("PYTHONPATH", str(site))
    mutant = Mutant("pkg/mod.py:h1", "feat.patch", "feat", "pkg/mod.py", HUNK, (1, 1), "", "VALUE = 'x'\n")
    tests = (root / "tests" / "test_a_elsewhere.py", root / "tests" / "test_b_naming.py")
    outcomes = {}
    run_all({"feat": tests}, [mutant], root=root, site_packages=site, python=Path(sys.executable), preload=["pkg.mod"],
            workers=1, scratch=tmp_path / "scratch",
            done=lambda item, outcome: outcomes.__setitem__(item.id, outcome))
    assert outcomes["pkg/mod.py:h1"].killed_by == "tests/test_b_naming.py::test_value"


def test_a_mutant_runs_the_test_that_killed_it_last_time_first(tmp_path, monkeypatch):
    # Both tests fail for the mutant; the second in the file killed it in the recorded
    # results, so it runs first and is the one that kills it again (-x).
    site, root = _test_repo(tmp_path)
    (root / "tests" / "test_mod.py").write_text(
        "def test_first():\n    import pkg.mod\n    assert pkg.mod.VALUE == 'installed'\n\n"
        "def test_second():\n    import pkg.mod\n    assert pkg.mod.VALUE == 'installed'\n")
    (site / "pkg" / "mod.py").write_text("VALUE = 'installed'\n")
    monkeypatch.setenv("PYTHONPATH", str(site))
    mutant = Mutant("pkg/mod.py:h1", "feat.patch", "feat", "pkg/mod.py", HUNK, (1, 1), "", "VALUE = 'x'\n")
    outcomes = {}
    run_all({"feat": (root / "tests" / "test_mod.py",)}, [mutant], root=root, site_packages=site,
            python=Path(sys.executable), preload=["pkg.mod"], workers=1, scratch=tmp_path / "scratch",
            done=lambda item, outcome: outcomes.__setitem__(item.id, outcome),
            killers={("feat.patch", "pkg/mod.py:h1"): "tests/test_mod.py::test_second"})
    assert outcomes["pkg/mod.py:h1"].killed_by == "tests/test_mod.py::test_second"


# -- results: key and check ----------------------------------------------------------------

def _series(tmp_path: Path):
    """A real series.toml with one feature patch, and its feature test."""
    from forkbuild.series.config import load_series

    (tmp_path / "patches").mkdir()
    (tmp_path / "patches" / "feat.patch").write_text("From 0\nSubject: s\n\n" + _diff("python/pkg/mod.py", "A = 1\n", "A = 2\n"))
    (tmp_path / "patches" / "series").write_text("feat.patch\n")
    (tmp_path / "tests" / "patches").mkdir(parents=True)
    (tmp_path / "tests" / "patches" / "test_feat.py").write_text('FEATURE = "feat"\n')
    (tmp_path / "tests" / "patches" / "test_other.py").write_text('FEATURE = "other"\n')
    (tmp_path / "tests" / "patches" / "conftest.py").write_text("")
    (tmp_path / "series.toml").write_text(textwrap.dedent("""\
        [series]
        name = "s"
        default_variant = "v"
        [upstream]
        name = "pkg"
        version = "1.0"
        package_root = "python"
        source = "wheel"
        [[upstream.wheels]]
        python_tag = "cp311"
        filename = "pkg-1.0-py3-none-any.whl"
        sha256 = "%s"
        [features.feat]
        description = "f"
        guards = [{ env = "DSV41_FEAT", type = "switch", default = "0" }]
        [[patches]]
        file = "feat.patch"
        feature = "feat"
        [variants.v]
        description = "v"
        features = ["feat"]
        """ % ("0" * 64)))
    return load_series(tmp_path / "series.toml")


def test_feature_of_a_test_module_is_read_without_importing_it(tmp_path):
    path = tmp_path / "test_x.py"
    path.write_text('import not_installed_anywhere\nFEATURE = "x"\n')
    assert feature_of_test(path) == "x"


def test_the_key_follows_the_patch_its_tests_and_the_harness_only(tmp_path):
    series = _series(tmp_path)
    (entry,) = series.patches
    key = patch_key(series, entry)
    (tmp_path / "tests" / "patches" / "test_other.py").write_text('FEATURE = "other"\nX = 1\n')
    assert patch_key(series, entry) == key
    for path in ("tests/patches/test_feat.py", "tests/patches/conftest.py", "patches/feat.patch"):
        (tmp_path / path).write_text((tmp_path / path).read_text() + "\n# changed\n")
        assert patch_key(series, entry) != key, path
        key = patch_key(series, entry)


def _results(series, status="survived"):
    (entry,) = series.patches
    mutant = {"id": "pkg/mod.py:h1", "kind": HUNK, "path": "pkg/mod.py", "lines": [1, 1], "summary": "+ A = 2",
              "status": status, "killed_by": ""}
    return {"format": 1, "variants": {"v": {"patches": {"feat.patch": {"feature": "feat", "key": patch_key(series, entry),
                                                                       "mutants": [mutant], "skipped": []}}}}}


def test_check_fails_on_a_survivor_without_reason_and_passes_with_one(tmp_path):
    series = _series(tmp_path)
    (problem,) = results.problems(series, _results(series), Reasons({}))
    assert "pkg/mod.py:h1" in problem and "survived" in problem
    assert results.problems(series, _results(series), Reasons({"feat.patch": {"pkg/mod.py:h1": "why"}})) == []


def test_check_fails_on_stale_results_and_on_reasons_for_nothing(tmp_path):
    series = _series(tmp_path)
    data = _results(series, status="killed")
    (tmp_path / "tests" / "patches" / "test_feat.py").write_text('FEATURE = "feat"\n# more\n')
    found = results.problems(series, data, Reasons({"feat.patch": {"pkg/mod.py:h1": "why", "pkg/mod.py:h9": "old"}}))
    assert any("stale" in line and "--patch feat.patch" in line for line in found)
    assert any("h9: no such mutant" in line for line in found)
    assert any("h1: is killed now" in line for line in found)


def test_a_patch_without_results_passes_only_with_a_recorded_not_run_reason(tmp_path):
    series = _series(tmp_path)
    empty = {"format": 1, "variants": {"v": {"patches": {}}}}
    (missing,) = results.problems(series, empty, Reasons({}))
    assert "feat.patch has no mutation results" in missing
    assert results.problems(series, empty, Reasons({"feat.patch": {results.NOT_RUN: "baseline fails: why"}})) == []
    # Once the patch has results, a left-over not-run reason is a problem of its own.
    found = results.problems(series, _results(series, status="killed"), Reasons({"feat.patch": {results.NOT_RUN: "old"}}))
    assert any("has results now" in line for line in found)


def test_the_rerun_command_quotes_a_patch_name_that_is_shell_text(tmp_path):
    import shlex

    series = _series(tmp_path)
    entry = dataclasses.replace(series.patches[0], file="feat $(touch pwned).patch")
    series = dataclasses.replace(series, patches=(entry,))
    (missing,) = results.problems(series, {"format": 1, "variants": {"v": {"patches": {}}}}, Reasons({}))
    command = missing.split("`")[1]
    assert shlex.split(command)[-2:] == ["--patch", "feat $(touch pwned).patch"]


def test_check_wants_the_default_variant_recorded(tmp_path):
    series = _series(tmp_path)
    assert any("default variant v" in line for line in results.problems(series, {"format": 1, "variants": {}}, Reasons({})))


def test_a_reason_must_be_one_line(tmp_path):
    (tmp_path / "mutation").mkdir()
    (tmp_path / "mutation" / "reasons.toml").write_text('["feat.patch"]\n"pkg/mod.py:h1" = ""\n')
    with pytest.raises(MutationError, match="reasons.toml.*one non-empty line"):
        load_reasons(tmp_path)
    (tmp_path / "mutation" / "reasons.toml").write_bytes(b"\xff\xfe")
    with pytest.raises(MutationError, match="reasons.toml: .*utf-8"):
        load_reasons(tmp_path)


def test_results_file_round_trips(tmp_path):
    data = {"format": 1, "variants": {"v": {"patches": {}}}}
    results.write(tmp_path, data)
    assert results.load(tmp_path) == data
    for damaged in (b"{", b"\xff\xfe"):  # a merge's leftovers; not even text (was a UnicodeDecodeError traceback)
        (tmp_path / "mutation" / "results.json").write_bytes(damaged)
        with pytest.raises(MutationError, match="not valid JSON"):
            results.load(tmp_path)
    assert json.loads(json.dumps(data)) == data


def test_the_behavioural_kill_rate_leaves_out_only_survivors_whose_reason_says_equivalent() -> None:
    from forkbuild.mutate import summary

    def mutant(number: int, status: str) -> dict:
        return {"id": f"pkg/mod.py:h{number}", "kind": HUNK, "status": status, "summary": "", "lines": [1, 2],
                "killed_by": "tests/patches/test_a.py::test_a" if status == "killed" else None}

    patches = {"a.patch": {"feature": "a", "mutants": [mutant(1, "killed"), mutant(2, "killed"), mutant(3, "killed"),
                                                       mutant(4, "survived"), mutant(5, "survived")]}}
    reasons = Reasons({"a.patch": {"pkg/mod.py:h4": "equivalent: a trailing `return None`",
                                   "pkg/mod.py:h5": "CUDA only: the side stream"}})
    row, = summary.feature_rows(patches, reasons)
    assert (row["survived"], row["equivalent"]) == (2, 1)
    assert row["rate"] == 60.0  # 3 of 5
    assert row["behavioural_rate"] == 75.0  # 3 of 4: the CUDA-only survivor still counts against it
    assert summary.totals([row])["behavioural_rate"] == 75.0
    # Without reasons nothing is taken for equivalent.
    assert summary.feature_rows(patches, Reasons({}))[0]["behavioural_rate"] == 60.0
    assert "| 2 | 1 | 60.0 % | 75.0 % |" in summary.markdown([row], [], patches, variant="tp4")


# -- reasons follow a renumbered statement ----------------------------------------------------

def _statement(number: int, summary: str, status: str = "survived") -> dict:
    return {"id": f"pkg/mod.py:h1.s{number}", "kind": STATEMENT, "path": "pkg/mod.py", "lines": [number, number],
            "summary": summary, "status": status, "killed_by": "" if status == "survived" else "t::t"}


def test_a_reason_follows_its_statement_to_the_id_an_edit_renumbered_it_to():
    from forkbuild.mutate.results import follow

    before = [_statement(1, "from x import y"), _statement(65, "if o.is_cuda:"), _statement(66, "try:"),
              _statement(67, "n = 1", "killed")]
    # Code added above: the same statements are s1, s90, s91 now; s65 is another, killed one.
    after = [_statement(1, "from x import y"), _statement(65, "m = 2", "killed"), _statement(90, "if o.is_cuda:"),
             _statement(91, "try:"), _statement(92, "n = 1", "killed"), _statement(93, "while k:")]
    reasons = {"pkg/mod.py:h1.s1": "equivalent", "pkg/mod.py:h1.s65": "CUDA only", "pkg/mod.py:h1.s66": "CUDA"}
    assert follow(before, after, reasons) == {"pkg/mod.py:h1.s65": "pkg/mod.py:h1.s90",
                                              "pkg/mod.py:h1.s66": "pkg/mod.py:h1.s91"}
    # Killed now, or gone: the reason stays where it is (--check asks to remove it).
    assert follow(before, [_statement(1, "from x import y", "killed")], reasons) == {}
    # Two `try:` were reasoned, one survives: which one is not sure, so neither moves.
    two = [_statement(5, "try:"), _statement(6, "try:")]
    assert follow(two, [_statement(7, "try:")], {"pkg/mod.py:h1.s5": "a", "pkg/mod.py:h1.s6": "b"}) == {}
    # Renumbered into each other's ids (s2 -> s3 while s3 -> s4): both move.
    chain = [_statement(2, "a = 1"), _statement(3, "b = 2")]
    moved = follow(chain, [_statement(3, "a = 1"), _statement(4, "b = 2")],
                   {"pkg/mod.py:h1.s2": "r2", "pkg/mod.py:h1.s3": "r3"})
    assert moved == {"pkg/mod.py:h1.s2": "pkg/mod.py:h1.s3", "pkg/mod.py:h1.s3": "pkg/mod.py:h1.s4"}
    from forkbuild.mutate.results import pending

    kept = {"pkg/mod.py:h1.s2": {"id": "pkg/mod.py:h1.s3", "reason": "r2"},
            "pkg/mod.py:h1.s3": {"id": "pkg/mod.py:h1.s4", "reason": "r3"}}
    assert pending(kept, {"pkg/mod.py:h1.s2": "r2", "pkg/mod.py:h1.s3": "r3"}) == moved  # both, at once
    # Applied ({s3: r2, s4: r3}), then s4's reason removed: s3 holds r2 now, not the
    # r3 that was to move, so nothing is pending.
    assert pending(kept, {"pkg/mod.py:h1.s3": "r2"}) == {}


def _moved_results(series) -> dict:
    data = _results(series)
    record = data["variants"]["v"]["patches"]["feat.patch"]
    record["mutants"] = [_statement(90, "if o.is_cuda:")]
    record["reasons_moved"] = {"pkg/mod.py:h1.s65": {"id": "pkg/mod.py:h1.s90", "reason": "CUDA only: the launch"}}
    return data


def test_check_names_a_recorded_move_not_yet_in_reasons_toml_and_mutate_applies_it(tmp_path, capsys):
    # The state a kill between the write of results.json and of reasons.toml leaves.
    from forkbuild.cli import main
    series = _series(tmp_path)
    results.write(tmp_path, _moved_results(series))
    (tmp_path / "mutation" / "reasons.toml").write_text(
        '# kept\n["feat.patch"]\n"pkg/mod.py:h1.s65" = "CUDA only: the launch"\n"pkg/mod.py:h1.s7" = "other"\n')
    (problem,) = [line for line in results.problems(series, _moved_results(series), load_reasons(tmp_path))
                  if "h1.s65" in line or "h1.s90" in line]
    assert "(if o.is_cuda:) is mutant pkg/mod.py:h1.s90 now" in problem
    assert "nox -s mutate -- --variant v --patch feat.patch" in problem
    # The hint's command: results are current, so it runs no mutant; it moves the
    # reason before it needs the test venv (here an interpreter without torch).
    no_torch = tmp_path / "python-without-torch"
    no_torch.write_text("#!/bin/sh\necho False\n")
    no_torch.chmod(0o755)
    assert main(["-C", str(tmp_path), "mutate", "--variant", "v", "--patch", "feat.patch",
                 "--python", str(no_torch)]) != 0
    assert "the reason for pkg/mod.py:h1.s65 moved to pkg/mod.py:h1.s90" in capsys.readouterr().err
    text = (tmp_path / "mutation" / "reasons.toml").read_text()
    assert text.startswith("# kept\n") and '"pkg/mod.py:h1.s7" = "other"' in text
    assert load_reasons(tmp_path).by_patch["feat.patch"] == {"pkg/mod.py:h1.s90": "CUDA only: the launch",
                                                             "pkg/mod.py:h1.s7": "other"}
    assert not [line for line in results.problems(series, _moved_results(series), load_reasons(tmp_path))
                if "h1.s65" in line or "h1.s90" in line]
    # Applied once: a second run finds nothing to move, and a reason at the new id
    # is never overwritten by one moving onto it.
    assert results.apply_moves(tmp_path, _moved_results(series)["variants"]["v"]["patches"]) == []
    (tmp_path / "mutation" / "reasons.toml").write_text(
        '["feat.patch"]\n"pkg/mod.py:h1.s65" = "CUDA only: the launch"\n"pkg/mod.py:h1.s90" = "its own"\n')
    assert results.apply_moves(tmp_path, _moved_results(series)["variants"]["v"]["patches"]) == []
    assert load_reasons(tmp_path).by_patch["feat.patch"]["pkg/mod.py:h1.s90"] == "its own"
    # Once applied, a move never runs again: a later reason at the old id (another
    # statement's, another text) stays where it was written, the new id free or not.
    (tmp_path / "mutation" / "reasons.toml").write_text('["feat.patch"]\n"pkg/mod.py:h1.s65" = "written later"\n')
    assert results.apply_moves(tmp_path, _moved_results(series)["variants"]["v"]["patches"]) == []
    # A broken reasons.toml is named, as --check names it, and left as it is.
    (tmp_path / "mutation" / "reasons.toml").write_text('["feat.patch"]\n"pkg/mod.py:h1.s65" = ""\n')
    with pytest.raises(MutationError, match="reasons.toml.*one non-empty line"):
        results.apply_moves(tmp_path, _moved_results(series)["variants"]["v"]["patches"])
    assert (tmp_path / "mutation" / "reasons.toml").read_text() == '["feat.patch"]\n"pkg/mod.py:h1.s65" = ""\n'


def test_a_run_records_the_moves_of_the_patch_it_records(tmp_path):
    # _record, where every run writes a patch's results: the moves go with them.
    from forkbuild.commands.mutate import PatchPlan, _record
    from forkbuild.mutate.workers import Outcome

    series = _series(tmp_path)
    (entry,) = series.patches
    (mutant,) = _mutants(tmp_path, "def f(o):\n    return 2\n", "def f(o):\n    n = 1\n    return 2\n")[0]
    item = PatchPlan(entry=entry, key="k", tests=(), mutants=(mutant,))
    # The same hunk as the second one of the patch before an edit dropped the first.
    renumbered = mutant.id.replace(":h1", ":h2")
    previous = {"mutants": [{"id": renumbered, "kind": mutant.kind, "path": mutant.path, "lines": [2, 2],
                             "summary": mutant.summary, "status": "survived", "killed_by": ""}]}
    recorded = {"feat.patch": previous}
    outcome = Outcome(status="survived", killed_by="", seconds=0.0)
    _record(recorded, item, {mutant.id: outcome}, Reasons({"feat.patch": {renumbered: "why"}}))
    assert recorded["feat.patch"]["reasons_moved"] == {renumbered: {"id": mutant.id, "reason": "why"}}
    _record(recorded, item, {mutant.id: outcome}, Reasons({"feat.patch": {mutant.id: "why"}}))
    assert "reasons_moved" not in recorded["feat.patch"]


def test_the_key_follows_the_imported_platforms_pins_not_another_platforms():
    import dataclasses

    from forkbuild.series.config import load_series

    series = load_series(Path(__file__).resolve().parents[2] / "series.toml")
    entry = series.patches[0]
    key = patch_key(series, entry)
    x86 = tuple(pin for pin in series.upstream.wheels if pin.platform == "linux/amd64")
    assert series.upstream.wheels[0].platform == "linux/amd64" and len(x86) < len(series.upstream.wheels)
    only_x86 = dataclasses.replace(series, upstream=dataclasses.replace(series.upstream, wheels=x86))
    assert patch_key(only_x86, entry) == key  # adding the aarch64 pins left the results current
    moved = dataclasses.replace(x86[0], sha256="0" * 64)
    other = dataclasses.replace(series, upstream=dataclasses.replace(series.upstream, wheels=(moved, *x86[1:])))
    assert patch_key(other, entry) != key
