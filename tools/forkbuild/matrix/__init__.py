"""Feature combinations: the matrix strategies, and bisect (delta debugging over features)."""
