"""`check`: what series.toml promises holds: every feature a variant holds has a patch;
a feature no variant holds is warned about."""

from __future__ import annotations

from pathlib import Path

from fixtures import FEATURES_TOML, VARIANTS_TOML, make_series

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


def test_a_feature_no_variant_holds_is_a_warning(tmp_path: Path, capsys) -> None:
    variants = VARIANTS_TOML.replace('features = ["guards", "alpha", "beta"]\nenv = { DSV41_ALPHA = "1" }',
                                     'features = ["guards", "beta"]')
    fx = make_series(tmp_path, variants_toml=variants)
    assert fx.cli("check") == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "features.alpha: no variant holds it" in err
