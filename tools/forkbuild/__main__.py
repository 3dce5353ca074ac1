"""`forkbuild` and `python -m forkbuild`: a Ctrl-C while it starts exits 130 too."""

import sys


def main() -> None:
    try:
        from forkbuild.cli import run

        run()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
