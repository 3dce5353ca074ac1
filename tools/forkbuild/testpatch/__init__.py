"""`forkbuild test-patch`: structure checks, behaviour tests and the stock proof of a variant."""
