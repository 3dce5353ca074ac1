"""Feature combinations (--features / --with / --without), the matrix strategies
and their output formats, through the real commands where there is one."""

from __future__ import annotations

import itertools
import json
import shutil
import zipfile
from pathlib import Path

import jsonschema
import pytest

from forkbuild import cli
from forkbuild.applier import read_state
from forkbuild.errors import ConfigError
from forkbuild.matrix import strategies
from forkbuild.series.combination import closure, of_variant, resolve
from forkbuild.series.config import parse_series
from forkbuild.wheel.builder import variant_version
from forkbuild.wheel.manifest import read_wheel
from test_testpatch import BETA
from test_testpatch import _make as make_testpatch_series
from wheelkit import wheel_series

BAKE_SCHEMA = json.loads((Path(__file__).parent / "data" / "docker-bake.schema.json").read_text())


def wide_series(tmp_path: Path, *, features: int = 8, conflicts: tuple[tuple[int, int], ...] = ((1, 2),),
                requires: tuple[tuple[int, int], ...] = ((3, 4),)):
    """A series of `features` features f0..: all require `core`; f1 conflicts with f2; f3 requires f4."""
    names = [f"f{number}" for number in range(features)]
    lines = ['[series]\nname = "wide"\ndefault_variant = "every"\n',
             '[upstream]\nname = "demo"\nversion = "1.0"\npackage_root = "python"\nsource = "wheel"\n',
             f'[[upstream.wheels]]\npython_tag = "cp311"\nfilename = "demo-1.0-py3-none-any.whl"\nsha256 = "{"0" * 64}"\n',
             '[features.core]\ndescription = "the base"\n']
    for number, name in enumerate(names):
        needs = ["core"] + [f"f{b}" for a, b in requires if a == number]
        against = [f"f{b}" for a, b in conflicts if a == number]
        lines.append(f'[features.{name}]\ndescription = "{name}"\nrequires = {json.dumps(needs)}\n'
                     f'conflicts = {json.dumps(against)}\n'
                     f'guards = [{{ env = "DSV41_{name.upper()}", type = "switch", default = "0" }}]\n')
    # The variant holds every feature that no earlier one conflicts with.
    allowed = []
    for number, name in enumerate(names):
        clash = {f"f{b}" for a, b in conflicts if a == number} | {f"f{a}" for a, b in conflicts if b == number}
        if not clash & set(allowed):
            allowed.append(name)
    lines.append(f'[variants.every]\ndescription = "no conflicts"\nfeatures = {json.dumps(["core", *allowed])}\n'
                 '[variants.every.env]\nTP_SIZE = "4"\nDSV41_F0 = "1"\nDSV41_F1 = "1"\n')
    lines.append('[variants.stock]\ndescription = "nothing"\nfeatures = []\n')
    path = tmp_path / "series.toml"
    path.write_text("\n".join(lines))
    return parse_series(path.read_text(), path=path)


# -- resolution ---------------------------------------------------------------

def test_features_add_what_they_require_with_a_note(tmp_path):
    series = wide_series(tmp_path)
    combination = resolve(series, features=["f3"])
    assert combination.features == ("core", "f3", "f4")
    assert any("core added: required by f3" in note for note in combination.notes)
    assert any("f4 added: required by f3" in note for note in combination.notes)
    assert combination.name.startswith("combo-") and combination.base == "" and dict(combination.env) == {}


def test_a_conflict_is_an_error_naming_both(tmp_path):
    series = wide_series(tmp_path)
    with pytest.raises(ConfigError) as caught:
        resolve(series, features=["f1", "f2"])
    assert "f1 conflicts with f2" in caught.value.message


def test_unknown_feature_is_named_with_a_near_miss(tmp_path):
    with pytest.raises(ConfigError) as caught:
        resolve(wide_series(tmp_path), variant="every", with_features=["f11"])
    assert "unknown feature 'f11'" in caught.value.message and "perhaps you meant 'f1'" in caught.value.message


