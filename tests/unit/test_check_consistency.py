"""`check`: what series.toml promises holds: every feature a variant holds has a patch;
a feature no variant holds is warned about."""

from __future__ import annotations

from pathlib import Path

from fixtures import FEATURES_TOML, VARIANTS_TOML, commit_all, edit, make_series
from forkbuild.io.git import Git

EXTRA_FEATURE = '''
[features.gamma]
description = "declared, never implemented"
requires = ["guards"]
'''


def test_a_variant_holding_a_feature_no_patch_implements_fails(tmp_path: Path, capsys) -> None:
    fx = make_series(tmp_path, features_toml=FEATURES_TOML + EXTRA_FEATURE,
                     variants_toml=VARIANTS_TOML.replace('features = ["guards", "beta"]',
                                                         'features = ["guards", "beta", "gamma"]'))
    assert fx.cli("check") == 2
    err = capsys.readouterr().err
    assert "variants.lite: holds feature 'gamma', but no patch of series.toml implements it" in " ".join(err.split())
    # The hint, followed (a series the `new` of before `ported = false` left): a patch of it, exported.
    assert "a commit with a `Feature:` trailer naming it in the series tree, then `forkbuild export`" in " ".join(err.split())
    tree = fx.root / ".forkbuild-work" / "series"
    assert fx.cli("apply", "--all") == 0
    edit(tree, "python/pkg/util.py", "def limit(", "def limited(")
    commit_all(Git(tree), "util: rename\n\nFeature: gamma\nForwarded: no\n")
    assert fx.cli("export") == 0
    assert fx.cli("check") == 0


def test_a_feature_no_variant_holds_is_a_warning(tmp_path: Path, capsys) -> None:
    variants = VARIANTS_TOML.replace('features = ["guards", "alpha", "beta"]\nenv = { DSV41_ALPHA = "1" }',
                                     'features = ["guards", "beta"]')
    fx = make_series(tmp_path, variants_toml=variants)
    assert fx.cli("check") == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "features.alpha: no variant holds it" in err
