"""`python -m forkbuild` and the `forkbuild` console script."""

import sys


def main() -> None:
    try:
        from forkbuild.cli import run  # most of start-up: a Ctrl-C here ends with 130, no traceback
    except KeyboardInterrupt:
        sys.exit(130)
    run()


if __name__ == "__main__":
    main()
