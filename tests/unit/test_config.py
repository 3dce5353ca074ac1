"""series.toml validation: one test per kind of bad input, each naming the key and line."""

from __future__ import annotations

import os
import re
import textwrap
from pathlib import Path

import pytest

from forkbuild.errors import ConfigError
from forkbuild.series.combination import of_variant
from forkbuild.series.config import load_series

SHA = "0" * 64

VALID = """\
[series]
name = "demo"
default_variant = "full"

[upstream]
name = "demo"
version = "1.0"
package_root = "python"
source = "wheel"

[[upstream.wheels]]
python_tag = "py3"
filename = "demo-1.0-py3-none-any.whl"
sha256 = "{sha}"

[features.base]
description = "guard types"

[features.fast]
description = "go fast"
requires = ["base"]
guards = [{{ env = "DSV41_FAST", type = "switch", default = "0" }}]

[features.slow]
description = "go slow"
requires = ["base"]
conflicts = ["fast"]
guards = [{{ env = "DSV41_SLOW_LEVEL", type = "int", default = "2" }}]

[[patches]]
file = "base.patch"
feature = "base"
unguarded = "declares the guards"

[[patches]]
file = "fast.patch"
feature = "fast"

[[patches]]
file = "slow.patch"
feature = "slow"

[variants.full]
description = "base and fast"
features = ["base", "fast"]
env = {{ DSV41_FAST = "on" }}

[variants.calm]
features = ["base", "slow"]
""".format(sha=SHA)


def write_series(root: Path, text: str = VALID, *, patches=("base.patch", "fast.patch", "slow.patch")) -> Path:
    (root / "patches").mkdir(exist_ok=True)
    for name in patches:
        (root / "patches" / name).write_text(f"Subject: {name}\n\ndiff --git a/x b/x\n")
    path = root / "series.toml"
    path.write_text(textwrap.dedent(text))
    return path


