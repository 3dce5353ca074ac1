"""Guards out of the conflict zone: series.toml declares every guard, forkbuild
generates the declarations of exactly the features a build holds into a module
(the last commit of every applied tree, never exported), and the feature
patches touch only their own code. So leaving one feature's patch out, or
having it conflict, changes no other patch's outcome.

The fixture: a guards patch (switch type + the hook that registers the
generated module) and three features, each changing its own file."""

from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path

import pytest

from fixtures import DEFAULT_PATCHES, PatchSpec, make_series
from forkbuild.applier import ApplyPlan, apply_plan, apply_variant, plan_variant, read_state
from forkbuild.errors import ConfigError
from forkbuild.exporter import export_series
from forkbuild.io.git import Git
from forkbuild.series.combination import from_features, of_variant, whole_series
from forkbuild.series.config import Series
from forkbuild.worktree.engine import Outcome
from forkbuild.worktree.guards_module import GENERATED_TRAILER, module_path

ENVIRON = "python/pkg/environ.py"
HOOK = textwrap.dedent('''\
    def _declare_fork_guards():
        from pkg.fork_guards import GUARDS

        for name, kind, default, _feature in GUARDS:
            setattr(Envs, name, os.environ.get(name, default) in ("1", "on"))


    envs = Envs()
    ''')
SPECS = (
    PatchSpec(file="guards.patch", feature="guards", subject="environ: register the generated guards",
              body="The hook.", edits=((ENVIRON, "envs = Envs()\n", HOOK + "_declare_fork_guards()\n"),)),
    PatchSpec(file="alpha.patch", feature="alpha", subject="core: scale by three", body="Alpha.",
              guards=("DSV41_ALPHA",),
              edits=(("python/pkg/core.py", "    return value * 2\n",
                      "    if envs.DSV41_ALPHA:\n        return value * 3\n    return value * 2\n"),)),
    PatchSpec(file="beta.patch", feature="beta", subject="util: a lower limit", body="Beta.", guards=("DSV41_BETA",),
              edits=(("python/pkg/util.py", "def limit(value, ceiling=100):\n",
                      "def limit(value, ceiling=100):\n    from pkg.environ import envs\n"
                      "    ceiling = 50 if envs.DSV41_BETA else ceiling\n"),)),
    PatchSpec(file="gamma.patch", feature="gamma", subject="version: a fork suffix", body="Gamma.",
              guards=("DSV41_GAMMA",),
              edits=(("python/pkg/__init__.py", '__version__ = "1.0"\n', '__version__ = "1.0+fork"\n'),)),
)
FEATURES = ("alpha", "beta", "gamma")
FEATURES_TOML = '[features.guards]\ndescription = "the hook"\n' + "".join(
    f'\n[features.{name}]\ndescription = "{name}"\nrequires = ["guards"]\n'
    f'guards = [{{ env = "DSV41_{name.upper()}", type = "switch", default = "0" }}]\n' for name in FEATURES)
VARIANTS_TOML = textwrap.dedent('''\
    [variants.full]
    description = "everything"
    features = ["guards", "alpha", "beta", "gamma"]

    [variants.no_beta]
    description = "leaves beta out"
    features = ["guards", "alpha", "gamma"]

    [variants.stock]
    description = "upstream only"
    features = []
    ''')


def _module_series(tmp_path: Path, specs=SPECS, features_toml=FEATURES_TOML, variants_toml=VARIANTS_TOML):
    def configure(fixture) -> None:
        text = fixture.series_toml.read_text()
        fixture.series_toml.write_text(text.replace('default_variant = "full"\n',
                                                    'default_variant = "full"\nguards_module = "pkg.fork_guards"\n', 1))
    return make_series(tmp_path, specs=specs, features_toml=features_toml, variants_toml=variants_toml,
                       customize=configure)


def plan_without(series: Series, feature: str) -> ApplyPlan:
    """The whole series but `feature`'s patches (a build that leaves it out)."""
    return plan_variant(series, from_features(series, [name for name in series.features if name != feature]))


def outcomes(context, plan: ApplyPlan, dest: Path) -> dict[str, str]:
    return {record.entry.file: record.outcome for record in apply_plan(context=context, plan=plan, dest=dest).records}


def changed_by_leaving_out(fixture, tmp_path: Path) -> dict[str, dict[str, str]]:
    """For each feature: the other patches whose outcome differs from the full series' when it is left out."""
    context = fixture.context()
    baseline = outcomes(context, plan_variant(context.series, whole_series(context.series)), tmp_path / "full")
    changed = {}
    for feature in {entry.feature for entry in context.series.patches} - {"guards"}:
        got = outcomes(context, plan_without(context.series, feature), tmp_path / f"without-{feature}")
        changed[feature] = {file: outcome for file, outcome in got.items() if outcome != baseline[file]}
    return changed


