"""status and check stay linear in the number of patches: after a patch that needs a slower rung,
the fast rung goes on in groups (halving to find it), not one git run per patch after it; status
reads each variant's features once, not once per patch."""

from __future__ import annotations

import math

import pytest

from fixtures import DEFAULT_PATCHES, PatchSpec, make_series
from forkbuild.io.git import Git
from forkbuild.series.config import Series

MANY = 64


@pytest.fixture(scope="module")
def many(tmp_path_factory):
    # lite = guards + beta: beta-limit.patch needs the 3-way rung there (alpha's lines are missing), then 64 more
    specs = (*DEFAULT_PATCHES, *(PatchSpec(file=f"many-{number:03d}.patch", feature="beta", subject=f"add m{number}",
                                           body="One more file.", edits=((f"python/pkg/m{number}.py", "", f"X = {number}\n"),))
                                 for number in range(MANY)))
    return make_series(tmp_path_factory.mktemp("many"), specs=specs)


def test_check_after_a_three_way_patch_takes_the_rest_in_groups(many, monkeypatch) -> None:
    runs = []
    original = Git.apply_to_index

    def counted(self, patch, **kwargs):
        runs.append(patch)
        return original(self, patch, **kwargs)

    monkeypatch.setattr(Git, "apply_to_index", counted)
    assert many.cli("check") == 0
    # 4 variants (the whole series, full, lite, stock); lite's beta-limit.patch takes the 3-way rung. One git run per
    # patch after it would be 64 and more; halving finds it in about log2 of the group.
    assert len(runs) <= 4 + 3 * (math.ceil(math.log2(MANY + 3)) + 3), len(runs)


def test_status_reads_each_variants_features_once(many, monkeypatch, capsys) -> None:
    calls = []
    original = Series.patches_for

    def counted(self, name):
        calls.append(name)
        return original(self, name)

    monkeypatch.setattr(Series, "patches_for", counted)
    assert many.cli("status", "--json") == 0
    assert '"many-063.patch"' in capsys.readouterr().out
    assert len(calls) <= len(many.load().variants), len(calls)
