"""Series work trees: the apply engine and its stop/resume state."""
