"""The `forkbuild` process's entry (the console script and `python -m forkbuild`): the
garbage collector is paused before anything else is imported (startup.py), then cli.run."""

from forkbuild import startup

startup.pause()

from forkbuild.cli import run  # noqa: E402  (after the pause: this import is most of start-up)

__all__ = ["run"]