def test_leaving_any_feature_out_changes_no_other_patch_outcome(tmp_path):
    fixture = _module_series(tmp_path)
    context = fixture.context()
    baseline = outcomes(context, plan_variant(context.series, whole_series(context.series)), tmp_path / "full")
    assert set(baseline.values()) == {Outcome.EXACT}
    assert changed_by_leaving_out(fixture, tmp_path) == {name: {} for name in FEATURES}


def test_the_check_sees_a_shared_registry(tmp_path):
    """The same check on the old design (every feature declares its guard in one
    region of environ.py) finds the dependency: it can fail."""
    changed = changed_by_leaving_out(make_series(tmp_path), tmp_path)
    assert changed["alpha"] == {"beta-limit.patch": Outcome.THREE_WAY}


def test_a_conflicting_patch_changes_no_other_patch_outcome(tmp_path):
    fixture = _module_series(tmp_path)
    patch = fixture.patches_dir / "beta.patch"
    # beta's context no longer matches upstream (nor the series' blobs): it conflicts.
    patch.write_text(patch.read_text().replace(" def limit(value, ceiling=100):", " def limit(value, ceiling=99):"))
    context = fixture.context()
    got = outcomes(context, plan_variant(context.series, whole_series(context.series)), tmp_path / "w")
    assert got == {"guards.patch": Outcome.EXACT, "alpha.patch": Outcome.EXACT, "beta.patch": Outcome.CONFLICT,
                   "gamma.patch": Outcome.EXACT}


def test_the_generated_module_declares_exactly_the_build_features_guards(tmp_path):
    fixture = _module_series(tmp_path)
    context = fixture.context()
    result = apply_variant(context=context, variant=of_variant(context.series, "no_beta"), dest=tmp_path / "w")
    tree = Git(tmp_path / "w")
    path = module_path(context.series)
    assert path == "python/pkg/fork_guards.py"
    assert tree.changed_files(f"{result.head_commit}^", result.head_commit) == [("A", path)]
    assert f"{GENERATED_TRAILER}: guards" in tree.log1("%B", result.head_commit)
    assert read_state(tmp_path / "w").head == result.head_commit
    assert read_state(tmp_path / "w").patches == ("guards.patch", "alpha.patch", "gamma.patch")
    # The hook registers it: the patched package reads the guards series.toml declares, and only those.
    sys.path.insert(0, str(tmp_path / "w" / "python"))
    try:
        for name in [name for name in sys.modules if name == "pkg" or name.startswith("pkg.")]:
            del sys.modules[name]
        environ = importlib.import_module("pkg.environ")
        assert (environ.envs.DSV41_ALPHA, environ.envs.DSV41_GAMMA) == (False, False)
        assert not hasattr(environ.Envs, "DSV41_BETA")
    finally:
        sys.path.remove(str(tmp_path / "w" / "python"))
        for name in [name for name in sys.modules if name == "pkg" or name.startswith("pkg.")]:
            del sys.modules[name]


def test_stock_stays_upstream(tmp_path):
    fixture = _module_series(tmp_path)
    result = apply_variant(context=fixture.context(), variant=of_variant(fixture.load(), "stock"), dest=tmp_path / "w")
    assert result.head_commit == result.base_commit


def test_same_series_same_generated_commit(tmp_path):
    fixture = _module_series(tmp_path)
    first = apply_variant(context=fixture.context(), variant=of_variant(fixture.load(), "full"), dest=tmp_path / "a")
    second = apply_variant(context=fixture.context(), variant=of_variant(fixture.load(), "full"), dest=tmp_path / "b")
    assert first.head_commit == second.head_commit


def test_export_never_exports_the_generated_commit(tmp_path):
    fixture = _module_series(tmp_path)
    assert fixture.cli("apply", "--all") == 0
    tree = fixture.root / ".forkbuild-work" / "series"
    before = {path.name: path.read_text() for path in fixture.patches_dir.iterdir()}
    plan = export_series(context=fixture.context(), tree=tree)
    assert [(patch.file, patch.action) for patch in plan.patches] == [(spec.file, "unchanged") for spec in SPECS]
    assert plan.removed == ()
    assert fixture.cli("export", "--check") == 0
    after = {path.name: path.read_text() for path in fixture.patches_dir.iterdir()}
    assert [line for line in after.pop("series").splitlines() if not line.startswith("#")] == [spec.file for spec in SPECS]
    assert after == before


