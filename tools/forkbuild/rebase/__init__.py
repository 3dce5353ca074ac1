"""`forkbuild rebase`: move the series onto a new upstream, resumably.

state (the typed state, its phases and steps, its JSON form), journal (the state
on disk, backup, kill hook), target (the new pin), the apply
engine (forkbuild.worktree.engine: upstreamed? exact, offset, 3-way from the old
series' commits, conflict), collision (the upstream change a stop collided with), upstreamed (evidence),
pin (series.toml's [upstream] via tomlkit), report (markdown + JSON), checking
(every variant applies), engine (the state machine tying them together).
"""
