"""The `forkbuild` process (the console script and `python -m forkbuild`): a Ctrl-C while it
starts ends it with 130, as one later does (cli.main)."""

import sys


def main() -> None:
    try:
        from forkbuild.cli import run

        run()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