def test_without_a_required_feature_is_refused_not_silently_re_added(tmp_path):
    with pytest.raises(ConfigError) as caught:
        resolve(wide_series(tmp_path), variant="every", without_features=["f4"])
    assert "--without f4: f3 requires it" in caught.value.message


def test_with_and_without_are_relative_to_the_variant_and_keep_its_defaults(tmp_path):
    series = wide_series(tmp_path)
    combination = resolve(series, variant="every", without_features=["f1"])
    assert "f1" not in combination.features and "f0" in combination.features
    assert combination.base == "every"
    # f1's guard goes with f1; the variant's settings and other guards stay.
    assert dict(combination.env) == {"TP_SIZE": "4", "DSV41_F0": "1"}
    assert not combination.is_variant


def test_a_set_equal_to_a_variant_is_that_variant(tmp_path):
    series = wide_series(tmp_path)
    assert resolve(series, variant="every", with_features=["f0"]).name == "every"
    assert resolve(series, features=[]).name == "stock"


def test_combination_names_are_stable_and_versions_hash_the_content(tmp_path):
    series = wide_series(tmp_path)
    one, again = resolve(series, features=["f0"]), resolve(series, features=["f0"])
    other = resolve(series, features=["f0"], variant="every")  # other runtime defaults: another build
    assert one == again and one.name != other.name
    assert variant_version(series, one).startswith(f"1.0+combo.{one.content_hash(series)[:10]}")
    assert variant_version(series, of_variant(series, "every")) == variant_version(series, of_variant(series, "every"))
    assert one.content_hash(series) != other.content_hash(series)


# -- strategies ---------------------------------------------------------------

def _valid(series, row) -> bool:
    """Written out from series.toml's data, independent of the code under test."""
    closed = all(needed in row for name in row for needed in series.features[name].requires)
    return closed and not any(other in row for name in row for other in series.features[name].conflicts)


def _may_coexist(series, a, b) -> bool:
    row = {a, b}
    while not all(needed in row for name in row for needed in series.features[name].requires):
        row |= {needed for name in row for needed in series.features[name].requires}
    return _valid(series, frozenset(row))


def _all_subsets(series):
    names = list(series.features)
    return (set(row) for size in range(len(names) + 1) for row in itertools.combinations(names, size))


@pytest.mark.parametrize("shape", [dict(features=8), dict(features=12, conflicts=((1, 2), (5, 6), (7, 1))),
                                   dict(features=5, conflicts=(), requires=())])
def test_pairwise_covers_every_feasible_pair_with_valid_rows(tmp_path, shape):
    series = wide_series(tmp_path, **shape)
    matrix = strategies.build_matrix(series, "pairwise")
    names = list(series.features)
    rows = [frozenset(combination.features) for combination in matrix.combinations]
    assert all(_valid(series, row) for row in rows)
    covered = set().union(*({((a, a in row), (b, b in row)) for a, b in itertools.combinations(names, 2)}
                            for row in rows))
    assert strategies.feasible_pairs(series) <= covered
    # every two features that may coexist are built together somewhere; conflicting ones never
    for a, b in itertools.combinations(names, 2):
        together = any(a in row and b in row for row in rows)
        assert together == _may_coexist(series, a, b), (a, b)
    assert matrix.lower_bound <= len(matrix.combinations) < len(strategies.valid_subsets(series))


def test_pairwise_lower_bound_is_the_known_optimum_without_constraints(tmp_path):
    # 5 free binary factors (core aside): the smallest strength-2 covering array has 6 rows.
    series = wide_series(tmp_path, features=5, conflicts=(), requires=())
    assert strategies.pairwise_lower_bound(series) == 6


def test_each_is_stock_then_every_feature_alone_with_what_it_requires(tmp_path):
    series = wide_series(tmp_path)
    matrix = strategies.build_matrix(series, "each")
    assert matrix.combinations[0].name == "stock"
    assert [set(combination.features) for combination in matrix.combinations[1:]] == \
        [{"core"}] + [closure(series, [f"f{number}"]) for number in range(8)]


