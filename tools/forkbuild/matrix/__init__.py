"""Feature combinations: any set of features resolved once into a Combination
(combination.py), the covering matrices of them (strategies.py, formats.py), and
delta debugging to the smallest failing set (bisect.py)."""
