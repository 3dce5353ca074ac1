"""The chaos test's hook: `FORKBUILD_CHAOS_KILL_AT=<step>` makes forkbuild die at that
step like kill -9 (no cleanup handlers, no flush), to prove a re-run recovers.

Steps: series:* (series_writer), apply:*, import:*, wheel:*, and the rebase
journal's steps ("rebase:" + a rebase/state.py Step's name, e.g. rebase:applying:a.patch)."""

from __future__ import annotations

import os
import signal

CHAOS_ENV = "FORKBUILD_CHAOS_KILL_AT"


def chaos_point(step: str) -> None:
    """Die here when the chaos test asks for `step`; free otherwise (one dict lookup)."""
    if os.environ.get(CHAOS_ENV) == step:
        os.kill(os.getpid(), signal.SIGKILL)
