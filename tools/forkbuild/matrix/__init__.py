"""Feature combinations: covering matrices of Combinations (forkbuild.combination;
strategies.py, formats.py) and delta debugging to the smallest failing set (bisect.py)."""
