"""`forkbuild rebase`: the series moved onto another upstream, resumably (phases.py ties the modules together)."""
