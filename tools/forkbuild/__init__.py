"""forkbuild: a fork of a fast-moving upstream kept as a reviewable patch series."""

__version__ = "0.1.0"