@pytest.mark.parametrize("change, problem", [
    ("amend the generated commit", "is forkbuild's generated guards commit (Forkbuild-Generated trailer) but also "
                                   "changes python/pkg/core.py"),
    ("a patch edits the module", "changes python/pkg/fork_guards.py, which forkbuild generates from series.toml"),
])
def test_export_refuses_what_it_would_lose_or_misplace(tmp_path, change, problem):
    fixture = _module_series(tmp_path)
    assert fixture.cli("apply", "--all") == 0
    tree = Git(fixture.root / ".forkbuild-work" / "series")
    env = {"GIT_AUTHOR_NAME": "me", "GIT_AUTHOR_EMAIL": "me@example.com",
           "GIT_COMMITTER_NAME": "me", "GIT_COMMITTER_EMAIL": "me@example.com"}
    if change == "amend the generated commit":
        (tree.path / "python/pkg/core.py").write_text("# mine\n")
        tree.run("commit", "-q", "-a", "--amend", "--no-edit", env=env)
    else:
        (tree.path / "python/pkg/fork_guards.py").write_text("GUARDS = ()\n")
        tree.run("commit", "-q", "-a", "-m", "mine\n\nFeature: alpha", env=env)
    with pytest.raises(ConfigError) as error:
        export_series(context=fixture.context(), tree=tree.path)
    assert problem in str(error.value)


def test_a_series_without_a_guards_module_generates_nothing(series_fx, tmp_path):
    result = apply_variant(context=series_fx.context(), variant=of_variant(series_fx.load(), "full"), dest=tmp_path / "w")
    assert result.head_commit == result.records[-1].commit
    assert [spec.file for spec in DEFAULT_PATCHES] == [record.entry.file for record in result.records]


def test_guards_module_must_be_a_module_name(tmp_path):
    fixture = _module_series(tmp_path)
    fixture.series_toml.write_text(fixture.series_toml.read_text().replace('"pkg.fork_guards"', '"pkg/fork-guards.py"'))
    with pytest.raises(ConfigError) as error:
        fixture.load()
    assert "series.guards_module" in str(error.value) and "not a dotted Python module name" in str(error.value)


@pytest.mark.parametrize("name", ['x"""\nimport os; os.environ["PWNED"] = "1"\n"""', "a\\N", "b'\\u", "c\n#"])
def test_the_generated_module_writes_names_as_data_never_as_code(name, monkeypatch):
    """Names series.toml's parse would refuse (Series built directly) still cannot inject code
    or break the module: it compiles, runs nothing, and gives every name and value back."""
    from forkbuild.series.config import Feature, Guard, Upstream
    from forkbuild.worktree.guards_module import render

    guard = Guard(env="DSV41_" + name, type="str", default=name, feature=name)
    series = Series(path=Path("/x/series.toml"), name="s", default_variant="", guards_module="pkg.fork_guards",
                    upstream=Upstream(name="pkg", version="1.0", package_root="python", source="wheel", git=None,
                                      wheels=()),
                    features={name: Feature(name=name, description="d", guards=(guard,))}, patches=(), variants={})
    monkeypatch.delenv("PWNED", raising=False)
    namespace: dict = {}
    exec(compile(render(series, [name]), "fork_guards.py", "exec"), namespace)
    assert "PWNED" not in __import__("os").environ
    assert namespace["FEATURES"] == (name,)
    assert namespace["GUARDS"] == ((guard.env, "str", name, name),)


def test_a_guards_module_upstream_has_is_refused_never_overwritten(tmp_path):
    from forkbuild.checker import check_series

    fixture = _module_series(tmp_path)
    fixture.series_toml.write_text(fixture.series_toml.read_text().replace('"pkg.fork_guards"', '"pkg.util"'))
    context = fixture.context()
    for attempt in (lambda: apply_variant(context=context, variant=of_variant(context.series, "full"), dest=tmp_path / "w"),
                    lambda: check_series(context=context)):
        with pytest.raises(ConfigError) as error:
            attempt()
        assert "series.guards_module: 'pkg.util' is upstream's own python/pkg/util.py" in str(error.value)
    assert not (tmp_path / "w").exists()


def test_a_patch_changing_the_generated_module_is_refused_by_name(tmp_path):
    """It applied before the module existed: check said only "applies only with fuzz 1"."""
    from forkbuild.checker import check_series
    from forkbuild.errors import UnsafePatchError

    fixture = _module_series(tmp_path)
    context = fixture.context()
    last = context.series.patches[-1].path
    hunk = ("diff --git a/python/pkg/fork_guards.py b/python/pkg/fork_guards.py\nnew file mode 100644\n"
            "index 0000000..1111111\n--- /dev/null\n+++ b/python/pkg/fork_guards.py\n@@ -0,0 +1 @@\n+GUARDS = ()\n")
    text = last.read_text()
    last.write_text(text.replace("\n-- \n", "\n" + hunk + "-- \n", 1) if "\n-- \n" in text else text + hunk)
    for attempt in (lambda: apply_variant(context=context, variant=of_variant(context.series, "full"), dest=tmp_path / "w"),
                    lambda: check_series(context=context)):
        with pytest.raises(UnsafePatchError) as error:
            attempt()
        assert f"{last.name} change(s) python/pkg/fork_guards.py, which forkbuild generates" in str(error.value)
