"""Hunk-revert mutation testing of the patch series (`forkbuild mutate`)."""
