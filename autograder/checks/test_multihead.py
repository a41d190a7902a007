"""Hidden checks for part multihead (being written)."""
