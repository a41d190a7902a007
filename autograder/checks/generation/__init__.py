"""Hidden checks of the assignment generation: test_<part id>.py per part, and their shared inputs (common.py)."""
