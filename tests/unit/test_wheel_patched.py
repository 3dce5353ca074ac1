"""The fast paths a matrix of wheels takes: the changed files from `git apply
--cached --3way` on a private index must be exactly what the strict work-tree
apply (`git am -3`) gives; validation against a verified source must still
catch a wrong hash in anything not copied from it."""

from __future__ import annotations

import itertools
import subprocess
import sys
import zipfile

import pytest

from forkbuild.applier import scratch_tree
from forkbuild.console import Reporter
from forkbuild.context import Context
from forkbuild.errors import ApplyError, BuildError
from forkbuild.io.git import Git
from forkbuild.series.combination import from_features, of_variant
from forkbuild.upstream.cache import sha256_of
from forkbuild.wheel.builder import WheelRequest, build_wheels
from forkbuild.wheel.plan import WheelLayout, collect_changes, patched_changes
from forkbuild.wheel.validate import RECORD_CHECKED, PinnedWheel, validate_wheel
from wheelkit import wheel_series


def test_index_apply_equals_the_work_tree_apply_for_every_combination(series_fx):
    context = series_fx.context()
    layout = WheelLayout(package_root="python", members=frozenset({"pkg/__init__.py", "pkg/environ.py",
                                                                    "pkg/core.py", "pkg/util.py"}))
    names = list(context.series.features)
    for size in range(1, len(names) + 1):
        for chosen in itertools.combinations(names, size):
            combination = from_features(context.series, chosen)
            fast = patched_changes(context=context, combination=combination, layout=layout)
            with scratch_tree(context=context, variant=combination, strict=True) as result:
                changed = Git(result.dest).changed_files(result.base_commit, result.head_commit)
                strict = collect_changes(tree=result.dest, changed=changed, layout=layout)
            assert fast == strict, combination.features
    # `beta` without `alpha` (variant lite) needs the 3-way merge with the series' blobs: covered above.
    assert any(set(c) == {"guards", "beta"} for size in range(3) for c in itertools.combinations(names, size))


def test_a_patch_that_does_not_apply_falls_back_to_the_strict_apply(series_fx):
    context = series_fx.context()
    patch = context.series.patches_dir / "alpha-scale.patch"
    patch.write_text(patch.read_text().replace("return value * 2", "return value * 7"))
    layout = WheelLayout(package_root="python", members=frozenset({"pkg/core.py"}))
    every = from_features(context.series, ["alpha", "beta"])  # the whole series: no series blobs needed first
    assert patched_changes(context=context, combination=every, layout=layout) is None
    with pytest.raises(ApplyError, match="alpha-scale.patch"):  # what the builder then runs, and reports
        with scratch_tree(context=context, variant=every, strict=True):
            pass


@pytest.fixture
def built(tmp_path):
    series_dir, cache, upstream = wheel_series(tmp_path)
    context = Context.create(series_dir=series_dir, cache_dir=cache, reporter=Reporter())
    (wheel,) = build_wheels(context=context, request=WheelRequest(variant=of_variant(context.series, "full"), out_dir=tmp_path / "out"))
    return wheel.path, upstream


def _pinned(path):
    """`path` as the upstream cache hands a release wheel over: hashed."""
    return PinnedWheel(path=path, sha256=sha256_of(path))


def _rewrite(wheel, tmp_path, change):
    """A copy of `wheel` with `change(name, data) -> data` applied to every member (RECORD unchanged)."""
    target = tmp_path / "bad" / wheel.name
    target.parent.mkdir()
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as out:
        for info in source.infolist():
            out.writestr(info, change(info.filename, source.read(info)))
    return target


def test_validation_against_the_source_still_checks_the_patched_members(built, tmp_path):
    wheel, upstream = built
    validate_wheel(wheel, verified_source=_pinned(upstream))
    bad = _rewrite(wheel, tmp_path, lambda name, data: data + b"# x\n" if name == "demo/core.py" else data)
    with pytest.raises(BuildError, match="demo/core.py didn't match RECORD"):
        validate_wheel(bad, verified_source=_pinned(upstream))


def test_validation_against_the_source_still_checks_copied_members_that_changed(built, tmp_path):
    wheel, upstream = built
    # tool.sh is copied from upstream; changed here, its bytes are no longer the source's: hashed, and caught.
    bad = _rewrite(wheel, tmp_path, lambda name, data: b"#!/bin/sh\necho bye\n" if name == "demo/tool.sh" else data)
    with pytest.raises(BuildError, match="demo/tool.sh didn't match RECORD"):
        validate_wheel(bad, verified_source=_pinned(upstream))