@pytest.mark.parametrize("strategy", ["each", "pairwise", "all"])
def test_a_feature_without_a_patch_is_in_no_combination(tmp_path, strategy):
    """`forkbuild new`'s feature waits `ported = false` until its patch is exported: a combination
    holding it (or one that requires it) would be a build claiming a feature it lacks."""
    text = wide_series(tmp_path).path.read_text()
    # f4 (required by f3) waits for its patch; the variant leaves both out.
    text = text.replace('[features.f4]\n', '[features.f4]\nported = false\n').replace('"f3", "f4", ', "")
    path = tmp_path / "series.toml"
    path.write_text(text)
    series = parse_series(text, path=path)
    held = {name for combination in strategies.build_matrix(series, strategy, force=True).combinations
            for name in combination.features}
    assert "f4" not in held and "f3" not in held and "f5" in held
    for asked in (dict(features=["f3"]), dict(variant="every", with_features=["f4"])):
        with pytest.raises(ConfigError) as caught:
            resolve(series, **asked)
        assert "f4: no patch yet (`ported = false` in series.toml)" in caught.value.message


def test_all_is_every_valid_subset_and_refuses_above_the_limit(tmp_path):
    series = wide_series(tmp_path, features=5)
    brute = [row for row in _all_subsets(series) if _valid(series, frozenset(row))]
    with pytest.raises(ConfigError) as caught:
        strategies.build_matrix(series, "all", limit=len(brute) - 1)
    assert f"{len(brute)} valid combinations, more than the limit" in caught.value.message
    matrix = strategies.build_matrix(series, "all", limit=len(brute) - 1, force=True)
    assert sorted(map(sorted, (c.features for c in matrix.combinations))) == sorted(map(sorted, brute))


# -- through the commands -------------------------------------------------------

@pytest.fixture
def wheel_fx(tmp_path):
    """wheelkit's series (base; fast requires base; variants stock, full) with its wheel in the cache."""
    series_dir, cache, _ = wheel_series(tmp_path)
    return lambda *args: cli.main(["-C", str(series_dir), "--cache", str(cache), *args]), series_dir


def test_build_wheel_with_features_builds_the_combination(wheel_fx, tmp_path, capsys):
    run, _ = wheel_fx
    assert run("build-wheel", "--features", "fast", "--out", str(tmp_path / "out")) == 0
    (wheel,) = sorted((tmp_path / "out").glob("*.whl"))
    manifest = read_wheel(wheel)
    assert wheel.name.startswith("demo-1.0+combo.") and manifest.variant.startswith("combo-")
    assert manifest.features == ("base", "fast") and manifest.base_variant == ""
    assert [patch.file for patch in manifest.patches] == ["base.patch", "fast.patch"]
    assert "DSV41_FAST" not in manifest.env_defaults  # no base variant: guards at their defaults
    with zipfile.ZipFile(wheel) as archive:
        assert archive.read("demo/core.py") == b"def answer():\n    return 42  # fast\n"
    assert "base added: required by fast" in capsys.readouterr().err


def test_build_wheel_without_keeps_the_variants_other_defaults(wheel_fx, tmp_path):
    run, _ = wheel_fx
    assert run("build-wheel", "--variant", "full", "--without", "fast", "--out", str(tmp_path / "out")) == 0
    (wheel,) = sorted((tmp_path / "out").glob("*.whl"))
    manifest = read_wheel(wheel)
    assert manifest.features == ("base",) and manifest.base_variant == "full"
    assert manifest.env_defaults == {"MODEL_PATH": "/models/demo", "TP_SIZE": "4"}
    with zipfile.ZipFile(wheel) as archive:
        assert archive.read("demo/core.py") == b"def answer():\n    return 41\n" and "demo/base.py" in archive.namelist()


