"""Grading: one submission's pipeline, from its hidden checks to its part scores (and the GPU stage).

May import autograder.sandbox, autograder.foundation and autograder.worker; never autograder.commands.
"""
