"""`forkbuild rebase`: move the series onto a new upstream, resumably.

journal (state on disk, backup, kill hook), target (the new pin), ladder (one
patch: upstreamed? exact, offset, 3-way, conflict), upstreamed (evidence),
pin (series.toml's [upstream] via tomlkit), report (markdown + JSON), checking
(every variant applies), engine (the state machine tying them together).
"""
