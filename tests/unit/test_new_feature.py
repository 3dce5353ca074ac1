"""`forkbuild new`: the feature table, variant membership and commit template; the
README's "Adding or changing a patch" recipe, run as written."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from fixtures import SeriesFixture, make_series
from forkbuild.errors import ConfigError, ForkbuildError
from forkbuild.new_feature import NewFeature, commit_template, parse_guard, plan_new_feature
from forkbuild.series.combination import whole_series

README = Path(__file__).resolve().parents[2] / "README.md"


def _tp4_series(tmp_path: Path) -> SeriesFixture:
    """The fixture series with the README's variant name: `full` is called tp4."""
    def rename(fx: SeriesFixture) -> None:
        text = fx.series_toml.read_text()
        fx.series_toml.write_text(text.replace('default_variant = "full"', 'default_variant = "tp4"')
                                  .replace("[variants.full]", "[variants.tp4]"))
    return make_series(tmp_path, customize=rename)


def _script(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def readme_recipe() -> str:
    text = README.read_text()
    block = re.search(r"<!-- recipe: new-patch -->\n```sh\n(.*?)```", text, re.DOTALL)
    assert block, "README lost its new-patch recipe block"
    return block[1]


def test_the_readme_recipe_runs_as_written(tmp_path):
    fx = _tp4_series(tmp_path)
    tools = tmp_path / "bin"
    tools.mkdir()
    _script(tools / "forkbuild", f'#!/bin/sh\nexec "{sys.executable}" -m forkbuild "$@"\n')
    # The two human steps, scripted: the editor makes the change (the fixture's
    # package is pkg/, not sglang/, whatever path the README names) ...
    _script(tools / "edit-sglang", textwrap.dedent(f'''\
        #!{sys.executable}
        import pathlib, sys
        assert len(sys.argv) == 2, sys.argv
        if sys.argv[1].startswith("tests/patches/"):  # the feature's test module (the fixture has no such folder)
            pathlib.Path(sys.argv[1]).parent.mkdir(parents=True, exist_ok=True)
            pathlib.Path(sys.argv[1]).write_text('FEATURE = "hello_log"\\n')
            sys.exit(0)
        environ = pathlib.Path("python/pkg/environ.py")
        environ.write_text(environ.read_text().replace(
            "    # -- feature: beta\\n",
            '    # -- feature: hello_log\\n    DSV41_HELLO_LOG = os.environ.get("DSV41_HELLO_LOG", "0") == "1"\\n'
            "    # -- feature: beta\\n"))
        util = pathlib.Path("python/pkg/util.py")
        util.write_text(util.read_text() + "\\n\\ndef hello():\\n    from pkg.environ import envs\\n"
                        "    return 'hello' if envs.DSV41_HELLO_LOG else ''\\n")
        '''))
    # ... and the message is written over the template's placeholder lines.
    _script(tools / "write-message", textwrap.dedent(f'''\
        #!{sys.executable}
        import pathlib, sys
        path = pathlib.Path(sys.argv[1])
        text = path.read_text()
        text = text.replace("hello_log: <what the patch changes, one line>", "util: hello() when DSV41_HELLO_LOG is on")
        text = text.replace("<why: the problem, how the guard switches it, what was measured>", "A greeting.")
        path.write_text(text)
        '''))
    # nox -s test-patch needs the torch test venv (minutes): the shim records the call.
    _script(tools / "nox", f'#!/bin/sh\necho "$@" >> "{tmp_path / "nox-calls"}"\n')
    env = {**os.environ, "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}", "EDITOR": str(tools / "edit-sglang"),
           "GIT_EDITOR": str(tools / "write-message"), "GIT_AUTHOR_NAME": "A", "GIT_AUTHOR_EMAIL": "a@example.com",
           "GIT_COMMITTER_NAME": "A", "GIT_COMMITTER_EMAIL": "a@example.com"}
    comment = "# Features of the fixture series."
    assert comment in fx.series_toml.read_text()

    done = subprocess.run(["bash", "-e", "-c", readme_recipe()], cwd=fx.root, env=env, capture_output=True, text=True)

    assert done.returncode == 0, done.stdout + done.stderr
    # The everyday path warns of nothing; export says what it did with the waiting feature.
    assert "warning" not in done.stderr, done.stderr
    assert "feature hello_log has a patch: its `ported = false` marker is removed, and it joins tp4" in done.stderr
    patch = (fx.patches_dir / "hello-log.patch").read_text()
    assert "Feature: hello_log" in patch and "Guard: DSV41_HELLO_LOG" in patch and "+def hello():" in patch
    series = tomllib.loads(fx.series_toml.read_text())
    assert {"file": "hello-log.patch", "feature": "hello_log"} in series["patches"]
    assert "hello_log" in series["variants"]["tp4"]["features"]
    assert series["features"]["hello_log"] == {
        "description": "", "requires": ["guards"],
        "guards": [{"env": "DSV41_HELLO_LOG", "type": "switch", "default": "0"}]}
    assert comment in fx.series_toml.read_text()
    assert "hello-log.patch" in (fx.patches_dir / "series").read_text()
    assert (fx.root / "tests" / "patches" / "test_hello_log.py").read_text() == 'FEATURE = "hello_log"\n'
    assert [line.split() for line in (tmp_path / "nox-calls").read_text().splitlines()] == [
        ["-s", "test-patch(tp4)"], ["-s", "mutate", "--", "--variant", "tp4", "--patch", "hello-log.patch"]]


def test_new_places_the_table_after_the_features_and_keeps_the_file_otherwise(series_fx):
    before = series_fx.series_toml.read_text()
    assert series_fx.cli("new", "gamma", "--guard", "DSV41_GAMMA:int:3", "--variant", "full", "lite",
                         "--requires", "guards", "--description", "a third one") == 0
    after = series_fx.series_toml.read_text()
    table = ('[features.gamma]\ndescription = "a third one"\nported = false\nrequires = ["guards"]\n'
             'guards = [{ env = "DSV41_GAMMA", type = "int", default = "3" }]\n')
    beta_end = 'guards = [{ env = "DSV41_BETA", type = "switch", default = "0" }]\n'
    assert beta_end + "\n" + table in after
    # Nothing else moved: removing the addition gives the file back. Without a patch, gamma waits in
    # no variant (every finished command leaves a series `check` accepts); export adds it to these:
    assert after.replace("\n" + table, "") == before
    assert (series_fx.root / ".forkbuild-work" / "new" / "gamma.variants").read_text() == "full\nlite\n"
    assert series_fx.cli("check") == 0
    template = (series_fx.root / ".forkbuild-work" / "gamma.commit").read_text()
    assert "Feature: gamma\nGuard: DSV41_GAMMA\nForwarded: no\nPatch: gamma.patch\n" in template


def test_new_defaults_to_the_default_variant_and_a_rerun_changes_nothing(series_fx):
    assert series_fx.cli("new", "gamma", "--requires", "guards") == 0
    first = series_fx.series_toml.read_bytes()
    assert (series_fx.root / ".forkbuild-work" / "new" / "gamma.variants").read_text() == "full\n"
    template = series_fx.root / ".forkbuild-work" / "gamma.commit"
    template.unlink()  # as if killed between the two writes
    assert series_fx.cli("new", "gamma", "--requires", "guards") == 0
    assert series_fx.series_toml.read_bytes() == first
    assert template.is_file()
    # A template the person wrote their message into is theirs: a re-run keeps it and says so.
    template.write_text("gamma: what I wrote\n\nFeature: gamma\n")
    assert series_fx.cli("new", "gamma", "--requires", "guards") == 0
    assert template.read_text() == "gamma: what I wrote\n\nFeature: gamma\n"


def test_new_refuses_what_would_make_series_toml_invalid_and_writes_nothing(series_fx):
    before = series_fx.series_toml.read_bytes()
    # lite leaves alpha out; a feature requiring alpha cannot go into lite.
    with pytest.raises(ConfigError, match=r"variants.lite.features .*gamma requires alpha"):
        plan_new_feature(series_fx.load(), name="gamma", description="", guards=[], variants=["lite"],
                         requires=["alpha"], patch=None)
    with pytest.raises(ConfigError, match=r"unknown variant 'ful' \(perhaps you meant 'full'\?\)"):
        plan_new_feature(series_fx.load(), name="gamma", description="", guards=[], variants=["ful"],
                         requires=[], patch=None)
    with pytest.raises(ConfigError, match=r"features.alpha \(line \d+\) exists already with guards"):
        plan_new_feature(series_fx.load(), name="alpha", description="", guards=["DSV41_ALPHA:int:1"],
                         variants=[], requires=[], patch=None)
    with pytest.raises(ForkbuildError, match="already the patch of feature 'beta'"):
        plan_new_feature(series_fx.load(), name="gamma", description="", guards=[], variants=[],
                         requires=[], patch="beta-limit")
    assert series_fx.cli("new", "Gamma") != 0
    assert series_fx.series_toml.read_bytes() == before


@pytest.mark.parametrize(("spec", "message"), [
    ("DSV41_X:switch", "expected ENV:TYPE:DEFAULT"),
    ("X_FOO:switch:0", "must be DSV41_"),
    ("DSV41_X:swtch:0", "perhaps you meant 'switch'"),
    ("DSV41_X:int:many", "does not fit type int"),
])
def test_bad_guard_specs_are_named(spec, message):
    with pytest.raises(ForkbuildError, match=message):
        parse_guard(spec)


def test_a_guard_default_may_hold_colons():
    assert parse_guard("DSV41_CAP:str:conf:0.5").default == "conf:0.5"


def test_export_of_an_unknown_feature_points_at_new(series_fx, capsys):
    from fixtures import commit_all, edit
    from forkbuild.applier import apply_variant
    from forkbuild.io.git import Git

    tree = series_fx.root / ".forkbuild-work" / "series"
    apply_variant(context=series_fx.context(), variant=whole_series(series_fx.load()), dest=tree)
    edit(tree, "python/pkg/util.py", "def limit(", "def limited(")
    commit_all(Git(tree), "util: rename\n\nFeature: hello_log\nGuard: DSV41_HELLO_LOG\n")
    assert series_fx.cli("export") == 2
    err = capsys.readouterr().err
    assert "is not a feature of series.toml" in err
    command = "forkbuild new hello_log --guard DSV41_HELLO_LOG:switch:0 --variant full"
    assert "hint: add the feature to series.toml and a variant first" in err and command in err
    # The hint is safe to follow: after it, the same export goes through.
    assert series_fx.cli(*command.split()[1:]) == 0
    assert series_fx.cli("export") == 0
    assert "hello_log" in series_fx.load().variants["full"].features


@pytest.mark.parametrize("trailers", [
    "Feature: hello;touch${IFS}pwned\nGuard: DSV41_HELLO_LOG\n",  # not a name `new` takes: shell text in the hint
    "Feature: hello_log\nGuard: $(touch pwned)\n",  # a guard `new` would not take either
    "Feature: Full\n",  # a near miss of a known feature: the trailer is the mistake
], ids=["shell-in-feature", "shell-in-guard", "near-miss"])
def test_an_unknown_feature_hint_never_carries_trailer_text_new_would_not_take(series_fx, capsys, trailers):
    from fixtures import commit_all, edit
    from forkbuild.applier import apply_variant
    from forkbuild.io.git import Git

    tree = series_fx.root / ".forkbuild-work" / "series"
    apply_variant(context=series_fx.context(), variant=whole_series(series_fx.load()), dest=tree)
    series_fx.series_toml.write_text(series_fx.series_toml.read_text().replace("[features.", "[features.full]\n"
                                     'description = "x"\n\n[features.', 1))
    edit(tree, "python/pkg/util.py", "def limit(", "def limited(")
    commit_all(Git(tree), f"util: rename\n\n{trailers}")
    assert series_fx.cli("export") == 2
    hint = capsys.readouterr().err.split("hint: ", 1)[1]
    assert "$" not in hint and ";" not in hint.split("(", 1)[0]
    if "hello_log" in trailers:
        assert "forkbuild new hello_log --variant full" in hint
    else:
        assert "forkbuild new" not in hint and hint.startswith("reword it in the work tree")


def test_a_message_left_as_the_template_wrote_it_is_refused_by_export_and_check(series_fx, capsys):
    """git commit -t aborts only while the whole message is the template's: a commit whose subject
    or body still holds a placeholder (-F, a body left as it was) is no patch to export or keep."""
    from fixtures import commit_all, edit
    from forkbuild.applier import apply_variant
    from forkbuild.io.git import Git

    assert series_fx.cli("new", "hello_log", "--guard", "DSV41_HELLO_LOG:switch:0", "--variant", "full") == 0
    template = (series_fx.root / ".forkbuild-work" / "hello_log.commit").read_text()
    message = "\n".join(line for line in template.splitlines() if not line.startswith("#"))
    tree = Git(apply_variant(context=series_fx.context(), variant=whole_series(series_fx.load()),
                             dest=series_fx.root / ".forkbuild-work" / "series").dest)
    edit(tree.path, "python/pkg/util.py", "def limit(", "def limited(")
    commit_all(tree, message.replace("hello_log: <what the patch changes, one line>", "util: limited()"))
    capsys.readouterr()
    assert series_fx.cli("export") == 2
    err = capsys.readouterr().err
    assert "still holds the commit template's '<why: the problem" in err and "git commit --amend" in err
    assert not (series_fx.patches_dir / "hello-log.patch").exists()
    # The hint followed (the message reworded), the export goes through.
    tree.out("commit", "--amend", "-m", message.replace("hello_log: <what the patch changes, one line>", "util: limited()")
             .replace("<why: the problem, how the guard switches it, what was measured>", "A shorter name."))
    assert series_fx.cli("export") == 0
    # A patch file that holds a placeholder (written by hand) fails check.
    patch = series_fx.patches_dir / "hello-log.patch"
    patch.write_text(patch.read_text().replace("A shorter name.", "<why: the problem, how the guard switches it, "
                                                                  "what was measured>"))
    capsys.readouterr()
    assert series_fx.cli("check") != 0
    assert "patches/hello-log.patch: its message still holds the commit template's" in capsys.readouterr().err


def test_the_template_names_the_patch_and_every_guard():
    feature = NewFeature(name="x", description="", variants=("tp4",), requires=(), patch="x.patch",
                         guards=(parse_guard("DSV41_X:switch:0"), parse_guard("DSV41_X_MAX:int:4")))
    text = commit_template(feature)
    assert text.splitlines()[0] == "x: <what the patch changes, one line>"
    assert "Feature: x\nGuard: DSV41_X\nGuard: DSV41_X_MAX\nForwarded: no\nPatch: x.patch\n" in text


@pytest.mark.parametrize("record", [None, b"\xff\xfe no-such-variant\n"])
def test_export_warns_about_a_feature_in_no_variant(series_fx, capsys, record):
    from fixtures import commit_all, edit
    from forkbuild.applier import apply_variant
    from forkbuild.io.git import Git

    assert series_fx.cli("new", "gamma", "--variant", "stock") == 0
    joins = series_fx.root / ".forkbuild-work" / "new" / "gamma.variants"
    if record is None:
        joins.unlink()  # `new` ran on another machine
    else:
        joins.write_bytes(record)  # damaged: before, export stopped with a UnicodeDecodeError traceback
    tree = series_fx.root / ".forkbuild-work" / "series"
    apply_variant(context=series_fx.context(), variant=whole_series(series_fx.load()), dest=tree)
    edit(tree, "python/pkg/util.py", "def limit(", "def limited(")
    commit_all(Git(tree), "util: rename\n\nFeature: gamma\n")
    assert series_fx.cli("export") == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "feature gamma is in no variant" in err
    assert "its `ported = false` marker is removed (add it to the variants that should build it)" in err


def test_new_refuses_a_guard_another_feature_owns(series_fx):
    """Before, `new --guard` accepted it (issue 38): a guard belongs to one feature."""
    before = series_fx.series_toml.read_bytes()
    with pytest.raises(ConfigError, match="DSV41_ALPHA: already a guard of feature 'alpha'"):
        plan_new_feature(series_fx.load(), name="gamma", description="", guards=["DSV41_ALPHA:switch:0"],
                         variants=[], requires=[], patch=None)
    assert series_fx.cli("new", "gamma", "--guard", "DSV41_ALPHA:switch:0") == ConfigError.return_code
    assert series_fx.series_toml.read_bytes() == before


@pytest.mark.parametrize(("table", "conflict", "said"), [
    ("gamma", "alpha", "it conflicts with alpha there"),
    ("alpha", "gamma", "alpha conflicts with it there")])  # declared by a feature the variant holds
def test_export_leaves_a_feature_out_of_a_variant_it_no_longer_fits(series_fx, capsys, table, conflict, said):
    """series.toml changed between `new` and the first export: the join would make it invalid."""
    from fixtures import commit_all, edit
    from forkbuild.applier import apply_variant
    from forkbuild.io.git import Git

    assert series_fx.cli("new", "gamma", "--variant", "full", "--requires", "beta") == 0
    text = series_fx.series_toml.read_text()
    series_fx.series_toml.write_text(text.replace(f"[features.{table}]", f'[features.{table}]\nconflicts = ["{conflict}"]', 1))
    tree = series_fx.root / ".forkbuild-work" / "series"
    apply_variant(context=series_fx.context(), variant=whole_series(series_fx.load()), dest=tree)
    edit(tree, "python/pkg/util.py", "def limit(", "def limited(")
    commit_all(Git(tree), "util: rename\n\nFeature: gamma\nForwarded: no\n")
    capsys.readouterr()
    assert series_fx.cli("export") == 0
    assert f"feature gamma does not join full: {said}" in capsys.readouterr().err
    assert "gamma" not in series_fx.load().variants["full"].features
    assert series_fx.cli("check") == 0


def test_a_message_committed_with_the_templates_comment_lines_is_named_and_the_hint_drops_them(series_fx, capsys):
    """`git commit -F TEMPLATE` keeps the '#' lines git's editor drops: the trailers above them are then no
    trailers to git. Export names the lines (not "needs exactly one Feature: trailer (has 0)")."""
    from fixtures import commit_all, edit
    from forkbuild.applier import apply_variant
    from forkbuild.io.git import Git

    assert series_fx.cli("new", "hello_log", "--guard", "DSV41_HELLO_LOG:switch:0", "--variant", "full") == 0
    template = (series_fx.root / ".forkbuild-work" / "hello_log.commit").read_text()
    written = template.replace("hello_log: <what the patch changes, one line>", "util: limited()").replace(
        "<why: the problem, how the guard switches it, what was measured>", "A shorter name.")
    tree = Git(apply_variant(context=series_fx.context(), variant=whole_series(series_fx.load()),
                             dest=series_fx.root / ".forkbuild-work" / "series").dest)
    edit(tree.path, "python/pkg/util.py", "def limit(", "def limited(")
    commit_all(tree, written)  # as -F leaves it: the '#' lines kept
    capsys.readouterr()
    assert series_fx.cli("export") == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "still holds the commit template's '#' lines" in err and "needs exactly one" not in err
    assert not (series_fx.patches_dir / "hello-log.patch").exists()
    tree.out("-c", "core.editor=true", "commit", "--amend", "--no-edit", "--cleanup=strip")  # the hint followed
    assert series_fx.cli("export") == 0 and series_fx.cli("check") == 0
    assert "#" not in (series_fx.patches_dir / "hello-log.patch").read_text().split("\n---", 1)[0]
