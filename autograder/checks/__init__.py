"""The hidden checks, one folder per assignment (autograder/foundation/spec.py names it), and what they share."""