def test_apply_with_features_applies_the_combinations_patches(series_fx, tmp_path):
    assert series_fx.cli("apply", "--features", "alpha", "--dir", str(tmp_path / "w")) == 0
    state = read_state(tmp_path / "w")
    assert state is not None and state.patches == ("guards.patch", "alpha-scale.patch")
    assert series_fx.cli("apply", "--all", "--features", "alpha", "--dir", str(tmp_path / "x")) == 2


def test_conflicting_features_on_the_command_line_exit_2(series_fx, capsys):
    assert series_fx.cli("build-wheel", "--features", "alpha,gamma") == 2
    assert "unknown feature 'gamma'" in capsys.readouterr().err


def test_matrix_json_and_github_formats(series_fx, capsys):
    assert series_fx.cli("matrix", "--strategy", "each", "--format", "json") == 0
    items = json.loads(capsys.readouterr().out)
    assert items[0] == {"name": "stock", "features": []}
    assert [item["features"] for item in items[1:]] == [["guards"], ["guards", "alpha"], ["guards", "beta"]]
    assert series_fx.cli("matrix", "--strategy", "pairwise", "--format", "github") == 0
    include = json.loads(capsys.readouterr().out)["include"]
    assert {"name", "features"} == set(include[0]) and any(item["features"] == "guards,alpha,beta" for item in include)


def test_matrix_bake_file_is_a_valid_bake_file_with_one_target_per_combination(wheel_fx, tmp_path):
    run, series_dir = wheel_fx
    shutil.copytree(Path(__file__).parents[2] / "docker", series_dir / "docker")  # the image recipe
    out = tmp_path / "bake" / "docker-bake.json"
    assert run("matrix", "--strategy", "each", "--format", "bake", "--out", str(out)) == 0
    bake = json.loads(out.read_text())
    jsonschema.validate(bake, BAKE_SCHEMA)
    assert bake["group"]["default"]["targets"] == list(bake["target"])
    assert len(bake["target"]) == 3  # stock, base alone, fast (with base)
    for name, target in bake["target"].items():
        context = out.parent / target["context"]
        assert (context / target["dockerfile"]).is_file()
        (wheel,) = (context / "wheels").glob("*.whl")
        combination, _, arch = name.rpartition("-")  # the fixture's pure wheels: this machine's platform
        assert read_wheel(wheel).variant == combination and target["platforms"] == [f"linux/{arch}"]
        assert target["args"]["BASE_IMAGE"] == "${FORKBUILD_BASE_IMAGE}"
        assert target["tags"][0].endswith(f":{combination}-wheel-{arch}")
    assert "FORKBUILD_BASE_IMAGE" in bake["variable"]


def test_bake_schema_rejects_what_bake_would():
    # The schema is only worth something if it can fail: a misspelt attribute and a bad target name.
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"target": {"a": {"dockerfle": "Dockerfile"}}}, BAKE_SCHEMA)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"target": {"a b": {}}}, BAKE_SCHEMA)


def test_matrix_test_patch_gives_one_table_and_json_with_each_combinations_outcome(tmp_path, capsys):
    # The fixture series lacks alpha's patch: every combination holding alpha must fail
    # (its guard-on test finds stock behaviour), every other one pass.
    root = make_testpatch_series(tmp_path, specs=(BETA,))
    code = cli.main(["-C", str(root), "--cache", str(tmp_path / "cache"), "matrix", "--strategy", "each",
                     "--test-patch", "--from-tree"])
    report = json.loads((root / "build" / "test-patch" / "matrix-each.json").read_text())
    outcomes = {tuple(row["features"]): row for row in report["combinations"]}
    assert set(outcomes) == {(), ("guards",), ("guards", "alpha"), ("guards", "beta")}
    assert outcomes["guards", "alpha"]["outcome"] == "fail"
    assert "alpha:guard_on" in outcomes["guards", "alpha"]["failing"]
    assert all(outcomes[key]["outcome"] == "pass" for key in [(), ("guards",), ("guards", "beta")]), outcomes
    assert code == 1
    assert "test-patch over the each matrix" in capsys.readouterr().err
