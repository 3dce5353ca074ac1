"""`forkbuild rebase`: the series moved onto another upstream, resumably (engine.py ties the modules together)."""
