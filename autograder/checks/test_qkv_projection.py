"""Hidden checks for part qkv_projection (being written)."""
