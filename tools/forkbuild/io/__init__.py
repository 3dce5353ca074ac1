"""forkbuild's ways to the outside: processes, git, files, state records, the child group, chaos points."""
