"""The variant's Dockerfile lines and the compose file, generated without docker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from forkbuild.errors import BuildError
from forkbuild.image import build
from forkbuild.image import build_context as image_context
from forkbuild.image.build_context import ImageContext
from forkbuild.wheel.manifest import Manifest, parse

TEMPLATE = (Path(__file__).parents[2] / "docker" / "Dockerfile").read_text()


def manifest(variant: str = "tp4", **overrides) -> dict:
    """A manifest's JSON object (what a wheel carries and the in-image code reads)."""
    base = {
        "schema": 1, "series": "dsv41", "variant": variant, "version": f"0.5.23+{variant}.0123456789",
        "series_hash": "ab" * 32,
        "upstream": {"name": "sglang", "version": "0.5.23", "source": "wheel", "wheel": "w.whl", "sha256": "00",
                     "git_url": "", "commit": ""},
        "features": ["guards", "draft_tau"],
        "guards": [{"env": "DSV41_DRAFT_TAU", "feature": "draft_tau", "type": "float", "default": "1.0"}],
        "series_guards": [{"env": "DSV41_DRAFT_TAU", "feature": "draft_tau", "type": "float", "default": "1.0"}],
        "runtime_settings": ["MODEL_PATH", "TP_SIZE"],
        "env_defaults": {"MODEL_PATH": "/models/M", "TP_SIZE": "4", "DSV41_DRAFT_TAU": "1"},
        "patches": [],
    }
    return {**base, **overrides}


def typed(variant: str = "tp4", **overrides) -> Manifest:
    """The same manifest as forkbuild reads it back from a wheel."""
    return parse(json.dumps(manifest(variant, **overrides)), source="test")


def test_variant_lines_carry_env_labels_and_the_check():
    tail = image_context.variant_lines(typed(), source="w.whl")
    assert 'ENV MODEL_PATH="/models/M" \\\n    TP_SIZE="4" \\\n    DSV41_DRAFT_TAU="1"' in tail
    assert 'io.forkbuild.series-hash="' + "ab" * 32 + '"' in tail
    assert 'io.forkbuild.features="guards,draft_tau"' in tail
    assert 'io.forkbuild.upstream.version="0.5.23"' in tail
    assert 'org.opencontainers.image.version="0.5.23+tp4.0123456789"' in tail
    assert tail.rstrip().endswith("check --variant tp4 --version 0.5.23+tp4.0123456789 --env-defaults ${FORKBUILD_TEST_BASE:+--test-base}")


def test_template_has_both_modes_and_the_official_default_base():
    assert "ARG BASE_IMAGE=lmsysorg/sglang:v0.5.23-cu130" in TEMPLATE
    for stage in ("AS wheel", "AS delta-plan", "AS delta", "FROM ${MODE} AS image"):
        assert stage in TEMPLATE
    assert build.official_base("0.5.23") == "lmsysorg/sglang:v0.5.23-cu130"


def test_stock_variant_without_env_writes_no_empty_env():
    text = image_context.variant_lines(typed("stock", features=[], guards=[], env_defaults={}), source="w.whl")
    assert "ENV" not in text and "LABEL" in text


@pytest.mark.parametrize(("value", "quoted"), [("b12x", '"b12x"'), ('a"b', '"a\\"b"'), ("$HOME", '"\\$HOME"'),
                                               ("a\\b", '"a\\\\b"'), ("", '""')])
def test_quote_escapes_what_dockerfiles_interpret(value, quoted):
    assert image_context.quote(value, where="x") == quoted


def test_line_break_in_a_value_is_an_error_naming_it():
    bad = typed(env_defaults={"EXTRA": "a\nb"})
    with pytest.raises(BuildError, match="w.whl: env_defaults EXTRA: a Dockerfile value cannot contain a line break"):
        image_context.variant_lines(bad, source="w.whl")


def test_build_args(tmp_path):
    context = ImageContext(path=tmp_path, manifest=typed(), platform="linux/amd64")
    assert build.build_args(context, mode="delta", base="B") == {
        "BASE_IMAGE": "B", "MODE": "delta", "SGLANG_VERSION": "0.5.23+tp4.0123456789", "UPSTREAM_VERSION": "0.5.23"}
    assert build.build_args(context, mode="wheel", base="forkbuild-base/sglang:x")["FORKBUILD_TEST_BASE"] == "1"


def test_compose_has_one_service_per_variant_platform_and_mode(tmp_path):
    contexts = [ImageContext(path=tmp_path / "build" / "image" / f"{v}-{arch}", manifest=typed(v),
                             platform=f"linux/{arch}") for v, arch in (("tp4", "arm64"), ("tp3", "amd64"))]
    bases = {(mode, f"linux/{arch}"): f"{mode[0].upper()}-{arch}" for mode in ("wheel", "delta")
             for arch in ("arm64", "amd64")}
    text = build.compose_file(contexts, modes=["wheel", "delta"], bases=bases,
                              relative_to=tmp_path / "build", header="generated\n\nline")
    assert [line for line in text.splitlines() if line.startswith("  \"")] == [
        '  "tp4-wheel-arm64":', '  "tp4-delta-arm64":', '  "tp3-wheel-amd64":', '  "tp3-delta-amd64":']
    assert text.startswith("# generated\n#\n# line\nservices:\n")
    assert '"BASE_IMAGE": "${FORKBUILD_BASE_IMAGE:-W-arm64}"' in text.split('  "tp4-delta-arm64"')[0]
    block = text.split('  "tp3-delta-amd64":\n', 1)[1]
    assert block.splitlines()[:11] == [
        '    image: "forkbuild/sglang:tp3-delta-amd64"',
        '    platform: "linux/amd64"',
        "    build:",
        '      context: "image/tp3-amd64"',
        '      target: "image"',
        '      network: "none"',
        "      args:",
        '        "BASE_IMAGE": "${FORKBUILD_DELTA_BASE_IMAGE:-D-amd64}"',
        '        "MODE": "delta"',
        '        "SGLANG_VERSION": "0.5.23+tp3.0123456789"',
        '        "UPSTREAM_VERSION": "0.5.23"',
    ]
