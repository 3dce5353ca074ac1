"""The pinned upstream: the cache of imported releases and sha256-pinned wheels, and the package index."""
