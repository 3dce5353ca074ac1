"""Real-world quilt series (Debian packages with large debian/patches, see
quilt_corpus.py): for each, `forkbuild import --quilt` then `apply --all` makes
exactly the tree `dpkg-source -x` makes (empty directories included), the tree
import checks out is that tree too, and `export --check` is clean right after.

Offline once fetched (`python tests/integration/quilt_corpus.py fetch`); skipped
with the reason when the corpus or dpkg-source is absent. About a minute per
package on 2 cores: not in the default run (`-m quilt_corpus` runs it).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from quilt_corpus import Unusable, missing_tools, packages, run_package

pytestmark = [pytest.mark.integration, pytest.mark.quilt_corpus,
              pytest.mark.skipif(bool(missing_tools()), reason=missing_tools() or "corpus present")]


@pytest.fixture(autouse=True)
def only_when_asked(request: pytest.FixtureRequest) -> None:
    if "quilt_corpus" not in (request.config.option.markexpr or ""):
        pytest.skip("the quilt corpus takes about a minute per package: run it with -m quilt_corpus")


@pytest.mark.parametrize("package", packages(), ids=lambda package: package.name)
def test_import_apply_export_reproduce_dpkg_source(package, tmp_path: Path) -> None:
    try:
        outcome = run_package(package, tmp_path)
    except Unusable as error:
        pytest.skip(f"{package.name}: {error}")
    assert outcome.imported, outcome.detail
    assert outcome.imported_tree_identical, f"{package.name}: import's tree differs from dpkg-source -x"
    assert outcome.identical, f"{package.name}: apply --all differs from dpkg-source -x\n{outcome.detail}"
    assert outcome.export_clean, f"{package.name}: export --check after import\n{outcome.detail}"
