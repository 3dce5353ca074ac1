"""One switch rule: forkbuild's validation of variant env values (forkbuild.series.guards):
the issue's table, garbage refused, and series.toml's variant env checked by it.
That the patched sglang's EnvSwitch reads every value the same way:
tests/integration/test_guards_rule_sglang.py (it needs the pinned wheel).
"""

from __future__ import annotations

import textwrap

import pytest

from fixtures import make_series
from forkbuild.errors import ConfigError
from forkbuild.series.guards import check_value, parse_switch


@pytest.mark.parametrize("value, expected", [("0", False), ("1", True), ("off", False), ("on", True),
                                             ("false", False), ("true", True), ("", False)])
def test_issue_table(value, expected):
    assert parse_switch(value) is expected
    check_value("switch", value)


@pytest.mark.parametrize("value", ["garbage", "2", "enabled"])
def test_garbage_is_an_error(value):
    with pytest.raises(ValueError, match="not a switch value"):
        check_value("switch", value)


def _with_alpha_env(fx, value: str) -> None:
    text = fx.series_toml.read_text()
    fx.series_toml.write_text(text.replace('env = { DSV41_ALPHA = "1" }', f'env = {{ DSV41_ALPHA = "{value}" }}'))


@pytest.mark.parametrize("value", ["0", "1", "off", "on", "false", "true", ""])
def test_series_toml_accepts_every_switch_spelling(tmp_path, value):
    fx = make_series(tmp_path)
    _with_alpha_env(fx, value)
    assert fx.load().variant("full").env["DSV41_ALPHA"] == value


def test_series_toml_rejects_garbage_naming_the_key(tmp_path):
    fx = make_series(tmp_path)
    _with_alpha_env(fx, "maybe")
    with pytest.raises(ConfigError) as caught:
        fx.load()
    assert "variants.full.env.DSV41_ALPHA" in str(caught.value)
    assert "'maybe' is not a switch value" in textwrap.dedent(str(caught.value))
