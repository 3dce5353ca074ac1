"""patchfile helpers shared by apply and rebase."""

from __future__ import annotations

from forkbuild.series.patchfile import _message, parse_trailers, strip_prefix


def test_strip_prefix() -> None:
    assert strip_prefix("a/x/y.py") == "x/y.py" and strip_prefix("b/y.py") == "y.py" and strip_prefix("y.py") == "y.py"


def test_a_message_ends_at_a_diffstat_not_at_its_own_dashes_line() -> None:
    assert _message("Body.\n---\nafter\n\nFeature: a\n\n") == "Body.\n---\nafter\n\nFeature: a"
    assert _message("Body.\n\nFeature: a\n---\n core.py | 2 +-\n 1 file changed, 1 insertion(+)\n\n") == \
        "Body.\n\nFeature: a"
    assert parse_trailers("s\n\nBody.\n---\nFeature: a\nGuard: B") == (("Feature", "a"), ("Guard", "B"))
