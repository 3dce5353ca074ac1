"""`forkbuild test-patch`: prove a variant. Structure checks on the applied
tree (no torch), then the behaviour tests of tests/patches against the
variant's installed wheel, summarised per feature and check.
"""
