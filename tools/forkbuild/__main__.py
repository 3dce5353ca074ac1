from forkbuild.entry import run

run()
