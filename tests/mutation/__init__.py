"""Mutation testing of the hidden checks (see run.py and docs/hidden-checks.md)."""
