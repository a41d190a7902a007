"""Hidden checks for part official_parity (being written)."""
