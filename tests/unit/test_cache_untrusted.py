"""The cache is untrusted input (a CI cache restored from another run, a shared directory):
what decides safety is computed on every run, never read back from it."""

from __future__ import annotations

import json
from pathlib import Path

from fixtures import SeriesFixture
from forkbuild import patchfile
from forkbuild.errors import ConfigError, UnsafePatchError

EVIL = ("From 1111111111111111111111111111111111111111 Mon Sep 17 00:00:00 2001\n"
        "From: Someone <someone@example.com>\nDate: Tue, 14 Nov 2023 22:13:20 +0000\n"
        "Subject: [PATCH] a link out of the tree\n\nFeature: beta\n---\n"
        "diff --git a/python/pkg/evil b/python/pkg/evil\nnew file mode 120000\nindex 0000000..1b4ba8e\n"
        "--- /dev/null\n+++ b/python/pkg/evil\n@@ -0,0 +1 @@\n+/etc\n\\ No newline at end of file\n")


def add_patch(fx: SeriesFixture, name: str) -> Path:
    with fx.series_toml.open("a") as out:
        out.write(f'\n[[patches]]\nfile = "{name}"\nfeature = "beta"\n')
    return fx.patches_dir / name


def cache_records(cache: Path) -> list[Path]:
    """Every JSON file forkbuild keeps in the cache (git's own objects and the wheels aside)."""
    found = []
    for path in cache.rglob("*"):
        if path.is_file() and "objects" not in path.parts and path.suffix != ".whl":
            try:
                json.loads(path.read_bytes())
            except ValueError:
                continue
            found.append(path)
    return found


def forget_in_process_results() -> None:
    """What this process computed (cli runs in-process here): a new command computes again."""
    patchfile._parsed.cache_clear()
    patchfile._text_problems.cache_clear()


def test_a_cache_record_rewritten_to_no_problems_never_lets_an_unsafe_patch_through(series_fx: SeriesFixture) -> None:
    add_patch(series_fx, "evil.patch").write_text(EVIL)
    assert series_fx.cli("check") == UnsafePatchError.return_code
    for record in cache_records(series_fx.cache):
        if '"problems"' in record.read_text(errors="replace"):
            record.write_text(json.dumps({"problems": []}))
    forget_in_process_results()
    assert series_fx.cli("check") == UnsafePatchError.return_code
    assert series_fx.cli("apply", "--all") == UnsafePatchError.return_code
    assert not (series_fx.root / ".forkbuild-work" / "series" / "python" / "pkg" / "evil").is_symlink()


def test_a_patch_file_that_is_a_symlink_is_refused_and_its_target_never_copied(series_fx: SeriesFixture,
                                                                              tmp_path: Path, capsys) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text(EVIL.replace("a link out of the tree", "TOP-SECRET-VALUE").replace("120000", "100644"))
    add_patch(series_fx, "linked.patch").symlink_to(secret)
    assert series_fx.cli("check") == ConfigError.return_code
    assert "patches/linked.patch is a symbolic link" in " ".join(capsys.readouterr().err.split())
    assert series_fx.cli("apply", "--all") == ConfigError.return_code
    assert not [path for path in series_fx.cache.rglob("*") if path.is_file() and "objects" not in path.parts
                and b"TOP-SECRET-VALUE" in path.read_bytes()]
