"""The chaos test's hook: `FORKBUILD_CHAOS_KILL_AT=<step>` kills forkbuild at that step like
kill -9 (FORKBUILD_CHAOS_SIGNAL=INT: a Ctrl-C; TERM, HUP: a service stopped, a terminal closed), to prove a re-run recovers. Steps: start,
series:*, apply:*, import:*, wheel:*, rebase:<the step its journal records>."""

from __future__ import annotations

import os
import signal

CHAOS_ENV = "FORKBUILD_CHAOS_KILL_AT"
SIGNAL_ENV = "FORKBUILD_CHAOS_SIGNAL"


def chaos_point(step: str) -> None:
    """Die (or be interrupted) here when the chaos test asks for `step`; free otherwise."""
    if os.environ.get(CHAOS_ENV) == step:
        name = os.environ.get(SIGNAL_ENV, "KILL")
        os.kill(os.getpid(), getattr(signal, f"SIG{name}") if name in ("INT", "TERM", "HUP") else signal.SIGKILL)
