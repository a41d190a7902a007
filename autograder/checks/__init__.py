"""The hidden checks, one folder per assignment (autograder/spec.py names it), and what they share."""
