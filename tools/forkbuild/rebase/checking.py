"""`forkbuild check` of the rebased series: every variant applies strictly.

One call from the rebase; it runs apply's plan for each variant into a scratch
work tree and lists every failing patch of every variant.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from forkbuild.apply import apply_plan, describe_failures, plan_variant
from forkbuild.cache import UpstreamCache
from forkbuild.context import Context
from forkbuild.errors import ForkbuildError


def check_every_variant(context: Context) -> dict:
    """{"ok": bool, "detail": text}: one line (or failure list) per variant."""
    cache_git = UpstreamCache(context.cache_dir, reporter=context.reporter).git()
    lines, ok = [], True
    with tempfile.TemporaryDirectory(prefix="forkbuild-rebase-check-") as scratch:
        for name in context.series.variants:
            dest = Path(scratch) / name
            try:
                result = apply_plan(context=context, plan=plan_variant(context.series, name), dest=dest)
            except ForkbuildError as error:
                ok = False
                lines.append(f"{name}: {error.message}")
                continue
            finally:
                # Scratch trees are work trees of the cache repository: unregister them.
                cache_git.remove_worktree(dest)
            if result.failures:
                ok = False
                lines.append(describe_failures(result))
            else:
                outcomes = ", ".join(f"{record.entry.file} {record.outcome}" for record in result.records)
                lines.append(f"{name}: ok ({outcomes or 'no patches'})")
    return {"ok": ok, "detail": "\n".join(lines)}
