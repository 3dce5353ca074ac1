from forkbuild.cli import run

run()
