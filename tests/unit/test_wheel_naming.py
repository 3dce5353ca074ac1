"""Local versions, wheel names and the two places that spell the version out."""

from __future__ import annotations

import pytest
from packaging.version import Version

from forkbuild.errors import BuildError
from forkbuild.wheel import naming


def test_local_version_names_variant_and_series_content():
    version = naming.local_version(upstream_version="0.5.23", variant="tp4", content_hash="ab12" * 16)
    assert version == "0.5.23+tp4.ab12ab12ab"
    assert Version(version).public == "0.5.23"


def test_different_series_content_gives_different_versions():
    one = naming.local_version(upstream_version="0.5.23", variant="tp4", content_hash="a" * 64)
    two = naming.local_version(upstream_version="0.5.23", variant="tp4", content_hash="b" * 64)
    assert one != two


def test_local_version_is_in_normal_form():
    # An all-digit hash prefix is a number to PEP 440: the normal form drops its
    # leading zero, and every place that spells the version uses that form.
    version = naming.local_version(upstream_version="0.5.23", variant="TP-4", content_hash="0123456789" + "f" * 54)
    assert version == str(Version(version)) == "0.5.23+tp.4.123456789"


@pytest.mark.parametrize("upstream, variant", [("0.5.23", "tp 4"), ("0.5.23+local", "tp4"), ("nope", "tp4")])
def test_bad_inputs_are_refused(upstream, variant):
    with pytest.raises(BuildError):
        naming.local_version(upstream_version=upstream, variant=variant, content_hash="a" * 64)


def test_wheel_names():
    tags = naming.wheel_tags("sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl")
    assert tags == "cp311-cp311-manylinux_2_34_x86_64"
    assert naming.wheel_filename(name="sglang", version="0.5.23+tp4.abc", tags=tags) == \
        "sglang-0.5.23+tp4.abc-cp311-cp311-manylinux_2_34_x86_64.whl"
    assert naming.dist_info_dir("Demo-Pkg", "1.0+x") == "demo_pkg-1.0+x.dist-info"
    with pytest.raises(BuildError, match="not a wheel file name"):
        naming.wheel_tags("sglang.tar.gz")


def test_metadata_version_line_only():
    metadata = b"Metadata-Version: 2.4\nName: x\nVersion: 1.0\nSummary: s\n\nVersion: 1.0 in the body\n"
    assert naming.set_metadata_version(metadata, "1.0+a", source="M") == \
        b"Metadata-Version: 2.4\nName: x\nVersion: 1.0+a\nSummary: s\n\nVersion: 1.0 in the body\n"


@pytest.mark.parametrize("metadata", [b"Name: x\n\nbody\n", b"Version: 1\nVersion: 2\n\n"])
def test_metadata_without_exactly_one_version_line_is_refused(metadata):
    with pytest.raises(BuildError, match="M: expected exactly one 'Version:'"):
        naming.set_metadata_version(metadata, "1.0+a", source="M")


def test_version_module_of_an_unknown_shape_is_refused():
    with pytest.raises(BuildError, match="pkg/_version.py"):
        naming.set_version_module(b"VERSION = '1.0'\n", "1.0+a", source="pkg/_version.py")
