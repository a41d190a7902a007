"""Hidden checks for part module (being written)."""
