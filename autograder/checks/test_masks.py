"""Hidden checks for part masks (being written)."""