def test_a_member_missing_from_record_is_reported(built, tmp_path):
    wheel, upstream = built
    target = tmp_path / "extra" / wheel.name
    target.parent.mkdir()
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(target, "w") as out:
        for info in source.infolist():
            out.writestr(info, source.read(info))
        out.writestr("demo/smuggled.py", b"X = 1\n")
    with pytest.raises(BuildError, match="smuggled.py is not mentioned in RECORD"):
        validate_wheel(target, verified_source=_pinned(upstream))


def test_a_combination_is_patched_by_the_engine_in_the_cache_without_a_work_tree(series_fx, monkeypatch):
    context = series_fx.context()
    layout = WheelLayout(package_root="python", members=frozenset({"pkg/core.py", "pkg/util.py", "pkg/environ.py"}))
    monkeypatch.setattr(Git, "add_worktree", lambda *args, **kwargs: pytest.fail("a work tree was made"))
    for features in (["alpha", "beta"], ["guards", "beta"]):  # lite: beta merges its commit of the whole series
        assert patched_changes(context=context, combination=from_features(context.series, features), layout=layout)


def test_a_matrix_in_one_process_builds_each_combination_as_its_own_build_wheel_does(tmp_path):
    # In one process the combinations share trees, the release wheel, its RECORD rows and
    # deflated files; a `build-wheel --features` process of its own shares nothing. Same bytes.
    series_dir, cache, _ = wheel_series(tmp_path)
    context = Context.create(series_dir=series_dir, cache_dir=cache, reporter=Reporter())
    names = list(context.series.features)
    chosen = [from_features(context.series, subset) for size in range(len(names) + 1)
              for subset in itertools.combinations(names, size)]
    for combination in chosen:
        build_wheels(context=context, request=WheelRequest(variant=combination, out_dir=tmp_path / "matrix"))
    for combination in chosen:
        subprocess.run([sys.executable, "-m", "forkbuild", "-C", str(series_dir), "--cache", str(cache),
                        "build-wheel", "--features", ",".join(combination.features), "--out", str(tmp_path / "alone")],
                       check=True, capture_output=True)
    matrix, alone = sorted((tmp_path / "matrix").glob("*.whl")), sorted((tmp_path / "alone").glob("*.whl"))
    assert len(matrix) == len({combination.name for combination in chosen}) == 3  # stock, base alone, full
    assert [path.name for path in matrix] == [path.name for path in alone]
    assert [path.read_bytes() for path in matrix] == [path.read_bytes() for path in alone]


def test_validation_against_the_source_catches_a_copied_members_record_row_that_changed(built, tmp_path):
    wheel, upstream = built
    # demo/tool.sh keeps the source's bytes, but its RECORD row now names another hash (a valid one).
    def change(name, data):
        if not name.endswith("/RECORD"):
            return data
        lines = [line if not line.startswith("demo/tool.sh,") else "demo/tool.sh,sha256=" + "A" * 43 + ","
                 + line.rsplit(",", 1)[1] for line in data.decode().splitlines()]
        return ("\n".join(lines) + "\n").encode()
    bad = _rewrite(wheel, tmp_path, change)
    with pytest.raises(BuildError, match="demo/tool.sh didn't match RECORD"):
        validate_wheel(bad, verified_source=_pinned(upstream))


def test_a_release_wheel_is_validated_in_full_once_and_its_sha256_marked_beside_it(built):
    wheel, upstream = built
    source = _pinned(upstream)
    marker = upstream.with_name(upstream.name + RECORD_CHECKED)
    marker.unlink(missing_ok=True)
    validate_wheel(wheel, verified_source=source)
    assert marker.read_text() == f"{source.sha256}\n"


def test_a_release_wheel_whose_record_is_wrong_is_refused_and_never_marked(built, tmp_path):
    wheel, upstream = built
    source = _pinned(_rewrite(upstream, tmp_path, lambda name, data: data + b"# x\n" if name == "demo/tool.sh" else data))
    marker = source.path.with_name(source.path.name + RECORD_CHECKED)
    with pytest.raises(BuildError, match="the wheel the overlay starts from"):
        validate_wheel(wheel, verified_source=source)
    assert not marker.exists()
    # A mark naming other bytes (the wheel changed since it was validated) proves nothing: in full again.
    for damaged in (("0" * 64 + "\n").encode(), b"\xff\xfe"):  # other bytes; not even text
        marker.write_bytes(damaged)
        with pytest.raises(BuildError, match="demo/tool.sh didn't match RECORD"):
            validate_wheel(wheel, verified_source=source)
