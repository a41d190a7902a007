"""Hidden checks for part long_sequence (being written)."""