def problems_of(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_series(path)
    return list(caught.value.problems)


def test_valid_series_loads_into_frozen_dataclasses(tmp_path):
    series = load_series(write_series(tmp_path))
    assert [entry.file for entry in series.patches_for("full")] == ["base.patch", "fast.patch"]
    assert [guard.env for guard in series.guards_for(["fast", "slow"])] == ["DSV41_FAST", "DSV41_SLOW_LEVEL"]
    assert series.variants["full"].env["DSV41_FAST"] == "on"
    with pytest.raises(AttributeError):
        series.name = "other"  # frozen


def test_content_hash_changes_with_patch_bytes_and_only_for_variants_holding_it(tmp_path):
    series = load_series(write_series(tmp_path))
    before = {name: of_variant(series, name).content_hash(series) for name in ("full", "calm")}
    (tmp_path / "patches" / "fast.patch").write_text("Subject: changed\n")
    after = {name: of_variant(series, name).content_hash(series) for name in ("full", "calm")}
    assert before["full"] != after["full"]
    assert before["calm"] == after["calm"]


def test_unknown_key_is_named_with_line_and_near_miss(tmp_path):
    path = write_series(tmp_path, VALID.replace('description = "go fast"', 'descripton = "go fast"'))
    [problem] = problems_of(path)
    assert problem.startswith("features.fast.descripton (line 20)")
    assert "perhaps you meant 'description'" in problem


def test_unknown_feature_in_variant_suggests_near_miss(tmp_path):
    path = write_series(tmp_path, VALID.replace('features = ["base", "fast"]', 'features = ["base", "fsat"]'))
    problems = problems_of(path)
    assert any("variants.full.features" in problem and "unknown feature 'fsat'" in problem
               and "perhaps you meant 'fast'" in problem for problem in problems)


def test_unknown_default_variant(tmp_path):
    path = write_series(tmp_path, VALID.replace('default_variant = "full"', 'default_variant = "ful"'))
    [problem] = problems_of(path)
    assert problem.startswith("series.default_variant (line 3)") and "perhaps you meant 'full'" in problem


def test_unknown_variant_lookup_suggests(tmp_path):
    series = load_series(write_series(tmp_path))
    with pytest.raises(ConfigError, match="perhaps you meant 'calm'"):
        series.variant("clam")


def test_missing_patch_file(tmp_path):
    path = write_series(tmp_path, patches=("base.patch", "fast.patch"))
    [problem] = problems_of(path)
    assert "patches/slow.patch does not exist" in problem and "(line 40)" in problem
    # A FIFO or directory in its place exists (ls shows it): the message says what is wrong with it.
    os.mkfifo(path.parent / "patches" / "slow.patch")
    assert problems_of(path) == [problem.replace("does not exist", "is not a regular file")]


def test_unlisted_patch_file(tmp_path):
    path = write_series(tmp_path, patches=("base.patch", "fast.patch", "slow.patch", "stray.patch"))
    [problem] = problems_of(path)
    assert "patches/stray.patch is not listed" in problem


def test_patch_listed_twice(tmp_path):
    text = VALID.replace('[variants.full]', '[[patches]]\nfile = "fast.patch"\nfeature = "fast"\n\n[variants.full]')
    [problem] = problems_of(write_series(tmp_path, text))
    assert problem.startswith("patches[3].file") and "already listed as patches[1]" in problem


def test_requires_cycle(tmp_path):
    text = VALID.replace('[features.base]\ndescription = "guard types"',
                         '[features.base]\ndescription = "guard types"\nrequires = ["slow"]')
    problems = problems_of(write_series(tmp_path, text))
    assert any("cycle:" in problem and "base" in problem and "slow" in problem for problem in problems)


def test_variant_with_conflicting_features(tmp_path):
    text = VALID.replace('features = ["base", "slow"]', 'features = ["base", "slow", "fast"]')
    problems = problems_of(write_series(tmp_path, text))
    assert any("variants.calm.features" in p and "slow conflicts with fast" in p for p in problems)


def test_variant_missing_a_required_feature(tmp_path):
    text = VALID.replace('features = ["base", "slow"]', 'features = ["slow"]')
    [problem] = problems_of(write_series(tmp_path, text))
    assert "slow requires base, which the variant leaves out" in problem


def test_variant_env_sets_guard_of_left_out_feature(tmp_path):
    text = VALID.replace('[variants.calm]', '[variants.calm]\nenv = { DSV41_FAST = "1" }')
    [problem] = problems_of(write_series(tmp_path, text))
    assert "variants.calm.env.DSV41_FAST" in problem and "guard of fast, which variant calm leaves out" in problem


def test_variant_env_value_must_fit_the_guard_type(tmp_path):
    text = VALID.replace('env = { DSV41_FAST = "on" }', 'env = { DSV41_FAST = "maybe" }')
    [problem] = problems_of(write_series(tmp_path, text))
    assert "variants.full.env.DSV41_FAST" in problem and "not a switch value" in problem


def test_guard_default_must_fit_its_type(tmp_path):
    text = VALID.replace('type = "int", default = "2"', 'type = "int", default = "two"')
    [problem] = problems_of(write_series(tmp_path, text))
    assert "features.slow.guards[0].default" in problem


def test_patch_with_unknown_feature(tmp_path):
    text = VALID.replace('file = "slow.patch"\nfeature = "slow"', 'file = "slow.patch"\nfeature = "slo"')
    problems = problems_of(write_series(tmp_path, text))
    assert any(p.startswith("patches[2].feature") and "perhaps you meant 'slow'" in p for p in problems)


def test_all_problems_are_reported_at_once(tmp_path):
    text = (VALID.replace('descripton', 'description')
            .replace('description = "go fast"', 'descripton = "go fast"')
            .replace('default_variant = "full"', 'default_variant = "nope"'))
    problems = problems_of(write_series(tmp_path, text, patches=("base.patch", "fast.patch")))
    assert len(problems) == 3


def test_invalid_toml_names_the_file(tmp_path):
    path = write_series(tmp_path, "[series\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_series(path)


def test_the_repository_series_is_valid():
    series = load_series(Path(__file__).resolve().parents[2] / "series.toml")
    assert series.default_variant in series.variants
    assert {"stock", "tp3", "tp4"} <= set(series.variants)


WRONG_TYPES = [
    ('source = "wheel"\n', 'source = "wheel"\ngit = "x"\n', "upstream.git (line 10): must be a table, not a string"),
    ('filename = "demo-1.0-py3-none-any.whl"', "filename = 3",
     "upstream.wheels[0].filename (line 13): must be a string, not an integer"),
    ('env = {{ DSV41_FAST = "on" }}'.format(), 'env = "x"', "variants.full.env (line 46): must be a table, not a string"),
    ('env = {{ DSV41_FAST = "on" }}'.format(), "env = { DSV41_FAST = 1 }",
     "variants.full.env (line 46): values must be strings (they become environment variables): DSV41_FAST"),
    ('{ env = "DSV41_FAST"', "{ env = 1", "features.fast.guards[0].env (line 22): must be a string, not an integer"),
    ('guards = [{ env = "DSV41_FAST", type = "switch", default = "0" }]', 'guards = "DSV41_FAST"',
     "features.fast.guards (line 22): must be an array of tables, not a string"),
    ('file = "fast.patch"\nfeature = "fast"', 'file = "fast.patch"\nfeature = 7',
     "patches[1].feature (line 37): must be a string, not an integer"),
    ('file = "fast.patch"', "file = true", "patches[1].file (line 36): must be a string, not a boolean"),
    ('default_variant = "full"', "default_variant = 1", "series.default_variant (line 3): must be a string, not an integer"),
    ('description = "go fast"', "description = []", "features.fast.description (line 20): must be a string, not an array"),
]


@pytest.mark.parametrize(("old", "new", "problem"), WRONG_TYPES, ids=[case[2].split(" ")[0] for case in WRONG_TYPES])
def test_a_value_of_the_wrong_type_is_a_problem_not_a_traceback(tmp_path, old, new, problem):
    assert old in VALID
    problems = problems_of(write_series(tmp_path, VALID.replace(old, new, 1)))
    assert problems == [problem]  # and nothing cascades from the skipped value


def test_every_wrong_type_is_reported_at_once(tmp_path):
    cases = [WRONG_TYPES[index] for index in (0, 1, 2, 4, 7, 8, 9)]  # the others edit the same lines
    text = VALID
    for old, new, _ in cases:
        assert old in text
        text = text.replace(old, new, 1)
    problems = problems_of(write_series(tmp_path, text))
    without_lines = [re.sub(r" \(line \d+\)", "", problem) for problem in problems]
    assert sorted(without_lines) == sorted(re.sub(r" \(line \d+\)", "", problem) for _, _, problem in cases)


def test_a_table_given_as_a_string(tmp_path):
    without_features = "\n".join(block for block in VALID.split("\n\n") if not block.startswith("[features."))
    problems = problems_of(write_series(tmp_path, 'features = "x"\n' + without_features))
    assert problems[0] == "features (line 1): must be a table, not a string"
    assert all("Traceback" not in problem for problem in problems)


def test_wheel_pins_need_a_tag_and_a_file_name_and_one_pin_per_tag(tmp_path):
    second = '[[upstream.wheels]]\npython_tag = "py3"\nfilename = "demo-1.0-py3-none-any.whl"\nsha256 = "{sha}"\n\n'.format(sha=SHA)
    text = VALID.replace('python_tag = "py3"', 'python_tag = ""', 1).replace(
        'filename = "demo-1.0-py3-none-any.whl"', 'filename = ""').replace("[features.base]", second + "[features.base]")
    problems = problems_of(write_series(tmp_path, text))
    assert problems == ["upstream.wheels[0].python_tag (line 12): is required (a non-empty string)",
                        "upstream.wheels[0].filename (line 13): is required (a non-empty string)"]
    text = VALID.replace("[features.base]", second + "[features.base]")
    assert problems_of(write_series(tmp_path, text)) == [
        "upstream.wheels[1].python_tag (line 17): 'py3' on any is pinned already by upstream.wheels[0]"]


def test_a_pin_names_a_wheel_of_a_build_platform_and_a_variant_only_pinned_platforms(tmp_path):
    text = VALID.replace('filename = "demo-1.0-py3-none-any.whl"', 'filename = "demo-1.0-cp311.whl"')
    assert problems_of(write_series(tmp_path, text)) == [
        "upstream.wheels[0].filename (line 13): 'demo-1.0-cp311.whl' is not a wheel file name"]
    text = VALID.replace('filename = "demo-1.0-py3-none-any.whl"', 'filename = "demo-1.0-cp311-cp311-win_amd64.whl"')
    assert problems_of(write_series(tmp_path, text)) == [
        "upstream.wheels[0].filename (line 13): 'demo-1.0-cp311-cp311-win_amd64.whl' is not a Linux x86_64 or "
        "aarch64 wheel (its platform tag names no build platform)"]
    arm = VALID.replace('python_tag = "py3"\nfilename = "demo-1.0-py3-none-any.whl"',
                        'python_tag = "cp311"\nfilename = "demo-1.0-cp311-cp311-manylinux_2_34_aarch64.whl"')
    series = load_series(write_series(tmp_path, arm))
    assert series.upstream.platforms == ("linux/arm64",)
    assert all(variant.platforms == ("linux/arm64",) for variant in series.variants.values())  # the default
    name = next(iter(series.variants))
    wrong = arm.replace(f"[variants.{name}]", f'[variants.{name}]\nplatforms = ["linux/amd64", "linux/arm46"]')
    assert [re.sub(r" \(line \d+\)", "", p) for p in problems_of(write_series(tmp_path, wrong))] == [
        f"variants.{name}.platforms: linux/amd64: no [[upstream.wheels]] pin for it (pinned: linux/arm64)",
        f"variants.{name}.platforms: unknown platform 'linux/arm46' (perhaps you meant 'linux/arm64'?) "
        "(one of linux/amd64, linux/arm64)"]


def test_a_pin_is_upstreams_release_for_its_python_tag(tmp_path):
    # A 0.5.23 wheel pinned under version 0.5.22 was built as sglang-0.5.22+tp4 (0.5.23's code).
    pinned = 'python_tag = "py3"\nfilename = "demo-1.0-py3-none-any.whl"'
    for wrong, problem in [
        ('python_tag = "py3"\nfilename = "demo-1.1-py3-none-any.whl"',
         "upstream.wheels[0].filename (line 13): 'demo-1.1-py3-none-any.whl' is release 1.1, not upstream.version '1.0'"),
        ('python_tag = "py3"\nfilename = "other-1.0-py3-none-any.whl"',
         "upstream.wheels[0].filename (line 13): 'other-1.0-py3-none-any.whl' is a wheel of other, not of "
         "upstream.name 'demo'"),
        ('python_tag = "cp312"\nfilename = "demo-1.0-cp311-cp311-manylinux_2_34_x86_64.whl"',
         "upstream.wheels[0].python_tag (line 12): 'cp312' is not the file's Python tag (cp311)")]:
        assert problems_of(write_series(tmp_path, VALID.replace(pinned, wrong))) == [problem]
    assert problems_of(write_series(tmp_path, VALID.replace('version = "1.0"', 'version = "1.0;$(x)"'))) == [
        "upstream.version (line 7): '1.0;$(x)': a version name is letters, digits and . _ + - (like 0.5.24.dev1), "
        "starting with a letter or digit: it names a cache tag and the report's file",
        "upstream.wheels[0].filename (line 13): 'demo-1.0-py3-none-any.whl' is release 1.0, not upstream.version "
        "'1.0;$(x)'"]
    pure = VALID.replace(pinned, 'python_tag = "cp311"\nfilename = "demo-1.0-py3-none-any.whl"')
    assert load_series(write_series(tmp_path, pure)).upstream.python_tags("linux/amd64") == ("cp311",)


# -- names and values that become code, command lines or environment variables (issue 38) --
BAD_NAMES = [
    ('[features.slow]', '[features."slow\\"\\"\\"x"]', 'features.slow"""x'),
    ('[features.slow]', '[features.Slow]', "features.Slow"),
    ('[features.slow]', '[features."sl\\nw"]', "is not a feature name"),
    ('env = "DSV41_SLOW_LEVEL"', 'env = "DSV41_"', "features.slow.guards[0].env"),
    ('env = "DSV41_SLOW_LEVEL"', 'env = "DSV41_A-B.C D"', "features.slow.guards[0].env"),
    ('env = "DSV41_SLOW_LEVEL"', 'env = "DSV41_SLOW\\nX"', "features.slow.guards[0].env"),
    ('env = "DSV41_SLOW_LEVEL"', 'env = "DSV41_FAST"', "features.slow.guards (line 28): DSV41_FAST is declared "
                                                        "already by feature fast"),
    ('env = {{ DSV41_FAST = "on" }}'.format(), 'env = { DSV41_FAST = "on", "A\\nRUN x" = "1" }',
     "variants.full.env.A\nRUN x"),
    ('[variants.full]', '[runtime]\nenv = { TP = ["4"] }\n\n[variants.full]', "runtime.env.TP (line 44): must be a "
                                                                             "string or a number, not an array"),
    ('[variants.full]', '[runtime]\nenv = { DAY = 2024-01-01 }\n\n[variants.full]', "runtime.env.DAY"),
    ('[variants.full]', '[runtime]\nenv = { T = { a = "1" } }\n\n[variants.full]', "runtime.env.T"),
    ('source = "wheel"\n', 'source = "wheel"\n[upstream.git]\nurl = "--upload-pack=touch /tmp/pwned"\n',
     "upstream.git.url (line 11): '--upload-pack=touch /tmp/pwned' starts with '-'"),
    ('source = "wheel"\n', 'source = "wheel"\n[upstream.git]\nurl = "ext::sh -c touch% /tmp/pwned"\n',
     "upstream.git.url"),
    ('source = "wheel"\n', 'source = "wheel"\n[upstream.git]\nurl = "https://x/y.git"\ncommit = "--output=/x"\n',
     "upstream.git.commit"),
    ('source = "wheel"\n', 'source = "wheel"\n[upstream.git]\nurl = "https://x/y.git"\ncommit = "abc123"\n',
     "is not a full commit id"),
]


@pytest.mark.parametrize(("old", "new", "expected"), BAD_NAMES, ids=range(len(BAD_NAMES)))
def test_a_name_or_value_that_would_become_code_or_an_option_is_refused(tmp_path, old, new, expected):
    assert old in VALID
    text = VALID.replace(old, new, 1)
    problems = problems_of(write_series(tmp_path, text))
    assert any(expected in problem for problem in problems), problems


def test_good_names_urls_and_commits_pass(tmp_path):
    text = VALID.replace('source = "wheel"\n', 'source = "wheel"\n[upstream.git]\nurl = "git@host:o/r.git"\n'
                         f'commit = "{"a" * 40}"\nref = "v1.0"\n', 1).replace(
        '[variants.full]', '[runtime]\nenv = { TP_SIZE = 4, MODEL = "/m" }\n\n[variants.full]')
    series = load_series(write_series(tmp_path, text))
    assert series.upstream.git.commit == "a" * 40 and series.runtime_env == {"TP_SIZE": "4", "MODEL": "/m"}
    for url in ("https://x.invalid/y.git", "/srv/repo.git", "file:///srv/repo", "../repo"):
        load_series(write_series(tmp_path, text.replace("git@host:o/r.git", url)))


@pytest.mark.parametrize("content", [b"[series]\nname = \"\xff\"\n", b"x = " + b"[" * 100_000])
def test_a_file_tomllib_cannot_take_is_a_config_error_naming_the_file(tmp_path, content):
    path = write_series(tmp_path)
    path.write_bytes(content)
    with pytest.raises(ConfigError) as caught:
        load_series(path)
    assert str(caught.value).startswith(f"{path}: 1 problem(s)")


def test_hazards_name_guards_of_the_series_with_valid_values_and_known_variants(tmp_path):
    name = next(iter(load_series(write_series(tmp_path, VALID)).variants))
    guard = re.search(r'env = "(DSV41_[A-Z0-9_]+)", type = "switch"', VALID)[1]
    good = VALID + f'\n[[hazards]]\nname = "h-1"\nvariants = ["{name}"]\nwhen = {{ {guard} = "1" }}\nreason = "r"\n'
    (hazard,) = load_series(write_series(tmp_path, good)).hazards
    assert (hazard.name, hazard.variants, dict(hazard.when), hazard.reason) == ("h-1", (name,), {guard: "1"}, "r")
    bad = VALID + '\n[[hazards]]\nname = "H 1"\nvariants = ["nope"]\nwhen = { DSV41_NOPE = "1" }\nreason = ""\n'
    problems = [re.sub(r" \(line \d+\)", "", p) for p in problems_of(write_series(tmp_path, bad))]
    assert "hazards[0].reason: is required (a non-empty string)" in problems
    assert "hazards[0].name: 'H 1': lower-case letters, digits and -" in problems
    known = ", ".join(sorted(load_series(write_series(tmp_path, VALID)).variants))
    # No near miss: the names it could have been are listed.
    assert f"hazards[0].variants: unknown variant 'nope' (known: {known})" in problems
    assert any(p.startswith("hazards[0].when.DSV41_NOPE: not a guard") for p in problems)


@pytest.mark.parametrize(("old", "new", "problem"), [
    ('{ env = "DSV41_SLOW_LEVEL", type = "int", default = "2" }',
     '{ env = "DSV41_SLOW_LEVEL", type = "int", default = "' + "9" * 400 + '" }', "is out of range for an int guard"),
    ('{ env = "DSV41_SLOW_LEVEL", type = "int", default = "2" }',
     '{ env = "DSV41_SLOW_LEVEL", type = "float", default = "nan" }', "'nan' is not a finite number"),
    ('{ env = "DSV41_SLOW_LEVEL", type = "int", default = "2" }',
     '{ env = "DSV41_SLOW_LEVEL", type = "float", default = "-inf" }', "'-inf' is not a finite number"),
    ('package_root = "python"', 'package_root = "/pkg"', "'/pkg' is not a relative path inside the tree"),
    ('package_root = "python"', 'package_root = "../../elsewhere"', "is not a relative path inside the tree"),
    # A terminal's escape in a patch's name would reach every message that names it.
    ('file = "slow.patch"', 'file = "slow\\u001b]0;owned\\u0007.patch"', "(printable: no control characters)"),
    ('[variants.calm]', '[variants."calm\\u001b[2J;x y"]', "is not a variant name (at most 64 characters: letters"),
    # Each a name check accepted and no wheel could carry: `0.5.23+calm..x.<hash>` is no PEP 440 version.
    ('[variants.calm]', '[variants."calm..x"]', "is not a variant name"),
    ('[variants.calm]', '[variants."calm-"]', "is not a variant name"),
    ('[variants.calm]', '[variants.' + "c" * 65 + ']', "is not a variant name"),
])
def test_values_that_are_no_number_and_paths_that_leave_the_tree_are_refused(tmp_path, old, new, problem):
    assert old in VALID
    problems = problems_of(write_series(tmp_path, VALID.replace(old, new)))
    assert any(problem in line for line in problems), problems
