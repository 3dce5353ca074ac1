"""patchfile helpers shared by apply and rebase."""

from __future__ import annotations

from forkbuild.patchfile import hunk_offsets, strip_prefix

MAIL = """From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
From: A <a@example.com>
Date: Tue, 14 Nov 2023 22:13:20 +0000
Subject: core: change

Body.

Feature: alpha
---
"""


def diff(*starts: int) -> str:
    hunks = "".join(f"@@ -{start},1 +{start},1 @@\n-old {start}\n+new {start}\n" for start in starts)
    return ("diff --git a/python/pkg/core.py b/python/pkg/core.py\nindex 1111111..2222222 100644\n"
            "--- a/python/pkg/core.py\n+++ b/python/pkg/core.py\n" + hunks)


def test_hunks_that_landed_elsewhere_are_named_with_the_shift() -> None:
    assert hunk_offsets(MAIL + diff(5, 40), diff(8, 40)) == ["python/pkg/core.py hunk 1: +3 lines"]
    assert hunk_offsets(MAIL + diff(5, 40), diff(5, 38)) == ["python/pkg/core.py hunk 2: -2 lines"]


def test_an_exact_apply_has_no_offsets_and_a_bare_diff_works_too() -> None:
    assert hunk_offsets(MAIL + diff(5), diff(5)) == []
    assert hunk_offsets(diff(5), diff(6)) == ["python/pkg/core.py hunk 1: +1 lines"]


def test_strip_prefix() -> None:
    assert strip_prefix("a/x/y.py") == "x/y.py" and strip_prefix("b/y.py") == "y.py" and strip_prefix("y.py") == "y.py"
