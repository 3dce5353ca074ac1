"""A feature left without a patch (rebase, drop, export --drop) is marked `ported = false`
(series_edit.unported): series.toml's validation understands the marker."""

from __future__ import annotations

from pathlib import Path

import pytest

from fixtures import make_series
from forkbuild.errors import ConfigError
from forkbuild.series.config import parse_series


def test_a_variant_holding_an_unported_feature_or_a_patch_of_one_is_refused(tmp_path: Path) -> None:
    fx = make_series(tmp_path)
    text = (fx.root / "series.toml").read_text().replace(
        'guards = [{ env = "DSV41_ALPHA"', 'ported = false\nguards = [{ env = "DSV41_ALPHA"')
    with pytest.raises(ConfigError) as raised:
        parse_series(text, path=fx.root / "series.toml")
    problems = "\n".join(raised.value.problems)
    assert "variants.full.features" in problems and "alpha is marked `ported = false`" in problems
    assert "feature 'alpha' is marked `ported = false`: remove the marker" in problems  # it still has a patch
